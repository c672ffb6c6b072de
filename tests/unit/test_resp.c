/*
 * test_resp.c - response and event encoding: every builder's line is
 * decoded back with jansson and checked key by key, in wire order; one
 * trailing "\n"; NUL bytes and UTF-8 survive.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/resp.h"

static lb_str_t S(const char *s)
{
	lb_str_t v = {s, strlen(s)};
	return v;
}

/* Dumps msg (taking it), checks the line's framing, and decodes it. The
 * raw line is copied to raw (if not NULL, at least 1024 bytes). */
static json_t *roundtrip(json_t *msg, char *raw)
{
	size_t len;
	char *line;
	json_t *v;
	json_error_t jerr;

	cr_assert_not_null(msg);
	line = resp_dump(msg, &len);
	cr_assert_not_null(line);
	cr_assert_gt(len, 1u);
	cr_assert_eq(line[len - 1], '\n', "ends with a newline");
	cr_assert_null(memchr(line, '\n', len - 1), "one line: %s", line);
	cr_assert_null(memchr(line, '\r', len), "no CR");
	cr_assert_eq(line[len], '\0');
	cr_assert_eq(strlen(line), len, "no raw NUL in the line");
	if (raw != NULL) {
		cr_assert_lt(len, 1024u);
		memcpy(raw, line, len + 1);
	}
	v = json_loadb(line, len - 1, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &jerr);
	cr_assert_not_null(v, "%s: %s", line, jerr.text);
	cr_assert(json_is_object(v));
	free(line);
	return v;
}

/* Asserts the object's keys are exactly the NULL-terminated list, in order. */
static void keys_are(const json_t *o, ...)
{
	va_list ap;
	const char *want;
	void *it = json_object_iter((json_t *)o);
	size_t n = 0;

	va_start(ap, o);
	while ((want = va_arg(ap, const char *)) != NULL) {
		cr_assert_not_null(it, "missing key %s", want);
		cr_assert_str_eq(json_object_iter_key(it), want, "key %zu", n);
		it = json_object_iter_next((json_t *)o, it);
		n++;
	}
	va_end(ap);
	cr_assert_null(it, "extra key %s", it ? json_object_iter_key(it) : "");
	cr_assert_eq(json_object_size(o), n);
}

static int64_t ival(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	cr_assert(json_is_integer(v), "%s is not an integer", k);
	return json_integer_value(v);
}

static const char *sval(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	cr_assert(json_is_string(v), "%s is not a string", k);
	return json_string_value(v);
}

Test(resp, ok_without_id)
{
	char raw[1024];
	json_t *v = roundtrip(resp_ok(NULL), raw);

	cr_assert_str_eq(raw, "{\"id\":null,\"ok\":true}\n");
	keys_are(v, "id", "ok", NULL);
	cr_assert(json_is_null(json_object_get(v, "id")));
	cr_assert(json_is_true(json_object_get(v, "ok")));
	json_decref(v);
}

Test(resp, id_is_copied_verbatim)
{
	json_t *id, *v;

	id = json_integer(INT64_C(9007199254740992));
	v = roundtrip(resp_ok(id), NULL);
	json_decref(id); /* not stolen: still ours, and the copy is independent */
	cr_assert_eq(ival(v, "id"), INT64_C(9007199254740992));
	json_decref(v);

	id = json_stringn("r\0" "1", 3);
	v = roundtrip(resp_ok(id), NULL);
	cr_assert_eq(json_string_length(json_object_get(v, "id")), 3u);
	cr_assert_eq(memcmp(sval(v, "id"), "r\0" "1", 3), 0);
	cr_assert_eq(id->refcount, 1u, "the builder keeps no reference");
	json_decref(id);
	json_decref(v);
}

