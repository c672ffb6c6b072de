/*
 * test_wait.c - waiting acquires (issue 3): blocking acquire without
 * wait_ms, timeout bounds, several waits on one session, reentrancy while
 * waiting, cancel, session end, handoff after release / disconnect / TTL
 * expiry, inspect and stats counters, the waiter limits, and that Redis
 * keeps no queue entry once everything ended.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Sends an acquire without waiting for its answer. wait_ms < 0: absent
 * (wait until granted); ttl_ms <= 0: absent; owner NULL: absent; id NULL:
 * a unique id from the harness (id is stolen). Returns the request id. */
static json_t *acq_send(lb_client *c, json_t *id, const char *lock, const char *owner,
                        int wait_ms, int ttl_ms)
{
	return lb_send_req(c, "{s:o*, s:s, s:s, s:s*, s:o*, s:o*}", "id", id, "op", "acquire",
	                   "lock", lock, "owner", owner, "wait_ms",
	                   wait_ms >= 0 ? json_integer(wait_ms) : NULL, "ttl_ms",
	                   ttl_ms > 0 ? json_integer(ttl_ms) : NULL);
}

static void expect_acquired(const json_t *r, const char *lock, json_int_t count)
{
	lb_expect_ok(r);
	cr_assert(lb_is_lease_token(lb_str(r, "lease")), "%s", lb_dump(r));
	cr_assert_str_eq(lb_str(r, "lock"), lock, "%s", lb_dump(r));
	cr_assert_eq(lb_int(r, "count"), count, "%s", lb_dump(r));
	(void)lb_int(r, "fence");
}

/* ---- blocking acquire ------------------------------------------------------ */

LB_TEST(wait, absent_wait_ms_waits_until_released, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w = lb_connect(b, LB_UNIX);
	json_t *first = lb_try_acquire(h, "blk", 30000);
	lb_expect_ok(first);
	const char *lease = lb_str(first, "lease");

	json_t *id = acq_send(w, NULL, "blk", NULL, -1, 0);
	/* A waiting acquire never holds up the session's other requests. */
	int64_t t0 = lb_now_ms();
	lb_expect_ok(lb_call(w, "{s:s}", "op", "ping"));
	lb_expect_ok(lb_call(w, "{s:s}", "op", "stats"));
	cr_assert_lt(lb_now_ms() - t0, 500, "ping behind a blocked acquire took %lld ms",
	             (long long)(lb_now_ms() - t0));
	lb_expect_silent(w, 1500, "acquire of a held lock");
	cr_assert_eq(lb_inspect_waiters(h, "blk"), 1);

	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lease), 0);
	json_t *g = lb_wait_response(w, id, 2000);
	int64_t dt = lb_now_ms() - t0;
	expect_acquired(g, "blk", 1);
	cr_assert_lt(dt, 500, "granted %lld ms after the release", (long long)dt);
	cr_assert_gt(lb_int(g, "fence"), lb_int(first, "fence"), "fence must increase: %s then %s",
	             lb_dump(first), lb_dump(g));
	cr_assert_eq(lb_int(g, "ttl_ms"), 30000, "%s", lb_dump(g));
	json_t *in = lb_inspect(h, "blk");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "blk", 1000, false);
	lb_end();
}

LB_TEST(wait, timeout_is_on_time_and_counted, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	lb_must_acquire(h, "to", 30000);
	json_int_t before = lb_int(lb_stats(w), "timeouts_total");
	static const int waits[] = {1, 150, 700};

	for (size_t k = 0; k < sizeof(waits) / sizeof(waits[0]); k++) {
		int64_t t0 = lb_now_ms();
		json_t *id = acq_send(w, NULL, "to", NULL, waits[k], 0);
		json_t *resp = lb_wait_response(w, id, waits[k] + 3000);
		int64_t dt = lb_now_ms() - t0;
		lb_expect_err(resp, "timeout");
		cr_assert_geq(dt, waits[k] - 5, "wait_ms %d answered after only %lld ms", waits[k],
		              (long long)dt);
		cr_assert_leq(dt, waits[k] + 500, "wait_ms %d answered after %lld ms", waits[k],
		              (long long)dt);
		/* it left the queue */
		cr_assert_eq(lb_inspect_waiters(h, "to"), 0);
		cr_assert_eq(lb_int(lb_stats(w), "waiters"), 0);
	}
	json_int_t after = lb_int(lb_stats(w), "timeouts_total");
	cr_assert_geq(after - before, 3, "timeouts_total %lld -> %lld after 3 timeouts",
	              (long long)before, (long long)after);
	/* the holder is untouched */
	json_t *in = lb_inspect(h, "to");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	lb_close(h);
	lb_close(w);
	lb_client *c = lb_connect(b, LB_UNIX);
	lb_acquire_within(c, "to", 1000, 2000);
	lb_expect_no_queue(r, c, "to", 1000, false);
	lb_end();
}

