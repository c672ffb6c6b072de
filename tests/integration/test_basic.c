/*
 * Every op of issue 2 over TCP and over the Unix socket, the response shapes
 * of PROTOCOL.md, reentrancy, owner-only release, busy locks, pipelining
 * and the stats counters.
 */
#include "tests/integration/harness.h"

#include <string.h>

static void check_acquire_shape(const json_t *r, const char *lock, int ttl_ms, int count)
{
    lb_expect_ok(r);
    const char *lease = lb_str(r, "lease");
    cr_assert(lb_is_lease_token(lease), "lease must be >= 32 lowercase hex chars: %s",
              lb_dump(r));
    cr_assert_str_eq(lb_str(r, "lock"), lock, "%s", lb_dump(r));
    cr_assert_str_eq(lb_str(r, "mode"), "exclusive", "%s", lb_dump(r));
    (void)lb_int(r, "fence");
    cr_assert_eq(lb_int(r, "ttl_ms"), ttl_ms, "%s", lb_dump(r));
    cr_assert_eq(lb_int(r, "count"), count, "%s", lb_dump(r));
}

static void all_ops(lb_transport t)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, t);
    const char *lock = t == LB_TCP ? "ops-tcp" : "ops-unix";

    /* hello */
    json_t *h = lb_call(c, "{s:s, s:s}", "op", "hello", "client", "itest/1.0");
    lb_expect_ok(h);
    cr_assert(strncmp(lb_str(h, "server"), "lockbroker/", 11) == 0, "%s", lb_dump(h));
    cr_assert_eq(lb_int(h, "proto"), 1, "%s", lb_dump(h));
    cr_assert(strlen(lb_str(h, "session")) > 0, "%s", lb_dump(h));

    /* ping */
    lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));

    /* inspect of a name never used */
    json_t *in0 = lb_inspect(c, lock);
    cr_assert_str_eq(lb_str(in0, "lock"), lock);
    cr_assert_str_eq(lb_str(in0, "state"), "free", "%s", lb_dump(in0));
    cr_assert(json_is_array(lb_get(in0, "holders")) && json_array_size(lb_get(in0, "holders")) == 0,
              "%s", lb_dump(in0));
    cr_assert_eq(lb_int(in0, "waiters"), 0, "%s", lb_dump(in0));
    cr_assert(json_is_null(lb_get(in0, "fence")), "fence of an unused name is null: %s",
              lb_dump(in0));
    cr_assert(json_is_null(lb_get(in0, "limit")), "%s", lb_dump(in0));

    /* acquire */
    json_t *a = lb_call(c, "{s:s, s:s, s:i, s:i, s:s}", "op", "acquire", "lock", lock, "ttl_ms",
                        10000, "wait_ms", 0, "owner", "worker-1");
    check_acquire_shape(a, lock, 10000, 1);
    const char *lease = lb_str(a, "lease");
    json_int_t fence = lb_int(a, "fence");

    /* inspect */
    json_t *in = lb_inspect(c, lock);
    cr_assert_str_eq(lb_str(in, "lock"), lock, "%s", lb_dump(in));
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
    cr_assert(json_object_get(in, "limit") && json_is_null(lb_get(in, "limit")),
              "limit must be present and null: %s", lb_dump(in));
    json_t *holders = lb_get(in, "holders");
    cr_assert(json_is_array(holders) && json_array_size(holders) == 1, "%s", lb_dump(in));
    json_t *h0 = json_array_get(holders, 0);
    cr_assert_str_eq(lb_str(h0, "mode"), "exclusive", "%s", lb_dump(in));
    json_int_t hl = lb_int(h0, "ttl_ms");
    cr_assert(hl > 0 && hl <= 10000, "holder ttl_ms %lld out of (0, 10000]", (long long)hl);
    cr_assert_eq(lb_int(h0, "count"), 1, "%s", lb_dump(in));
    cr_assert_str_eq(lb_str(h0, "owner"), "worker-1", "%s", lb_dump(in));
    cr_assert_str_eq(lb_str(h0, "client"), "itest/1.0", "%s", lb_dump(in));
    cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
    cr_assert_eq(lb_int(in, "fence"), fence, "inspect fence = last issued: %s", lb_dump(in));
    cr_assert(strstr(lb_dump(in), lease) == NULL, "inspect must never reveal lease tokens: %s",
              lb_dump(in));

    /* leases */
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    lb_expect_ok(ls);
    json_t *arr = lb_get(ls, "leases");
    cr_assert(json_is_array(arr) && json_array_size(arr) == 1, "%s", lb_dump(ls));
    json_t *l0 = json_array_get(arr, 0);
    cr_assert_str_eq(lb_str(l0, "lease"), lease, "%s", lb_dump(ls));
    cr_assert_str_eq(lb_str(l0, "lock"), lock, "%s", lb_dump(ls));
    cr_assert_str_eq(lb_str(l0, "mode"), "exclusive", "%s", lb_dump(ls));
    json_int_t lt = lb_int(l0, "ttl_ms");
    cr_assert(lt > 0 && lt <= 10000, "%s", lb_dump(ls));
    cr_assert_eq(lb_int(l0, "count"), 1, "%s", lb_dump(ls));
    cr_assert_eq(lb_int(l0, "fence"), fence, "%s", lb_dump(ls));

    /* extend */
    json_t *e = lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 20000);
    lb_expect_ok(e);
    cr_assert_eq(lb_int(e, "ttl_ms"), 20000, "%s", lb_dump(e));

    /* cancel: nothing can be pending */
    json_t *cn = lb_call(c, "{s:s, s:s}", "op", "cancel", "target", "no-such-request");
    lb_expect_ok(cn);
    cr_assert(lb_bool(cn, "cancelled") == false, "%s", lb_dump(cn));
    cn = lb_call(c, "{s:s, s:i}", "op", "cancel", "target", 12345);
    lb_expect_ok(cn);
    cr_assert(lb_bool(cn, "cancelled") == false, "%s", lb_dump(cn));

    /* stats */
    json_t *st = lb_stats(c);
    cr_assert(json_is_number(lb_get(st, "uptime_s")), "uptime_s: %s", lb_dump(st));
    cr_assert(lb_int(st, "connections") >= 1, "%s", lb_dump(st));
    cr_assert(lb_int(st, "sessions") >= 1, "%s", lb_dump(st));
    cr_assert_eq(lb_int(st, "leases"), 1, "%s", lb_dump(st));
    cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));
    cr_assert(lb_int(st, "acquired_total") >= 1, "%s", lb_dump(st));
    (void)lb_int(st, "released_total");
    (void)lb_int(st, "timeouts_total");
    (void)lb_int(st, "lost_total");
    cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));

    /* release */
    json_t *rl = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
    lb_expect_ok(rl);
    cr_assert_eq(lb_int(rl, "count"), 0, "%s", lb_dump(rl));
    lb_expect_free(c, lock);
    ls = lb_call(c, "{s:s}", "op", "leases");
    lb_expect_ok(ls);
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 1000),
                  "not_held");
    lb_redis_assert_lock_keys_expire(r, "lb:", lock);
    lb_end();
}

