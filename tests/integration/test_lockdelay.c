/*
 * Lock-delay on one Redis (issue 27, point 3): a lease with lock_delay_ms
 * that ends without a release (its session ended, its broker died and its
 * TTL ran out) keeps every new holder out for lock_delay_ms from the
 * moment it ended in Redis; a release, or max_hold_ms running out, frees
 * the lock at once. Waiters keep their place and are granted when the
 * delay ends; inspect and watch show "delayed" with delay_ms.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <string.h>

#define DELAY_MS 1500

static json_t *acquire_delayed(lb_client *c, const char *lock, int ttl_ms, int delay_ms)
{
	return lb_call(c, "{s:s, s:s, s:i, s:i, s:i}", "op", "acquire", "lock", lock, "ttl_ms", ttl_ms,
	               "wait_ms", 0, "lock_delay_ms", delay_ms);
}

static json_t *send_wait(lb_client *c, const char *lock)
{
	return lb_send_req(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", lock, "ttl_ms", 30000);
}

static void until_waiting(lb_client *c, const char *lock, int n)
{
	for (int k = 0; k < 200 && lb_int(lb_inspect(c, lock), "waiters") < n; k++)
		lb_sleep_ms(10);
	cr_assert_eq(lb_int(lb_inspect(c, lock), "waiters"), n);
}

/* The holder's session ends: the lock is delayed, then its waiters are
 * granted in their order, the first about DELAY_MS after the end. */
LB_TEST(lockdelay, a_session_that_ends_holding_keeps_the_lock_delayed, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b1, LB_TCP), *w1 = lb_connect(b2, LB_TCP), *w2 = lb_connect(b2, LB_TCP);
	lb_client *o = lb_connect(b1, LB_TCP);

	lb_expect_ok(acquire_delayed(h, "ld", 30000, DELAY_MS));
	json_t *id1 = send_wait(w1, "ld");
	until_waiting(o, "ld", 1);
	json_t *id2 = send_wait(w2, "ld");
	until_waiting(o, "ld", 2);
	int64_t t0 = lb_now_ms();
	lb_close(h);

	lb_sleep_ms(300);
	json_t *in = lb_inspect(o, "ld");
	cr_assert_str_eq(lb_str(in, "state"), "delayed", "%s", lb_dump(in));
	cr_assert(lb_int(in, "delay_ms") > 0 && lb_int(in, "delay_ms") <= DELAY_MS, "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 0);
	cr_assert_eq(lb_int(in, "waiters"), 2, "waiters keep their place: %s", lb_dump(in));
	lb_expect_err(lb_call(o, "{s:s, s:s, s:i, s:b}", "op", "acquire", "lock", "ld", "wait_ms", 0,
	                      "fair", 0),
	              "timeout");

	json_t *g1 = lb_wait_response(w1, id1, DELAY_MS + 5000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_ok(g1);
	fprintf(stderr, "lockdelay: the first waiter granted %lld ms after the holder's session ended "
	                "(lock_delay_ms %d)\n", (long long)took, DELAY_MS);
	cr_assert_geq(took, DELAY_MS - 100, "granted %lld ms after the end", (long long)took);
	cr_assert_lt(took, DELAY_MS + 1500, "granted %lld ms after the end", (long long)took);
	/* the second in its place, behind the first */
	lb_sleep_ms(300);
	cr_assert_eq(lb_int(lb_inspect(o, "ld"), "waiters"), 1, "the second waiter passed the first");
	lb_release(w1, lb_str(g1, "lease"));
	lb_expect_ok(lb_wait_response(w2, id2, 5000));
	lb_end();
}

/* A release frees at once; so does max_hold_ms (the broker releases it
 * itself). */
LB_TEST(lockdelay, a_release_or_max_hold_frees_at_once, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_TCP);
	json_t *g = acquire_delayed(h, "ldr", 30000, 10000);

	lb_expect_ok(g);
	json_t *id = send_wait(w, "ldr");
	until_waiting(h, "ldr", 1);
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lb_str(g, "lease")), 0);
	json_t *gw = lb_wait_response(w, id, 3000);
	lb_expect_ok(gw);
	cr_assert_lt(lb_now_ms() - t0, 1000);
	lb_release(w, lb_str(gw, "lease"));

	g = lb_call(h, "{s:s, s:s, s:i, s:i, s:i, s:i}", "op", "acquire", "lock", "ldm", "ttl_ms", 30000,
	            "wait_ms", 0, "lock_delay_ms", 10000, "max_hold_ms", 700);
	lb_expect_ok(g);
	id = send_wait(w, "ldm");
	json_t *ev = lb_next_event(h, 3000);
	cr_assert(ev && strcmp(lb_str(ev, "reason"), "max_hold") == 0, "%s", ev ? lb_dump(ev) : "none");
	lb_expect_ok(lb_wait_response(w, id, 3000));
	lb_end();
}