Test(resp, id_from_request_survives_req_clear)
{
	static const char line[] = "{\"id\":\"abc\",\"op\":\"nope\"}";
	req_t r;
	req_error_t e;
	json_t *msg, *v;

	cr_assert_eq(req_parse(line, sizeof(line) - 1, &r, &e), -1);
	cr_assert_eq(e.code, LB_E_UNKNOWN_OP);
	msg = resp_error(r.id, e.code, e.message);
	req_clear(&r);
	v = roundtrip(msg, NULL);
	cr_assert_str_eq(sval(v, "id"), "abc");
	json_decref(v);
}

Test(resp, error_with_default_message)
{
	char raw[1024];
	json_t *v = roundtrip(resp_error(NULL, LB_E_BAD_JSON, NULL), raw), *err;

	cr_assert_str_eq(raw, "{\"id\":null,\"ok\":false,\"error\":{\"code\":"
			      "\"bad_json\",\"message\":\"the line is not valid JSON\"}}\n");
	keys_are(v, "id", "ok", "error", NULL);
	cr_assert(json_is_false(json_object_get(v, "ok")));
	err = json_object_get(v, "error");
	keys_are(err, "code", "message", NULL);
	json_decref(v);
}

Test(resp, error_with_message_and_every_code)
{
	json_t *id = json_integer(4), *v, *err;
	int i;

	v = roundtrip(resp_error(id, LB_E_INVALID_ARGUMENT, "field 'x' \"quoted\""), NULL);
	cr_assert_eq(ival(v, "id"), 4);
	err = json_object_get(v, "error");
	cr_assert_str_eq(sval(err, "code"), "invalid_argument");
	cr_assert_str_eq(sval(err, "message"), "field 'x' \"quoted\"");
	json_decref(v);

	for (i = LB_OK + 1; i < LB_E__COUNT; i++) {
		v = roundtrip(resp_error(id, (lb_err_t)i, NULL), NULL);
		err = json_object_get(v, "error");
		cr_assert_str_eq(sval(err, "code"), lb_err_code((lb_err_t)i));
		cr_assert_str_eq(sval(err, "message"), lb_err_message((lb_err_t)i));
		json_decref(v);
	}
	json_decref(id);
}

Test(resp, acquired)
{
	static const lb_mode_t modes[] = {LB_MODE_EXCLUSIVE, LB_MODE_SHARED,
					  LB_MODE_PERMIT};
	static const char *const names[] = {"exclusive", "shared", "permit"};
	json_t *id = json_string("a1"), *v;
	size_t i;

	for (i = 0; i < 3; i++) {
		resp_acquired_t a = {"0123abcd", S("db/\xc3\xa9"), modes[i],
				     INT64_C(9007199254740993), 30000, 2};

		v = roundtrip(resp_acquired(id, &a), NULL);
		keys_are(v, "id", "ok", "lease", "lock", "mode", "fence", "ttl_ms",
			 "count", NULL);
		cr_assert_str_eq(sval(v, "id"), "a1");
		cr_assert(json_is_true(json_object_get(v, "ok")));
		cr_assert_str_eq(sval(v, "lease"), "0123abcd");
		cr_assert_str_eq(sval(v, "lock"), "db/\xc3\xa9");
		cr_assert_str_eq(sval(v, "mode"), names[i]);
		cr_assert_eq(ival(v, "fence"), INT64_C(9007199254740993));
		cr_assert_eq(ival(v, "ttl_ms"), 30000);
		cr_assert_eq(ival(v, "count"), 2);
		json_decref(v);
	}
	json_decref(id);
}

Test(resp, utf8_is_not_escaped)
{
	char raw[1024];
	resp_acquired_t a = {"l", S("\xc3\xa9\xe2\x82\xac"), LB_MODE_EXCLUSIVE, 1, 1, 1};
	json_t *v = roundtrip(resp_acquired(NULL, &a), raw);

	cr_assert_not_null(strstr(raw, "\"lock\":\"\xc3\xa9\xe2\x82\xac\""), "%s", raw);
	json_decref(v);
}

Test(resp, invalid_utf8_is_masked)
{
	resp_acquired_t a = {"l", S("a\xff" "b\xc3"), LB_MODE_EXCLUSIVE, 1, 1, 1};
	json_t *v = roundtrip(resp_acquired(NULL, &a), NULL);

	cr_assert_str_eq(sval(v, "lock"), "a?b?");
	json_decref(v);
}

