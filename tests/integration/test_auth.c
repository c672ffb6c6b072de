/*
 * Shared-secret auth (--auth-file): what works before hello, the order of
 * checks, three failed attempts closing the connection, and the behaviour
 * without a configured secret.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <string.h>

static const char *write_auth_file(const char *content)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/auth", lb_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs(content, f);
    fclose(f);
    return path;
}

static void auth_required(lb_transport t)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--auth-file", write_auth_file("s3cret\n"), NULL);
    lb_client *c = lb_connect(b, t);

    lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
    lb_expect_err(lb_try_acquire(c, "au", 10000), "unauthorized");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", "au"), "unauthorized");
    lb_expect_err(lb_call(c, "{s:s}", "op", "leases"), "unauthorized");
    lb_expect_err(lb_call(c, "{s:s}", "op", "stats"), "unauthorized");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease",
                          "0123456789abcdef0123456789abcdef"),
                  "unauthorized");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease",
                          "0123456789abcdef0123456789abcdef", "ttl_ms", 1000),
                  "unauthorized");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "cancel", "target", "x"), "unauthorized");
    /* order: op name before auth, auth before fields */
    lb_expect_err(lb_call(c, "{s:s}", "op", "nope"), "unknown_op");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "au", "bogus", 1),
                  "unauthorized");
    lb_expect_err(lb_call(c, "{s:s}", "op", "acquire"), "unauthorized");
    /* nothing was touched */
    cr_assert_eq(lb_redis_count_lock_keys(r, "lb:", "au"), 0);

    /* one wrong attempt, then the right one */
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "wrong"), "unauthorized");
    lb_expect_err(lb_try_acquire(c, "au", 10000), "unauthorized");
    json_t *h = lb_call(c, "{s:s, s:s, s:s}", "op", "hello", "auth", "s3cret", "client", "t");
    lb_expect_ok(h);
    (void)lb_str(h, "session");
    const char *lease = lb_must_acquire(c, "au", 10000);
    lb_expect_ok(lb_stats(c));
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));

    /* authentication is per session */
    lb_client *d = lb_connect(b, t);
    lb_expect_err(lb_try_acquire(d, "au", 10000), "unauthorized");
    lb_end();
}

LB_TEST(auth, required_tcp, 60) { auth_required(LB_TCP); }
LB_TEST(auth, required_unix, 60) { auth_required(LB_UNIX); }

LB_TEST(auth, three_failures_close_the_connection, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--auth-file", write_auth_file("s3cret\n"), NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "wrong1"), "unauthorized");
    lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
    /* a missing auth counts too */
    lb_expect_err(lb_call(c, "{s:s}", "op", "hello"), "unauthorized");
    lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
    json_t *id = lb_send_req(c, "{s:s, s:s}", "op", "hello", "auth", "wrong3");
    lb_expect_closed(c, 2000);
    /* if a response came before the close, it was unauthorized */
    for (json_t *m; (m = lb_read_msg(c, 0)) != NULL;) {
        if (json_equal(json_object_get(m, "id"), id))
            lb_expect_err(m, "unauthorized");
    }
    /* a new connection starts afresh and the right secret works */
    lb_client *d = lb_connect(b, LB_TCP);
    lb_expect_ok(lb_call(d, "{s:s, s:s}", "op", "hello", "auth", "s3cret"));
    lb_must_acquire(d, "x", 10000);
    lb_end();
}

LB_TEST(auth, secret_is_file_content_without_one_newline, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--auth-file", write_auth_file("s3cret\r\n"), NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "s3cret\r\n"), "unauthorized");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "s3cre"), "unauthorized");
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "s3cret"));
    lb_must_acquire(c, "x", 10000);
    lb_end();
}

LB_TEST(auth, without_secret, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    /* no hello needed */
    const char *lease = lb_must_acquire(c, "na", 10000);
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "x"));
    lb_expect_err(lb_call(c, "{s:s, s:i}", "op", "hello", "auth", 5), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:b}", "op", "hello", "auth", 1), "invalid_argument");
    lb_expect_ok(lb_call(c, "{s:s, s:n}", "op", "hello", "auth"));
    /* more than 3 hellos with any auth are fine */
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "y"));
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_end();
}
