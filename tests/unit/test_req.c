/*
 * test_req.c - request decoding: every error code, the order of the checks,
 * id echo rules, every field of every op (type, both ends of each range,
 * null as absent, unknown fields), the defaults of acquire, and the texts
 * of bad_json (what and where) and of unknown fields.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/req.h"

/* Parses then unpacks line[0..len); returns LB_OK or the first error. The
 * caller owns *r (req_clear). */
static lb_err_t run_n(const char *line, size_t len, req_t *r, req_error_t *e)
{
	memset(e, 0, sizeof(*e));
	if (req_parse(line, len, r, e) != 0) {
		cr_assert_neq(e->code, LB_OK, "a failure sets a code");
		cr_assert_neq(e->message[0], '\0', "a failure sets a message");
		return e->code;
	}
	if (req_unpack(r, e) != 0) {
		cr_assert_eq(e->code, LB_E_INVALID_ARGUMENT, "unpack: %s", e->message);
		return e->code;
	}
	return LB_OK;
}

static lb_err_t run(const char *line, req_t *r, req_error_t *e)
{
	return run_n(line, strlen(line), r, e);
}

/* Asserts line fails with code, the message holds needle (if any), and
 * req->id is the JSON value id_json ("null" for none). */
static void expect_n(const char *line, size_t len, lb_err_t code,
		     const char *needle, const char *id_json)
{
	req_t r;
	req_error_t e;
	lb_err_t got = run_n(line, len, &r, &e);

	cr_assert_eq(got, code, "%.*s: got %s (%s), want %s", (int)len, line,
		     lb_err_code(got), e.message, lb_err_code(code));
	if (needle != NULL)
		cr_assert_not_null(strstr(e.message, needle),
				   "%.*s: message \"%s\" lacks \"%s\"", (int)len,
				   line, e.message, needle);
	if (id_json == NULL || strcmp(id_json, "null") == 0) {
		cr_assert_null(r.id, "%.*s: id must not be echoed", (int)len, line);
	} else {
		json_t *want = json_loads(id_json, JSON_DECODE_ANY, NULL);

		cr_assert_not_null(want);
		cr_assert_not_null(r.id, "%.*s: id must be echoed", (int)len, line);
		cr_assert(json_equal(r.id, want), "%.*s: wrong id", (int)len, line);
		/* Same JSON type: 5 must not come back as 5.0. */
		cr_assert_eq(json_typeof(r.id), json_typeof(want));
		json_decref(want);
	}
	req_clear(&r);
}

static void expect(const char *line, lb_err_t code, const char *needle)
{
	expect_n(line, strlen(line), code, needle, NULL);
}

static void expect_id(const char *line, lb_err_t code, const char *id_json)
{
	expect_n(line, strlen(line), code, NULL, id_json);
}

/* Asserts line[0, len) fails with code, exactly message msg, and id_json. */
static void expect_msg_n(const char *line, size_t len, lb_err_t code,
			 const char *msg, const char *id_json)
{
	req_t r;
	req_error_t e;

	expect_n(line, len, code, NULL, id_json);
	run_n(line, len, &r, &e);
	cr_assert_str_eq(e.message, msg, "%.*s", (int)len, line);
	req_clear(&r);
}

static void expect_msg(const char *line, lb_err_t code, const char *msg,
		       const char *id_json)
{
	expect_msg_n(line, strlen(line), code, msg, id_json);
}

static void expect_ok(const char *line)
{
	req_t r;
	req_error_t e;
	lb_err_t got = run(line, &r, &e);

	cr_assert_eq(got, LB_OK, "%s: got %s (%s)", line, lb_err_code(got),
		     e.message);
	req_clear(&r);
}

/* Parses an acquire that must succeed; the caller clears r. */
static req_acquire_t *acquire_ok(const char *line, req_t *r)
{
	req_error_t e;
	lb_err_t got = run(line, r, &e);

	cr_assert_eq(got, LB_OK, "%s: got %s (%s)", line, lb_err_code(got),
		     e.message);
	cr_assert_eq(r->op, OP_ACQUIRE);
	return &r->u.acquire;
}