LB_TEST(wait, many_waits_on_one_session, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	static const char *const locks[] = {"m0", "m1", "m2", "m3"};
	const char *leases[4];
	json_t *ids[4];

	for (int k = 0; k < 4; k++)
		leases[k] = lb_must_acquire(h, locks[k], 30000);
	for (int k = 0; k < 4; k++)
		ids[k] = acq_send(w, NULL, locks[k], NULL, k == 3 ? 600 : -1, 0);
	int64_t t0 = lb_now_ms();
	lb_expect_ok(lb_call(w, "{s:s}", "op", "ping"));
	cr_assert_lt(lb_now_ms() - t0, 500);
	cr_assert_eq(lb_int(lb_stats(w), "waiters"), 4, "%s", lb_dump(lb_stats(w)));
	/* Release in another order than the requests: each grant answers its
	 * own request. */
	static const int order[] = {2, 0, 1};
	for (int n = 0; n < 3; n++) {
		int k = order[n];
		cr_assert_eq(lb_release(h, leases[k]), 0);
		json_t *g = lb_wait_response(w, ids[k], 2000);
		expect_acquired(g, locks[k], 1);
		lb_expect_silent(w, 50, "other acquires");
	}
	lb_expect_err(lb_wait_response(w, ids[3], 3000), "timeout");
	cr_assert_eq(lb_int(lb_stats(w), "waiters"), 0);
	json_t *ls = lb_call(w, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 3, "%s", lb_dump(ls));
	lb_close(w);
	cr_assert_eq(lb_release(h, leases[3]), 0);
	for (int k = 0; k < 4; k++) {
		lb_expect_ok(lb_acquire_within(h, locks[k], 1000, 2000));
		lb_expect_no_queue(r, h, locks[k], 1000, false);
	}
	lb_end();
}

/* ---- reentrancy -------------------------------------------------------------- */

LB_TEST(wait, reentrant_acquire_does_not_wait, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	lb_client *other = lb_connect(b, LB_UNIX);

	json_t *id1 = acq_send(c, NULL, "re", "t1", -1, 0);
	json_t *a1 = lb_wait_response(c, id1, 2000);
	expect_acquired(a1, "re", 1);
	const char *lease = lb_str(a1, "lease");
	/* same owner, blocking: granted at once, same lease, count 2 */
	int64_t t0 = lb_now_ms();
	json_t *a2 = lb_wait_response(c, acq_send(c, NULL, "re", "t1", -1, 0), 2000);
	cr_assert_lt(lb_now_ms() - t0, 500);
	expect_acquired(a2, "re", 2);
	cr_assert_str_eq(lb_str(a2, "lease"), lease);
	cr_assert_eq(lb_int(a2, "fence"), lb_int(a1, "fence"));
	/* same owner with wait_ms 0: count 3 */
	json_t *a3 = lb_wait_response(c, acq_send(c, NULL, "re", "t1", 0, 0), 2000);
	expect_acquired(a3, "re", 3);
	cr_assert_str_eq(lb_str(a3, "lease"), lease);

	/* another owner of the same session is a stranger */
	t0 = lb_now_ms();
	lb_expect_err(lb_wait_response(c, acq_send(c, NULL, "re", "t2", 300, 0), 3000), "timeout");
	cr_assert_geq(lb_now_ms() - t0, 295);
	/* ... and another session too */
	lb_expect_err(lb_wait_response(other, acq_send(other, NULL, "re", "t1", 200, 0), 3000),
	              "timeout");

	/* the stranger owner waits; releases decrement; only the last frees */
	json_t *sid = acq_send(c, NULL, "re", "t2", -1, 0);
	cr_assert_eq(lb_release(c, lease), 2);
	cr_assert_eq(lb_release(c, lease), 1);
	lb_expect_silent(c, 300, "t2 while t1 still holds once");
	json_t *in = lb_inspect(other, "re");
	cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 1, "%s",
	             lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_release(c, lease), 0);
	json_t *s = lb_wait_response(c, sid, 2000);
	expect_acquired(s, "re", 1);
	cr_assert_str_neq(lb_str(s, "lease"), lease);
	cr_assert_gt(lb_int(s, "fence"), lb_int(a1, "fence"));
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");
	cr_assert_eq(lb_release(c, lb_str(s, "lease")), 0);
	lb_expect_free(other, "re");
	lb_expect_no_queue(r, other, "re", 1000, false);
	lb_end();
}

