/*
 * Malformed input over the wire: framing (max line, CRLF, empty lines, split
 * writes), JSON and shape errors, ids, unknown ops and fields, field checks.
 * Every bad input gets its error and costs nothing else: the connection stays
 * usable (except line_too_long) and the broker exits cleanly at the end.
 */
#include "tests/integration/harness.h"

#include <stdlib.h>
#include <string.h>

static lb_client *start(lb_broker **bp)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--max-line", "1024", NULL);
    if (bp)
        *bp = b;
    return lb_connect(b, LB_TCP);
}

/* Send one raw line, read one message, expect error `code` and id null. */
static json_t *raw_expect(lb_client *c, const char *line, size_t len, const char *code,
                          bool id_null)
{
    cr_assert(lb_send_raw(c, line, len));
    json_t *m = lb_read_msg(c, 5000);
    cr_assert(m != NULL, "no answer to %.*s", (int)len, line);
    lb_expect_err(m, code);
    if (id_null)
        cr_assert(json_object_get(m, "id") && json_is_null(json_object_get(m, "id")),
                  "want \"id\":null in %s", lb_dump(m));
    return m;
}

static void still_usable(lb_client *c)
{
    json_t *p = lb_call(c, "{s:s}", "op", "ping");
    lb_expect_ok(p);
}

