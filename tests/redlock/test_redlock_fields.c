/*
 * test_redlock_fields.c - the acquire fields and lease ops under --redlock
 * (issue 18), which PROTOCOL.md ("Redlock mode") says work as with one
 * Redis: a detached lease outlives its session and is extended and
 * released by token through another broker; max_hold_ms ends a renewed
 * lease with `lost` (max_hold) and frees the lock; wait_ms times out and
 * cancel withdraws a waiter, and neither leaves a holder on any master;
 * reentrancy belongs to (session, owner); and a try that lost its round
 * while a master was down leaves nothing on that master once it is back.
 */
#include "tests/redlock/rl.h"

#include <stdio.h>
#include <string.h>

/* LB_AO(...) overrides its own defaults (harness.h). */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* Polls (up to timeout_ms) until every master of m[0..n) shows a holder
 * ('o') in lb:{name}; fails saying which does not. */
static void wait_holder_everywhere(lb_redis **m, int n, const char *name, int timeout_ms,
                                   const char *what)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (int i = 0; i < n; i++) {
		while (!rl_header(m[i], name, "o") && lb_now_ms() < deadline)
			lb_sleep_ms(10);
		cr_assert_not_null(rl_header(m[i], name, "o"), "%s: no holder in lb:{%s} on master %d",
		                   what, name, i);
	}
}

/* Polls (up to timeout_ms) until lb:{name}'s 'c' (the holder's levels) is
 * want on every master of m[0..n). */
static void wait_levels_everywhere(lb_redis **m, int n, const char *name, const char *want,
                                   int timeout_ms, const char *what)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (int i = 0; i < n; i++) {
		const char *c;
		while (((c = rl_header(m[i], name, "c")) == NULL || strcmp(c, want) != 0) &&
		       lb_now_ms() < deadline)
			lb_sleep_ms(10);
		c = rl_header(m[i], name, "c");
		cr_assert(c && strcmp(c, want) == 0, "%s: lb:{%s} has c=%s on master %d, want %s",
		          what, name, c ? c : "nil", i, want);
	}
}

/* 1. A detached lease survives the session that acquired it, and any
 * broker on the same masters extends and releases it by its token. */
