/*
 * test_redlock_grant.c - grants of --redlock (issue 18) as masters come
 * and go: with every master up the lock is on every master while held; a
 * minority down does not stop a grant (and stats says which are down); a
 * majority down does, until it is back; the fence keeps increasing when
 * each grant is made by another majority, through another broker; and
 * the fence the holder got is the one inspect shows.
 */
#include "tests/redlock/rl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LB_AO(...) overrides its own defaults (harness.h). */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* Acquires name on c, wait_ms 0, retrying for a while (a master just
 * restarted is reconnected by the broker in the background); returns the
 * fence and the lease in *lease. */
static json_int_t grant(lb_client *c, const char *name, const char **lease, const char *what)
{
	json_t *r = lb_acquire_within(c, name, 10000, 5000);

	cr_assert(lb_is_ok(r), "%s: acquire of %s: %s", what, name, lb_dump(r));
	cr_assert_str_eq(lb_str(r, "mode"), "exclusive");
	cr_assert_eq(lb_int(r, "count"), 1);
	*lease = lb_str(r, "lease");
	return lb_int(r, "fence");
}

/* The fence just granted is on the header of each master in m[0..n)
 * named by want (bit i: master i: those the quorum needed), and on at
 * least a quorum of them. (A master whose grant came after the round was
 * won gets it a moment later: it is not waited for.) */
static void expect_fence_on(lb_redis **m, int n, const char *name, json_int_t fence,
                            unsigned want, const char *what)
{
	int on = 0;

	for (int i = 0; i < n; i++) {
		if (lb_redis_pid(m[i]) <= 0)
			continue;
		const char *f = rl_header(m[i], name, "f");
		cr_assert_not_null(f, "%s: no fence on master %d", what, i);
		if (atoll(f) == fence)
			on++;
		else
			cr_assert(!(want & (1u << i)), "%s: master %d (which had to grant) has fence %s, "
			                               "want %lld", what, i, f, (long long)fence);
	}
	cr_assert_geq(on, n / 2 + 1, "%s: fence %lld written on only %d of %d masters", what,
	              (long long)fence, on, n);
}

static void grant_and_release_all_up(int n)
{
	lb_redis *m[RL_MAX];
	const char *name = "rl-basic", *lease1, *lease2;
	char key[64];

	rl_masters_start(m, n);
	lb_broker *b1 = lb_broker_start_redlock(m, n, NULL);
	lb_broker *b2 = lb_broker_start_redlock(m, n, NULL);
	lb_client *c1 = lb_connect(b1, LB_TCP), *c2 = lb_connect(b2, LB_UNIX);
	snprintf(key, sizeof(key), "lb:{%s}", name);

	json_int_t f1 = grant(c1, name, &lease1, "first");
	cr_assert(lb_is_lease_token(lease1), "%s", lease1);
	/* While held: the header is on every master (all were up, all grant
	 * within a round on localhost; a master that answered after the
	 * quorum still runs the same acquire). */
	int64_t deadline = lb_now_ms() + 1000;
	for (int i = 0; i < n; i++) {
		while (!lb_redis_key_exists(m[i], key) && lb_now_ms() < deadline)
			lb_sleep_ms(10);
		cr_assert(lb_redis_key_exists(m[i], key), "%s is not on master %d while held", key, i);
		cr_assert_not_null(rl_header(m[i], name, "o"), "no holder in %s on master %d", key, i);
	}
	expect_fence_on(m, n, name, f1, 0, "first grant");
	/* Another broker sees it held, and cannot take it. */
	json_t *in = lb_inspect(c2, name);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	/* (which fence inspect shows: inspect_and_reentry_show_...) */
	cr_assert_geq(lb_int(in, "fence"), f1, "%s", lb_dump(in));
	json_t *busy = lb_try_acquire(c2, name, 10000);
	lb_expect_err(busy, "timeout");

	cr_assert_eq(lb_release(c1, lease1), 0);
	rl_wait_no_holder(m, n, name, 1000);
	json_int_t f2 = grant(c2, name, &lease2, "second");
	cr_assert_str_neq(lease1, lease2);
	cr_assert_gt(f2, f1, "second fence %lld not above the first %lld", (long long)f2,
	             (long long)f1);
	expect_fence_on(m, n, name, f2, 0, "second grant");
	lb_expect_err(lb_call(c1, "{s:s, s:s}", "op", "release", "lease", lease1), "not_held");
	cr_assert_eq(lb_release(c2, lease2), 0);
	rl_wait_no_holder(m, n, name, 1000);
	lb_expect_free(c1, name);
	lb_end();
}