/* A string of n copies of c, as a JSON string literal body. */
static char *rep(char c, size_t n)
{
	char *s = malloc(n + 1);

	cr_assert_not_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* ---- JSON and shape ---------------------------------------------------- */

Test(req, bad_json)
{
	expect("{", LB_E_BAD_JSON, NULL);
	expect("", LB_E_BAD_JSON, NULL);
	expect("   ", LB_E_BAD_JSON, NULL);
	expect("nul", LB_E_BAD_JSON, NULL);
	expect("{\"op\":\"ping\",}", LB_E_BAD_JSON, NULL);
	expect("{\"op\":'ping'}", LB_E_BAD_JSON, NULL);
	/* Exactly one value: trailing garbage or a second value is bad. */
	expect("{\"op\":\"ping\"} x", LB_E_BAD_JSON, NULL);
	expect("{\"op\":\"ping\"}{\"op\":\"ping\"}", LB_E_BAD_JSON, NULL);
	/* A real no double can hold. */
	expect("{\"op\":\"ping\",\"x\":1e400}", LB_E_BAD_JSON, NULL);
}

Test(req, bad_json_says_what_and_where)
{
	/* The offset counts bytes from 0: byte 17 is the '"' of "lock". */
	expect_msg("{\"id\":8,\"op\":\"a\" \"lock\":1}", LB_E_BAD_JSON,
		   "invalid JSON at byte 17: expected ',' or '}'", NULL);
	expect_msg("{\"id\":7,\"op\":\"ping\"", LB_E_BAD_JSON,
		   "invalid JSON at byte 19: unexpected end of line", NULL);
	expect_msg("   ", LB_E_BAD_JSON,
		   "invalid JSON at byte 3: unexpected end of line", NULL);
	expect_msg("{\"op\":'ping'}", LB_E_BAD_JSON,
		   "invalid JSON at byte 6: expected a value", NULL);
	expect_msg("{\"op\":\"ping\",}", LB_E_BAD_JSON,
		   "invalid JSON at byte 13: expected a string key", NULL);
	expect_msg("{\"op\" \"ping\"}", LB_E_BAD_JSON,
		   "invalid JSON at byte 6: expected ':'", NULL);
	expect_msg("{\"op\":\"ping\"} x", LB_E_BAD_JSON,
		   "invalid JSON at byte 14: extra bytes after the value", NULL);
	expect_msg("{\"op\":\"ping\",\"op\":\"ping\"}", LB_E_BAD_JSON,
		   "invalid JSON at byte 13: duplicate key", NULL);
	expect_msg("{\"op\":\"ping\",\"x\":1e400}", LB_E_BAD_JSON,
		   "invalid JSON at byte 17: number too large", NULL);
	expect_msg("{\"op\":\"ping\",\"x\":01}", LB_E_BAD_JSON,
		   "invalid JSON at byte 17: invalid number", NULL);
	expect_msg("{\"op\":tru}", LB_E_BAD_JSON,
		   "invalid JSON at byte 6: invalid literal", NULL);
	expect_msg("{\"op\":\"a\\qb\"}", LB_E_BAD_JSON,
		   "invalid JSON at byte 8: invalid escape", NULL);
	expect_msg("{\"op\":\"\\ud800\"}", LB_E_BAD_JSON,
		   "invalid JSON at byte 7: unpaired surrogate in a \\u escape", NULL);
	expect_msg("{\"op\":\"a\tb\"}", LB_E_BAD_JSON,
		   "invalid JSON at byte 8: raw control character in a string", NULL);
}

Test(req, bad_json_never_quotes_the_line)
{
	/* Only printable ASCII of our own words, whatever the line held. */
	static const char a[] = "{\"op\":\"\x1b[31m\xff\"}";
	static const char b[] = "{\"op\":\x1b[31m}";
	static const char *const lines[] = {a, b};
	req_t r;
	req_error_t e;

	for (size_t i = 0; i < 2; i++) {
		cr_assert_eq(run(lines[i], &r, &e), LB_E_BAD_JSON);
		for (const char *m = e.message; *m != '\0'; m++)
			cr_assert(*m >= 0x20 && *m < 0x7f, "%s", e.message);
		cr_assert_null(strstr(e.message, "[31m"), "%s", e.message);
		req_clear(&r);
	}
}

Test(req, trailing_whitespace_is_fine)
{
	expect_ok("{\"op\":\"ping\"}  \t\r");
	expect_ok("  {\"op\":\"ping\"}");
}

Test(req, bad_json_has_no_id)
{
	expect_id("{\"id\":7,\"op\":\"ping\"", LB_E_BAD_JSON, NULL);
}

Test(req, duplicate_keys_are_bad_json)
{
	expect("{\"op\":\"ping\",\"op\":\"ping\"}", LB_E_BAD_JSON, NULL);
	expect_id("{\"id\":1,\"id\":1,\"op\":\"ping\"}", LB_E_BAD_JSON, NULL);
	expect("{\"op\":\"acquire\",\"lock\":\"a\",\"lock\":\"b\"}", LB_E_BAD_JSON,
	       NULL);
	/* Also next to a huge integer. */
	expect("{\"op\":\"ping\",\"x\":99999999999999999999,\"x\":1}",
	       LB_E_BAD_JSON, "duplicate key");
}

Test(req, invalid_utf8_is_bad_json)
{
	static const char a[] = "{\"op\":\"acquire\",\"lock\":\"\xff\"}";
	static const char b[] = "{\"op\":\"acquire\",\"lock\":\"\xc3\"}";  /* cut */
	static const char c[] = "{\"op\":\"acquire\",\"lock\":\"\xc0\xaf\"}"; /* overlong */
	static const char d[] = "{\"op\":\"acquire\",\"lock\":\"\xed\xa0\x80\"}"; /* surrogate */
	static const char e[] = "{\"id\":1,\"op\":\"ping\",\"\xfe\":1}";

	expect_n(a, sizeof(a) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_n(b, sizeof(b) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_n(c, sizeof(c) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_n(d, sizeof(d) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_n(e, sizeof(e) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_msg_n(c, sizeof(c) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 24: invalid UTF-8", NULL);
	expect_msg_n(e, sizeof(e) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 21: invalid UTF-8", NULL);
}

Test(req, raw_nul_and_control_bytes_are_bad_json)
{
	static const char a[] = "{\"op\":\"ping\"}\0";
	static const char b[] = "{\"op\":\"pi\0ng\"}";
	static const char c[] = "{\"op\":\"acquire\",\"lock\":\"a\tb\"}";

	expect_n(a, sizeof(a) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect_n(b, sizeof(b) - 1, LB_E_BAD_JSON, NULL, NULL);
	expect(c, LB_E_BAD_JSON, NULL);
	expect_msg_n(b, sizeof(b) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 9: raw NUL byte", NULL);
}

Test(req, raw_nul_after_a_number_or_literal_is_bad_json)
{
	/* jansson 2.14 read these NUL bytes as the end of its buffer and took
	 * the line (issue 14). */
	static const char line[] = "{\"id\":8,\"op\":\"acquire\",\"lock\":\"r2\","
				   "\"wait_ms\":0\0,\"detach\":true\0,\"watchdog\":false}";
	static const char lit[] = "{\"id\":8,\"op\":\"acquire\",\"lock\":\"r2\","
				  "\"detach\":true\0,\"watchdog\":false}";
	static const char id[] = "{\"id\":8\0,\"op\":\"ping\"}";

	expect_msg_n(line, sizeof(line) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 46: raw NUL byte", NULL);
	expect_msg_n(lit, sizeof(lit) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 48: raw NUL byte", NULL);
	expect_msg_n(id, sizeof(id) - 1, LB_E_BAD_JSON,
		     "invalid JSON at byte 7: raw NUL byte", NULL);
}

Test(req, not_an_object_is_bad_request)
{
	expect("[]", LB_E_BAD_REQUEST, "object");
	expect("[{\"op\":\"ping\"}]", LB_E_BAD_REQUEST, NULL);
	expect("1", LB_E_BAD_REQUEST, NULL);
	expect("\"ping\"", LB_E_BAD_REQUEST, NULL);
	expect("null", LB_E_BAD_REQUEST, NULL);
	expect("true", LB_E_BAD_REQUEST, NULL);
}

Test(req, op_missing_or_not_string_is_bad_request)
{
	expect("{}", LB_E_BAD_REQUEST, "'op'");
	expect("{\"op\":null}", LB_E_BAD_REQUEST, "'op'");
	expect("{\"op\":1}", LB_E_BAD_REQUEST, "'op'");
	expect("{\"op\":[\"ping\"]}", LB_E_BAD_REQUEST, "'op'");
	expect("{\"OP\":\"ping\"}", LB_E_BAD_REQUEST, "'op'");
}

Test(req, shape_is_checked_before_id)
{
	/* A valid id is echoed by a bad_request too, so a client matching
	 * answers by id gets this one (issue 14)... */
	expect_id("{\"id\":5}", LB_E_BAD_REQUEST, "5");
	expect_id("{\"id\":\"x\",\"op\":2}", LB_E_BAD_REQUEST, "\"x\"");
	expect_id("{\"op\":null,\"id\":-9007199254740992}", LB_E_BAD_REQUEST,
		  "-9007199254740992");
	expect_id("{\"id\":null,\"lock\":\"a\"}", LB_E_BAD_REQUEST, NULL);
	/* ...but a bad id does not hide a bad shape, and is not echoed. */
	expect_id("{\"id\":true}", LB_E_BAD_REQUEST, NULL);
	expect_id("{\"id\":1.0,\"op\":[]}", LB_E_BAD_REQUEST, NULL);
	expect_id("{\"id\":9007199254740993}", LB_E_BAD_REQUEST, NULL);
	/* Not an object: no id to look at. */
	expect_id("[{\"id\":5,\"op\":\"ping\"}]", LB_E_BAD_REQUEST, NULL);
}

/* ---- id ---------------------------------------------------------------- */

Test(req, id_absent_or_null_is_none)
{
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"ping\"}", &r, &e), LB_OK);
	cr_assert_null(r.id);
	cr_assert_eq(r.op, OP_PING);
	req_clear(&r);
	cr_assert_eq(run("{\"id\":null,\"op\":\"ping\"}", &r, &e), LB_OK);
	cr_assert_null(r.id);
	req_clear(&r);
}

Test(req, id_valid_values_are_echoed)
{
	char line[400], idj[200];
	char *s128 = rep('i', 128);
	req_t r;
	req_error_t e;

	expect_id("{\"id\":\"a\",\"op\":\"nope\"}", LB_E_UNKNOWN_OP, "\"a\"");
	expect_id("{\"id\":\"\",\"op\":\"nope\"}", LB_E_UNKNOWN_OP, "\"\"");
	expect_id("{\"id\":0,\"op\":\"nope\"}", LB_E_UNKNOWN_OP, "0");
	expect_id("{\"id\":-3,\"op\":\"nope\"}", LB_E_UNKNOWN_OP, "-3");
	expect_id("{\"id\":9007199254740992,\"op\":\"nope\"}", LB_E_UNKNOWN_OP,
		  "9007199254740992");
	expect_id("{\"id\":-9007199254740992,\"op\":\"nope\"}", LB_E_UNKNOWN_OP,
		  "-9007199254740992");
	snprintf(line, sizeof(line), "{\"id\":\"%s\",\"op\":\"nope\"}", s128);
	snprintf(idj, sizeof(idj), "\"%s\"", s128);
	expect_n(line, strlen(line), LB_E_UNKNOWN_OP, NULL, idj);
	cr_assert_eq(run(line, &r, &e), LB_E_UNKNOWN_OP);
	cr_assert_not_null(r.id);
	cr_assert_eq(json_string_length(r.id), 128u);
	req_clear(&r);
	/* The id survives into a successful request, also with a NUL. */
	cr_assert_eq(run("{\"op\":\"ping\",\"id\":\"a\\u0000b\"}", &r, &e), LB_OK);
	cr_assert_eq(json_string_length(r.id), 3u);
	cr_assert_eq(memcmp(json_string_value(r.id), "a\0b", 3), 0);
	req_clear(&r);
	free(s128);
}

Test(req, id_invalid_values)
{
	char line[400];
	char *s129 = rep('i', 129);
	static const char *const bad[] = {
		"true", "false", "1.5", "1.0", "-0.0", "1e3", "{}", "[]", "[1]",
		"9007199254740993", "-9007199254740993", "9223372036854775807",
		"-9223372036854775808",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line), "{\"id\":%s,\"op\":\"ping\"}", bad[i]);
		expect_n(line, strlen(line), LB_E_INVALID_ARGUMENT, "'id'", NULL);
	}
	snprintf(line, sizeof(line), "{\"id\":\"%s\",\"op\":\"ping\"}", s129);
	expect_n(line, strlen(line), LB_E_INVALID_ARGUMENT, "'id'", NULL);
	free(s129);
}

Test(req, id_too_big_for_jansson_is_invalid_argument)
{
	expect_id("{\"id\":99999999999999999999,\"op\":\"ping\"}",
		  LB_E_INVALID_ARGUMENT, NULL);
	expect_id("{\"id\":-99999999999999999999,\"op\":\"ping\"}",
		  LB_E_INVALID_ARGUMENT, NULL);
	expect("{\"op\":\"ping\",\"id\":123456789012345678901234567890}",
	       LB_E_INVALID_ARGUMENT, "'id'");
}

Test(req, huge_integer_elsewhere_keeps_id_an_integer)
{
	/* How a field is read never depends on another: the id stays the
	 * integer 5 next to a token beyond int64. */
	expect_n("{\"id\":5,\"op\":\"ping\",\"x\":99999999999999999999}",
		 strlen("{\"id\":5,\"op\":\"ping\",\"x\":99999999999999999999}"),
		 LB_E_INVALID_ARGUMENT, "unknown field 'x'", "5");
	expect_n("{\"id\":-9007199254740992,\"op\":\"acquire\",\"lock\":\"a\","
		 "\"wait_ms\":99999999999999999999}",
		 strlen("{\"id\":-9007199254740992,\"op\":\"acquire\",\"lock\":\"a\","
			"\"wait_ms\":99999999999999999999}"),
		 LB_E_INVALID_ARGUMENT, "'wait_ms'", "-9007199254740992");
	expect_n("{\"id\":\"q\",\"op\":\"acquire\",\"lock\":\"a\",\"ttl_ms\":500,"
		 "\"max_hold_ms\":-99999999999999999999}",
		 strlen("{\"id\":\"q\",\"op\":\"acquire\",\"lock\":\"a\",\"ttl_ms\":500,"
			"\"max_hold_ms\":-99999999999999999999}"),
		 LB_E_INVALID_ARGUMENT, "'max_hold_ms'", "\"q\"");
	expect_id("{\"id\":1,\"op\":\"nope\",\"x\":99999999999999999999}",
		  LB_E_UNKNOWN_OP, "1");
	expect_id("{\"id\":2.5,\"op\":\"ping\",\"x\":99999999999999999999}",
		  LB_E_INVALID_ARGUMENT, NULL);
}

Test(req, an_echoed_id_is_exactly_the_one_sent)
{
	/* Before issue 14 the huge x made the whole line load as reals, and
	 * 2^53 + 1 came back as 2^53. Out of range: invalid_argument, id null. */
	expect_msg("{\"id\":9007199254740993,\"op\":\"ping\",\"x\":99999999999999999999}",
		   LB_E_INVALID_ARGUMENT,
		   "field 'id' must be a string of at most 128 bytes or an integer in "
		   "-9007199254740992..9007199254740992", NULL);
	expect_id("{\"id\":-9007199254740993,\"op\":\"ping\",\"x\":-99999999999999999999}",
		  LB_E_INVALID_ARGUMENT, NULL);
	/* A real id stayed a real then too; 1.0 came back as the integer 1. */
	expect_id("{\"id\":1.0,\"op\":\"nope\",\"x\":99999999999999999999}",
		  LB_E_INVALID_ARGUMENT, NULL);
	expect_id("{\"id\":1e0,\"op\":\"nope\"}", LB_E_INVALID_ARGUMENT, NULL);
	/* The largest ids come back as sent, next to a huge token or not. */
	expect_id("{\"id\":9007199254740992,\"op\":\"nope\",\"x\":99999999999999999999}",
		  LB_E_UNKNOWN_OP, "9007199254740992");
	expect_id("{\"id\":-9007199254740992,\"op\":\"nope\",\"x\":1e300}",
		  LB_E_UNKNOWN_OP, "-9007199254740992");
}

Test(req, integer_fields_are_exact_or_out_of_range)
{
	req_t r;
	req_acquire_t *a;

	/* 2^53 is taken exactly; 2^53 + 1 is out of range, not rounded down
	 * to it, also beyond int64 and next to another huge token. */
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"wait_ms\":9007199254740992,"
		       "\"owner\":null}", &r);
	cr_assert_eq(a->wait_ms, INT64_C(9007199254740992));
	req_clear(&r);
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"wait_ms\":9007199254740993}",
	       LB_E_INVALID_ARGUMENT,
	       "field 'wait_ms' must be an integer in 0..9007199254740992");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"wait_ms\":18446744073709551617}",
	       LB_E_INVALID_ARGUMENT,
	       "field 'wait_ms' must be an integer in 0..9007199254740992");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"ttl_ms\":1000,"
	       "\"wait_ms\":9007199254740993,\"x2\":null}",
	       LB_E_INVALID_ARGUMENT, "unknown field 'x2'");
	expect("{\"op\":\"cancel\",\"target\":-99999999999999999999}",
	       LB_E_INVALID_ARGUMENT, "field 'target' must be");
	/* A field before a huge token is read as written. */
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"ttl_ms\":1000}", &r);
	cr_assert_eq(a->ttl_ms, 1000);
	req_clear(&r);
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"ttl_ms\":1000,"
	       "\"limit\":99999999999999999999}",
	       LB_E_INVALID_ARGUMENT, "field 'limit' must be an integer in 1..1000000");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"ttl_ms\":1000.0,"
	       "\"owner\":99999999999999999999}",
	       LB_E_INVALID_ARGUMENT, "field 'ttl_ms' must be an integer in 100..86400000");
}

Test(req, id_is_checked_before_op_name)
{
	expect_id("{\"id\":true,\"op\":\"nope\"}", LB_E_INVALID_ARGUMENT, NULL);
	expect_id("{\"op\":\"nope\",\"id\":[]}", LB_E_INVALID_ARGUMENT, NULL);
}

/* ---- op name ----------------------------------------------------------- */

Test(req, every_op_name_is_known)
{
	static const char *const names[] = {"hello", "ping", "acquire", "release",
					    "extend", "cancel", "inspect",
					    "leases", "stats", "proclaim", "watch", "unwatch", "acquire_all"};
	char line[64];
	size_t i;
	req_t r;
	req_error_t e;

	cr_assert_eq(sizeof(names) / sizeof(names[0]), (size_t)OP__COUNT);
	for (i = 0; i < OP__COUNT; i++) {
		cr_assert_str_eq(req_op_name((req_op_t)i), names[i]);
		snprintf(line, sizeof(line), "{\"op\":\"%s\"}", names[i]);
		cr_assert_eq(req_parse(line, strlen(line), &r, &e), 0, "%s", line);
		cr_assert_eq(r.op, (req_op_t)i);
		req_clear(&r);
	}
	cr_assert_null(req_op_name(OP__COUNT));
	cr_assert_null(req_op_name((req_op_t)-1));
}

Test(req, unknown_op)
{
	expect_id("{\"op\":\"PING\",\"id\":9}", LB_E_UNKNOWN_OP, "9");
	expect("{\"op\":\"\"}", LB_E_UNKNOWN_OP, "unknown op ''");
	expect("{\"op\":\"pin\"}", LB_E_UNKNOWN_OP, "'pin'");
	expect("{\"op\":\"pingg\"}", LB_E_UNKNOWN_OP, "'pingg'");
	expect("{\"op\":\"ping\\u0000\"}", LB_E_UNKNOWN_OP, "'ping?'");
	expect("{\"op\":\"a\\u0001\\nb\\u00e9\"}", LB_E_UNKNOWN_OP, "'a?\?b?\?'");
}

Test(req, unknown_op_name_is_cut_in_message)
{
	char *name = rep('n', 300);
	char line[400], want[120];
	req_t r;
	req_error_t e;

	snprintf(line, sizeof(line), "{\"op\":\"%s\"}", name);
	cr_assert_eq(run(line, &r, &e), LB_E_UNKNOWN_OP);
	name[64] = '\0';
	snprintf(want, sizeof(want), "'%s...'", name);
	cr_assert_not_null(strstr(e.message, want), "%s", e.message);
	cr_assert_lt(strlen(e.message), 100u);
	req_clear(&r);
	free(name);
}

/* ---- fields common to every op ----------------------------------------- */

Test(req, unknown_fields_are_refused_even_null)
{
	expect("{\"op\":\"ping\",\"x\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'x'");
	expect("{\"op\":\"ping\",\"x\":null}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'x'");
	expect("{\"op\":\"leases\",\"lock\":\"a\"}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'lock'");
	expect("{\"op\":\"stats\",\"verbose\":true}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'verbose'");
	expect("{\"op\":\"hello\",\"lock\":\"a\"}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'lock'");
	expect("{\"op\":\"release\",\"lease\":\"l\",\"ttl_ms\":100}",
	       LB_E_INVALID_ARGUMENT, "unknown field 'ttl_ms'");
	expect("{\"op\":\"acquire\",\"lock\":\"a\",\"ttl\":100}",
	       LB_E_INVALID_ARGUMENT, "unknown field 'ttl'");
	expect("{\"op\":\"cancel\",\"target\":1,\"id2\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'id2'");
	expect("{\"op\":\"inspect\",\"lock\":\"a\",\"Lock\":\"a\"}",
	       LB_E_INVALID_ARGUMENT, "unknown field 'Lock'");
	expect("{\"op\":\"extend\",\"lease\":\"l\",\"ttl_ms\":100,\"mode\":null}",
	       LB_E_INVALID_ARGUMENT, "unknown field 'mode'");
}

Test(req, unknown_field_keeps_valid_id)
{
	expect_id("{\"id\":\"r1\",\"op\":\"ping\",\"x\":1}", LB_E_INVALID_ARGUMENT,
		  "\"r1\"");
}

Test(req, a_key_holding_nul_is_an_unknown_field)
{
	/* Valid JSON (\u0000 in a key), so not bad_json: the key is masked. */
	expect_msg("{\"id\":9,\"op\":\"ping\",\"\\u0000\":1}", LB_E_INVALID_ARGUMENT,
		   "unknown field '?'", "9");
	expect_msg("{\"id\":\"n\",\"op\":\"acquire\",\"lock\":\"a\",\"lock\\u0000\":1}",
		   LB_E_INVALID_ARGUMENT, "unknown field 'lock?'", "\"n\"");
	/* "op\u0000" is not "op": the op is still missing. */
	expect_msg("{\"id\":3,\"op\\u0000\":\"ping\"}", LB_E_BAD_REQUEST,
		   "field 'op' is required", "3");
	expect_id("{\"id\\u0000\":3,\"op\":\"nope\"}", LB_E_UNKNOWN_OP, NULL);
}

Test(req, a_field_of_another_op_lists_this_ops_fields)
{
	expect_msg("{\"op\":\"release\",\"lock\":\"a\"}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'lock' (release takes 'lease')", NULL);
	expect_msg("{\"id\":4,\"op\":\"release\",\"lease\":\"l\",\"ttl_ms\":100}",
		   LB_E_INVALID_ARGUMENT,
		   "unknown field 'ttl_ms' (release takes 'lease')", "4");
	expect_msg("{\"op\":\"extend\",\"lease\":\"l\",\"ttl_ms\":100,\"mode\":null}",
		   LB_E_INVALID_ARGUMENT,
		   "unknown field 'mode' (extend takes 'lease', 'ttl_ms')", NULL);
	expect_msg("{\"op\":\"acquire\",\"lock\":\"a\",\"lease\":\"l\"}",
		   LB_E_INVALID_ARGUMENT,
		   "unknown field 'lease' (acquire takes 'lock', 'mode', 'limit', 'ttl_ms', "
		   "'wait_ms', 'watchdog', 'owner', 'fair', 'detach', 'max_hold_ms', 'value', "
		   "'lock_delay_ms')", NULL);
	expect_msg("{\"op\":\"proclaim\",\"lease\":\"l\",\"value\":\"v\",\"lock\":\"a\"}",
		   LB_E_INVALID_ARGUMENT, "unknown field 'lock' (proclaim takes 'lease', 'value')",
		   NULL);
	expect_msg("{\"op\":\"hello\",\"lock\":\"a\"}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'lock' (hello takes 'client', 'auth', 'keepalive_ms')",
		   NULL);
	expect_msg("{\"op\":\"inspect\",\"target\":1}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'target' (inspect takes 'lock')", NULL);
	expect_msg("{\"op\":\"cancel\",\"auth\":\"s\"}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'auth' (cancel takes 'target')", NULL);
	expect_msg("{\"op\":\"leases\",\"lock\":\"a\"}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'lock' (leases takes no fields)", NULL);
	expect_msg("{\"op\":\"ping\",\"client\":\"c\"}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'client' (ping takes no fields)", NULL);
	expect_msg("{\"op\":\"stats\",\"max_hold_ms\":100}", LB_E_INVALID_ARGUMENT,
		   "unknown field 'max_hold_ms' (stats takes no fields)", NULL);
	/* A name no op takes stays short, as does a near miss. */
	expect_msg("{\"op\":\"release\",\"lease\":\"l\",\"x\":1}",
		   LB_E_INVALID_ARGUMENT, "unknown field 'x'", NULL);
	expect_msg("{\"op\":\"acquire\",\"lock\":\"a\",\"Lock\":1}",
		   LB_E_INVALID_ARGUMENT, "unknown field 'Lock'", NULL);
	expect_msg("{\"op\":\"ping\",\"lock\\u0000\":1}",
		   LB_E_INVALID_ARGUMENT, "unknown field 'lock?'", NULL);
}

Test(req, unknown_field_is_reported_before_bad_values)
{
	/* lock missing and ttl_ms out of range, but the typo comes first. */
	expect("{\"op\":\"acquire\",\"ttl_ms\":1,\"bogus\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'bogus'");
	expect("{\"op\":\"extend\",\"tll_ms\":100}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'tll_ms'");
}

Test(req, unknown_field_name_is_masked_and_cut)
{
	char *name = rep('k', 200);
	char line[400], want[120];
	req_t r;
	req_error_t e;

	expect("{\"op\":\"ping\",\"a\\u0001\\u001b[31m\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'a??[31m'");
	expect("{\"op\":\"ping\",\"\\u00e9t\\u00e9\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field '?\?t?\?'");
	expect("{\"op\":\"ping\",\"\\u007f\":1}", LB_E_INVALID_ARGUMENT,
	       "unknown field '?'");
	snprintf(line, sizeof(line), "{\"op\":\"ping\",\"%s\":1}", name);
	cr_assert_eq(run(line, &r, &e), LB_E_INVALID_ARGUMENT);
	name[64] = '\0';
	snprintf(want, sizeof(want), "unknown field '%s...'", name);
	cr_assert_str_eq(e.message, want);
	req_clear(&r);
	free(name);
}

Test(req, field_order_follows_table)
{
	/* lock is checked before ttl_ms, mode before ttl_ms. */
	expect("{\"op\":\"acquire\",\"ttl_ms\":1}", LB_E_INVALID_ARGUMENT,
	       "field 'lock' is required");
	expect("{\"op\":\"acquire\",\"ttl_ms\":1,\"mode\":\"x\",\"lock\":\"a\"}",
	       LB_E_INVALID_ARGUMENT, "field 'mode'");
	expect("{\"op\":\"extend\",\"ttl_ms\":1}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' is required");
}

Test(req, ops_without_fields)
{
	expect_ok("{\"op\":\"ping\"}");
	expect_ok("{\"op\":\"leases\",\"id\":1}");
	expect_ok("{\"id\":\"s\",\"op\":\"stats\"}");
}

/* ---- hello ------------------------------------------------------------- */

Test(req, hello_fields)
{
	char line[5000];
	char *s;
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"hello\"}", &r, &e), LB_OK);
	cr_assert_null(r.u.hello.client.ptr);
	cr_assert_null(r.u.hello.auth.ptr);
	cr_assert_eq(r.u.hello.keepalive_ms, 0);
	req_clear(&r);

	cr_assert_eq(run("{\"op\":\"hello\",\"client\":\"w\\u0000/1\",\"auth\":\"\","
			 "\"keepalive_ms\":500}", &r, &e), LB_OK);
	cr_assert_eq(r.u.hello.client.len, 4u);
	cr_assert_eq(memcmp(r.u.hello.client.ptr, "w\0/1", 4), 0);
	cr_assert_not_null(r.u.hello.auth.ptr);
	cr_assert_eq(r.u.hello.auth.len, 0u);
	cr_assert_eq(r.u.hello.keepalive_ms, 500);
	req_clear(&r);

	cr_assert_eq(run("{\"op\":\"hello\",\"client\":null,\"auth\":null,"
			 "\"keepalive_ms\":null}", &r, &e), LB_OK);
	cr_assert_null(r.u.hello.client.ptr);
	cr_assert_null(r.u.hello.auth.ptr);
	cr_assert_eq(r.u.hello.keepalive_ms, 0);
	req_clear(&r);

	expect_ok("{\"op\":\"hello\",\"keepalive_ms\":600000}");
	expect("{\"op\":\"hello\",\"keepalive_ms\":499}", LB_E_INVALID_ARGUMENT,
	       "field 'keepalive_ms' must be an integer in 500..600000");
	expect("{\"op\":\"hello\",\"keepalive_ms\":600001}", LB_E_INVALID_ARGUMENT,
	       "'keepalive_ms'");
	expect("{\"op\":\"hello\",\"keepalive_ms\":1000.0}", LB_E_INVALID_ARGUMENT,
	       "'keepalive_ms'");
	expect("{\"op\":\"hello\",\"keepalive_ms\":\"1000\"}", LB_E_INVALID_ARGUMENT,
	       "'keepalive_ms'");
	expect("{\"op\":\"hello\",\"client\":5}", LB_E_INVALID_ARGUMENT,
	       "field 'client' must be a string of at most 128 bytes");
	expect("{\"op\":\"hello\",\"auth\":true}", LB_E_INVALID_ARGUMENT,
	       "field 'auth' must be a string");

	s = rep('c', 128);
	snprintf(line, sizeof(line), "{\"op\":\"hello\",\"client\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('c', 129);
	snprintf(line, sizeof(line), "{\"op\":\"hello\",\"client\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'client'");
	free(s);
	/* 64 two-byte characters are 128 bytes; one more is 130. */
	line[0] = '\0';
	strcat(line, "{\"op\":\"hello\",\"client\":\"");
	for (int i = 0; i < 64; i++)
		strcat(line, "\xc3\xa9");
	strcat(line, "\"}");
	expect_ok(line);
	line[strlen(line) - 2] = '\0';
	strcat(line, "\xc3\xa9\"}");
	expect(line, LB_E_INVALID_ARGUMENT, "'client'");

	s = rep('a', 4096);
	snprintf(line, sizeof(line), "{\"op\":\"hello\",\"auth\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('a', 4097);
	snprintf(line, sizeof(line), "{\"op\":\"hello\",\"auth\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'auth'");
	free(s);
}

/* ---- acquire ----------------------------------------------------------- */

Test(req, acquire_defaults)
{
	req_t r;
	req_acquire_t *a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"db\"}", &r);

	cr_assert_eq(a->lock.len, 2u);
	cr_assert_eq(memcmp(a->lock.ptr, "db", 2), 0);
	cr_assert_eq(a->mode, LB_MODE_EXCLUSIVE);
	cr_assert_eq(a->limit, 0);
	cr_assert_eq(a->ttl_ms, 0);
	cr_assert_eq(a->wait_ms, -1);
	cr_assert_eq(a->watchdog, true);
	cr_assert_not_null(a->owner.ptr);
	cr_assert_eq(a->owner.len, 0u);
	cr_assert_eq(a->fair, true);
	cr_assert_eq(a->detach, false);
	cr_assert_eq(a->max_hold_ms, 0);
	req_clear(&r);
}