LB_TEST(basic, all_ops_tcp, 60) { all_ops(LB_TCP); }
LB_TEST(basic, all_ops_unix, 60) { all_ops(LB_UNIX); }

LB_TEST(basic, busy_lock_try_times_out, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *a = lb_connect(b, LB_TCP);
    lb_client *c = lb_connect(b, LB_UNIX);
    const char *lease = lb_must_acquire(a, "busy", 10000);
    int64_t t0 = lb_now_ms();
    lb_expect_err(lb_try_acquire(c, "busy", 10000), "timeout");
    cr_assert(lb_now_ms() - t0 < 2000, "a wait_ms 0 try must not wait");
    /* and the holder is unchanged */
    json_t *in = lb_inspect(c, "busy");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive");
    cr_assert_eq(json_array_size(lb_get(in, "holders")), 1, "%s", lb_dump(in));
    /* the other session cannot take it over by releasing its own nothing */
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
    lb_expect_ok(lb_call(a, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_expect_ok(lb_try_acquire(c, "busy", 10000));
    lb_end();
}

LB_TEST(basic, reentrancy, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    lb_client *other = lb_connect(b, LB_TCP);

    json_t *a1 = lb_try_acquire(c, "re", 10000);
    check_acquire_shape(a1, "re", 10000, 1);
    /* owner "" explicitly is the default owner */
    json_t *a2 = lb_call(c, "{s:s, s:s, s:i, s:i, s:s}", "op", "acquire", "lock", "re", "ttl_ms",
                         10000, "wait_ms", 0, "owner", "");
    lb_expect_ok(a2);
    cr_assert_str_eq(lb_str(a2, "lease"), lb_str(a1, "lease"), "same lease: %s", lb_dump(a2));
    cr_assert_eq(lb_int(a2, "count"), 2, "%s", lb_dump(a2));
    cr_assert_eq(lb_int(a2, "fence"), lb_int(a1, "fence"), "same fence: %s", lb_dump(a2));
    json_t *a3 = lb_try_acquire(c, "re", 10000);
    lb_expect_ok(a3);
    cr_assert_str_eq(lb_str(a3, "lease"), lb_str(a1, "lease"));
    cr_assert_eq(lb_int(a3, "count"), 3, "%s", lb_dump(a3));
    cr_assert_eq(lb_int(a3, "fence"), lb_int(a1, "fence"));

    json_t *in = lb_inspect(c, "re");
    cr_assert_eq(json_array_size(lb_get(in, "holders")), 1, "%s", lb_dump(in));
    cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 3, "%s", lb_dump(in));
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
    cr_assert_eq(lb_int(json_array_get(lb_get(ls, "leases"), 0), "count"), 3, "%s", lb_dump(ls));

    /* another owner in the same session is a stranger; so is another session */
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:i, s:s}", "op", "acquire", "lock", "re", "ttl_ms",
                          10000, "wait_ms", 0, "owner", "thread-2"),
                  "timeout");
    lb_expect_err(lb_try_acquire(other, "re", 10000), "timeout");

    const char *lease = lb_str(a1, "lease");
    json_t *r1 = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
    lb_expect_ok(r1);
    cr_assert_eq(lb_int(r1, "count"), 2, "%s", lb_dump(r1));
    json_t *r2 = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
    lb_expect_ok(r2);
    cr_assert_eq(lb_int(r2, "count"), 1, "%s", lb_dump(r2));
    in = lb_inspect(c, "re");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "still held at count 1: %s", lb_dump(in));
    lb_expect_err(lb_try_acquire(other, "re", 10000), "timeout");
    json_t *r3 = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
    lb_expect_ok(r3);
    cr_assert_eq(lb_int(r3, "count"), 0, "%s", lb_dump(r3));
    lb_expect_free(c, "re");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");

    /* owner-scoped reentrancy: owner A holds, owner A re-enters */
    json_t *o1 = lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "re2", "wait_ms", 0,
                         "owner", "A");
    lb_expect_ok(o1);
    json_t *o2 = lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "re2", "wait_ms", 0,
                         "owner", "A");
    lb_expect_ok(o2);
    cr_assert_str_eq(lb_str(o2, "lease"), lb_str(o1, "lease"));
    cr_assert_eq(lb_int(o2, "count"), 2);
    /* the default owner "" is not "A" */
    lb_expect_err(lb_try_acquire(c, "re2", 0), "timeout");
    lb_end();
}

