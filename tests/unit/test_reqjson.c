/*
 * test_reqjson.c - the request-line JSON loader: the lines clients send
 * load as jansson loads them, every kind of fault is refused with its text
 * and byte offset, the deliberate differences from jansson (raw NUL bytes,
 * NUL in keys, integers beyond int64) hold, and random lines built from
 * JSON tokens, valid and broken, agree with jansson
 * (tests/fuzz/reqjson_oracle.h says where they must).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/reqjson.h"
#include "tests/fuzz/reqjson_oracle.h"

/* Loads s[0, len), checks it against jansson, returns the value. */
static json_t *load_n(const char *s, size_t len, reqjson_error_t *err)
{
	reqjson_verdict_t verdict;
	json_t *v;
	const char *wrong;

	memset(err, 0, sizeof(*err));
	v = reqjson_load(s, len, err);
	wrong = reqjson_oracle_check(s, len, v, &verdict);
	cr_assert_null(wrong, "%s: %.*s", wrong, (int)len, s);
	if (v == NULL) {
		cr_assert_not_null(err->what, "a refusal says why: %.*s", (int)len, s);
		cr_assert_leq(err->offset, len);
	}
	return v;
}

static json_t *load(const char *s, reqjson_error_t *err)
{
	return load_n(s, strlen(s), err);
}

/* s must be refused at byte `offset` with a text holding `what`. */
static void refuse_n(const char *s, size_t len, size_t offset, const char *what)
{
	reqjson_error_t err;
	json_t *v = load_n(s, len, &err);

	cr_assert_null(v, "accepted: %.*s", (int)len, s);
	cr_assert_str_eq(err.what, what, "%.*s", (int)len, s);
	cr_assert_eq(err.offset, offset, "%.*s: offset %zu, want %zu", (int)len, s,
		     err.offset, offset);
}

static void refuse(const char *s, size_t offset, const char *what)
{
	refuse_n(s, strlen(s), offset, what);
}

/* s must be accepted and equal to the JSON want (loaded by jansson). */
static void accept_as(const char *s, size_t len, const char *want)
{
	reqjson_error_t err;
	json_t *v = load_n(s, len, &err), *w = json_loads(want, REQJSON_ORACLE_FLAGS, NULL);

	cr_assert_not_null(v, "%.*s: %s at %zu", (int)len, s, err.what, err.offset);
	cr_assert_not_null(w);
	cr_assert(oracle_same(v, w, false), "%.*s is not %s", (int)len, s, want);
	json_decref(v);
	json_decref(w);
}

Test(reqjson, takes_the_lines_clients_send)
{
	static const char *const lines[] = {
		"{\"id\":1,\"op\":\"acquire\",\"lock\":\"orders:42\",\"wait_ms\":0}",
		"{\"id\":\"a-7\",\"op\":\"release\",\"lease\":\"0123456789abcdef0123456789abcdef\"}",
		"{\"op\":\"ping\"}",
		"{}",
		" { } ",
		"{\"op\":\"hello\",\"client\":\"billing-worker/1.4\",\"keepalive_ms\":5000}",
		"{\"op\":\"acquire\",\"lock\":\"x\",\"mode\":\"shared\",\"fair\":false,\"detach\":true,"
		"\"watchdog\":null,\"ttl_ms\":86400000}",
		"{ \"id\" : -9007199254740992 , \"op\" : \"cancel\" , \"target\" : 0 }\r",
		"\t{\"id\":999999999999999999,\"op\":\"extend\",\"lease\":\"l\",\"ttl_ms\":100}\n",
		"{\"id\":-0,\"op\":\"inspect\",\"lock\":\"a b~!@#$%^&*()[]{}:,'\"}",
		"{\"\":\"\",\"op\":\"\"}",
		"{\"op\":\"acquire\",\"lock\":\"caf\xc3\xa9 \\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\"}",
		"{\"lock\":{\"a\":[1,2.5,-3e2,true,false,null,\"s\",{}]},\"x\":[]}",
		"[1,\"a\",{\"b\":null}]",
		"\"just a string\"",
		"42",
		"-1.5E-3",
		"null",
	};
	reqjson_error_t err;

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		json_t *v = load(lines[i], &err);

		cr_assert_not_null(v, "%s: %s at %zu", lines[i], err.what, err.offset);
		json_decref(v);
	}
}