Test(req, acquire_nulls_are_defaults)
{
	req_t r;
	req_acquire_t *a = acquire_ok(
		"{\"op\":\"acquire\",\"lock\":\"db\",\"mode\":null,\"limit\":null,"
		"\"ttl_ms\":null,\"wait_ms\":null,\"watchdog\":null,\"owner\":null,"
		"\"fair\":null,\"detach\":null,\"max_hold_ms\":null,\"id\":null}", &r);

	cr_assert_eq(a->mode, LB_MODE_EXCLUSIVE);
	cr_assert_eq(a->limit, 0);
	cr_assert_eq(a->ttl_ms, 0);
	cr_assert_eq(a->wait_ms, -1);
	cr_assert_eq(a->watchdog, true);
	cr_assert_not_null(a->owner.ptr);
	cr_assert_eq(a->owner.len, 0u);
	cr_assert_eq(a->fair, true);
	cr_assert_eq(a->detach, false);
	cr_assert_eq(a->max_hold_ms, 0);
	cr_assert_null(r.id);
	req_clear(&r);
}

Test(req, acquire_all_fields)
{
	req_t r;
	req_acquire_t *a = acquire_ok(
		"{\"id\":3,\"op\":\"acquire\",\"lock\":\"x/\\u00e9\",\"mode\":\"shared\","
		"\"ttl_ms\":100,\"wait_ms\":0,\"watchdog\":false,\"owner\":\"t\\u00001\","
		"\"fair\":false,\"detach\":false,\"max_hold_ms\":86400000}", &r);

	cr_assert_eq(a->lock.len, 4u);
	cr_assert_eq(memcmp(a->lock.ptr, "x/\xc3\xa9", 4), 0);
	cr_assert_eq(a->mode, LB_MODE_SHARED);
	cr_assert_eq(a->ttl_ms, 100);
	cr_assert_eq(a->wait_ms, 0);
	cr_assert_eq(a->watchdog, false);
	cr_assert_eq(a->owner.len, 3u);
	cr_assert_eq(memcmp(a->owner.ptr, "t\0" "1", 3), 0);
	cr_assert_eq(a->fair, false);
	cr_assert_eq(a->detach, false);
	cr_assert_eq(a->max_hold_ms, 86400000);
	cr_assert_eq(json_integer_value(r.id), 3);
	req_clear(&r);
}

