/*
 * test_redlock.c - the arithmetic of a Redlock round (broker/store/
 * redlock_vote.h): quorum, drift, validity, the tally of answers, and the
 * fence that stays above every fence a quorum wrote before.
 */
#include <criterion/criterion.h>

#include "broker/store/redlock_vote.h"

Test(redlock, quorum_is_a_strict_majority)
{
	cr_assert_eq(redlock_quorum(1), 1);
	cr_assert_eq(redlock_quorum(3), 2);
	cr_assert_eq(redlock_quorum(5), 3);
	cr_assert_eq(redlock_quorum(7), 4);
	cr_assert_eq(redlock_quorum(4), 3); /* an even N needs more than half too */
}

Test(redlock, drift_and_validity_as_the_redis_documentation_says)
{
	cr_assert_eq(redlock_drift_ms(10000), 102);
	cr_assert_eq(redlock_drift_ms(50), 2);
	cr_assert_eq(redlock_drift_ms(0), 2);
	cr_assert_eq(redlock_validity_ms(10000, 0), 9898);
	cr_assert_eq(redlock_validity_ms(10000, 898), 9000);
	cr_assert_eq(redlock_validity_ms(10000, 9898), 0);
	cr_assert_eq(redlock_validity_ms(10000, 20000), 0); /* never negative */
	cr_assert_eq(redlock_validity_ms(1, 0), 0);
}

Test(redlock, a_quorum_within_the_validity_wins)
{
	redlock_vote_t v;
	int64_t left = -1;

	redlock_vote_begin(&v, 3, 10000, 1000);
	cr_assert_eq(redlock_vote_outcome(&v, 1000, &left), RL_OPEN);
	cr_assert_eq(left, 0);
	redlock_vote_set(&v, 0, RL_GRANTED, 10000, 5);
	cr_assert_eq(redlock_vote_outcome(&v, 1001, NULL), RL_OPEN);
	redlock_vote_set(&v, 2, RL_GRANTED, 10000, 7);
	cr_assert_eq(redlock_vote_outcome(&v, 1010, &left), RL_WON);
	cr_assert_eq(left, 10000 - 10 - 102);
}

Test(redlock, the_validity_is_the_quorum_th_longest_grant)
{
	redlock_vote_t v;
	int64_t left;

	/* N = 5, quorum 3: grants of 10 s, 4 s (a max_hold cap) and 8 s hold
	 * on a majority until the third longest, 4 s, runs out. */
	redlock_vote_begin(&v, 5, 10000, 0);
	redlock_vote_set(&v, 0, RL_GRANTED, 10000, 1);
	redlock_vote_set(&v, 1, RL_GRANTED, 4000, 1);
	redlock_vote_set(&v, 3, RL_GRANTED, 8000, 1);
	cr_assert_eq(redlock_vote_outcome(&v, 0, &left), RL_WON);
	cr_assert_eq(left, 4000 - 42);
	/* A fourth grant of 9 s: then 8 s is the third longest. */
	redlock_vote_set(&v, 4, RL_GRANTED, 9000, 1);
	cr_assert_eq(redlock_vote_outcome(&v, 0, &left), RL_WON);
	cr_assert_eq(left, 8000 - 82);
}

Test(redlock, lost_once_a_quorum_cannot_come)
{
	redlock_vote_t v;

	redlock_vote_begin(&v, 3, 10000, 0);
	redlock_vote_set(&v, 0, RL_REFUSED, 0, 3);
	cr_assert_eq(redlock_vote_outcome(&v, 1, NULL), RL_OPEN); /* two may still grant */
	redlock_vote_set(&v, 1, RL_FAILED, 0, -1);
	cr_assert_eq(redlock_vote_outcome(&v, 1, NULL), RL_LOST); /* one pending, quorum 2 */

	redlock_vote_begin(&v, 5, 10000, 0);
	redlock_vote_set(&v, 0, RL_GRANTED, 10000, 1);
	redlock_vote_set(&v, 1, RL_GRANTED, 10000, 1);
	redlock_vote_set(&v, 2, RL_FAILED, 0, -1);
	redlock_vote_set(&v, 3, RL_FAILED, 0, -1);
	cr_assert_eq(redlock_vote_outcome(&v, 1, NULL), RL_OPEN);
	redlock_vote_set(&v, 4, RL_REFUSED, 0, 1);
	cr_assert_eq(redlock_vote_outcome(&v, 1, NULL), RL_LOST); /* 2 of 5: never a grant */
}