LB_TEST(wait, reentrant_acquire_pipelined_behind_a_pending_one, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *hl = lb_must_acquire(h, "rp", 30000);

	json_t *id1 = acq_send(c, NULL, "rp", "o", -1, 0);
	json_t *id2 = acq_send(c, NULL, "rp", "o", -1, 0);
	lb_expect_silent(c, 500, "both acquires wait");
	cr_assert_eq(lb_release(h, hl), 0);
	json_t *g1 = lb_wait_response(c, id1, 2000);
	json_t *g2 = lb_wait_response(c, id2, 1000);
	expect_acquired(g1, "rp", 1);
	expect_acquired(g2, "rp", 2);
	cr_assert_str_eq(lb_str(g1, "lease"), lb_str(g2, "lease"));
	cr_assert_eq(lb_int(g1, "fence"), lb_int(g2, "fence"));
	json_t *in = lb_inspect(h, "rp");
	cr_assert_eq(json_array_size(lb_get(in, "holders")), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 2, "%s",
	             lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	const char *lease = lb_str(g1, "lease");
	cr_assert_eq(lb_release(c, lease), 1);
	lb_expect_err(lb_try_acquire(h, "rp", 1000), "timeout");
	cr_assert_eq(lb_release(c, lease), 0);
	lb_expect_ok(lb_try_acquire(h, "rp", 1000));

	/* When the first pending acquire fails (timeout), the one behind it
	 * goes on as an acquire of its own. */
	const char *hl2 = lb_must_acquire(h, "rq", 30000);
	json_t *f1 = acq_send(c, NULL, "rq", "o", 300, 0);
	json_t *f2 = acq_send(c, NULL, "rq", "o", -1, 0);
	lb_expect_err(lb_wait_response(c, f1, 3000), "timeout");
	lb_expect_silent(c, 300, "the second acquire waits on");
	cr_assert_eq(lb_inspect_waiters(h, "rq"), 1);
	cr_assert_eq(lb_release(h, hl2), 0);
	json_t *g = lb_wait_response(c, f2, 2000);
	expect_acquired(g, "rq", 1);
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "rp", 1000, false);
	lb_expect_no_queue(r, h, "rq", 1000, false);
	lb_end();
}

/* ---- cancel ---------------------------------------------------------------- */