Test(req, acquire_lock_rules)
{
	char line[700];
	char *s;

	expect("{\"op\":\"acquire\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lock' is required");
	expect("{\"op\":\"acquire\",\"lock\":null}", LB_E_INVALID_ARGUMENT,
	       "field 'lock' is required");
	expect("{\"op\":\"acquire\",\"lock\":\"\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lock' must be a string of 1..512 bytes");
	expect("{\"op\":\"acquire\",\"lock\":1}", LB_E_INVALID_ARGUMENT, "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":[\"a\"]}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	/* \u0000 is refused in a lock name (a control character)... */
	expect("{\"op\":\"acquire\",\"lock\":\"a\\u0000b\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":\"\\u0001\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":\"a\\tb\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":\"a\\n\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":\"\\u001f\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"acquire\",\"lock\":\"\\u007f\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	/* ...but U+0080 and up, space and ~ are fine. */
	expect_ok("{\"op\":\"acquire\",\"lock\":\"\\u0080 ~\\u2028\\ud83d\\ude00\"}");
	expect_ok("{\"op\":\"acquire\",\"lock\":\" \"}");

	s = rep('L', 512);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('L', 513);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'lock'");
	free(s);
}

Test(req, acquire_owner_may_hold_nul)
{
	char line[400];
	char *s;
	req_t r;
	req_acquire_t *a = acquire_ok(
		"{\"op\":\"acquire\",\"lock\":\"l\",\"owner\":\"\\u0000\\u0001\"}", &r);

	cr_assert_eq(a->owner.len, 2u);
	cr_assert_eq(memcmp(a->owner.ptr, "\0\1", 2), 0);
	req_clear(&r);

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"owner\":\"\"}", &r);
	cr_assert_eq(a->owner.len, 0u);
	cr_assert_not_null(a->owner.ptr);
	req_clear(&r);

	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"owner\":7}",
	       LB_E_INVALID_ARGUMENT, "field 'owner' must be a string of at most 128 bytes");
	s = rep('o', 128);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"l\",\"owner\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('o', 129);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"l\",\"owner\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'owner'");
	free(s);
}