Test(resp, hello)
{
	resp_hello_t h = {"lockbroker/1.0.0", 1, "s-1", "0123456789abcdef",
	                  {65536, 100, 86400000, 10000, 1000, 1024, 500, 600000, 0}, NULL};
	json_t *v = roundtrip(resp_hello(NULL, &h), NULL), *l;

	keys_are(v, "id", "ok", "server", "proto", "session", "broker", "limits", NULL);
	cr_assert_str_eq(sval(v, "server"), "lockbroker/1.0.0");
	cr_assert_eq(ival(v, "proto"), 1);
	cr_assert_str_eq(sval(v, "session"), "s-1");
	cr_assert_str_eq(sval(v, "broker"), "0123456789abcdef");
	l = json_object_get(v, "limits");
	keys_are(l, "max_line", "ttl_ms_min", "ttl_ms_max", "max_leases_per_session",
	         "max_waiters_per_session", "max_inflight", "keepalive_ms_min", "keepalive_ms_max", NULL);
	cr_assert_eq(ival(l, "max_line"), 65536);
	cr_assert_eq(ival(l, "ttl_ms_max"), 86400000);
	cr_assert_eq(ival(l, "max_inflight"), 1024);
	cr_assert_eq(ival(l, "keepalive_ms_max"), 600000);
	json_decref(v);
}

Test(resp, ping_and_closing)
{
	json_t *id = json_string("p"), *v;

	v = roundtrip(resp_ping(id, true), NULL);
	keys_are(v, "id", "ok", "redis", NULL);
	cr_assert_str_eq(sval(v, "redis"), "up");
	json_decref(v);
	v = roundtrip(resp_ping(id, false), NULL);
	cr_assert_str_eq(sval(v, "redis"), "down");
	json_decref(v);
	v = roundtrip(resp_event_closing("keepalive"), NULL);
	keys_are(v, "event", "reason", NULL);
	cr_assert_str_eq(sval(v, "reason"), "keepalive");
	json_decref(v);
	json_decref(id);
}

Test(resp, released_extended_cancelled)
{
	json_t *id = json_integer(-1), *v;

	v = roundtrip(resp_released(id, 0), NULL);
	keys_are(v, "id", "ok", "count", NULL);
	cr_assert_eq(ival(v, "id"), -1);
	cr_assert_eq(ival(v, "count"), 0);
	json_decref(v);

	v = roundtrip(resp_extended(id, 86400000), NULL);
	keys_are(v, "id", "ok", "ttl_ms", NULL);
	cr_assert_eq(ival(v, "ttl_ms"), 86400000);
	json_decref(v);

	v = roundtrip(resp_cancelled(id, true), NULL);
	keys_are(v, "id", "ok", "cancelled", NULL);
	cr_assert(json_is_true(json_object_get(v, "cancelled")));
	json_decref(v);
	v = roundtrip(resp_cancelled(id, false), NULL);
	cr_assert(json_is_false(json_object_get(v, "cancelled")));
	json_decref(v);
	json_decref(id);
}