RL_TEST(redlock_grant, three_masters_all_up_grant_and_release, 40)
{
	grant_and_release_all_up(3);
}

RL_TEST(redlock_grant, five_masters_all_up_grant_and_release, 40)
{
	grant_and_release_all_up(5);
}

/* Stops the masters of m[0..n) named by down (bit i: master i), then
 * acquires at once (the broker may not have noticed yet: a dead master
 * fails its part of the round), and checks that stats shows exactly
 * those masters down. */
static void grant_with_minority_down(int n, unsigned down)
{
	lb_redis *m[RL_MAX];
	const char *name = "rl-minority", *lease;
	unsigned up = ((1u << n) - 1) & ~down;

	rl_masters_start(m, n);
	lb_broker *b = lb_broker_start_redlock(m, n, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	for (int i = 0; i < n; i++)
		if (down & (1u << i))
			lb_redis_stop(m[i]);

	json_int_t f = grant(c, name, &lease, "minority down");
	for (int i = 0; i < n; i++)
		if (up & (1u << i))
			cr_assert_not_null(rl_header(m[i], name, "o"), "no holder on live master %d", i);
	/* Every live master was needed for the quorum here. */
	expect_fence_on(m, n, name, f, up, "minority down");
	for (int i = 0; i < n; i++)
		rl_wait_master(c, m[i], (up >> i) & 1u, 3000);
	json_t *st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
	cr_assert_eq(json_array_size(lb_get(st, "redis_masters")), (size_t)n, "%s", lb_dump(st));
	cr_assert_eq(lb_release(c, lease), 0);
	rl_wait_no_holder(m, n, name, 1000);
	lb_end();
}

RL_TEST(redlock_grant, three_masters_one_down_still_grants, 40)
{
	grant_with_minority_down(3, 1u << 1);
}

RL_TEST(redlock_grant, five_masters_two_down_still_grant, 40)
{
	grant_with_minority_down(5, (1u << 0) | (1u << 3));
}

RL_TEST(redlock_grant, no_grant_with_a_majority_down_until_it_is_back, 60)
{
	lb_redis *m[3];
	const char *name = "rl-majority", *lease;

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	lb_redis_stop(m[0]);
	lb_redis_stop(m[2]);

	/* A try, at once (the broker may still believe them up) and after it
	 * noticed: never ok. */
	for (int k = 0; k < 2; k++) {
		json_t *r = lb_try_acquire(c, name, 10000);
		cr_assert(lb_is_err(r, "unavailable") || lb_is_err(r, "timeout"),
		          "try %d with 2 of 3 masters down: %s", k, lb_dump(r));
		if (k == 0) {
			rl_wait_master(c, m[0], false, 3000);
			rl_wait_master(c, m[2], false, 3000);
		}
	}
	json_t *st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "down", "a quorum is down: %s", lb_dump(st));
	/* A waiting acquire fails too, by its wait_ms at the latest. */
	int64_t t0 = lb_now_ms();
	json_t *r = lb_acq_call(c, name, LB_AO(.wait_ms = 1500, .ttl_ms = 10000), 5000);
	int64_t took = lb_now_ms() - t0;
	cr_assert(lb_is_err(r, "unavailable") || lb_is_err(r, "timeout"),
	          "a wait_ms 1500 acquire with 2 of 3 masters down: %s", lb_dump(r));
	cr_assert_lt(took, 3500, "answered after %lld ms", (long long)took);
	/* Whatever the live master granted in those rounds was given back. */
	rl_wait_no_holder(m, 3, name, 1000);

	lb_redis_restart(m[0]);
	lb_redis_restart(m[2]);
	json_int_t f = grant(c, name, &lease, "majority back");
	cr_assert_gt(f, 0);
	cr_assert_eq(lb_release(c, lease), 0);
	lb_end();
}