Test(req, acquire_mode)
{
	req_t r;
	req_acquire_t *a;

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"exclusive\"}", &r);
	cr_assert_eq(a->mode, LB_MODE_EXCLUSIVE);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"shared\"}", &r);
	cr_assert_eq(a->mode, LB_MODE_SHARED);
	req_clear(&r);
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"permit\"}",
	       LB_E_INVALID_ARGUMENT, "field 'mode' must be \"exclusive\" or \"shared\"");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"Shared\"}",
	       LB_E_INVALID_ARGUMENT, "'mode'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"shared\\u0000\"}",
	       LB_E_INVALID_ARGUMENT, "'mode'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":1}",
	       LB_E_INVALID_ARGUMENT, "'mode'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":true}",
	       LB_E_INVALID_ARGUMENT, "'mode'");
}

Test(req, acquire_limit)
{
	req_t r;
	req_acquire_t *a;

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":1}", &r);
	cr_assert_eq(a->limit, 1);
	cr_assert_eq(a->mode, LB_MODE_PERMIT);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":1000000,"
		       "\"mode\":null}", &r);
	cr_assert_eq(a->limit, 1000000);
	cr_assert_eq(a->mode, LB_MODE_PERMIT);
	req_clear(&r);
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":0}",
	       LB_E_INVALID_ARGUMENT, "field 'limit' must be an integer in 1..1000000");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":1000001}",
	       LB_E_INVALID_ARGUMENT, "'limit'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":-1}",
	       LB_E_INVALID_ARGUMENT, "'limit'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":2.0}",
	       LB_E_INVALID_ARGUMENT, "'limit'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":\"2\"}",
	       LB_E_INVALID_ARGUMENT, "'limit'");
	/* mode must then be absent, even "exclusive". */
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"limit\":3,\"mode\":\"exclusive\"}",
	       LB_E_INVALID_ARGUMENT, "field 'mode'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"mode\":\"shared\",\"limit\":3}",
	       LB_E_INVALID_ARGUMENT, "field 'mode'");
}