Test(resp, inspect_with_holders)
{
	lb_str_t owner = {"t\0" "2", 3};
	resp_holder_t h[2] = {
		{LB_MODE_SHARED, 1500, 2, owner, S("worker/1"), {NULL, 0}},
		{LB_MODE_SHARED, 800, 1, {NULL, 0}, {NULL, 0}, {NULL, 0}},
	};
	resp_inspect_t in = {S("db"), RESP_STATE_SHARED, 0, h, 2, 3, true, 42, NULL, 0, 0};
	json_t *v = roundtrip(resp_inspect(NULL, &in), NULL), *hs, *h0, *h1;

	keys_are(v, "id", "ok", "lock", "state", "limit", "holders", "waiters",
		 "fence", NULL);
	cr_assert_str_eq(sval(v, "lock"), "db");
	cr_assert_str_eq(sval(v, "state"), "shared");
	cr_assert(json_is_null(json_object_get(v, "limit")));
	cr_assert_eq(ival(v, "waiters"), 3);
	cr_assert_eq(ival(v, "fence"), 42);
	hs = json_object_get(v, "holders");
	cr_assert(json_is_array(hs));
	cr_assert_eq(json_array_size(hs), 2u);
	h0 = json_array_get(hs, 0);
	keys_are(h0, "mode", "ttl_ms", "count", "owner", "client", NULL);
	cr_assert_str_eq(sval(h0, "mode"), "shared");
	cr_assert_eq(ival(h0, "ttl_ms"), 1500);
	cr_assert_eq(ival(h0, "count"), 2);
	/* The NUL inside the owner survives the round trip. */
	cr_assert_eq(json_string_length(json_object_get(h0, "owner")), 3u);
	cr_assert_eq(memcmp(sval(h0, "owner"), "t\0" "2", 3), 0);
	cr_assert_str_eq(sval(h0, "client"), "worker/1");
	h1 = json_array_get(hs, 1);
	cr_assert_str_eq(sval(h1, "owner"), "");
	cr_assert_str_eq(sval(h1, "client"), "");
	json_decref(v);
}

Test(resp, inspect_semaphore_and_free)
{
	resp_holder_t h = {LB_MODE_PERMIT, 100, 1, {"", 0}, {"", 0}, {NULL, 0}};
	resp_inspect_t sem = {S("pool"), RESP_STATE_SEMAPHORE, 5, &h, 1, 0, false, 7, NULL, 0, 0};
	resp_inspect_t fr = {S("x"), RESP_STATE_FREE, 0, NULL, 0, 0, false, 0, NULL, 0, 0};
	resp_inspect_t ex = {S("x"), RESP_STATE_EXCLUSIVE, 0, NULL, 0, 0, true, 0, NULL, 0, 0};
	json_t *v;

	v = roundtrip(resp_inspect(NULL, &sem), NULL);
	cr_assert_str_eq(sval(v, "state"), "semaphore");
	cr_assert_eq(ival(v, "limit"), 5);
	cr_assert(json_is_null(json_object_get(v, "fence")), "no fence: null");
	cr_assert_str_eq(sval(json_array_get(json_object_get(v, "holders"), 0), "mode"),
			 "permit");
	json_decref(v);

	v = roundtrip(resp_inspect(NULL, &fr), NULL);
	cr_assert_str_eq(sval(v, "state"), "free");
	cr_assert_eq(json_array_size(json_object_get(v, "holders")), 0u);
	cr_assert(json_is_array(json_object_get(v, "holders")));
	cr_assert(json_is_null(json_object_get(v, "limit")));
	cr_assert(json_is_null(json_object_get(v, "fence")));
	json_decref(v);

	v = roundtrip(resp_inspect(NULL, &ex), NULL);
	cr_assert_str_eq(sval(v, "state"), "exclusive");
	cr_assert_eq(ival(v, "fence"), 0, "has_fence with fence 0 is 0, not null");
	json_decref(v);
}

Test(resp, leases)
{
	resp_lease_t ls[2] = {
		{"aa", S("db"), LB_MODE_EXCLUSIVE, 1000, 1, 10},
		{"bb", S("pool"), LB_MODE_PERMIT, 2000, 1, 11},
	};
	json_t *v, *arr, *l;

	v = roundtrip(resp_leases(NULL, NULL, 0), NULL);
	keys_are(v, "id", "ok", "leases", NULL);
	cr_assert(json_is_array(json_object_get(v, "leases")));
	cr_assert_eq(json_array_size(json_object_get(v, "leases")), 0u);
	json_decref(v);

	v = roundtrip(resp_leases(NULL, ls, 2), NULL);
	arr = json_object_get(v, "leases");
	cr_assert_eq(json_array_size(arr), 2u);
	l = json_array_get(arr, 0);
	keys_are(l, "lease", "lock", "mode", "ttl_ms", "count", "fence", NULL);
	cr_assert_str_eq(sval(l, "lease"), "aa");
	cr_assert_str_eq(sval(l, "lock"), "db");
	cr_assert_str_eq(sval(l, "mode"), "exclusive");
	cr_assert_eq(ival(l, "ttl_ms"), 1000);
	cr_assert_eq(ival(l, "count"), 1);
	cr_assert_eq(ival(l, "fence"), 10);
	l = json_array_get(arr, 1);
	cr_assert_str_eq(sval(l, "mode"), "permit");
	cr_assert_eq(ival(l, "fence"), 11);
	json_decref(v);
}