Test(reqjson, keys_keep_the_order_of_the_line)
{
	reqjson_error_t err;
	json_t *v = load("{\"z\":1,\"a\":2,\"m\":3,\"b\":4}", &err);
	const char *want[] = {"z", "a", "m", "b"}, *key;
	json_t *m;
	size_t i = 0;

	cr_assert_not_null(v);
	json_object_foreach(v, key, m) {
		cr_assert_str_eq(key, want[i]);
		cr_assert_eq(json_integer_value(m), (json_int_t)i + 1);
		i++;
	}
	cr_assert_eq(i, 4u);
	json_decref(v);
}

/* ---- syntax faults: text and offset --------------------------------------- */

Test(reqjson, syntax_faults_say_what_and_where)
{
	refuse("", 0, "unexpected end of line");
	refuse("   ", 3, "unexpected end of line");
	refuse("{", 1, "unexpected end of line");
	refuse("{\"id\":7,\"op\":\"ping\"", 19, "unexpected end of line");
	refuse("{\"op\":\"pi", 9, "unexpected end of line");
	refuse("{\"op\":\"ping\",}", 13, "expected a string key");
	refuse("{,}", 1, "expected a string key or '}'");
	refuse("{op:\"a\"}", 1, "expected a string key or '}'");
	refuse("{\"op\" \"a\"}", 6, "expected ':'");
	refuse("{\"id\":8,\"op\":\"a\" \"lock\":1}", 17, "expected ',' or '}'");
	refuse("{\"op\":'ping'}", 6, "expected a value");
	refuse("{\"op\":}", 6, "expected a value");
	refuse("[1,]", 3, "expected a value");
	refuse("[1 2]", 3, "expected ',' or ']'");
	refuse("{\"op\":\"ping\"} x", 14, "extra bytes after the value");
	refuse("{\"op\":\"ping\"}{\"op\":\"ping\"}", 13, "extra bytes after the value");
	refuse("{\"op\":\"ping\"}}", 13, "extra bytes after the value");
	refuse("nul", 0, "invalid literal");
	refuse("{\"a\":tru}", 5, "invalid literal");
	refuse("{\"a\":True}", 5, "expected a value");
	refuse("{\"a\":truex}", 9, "expected ',' or '}'");
	refuse("{\"a\":nulL}", 5, "invalid literal");
	refuse("\xef\xbb\xbf{}", 0, "expected a value"); /* a BOM is not JSON */
	refuse("{\"a\":1}\xc3\xa9", 7, "extra bytes after the value");
}

Test(reqjson, number_faults)
{
	refuse("{\"a\":-}", 5, "invalid number");
	refuse("{\"a\":-a}", 5, "invalid number");
	refuse("{\"a\":01}", 5, "invalid number");
	refuse("{\"a\":-01}", 5, "invalid number");
	refuse("{\"a\":1.}", 5, "invalid number");
	refuse("{\"a\":1.e3}", 5, "invalid number");
	refuse("{\"a\":1e}", 5, "invalid number");
	refuse("{\"a\":1e+}", 5, "invalid number");
	refuse("{\"a\":.5}", 5, "expected a value");
	refuse("{\"a\":+1}", 5, "expected a value");
	refuse("{\"a\":1e400}", 5, "number too large");
	refuse("{\"a\":-1.5e400}", 5, "number too large");
	refuse("{\"a\":0x10}", 6, "expected ',' or '}'");
	refuse("-", 0, "invalid number");
}