/* Checks an integer field of acquire at and past both ends of its range. */
static void int_range(const char *field, const char *lo, const char *hi,
		      const char *below, const char *above)
{
	char line[300], msg[100];
	const char *vals[] = {below, above, "1.5", "\"1\"", "true", "[]", "{}"};
	size_t i;

	snprintf(line, sizeof(line),
		 "{\"op\":\"acquire\",\"lock\":\"l\",\"%s\":%s}", field, lo);
	expect_ok(line);
	snprintf(line, sizeof(line),
		 "{\"op\":\"acquire\",\"lock\":\"l\",\"%s\":%s}", field, hi);
	expect_ok(line);
	snprintf(msg, sizeof(msg), "field '%s' must be an integer in %s..%s",
		 field, lo, hi);
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		snprintf(line, sizeof(line),
			 "{\"op\":\"acquire\",\"lock\":\"l\",\"%s\":%s}", field, vals[i]);
		expect(line, LB_E_INVALID_ARGUMENT, msg);
	}
	/* An integral real is still not an integer. */
	snprintf(line, sizeof(line),
		 "{\"op\":\"acquire\",\"lock\":\"l\",\"%s\":%s.0}", field, lo);
	expect(line, LB_E_INVALID_ARGUMENT, msg);
}

Test(req, acquire_integer_ranges)
{
	req_t r;
	req_acquire_t *a;

	int_range("ttl_ms", "100", "86400000", "99", "86400001");
	int_range("max_hold_ms", "100", "86400000", "99", "86400001");
	int_range("wait_ms", "0", "9007199254740992", "-1", "9007199254740993");
	int_range("limit", "1", "1000000", "0", "1000001");

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"ttl_ms\":86400000,"
		       "\"wait_ms\":9007199254740992,\"max_hold_ms\":100}", &r);
	cr_assert_eq(a->ttl_ms, 86400000);
	cr_assert_eq(a->wait_ms, INT64_C(9007199254740992));
	cr_assert_eq(a->max_hold_ms, 100);
	req_clear(&r);
}

Test(req, acquire_booleans)
{
	static const char *const fields[] = {"watchdog", "fair", "detach"};
	static const char *const bad[] = {"0", "1", "\"true\"", "[]"};
	char line[200], msg[80];
	size_t i, j;

	for (i = 0; i < 3; i++) {
		snprintf(msg, sizeof(msg), "field '%s' must be a boolean", fields[i]);
		for (j = 0; j < 4; j++) {
			snprintf(line, sizeof(line),
				 "{\"op\":\"acquire\",\"lock\":\"l\",\"%s\":%s}",
				 fields[i], bad[j]);
			expect(line, LB_E_INVALID_ARGUMENT, msg);
		}
	}
}

Test(req, acquire_watchdog_follows_detach)
{
	req_t r;
	req_acquire_t *a;

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"detach\":true}", &r);
	cr_assert_eq(a->detach, true);
	cr_assert_eq(a->watchdog, false);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"detach\":true,"
		       "\"watchdog\":false}", &r);
	cr_assert_eq(a->detach, true);
	cr_assert_eq(a->watchdog, false);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"detach\":true,"
		       "\"watchdog\":null}", &r);
	cr_assert_eq(a->watchdog, false);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"detach\":false}", &r);
	cr_assert_eq(a->detach, false);
	cr_assert_eq(a->watchdog, true);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"watchdog\":false}", &r);
	cr_assert_eq(a->detach, false);
	cr_assert_eq(a->watchdog, false);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"watchdog\":true,"
		       "\"detach\":null}", &r);
	cr_assert_eq(a->watchdog, true);
	req_clear(&r);
	expect_id("{\"id\":\"w\",\"op\":\"acquire\",\"lock\":\"l\",\"detach\":true,"
		  "\"watchdog\":true}", LB_E_INVALID_ARGUMENT, "\"w\"");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"watchdog\":true,\"detach\":true}",
	       LB_E_INVALID_ARGUMENT, "field 'watchdog'");
}

Test(req, acquire_fair)
{
	req_t r;
	req_acquire_t *a;

	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"fair\":true}", &r);
	cr_assert_eq(a->fair, true);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"fair\":false}", &r);
	cr_assert_eq(a->fair, false);
	req_clear(&r);
}

/* ---- release, extend, cancel, inspect ---------------------------------- */

