/*
 * Session end: disconnect releases at once (seen from another broker on the
 * same Redis), keepalive, a killed broker's leases ending by TTL, and the
 * shutdown of a broker with sessions still open.
 */
#include "tests/integration/harness.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

LB_TEST(session, disconnect_releases_at_once, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b1 = lb_broker_start(r, NULL);
    lb_broker *b2 = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b1, LB_TCP);
    lb_client *c = lb_connect(b2, LB_TCP);
    lb_must_acquire(a, "dc", 30000);
    lb_must_acquire(a, "dc2", 30000);
    lb_expect_err(lb_try_acquire(c, "dc", 30000), "timeout");
    lb_close(a);
    int64_t t0 = lb_now_ms();
    json_t *g = lb_acquire_within(c, "dc", 30000, 1500);
    int64_t el = lb_now_ms() - t0;
    lb_expect_ok(g);
    cr_assert(el <= 1500, "acquired %lld ms after the holder disconnected", (long long)el);
    lb_expect_free(c, "dc2");
    lb_end();
}

LB_TEST(session, disconnect_over_unix_releases, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b, LB_UNIX);
    lb_client *c = lb_connect(b, LB_UNIX);
    lb_must_acquire(a, "dcu", 30000);
    lb_call(a, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "dcu", "wait_ms", 0, "ttl_ms",
            30000); /* count 2: still released on disconnect */
    lb_close(a);
    json_t *g = lb_acquire_within(c, "dcu", 30000, 1500);
    lb_expect_ok(g);
    json_t *st = lb_stats(c);
    cr_assert_eq(lb_int(st, "leases"), 1, "%s", lb_dump(st));
    lb_end();
}

LB_TEST(session, keepalive_closes_silent_session, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b, LB_TCP);
    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_ok(lb_call(a, "{s:s, s:i}", "op", "hello", "keepalive_ms", 500));
    lb_must_acquire(a, "ka", 30000);
    int64_t t0 = lb_now_ms(); /* the broker last heard from a before this */
    bool closed = lb_wait_closed(a, 4000);
    int64_t el = lb_now_ms() - t0;
    cr_assert(closed, "a silent session with keepalive_ms 500 was not closed within 4 s");
    cr_assert(el >= 400 && el <= 2500, "closed %lld ms after the last request, want ~500..1500",
              (long long)el);
    json_t *g = lb_acquire_within(c, "ka", 30000, 1000);
    lb_expect_ok(g);
    lb_end();
}

LB_TEST(session, keepalive_ping_keeps_session, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b, LB_UNIX);
    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_ok(lb_call(a, "{s:s, s:i}", "op", "hello", "keepalive_ms", 500));
    const char *lease = lb_must_acquire(a, "kp", 30000);
    int64_t end = lb_now_ms() + 3000;
    while (lb_now_ms() < end) {
        lb_sleep_ms(200);
        lb_expect_ok(lb_call(a, "{s:s}", "op", "ping"));
    }
    cr_assert(!lb_is_closed(a));
    lb_expect_err(lb_try_acquire(c, "kp", 30000), "timeout");
    json_t *ls = lb_call(a, "{s:s}", "op", "leases");
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
    lb_expect_ok(lb_call(a, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_end();
}

LB_TEST(session, keepalive_range, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b, LB_TCP);
    lb_expect_err(lb_call(a, "{s:s, s:i}", "op", "hello", "keepalive_ms", 499), "invalid_argument");
    lb_expect_err(lb_call(a, "{s:s, s:i}", "op", "hello", "keepalive_ms", 600001),
                  "invalid_argument");
    lb_expect_err(lb_call(a, "{s:s, s:s}", "op", "hello", "keepalive_ms", "500"),
                  "invalid_argument");
    lb_expect_ok(lb_call(a, "{s:s, s:i}", "op", "hello", "keepalive_ms", 600000));
    lb_end();
}