LB_TEST(badinput, not_json, 60)
{
    lb_client *c = start(NULL);
    const char *l = "this is not json\n";
    raw_expect(c, l, strlen(l), "bad_json", true);
    still_usable(c);
    l = "{\"id\":1,\"op\":\"ping\"\n"; /* truncated object */
    raw_expect(c, l, strlen(l), "bad_json", true);
    l = "{\"id\":1,\"op\":\"ping\"} {}\n"; /* trailing garbage */
    raw_expect(c, l, strlen(l), "bad_json", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, invalid_utf8, 60)
{
    lb_client *c = start(NULL);
    const char l[] = "{\"id\":1,\"op\":\"inspect\",\"lock\":\"a\xff\xfe\"}\n";
    raw_expect(c, l, sizeof(l) - 1, "bad_json", true);
    const char l2[] = "{\"id\":2,\"op\":\"ping\",\"x\xc3\":1}\n"; /* truncated sequence */
    raw_expect(c, l2, sizeof(l2) - 1, "bad_json", true);
    const char l3[] = "{\"id\":3,\"op\":\"inspect\",\"lock\":\"\xc0\xaf\"}\n"; /* overlong */
    raw_expect(c, l3, sizeof(l3) - 1, "bad_json", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, raw_nul_byte, 60)
{
    lb_client *c = start(NULL);
    const char l[] = "{\"id\":1,\"op\":\"ping\"}\0\n";
    raw_expect(c, l, sizeof(l) - 1, "bad_json", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, not_an_object, 60)
{
    lb_client *c = start(NULL);
    const char *lines[] = {"[1,2]\n", "42\n", "\"ping\"\n", "null\n", "true\n", "[]\n"};
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        raw_expect(c, lines[i], strlen(lines[i]), "bad_request", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, op_missing_or_not_string, 60)
{
    lb_client *c = start(NULL);
    const char *l = "{\"op\":5}\n";
    raw_expect(c, l, strlen(l), "bad_request", true);
    l = "{}\n";
    raw_expect(c, l, strlen(l), "bad_request", true);
    l = "{\"op\":null}\n";
    raw_expect(c, l, strlen(l), "bad_request", true);
    l = "{\"id\":\"a\",\"lock\":\"x\"}\n";
    raw_expect(c, l, strlen(l), "bad_request", false);
    l = "{\"op\":[\"ping\"]}\n";
    raw_expect(c, l, strlen(l), "bad_request", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, bad_ids, 60)
{
    lb_client *c = start(NULL);
    char long_id[200];
    memset(long_id, 'i', 129);
    long_id[129] = '\0';
    char line[512];
    const char *bad[] = {
        "{\"id\":true,\"op\":\"ping\"}\n",
        "{\"id\":1.5,\"op\":\"ping\"}\n",
        "{\"id\":{},\"op\":\"ping\"}\n",
        "{\"id\":[1],\"op\":\"ping\"}\n",
        "{\"id\":9007199254740993,\"op\":\"ping\"}\n",
        "{\"id\":-9007199254740993,\"op\":\"ping\"}\n",
        /* the id is checked before the op name */
        "{\"id\":false,\"op\":\"nope\"}\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        raw_expect(c, bad[i], strlen(bad[i]), "invalid_argument", true);
    snprintf(line, sizeof(line), "{\"id\":\"%s\",\"op\":\"ping\"}\n", long_id);
    raw_expect(c, line, strlen(line), "invalid_argument", true);

    /* good ids are echoed verbatim */
    long_id[128] = '\0';
    json_t *r = lb_call(c, "{s:s, s:s}", "id", long_id, "op", "ping");
    lb_expect_ok(r);
    r = lb_call(c, "{s:I, s:s}", "id", (json_int_t)9007199254740992LL, "op", "ping");
    lb_expect_ok(r);
    r = lb_call(c, "{s:I, s:s}", "id", (json_int_t)-9007199254740992LL, "op", "ping");
    lb_expect_ok(r);
    r = lb_call(c, "{s:i, s:s}", "id", 0, "op", "ping");
    lb_expect_ok(r);
    r = lb_call(c, "{s:s, s:s}", "id", "", "op", "ping");
    lb_expect_ok(r);
    r = lb_call(c, "{s:s, s:s}", "id", "\xc3\xa9t\xc3\xa9 \\\"q\"", "op", "ping");
    lb_expect_ok(r);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, unknown_op_echoes_id, 60)
{
    lb_client *c = start(NULL);
    const char *l = "{\"id\":\"x\",\"op\":\"nope\"}\n";
    json_t *m = raw_expect(c, l, strlen(l), "unknown_op", false);
    cr_assert_str_eq(lb_str(m, "id"), "x", "%s", lb_dump(m));
    l = "{\"id\":7,\"op\":\"PING\"}\n";
    m = raw_expect(c, l, strlen(l), "unknown_op", false);
    cr_assert_eq(lb_int(m, "id"), 7, "%s", lb_dump(m));
    l = "{\"op\":\"\"}\n";
    raw_expect(c, l, strlen(l), "unknown_op", true);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, unknown_fields, 60)
{
    lb_client *c = start(NULL);
    json_t *r = lb_call(c, "{s:s, s:n}", "op", "ping", "bogus_field");
    lb_expect_err(r, "invalid_argument");
    cr_assert(strstr(lb_str(r, "error.message"), "bogus_field") != NULL,
              "the message names the field: %s", lb_dump(r));
    r = lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "uf", "wait_ms", 0, "tll_ms",
                1000);
    lb_expect_err(r, "invalid_argument");
    cr_assert(strstr(lb_str(r, "error.message"), "tll_ms") != NULL, "%s", lb_dump(r));
    r = lb_call(c, "{s:s, s:s, s:n}", "op", "inspect", "lock", "uf", "lease");
    lb_expect_err(r, "invalid_argument");
    r = lb_call(c, "{s:s, s:n}", "op", "stats", "x");
    lb_expect_err(r, "invalid_argument");
    r = lb_call(c, "{s:s, s:s, s:n}", "op", "release", "lease", "00", "ttl_ms");
    lb_expect_err(r, "invalid_argument");
    /* a field of another op */
    r = lb_call(c, "{s:s, s:s}", "op", "leases", "lock", "uf");
    lb_expect_err(r, "invalid_argument");
    lb_expect_free(c, "uf");
    lb_end();
}

LB_TEST(badinput, null_means_absent, 60)
{
    lb_client *c = start(NULL);
    json_t *r = lb_call(c, "{s:s, s:s, s:i, s:n, s:n, s:n, s:n, s:n, s:n, s:n, s:n}", "op",
                        "acquire", "lock", "nl", "wait_ms", 0, "mode", "limit", "ttl_ms",
                        "watchdog", "owner", "fair", "detach", "max_hold_ms");
    lb_expect_ok(r);
    cr_assert_str_eq(lb_str(r, "mode"), "exclusive");
    cr_assert_eq(lb_int(r, "ttl_ms"), 30000, "%s", lb_dump(r));
    lb_expect_ok(lb_call(c, "{s:s, s:n, s:n, s:n}", "op", "hello", "client", "auth",
                         "keepalive_ms"));
    lb_expect_ok(lb_call(c, "{s:n, s:s}", "id", "op", "ping")); /* "id": null */
    lb_end();
}

LB_TEST(badinput, acquire_field_checks, 60)
{
    lb_client *c = start(NULL);
    char big[600];
    memset(big, 'n', 513);
    big[513] = '\0';
    /* lock */
    lb_expect_err(lb_call(c, "{s:s, s:i}", "op", "acquire", "wait_ms", 0), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "", "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:i, s:i}", "op", "acquire", "lock", 5, "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", big, "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "a\x01z", "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "a\nb", "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "a\x1f", "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "del\x7f", "wait_ms", 0),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", "a\x01z"), "invalid_argument");
    /* ttl_ms */
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "ttl_ms", 99),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "ttl_ms", 86400001),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "ttl_ms", "1000"),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:f}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "ttl_ms", 1000.5),
                  "invalid_argument");
    /* wait_ms, watchdog, owner, detach, mode */
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "f", "wait_ms", -1),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "watchdog", "yes"),
                  "invalid_argument");
    memset(big, 'o', 129);
    big[129] = '\0';
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "owner", big),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "detach", 1),
                  "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "f", "wait_ms", 0,
                          "mode", "EXCLUSIVE"),
                  "invalid_argument");
    /* hello client label */
    lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "client", big), "invalid_argument");
    /* release / extend / inspect / cancel need their fields */
    lb_expect_err(lb_call(c, "{s:s}", "op", "release"), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:i}", "op", "release", "lease", 5), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s, s:i}", "op", "extend", "ttl_ms", 1000), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s}", "op", "inspect"), "invalid_argument");
    lb_expect_err(lb_call(c, "{s:s}", "op", "cancel"), "invalid_argument");
    /* none of it took a lock */
    json_t *ls = lb_call(c, "{s:s}", "op", "leases");
    cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
    lb_expect_free(c, "f");

    /* the limits themselves are fine */
    memset(big, 'n', 512);
    big[512] = '\0';
    json_t *a = lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", big, "wait_ms", 0,
                        "ttl_ms", 100);
    lb_expect_ok(a);
    memset(big, 'o', 128);
    big[128] = '\0';
    lb_expect_ok(lb_call(c, "{s:s, s:s, s:i, s:s, s:i}", "op", "acquire", "lock", "f", "wait_ms",
                         0, "owner", big, "ttl_ms", 86400000));
    lb_end();
}