Test(req, release_fields)
{
	char line[300];
	char *s;
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"release\",\"lease\":\"abc\"}", &r, &e), LB_OK);
	cr_assert_eq(r.op, OP_RELEASE);
	cr_assert_eq(r.u.release.lease.len, 3u);
	cr_assert_eq(memcmp(r.u.release.lease.ptr, "abc", 3), 0);
	req_clear(&r);
	expect("{\"op\":\"release\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' is required");
	expect("{\"op\":\"release\",\"lease\":null}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' is required");
	expect("{\"op\":\"release\",\"lease\":\"\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' must be a string of 1..128 bytes");
	expect("{\"op\":\"release\",\"lease\":12}", LB_E_INVALID_ARGUMENT, "'lease'");
	s = rep('f', 128);
	snprintf(line, sizeof(line), "{\"op\":\"release\",\"lease\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('f', 129);
	snprintf(line, sizeof(line), "{\"op\":\"release\",\"lease\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'lease'");
	free(s);
}

Test(req, extend_fields)
{
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":100}", &r,
			 &e), LB_OK);
	cr_assert_eq(r.op, OP_EXTEND);
	cr_assert_eq(r.u.extend.lease.len, 3u);
	cr_assert_eq(r.u.extend.ttl_ms, 100);
	req_clear(&r);
	expect_ok("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":86400000}");
	expect("{\"op\":\"extend\",\"lease\":\"abc\"}", LB_E_INVALID_ARGUMENT,
	       "field 'ttl_ms' is required");
	expect("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":null}",
	       LB_E_INVALID_ARGUMENT, "field 'ttl_ms' is required");
	expect("{\"op\":\"extend\",\"ttl_ms\":100}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' is required");
	expect("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":99}",
	       LB_E_INVALID_ARGUMENT, "field 'ttl_ms' must be an integer in 100..86400000");
	expect("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":86400001}",
	       LB_E_INVALID_ARGUMENT, "'ttl_ms'");
	expect("{\"op\":\"extend\",\"lease\":\"abc\",\"ttl_ms\":1000.0}",
	       LB_E_INVALID_ARGUMENT, "'ttl_ms'");
	expect("{\"op\":\"extend\",\"lease\":\"\",\"ttl_ms\":1000}",
	       LB_E_INVALID_ARGUMENT, "'lease'");
}

Test(req, cancel_target)
{
	char line[300];
	char *s;
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"cancel\",\"target\":\"a1\"}", &r, &e), LB_OK);
	cr_assert_eq(r.op, OP_CANCEL);
	cr_assert_str_eq(json_string_value(r.u.cancel.target), "a1");
	cr_assert_eq(r.u.cancel.target, json_object_get(r.root, "target"));
	req_clear(&r);
	cr_assert_eq(run("{\"op\":\"cancel\",\"target\":-9007199254740992}", &r, &e),
		     LB_OK);
	cr_assert_eq(json_integer_value(r.u.cancel.target), -INT64_C(9007199254740992));
	req_clear(&r);
	expect_ok("{\"op\":\"cancel\",\"target\":9007199254740992}");
	expect_ok("{\"op\":\"cancel\",\"target\":\"\"}");

	expect("{\"op\":\"cancel\"}", LB_E_INVALID_ARGUMENT,
	       "field 'target' is required");
	expect("{\"op\":\"cancel\",\"target\":null}", LB_E_INVALID_ARGUMENT,
	       "field 'target' is required");
	expect("{\"op\":\"cancel\",\"target\":9007199254740993}",
	       LB_E_INVALID_ARGUMENT, "field 'target' must be");
	expect("{\"op\":\"cancel\",\"target\":99999999999999999999}",
	       LB_E_INVALID_ARGUMENT, "'target'");
	expect("{\"op\":\"cancel\",\"target\":true}", LB_E_INVALID_ARGUMENT, "'target'");
	expect("{\"op\":\"cancel\",\"target\":1.0}", LB_E_INVALID_ARGUMENT, "'target'");
	expect("{\"op\":\"cancel\",\"target\":{}}", LB_E_INVALID_ARGUMENT, "'target'");
	s = rep('t', 128);
	snprintf(line, sizeof(line), "{\"op\":\"cancel\",\"target\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('t', 129);
	snprintf(line, sizeof(line), "{\"op\":\"cancel\",\"target\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'target'");
	free(s);
}

Test(req, inspect_lock)
{
	char line[700];
	char *s;
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"op\":\"inspect\",\"lock\":\"db\"}", &r, &e), LB_OK);
	cr_assert_eq(r.op, OP_INSPECT);
	cr_assert_eq(r.u.inspect.lock.len, 2u);
	req_clear(&r);
	expect("{\"op\":\"inspect\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lock' is required");
	expect("{\"op\":\"inspect\",\"lock\":\"\"}", LB_E_INVALID_ARGUMENT, "'lock'");
	expect("{\"op\":\"inspect\",\"lock\":\"a\\u0000\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"inspect\",\"lock\":\"a\\u007f\"}", LB_E_INVALID_ARGUMENT,
	       "'lock'");
	expect("{\"op\":\"inspect\",\"lock\":false}", LB_E_INVALID_ARGUMENT, "'lock'");
	s = rep('L', 512);
	snprintf(line, sizeof(line), "{\"op\":\"inspect\",\"lock\":\"%s\"}", s);
	expect_ok(line);
	free(s);
	s = rep('L', 513);
	snprintf(line, sizeof(line), "{\"op\":\"inspect\",\"lock\":\"%s\"}", s);
	expect(line, LB_E_INVALID_ARGUMENT, "'lock'");
	free(s);
}

/* ---- lifecycle and helpers --------------------------------------------- */

Test(req, parse_then_unpack_are_separate_steps)
{
	static const char line[] = "{\"op\":\"acquire\",\"ttl_ms\":1}";
	req_t r;
	req_error_t e;

	/* req_parse accepts the op; only req_unpack looks at the fields. */

	cr_assert_eq(req_parse(line, sizeof(line) - 1, &r, &e), 0);
	cr_assert_eq(r.op, OP_ACQUIRE);
	cr_assert_not_null(r.root);
	cr_assert_eq(req_unpack(&r, &e), -1);
	cr_assert_eq(e.code, LB_E_INVALID_ARGUMENT);
	req_clear(&r);
	cr_assert_null(r.root);
	cr_assert_null(r.id);
}

Test(req, clear_accepts_zeroed_and_allows_reuse)
{
	req_t r;
	req_error_t e;
	int i;

	memset(&r, 0, sizeof(r));
	req_clear(&r);
	req_clear(NULL);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(run("{\"id\":1,\"op\":\"ping\"}", &r, &e), LB_OK);
		cr_assert_not_null(r.id);
		req_clear(&r);
		cr_assert_eq(run("[1]", &r, &e), LB_E_BAD_REQUEST);
		req_clear(&r);
	}
}

Test(req, unpack_without_parse_fails)
{
	req_t r;
	req_error_t e;

	memset(&r, 0, sizeof(r));
	cr_assert_eq(req_unpack(&r, &e), -1);
	cr_assert_eq(e.code, LB_E_INTERNAL);
}

Test(req, id_valid_helper)
{
	json_t *v;

	cr_assert_not(req_id_valid(NULL));
	v = json_null();
	cr_assert_not(req_id_valid(v));
	json_decref(v);
	v = json_integer(REQ_ID_MAX_INT);
	cr_assert(req_id_valid(v));
	json_integer_set(v, REQ_ID_MAX_INT + 1);
	cr_assert_not(req_id_valid(v));
	json_integer_set(v, -REQ_ID_MAX_INT);
	cr_assert(req_id_valid(v));
	json_integer_set(v, -REQ_ID_MAX_INT - 1);
	cr_assert_not(req_id_valid(v));
	json_decref(v);
	v = json_real(1.0);
	cr_assert_not(req_id_valid(v));
	json_decref(v);
	v = json_stringn("a\0b", 3);
	cr_assert(req_id_valid(v));
	json_decref(v);
}

Test(req, mode_names)
{
	cr_assert_str_eq(lb_mode_name(LB_MODE_EXCLUSIVE), "exclusive");
	cr_assert_str_eq(lb_mode_name(LB_MODE_SHARED), "shared");
	cr_assert_str_eq(lb_mode_name(LB_MODE_PERMIT), "permit");
}

