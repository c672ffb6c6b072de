/*
 * test_latecopy.c - a copy of an acquire that runs late (issue 26, point
 * 12): the broker's connection to Redis stalls with a try on it (a
 * network that holds the bytes back), the broker gives up on it after its
 * command timeout, answers the try `timeout` and gives back whatever it
 * may have taken; then the stalled bytes reach Redis. Before the fix that
 * copy granted the lock to an id nobody holds any more: held for nobody
 * until its TTL. Now the give-back marks the id as ended in Redis and the
 * late copy is refused.
 *
 * The stall is made by a TCP proxy between the broker and Redis
 * (rproxy.h): the bytes the broker sends on its connection are kept back,
 * and delivered once the broker has moved on.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/rproxy.h"

#ifdef __clang__
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* inspect, once the broker serves again (it reconnects after giving up
 * on the stalled connection). */
static json_t *inspect_served(lb_client *c, const char *lock)
{
	for (int64_t end = lb_now_ms() + 5000;;) {
		json_t *in = lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", lock);
		if (!lb_is_err(in, "unavailable"))
			return in;
		cr_assert_lt(lb_now_ms(), end, "the broker does not serve again: %s", lb_dump(in));
		lb_sleep_ms(20);
	}
}

static int port_of(const lb_redis *r)
{
	return atoi(strrchr(lb_redis_url(r), ':') + 1);
}

/* The broker's try stalls on the way; the broker answers it timeout and
 * gives back what it may have taken; then the stalled copy runs. */
LB_TEST(latecopy, a_try_that_runs_after_its_give_back_takes_nothing, 60)
{
	lb_redis *r = lb_redis_start(true);
	char url[64];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rproxy_start(port_of(r)));
	/* One connection, so the try goes where the stall is; the canary
	 * quiet meanwhile (a stalled check would look like a data loss). */
	lb_broker *b = lb_broker_start_url(url, "--pool", "1", "--canary-interval-ms", "60000", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);

	rproxy_hold(NULL);
	int64_t t0 = lb_now_ms();
	json_t *g = lb_try_acquire(c, "late", 30000);
	lb_expect_err(g, "timeout"); /* the broker gave up on its stalled connection */
	fprintf(stderr, "latecopy: the stalled try answered %s after %lld ms\n",
	        lb_str(g, "error.code"), (long long)(lb_now_ms() - t0));
	/* the give-back ran, on a new connection */
	cr_assert_str_eq(lb_str(inspect_served(o, "late"), "state"), "free");
	rproxy_release(); /* the stalled copy reaches Redis now */
	for (int64_t end = lb_now_ms() + 1000; lb_now_ms() < end; lb_sleep_ms(50)) {
		json_t *in = inspect_served(o, "late");
		cr_assert_str_eq(lb_str(in, "state"), "free",
		                 "the late copy took the lock for nobody: %s", lb_dump(in));
	}
	json_t *t = lb_try_acquire(o, "late", 30000);
	lb_expect_ok(t);
	lb_release(o, lb_str(t, "lease"));
	lb_end();
	rproxy_stop();
}

/* The connection carrying a try drops before its reply (the broker sends
 * the try again on a new one, where it is granted); the holder works and
 * releases; then the first copy, kept back all along, reaches Redis. It
 * must not take the lock again for the lease that ended. */
LB_TEST(latecopy, a_granted_try_whose_first_copy_runs_after_its_release_takes_nothing, 60)
{
	lb_redis *r = lb_redis_start(true);
	char url[64];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rproxy_start(port_of(r)));
	lb_broker *b = lb_broker_start_url(url, "--pool", "1", "--canary-interval-ms", "60000", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);

	rproxy_hold(NULL);
	json_t *id = lb_acq_send(c, "late2", LB_AO(.wait_ms = 0, .ttl_ms = 30000));
	lb_sleep_ms(100); /* the try is kept back by the proxy */
	rproxy_cut(NULL); /* the broker's side drops: it sends the try again */
	json_t *g = lb_wait_response(c, id, 5000);
	lb_expect_ok(g); /* granted by the copy sent again */
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	cr_assert_str_eq(lb_str(inspect_served(o, "late2"), "state"), "free");
	rproxy_release(); /* the first copy reaches Redis now */
	for (int64_t end = lb_now_ms() + 1000; lb_now_ms() < end; lb_sleep_ms(50)) {
		json_t *in = inspect_served(o, "late2");
		cr_assert_str_eq(lb_str(in, "state"), "free",
		                 "the late copy took the lock for nobody: %s", lb_dump(in));
	}
	lb_expect_ok(lb_try_acquire(o, "late2", 30000));
	lb_end();
	rproxy_stop();
}