Test(reqjson, string_faults)
{
	refuse("{\"a\":\"x\ty\"}", 7, "raw control character in a string");
	refuse("{\"a\":\"\x1f\"}", 6, "raw control character in a string");
	refuse("{\"a\\q\":1}", 3, "invalid escape");
	refuse("{\"a\":\"\\x41\"}", 6, "invalid escape");
	refuse("{\"a\":\"\\u12\"}", 6, "invalid \\u escape");
	refuse("{\"a\":\"\\u12g4\"}", 6, "invalid \\u escape");
	refuse("{\"a\":\"\\", 7, "unexpected end of line");
	refuse("{\"a\":\"\\u00", 6, "invalid \\u escape");
	/* Surrogates: a lone low, a high alone, a high before a non-low. */
	refuse("{\"a\":\"\\udc00\"}", 6, "unpaired surrogate in a \\u escape");
	refuse("{\"a\":\"x\\ud800\"}", 7, "unpaired surrogate in a \\u escape");
	refuse("{\"a\":\"\\ud800\\n\"}", 6, "unpaired surrogate in a \\u escape");
	refuse("{\"a\":\"\\ud800\\u0041\"}", 6, "unpaired surrogate in a \\u escape");
	refuse("{\"a\":\"\\ud800\\ud800\"}", 6, "unpaired surrogate in a \\u escape");
	refuse("{\"a\":\"\\ud800\\uzzzz\"}", 12, "invalid \\u escape");
	refuse("{\"a\":\"\\uDBFF\\uE000\"}", 6, "unpaired surrogate in a \\u escape");
}

Test(reqjson, invalid_utf8_is_refused_where_it_starts)
{
	static const char *const bad[] = {
		"\xff",             /* never in UTF-8 */
		"\xfe",
		"\x80",             /* a lone continuation byte */
		"\xbf",
		"\xc3",             /* cut */
		"\xc3(",
		"\xc0\xaf",         /* overlong '/' */
		"\xc1\xbf",
		"\xe0\x80\xaf",     /* overlong, three bytes */
		"\xe0\x9f\xbf",
		"\xed\xa0\x80",     /* U+D800, a surrogate */
		"\xed\xbf\xbf",     /* U+DFFF */
		"\xe2\x82",         /* cut */
		"\xf0\x80\x80\xaf", /* overlong, four bytes */
		"\xf0\x8f\xbf\xbf",
		"\xf4\x90\x80\x80", /* past U+10FFFF */
		"\xf5\x80\x80\x80",
		"\xf8\x88\x80\x80\x80",
		"\xf0\x9f\x98",     /* cut */
	};
	char line[64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int n = snprintf(line, sizeof(line), "{\"a\":\"ok%s\"}", bad[i]);

		refuse_n(line, (size_t)n, 8, "invalid UTF-8");
		n = snprintf(line, sizeof(line), "{\"k%s\":1}", bad[i]);
		refuse_n(line, (size_t)n, 3, "invalid UTF-8");
	}
}

Test(reqjson, valid_utf8_at_each_boundary)
{
	accept_as("\"\xc2\x80\xdf\xbf\"", 6, "\"\\u0080\\u07ff\"");
	accept_as("\"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\"", 14,
		  "\"\\u0800\\ud7ff\\ue000\\uffff\"");
	accept_as("\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"", 10,
		  "\"\\ud800\\udc00\\udbff\\udfff\"");
	accept_as("\"\x7f\"", 3, "\"\\u007f\"");
}