LB_TEST(badinput, lock_names_with_any_other_character, 60)
{
    lb_broker *b;
    lb_client *c = start(&b);
    const char *names[] = {"ключ/🔒 with spaces", "a{b}*c?[x]", "\\", "lb:{x}", "tab\xc2\x80"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        json_t *a = lb_try_acquire(c, names[i], 10000);
        lb_expect_ok(a);
        cr_assert_str_eq(lb_str(a, "lock"), names[i], "%s", lb_dump(a));
        json_t *in = lb_inspect(c, names[i]);
        cr_assert_str_eq(lb_str(in, "lock"), names[i], "%s", lb_dump(in));
        cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
    }
    /* distinct names are distinct locks */
    lb_expect_free(c, "a{b}*c?[y]");
    lb_expect_free(c, "x");
    lb_end();
}

LB_TEST(badinput, lock_name_escaped_nul, 60)
{
    lb_client *c = start(NULL);
    /* valid JSON whose string holds U+0000: a control character in the name */
    const char *l = "{\"id\":1,\"op\":\"acquire\",\"lock\":\"a\\u0000b\",\"wait_ms\":0}\n";
    cr_assert(lb_send_raw(c, l, strlen(l)));
    json_t *m = lb_read_msg(c, 5000);
    cr_assert(m != NULL);
    lb_expect_err(m, "invalid_argument");
    l = "{\"id\":2,\"op\":\"acquire\",\"lock\":\"a\\u0001b\",\"wait_ms\":0}\n";
    cr_assert(lb_send_raw(c, l, strlen(l)));
    m = lb_read_msg(c, 5000);
    cr_assert(m != NULL);
    lb_expect_err(m, "invalid_argument");
    cr_assert_eq(lb_int(m, "id"), 2);
    still_usable(c);
    lb_end();
}