/* The holder's broker dies (SIGKILL): its lease runs out in Redis, and
 * the delay still holds there, counted from that moment. A watcher sees
 * the lock delayed, then free. */
LB_TEST(lockdelay, with_the_holders_broker_dead_the_delay_holds_in_redis, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b1, LB_TCP), *w = lb_connect(b2, LB_TCP), *o = lb_connect(b2, LB_TCP);

	lb_expect_ok(acquire_delayed(h, "ldk", 1000, DELAY_MS));
	json_t *wa = lb_call(o, "{s:s, s:s}", "op", "watch", "lock", "ldk");
	lb_expect_ok(wa);
	json_t *id = send_wait(w, "ldk");
	until_waiting(o, "ldk", 1);
	int64_t t0 = lb_now_ms();
	lb_broker_kill9(b1);

	json_t *g = lb_wait_response(w, id, 1000 + DELAY_MS + 5000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_ok(g);
	fprintf(stderr, "lockdelay: holder's broker killed (ttl 1000, lock_delay_ms %d): the waiter "
	                "granted %lld ms after the kill\n", DELAY_MS, (long long)took);
	cr_assert_geq(took, DELAY_MS, "granted before the delay ran out: %lld ms", (long long)took);
	cr_assert_lt(took, 1000 + DELAY_MS + 1500, "%lld ms", (long long)took);

	bool delayed = false, regranted = false;
	for (json_t *ev; (ev = lb_next_event(o, 1500)) != NULL;) {
		cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
		if (strcmp(lb_str(ev, "state"), "delayed") == 0) {
			delayed = true;
			cr_assert(lb_int(ev, "delay_ms") > 0, "%s", lb_dump(ev));
		}
		if (delayed && strcmp(lb_str(ev, "state"), "exclusive") == 0)
			regranted = true;
	}
	cr_assert(delayed && regranted, "the watch did not show the delay, then the grant");
	lb_end();
}

LB_TEST(lockdelay, bad_lock_delays_are_refused, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *h = lb_call(c, "{s:s}", "op", "hello");
	bool listed = false;

	for (size_t k = 0; k < json_array_size(lb_get(h, "features")); k++)
		listed |= strcmp(json_string_value(json_array_get(lb_get(h, "features"), k)), "lock_delay") == 0;
	cr_assert(listed, "%s", lb_dump(h));
	lb_expect_err(acquire_delayed(c, "bad", 30000, -1), "invalid_argument");
	lb_expect_err(acquire_delayed(c, "bad", 30000, 600001), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:s}", "op", "acquire", "lock", "bad", "lock_delay_ms", "1"),
	              "invalid_argument");
	json_t *g = acquire_delayed(c, "bad", 30000, 600000);
	lb_expect_ok(g);
	/* a plain release of the longest delay frees at once */
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	lb_expect_free(c, "bad");
	lb_expect_ok(lb_try_acquire(c, "bad", 30000));
	lb_end();
}