Test(reqjson, escapes_decode)
{
	reqjson_error_t err;
	json_t *v = load("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\",\"\\u0041\\u00e9\\u20ac\\ud83d\\ude00\","
			 "\"a\\u0000b\",\"\\uD834\\uDD1E\"]", &err);

	cr_assert_not_null(v);
	cr_assert_eq(json_string_length(json_array_get(v, 0)), 8u);
	cr_assert_eq(memcmp(json_string_value(json_array_get(v, 0)), "\"\\/\b\f\n\r\t", 8), 0);
	cr_assert_str_eq(json_string_value(json_array_get(v, 1)),
			 "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	cr_assert_eq(json_string_length(json_array_get(v, 2)), 3u);
	cr_assert_eq(memcmp(json_string_value(json_array_get(v, 2)), "a\0b", 3), 0);
	cr_assert_str_eq(json_string_value(json_array_get(v, 3)), "\xf0\x9d\x84\x9e");
	json_decref(v);
}

Test(reqjson, a_long_escaped_string_grows_the_scratch)
{
	char *line = malloc(3000 * 7 + 16);
	reqjson_error_t err;
	json_t *v;
	size_t n = 0;

	cr_assert_not_null(line);
	line[n++] = '[';
	line[n++] = '"';
	for (int i = 0; i < 3000; i++) {
		memcpy(line + n, "\\u00e9x", 7);
		n += 7;
	}
	memcpy(line + n, "\",\"\\n\"]", 7);
	n += 7;
	v = load_n(line, n, &err);
	cr_assert_not_null(v);
	cr_assert_eq(json_string_length(json_array_get(v, 0)), 9000u);
	cr_assert_str_eq(json_string_value(json_array_get(v, 1)), "\n");
	json_decref(v);
	free(line);
}

/* ---- the deliberate differences from jansson ------------------------------ */

Test(reqjson, a_raw_nul_byte_is_refused_wherever_it_is)
{
	/* The line jansson 2.14 accepted: NUL right after a number, a literal. */
	static const char issue[] = "{\"id\":8,\"op\":\"acquire\",\"lock\":\"r2\",\"wait_ms\":0\0,"
				    "\"detach\":true\0,\"watchdog\":false}";
	static const char in_string[] = "{\"op\":\"pi\0ng\"}";
	static const char in_key[] = "{\"o\0p\":\"ping\"}";
	static const char after[] = "{\"op\":\"ping\"}\0";
	static const char before[] = "\0{\"op\":\"ping\"}";
	static const char ws[] = "{\"op\": \0\"ping\"}";
	static const char lit[] = "[true\0]";
	json_t *j;
	json_error_t jerr;

	refuse_n(issue, sizeof(issue) - 1, 46, "raw NUL byte");
	refuse_n(in_string, sizeof(in_string) - 1, 9, "raw NUL byte");
	refuse_n(in_key, sizeof(in_key) - 1, 3, "raw NUL byte");
	refuse_n(after, sizeof(after) - 1, 13, "raw NUL byte");
	refuse_n(before, sizeof(before) - 1, 0, "raw NUL byte");
	refuse_n(ws, sizeof(ws) - 1, 7, "raw NUL byte");
	refuse_n(lit, sizeof(lit) - 1, 5, "raw NUL byte");
	/* The difference is real: jansson takes the first line. */
	j = json_loadb(issue, sizeof(issue) - 1, REQJSON_ORACLE_FLAGS, &jerr);
	cr_assert_not_null(j, "jansson was fixed: this test's premise is gone");
	json_decref(j);
}

Test(reqjson, a_key_may_hold_nul)
{
	static const char line[] = "{\"id\":9,\"op\":\"ping\",\"\\u0000\":1,\"a\\u0000b\":2}";
	reqjson_error_t err;
	json_error_t jerr;
	json_t *v = load(line, &err);

	cr_assert_not_null(v, "%s at %zu", err.what, err.offset);
	cr_assert_eq(json_object_size(v), 4u);
	cr_assert_eq(json_integer_value(json_object_getn(v, "\0", 1)), 1);
	cr_assert_eq(json_integer_value(json_object_getn(v, "a\0b", 3)), 2);
	cr_assert_null(json_object_get(v, "a"), "the key is not cut at its NUL");
	json_decref(v);
	/* Duplicates are found by the whole key. */
	refuse("{\"a\\u0000\":1,\"a\\u0000\":2}", 13, "duplicate key");
	cr_assert_null(json_loadb(line, strlen(line), REQJSON_ORACLE_FLAGS, &jerr));
	cr_assert_eq(json_error_code(&jerr), json_error_null_byte_in_key);
}

Test(reqjson, integers_are_read_exactly)
{
	static const struct {
		const char *token;
		json_int_t value;
	} ints[] = {
		{"0", 0}, {"-0", 0}, {"7", 7}, {"-12", -12},
		{"9007199254740992", INT64_C(9007199254740992)},
		{"9007199254740993", INT64_C(9007199254740993)}, /* 2^53 + 1, not rounded */
		{"-9007199254740993", -INT64_C(9007199254740993)},
		{"9223372036854775807", INT64_MAX},
		{"-9223372036854775808", INT64_MIN},
		{"1000000000000000000", INT64_C(1000000000000000000)},
	};
	char line[64];
	reqjson_error_t err;

	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		json_t *v;

		snprintf(line, sizeof(line), "[%s]", ints[i].token);
		v = load(line, &err);
		cr_assert_not_null(v);
		cr_assert(json_is_integer(json_array_get(v, 0)), "%s", line);
		cr_assert_eq(json_integer_value(json_array_get(v, 0)), ints[i].value, "%s", line);
		json_decref(v);
	}
}

