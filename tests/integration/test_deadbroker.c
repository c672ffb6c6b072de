/*
 * test_deadbroker.c - a broker killed with its waiters queued ahead of a
 * live broker's waiter: the lock must not stay free for the live waiter
 * more than 2 s after the dead broker's waiters would have had it (their
 * queue entries keep their place until their heartbeat deadline, 5 s, so
 * they held the lock for nobody, one broker after another).
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <string.h>

#define FREE_WITH_WAITER_MAX_MS 2000

static json_t *queue_on(lb_broker *b, const char *lock, const char *owner)
{
	lb_client *c = lb_connect(b, LB_TCP);

	return lb_send_req(c, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", lock, "owner", owner,
	                   "ttl_ms", 3000);
}

/* Three of the dead broker's waiters at the head, then a live one: the
 * holder releases right after the kill, and the live waiter is granted
 * within 2 s. */
LB_TEST(deadbroker, a_live_waiter_behind_a_dead_brokers_waiters_is_granted_soon, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL),
	          *b3 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b1, LB_TCP), *w = lb_connect(b2, LB_TCP);
	const char *lease = lb_must_acquire(h, "dead", 30000);
	json_t *id, *g;
	int64_t t0, took;

	for (int k = 0; k < 3; k++) {
		char owner[16];
		snprintf(owner, sizeof(owner), "d%d", k);
		queue_on(b3, "dead", owner);
		lb_wait_waiters(h, "dead", k + 1, 5000);
	}
	id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", "dead", "ttl_ms", 3000);
	lb_wait_waiters(h, "dead", 4, 5000);
	lb_broker_kill9(b3);
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lease), 0);
	g = lb_wait_response(w, id, 10000);
	took = lb_now_ms() - t0;
	lb_expect_ok(g);
	cr_log_info("a live waiter behind 3 waiters of a killed broker: granted %lld ms after the "
	            "lock became free", (long long)took);
	fprintf(stderr, "deadbroker: granted %lld ms after the release (behind a killed broker)\n",
	        (long long)took);
	cr_assert_lt(took, FREE_WITH_WAITER_MAX_MS + 300, "the lock stayed free %lld ms", (long long)took);
	cr_assert_eq(lb_inspect_waiters(h, "dead"), 0, "the dead broker's waiters are still queued");
	lb_release(w, lb_str(g, "lease"));
	lb_end();
}

/* The killed broker also held the lock (ttl 1500): it ends by its TTL,
 * its waiters behind it are dropped, and the live waiter is granted
 * within 2 s of that expiry. */
LB_TEST(deadbroker, a_dead_brokers_lease_and_waiters_give_way_soon, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b2 = lb_broker_start(r, NULL), *b3 = lb_broker_start(r, NULL);
	lb_client *x = lb_connect(b3, LB_TCP), *w = lb_connect(b2, LB_TCP);
	json_t *a, *id, *g;
	int64_t t0, took;

	a = lb_call(x, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "dl", "ttl_ms", 1500, "wait_ms", 0);
	lb_expect_ok(a);
	queue_on(b3, "dl", "d0");
	queue_on(b3, "dl", "d1");
	lb_wait_waiters(w, "dl", 2, 5000);
	id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", "dl", "ttl_ms", 3000);
	lb_wait_waiters(w, "dl", 3, 5000);
	lb_broker_kill9(b3);
	t0 = lb_now_ms();
	g = lb_wait_response(w, id, 10000);
	took = lb_now_ms() - t0;
	lb_expect_ok(g);
	fprintf(stderr, "deadbroker: granted %lld ms after the kill (lease ttl 1500)\n", (long long)took);
	cr_assert_lt(took, 1500 + FREE_WITH_WAITER_MAX_MS + 300, "granted %lld ms after the kill",
	             (long long)took);
	lb_release(w, lb_str(g, "lease"));
	lb_end();
}
