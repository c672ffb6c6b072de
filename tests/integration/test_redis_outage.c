/*
 * Redis outages: fail fast with "unavailable", report "redis":"down", serve
 * again without a broker restart when Redis is back; a lease whose renewals
 * fail is reported lost (redis_unavailable) within its TTL.
 */
#include "tests/integration/harness.h"

#include <string.h>

/* Release; once the broker is back on Redis (it may answer unavailable until
 * it has reconnected). */
static json_t *release_when_up(lb_client *c, const char *lease)
{
    json_t *rl;
    int64_t deadline = lb_now_ms() + 5000;
    do {
        rl = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
        if (!lb_is_err(rl, "unavailable"))
            break;
        lb_sleep_ms(100);
    } while (lb_now_ms() < deadline);
    return rl;
}

static void outage(bool redis_tcp)
{
    lb_redis *r = lb_redis_start(redis_tcp);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *lease = lb_must_acquire(c, "ou", 10000);
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));

    lb_redis_stop(r);
    int64_t t0 = lb_now_ms();
    json_t *a = lb_call_timeout(c, 5000, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "ou",
                                "wait_ms", 0, "ttl_ms", 10000);
    int64_t el = lb_now_ms() - t0;
    lb_expect_err(a, "unavailable");
    cr_assert(el <= 1500, "unavailable took %lld ms", (long long)el);
    /* fail fast from now on */
    t0 = lb_now_ms();
    lb_expect_err(lb_try_acquire(c, "ou2", 10000), "unavailable");
    cr_assert(lb_now_ms() - t0 <= 1000, "second acquire took %lld ms", (long long)(lb_now_ms() - t0));
    /* stats says down (it may take the broker a moment to notice) */
    int64_t deadline = lb_now_ms() + 2000;
    json_t *st;
    for (;;) {
        st = lb_stats(c);
        if (strcmp(lb_str(st, "redis"), "down") == 0 || lb_now_ms() > deadline)
            break;
        lb_sleep_ms(50);
    }
    cr_assert_str_eq(lb_str(st, "redis"), "down", "%s", lb_dump(st));
    /* ops that need no Redis still work */
    lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    lb_expect_ok(ls);

    /* Redis comes back on the same socket / port */
    lb_redis_restart(r);
    t0 = lb_now_ms();
    json_t *g;
    for (;;) {
        g = lb_try_acquire(c, "ou", 10000);
        if (lb_is_ok(g) || lb_now_ms() - t0 > 5000)
            break;
        cr_assert(lb_is_err(g, "unavailable"), "while reconnecting: %s", lb_dump(g));
        lb_sleep_ms(100);
    }
    lb_expect_ok(g);
    cr_assert(lb_now_ms() - t0 <= 5000);
    st = lb_stats(c);
    cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease")));
    lb_expect_free(c, "ou");
    lb_end();
}

LB_TEST(outage, redis_unix, 60) { outage(false); }
LB_TEST(outage, redis_tcp, 60) { outage(true); }

LB_TEST(outage, lease_lost_redis_unavailable, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *lease = lb_must_acquire(c, "lr", 1000);
    lb_redis_stop(r);
    int64_t t0 = lb_now_ms();
    json_t *ev = lb_next_event(c, 4000);
    int64_t el = lb_now_ms() - t0;
    cr_assert(ev != NULL, "no lost event while Redis is down");
    cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
    cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s", lb_dump(ev));
    cr_assert_str_eq(lb_str(ev, "reason"), "redis_unavailable", "%s", lb_dump(ev));
    /* no later than the TTL after the last successful renewal was sent */
    cr_assert(el <= 1500, "lost after %lld ms, ttl is 1000", (long long)el);
    lb_redis_restart(r);
    lb_expect_err(release_when_up(c, lease), "not_held");
    lb_end();
}

LB_TEST(outage, redis_restarted_empty, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *a = lb_try_acquire(c, "re", 3000);
    lb_expect_ok(a);
    const char *lease = lb_str(a, "lease");
    lb_redis_restart(r); /* comes back without data */
    json_t *ev = lb_next_event(c, 6000);
    cr_assert(ev != NULL, "no lost event after Redis lost the lease");
    cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
    cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s", lb_dump(ev));
    const char *reason = lb_str(ev, "reason");
    cr_assert(strcmp(reason, "gone") == 0 || strcmp(reason, "redis_unavailable") == 0, "%s",
              lb_dump(ev));
    lb_expect_err(release_when_up(c, lease), "not_held");
    json_t *g = lb_acquire_within(c, "re", 10000, 5000);
    lb_expect_ok(g);
    cr_assert(lb_int(g, "fence") > lb_int(a, "fence"), "fence went back after Redis lost it: %s",
              lb_dump(g));
    lb_end();
}