Test(resp, stats)
{
	resp_stats_t s = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, true, NULL, NULL, 0};
	json_t *v = roundtrip(resp_stats(NULL, &s), NULL);

	keys_are(v, "id", "ok", "uptime_s", "connections", "sessions", "leases",
		 "waiters", "acquired_total", "released_total", "timeouts_total",
		 "lost_total", "failovers_total", "failover_lost_total", "redis", NULL);
	cr_assert_eq(ival(v, "uptime_s"), 1);
	cr_assert_eq(ival(v, "connections"), 2);
	cr_assert_eq(ival(v, "sessions"), 3);
	cr_assert_eq(ival(v, "leases"), 4);
	cr_assert_eq(ival(v, "waiters"), 5);
	cr_assert_eq(ival(v, "acquired_total"), 6);
	cr_assert_eq(ival(v, "released_total"), 7);
	cr_assert_eq(ival(v, "timeouts_total"), 8);
	cr_assert_eq(ival(v, "lost_total"), 9);
	cr_assert_eq(ival(v, "failovers_total"), 10);
	cr_assert_eq(ival(v, "failover_lost_total"), 11);
	cr_assert_str_eq(sval(v, "redis"), "up");
	json_decref(v);
	s.redis_up = false;
	v = roundtrip(resp_stats(NULL, &s), NULL);
	cr_assert_str_eq(sval(v, "redis"), "down");
	json_decref(v);
}

Test(resp, stats_redis_mode)
{
	resp_stats_t s = {.redis_up = true, .redis_mode = "redlock"};
	json_t *v = roundtrip(resp_stats(NULL, &s), NULL);

	keys_are(v, "id", "ok", "uptime_s", "connections", "sessions", "leases",
		 "waiters", "acquired_total", "released_total", "timeouts_total",
		 "lost_total", "failovers_total", "failover_lost_total", "redis", "redis_mode", NULL);
	cr_assert_str_eq(sval(v, "redis_mode"), "redlock");
	json_decref(v);

	s.redis_mode = NULL;
	v = roundtrip(resp_stats(NULL, &s), NULL);
	cr_assert_null(json_object_get(v, "redis_mode"), "left out when NULL");
	cr_assert_str_eq(sval(v, "redis"), "up");
	json_decref(v);
}

Test(resp, stats_per_redis_master)
{
	resp_master_t m[2] = {{"10.0.0.1:7000", true, 8192, 3, 0}, {"10.0.0.2:7000", false, 8192, 0, 5}};
	resp_stats_t s = {.redis_up = true, .masters = m, .nmasters = 2};
	json_t *v = roundtrip(resp_stats(NULL, &s), NULL);
	json_t *a = json_object_get(v, "redis_masters"), *e;

	cr_assert(json_is_array(a));
	cr_assert_eq(json_array_size(a), 2);
	e = json_array_get(a, 0);
	keys_are(e, "addr", "up", "slots", "pending", "redirects", NULL);
	cr_assert_str_eq(sval(e, "addr"), "10.0.0.1:7000");
	cr_assert(json_is_true(json_object_get(e, "up")));
	cr_assert_eq(ival(e, "slots"), 8192);
	cr_assert_eq(ival(e, "pending"), 3);
	e = json_array_get(a, 1);
	cr_assert(json_is_false(json_object_get(e, "up")));
	cr_assert_eq(ival(e, "redirects"), 5);
	json_decref(v);
}