Test(req, error_code_strings)
{
	int i;

	cr_assert_str_eq(lb_err_code(LB_E_BAD_JSON), "bad_json");
	cr_assert_str_eq(lb_err_code(LB_E_INVALID_ARGUMENT), "invalid_argument");
	cr_assert_str_eq(lb_err_code(LB_E_INTERNAL), "internal");
	cr_assert_str_eq(lb_err_code(LB_E__COUNT), "internal");
	cr_assert_str_eq(lb_err_code(LB_OK), "internal");
	cr_assert_str_eq(lb_err_message(LB_E_LINE_TOO_LONG),
			 "the line is longer than max_line");
	for (i = LB_OK + 1; i < LB_E__COUNT; i++) {
		int j;

		cr_assert_gt(strlen(lb_err_message((lb_err_t)i)), 0u);
		for (j = i + 1; j < LB_E__COUNT; j++)
			cr_assert_str_neq(lb_err_code((lb_err_t)i),
					  lb_err_code((lb_err_t)j));
	}
}

/* value (issue 27): up to 4096 bytes, any bytes, exclusive locks only;
 * absent and null are none, "" is a value. */
Test(req, acquire_value)
{
	req_t r;
	req_acquire_t *a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"h\\u0000:1\"}", &r);
	char *big, line[4200];

	cr_assert_eq(a->value.len, 4u);
	cr_assert_eq(memcmp(a->value.ptr, "h\0:1", 4), 0);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"\",\"mode\":\"exclusive\"}", &r);
	cr_assert_not_null(a->value.ptr);
	cr_assert_eq(a->value.len, 0u);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":null}", &r);
	cr_assert_null(a->value.ptr);
	req_clear(&r);
	a = acquire_ok("{\"op\":\"acquire\",\"lock\":\"l\"}", &r);
	cr_assert_null(a->value.ptr);
	req_clear(&r);

	big = rep('v', 4096);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"%s\"}", big);
	a = acquire_ok(line, &r);
	cr_assert_eq(a->value.len, 4096u);
	req_clear(&r);
	free(big);
	big = rep('v', 4097);
	snprintf(line, sizeof(line), "{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"%s\"}", big);
	expect_msg(line, LB_E_INVALID_ARGUMENT, "field 'value' must be a string of at most 4096 bytes",
		   NULL);
	free(big);
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":1}", LB_E_INVALID_ARGUMENT, "'value'");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"v\",\"mode\":\"shared\"}",
	       LB_E_INVALID_ARGUMENT, "only with mode \"exclusive\"");
	expect("{\"op\":\"acquire\",\"lock\":\"l\",\"value\":\"v\",\"limit\":3}",
	       LB_E_INVALID_ARGUMENT, "only with mode \"exclusive\"");
}

Test(req, proclaim_fields)
{
	req_t r;
	req_error_t e;

	cr_assert_eq(run("{\"id\":1,\"op\":\"proclaim\",\"lease\":\"abc\",\"value\":\"\"}", &r, &e),
		     LB_OK);
	cr_assert_eq(r.op, OP_PROCLAIM);
	cr_assert_eq(r.u.proclaim.lease.len, 3u);
	cr_assert_not_null(r.u.proclaim.value.ptr);
	cr_assert_eq(r.u.proclaim.value.len, 0u);
	req_clear(&r);
	expect("{\"op\":\"proclaim\",\"lease\":\"abc\"}", LB_E_INVALID_ARGUMENT,
	       "field 'value' is required");
	expect("{\"op\":\"proclaim\",\"lease\":\"abc\",\"value\":null}", LB_E_INVALID_ARGUMENT,
	       "field 'value' is required");
	expect("{\"op\":\"proclaim\",\"value\":\"v\"}", LB_E_INVALID_ARGUMENT,
	       "field 'lease' is required");
	expect("{\"op\":\"proclaim\",\"lease\":\"abc\",\"value\":false}", LB_E_INVALID_ARGUMENT,
	       "'value'");
	cr_assert_str_eq(req_op_name(OP_PROCLAIM), "proclaim");
}

/* acquire_all (issue 27): the locks and the options every lock gets. */
Test(req, acquire_all_op_fields)
{
	req_t r;
	req_error_t e;
	lb_str_t lock;
	lb_mode_t mode;
	int64_t limit;

	cr_assert_eq(run("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"b\"},{\"lock\":\"a\",\"mode\":\"shared\"},"
			 "{\"lock\":\"s\",\"limit\":3}],\"ttl_ms\":500,\"owner\":\"o\",\"lock_delay_ms\":10}",
			 &r, &e),
		     LB_OK, "%s", e.message);
	cr_assert_eq(r.op, OP_ACQUIRE_ALL);
	cr_assert_eq(json_array_size(r.u.acquire_all.locks), 3u);
	req_all_lock(&r, 0, &lock, &mode, &limit);
	cr_assert(lock.len == 1 && lock.ptr[0] == 'b' && mode == LB_MODE_EXCLUSIVE && limit == 0);
	req_all_lock(&r, 1, &lock, &mode, &limit);
	cr_assert(lock.ptr[0] == 'a' && mode == LB_MODE_SHARED);
	req_all_lock(&r, 2, &lock, &mode, &limit);
	cr_assert(mode == LB_MODE_PERMIT && limit == 3);
	cr_assert_eq(r.u.acquire_all.opts.ttl_ms, 500);
	cr_assert_eq(r.u.acquire_all.opts.wait_ms, -1);
	cr_assert_eq(r.u.acquire_all.opts.lock_delay_ms, 10);
	cr_assert_eq(r.u.acquire_all.opts.fair, true);
	cr_assert_eq(r.u.acquire_all.opts.watchdog, true);
	req_clear(&r);

	expect("{\"op\":\"acquire_all\"}", LB_E_INVALID_ARGUMENT, "field 'locks' is required");
	expect("{\"op\":\"acquire_all\",\"locks\":[]}", LB_E_INVALID_ARGUMENT, "1..64 locks");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\"},{\"lock\":\"a\"}]}", LB_E_INVALID_ARGUMENT,
	       "locks[1] names the same lock as locks[0]");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\",\"x\":1}]}", LB_E_INVALID_ARGUMENT,
	       "locks[0]: unknown field");
	expect("{\"op\":\"acquire_all\",\"locks\":[7]}", LB_E_INVALID_ARGUMENT, "locks[0] must be an object");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\\u0002\"}]}", LB_E_INVALID_ARGUMENT,
	       "locks[0]: 'lock'");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\",\"mode\":\"shared\",\"limit\":2}]}",
	       LB_E_INVALID_ARGUMENT, "'mode' must be absent");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\",\"limit\":1000001}]}", LB_E_INVALID_ARGUMENT,
	       "'limit' must be an integer");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\"}],\"value\":\"v\"}", LB_E_INVALID_ARGUMENT,
	       "unknown field 'value'");
	expect("{\"op\":\"acquire_all\",\"locks\":[{\"lock\":\"a\"}],\"detach\":true,\"watchdog\":true}",
	       LB_E_INVALID_ARGUMENT, "'watchdog' cannot be true");
}

Test(req, lock_delay_bounds)
{
	expect("{\"op\":\"acquire\",\"lock\":\"a\",\"lock_delay_ms\":-1}", LB_E_INVALID_ARGUMENT, "'lock_delay_ms'");
	expect("{\"op\":\"acquire\",\"lock\":\"a\",\"lock_delay_ms\":600001}", LB_E_INVALID_ARGUMENT,
	       "'lock_delay_ms'");
	expect_ok("{\"op\":\"acquire\",\"lock\":\"a\",\"lock_delay_ms\":600000}");
	expect("{\"op\":\"watch\"}", LB_E_INVALID_ARGUMENT, "field 'lock' is required");
	expect("{\"op\":\"unwatch\",\"watch\":\"\"}", LB_E_INVALID_ARGUMENT, "'watch'");
}