/* Rounds k = 0..rounds-1 each stop the masters down(k) (a bit set), after
 * restarting, empty, those the round before stopped, and acquire on broker
 * k % 2: each grant is made by another majority, and each by a broker
 * that did not make the one before (its own floor, the highest fence it
 * saw, lags one grant behind), so what carries the fence from one grant
 * to the next is what the masters the two majorities share answer. */
static void fences_through_majorities(int n, int rounds, unsigned (*down)(int k))
{
	lb_redis *m[RL_MAX];
	const char *name = "rl-fences";
	json_int_t prev = 0;
	unsigned was_down = 0;

	rl_masters_start(m, n);
	lb_broker *b[2] = {lb_broker_start_redlock(m, n, NULL), lb_broker_start_redlock(m, n, NULL)};
	lb_client *c[2] = {lb_connect(b[0], LB_TCP), lb_connect(b[1], LB_TCP)};

	for (int k = 0; k < rounds; k++) {
		unsigned d = down(k);
		const char *lease;
		char what[64];

		for (int i = 0; i < n; i++)
			if ((was_down & (1u << i)) && !(d & (1u << i)))
				lb_redis_restart(m[i]);
		for (int i = 0; i < n; i++)
			if ((d & (1u << i)) && !(was_down & (1u << i)))
				lb_redis_stop(m[i]);
		for (int i = 0; i < n; i++)
			rl_wait_master(c[k % 2], m[i], !(d & (1u << i)), 5000);
		snprintf(what, sizeof(what), "round %d (down 0x%x, broker %d)", k, d, k % 2);
		json_int_t f = grant(c[k % 2], name, &lease, what);
		cr_assert_gt(f, prev, "%s: fence %lld not above the last %lld", what, (long long)f,
		             (long long)prev);
		expect_fence_on(m, n, name, f, ((1u << n) - 1) & ~d, what);
		cr_assert_eq(lb_release(c[k % 2], lease), 0);
		prev = f;
		was_down = d;
	}
	lb_end();
}

static unsigned one_of_three(int k)
{
	return 1u << (k % 3);
}

static unsigned two_of_five(int k)
{
	return (1u << ((2 * k) % 5)) | (1u << ((2 * k + 1) % 5));
}

RL_TEST(redlock_grant, fences_increase_through_different_majorities_of_three, 60)
{
	fences_through_majorities(3, 6, one_of_three);
}

RL_TEST(redlock_grant, fences_increase_through_different_majorities_of_five, 60)
{
	fences_through_majorities(5, 5, two_of_five);
}

/* What the holder got is what everyone is shown: inspect's "fence" is
 * "the last issued fencing token" (PROTOCOL.md), a reentrant acquire
 * returns the current one, and leases lists it. */