Test(resp, events_have_no_id)
{
	char raw[1024];
	json_t *v;

	v = roundtrip(resp_event_lost("ff00", S("db"), "max_hold"), raw);
	cr_assert_str_eq(raw, "{\"event\":\"lost\",\"lease\":\"ff00\",\"lock\":\"db\","
			      "\"reason\":\"max_hold\"}\n");
	keys_are(v, "event", "lease", "lock", "reason", NULL);
	json_decref(v);

	v = roundtrip(resp_event_shutdown(5000), raw);
	cr_assert_str_eq(raw, "{\"event\":\"shutdown\",\"grace_ms\":5000}\n");
	keys_are(v, "event", "grace_ms", NULL);
	json_decref(v);
}

Test(resp, nul_in_owner_is_escaped_on_the_wire)
{
	char raw[1024];
	resp_holder_t h = {LB_MODE_EXCLUSIVE, 1, 1, {"a\0b", 3}, {"\0", 1}, {NULL, 0}};
	resp_inspect_t in = {S("x"), RESP_STATE_EXCLUSIVE, 0, &h, 1, 0, false, 0, NULL, 0, 0};
	json_t *v = roundtrip(resp_inspect(NULL, &in), raw);

	cr_assert_not_null(strstr(raw, "\"owner\":\"a\\u0000b\""), "%s", raw);
	cr_assert_not_null(strstr(raw, "\"client\":\"\\u0000\""), "%s", raw);
	json_decref(v);
}

Test(resp, large_message_dumps_whole)
{
	static resp_lease_t ls[500];
	json_t *v;
	size_t i, len;
	char *line;

	for (i = 0; i < 500; i++) {
		resp_lease_t l = {"0123456789abcdef0123456789abcdef", S("some/lock/name"),
				  LB_MODE_SHARED, (int64_t)i, 1, (int64_t)i};
		ls[i] = l;
	}
	line = resp_dump(resp_leases(NULL, ls, 500), &len);
	cr_assert_gt(len, 500u * 80u);
	cr_assert_eq(line[len - 1], '\n');
	cr_assert_eq(strlen(line), len);
	v = json_loadb(line, len, 0, NULL);
	cr_assert_not_null(v);
	cr_assert_eq(json_array_size(json_object_get(v, "leases")), 500u);
	cr_assert_eq(ival(json_array_get(json_object_get(v, "leases"), 499), "fence"), 499);
	json_decref(v);
	free(line);
}

/* ---- the direct lines of the hot path ----------------------------------------- */

/* Compares a direct line with the builder's (taking msg): equal byte for
 * byte when the direct encoder took it (n > 0). Returns whether it did. */
static bool same_line(size_t n, const char *direct, json_t *msg)
{
	size_t len;
	char *line = resp_dump(msg, &len);

	if (n > 0) {
		cr_assert_eq(n, len, "direct %.*s vs builder %s", (int)n, direct, line);
		cr_assert_eq(memcmp(direct, line, len), 0, "direct %.*s vs builder %s", (int)n,
		             direct, line);
	}
	free(line);
	return n > 0;
}

/* A random string of len bytes: mostly printable ASCII with quotes and
 * backslashes, sometimes a control byte or UTF-8. */
static void random_text(char *out, size_t len, unsigned *seed)
{
	static const char pick[] = "ab/\"\\ {}:,x-_.0123456789~";
	for (size_t i = 0; i < len; i++) {
		unsigned r = (unsigned)rand_r(seed);
		if (r % 97 == 0)
			out[i] = (char)(r % 32); /* control */
		else if (r % 89 == 0 && i + 1 < len) {
			out[i++] = (char)0xc3; /* é */
			out[i] = (char)0xa9;
		} else if (r % 2)
			out[i] = pick[r % (sizeof(pick) - 1)];
		else
			out[i] = (char)(0x20 + r % 95);
	}
}