LB_TEST(basic, release_needs_the_right_token, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *l1 = lb_must_acquire(c, "tok", 10000);

    /* unknown tokens */
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease",
                          "0123456789abcdef0123456789abcdef"),
                  "not_held");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease",
                          "0123456789abcdef0123456789abcdef", "ttl_ms", 1000),
                  "not_held");
    /* a token that differs in its last character */
    char wrong[256];
    snprintf(wrong, sizeof(wrong), "%s", l1);
    size_t n = strlen(wrong);
    wrong[n - 1] = wrong[n - 1] == '0' ? '1' : '0';
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", wrong), "not_held");
    json_t *in = lb_inspect(c, "tok");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "wrong tokens freed the lock: %s",
                     lb_dump(in));

    /* release, then release again */
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l1));
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l1), "not_held");

    /* a stale token must not release the next holder's lease */
    lb_client *d = lb_connect(b, LB_UNIX);
    const char *l2 = lb_must_acquire(d, "tok", 10000);
    cr_assert_str_neq(l1, l2, "a new grant must get a new lease token");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l1), "not_held");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", l1, "ttl_ms", 1000),
                  "not_held");
    in = lb_inspect(c, "tok");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "stale token freed the lock: %s",
                     lb_dump(in));
    lb_expect_err(lb_try_acquire(c, "tok", 10000), "timeout");

    /* knowing the token is the right to release, from any session */
    json_t *rl = lb_call(c, "{s:s, s:s}", "op", "release", "lease", l2);
    lb_expect_ok(rl);
    cr_assert_eq(lb_int(rl, "count"), 0, "%s", lb_dump(rl));
    lb_expect_free(c, "tok");
    lb_redis_assert_lock_keys_expire(r, "lb:", "tok");
    lb_end();
}

