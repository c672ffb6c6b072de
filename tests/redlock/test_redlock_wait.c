/*
 * test_redlock_wait.c - waiting under --redlock (issue 18). Waiters do not
 * queue in Redis: a busy round marks the lock ('v' in its header), the
 * release that frees a marked lock publishes on "lb:redlock:wake" on each
 * master, and every broker then runs a new round for its waiters. Besides
 * that, a waiter retries at the holder's expiry, and at least once a
 * second (the safety net). So a waiter on another broker than the holder
 * is granted right after the release, not up to a second later, and while
 * it waits it costs each master a round a second at most.
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

#define HANDOFFS 5
#define LOCK "rl-wake"

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Polls until a quorum of m[0..n) shows lock's 'v' mark (a Redlock
 * waiter's round found it busy there). */
static void wait_marked(lb_redis **m, int n, const char *lock, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	int marked;

	do {
		marked = 0;
		for (int i = 0; i < n; i++) {
			const char *v = rl_header(m[i], lock, "v");
			marked += v && strcmp(v, "1") == 0;
		}
		if (marked >= n / 2 + 1)
			return;
		lb_sleep_ms(2);
	} while (lb_now_ms() < deadline);
	cr_assert_fail("the waiter's round did not mark %s on a quorum (%d of %d) within %d ms",
	               lock, marked, n, timeout_ms);
}

RL_TEST(redlock_wait, release_wakes_a_waiter_on_another_broker_without_polling, 60)
{
	lb_redis *m[3];
	int64_t lat[HANDOFFS];

	rl_masters_start(m, 3);
	/* The canaries once a second, as the bounds below count them. */
	lb_broker *ba = lb_broker_start_redlock(m, 3, "--canary-interval-ms", "1000", NULL);
	lb_broker *bb = lb_broker_start_redlock(m, 3, "--canary-interval-ms", "1000", NULL);
	lb_client *holder = lb_connect(ba, LB_TCP), *waiter = lb_connect(bb, LB_TCP);

	/* 1. Hand-offs. The holder releases as soon as the waiter's round has
	 * marked the lock, i.e. right after that round: were the waiter only
	 * retried by its 1 s safety net (or the holder's expiry, 10 s away),
	 * it would be granted about a second later; woken by the release's
	 * message, within milliseconds. */
	for (int k = 0; k < HANDOFFS; k++) {
		const char *lease = lb_must_acquire(holder, LOCK, 10000);
		json_t *id = lb_acq_send(waiter, LOCK, LB_AO(.wait_ms = 5000, .ttl_ms = 10000));
		wait_marked(m, 3, LOCK, 3000);
		int64_t t0 = lb_now_ms();
		cr_assert_eq(lb_release(holder, lease), 0);
		json_t *r = lb_wait_response(waiter, id, 6000);
		lat[k] = lb_now_ms() - t0;
		cr_assert(lb_is_ok(r), "hand-off %d: the waiter was not granted: %s", k, lb_dump(r));
		cr_assert_eq(lb_release(waiter, lb_str(r, "lease")), 0);
	}
	qsort(lat, HANDOFFS, sizeof(lat[0]), cmp_i64);
	fprintf(stderr, "redlock_wait: release-to-grant on another broker: %lld %lld %lld %lld "
	                "%lld ms\n",
	        (long long)lat[0], (long long)lat[1], (long long)lat[2], (long long)lat[3],
	        (long long)lat[4]);
	/* The median, with a generous margin under the 1 s safety net. */
	cr_assert_lt(lat[HANDOFFS / 2], 800, "median release-to-grant %lld ms: the waiter was not "
	                                     "woken by the release",
	             (long long)lat[HANDOFFS / 2]);

	/* 2. The cost of waiting: a holder (ttl 10 s, watchdog off, so no
	 * renewal) and a waiter on the other broker, idle for 2 s. */
	json_t *g = lb_acq_call(holder, LOCK, LB_AO(.wait_ms = 0, .ttl_ms = 10000, .watchdog = 0),
	                        5000);
	lb_expect_ok(g);
	const char *lease = lb_str(g, "lease");
	json_t *id = lb_acq_send(waiter, LOCK, LB_AO(.wait_ms = 5000, .ttl_ms = 10000));
	wait_marked(m, 3, LOCK, 3000);
	lb_sleep_ms(100);
	rl_monitor mon[3];
	long long before[3];
	for (int i = 0; i < 3; i++) {
		before[i] = rl_evalsha_calls(m[i]);
		rl_monitor_start(&mon[i], m[i], LOCK);
	}
	lb_sleep_ms(2000);
	for (int i = 0; i < 3; i++) {
		rl_monitor_stop(&mon[i]);
		long long all = rl_evalsha_calls(m[i]) - before[i];
		fprintf(stderr, "redlock_wait: master %d in 2 s of waiting: %lld commands, %lld "
		                "EVALSHA (INFO: %lld), %lld on the lock, %lld canary checks; others:\n%s",
		        i, mon[i].top, mon[i].evalsha, all, mon[i].lock_evalsha, mon[i].canary,
		        mon[i].sample);
		/* On the lock: only the waiter's safety-net rounds (the holder's
		 * expiry is 10 s away, nobody releases), at most one a second:
		 * 2, at most 3 in 2 s, each an acquire and the withdraw that
		 * gives a lost round back (2 EVALSHA each; 4 measured). A poll
		 * (say every 50 ms) would be 40 or more. */
		cr_assert_leq(mon[i].lock_evalsha, 6, "master %d: %lld EVALSHA on %s in 2 s of "
		                                      "waiting",
		              i, mon[i].lock_evalsha, LOCK);
		/* Canary checks: one a second per broker per master, so 4 (as
		 * measured), at most 6 here. */
		cr_assert_leq(mon[i].canary, 6, "master %d: %lld canary checks in 2 s", i,
		              mon[i].canary);
		/* All EVALSHA as Redis counts them (INFO commandstats, which the
		 * sorting of MONITOR's lines above cannot miss): the two bounds,
		 * plus a margin of 2 for anything else (none measured). */
		cr_assert_leq(all, 6 + 6 + 2, "master %d: %lld EVALSHA in 2 s of waiting", i, all);
		/* And nothing else of note (none measured). */
		cr_assert_leq(mon[i].top - mon[i].evalsha, 6, "master %d: %lld other commands:\n%s",
		              i, mon[i].top - mon[i].evalsha, mon[i].sample);
	}
	/* Still waiting, then granted when the holder lets go. */
	lb_expect_silent(waiter, 0, "the waiter while the lock is held");
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(holder, lease), 0);
	json_t *r = lb_wait_response(waiter, id, 6000);
	cr_assert(lb_is_ok(r), "the waiter was not granted: %s", lb_dump(r));
	cr_assert_lt(lb_now_ms() - t0, 800, "granted %lld ms after the release",
	             (long long)(lb_now_ms() - t0));
	cr_assert_eq(lb_release(waiter, lb_str(r, "lease")), 0);
	lb_end();
}