Test(resp, direct_lines_equal_the_builders)
{
	unsigned seed = 12345;
	char buf[RESP_LINE_MAX], lock[600], idstr[140];
	size_t direct = 0, fallback = 0;
	static const lb_mode_t modes[] = {LB_MODE_EXCLUSIVE, LB_MODE_SHARED, LB_MODE_PERMIT};
	static const int64_t ints[] = {0, 1, -1, 9007199254740992LL, -9007199254740992LL,
	                               INT64_MAX, INT64_MIN, 1795316632016742LL, 30000};

	for (int k = 0; k < 5000; k++) {
		size_t llen = (size_t)rand_r(&seed) % (k % 10 == 0 ? sizeof(lock) : 40);
		size_t ilen = (size_t)rand_r(&seed) % 130;
		json_t *id;
		resp_acquired_t a;
		int64_t v = ints[(size_t)rand_r(&seed) % (sizeof(ints) / sizeof(ints[0]))];

		random_text(lock, llen, &seed);
		random_text(idstr, ilen, &seed);
		switch (k % 4) {
		case 0: id = NULL; break;
		case 1: id = json_integer(v); break;
		case 2: id = json_stringn(idstr, ilen); break; /* NULL when not UTF-8 */
		default: id = json_null(); break;
		}
		a = (resp_acquired_t){"0123456789abcdef0123456789abcdef", {lock, llen},
		                      modes[k % 3], v, k, k % 5};
		if (same_line(resp_line_acquired(buf, id, &a), buf, resp_acquired(id, &a)))
			direct++;
		else
			fallback++;
		same_line(resp_line_released(buf, id, v), buf, resp_released(id, v));
		same_line(resp_line_extended(buf, id, k), buf, resp_extended(id, k));
		json_decref(id);
	}
	/* Both ways were taken: most names are plain ASCII, some are not. */
	cr_expect_gt(direct, 1000u);
	cr_expect_gt(fallback, 100u);
}

Test(resp, direct_lines_leave_the_rest_to_the_builder)
{
	char buf[RESP_LINE_MAX], big[RESP_LINE_MAX];
	json_t *obj = json_object();
	resp_acquired_t a = {"0123456789abcdef0123456789abcdef", S("ok"), LB_MODE_EXCLUSIVE, 1, 2, 1};

	cr_assert_gt(resp_line_acquired(buf, NULL, &a), 0u);
	cr_assert_eq(resp_line_released(buf, obj, 1), 0u, "an object id is not a valid id anyway");
	a.lock = S("caf\xc3\xa9");
	cr_assert_eq(resp_line_acquired(buf, NULL, &a), 0u, "UTF-8 goes through jansson");
	a.lock = S("tab\there");
	cr_assert_eq(resp_line_acquired(buf, NULL, &a), 0u, "control bytes go through jansson");
	memset(big, '"', sizeof(big) - 1);
	a.lock = (lb_str_t){big, sizeof(big) - 1};
	cr_assert_eq(resp_line_acquired(buf, NULL, &a), 0u, "too long for the buffer");
	a.lock = S("ok");
	a.lease = NULL;
	cr_assert_eq(resp_line_acquired(buf, NULL, &a), 0u, "a NULL lease is null: the builder");
	json_decref(obj);
}

Test(resp, inspect_redlock_masters)
{
	resp_master_state_t ms[3] = {{"127.0.0.1:1", 1}, {"127.0.0.1:2", 0}, {"/tmp/r.sock", -1}};
	resp_inspect_t in = {S("x"), RESP_STATE_FREE, 0, NULL, 0, 0, false, 0, ms, 3, 0};
	json_t *v = roundtrip(resp_inspect(NULL, &in), NULL);
	json_t *a = json_object_get(v, "masters");

	cr_assert(json_is_array(a));
	cr_assert_eq(json_array_size(a), 3);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(a, 0), "addr")), "127.0.0.1:1");
	cr_assert(json_is_true(json_object_get(json_array_get(a, 0), "holds")));
	cr_assert(json_is_false(json_object_get(json_array_get(a, 1), "holds")));
	cr_assert(json_is_null(json_object_get(json_array_get(a, 2), "holds")));
	json_decref(v);
	in.nmasters = 0;
	v = roundtrip(resp_inspect(NULL, &in), NULL);
	cr_assert_null(json_object_get(v, "masters"));
	json_decref(v);
}