LB_TEST(wait, cancel, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *s = lb_connect(b, LB_TCP);
	lb_client *t = lb_connect(b, LB_UNIX);
	const char *hl = lb_must_acquire(h, "cx", 30000);
	json_t *resp;

	/* integer id 7 on lock cx, string id "7" on lock cy */
	lb_must_acquire(h, "cy", 30000);
	json_t *idi = acq_send(s, json_integer(7), "cx", NULL, -1, 0);
	json_t *ids = acq_send(s, json_string("7"), "cy", NULL, -1, 0);
	/* t's own pending acquire with the same id 7 */
	json_t *idt = acq_send(t, json_integer(7), "cx", NULL, -1, 0);
	lb_wait_waiters(h, "cx", 2, 2000);
	lb_wait_waiters(h, "cy", 1, 2000);

	/* unknown id */
	resp = lb_call(s, "{s:s, s:i}", "op", "cancel", "target", 8);
	lb_expect_ok(resp);
	cr_assert_not(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	resp = lb_call(s, "{s:s, s:s}", "op", "cancel", "target", "nope");
	lb_expect_ok(resp);
	cr_assert_not(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	/* another session's id: h has nothing pending under 7 */
	resp = lb_call(h, "{s:s, s:i}", "op", "cancel", "target", 7);
	lb_expect_ok(resp);
	cr_assert_not(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	lb_expect_silent(s, 200, "s's acquires keep waiting");
	lb_expect_silent(t, 1, "t's acquire keeps waiting");
	cr_assert_eq(lb_inspect_waiters(h, "cx"), 2);

	/* the string "7" is not the integer 7 */
	resp = lb_call(s, "{s:s, s:s}", "op", "cancel", "target", "7");
	lb_expect_ok(resp);
	cr_assert(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	lb_expect_err(lb_wait_response(s, ids, 2000), "cancelled");
	lb_expect_silent(s, 200, "integer id 7 keeps waiting");
	cr_assert_eq(lb_inspect_waiters(h, "cy"), 0);
	cr_assert_eq(lb_inspect_waiters(h, "cx"), 2);

	/* cancel the integer 7 of s; t's 7 is untouched */
	resp = lb_call(s, "{s:s, s:i}", "op", "cancel", "target", 7);
	lb_expect_ok(resp);
	cr_assert(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	lb_expect_err(lb_wait_response(s, idi, 2000), "cancelled");
	resp = lb_call(s, "{s:s, s:i}", "op", "cancel", "target", 7);
	lb_expect_ok(resp);
	cr_assert_not(lb_bool(resp, "cancelled"), "second cancel: %s", lb_dump(resp));
	cr_assert_eq(lb_inspect_waiters(h, "cx"), 1);
	cr_assert_eq(lb_int(lb_stats(s), "waiters"), 1, "only t's acquire is pending");
	lb_expect_silent(t, 100, "t's acquire keeps waiting");

	/* the release goes to t, never to the cancelled acquire */
	cr_assert_eq(lb_release(h, hl), 0);
	json_t *g = lb_wait_response(t, idt, 2000);
	expect_acquired(g, "cx", 1);
	lb_expect_silent(s, 200, "the cancelled acquire");
	json_t *ls = lb_call(s, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
	/* a granted acquire cannot be cancelled any more */
	resp = lb_call(t, "{s:s, s:i}", "op", "cancel", "target", 7);
	lb_expect_ok(resp);
	cr_assert_not(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
	cr_assert_eq(lb_release(t, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "cx", 1000, false);
	lb_expect_no_queue(r, h, "cy", 1000, false);
	lb_end();
}

/* ---- session end and handoff ---------------------------------------------- */

LB_TEST(wait, session_end_withdraws_waiters_and_frees_leases, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *x = lb_connect(a, LB_UNIX);
	lb_client *w = lb_connect(b, LB_TCP);
	lb_client *obs = lb_connect(b, LB_UNIX);
	lb_must_acquire(h, "se", 30000);

	/* x queues first (several acquires), w second, on the other broker */
	acq_send(x, NULL, "se", "x1", -1, 0);
	acq_send(x, NULL, "se", "x2", -1, 0);
	lb_sleep_ms(50);
	json_t *wid = acq_send(w, NULL, "se", NULL, -1, 0);
	lb_wait_waiters(obs, "se", 3, 2000);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 2);
	cr_assert_eq(lb_int(lb_stats(obs), "waiters"), 1);

	/* x disconnects while waiting: its waiters leave the queue */
	lb_close(x);
	lb_wait_waiters(obs, "se", 1, 1000);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 0);
	lb_expect_silent(w, 200, "w while h holds");

	/* h disconnects while holding: w (other broker) gets the lock */
	int64_t t0 = lb_now_ms();
	lb_close(h);
	json_t *g = lb_wait_response(w, wid, 3000);
	int64_t dt = lb_now_ms() - t0;
	expect_acquired(g, "se", 1);
	cr_assert_lt(dt, 1000, "granted %lld ms after the holder's disconnect", (long long)dt);
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, obs, "se", 1000, false);
	lb_end();
}

LB_TEST(wait, handoff_after_release_disconnect_and_expiry, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	int64_t t0, dt;
	json_t *id, *g;

	/* after a release (waiter on the other broker) */
	const char *hl = lb_must_acquire(h, "ho", 30000);
	id = acq_send(w, NULL, "ho", NULL, -1, 0);
	lb_wait_waiters(h, "ho", 1, 2000);
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, hl), 0);
	g = lb_wait_response(w, id, 3000);
	dt = lb_now_ms() - t0;
	expect_acquired(g, "ho", 1);
	cr_assert_lt(dt, 500, "release: granted after %lld ms", (long long)dt);
	cr_log_info("handoff after release: %lld ms", (long long)dt);

	/* after a disconnect (w holds now; h waits) */
	id = acq_send(h, NULL, "ho", NULL, -1, 0);
	lb_wait_waiters(h, "ho", 1, 2000);
	t0 = lb_now_ms();
	lb_close(w);
	g = lb_wait_response(h, id, 3000);
	dt = lb_now_ms() - t0;
	expect_acquired(g, "ho", 1);
	cr_assert_lt(dt, 500, "disconnect: granted after %lld ms", (long long)dt);
	cr_log_info("handoff after disconnect: %lld ms", (long long)dt);
	cr_assert_eq(lb_release(h, lb_str(g, "lease")), 0);

	/* after the holder's TTL ran out (watchdog false, ttl 300) */
	w = lb_connect(b, LB_UNIX);
	t0 = lb_now_ms();
	json_t *e = lb_call(h, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "hx", "ttl_ms",
	                    300, "wait_ms", 0, "watchdog", 0);
	expect_acquired(e, "hx", 1);
	id = acq_send(w, NULL, "hx", NULL, -1, 0);
	g = lb_wait_response(w, id, 5000);
	dt = lb_now_ms() - t0;
	expect_acquired(g, "hx", 1);
	cr_log_info("handoff after expiry: %lld ms after the holder's acquire", (long long)dt);
	cr_assert_geq(dt, 250, "granted after %lld ms, before the holder's TTL ran out",
	              (long long)dt);
	cr_assert_leq(dt, 300 + 1000 + 200, "granted %lld ms after the holder's acquire (ttl 300)",
	              (long long)dt);
	cr_assert_gt(lb_int(g, "fence"), lb_int(e, "fence"));
	json_t *ev = lb_next_event(h, 2000);
	cr_assert_not_null(ev, "the holder hears that its lease expired");
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "expired", "%s", lb_dump(ev));
	lb_expect_err(lb_call(h, "{s:s, s:s}", "op", "release", "lease", lb_str(e, "lease")),
	              "not_held");
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "ho", 1000, false);
	lb_expect_no_queue(r, h, "hx", 1000, false);
	lb_end();
}

/* ---- inspect / stats ------------------------------------------------------- */

LB_TEST(wait, inspect_and_stats_count_waiters, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w1 = lb_connect(a, LB_TCP);
	lb_client *w2 = lb_connect(a, LB_UNIX);
	lb_client *w3 = lb_connect(b, LB_TCP);
	lb_client *ob = lb_connect(b, LB_UNIX);
	const char *hl = lb_must_acquire(h, "is", 30000);
	json_int_t ta = lb_int(lb_stats(h), "timeouts_total");
	json_int_t tb = lb_int(lb_stats(ob), "timeouts_total");

	/* 20 ms apart: arrival order known */
	json_t *i1 = acq_send(w1, NULL, "is", NULL, -1, 0);
	lb_sleep_ms(20);
	json_t *i2 = acq_send(w2, NULL, "is", NULL, 400, 0);
	lb_sleep_ms(20);
	json_t *i3 = acq_send(w3, NULL, "is", NULL, -1, 0);
	json_t *i4 = acq_send(w3, NULL, "other", NULL, -1, 0); /* free: granted */
	expect_acquired(lb_wait_response(w3, i4, 2000), "other", 1);
	lb_wait_waiters(h, "is", 3, 2000);
	cr_assert_eq(lb_inspect_waiters(ob, "is"), 3, "inspect on either broker counts all");
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 2);
	cr_assert_eq(lb_int(lb_stats(ob), "waiters"), 1);
	cr_assert_eq(lb_inspect_waiters(ob, "other"), 0);

	lb_expect_err(lb_wait_response(w2, i2, 3000), "timeout");
	cr_assert_eq(lb_inspect_waiters(ob, "is"), 2);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 1);
	cr_assert_eq(lb_int(lb_stats(h), "timeouts_total"), ta + 1);
	cr_assert_eq(lb_int(lb_stats(ob), "timeouts_total"), tb);

	cr_assert_eq(lb_release(h, hl), 0);
	json_t *g = lb_wait_response(w1, i1, 2000);
	expect_acquired(g, "is", 1);
	cr_assert_eq(lb_inspect_waiters(ob, "is"), 1);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 0);
	cr_assert_eq(lb_release(w1, lb_str(g, "lease")), 0);
	g = lb_wait_response(w3, i3, 2000);
	expect_acquired(g, "is", 1);
	cr_assert_eq(lb_int(lb_stats(ob), "waiters"), 0);
	cr_assert_eq(lb_inspect_waiters(h, "is"), 0);
	cr_assert_eq(lb_release(w3, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "is", 1000, false);
	lb_end();
}