LB_TEST(session, killed_broker_leases_end_by_ttl, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b1 = lb_broker_start(r, NULL);
    lb_broker *b2 = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b1, LB_TCP);
    lb_client *c = lb_connect(b2, LB_TCP);
    json_t *acq = lb_try_acquire(a, "k9", 1000);
    lb_expect_ok(acq);
    lb_sleep_ms(300);
    lb_broker_kill9(b1);
    int64_t t0 = lb_now_ms();
    lb_expect_err(lb_try_acquire(c, "k9", 10000), "timeout");
    json_t *g = lb_acquire_within(c, "k9", 10000, 3000);
    int64_t el = lb_now_ms() - t0;
    lb_expect_ok(g);
    cr_assert(el <= 2000, "lock free %lld ms after its broker died (ttl 1000)", (long long)el);
    cr_assert(lb_int(g, "fence") > lb_int(acq, "fence"));
    lb_end();
}

LB_TEST(session, shutdown_event_and_release, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b1 = lb_broker_start(r, NULL);
    lb_broker *b2 = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b1, LB_TCP);
    lb_client *c = lb_connect(b2, LB_TCP);
    lb_must_acquire(a, "sd", 30000);
    lb_broker_stop(b1); /* grace 200 ms; asserts exit status 0 */
    json_t *ev;
    do { /* other events (lost, say) may come too */
        ev = lb_next_event(a, 1000);
        cr_assert(ev != NULL, "no shutdown event");
    } while (strcmp(lb_str(ev, "event"), "shutdown") != 0);
    cr_assert_eq(lb_int(ev, "grace_ms"), 200, "%s", lb_dump(ev));
    lb_expect_closed(a, 1000);
    /* the broker released the session's lease before exiting */
    lb_expect_ok(lb_try_acquire(c, "sd", 30000));
    lb_end();
}

/* The broker's "session closed" line names the client (its hello label)
 * and says how the connection ended: eof (the client closed it: exit,
 * kill -9, close), reset (an RST), keepalive (silent too long). */
LB_TEST(session, the_close_log_names_the_client_and_how_it_ended, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *e = lb_connect(b, LB_TCP), *x = lb_connect(b, LB_UNIX), *k = lb_connect(b, LB_TCP);

    lb_expect_ok(lb_call(e, "{s:s, s:s}", "op", "hello", "client", "closer \"q\""));
    lb_expect_ok(lb_call(x, "{s:s, s:s}", "op", "hello", "client", "resetter"));
    lb_expect_ok(lb_call(k, "{s:s, s:s, s:i}", "op", "hello", "client", "sleeper", "keepalive_ms", 500));
    lb_must_acquire(e, "log-eof", 30000);
    lb_close(e);
    cr_assert(lb_broker_log_wait(b, "client=\"closer ?q?\" ended=eof", 5000),
              "no eof line naming the client (quotes masked) in %s", lb_broker_log(b));
    cr_assert(lb_broker_log_wait(b, "leases_released=1", 5000));

    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    lb_must_acquire(x, "log-reset", 30000);
    /* unread data at close makes an RST over TCP; Unix sockets end with eof */
    setsockopt(lb_client_fd(x), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    lb_close(x);
    cr_assert(lb_broker_log_wait(b, "client=\"resetter\" ended=", 5000));

    cr_assert(lb_broker_log_wait(b, "client=\"sleeper\" ended=keepalive why=\"keepalive\"", 5000),
              "no keepalive line in %s", lb_broker_log(b));
    lb_end();
}

/* An RST (SO_LINGER 0 with the broker's answer unread) is told apart from
 * an orderly close. */
LB_TEST(session, a_reset_connection_is_logged_as_reset, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *x = lb_connect(b, LB_TCP);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    lb_expect_ok(lb_call(x, "{s:s, s:s}", "op", "hello", "client", "resetter"));
    setsockopt(lb_client_fd(x), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    lb_close(x);
    cr_assert(lb_broker_log_wait(b, "client=\"resetter\" ended=reset", 5000),
              "no reset line in %s", lb_broker_log(b));
    lb_end();
}