/* hello's "features" (issue 27): listed when given, in order. */
Test(resp, hello_lists_features)
{
	static const char *const features[] = {"value", "proclaim", NULL};
	resp_hello_t h = {"lockbroker/1.0.0", 1, "s-1", "0123456789abcdef",
	                  {65536, 100, 86400000, 10000, 1000, 1024, 500, 600000, 1000}, features};
	json_t *v = roundtrip(resp_hello(NULL, &h), NULL), *f;

	keys_are(v, "id", "ok", "server", "proto", "session", "broker", "limits", "features", NULL);
	f = json_object_get(v, "features");
	cr_assert_eq(json_array_size(f), 2);
	cr_assert_str_eq(json_string_value(json_array_get(f, 0)), "value");
	cr_assert_str_eq(json_string_value(json_array_get(f, 1)), "proclaim");
	cr_assert_eq(ival(json_object_get(v, "limits"), "max_watches_per_session"), 1000);
	json_decref(v);
}

/* An exclusive holder's value (an election's leader): shown with its bytes
 * (an empty one too); none is left out. proclaim's answer: the fence. */
Test(resp, inspect_shows_a_value_and_proclaim_its_fence)
{
	resp_holder_t h = {LB_MODE_EXCLUSIVE, 900, 1, S("o"), S("c"), {"10.0.0.1\0x", 10}};
	resp_inspect_t in = {S("lead"), RESP_STATE_EXCLUSIVE, 0, &h, 1, 0, true, 9, NULL, 0, 0};
	json_t *v = roundtrip(resp_inspect(NULL, &in), NULL), *h0, *val;

	h0 = json_array_get(json_object_get(v, "holders"), 0);
	keys_are(h0, "mode", "ttl_ms", "count", "owner", "client", "value", NULL);
	val = json_object_get(h0, "value");
	cr_assert_eq(json_string_length(val), 10);
	cr_assert(memcmp(json_string_value(val), "10.0.0.1\0x", 10) == 0);
	json_decref(v);

	h.value = (lb_str_t){"", 0};
	v = roundtrip(resp_inspect(NULL, &in), NULL);
	h0 = json_array_get(json_object_get(v, "holders"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(h0, "value")), "");
	json_decref(v);

	h.value = (lb_str_t){NULL, 0};
	v = roundtrip(resp_inspect(NULL, &in), NULL);
	h0 = json_array_get(json_object_get(v, "holders"), 0);
	cr_assert_null(json_object_get(h0, "value"));
	json_decref(v);

	json_t *id = json_integer(3);
	v = roundtrip(resp_proclaimed(id, 1234567), NULL);
	keys_are(v, "id", "ok", "fence", NULL);
	cr_assert_eq(ival(v, "fence"), 1234567);
	cr_assert_eq(ival(v, "id"), 3);
	json_decref(v);
	json_decref(id);
}

/* A lock held back by a lock delay (issue 27): state "delayed" with the
 * time left; no delay_ms otherwise. */
Test(resp, a_delayed_lock_says_how_long)
{
	resp_inspect_t in = {S("d"), RESP_STATE_DELAYED, 0, NULL, 0, 1, true, 5, NULL, 0, 1400};
	json_t *v = roundtrip(resp_inspect(NULL, &in), NULL);

	cr_assert_str_eq(sval(v, "state"), "delayed");
	cr_assert_eq(ival(v, "delay_ms"), 1400);
	json_decref(v);
	in = (resp_inspect_t){S("d"), RESP_STATE_FREE, 0, NULL, 0, 0, false, 0, NULL, 0, 0};
	v = roundtrip(resp_inspect(NULL, &in), NULL);
	cr_assert_null(json_object_get(v, "delay_ms"));
	json_decref(v);
}