LB_TEST(basic, extend_sets_remaining_ttl, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *a = lb_call(c, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "ext", "ttl_ms",
                        3000, "wait_ms", 0, "watchdog", 0);
    lb_expect_ok(a);
    const char *lease = lb_str(a, "lease");
    lb_sleep_ms(500);
    json_t *in = lb_inspect(c, "ext");
    json_int_t before = lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms");
    cr_assert(before <= 2700 && before > 0, "no watchdog: remaining ttl should drop: %s",
              lb_dump(in));

    json_t *e = lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 8000);
    lb_expect_ok(e);
    cr_assert_eq(lb_int(e, "ttl_ms"), 8000, "%s", lb_dump(e));
    in = lb_inspect(c, "ext");
    json_int_t after = lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms");
    cr_assert(after <= 8000 && after > before && after > 3000,
              "after extend 8000: ttl %lld (before %lld)", (long long)after, (long long)before);

    /* ttl_ms is required and range-checked */
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "extend", "lease", lease), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 99),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms",
                          86400001),
                  "invalid_argument");

    /* extend sets, it does not add */
    e = lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 2000);
    lb_expect_ok(e);
    cr_assert_eq(lb_int(e, "ttl_ms"), 2000, "%s", lb_dump(e));
    in = lb_inspect(c, "ext");
    after = lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms");
    cr_assert(after <= 2000 && after > 0, "extend 2000 must set ttl to <= 2000: %s", lb_dump(in));
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_expect_free(c, "ext");
    lb_end();
}

LB_TEST(basic, default_ttl_flag, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--default-ttl-ms", "7000", NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *a = lb_try_acquire(c, "dt", 0);
    check_acquire_shape(a, "dt", 7000, 1);
    lb_end();
}

LB_TEST(basic, default_ttl_is_30000, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *a = lb_try_acquire(c, "dt", 0);
    check_acquire_shape(a, "dt", 30000, 1);
    lb_end();
}