/* ---- a burst of acquires on one lock ----------------------------------------- */

/* n blocking acquires of lock on c, owners PREFIX0, PREFIX1, ... */
static void send_burst(lb_client *c, const char *lock, const char *prefix, json_t **ids, int n)
{
	char owner[16];

	for (int k = 0; k < n; k++) {
		snprintf(owner, sizeof(owner), "%s%d", prefix, k);
		ids[k] = acq_send(c, NULL, lock, owner, -1, 0);
	}
}

/* h releases lease; the acquires ids[order[0..n-1]] of s must then be
 * granted in that order, each released at once. One holder at a time: a
 * grant out of order would leave the next one waiting behind a lease
 * nobody releases. */
static void expect_grants_in_order(lb_client *h, const char *lease, lb_client *s,
                                   const char *lock, json_t **ids, const int *order, size_t n)
{
	cr_assert_eq(lb_release(h, lease), 0);
	for (size_t k = 0; k < n; k++) {
		json_t *g = lb_wait_response(s, ids[order[k]], 3000);
		expect_acquired(g, lock, 1);
		cr_assert_eq(lb_release(s, lb_str(g, "lease")), 0);
	}
}

/* A broker keeps at most 4 acquires of one lock on their way to Redis and
 * holds the others, in order: Redis runs everything a connection sent
 * before it answers anyone, so a long burst on one lock delayed other
 * brokers' wake-ups. Shown with Redis frozen: the 5th acquire, held, is
 * cancelled at once (nothing of it is in Redis), while the 4th, on its
 * way, is answered only after Redis replied; the others reach the queue in
 * the order they came and are granted in that order. */
LB_TEST(wait, a_burst_on_one_lock_is_sent_a_few_at_a_time, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *s = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(h, "burst", 30000);
	pid_t pid = lb_redis_pid(r);
	static const int order[] = {0, 1, 2, 5, 6, 7, 8, 9};
	json_t *ids[10], *c, *g;
	char owner[16];

	cr_assert_eq(kill(pid, SIGSTOP), 0);
	send_burst(s, "burst", "o", ids, 10);
	/* another session's held acquires go with it */
	lb_client *t = lb_connect(b, LB_TCP);
	for (int k = 0; k < 6; k++) {
		snprintf(owner, sizeof(owner), "t%d", k);
		(void)acq_send(t, NULL, "burst", owner, k % 2 ? 60000 : -1, 0);
	}
	lb_sleep_ms(100);
	lb_close(t);
	/* o4 is held in the broker: its cancel is answered with Redis frozen */
	c = lb_call(s, "{s:s, s:O}", "op", "cancel", "target", ids[4]);
	g = lb_read_msg(s, 500);
	if (!g)
		kill(pid, SIGCONT);
	cr_assert_not_null(g, "the 5th acquire was not held: its cancel waited for Redis");
	cr_assert(json_equal(json_object_get(g, "id"), ids[4]), "%s", lb_dump(g));
	lb_expect_err(g, "cancelled");
	cr_assert(lb_bool(c, "cancelled"), "%s", lb_dump(c));
	/* o3 is on its way: its answer needs Redis */
	c = lb_call(s, "{s:s, s:O}", "op", "cancel", "target", ids[3]);
	g = lb_read_msg(s, 300);
	cr_assert_eq(kill(pid, SIGCONT), 0);
	cr_assert_null(g, "the 4th acquire was held, or answered with Redis frozen: %s", lb_dump(g));
	lb_expect_err(lb_wait_response(s, ids[3], 3000), "cancelled");

	/* the others queue in order; nothing of o3, o4 or t stays in Redis */
	lb_wait_waiters(h, "burst", 8, 3000);
	expect_grants_in_order(h, lease, s, "burst", ids, order, sizeof(order) / sizeof(order[0]));
	lb_expect_no_queue(r, h, "burst", 1000, true);
	lb_end();
}