RL_TEST(redlock_wait, waiter_granted_at_the_holders_expiry_and_times_out_otherwise, 60)
{
	lb_redis *m[3];

	rl_masters_start(m, 3);
	lb_broker *ba = lb_broker_start_redlock(m, 3, NULL);
	lb_broker *bb = lb_broker_start_redlock(m, 3, NULL);
	lb_client *holder = lb_connect(ba, LB_TCP), *waiter = lb_connect(bb, LB_TCP);

	/* A wait shorter than the hold: timeout, about on time. */
	const char *lease = lb_must_acquire(holder, LOCK, 10000);
	int64_t t0 = lb_now_ms();
	json_t *r = lb_acq_call(waiter, LOCK, LB_AO(.wait_ms = 700, .ttl_ms = 10000), 5000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_err(r, "timeout");
	cr_assert(took >= 650 && took < 2000, "timeout after %lld ms for wait_ms 700",
	          (long long)took);
	cr_assert_eq(lb_release(holder, lease), 0);

	/* A holder that stops renewing (watchdog off, ttl 1500): the waiter is
	 * granted at its expiry, not a second or more later. */
	json_t *g = lb_acq_call(holder, LOCK, LB_AO(.wait_ms = 0, .ttl_ms = 1500, .watchdog = 0),
	                        5000);
	lb_expect_ok(g);
	t0 = lb_now_ms();
	json_t *id = lb_acq_send(waiter, LOCK, LB_AO(.wait_ms = 5000, .ttl_ms = 10000));
	r = lb_wait_response(waiter, id, 7000);
	took = lb_now_ms() - t0;
	cr_assert(lb_is_ok(r), "not granted at the holder's expiry: %s", lb_dump(r));
	cr_assert_gt(lb_int(r, "fence"), lb_int(g, "fence"));
	cr_assert(took >= 1300 && took < 1500 + 800, "granted %lld ms after a 1500 ms lease began",
	          (long long)took);
	json_t *ev = lb_next_event(holder, 2000);
	cr_assert_not_null(ev, "the holder was not told its lease expired");
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "expired", "%s", lb_dump(ev));
	cr_assert_eq(lb_release(waiter, lb_str(r, "lease")), 0);
	lb_end();
}