LB_TEST(basic, prefix_flag, 60)
{
    lb_redis *r = lb_redis_start(true); /* also: Redis over TCP */
    lb_broker *b = lb_broker_start(r, "--prefix", "itest:", NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *lease = lb_must_acquire(c, "pfx", 10000);
    cr_assert(lb_redis_count_lock_keys(r, "itest:", "pfx") >= 1, "no key itest:{pfx}*");
    cr_assert_eq(lb_redis_count_lock_keys(r, "lb:", "pfx"), 0, "keys under the default prefix");
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_expect_free(c, "pfx");
    lb_redis_assert_lock_keys_expire(r, "itest:", "pfx");
    lb_end();
}

LB_TEST(basic, pipelining, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    enum { N = 50 };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    for (int i = 0; i < N; i++) {
        switch (i % 5) {
        case 0: fprintf(f, "{\"id\":%d,\"op\":\"ping\"}\n", i); break;
        case 1: fprintf(f, "{\"id\":\"s%d\",\"op\":\"inspect\",\"lock\":\"pl%d\"}\n", i, i); break;
        case 2:
            fprintf(f, "{\"id\":%d,\"op\":\"acquire\",\"lock\":\"pl%d\",\"wait_ms\":0}\n", i, i);
            break;
        case 3: fprintf(f, "{\"id\":\"s%d\",\"op\":\"stats\"}\n", i); break;
        case 4: fprintf(f, "{\"id\":%d,\"op\":\"cancel\",\"target\":\"x\"}\n", i); break;
        }
    }
    fclose(f);
    bool sent = lb_send_raw(c, buf, len);
    free(buf);
    cr_assert(sent);
    bool seen[N] = {0};
    for (int k = 0; k < N; k++) {
        json_t *m = lb_read_msg(c, 5000);
        cr_assert(m != NULL, "only %d of %d responses arrived", k, N);
        cr_assert(json_object_get(m, "event") == NULL, "unexpected event %s", lb_dump(m));
        lb_expect_ok(m);
        json_t *id = json_object_get(m, "id");
        int i;
        if (json_is_integer(id)) {
            i = (int)json_integer_value(id);
            cr_assert(i >= 0 && i < N && i % 5 != 1 && i % 5 != 3, "bad id %s", lb_dump(m));
        } else {
            cr_assert(json_is_string(id) && json_string_value(id)[0] == 's', "bad id %s",
                      lb_dump(m));
            i = atoi(json_string_value(id) + 1);
            cr_assert(i >= 0 && i < N && (i % 5 == 1 || i % 5 == 3), "bad id %s", lb_dump(m));
        }
        cr_assert(!seen[i], "two responses for id %d", i);
        seen[i] = true;
        if (i % 5 == 2)
            cr_assert(lb_is_lease_token(lb_str(m, "lease")), "%s", lb_dump(m));
        if (i % 5 == 1)
            (void)lb_str(m, "state");
    }
    cr_assert(lb_read_msg(c, 300) == NULL, "more than %d responses", N);
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), N / 5, "%s", lb_dump(ls));
    lb_end();
}

LB_TEST(basic, stats_counters_move, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *s0 = lb_stats(c);
    for (int i = 0; i < 3; i++) {
        const char *lease = lb_must_acquire(c, "cnt", 10000);
        if (i == 0) {
            json_t *s = lb_stats(c);
            cr_assert_eq(lb_int(s, "leases"), lb_int(s0, "leases") + 1, "%s", lb_dump(s));
        }
        lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    }
    json_t *s1 = lb_stats(c);
    cr_assert_eq(lb_int(s1, "acquired_total") - lb_int(s0, "acquired_total"), 3, "%s -> %s",
                 lb_dump(s0), lb_dump(s1));
    cr_assert_eq(lb_int(s1, "released_total") - lb_int(s0, "released_total"), 3, "%s -> %s",
                 lb_dump(s0), lb_dump(s1));
    cr_assert_eq(lb_int(s1, "leases"), lb_int(s0, "leases"), "%s", lb_dump(s1));
    /* connections and sessions count this client and a second one */
    lb_client *d = lb_connect(b, LB_UNIX);
    json_t *s2 = lb_stats(d);
    cr_assert(lb_int(s2, "connections") >= 2, "%s", lb_dump(s2));
    cr_assert(lb_int(s2, "sessions") >= 2, "%s", lb_dump(s2));
    lb_end();
}