LB_TEST(badinput, line_too_long_without_newline, 60)
{
    lb_client *c = start(NULL);
    char *buf = malloc(2000);
    cr_assert(buf);
    memset(buf, 'x', 2000);
    bool sent = lb_send_raw(c, buf, 2000);
    free(buf);
    cr_assert(sent);
    json_t *m = lb_read_msg(c, 3000);
    cr_assert(m != NULL, "no line_too_long before the newline");
    lb_expect_err(m, "line_too_long");
    cr_assert(json_object_get(m, "id") && json_is_null(json_object_get(m, "id")), "%s",
              lb_dump(m));
    lb_expect_closed(c, 2000);
    lb_end();
}

/* A ping padded with spaces to exactly n bytes (without the line end). */
static char *padded_ping(size_t n)
{
    const char *head = "{\"id\":\"pad\",\"op\":\"ping\"";
    char *s = malloc(n + 3);
    cr_assert(s);
    size_t h = strlen(head);
    memcpy(s, head, h);
    memset(s + h, ' ', n - h - 1);
    s[n - 1] = '}';
    s[n] = '\0';
    return s;
}

LB_TEST(badinput, max_line_boundary, 60)
{
    lb_broker *b;
    lb_client *c = start(&b);
    char *s = padded_ping(1024);
    strcat(s, "\n");
    bool ok1 = lb_send_raw(c, s, strlen(s));
    json_t *m = ok1 ? lb_read_msg(c, 3000) : NULL;
    cr_assert(m != NULL);
    lb_expect_ok(m);
    /* \r\n does not count either */
    s[1024] = '\r';
    s[1025] = '\n';
    s[1026] = '\0';
    bool ok2 = lb_send_raw(c, s, strlen(s));
    m = ok2 ? lb_read_msg(c, 3000) : NULL;
    free(s);
    cr_assert(m != NULL);
    lb_expect_ok(m);
    /* 1025 bytes is too long */
    s = padded_ping(1025);
    strcat(s, "\n");
    bool ok3 = lb_send_raw(c, s, strlen(s));
    free(s);
    cr_assert(ok3);
    m = lb_read_msg(c, 3000);
    cr_assert(m != NULL);
    lb_expect_err(m, "line_too_long");
    lb_expect_closed(c, 2000);
    /* other connections are unaffected */
    lb_client *d = lb_connect(b, LB_UNIX);
    still_usable(d);
    lb_end();
}

LB_TEST(badinput, crlf_empty_lines_and_no_id, 60)
{
    lb_client *c = start(NULL);
    const char *l = "\n\r\n\n{\"id\":7,\"op\":\"ping\"}\r\n\n\n";
    cr_assert(lb_send_raw(c, l, strlen(l)));
    json_t *m = lb_read_msg(c, 3000);
    cr_assert(m != NULL);
    lb_expect_ok(m);
    cr_assert_eq(lb_int(m, "id"), 7, "%s", lb_dump(m));
    m = lb_read_msg(c, 300);
    cr_assert(m == NULL, "empty lines must be ignored, got %s", lb_dump(m));
    /* no id -> "id": null */
    l = "{\"op\":\"ping\"}\n";
    cr_assert(lb_send_raw(c, l, strlen(l)));
    m = lb_read_msg(c, 3000);
    cr_assert(m != NULL);
    lb_expect_ok(m);
    cr_assert(json_object_get(m, "id") && json_is_null(json_object_get(m, "id")),
              "want \"id\":null: %s", lb_dump(m));
    l = "{\"op\":\"nope\"}\r\n";
    cr_assert(lb_send_raw(c, l, strlen(l)));
    m = lb_read_msg(c, 3000);
    cr_assert(m != NULL);
    lb_expect_err(m, "unknown_op");
    cr_assert(json_object_get(m, "id") && json_is_null(json_object_get(m, "id")), "%s",
              lb_dump(m));
    lb_end();
}

LB_TEST(badinput, split_writes, 60)
{
    lb_client *c = start(NULL);
    const char *l = "{\"id\":1,\"op\":\"ping\"}\n{\"id\":2,\"op\":\"ping\"}\r\n";
    size_t n = strlen(l);
    for (size_t i = 0; i < n; i++) {
        cr_assert(lb_send_raw(c, l + i, 1));
        if (i % 7 == 0)
            lb_sleep_ms(5);
    }
    json_t *id1 = json_integer(1), *id2 = json_integer(2);
    json_t *r1 = lb_wait_response(c, id1, 3000);
    json_t *r2 = lb_wait_response(c, id2, 3000);
    json_decref(id1);
    json_decref(id2);
    lb_expect_ok(r1);
    lb_expect_ok(r2);
    lb_end();
}