Test(redlock, a_quorum_too_late_is_no_grant)
{
	redlock_vote_t v;
	int64_t left = -1;

	redlock_vote_begin(&v, 3, 1000, 0);
	redlock_vote_set(&v, 0, RL_GRANTED, 1000, 1);
	/* 990 ms in: 1000 - 990 - 12 < 0, before the second grant even came. */
	cr_assert_eq(redlock_vote_outcome(&v, 990, NULL), RL_LOST);
	redlock_vote_set(&v, 1, RL_GRANTED, 1000, 1);
	cr_assert_eq(redlock_vote_outcome(&v, 990, &left), RL_LOST);
	cr_assert_eq(left, 0);
	cr_assert_eq(redlock_vote_outcome(&v, 985, &left), RL_WON);
	cr_assert_eq(left, 3);
}

Test(redlock, answers_are_taken_once_and_in_range)
{
	redlock_vote_t v;

	redlock_vote_begin(&v, 3, 10000, 0);
	redlock_vote_set(&v, 0, RL_REFUSED, 0, 9);
	redlock_vote_set(&v, 0, RL_GRANTED, 10000, 9); /* a late second answer */
	redlock_vote_set(&v, 3, RL_GRANTED, 10000, 9); /* no such master */
	redlock_vote_set(&v, -1, RL_GRANTED, 10000, 9);
	redlock_vote_set(&v, 1, RL_PENDING, 10000, 9);
	cr_assert_eq(v.answer[0], RL_REFUSED);
	cr_assert_eq(v.answer[1], RL_PENDING);
	redlock_vote_begin(&v, 99, 10000, 0);
	cr_assert_eq(v.n, REDLOCK_MASTERS_MAX);
}

/* Grants made through different majorities of 5 masters (each round one
 * or two masters answer nothing, a different one each time): each round's
 * fence is written to the quorum that granted it, and the next round's
 * fence is above it, even with the clock stuck and no floor. */
Test(redlock, fences_increase_across_different_majorities)
{
	int64_t stored[5] = {0, 0, 0, 0, 0}, last = 0;
	const int down[][2] = {{0, 1}, {2, 3}, {4, 0}, {1, 2}, {3, 4}, {0, 2}, {1, 3}, {2, 4}};

	for (size_t r = 0; r < sizeof(down) / sizeof(down[0]); r++) {
		redlock_vote_t v;
		int granted[5], ng = 0;
		redlock_vote_begin(&v, 5, 10000, 0);
		for (int i = 0; i < 5; i++) {
			if (i == down[r][0] || i == down[r][1]) {
				redlock_vote_set(&v, i, RL_FAILED, 0, -1);
				continue;
			}
			redlock_vote_set(&v, i, RL_GRANTED, 10000, stored[i]);
			granted[ng++] = i;
		}
		cr_assert_eq(redlock_vote_outcome(&v, 0, NULL), RL_WON);
		int64_t f = redlock_vote_fence(&v, 1, 0); /* a clock stuck at 1 us */
		cr_assert_gt(f, last, "round %zu: fence %lld not above %lld", r, (long long)f,
		             (long long)last);
		last = f;
		/* Written to exactly a quorum: the first three that granted. */
		for (int k = 0; k < 3; k++)
			stored[granted[k]] = f;
	}
}

Test(redlock, the_fence_respects_the_clock_and_the_floor)
{
	redlock_vote_t v;

	redlock_vote_begin(&v, 3, 10000, 0);
	redlock_vote_set(&v, 0, RL_GRANTED, 10000, 100);
	redlock_vote_set(&v, 1, RL_REFUSED, 0, 250); /* a refusal tells its fence too */
	redlock_vote_set(&v, 2, RL_FAILED, 0, -1);
	cr_assert_eq(redlock_vote_fence(&v, 0, 0), 251);
	cr_assert_eq(redlock_vote_fence(&v, 1000, 0), 1000);
	cr_assert_eq(redlock_vote_fence(&v, 1000, 5000), 5001);
}