/* The acquires on their way fail (their connection is dropped after 2 s
 * without an answer): the held ones, younger, must not overtake them on
 * another connection. They are all sent again, in order. */
LB_TEST(wait, held_acquires_keep_their_order_when_a_connection_fails, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "2", NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *s = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(h, "ord", 30000);
	static const int order[] = {0, 1, 2, 3, 4, 5, 6, 7};
	json_t *ids[8];

	(void)lb_redis_cmd(r, "CLIENT PAUSE 2600 WRITE");
	send_burst(s, "ord", "o", ids, 8);
	lb_sleep_ms(3000);
	lb_wait_waiters(h, "ord", 8, 5000);
	expect_grants_in_order(h, lease, s, "ord", ids, order, 8);
	lb_expect_no_queue(r, h, "ord", 1000, true);
	lb_end();
}

/* Acquires that went out and failed with their connection may still be
 * queued in Redis (the frozen server runs them when it resumes); sent again
 * with the held ones behind them, one that ends is withdrawn at once
 * rather than left until its heartbeat lapses (5 s). */
LB_TEST(wait, a_failed_acquire_sent_again_is_withdrawn_when_it_ends, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "2", NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *s = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(h, "mq", 30000);
	pid_t pid = lb_redis_pid(r);
	static const int order[] = {1, 2, 3, 4, 5, 6, 7};
	json_t *ids[8];

	/* o0..o3 go out on one connection and fail when the broker drops it
	 * (2 s), o4..o7 held behind them; at the 3 s heartbeat all are sent
	 * again in order, o0..o3 first, still unanswered. */
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	send_burst(s, "mq", "o", ids, 8);
	lb_sleep_ms(3400);
	(void)lb_send_req(s, "{s:s, s:O}", "op", "cancel", "target", ids[0]);
	cr_assert_eq(kill(pid, SIGCONT), 0);
	lb_expect_err(lb_wait_response(s, ids[0], 3000), "cancelled");
	/* every connection with a command on it (the canary's too) was dropped
	 * during the freeze: the broker may still be reconnecting */
	for (int64_t t0 = lb_now_ms(); strcmp(lb_str(lb_stats(h), "redis"), "up") != 0;) {
		cr_assert_lt(lb_now_ms() - t0, 6000, "redis still down");
		lb_sleep_ms(50);
	}
	/* the frozen connection's scripts ran on resume: o0 queued there */
	lb_wait_waiters(h, "mq", 7, 1500);
	expect_grants_in_order(h, lease, s, "mq", ids, order, 7);
	lb_expect_no_queue(r, h, "mq", 1000, true);
	lb_end();
}

/* ---- limits ----------------------------------------------------------------- */

LB_TEST(wait, limit_waiters_per_session, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-waiters-per-session", "3", NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *s = lb_connect(b, LB_TCP);
	lb_client *t = lb_connect(b, LB_UNIX);
	static const char *const locks[] = {"p0", "p1", "p2", "p3"};
	const char *leases[4];
	json_t *ids[3];

	for (int k = 0; k < 4; k++)
		leases[k] = lb_must_acquire(h, locks[k], 30000);
	for (int k = 0; k < 3; k++)
		ids[k] = acq_send(s, NULL, locks[k], NULL, -1, 0);
	lb_expect_err(lb_wait_response(s, acq_send(s, NULL, locks[3], NULL, -1, 0), 2000),
	              "limit_exceeded");
	/* another session has its own allowance */
	json_t *tid = acq_send(t, NULL, locks[3], NULL, -1, 0);
	lb_expect_silent(t, 200, "t waits");
	cr_assert_eq(lb_int(lb_stats(s), "waiters"), 4);
	/* one waiter ends (cancel): room for one more */
	json_t *c = lb_call(s, "{s:s, s:O}", "op", "cancel", "target", ids[0]);
	cr_assert(lb_bool(c, "cancelled"), "%s", lb_dump(c));
	lb_expect_err(lb_wait_response(s, ids[0], 2000), "cancelled");
	json_t *nid = acq_send(s, NULL, locks[3], "s", -1, 0);
	lb_expect_silent(s, 200, "a waiter within the limit");
	lb_expect_err(lb_wait_response(s, acq_send(s, NULL, locks[0], NULL, 100, 0), 2000),
	              "limit_exceeded");
	cr_assert_eq(lb_inspect_waiters(h, locks[3]), 2);

	lb_close(s);
	lb_close(t);
	(void)tid;
	(void)nid;
	for (int k = 0; k < 4; k++) {
		cr_assert_eq(lb_release(h, leases[k]), 0);
		lb_expect_no_queue(r, h, locks[k], 1000, false);
	}
	lb_end();
}