Test(reqjson, integers_beyond_int64_are_reals_of_their_sign)
{
	static const struct {
		const char *token;
		double value;
	} big[] = {
		{"9223372036854775808", 9223372036854775808.0},
		{"-9223372036854775809", -9223372036854775808.0},
		{"99999999999999999999", 1e20},
		{"-99999999999999999999", -1e20},
		{"18446744073709551616", 18446744073709551616.0},
	};
	char line[700];
	reqjson_error_t err;
	json_t *v;

	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		snprintf(line, sizeof(line), "{\"x\":%s,\"id\":5}", big[i].token);
		v = load(line, &err);
		cr_assert_not_null(v, "%s", line);
		cr_assert(json_is_real(json_object_get(v, "x")), "%s", line);
		cr_assert_eq(json_real_value(json_object_get(v, "x")), big[i].value, "%s", line);
		/* How one field is read never depends on another. */
		cr_assert(json_is_integer(json_object_get(v, "id")));
		cr_assert_eq(json_integer_value(json_object_get(v, "id")), 5);
		json_decref(v);
	}
	/* Past the largest double: the largest double, same sign. */
	memset(line, '9', 400);
	line[0] = '[';
	memcpy(line + 400, "]", 2);
	v = load(line, &err);
	cr_assert_not_null(v);
	cr_assert_eq(json_real_value(json_array_get(v, 0)), DBL_MAX);
	json_decref(v);
	line[1] = '-';
	v = load(line, &err);
	cr_assert_not_null(v);
	cr_assert_eq(json_real_value(json_array_get(v, 0)), -DBL_MAX);
	json_decref(v);
}

Test(reqjson, reals_stay_reals)
{
	static const char *const reals[] = {"1.0", "-0.0", "1e3", "1E3", "2e+2", "5e-1",
					    "9007199254740993.0", "1e-400", "0.5E0"};
	char line[64];
	reqjson_error_t err;
	json_t *v;

	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++) {
		snprintf(line, sizeof(line), "[%s]", reals[i]);
		v = load(line, &err);
		cr_assert_not_null(v, "%s", line);
		cr_assert(json_is_real(json_array_get(v, 0)), "%s", line);
		json_decref(v);
	}
	v = load("[-0.0]", &err);
	cr_assert(signbit(json_real_value(json_array_get(v, 0))), "-0.0 keeps its sign");
	json_decref(v);
}