RL_TEST(redlock_fields, detached_lease_outlives_its_session_and_another_broker_ends_it, 60)
{
	lb_redis *m[3];
	const char *name = "rl-detach";
	char lease[128];

	rl_masters_start(m, 3);
	lb_broker *ba = lb_broker_start_redlock(m, 3, NULL);
	lb_broker *bb = lb_broker_start_redlock(m, 3, NULL);
	lb_client *ca = lb_connect(ba, LB_TCP), *ca2 = lb_connect(ba, LB_UNIX);
	lb_client *cb = lb_connect(bb, LB_TCP);

	json_t *g = lb_acq_call(ca, name, LB_AO(.wait_ms = 0, .ttl_ms = 60000, .detach = 1), 5000);
	cr_assert(lb_is_ok(g), "detached acquire: %s", lb_dump(g));
	cr_assert(lb_is_lease_token(lb_str(g, "lease")), "%s", lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1, "%s", lb_dump(g));
	snprintf(lease, sizeof(lease), "%s", lb_str(g, "lease"));
	wait_holder_everywhere(m, 3, name, 1000, "detached grant");

	/* The session that acquired it ends: a detached lease stays. Long
	 * enough for a session-end release to have run on every master. */
	lb_close(ca);
	lb_sleep_ms(700);
	lb_expect_err(lb_try_acquire(ca2, name, 10000), "timeout");
	lb_expect_err(lb_try_acquire(cb, name, 10000), "timeout");
	wait_holder_everywhere(m, 3, name, 0, "after the acquiring session closed");

	/* Broker B, which never saw the lease, extends it by token: set (not
	 * added) to what was asked, less the drift (20000 / 100 + 2). */
	json_t *ext = lb_call(cb, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 20000);
	cr_assert(lb_is_ok(ext), "extend through broker B: %s", lb_dump(ext));
	json_int_t t = lb_int(ext, "ttl_ms");
	cr_assert(t > 19000 && t <= 20000 - 202, "extend to 20000 answered ttl_ms %lld: %s",
	          (long long)t, lb_dump(ext));
	json_t *in = lb_inspect(cb, name);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	json_int_t left = lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms");
	cr_assert(left > 15000 && left <= 20000, "after extend to 20000 (from 60000) inspect shows "
	                                         "ttl_ms %lld: %s",
	          (long long)left, lb_dump(in));

	/* ... and releases it by token. */
	json_t *rel = lb_call(cb, "{s:s, s:s}", "op", "release", "lease", lease);
	cr_assert(lb_is_ok(rel), "release through broker B: %s", lb_dump(rel));
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	rl_wait_no_holder(m, 3, name, 2000);
	json_t *r = lb_try_acquire(ca2, name, 10000);
	cr_assert(lb_is_ok(r), "a try on broker A after B released the detached lease: %s",
	          lb_dump(r));
	cr_assert_eq(lb_int(r, "count"), 1, "%s", lb_dump(r));
	cr_assert_gt(lb_int(r, "fence"), lb_int(g, "fence"), "%s after %s", lb_dump(r), lb_dump(g));
	/* The detached lease is gone for good, on either broker. */
	lb_expect_err(lb_call(cb, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");
	lb_expect_err(lb_call(ca2, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 5000),
	              "not_held");
	cr_assert_eq(lb_release(ca2, lb_str(r, "lease")), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_end();
}

/* 2. max_hold_ms caps the grant's ttl_ms, and ends a renewed lease with
 * `lost` (max_hold) about max_hold_ms after the grant; the broker frees
 * the lock on the masters then, not at the end of its TTL. */
RL_TEST(redlock_fields, max_hold_ends_a_renewed_lease_and_frees_the_lock, 40)
{
	lb_redis *m[3];
	const char *name = "rl-max-hold";

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP), *other = lb_connect(b, LB_UNIX);

	json_t *g = lb_call(c, "{s:s, s:s, s:i, s:i, s:b, s:i}", "op", "acquire", "lock", name,
	                    "wait_ms", 0, "ttl_ms", 5000, "watchdog", 1, "max_hold_ms", 1500);
	int64_t t0 = lb_now_ms();
	cr_assert(lb_is_ok(g), "%s", lb_dump(g));
	const char *lease = lb_str(g, "lease");
	json_int_t ttl = lb_int(g, "ttl_ms");
	cr_assert(ttl > 0 && ttl <= 1500, "ttl_ms 5000 with max_hold_ms 1500 granted ttl_ms %lld: "
	                                  "%s",
	          (long long)ttl, lb_dump(g));

	json_t *ev = lb_next_event(c, 4000);
	int64_t after = lb_now_ms() - t0;
	cr_assert_not_null(ev, "no event within 4000 ms of a max_hold_ms 1500 grant");
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lock"), name, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "max_hold", "%s after %lld ms", lb_dump(ev),
	                 (long long)after);
	fprintf(stderr, "redlock_fields: lost (max_hold) %lld ms after the grant\n",
	        (long long)after);
	cr_assert(after >= 1000 && after <= 2500, "lost (max_hold 1500) %lld ms after the grant",
	          (long long)after);

	/* The broker released it on the masters (a lease merely left to
	 * expire keeps its 'o' there). */
	rl_wait_no_holder(m, 3, name, 1000);
	json_t *r = lb_try_acquire(other, name, 10000);
	cr_assert(lb_is_ok(r), "a try after the max_hold loss: %s", lb_dump(r));
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");
	lb_expect_silent(c, 300, "after the lost event");
	json_t *st = lb_stats(c);
	cr_assert_eq(lb_int(st, "lost_total"), 1, "%s", lb_dump(st));
	cr_assert_eq(lb_release(other, lb_str(r, "lease")), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_end();
}

/* 2b. The max hold's end allows for the masters' clock drift (issue 26,
 * point 5): a master whose clock runs fast frees the lock a little before
 * max_hold_ms on the broker's clock, so the holder hears `lost` (max_hold)
 * by max_hold_ms less the drift (ttl / 100 + 2 ms, as for every life left
 * here) counted from the acquire's send. Before the fix it came at about
 * max_hold_ms - 1 ms. */
RL_TEST(redlock_fields, max_hold_ends_before_the_drift_allows_a_master_to_free_it, 60)
{
	lb_redis *m[3];
	const char *name = "rl-max-hold-drift";
	const int hold = 20000, drift = hold / 100 + 2;

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	int64_t t0 = lb_now_ms();
	json_t *g = lb_call(c, "{s:s, s:s, s:i, s:i, s:i}", "op", "acquire", "lock", name,
	                    "wait_ms", 0, "ttl_ms", 30000, "max_hold_ms", hold);
	lb_expect_ok(g);
	cr_assert_leq(lb_int(g, "ttl_ms"), hold - drift, "%s", lb_dump(g));
	json_t *ev = lb_next_event(c, hold + 5000);
	int64_t after = lb_now_ms() - t0;
	cr_assert_not_null(ev, "no lost event");
	cr_assert_str_eq(lb_str(ev, "reason"), "max_hold", "%s", lb_dump(ev));
	fprintf(stderr, "redlock_fields: lost (max_hold %d) %lld ms after the acquire was sent\n",
	        hold, (long long)after);
	cr_assert_lt(after, hold - drift / 2,
	             "lost (max_hold) %lld ms after the send: later than the drift allows (%d ms)",
	             (long long)after, hold - drift);
	cr_assert_gt(after, hold - 1000, "lost (max_hold) too early: %lld ms", (long long)after);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_end();
}

/* 2c. inspect counts Redlock's waiters (issue 26, point 14): they are not
 * queued in Redis, but each broker's rounds count its own on every master
 * (lua/acquire.lua), and inspect adds them up: two on one broker and one
 * on another make 3. One cancelled is no longer counted a few rounds
 * later; once the holder releases and they are granted in turn, none is.
 * Before the fix inspect said 0 whatever waited. */
RL_TEST(redlock_fields, inspect_counts_the_waiters, 60)
{
	lb_redis *m[3];
	const char *name = "rl-waiters";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *h = lb_connect(a, LB_TCP), *w[3] = {lb_connect(a, LB_TCP), lb_connect(a, LB_UNIX),
	                                                lb_connect(b, LB_TCP)};
	lb_client *o = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(h, name, 10000);
	json_t *id[3];

	for (int k = 0; k < 3; k++)
		id[k] = lb_acq_send(w[k], name, LB_AO(.wait_ms = 30000, .ttl_ms = 10000));
	lb_wait_waiters(o, name, 3, 5000);
	json_t *in = lb_inspect(o, name);
	cr_assert_eq(lb_int(in, "waiters"), 3, "%s", lb_dump(in));
	lb_expect_ok(lb_call(w[1], "{s:s, s:O}", "op", "cancel", "target", id[1]));
	lb_expect_err(lb_wait_response(w[1], id[1], 3000), "cancelled");
	lb_wait_waiters(o, name, 2, 5000);
	cr_assert_eq(lb_release(h, lease), 0);
	for (int round = 0; round < 2; round++) {
		bool pend[3] = {id[0] != NULL, false, id[2] != NULL};
		json_t *g = NULL;
		int got = lb_read_any(w, pend, 3, 15000, &g);
		lb_expect_ok(g);
		if (round == 0)
			lb_wait_waiters(o, name, 1, 5000); /* the other still waits */
		lb_release(w[got], lb_str(g, "lease"));
		id[got] = NULL;
	}
	lb_wait_waiters(o, name, 0, 5000);
	lb_end();
}

/* 3. A waiter times out by its wait_ms, another is cancelled; neither's
 * rounds leave anything behind: once the holder releases, no master
 * shows a holder, and the waiter's session holds nothing. */
RL_TEST(redlock_fields, wait_timeout_and_cancel_leave_nothing_behind, 60)
{
	lb_redis *m[3];
	const char *name = "rl-wait-cancel";

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c1 = lb_connect(b, LB_TCP), *c2 = lb_connect(b, LB_TCP);
	const char *lease1 = lb_must_acquire(c1, name, 10000);

	int64_t t0 = lb_now_ms();
	json_t *r = lb_acq_call(c2, name, LB_AO(.wait_ms = 700, .ttl_ms = 10000), 6000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_err(r, "timeout");
	cr_assert(took >= 500 && took <= 3000, "wait_ms 700 answered timeout after %lld ms",
	          (long long)took);

	json_t *id = lb_acq_send(c2, name, LB_AO(.wait_ms = 10000, .ttl_ms = 10000));
	/* Past a safety-net round or two. */
	lb_expect_silent(c2, 1300, "a wait_ms 10000 acquire of a held lock");
	json_t *cn = lb_call(c2, "{s:s, s:O}", "op", "cancel", "target", id);
	lb_expect_ok(cn);
	cr_assert(lb_bool(cn, "cancelled"), "%s", lb_dump(cn));
	lb_expect_err(lb_wait_response(c2, id, 3000), "cancelled");
	cn = lb_call(c2, "{s:s, s:O}", "op", "cancel", "target", id);
	lb_expect_ok(cn);
	cr_assert_not(lb_bool(cn, "cancelled"), "a second cancel: %s", lb_dump(cn));
	json_t *st = lb_stats(c2);
	cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));

	cr_assert_eq(lb_release(c1, lease1), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_expect_silent(c2, 300, "the cancelled acquire after the release");
	r = lb_try_acquire(c2, name, 10000);
	cr_assert(lb_is_ok(r), "a try after the release: %s", lb_dump(r));
	/* count 1: no level of a waiter that was granted after all. */
	cr_assert_eq(lb_int(r, "count"), 1, "%s", lb_dump(r));
	json_t *ls = lb_call(c2, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
	cr_assert_eq(lb_release(c2, lb_str(r, "lease")), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_end();
}

/* 4. Reentrancy belongs to (session, owner): the same owner re-enters
 * (same lease, same fence, count 2, on every master); another owner in
 * the same session is another holder, and a try of it times out without
 * touching the holder's levels. */
RL_TEST(redlock_fields, owner_reentry_and_a_stranger_in_the_same_session, 40)
{
	lb_redis *m[3];
	const char *name = "rl-owner";
	char o[256];

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	json_t *a1 = lb_acq_call(c, name, LB_AO(.wait_ms = 0, .ttl_ms = 10000, .owner = "a"), 5000);
	cr_assert(lb_is_ok(a1), "%s", lb_dump(a1));
	cr_assert_eq(lb_int(a1, "count"), 1, "%s", lb_dump(a1));
	json_t *a2 = lb_acq_call(c, name, LB_AO(.wait_ms = 0, .ttl_ms = 10000, .owner = "a"), 5000);
	cr_assert(lb_is_ok(a2), "re-entry by the same owner: %s", lb_dump(a2));
	cr_assert_eq(lb_int(a2, "count"), 2, "%s", lb_dump(a2));
	cr_assert_str_eq(lb_str(a2, "lease"), lb_str(a1, "lease"));
	cr_assert_eq(lb_int(a2, "fence"), lb_int(a1, "fence"), "%s after %s", lb_dump(a2),
	             lb_dump(a1));
	wait_levels_everywhere(m, 3, name, "2", 1000, "re-entry");
	snprintf(o, sizeof(o), "%s", rl_header(m[0], name, "o"));

	json_t *s = lb_acq_call(c, name, LB_AO(.wait_ms = 0, .ttl_ms = 10000, .owner = "b"), 5000);
	lb_expect_err(s, "timeout");
	/* The stranger's round changed nothing on any master. */
	lb_sleep_ms(200);
	wait_levels_everywhere(m, 3, name, "2", 0, "after another owner's try");
	for (int i = 0; i < 3; i++) {
		const char *oi = rl_header(m[i], name, "o");
		cr_assert(oi && strcmp(oi, o) == 0, "master %d's holder is %s, master 0's %s", i,
		          oi ? oi : "nil", o);
	}
	json_t *in = lb_inspect(c, name);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	json_t *h = json_array_get(lb_get(in, "holders"), 0);
	cr_assert_eq(lb_int(h, "count"), 2, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(h, "owner"), "a", "%s", lb_dump(in));
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));

	cr_assert_eq(lb_release(c, lb_str(a1, "lease")), 1);
	cr_assert_eq(lb_release(c, lb_str(a1, "lease")), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	json_t *bb = lb_acq_call(c, name, LB_AO(.wait_ms = 0, .ttl_ms = 10000, .owner = "b"), 5000);
	cr_assert(lb_is_ok(bb), "owner b once a released: %s", lb_dump(bb));
	cr_assert_eq(lb_int(bb, "count"), 1, "%s", lb_dump(bb));
	cr_assert_str_neq(lb_str(bb, "lease"), lb_str(a1, "lease"));
	cr_assert_gt(lb_int(bb, "fence"), lb_int(a1, "fence"));
	cr_assert_eq(lb_release(c, lb_str(bb, "lease")), 0);
	lb_end();
}

/* 5. A try that lost its round while a master was down leaves nothing
 * there once that master is back: whatever it sent the dead master was
 * given back, or never ran. Tried through the holder's broker and through
 * another one. */
RL_TEST(redlock_fields, a_lost_round_during_an_outage_leaves_nothing_behind, 60)
{
	lb_redis *m[3];
	const char *name = "rl-lost-round";

	rl_masters_start(m, 3);
	lb_broker *ba = lb_broker_start_redlock(m, 3, NULL);
	lb_broker *bb = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c1 = lb_connect(ba, LB_TCP), *c2 = lb_connect(ba, LB_TCP);
	lb_client *c3 = lb_connect(bb, LB_TCP);

	/* At once: the brokers may still believe master 2 up. */
	lb_redis_stop(m[2]);
	json_t *g = lb_acquire_within(c1, name, 10000, 5000);
	cr_assert(lb_is_ok(g), "grant through masters 0 and 1: %s", lb_dump(g));
	const char *lease = lb_str(g, "lease");
	for (int i = 0; i < 2; i++)
		cr_assert_not_null(rl_header(m[i], name, "o"), "no holder on master %d", i);
	lb_expect_err(lb_try_acquire(c2, name, 10000), "timeout");
	lb_expect_err(lb_try_acquire(c3, name, 10000), "timeout");

	cr_assert_eq(lb_release(c1, lease), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	int64_t t0 = lb_now_ms();
	lb_redis_restart(m[2]);
	rl_wait_no_holder(m, 3, name, 2000);
	/* Once both brokers are back on master 2, anything they kept for it
	 * has been sent: still no holder anywhere. */
	rl_wait_master(c1, m[2], true, 5000);
	rl_wait_master(c3, m[2], true, 5000);
	fprintf(stderr, "redlock_fields: master 2 back on both brokers %lld ms after its restart\n",
	        (long long)(lb_now_ms() - t0));
	lb_sleep_ms(500);
	rl_wait_no_holder(m, 3, name, 0);
	json_t *in = lb_inspect(c3, name);
	cr_assert_str_eq(lb_str(in, "state"), "free", "%s", lb_dump(in));

	json_t *r = lb_try_acquire(c2, name, 10000);
	cr_assert(lb_is_ok(r), "a try once everything is back: %s", lb_dump(r));
	cr_assert_eq(lb_int(r, "count"), 1, "%s", lb_dump(r));
	cr_assert_eq(lb_release(c2, lb_str(r, "lease")), 0);
	rl_wait_no_holder(m, 3, name, 2000);
	lb_end();
}