LB_TEST(wait, limit_waiters_per_broker, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, "--max-waiters", "3", NULL);
	lb_broker *b = lb_broker_start(r, "--max-waiters", "3", NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w[4], *v = lb_connect(b, LB_TCP);
	json_t *ids[4];
	const char *hl = lb_must_acquire(h, "pb", 30000);

	for (int k = 0; k < 4; k++)
		w[k] = lb_connect(a, k % 2 ? LB_UNIX : LB_TCP);
	for (int k = 0; k < 3; k++) {
		ids[k] = acq_send(w[k], NULL, "pb", NULL, -1, 0);
		lb_sleep_ms(20); /* arrival order known */
	}
	lb_wait_waiters(h, "pb", 3, 2000);
	lb_expect_err(lb_wait_response(w[3], acq_send(w[3], NULL, "pb", NULL, -1, 0), 2000),
	              "limit_exceeded");
	/* the other broker has its own allowance */
	json_t *vid = acq_send(v, NULL, "pb", NULL, -1, 0);
	lb_wait_waiters(h, "pb", 4, 2000);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 3);
	/* a waiter leaves (its session ends): room again */
	lb_close(w[0]);
	int64_t deadline = lb_now_ms() + 2000;
	while (lb_int(lb_stats(h), "waiters") != 2 && lb_now_ms() < deadline)
		lb_sleep_ms(10);
	ids[3] = acq_send(w[3], NULL, "pb", NULL, -1, 0);
	lb_expect_silent(w[3], 300, "a waiter within the limit");
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 3);

	/* the queue is served in order: w1, w2, v, w3 */
	cr_assert_eq(lb_release(h, hl), 0);
	lb_client *order[] = {w[1], w[2], v, w[3]};
	json_t *oid[] = {ids[1], ids[2], vid, ids[3]};
	for (int k = 0; k < 4; k++) {
		json_t *g = lb_wait_response(order[k], oid[k], 3000);
		expect_acquired(g, "pb", 1);
		cr_assert_eq(lb_release(order[k], lb_str(g, "lease")), 0);
	}
	lb_expect_no_queue(r, h, "pb", 1000, false);
	lb_end();
}

LB_TEST(wait, limit_queue_per_lock_across_brokers, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, "--max-queue", "3", NULL);
	lb_broker *b = lb_broker_start(r, "--max-queue", "3", NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w0 = lb_connect(a, LB_TCP);
	lb_client *w1 = lb_connect(a, LB_UNIX);
	lb_client *w2 = lb_connect(b, LB_TCP);
	lb_client *w3 = lb_connect(b, LB_UNIX);
	const char *hl = lb_must_acquire(h, "pq", 30000);

	json_t *i0 = acq_send(w0, NULL, "pq", NULL, 800, 0);
	lb_sleep_ms(20); /* arrival order known */
	json_t *i1 = acq_send(w1, NULL, "pq", NULL, -1, 0);
	lb_sleep_ms(20);
	json_t *i2 = acq_send(w2, NULL, "pq", NULL, -1, 0);
	lb_wait_waiters(h, "pq", 3, 2000);
	lb_expect_err(lb_wait_response(w3, acq_send(w3, NULL, "pq", NULL, -1, 0), 2000),
	              "limit_exceeded");
	lb_expect_err(lb_wait_response(h, acq_send(h, NULL, "pq", "h2", 500, 0), 2000),
	              "limit_exceeded");
	/* another lock is not limited by this one's queue */
	lb_must_acquire(h, "pq-other", 30000);
	json_t *io = acq_send(w3, NULL, "pq-other", NULL, 200, 0);
	lb_expect_err(lb_wait_response(w3, io, 2000), "timeout");
	/* wait_ms 0 never queues: busy is timeout, not limit_exceeded */
	lb_expect_err(lb_try_acquire(w3, "pq", 1000), "timeout");
	/* w0 times out: room for one */
	lb_expect_err(lb_wait_response(w0, i0, 3000), "timeout");
	json_t *i3 = acq_send(w3, NULL, "pq", NULL, -1, 0);
	lb_wait_waiters(h, "pq", 3, 2000);
	lb_expect_silent(w3, 100, "w3 waits");

	cr_assert_eq(lb_release(h, hl), 0);
	lb_client *order[] = {w1, w2, w3};
	json_t *oid[] = {i1, i2, i3};
	for (int k = 0; k < 3; k++) {
		json_t *g = lb_wait_response(order[k], oid[k], 3000);
		expect_acquired(g, "pq", 1);
		cr_assert_eq(lb_release(order[k], lb_str(g, "lease")), 0);
	}
	lb_expect_no_queue(r, h, "pq", 1000, false);
	lb_end();
}