Test(reqjson, duplicate_keys_are_refused_at_the_second)
{
	refuse("{\"op\":\"a\",\"op\":\"b\"}", 10, "duplicate key");
	refuse("{\"a\":1,\"\\u0061\":2}", 7, "duplicate key");
	refuse("{\"x\":{\"a\":1,\"a\":1}}", 12, "duplicate key");
	accept_as("{\"a\":{\"a\":1},\"b\":{\"a\":1}}", 25, "{\"a\":{\"a\":1},\"b\":{\"a\":1}}");
}

/* Depth counts values as jansson does: [[...[1]...]] with n arrays is n + 1. */
static char *nested(int arrays, bool scalar, size_t *len)
{
	char *s = malloc((size_t)arrays * 2 + 2);
	size_t n = 0;

	cr_assert_not_null(s);
	for (int i = 0; i < arrays; i++)
		s[n++] = '[';
	if (scalar)
		s[n++] = '1';
	for (int i = 0; i < arrays; i++)
		s[n++] = ']';
	*len = n;
	return s;
}

Test(reqjson, nesting_is_bounded_as_jansson_bounds_it)
{
	reqjson_error_t err;
	size_t len;
	char *s;
	json_t *v;

	s = nested(REQJSON_MAX_DEPTH, false, &len);
	v = load_n(s, len, &err);
	cr_assert_not_null(v);
	json_decref(v);
	free(s);
	s = nested(REQJSON_MAX_DEPTH - 1, true, &len);
	v = load_n(s, len, &err);
	cr_assert_not_null(v);
	json_decref(v);
	free(s);
	s = nested(REQJSON_MAX_DEPTH, true, &len);
	refuse_n(s, len, REQJSON_MAX_DEPTH, "nested deeper than 2048 levels");
	free(s);
	s = nested(REQJSON_MAX_DEPTH + 1, false, &len);
	refuse_n(s, len, REQJSON_MAX_DEPTH, "nested deeper than 2048 levels");
	free(s);
	s = nested(100000, false, &len);
	refuse_n(s, len, REQJSON_MAX_DEPTH, "nested deeper than 2048 levels");
	free(s);
}

Test(reqjson, no_terminating_nul_is_needed)
{
	/* The line is read up to len only: the bytes after it do not count. */
	static const char buf[] = "{\"op\":\"ping\"}garbage";
	static const char num[] = "[12345]6";
	reqjson_error_t err;
	json_t *v = reqjson_load(buf, 13, &err);

	cr_assert_not_null(v);
	json_decref(v);
	v = reqjson_load(num, 6, &err);
	cr_assert_null(v);
	cr_assert_eq(err.offset, 6u);
	cr_assert_str_eq(err.what, "unexpected end of line");
	v = reqjson_load("12345", 3, &err);
	cr_assert_not_null(v);
	cr_assert_eq(json_integer_value(v), 123);
	json_decref(v);
	v = reqjson_load(NULL, 0, &err);
	cr_assert_null(v);
	cr_assert_eq(err.offset, 0u);
}

/* ---- random lines against jansson ----------------------------------------- */

/* Random lines from JSON tokens: mostly flat objects, with mutations
 * (a dropped, repeated or swapped token, a stray byte) that make them
 * invalid, and values of every kind. */
static const char *const tokens_key[] = {"\"id\"", "\"op\"", "\"lock\"", "\"ttl_ms\"",
					  "\"wait_ms\"", "\"fair\"", "\"\"", "\"a\\\"b\"",
					  "\"caf\xc3\xa9\"", "\"\\u0000\"", "\"i\\u0064\"",
					  "\"\\ud83d\\ude00\""};
