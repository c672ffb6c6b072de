/*
 * test_dataloss.c - Redis loses its data under the brokers: FLUSHALL,
 * FLUSHDB, and redis-server killed and restarted empty. Another broker can
 * grant the lock at once, so the holder must hear `lost` (`gone`) within a
 * second, whatever its TTL (its next renewal would come up to ttl/3 later),
 * `leases` must stop listing it, and fences must stay monotonic.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define LOST_WITHIN_MS 1000
#define SLACK_MS 1000 /* generous: the machine is shared */

/* Waits for lost(gone) of lease on c; returns ms since t0. */
static int64_t lost_after(lb_client *c, const char *lease, int64_t t0, int max_ms)
{
	json_t *ev = lb_next_event(c, max_ms);

	cr_assert_not_null(ev, "no lost event within %d ms", max_ms);
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "gone", "%s", lb_dump(ev));
	return lb_now_ms() - t0;
}

static void expect_no_leases(lb_client *c)
{
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");

	lb_expect_ok(ls);
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "still listed: %s", lb_dump(ls));
}

/* A holder on broker A (ttl 30 s: next renewal in 10 s), a waiter on
 * broker B; Redis loses everything with flush ("FLUSHALL" or "FLUSHDB"). */
static void flush_case(const char *flush)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *ba = lb_broker_start(r, NULL), *bb = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(ba, LB_TCP), *w = lb_connect(bb, LB_TCP);
	json_t *g = lb_call(a, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "fl", "ttl_ms", 30000,
	                    "wait_ms", 0);
	json_t *id, *wg;
	int64_t t0, took;

	lb_expect_ok(g);
	lb_sleep_ms(1200); /* the canary has been checked at least once */
	id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", "fl", "ttl_ms", 30000);
	lb_wait_waiters(a, "fl", 1, 5000);
	t0 = lb_now_ms();
	lb_redis_cmd(r, flush);
	took = lost_after(a, lb_str(g, "lease"), t0, LOST_WITHIN_MS + SLACK_MS);
	fprintf(stderr, "dataloss: %s: the holder heard lost(gone) %lld ms after it\n", flush,
	        (long long)took);
	expect_no_leases(a);
	/* the waiter is queued again and gets the lock; its fence is higher */
	wg = lb_wait_response(w, id, 5000);
	lb_expect_ok(wg);
	cr_assert_gt(lb_int(wg, "fence"), lb_int(g, "fence"));
	lb_expect_err(lb_call(a, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease")), "not_held");
	lb_release(w, lb_str(wg, "lease"));
	lb_end();
}

LB_TEST(dataloss, flushall_is_noticed_within_a_second, 40) { flush_case("FLUSHALL"); }
LB_TEST(dataloss, flushdb_is_noticed_within_a_second, 40) { flush_case("FLUSHDB"); }

/* redis-server killed and restarted empty on the same socket: the holder
 * hears lost(gone) right after the broker is back on it (a new run_id),
 * not at its next renewal or at its TTL. */
LB_TEST(dataloss, a_restart_empty_is_noticed_on_reconnect, 40)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *ba = lb_broker_start(r, NULL), *bb = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(ba, LB_TCP), *w = lb_connect(bb, LB_TCP);
	json_t *g = lb_call(a, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "rs", "ttl_ms", 30000,
	                    "wait_ms", 0);
	json_t *id, *wg;
	int64_t t0, took;

	lb_expect_ok(g);
	id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", "rs", "ttl_ms", 30000);
	lb_wait_waiters(a, "rs", 1, 5000);
	cr_assert_eq(kill(lb_redis_pid(r), SIGKILL), 0);
	lb_redis_restart(r);
	t0 = lb_now_ms();
	took = lost_after(a, lb_str(g, "lease"), t0, LOST_WITHIN_MS + 2 * SLACK_MS);
	fprintf(stderr, "dataloss: restart empty: lost(gone) %lld ms after Redis was back\n",
	        (long long)took);
	expect_no_leases(a);
	wg = lb_wait_response(w, id, 8000);
	lb_expect_ok(wg);
	cr_assert_gt(lb_int(wg, "fence"), lb_int(g, "fence"));
	lb_release(w, lb_str(wg, "lease"));
	lb_end();
}

/* A lease whose data survived (nothing lost) stays held and listed when a
 * check runs: the canary does not cry wolf. */
LB_TEST(dataloss, nothing_lost_nothing_reported, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(c, "ok", 30000);
	json_t *ev, *ls;

	lb_redis_cmd(r, "DEL lb:{other}");
	ev = lb_next_event(c, 3000);
	cr_assert_null(ev, "%s", lb_dump(ev));
	ls = lb_call(c, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1);
	lb_release(c, lease);
	lb_end();
}

/* A failover to a replica that missed the last writes, simulated on one
 * Redis: the replica's data is the master's of a moment ago, so it lacks
 * the lease granted since and holds an older canary value. The broker
 * notices within a second. */
LB_TEST(dataloss, a_stale_replica_is_noticed_within_a_second, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *h = lb_call(c, "{s:s}", "op", "hello"), *g;
	char key[128], old[128];
	redisReply *v;
	int64_t t0, took;

	snprintf(key, sizeof(key), "lb:broker:{%s}:canary", lb_str(h, "broker"));
	lb_sleep_ms(1300);
	v = lb_redis_cmd(r, "GET %s", key);
	cr_assert_eq(v->type, REDIS_REPLY_STRING, "no canary key %s", key);
	snprintf(old, sizeof(old), "%s", v->str);
	lb_sleep_ms(1200); /* the canary has moved on since */
	g = lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "st", "ttl_ms", 30000, "wait_ms", 0);
	lb_expect_ok(g);
	/* the "replica": everything since `old` is missing */
	lb_redis_del_lock_keys(r, "lb:", "st");
	lb_redis_cmd(r, "SET %s %s", key, old);
	t0 = lb_now_ms();
	took = lost_after(c, lb_str(g, "lease"), t0, LOST_WITHIN_MS + SLACK_MS);
	fprintf(stderr, "dataloss: stale replica: lost(gone) %lld ms after the switch\n", (long long)took);
	expect_no_leases(c);
	lb_end();
}