/* ---- nothing is left behind ------------------------------------------------- */

LB_TEST(wait, no_queue_entries_after_everything_ended, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *c[8];
	json_t *ids[8];
	const char *hl = lb_must_acquire(h, "nl", 30000);

	/* eight waiters on both brokers; each ends a different way */
	for (int k = 0; k < 8; k++) {
		c[k] = lb_connect(k % 2 ? b : a, k % 3 ? LB_TCP : LB_UNIX);
		ids[k] = acq_send(c[k], json_integer(100 + k), "nl", NULL, k < 2 ? 400 : -1, 0);
		lb_sleep_ms(20); /* arrival order known */
	}
	lb_wait_waiters(h, "nl", 8, 2000);
	/* 0, 1: timeout */
	lb_expect_err(lb_wait_response(c[0], ids[0], 3000), "timeout");
	lb_expect_err(lb_wait_response(c[1], ids[1], 3000), "timeout");
	/* 2, 3: cancelled */
	for (int k = 2; k < 4; k++) {
		json_t *resp = lb_call(c[k], "{s:s, s:i}", "op", "cancel", "target", 100 + k);
		cr_assert(lb_bool(resp, "cancelled"), "%s", lb_dump(resp));
		lb_expect_err(lb_wait_response(c[k], ids[k], 2000), "cancelled");
	}
	/* 4, 5: disconnect while waiting */
	lb_close(c[4]);
	lb_close(c[5]);
	lb_wait_waiters(h, "nl", 2, 2000);
	/* 6: granted, released; 7: granted, disconnects while holding */
	cr_assert_eq(lb_release(h, hl), 0);
	json_t *g = lb_wait_response(c[6], ids[6], 2000);
	expect_acquired(g, "nl", 1);
	cr_assert_eq(lb_release(c[6], lb_str(g, "lease")), 0);
	expect_acquired(lb_wait_response(c[7], ids[7], 2000), "nl", 1);
	lb_close(c[7]);
	int64_t deadline = lb_now_ms() + 1000;
	while (strcmp(lb_str(lb_inspect(h, "nl"), "state"), "free") != 0 && lb_now_ms() < deadline)
		lb_sleep_ms(10);
	lb_expect_free(h, "nl");
	lb_expect_no_queue(r, h, "nl", 1000, false);
	cr_assert_eq(lb_int(lb_stats(h), "waiters"), 0);
	lb_client *ob = lb_connect(b, LB_TCP);
	cr_assert_eq(lb_int(lb_stats(ob), "waiters"), 0);
	/* what is left of the lock expires */
	lb_redis_assert_lock_keys_expire(r, "lb:", "nl");
	lb_end();
}

/* Asserts that the broker's log has no "assertion failed" (an invariant
 * the broker checks at exit only logs it). Call after lb_end. */
static void expect_no_failed_assertion(lb_broker *b)
{
	FILE *f = fopen(lb_broker_log(b), "r");
	char line[4096];
	cr_assert_not_null(f, "cannot read %s", lb_broker_log(b));
	while (fgets(line, sizeof(line), f))
		cr_expect_null(strstr(line, "assertion failed"), "broker log: %s", line);
	fclose(f);
}

/* ---- broker shutdown with waiters ------------------------------------------- */

LB_TEST(wait, sigterm_answers_pending_waiters_shutting_down, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	lb_must_acquire(h, "sd", 30000);
	json_t *i1 = acq_send(w, NULL, "sd", "o1", -1, 0);
	json_t *i2 = acq_send(w, NULL, "sd", "o2", 5000, 0);
	lb_wait_waiters(h, "sd", 2, 2000);

	/* b stops (and must exit 0) while its waiters are pending */
	lb_broker_stop(b);
	json_t *ev = lb_next_event(w, 1000);
	cr_assert_not_null(ev, "no shutdown event");
	cr_assert_str_eq(lb_str(ev, "event"), "shutdown", "%s", lb_dump(ev));
	lb_expect_err(lb_wait_response(w, i1, 1000), "shutting_down");
	lb_expect_err(lb_wait_response(w, i2, 1000), "shutting_down");
	/* its queue entries are gone with it */
	lb_wait_waiters(h, "sd", 0, 2000);
	json_t *in = lb_inspect(h, "sd");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	lb_expect_no_queue(r, h, "sd", 1000, false);
	lb_end();
	expect_no_failed_assertion(a);
	expect_no_failed_assertion(b);
}

LB_TEST(wait, stop_right_after_waiting_clients_disconnect, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w[3];
	lb_must_acquire(h, "sc", 30000);
	for (int k = 0; k < 3; k++) {
		w[k] = lb_connect(b, k ? LB_UNIX : LB_TCP);
		acq_send(w[k], NULL, "sc", NULL, k == 2 ? 10000 : -1, 0);
	}
	lb_wait_waiters(h, "sc", 3, 2000);
	/* lb_end closes every client, then stops the broker at once and
	 * asserts it exits with status 0 (withdraws and timers in flight). */
	lb_end();
	expect_no_failed_assertion(b);
}