static const char *const tokens_val[] = {
	"0", "-0", "7", "-12", "100", "86400000", "999999999999999999", "-999999999999999999",
	"1000000000000000000", "9223372036854775807", "9223372036854775808",
	"-9223372036854775809", "99999999999999999999", "9007199254740993", "1.0", "2e2",
	"-0.0", "1e400", "1e-400", "-", "01", "1.", "true", "false", "null", "\"\"",
	"\"acquire\"", "\"x y\"", "\"\\n\"", "\"\\u00e9\"", "\"\xc3\xa9\"", "\"\\ud800\"",
	"\"\\udc00\\ud800\"", "\"\\u0000\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "\"\xf4\x90\x80\x80\"",
	"[]", "{}", "[1,2]", "{\"a\":1}", "[{\"a\":[\"b\"]}]", "tru", "\"open", "\"\\x\"",
};
static const char *const tokens_ws[] = {"", "", "", " ", "\t", "\r\n", "  "};

#define PICK(a) (a[(size_t)rand() % (sizeof(a) / sizeof(a[0]))])

static size_t random_line(char *buf, size_t cap)
{
	const char *parts[64];
	int n = 0, pairs = rand() % 6;
	size_t len = 0;

	parts[n++] = PICK(tokens_ws);
	parts[n++] = "{";
	for (int i = 0; i < pairs; i++) {
		if (i > 0)
			parts[n++] = ",";
		parts[n++] = PICK(tokens_ws);
		parts[n++] = PICK(tokens_key);
		parts[n++] = PICK(tokens_ws);
		parts[n++] = ":";
		parts[n++] = PICK(tokens_ws);
		parts[n++] = PICK(tokens_val);
	}
	parts[n++] = "}";
	parts[n++] = PICK(tokens_ws);
	if (rand() % 4 == 0) { /* one mutation */
		int k = rand() % n;

		switch (rand() % 5) {
		case 0:
			parts[k] = "";
			break;
		case 1:
			parts[k] = parts[rand() % n];
			break;
		case 2:
			parts[k] = ",";
			break;
		case 3:
			parts[k] = "x";
			break;
		default:
			parts[k] = "0"; /* a token where it does not belong */
			break;
		}
	}
	for (int i = 0; i < n; i++) {
		size_t l = strlen(parts[i]);

		cr_assert_lt(len + l, cap);
		memcpy(buf + len, parts[i], l);
		len += l;
	}
	/* Now and then a raw NUL byte somewhere. */
	if (len > 0 && rand() % 50 == 0)
		buf[(size_t)rand() % len] = '\0';
	return len;
}

Test(reqjson, random_lines_agree_with_jansson)
{
	char buf[1024];
	int total = 40000, tally[ORACLE_BIG_INT + 1] = {0};

	srand(20261124);
	for (int i = 0; i < total; i++) {
		size_t len = random_line(buf, sizeof(buf));
		reqjson_error_t err;
		reqjson_verdict_t verdict;
		json_t *v = reqjson_load(buf, len, &err);
		const char *wrong = reqjson_oracle_check(buf, len, v, &verdict);

		cr_assert_null(wrong, "%s: %.*s", wrong, (int)len, buf);
		if (v == NULL)
			cr_assert_leq(err.offset, len);
		tally[verdict]++;
		json_decref(v);
	}
	/* Each outcome must be exercised, the agreeing ones most. */
	cr_assert_gt(tally[ORACLE_BOTH_ACCEPT], total / 10, "%d", tally[ORACLE_BOTH_ACCEPT]);
	cr_assert_gt(tally[ORACLE_BOTH_REFUSE], total / 10, "%d", tally[ORACLE_BOTH_REFUSE]);
	cr_assert_gt(tally[ORACLE_RAW_NUL], 100, "%d", tally[ORACLE_RAW_NUL]);
	cr_assert_gt(tally[ORACLE_NUL_KEY], 100, "%d", tally[ORACLE_NUL_KEY]);
	cr_assert_gt(tally[ORACLE_BIG_INT], 100, "%d", tally[ORACLE_BIG_INT]);
}