RL_TEST(redlock_grant, inspect_and_reentry_show_the_fence_the_holder_got, 40)
{
	lb_redis *m[3];
	const char *name = "rl-shown", *lease;

	rl_masters_start(m, 3);
	lb_broker *b1 = lb_broker_start_redlock(m, 3, NULL);
	lb_broker *b2 = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c1 = lb_connect(b1, LB_TCP), *c2 = lb_connect(b2, LB_TCP);
	json_int_t f = grant(c1, name, &lease, "grant");

	json_t *again = lb_try_acquire(c1, name, 10000);
	lb_expect_ok(again);
	cr_assert_str_eq(lb_str(again, "lease"), lease);
	cr_assert_eq(lb_int(again, "count"), 2, "%s", lb_dump(again));
	cr_assert_eq(lb_int(again, "fence"), f, "reentry: %s, first grant's fence %lld",
	             lb_dump(again), (long long)f);
	json_t *ls = lb_call(c1, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
	cr_assert_eq(lb_int(json_array_get(lb_get(ls, "leases"), 0), "fence"), f, "%s",
	             lb_dump(ls));
	/* Give the last master time to run its part of the round. */
	lb_sleep_ms(200);
	char fs[3][32];
	for (int i = 0; i < 3; i++)
		snprintf(fs[i], sizeof(fs[i]), "%s", rl_header(m[i], name, "f") ?: "nil");
	for (int k = 0; k < 2; k++) {
		json_t *in = lb_inspect(k ? c2 : c1, name);
		cr_assert_eq(lb_int(in, "fence"), f, "inspect on broker %d shows fence %lld, the holder "
		                                     "got %lld (masters' 'f': %s, %s, %s)",
		             k, (long long)lb_int(in, "fence"), (long long)f, fs[0], fs[1], fs[2]);
	}
	cr_assert_eq(lb_release(c1, lease), 1);
	cr_assert_eq(lb_release(c1, lease), 0);
	lb_end();
}

/* The fence write is what carries a fence from one majority to the next:
 * one master is given a fence far above the clock's (as a master whose
 * clock ran ahead would have issued), a grant through it and a second
 * master takes a fence above that, and the next grant, through the
 * second master and a third while the first is down, must still be
 * above it. Without the write the second master would only know the
 * fence it issued itself (from its clock), and the third grant would go
 * back. */
RL_TEST(redlock_grant, a_high_fence_on_one_master_carries_to_a_majority_without_it, 60)
{
	lb_redis *m[3];
	const char *name = "rl-high", *lease;
	long long high;

	rl_masters_start(m, 3);
	lb_broker *b1 = lb_broker_start_redlock(m, 3, NULL);
	lb_broker *b2 = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c1 = lb_connect(b1, LB_TCP), *c2 = lb_connect(b2, LB_TCP);

	/* A fence a million seconds ahead of the clock, on master 0 only. */
	{
		redisReply *t = lb_redis_cmd(m[0], "TIME");
		cr_assert_eq(t->type, REDIS_REPLY_ARRAY);
		high = (atoll(t->element[0]->str) + 1000000LL) * 1000000LL;
	}
	lb_redis_cmd(m[0], "HSET lb:{%s} f %lld", name, high);
	lb_redis_cmd(m[0], "PEXPIRE lb:{%s} 300000", name);

	/* Grant 1 through masters 0 and 1 (2 is down). */
	lb_redis_stop(m[2]);
	rl_wait_master(c1, m[2], false, 5000);
	json_int_t f1 = grant(c1, name, &lease, "through 0 and 1");
	cr_assert_gt(f1, high, "the grant through master 0 has fence %lld, not above its %lld",
	             (long long)f1, high);
	cr_assert_eq(atoll(rl_header(m[1], name, "f")), f1,
	             "master 1 was not given the round's fence before the answer");
	cr_assert_eq(lb_release(c1, lease), 0);

	/* Grant 2 through masters 1 and 2 (0 is down), on the other broker,
	 * whose own floor never saw f1. */
	lb_redis_restart(m[2]);
	lb_redis_stop(m[0]);
	rl_wait_master(c2, m[0], false, 5000);
	rl_wait_master(c2, m[2], true, 5000);
	json_int_t f2 = grant(c2, name, &lease, "through 1 and 2");
	cr_assert_gt(f2, f1, "the fence went back from %lld to %lld through another majority",
	             (long long)f1, (long long)f2);
	cr_assert_eq(lb_release(c2, lease), 0);
	lb_end();
}

/* An uncontended grant is one round trip: the broker proposes the fence
 * (above its clock and every fence it saw), every master issues it, and
 * so it is on a quorum already: no fence write. Ten acquire+release
 * cycles are twenty scripts per master, not thirty, and each master
 * stores the fence the holder got (a quorum at once, the last one soon
 * after: the answer does not wait for it). */
RL_TEST(redlock_grant, an_uncontended_grant_is_one_round_trip, 40)
{
	lb_redis *m[3];
	const char *name = "rl-one-trip", *lease;
	long long before[3];
	json_int_t prev = 0;

	rl_masters_start(m, 3);
	/* The canary once a second, as the bound below counts it. */
	lb_broker *b = lb_broker_start_redlock(m, 3, "--canary-interval-ms", "1000", NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	/* Once, so the scripts are loaded and the canaries counted apart. */
	json_int_t f = grant(c, name, &lease, "warm-up");
	cr_assert_eq(lb_release(c, lease), 0);
	for (int i = 0; i < 3; i++)
		before[i] = rl_evalsha_calls(m[i]);
	for (int k = 0; k < 10; k++) {
		f = grant(c, name, &lease, "cycle");
		cr_assert_gt(f, prev);
		prev = f;
		/* The answer went out once a quorum granted: two masters store
		 * f by then; the third's reply may still be on its way. */
		int have = 0;
		for (int i = 0; i < 3; i++)
			have += atoll(rl_header(m[i], name, "f")) == f;
		cr_assert_geq(have, 2, "only %d masters store the holder's fence %lld", have,
		              (long long)f);
		for (int i = 0; i < 3; i++) {
			int64_t until = lb_now_ms() + 3000;
			long long got;
			while ((got = atoll(rl_header(m[i], name, "f"))) != f && lb_now_ms() < until)
				lb_sleep_ms(2);
			cr_assert_eq(got, f, "master %d stores %lld, the holder got %lld", i, got,
			             (long long)f);
		}
		cr_assert_eq(lb_release(c, lease), 0);
	}
	for (int i = 0; i < 3; i++) {
		long long n = rl_evalsha_calls(m[i]) - before[i];
		/* 20 lock scripts, plus a canary check a second (at most 2 here). */
		cr_assert_leq(n, 23, "master %d ran %lld scripts for 10 cycles: a fence write "
		                     "each time?", i, n);
		cr_assert_geq(n, 20, "master %d ran %lld scripts for 10 cycles", i, n);
	}
	lb_end();
}

/* A release answers the levels a quorum still holds, not the most any
 * master holds: one master with a level the others do not have (a
 * re-entry that reached it alone, or a release it missed) must not keep
 * the lease for its holder while the other two have freed it; and when
 * a quorum is at 0 that master gives its levels back too. */
RL_TEST(redlock_grant, release_counts_what_a_quorum_holds, 40)
{
	lb_redis *m[3];
	const char *name = "rl-levels", *lease;

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c1 = lb_connect(b, LB_TCP), *c2 = lb_connect(b, LB_TCP);

	grant(c1, name, &lease, "first level");
	json_t *again = lb_try_acquire(c1, name, 10000);
	lb_expect_ok(again);
	cr_assert_eq(lb_int(again, "count"), 2);
	/* Master 0 alone has a third level. */
	cr_assert_str_eq(rl_header(m[0], name, "c"), "2");
	lb_redis_cmd(m[0], "HSET lb:{%s} c 3", name);

	cr_assert_eq(lb_release(c1, lease), 1, "the quorum holds 1 level (master 0 holds 2)");
	cr_assert_eq(lb_release(c1, lease), 0, "a quorum is at 0: released");
	rl_wait_no_holder(m, 3, name, 2000);
	json_t *other = lb_try_acquire(c2, name, 5000);
	lb_expect_ok(other);
	cr_assert_eq(lb_release(c2, lb_str(other, "lease")), 0);
	lb_end();
}

/* inspect says which masters hold the lock: "masters" lists every master
 * in the order given, holds true where it shows the holder, false where
 * it shows none, null where it did not answer (a master stopped). */
RL_TEST(redlock_grant, inspect_names_the_masters_that_hold_it, 40)
{
	lb_redis *m[3];
	const char *name = "rl-who", *lease;

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	json_t *in = lb_inspect(c, name);
	json_t *ms = lb_get(in, "masters");
	cr_assert_eq(json_array_size(ms), 3, "%s", lb_dump(in));
	for (int i = 0; i < 3; i++) {
		cr_assert_str_eq(json_string_value(json_object_get(json_array_get(ms, i), "addr")),
		                 rl_addr(m[i]));
		cr_assert(json_is_false(json_object_get(json_array_get(ms, i), "holds")), "%s",
		          lb_dump(in));
	}
	grant(c, name, &lease, "held");
	lb_sleep_ms(100); /* every master's part of the round ran */
	lb_redis_stop(m[1]);
	rl_wait_master(c, m[1], false, 5000);
	in = lb_inspect(c, name);
	ms = lb_get(in, "masters");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert(json_is_true(json_object_get(json_array_get(ms, 0), "holds")), "%s", lb_dump(in));
	cr_assert(json_is_null(json_object_get(json_array_get(ms, 1), "holds")), "%s", lb_dump(in));
	cr_assert(json_is_true(json_object_get(json_array_get(ms, 2), "holds")), "%s", lb_dump(in));
	cr_assert_eq(lb_release(c, lease), 0);
	in = lb_inspect(c, name);
	cr_assert_str_eq(lb_str(in, "state"), "free", "%s", lb_dump(in));
	cr_assert(json_is_false(json_object_get(json_array_get(lb_get(in, "masters"), 0), "holds")));
	lb_end();
}
