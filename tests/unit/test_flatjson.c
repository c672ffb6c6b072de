/*
 * test_flatjson.c - the fast loader against jansson: every line it takes
 * gives jansson's document (same keys in the same order, same values and
 * types), every line outside its subset is left to jansson, and random
 * lines built from JSON tokens, valid and broken, agree with jansson.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/flatjson.h"

#define LOAD_FLAGS (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY)

/* Same keys in the same order, each value equal and of the same type. */
static bool same_doc(json_t *a, json_t *b)
{
	void *ia = json_object_iter(a), *ib = json_object_iter(b);

	if (!json_is_object(a) || !json_is_object(b) || json_object_size(a) != json_object_size(b))
		return false;
	for (; ia != NULL && ib != NULL;
	     ia = json_object_iter_next(a, ia), ib = json_object_iter_next(b, ib)) {
		json_t *va = json_object_iter_value(ia), *vb = json_object_iter_value(ib);
		size_t la = json_object_iter_key_len(ia), lb = json_object_iter_key_len(ib);

		if (la != lb || memcmp(json_object_iter_key(ia), json_object_iter_key(ib), la) != 0 ||
		    json_typeof(va) != json_typeof(vb) || !json_equal(va, vb))
			return false;
	}
	return ia == NULL && ib == NULL;
}

/* Checks one line; returns whether the fast loader took it. */
static bool check_n(const char *line, size_t len)
{
	json_error_t err;
	json_t *fast = flatjson_load(line, len);
	json_t *slow = json_loadb(line, len, LOAD_FLAGS, &err);

	if (fast != NULL) {
		cr_assert_not_null(slow, "fast took a line jansson refuses (%s): %.*s", err.text,
				   (int)len, line);
		cr_assert(same_doc(fast, slow), "fast and jansson differ: %.*s", (int)len, line);
	}
	json_decref(fast);
	json_decref(slow);
	return fast != NULL;
}

static bool check(const char *line)
{
	return check_n(line, strlen(line));
}

Test(flatjson, takes_the_lines_clients_send)
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
	};

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		cr_assert(check(lines[i]), "not taken: %s", lines[i]);
}

Test(flatjson, leaves_everything_else_to_jansson)
{
	static const char *const lines[] = {
		"",
		"   ",
		"[]",
		"\"op\"",
		"42",
		"null",
		"{\"op\":\"a\\\"b\"}",          /* escape */
		"{\"op\":\"\\u0041\"}",         /* escape */
		"{\"lock\":\"caf\xc3\xa9\"}",   /* non-ASCII */
		"{\"lock\":\"\xff\"}",          /* not UTF-8 */
		"{\"lock\":\"a\tb\"}",          /* raw control byte */
		"{\"lock\":\"a\x7f\"}",         /* DEL */
		"{\"op\":{}}",                  /* nested */
		"{\"op\":[1]}",
		"{\"ttl_ms\":1.5}",             /* reals */
		"{\"ttl_ms\":1e3}",
		"{\"ttl_ms\":1E3}",
		"{\"ttl_ms\":1234567890123456789}", /* 19 digits */
		"{\"ttl_ms\":99999999999999999999999}",
		"{\"ttl_ms\":01}",              /* leading zero */
		"{\"ttl_ms\":-}",
		"{\"ttl_ms\":+1}",
		"{\"op\":\"a\",\"op\":\"b\"}",  /* duplicate */
		"{\"op\":\"a\"} x",             /* trailing bytes */
		"{\"op\":\"a\"}}",
		"{\"op\":\"a\",}",              /* trailing comma */
		"{,}",
		"{\"op\" \"a\"}",               /* no colon */
		"{\"op\":\"a\" \"id\":1}",      /* no comma */
		"{\"op\":\"a\"",                /* truncated */
		"{\"op\":\"a",
		"{\"op\":",
		"{\"op",
		"{",
		"{\"op\":tru}",
		"{\"op\":truex}",
		"{\"op\":nul}",
		"{\"op\":True}",
		"{op:\"a\"}",                   /* unquoted key */
		"{'op':'a'}",
	};

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		json_t *fast = flatjson_load(lines[i], strlen(lines[i]));

		cr_assert_null(fast, "taken, but outside the subset: %s", lines[i]);
	}
}

Test(flatjson, a_nul_byte_is_left_to_jansson)
{
	static const char line[] = "{\"op\":\"a\0b\"}";

	cr_assert_null(flatjson_load(line, sizeof(line) - 1));
	cr_assert_null(flatjson_load("{\"op\":\"a\"}\0", 11));
	cr_assert_null(flatjson_load(NULL, 0));
	cr_assert_null(flatjson_load("{}", 0));
}

/* Random lines from JSON tokens: mostly flat objects, with mutations
 * (a dropped, repeated or swapped token, a stray byte) that make them
 * invalid or take them outside the subset. */
static const char *const tokens_key[] = {"\"id\"", "\"op\"", "\"lock\"", "\"ttl_ms\"",
					  "\"wait_ms\"", "\"fair\"", "\"\"", "\"a\\\"b\"",
					  "\"caf\xc3\xa9\""};
static const char *const tokens_val[] = {
	"0", "-0", "7", "-12", "100", "86400000", "999999999999999999", "-999999999999999999",
	"1000000000000000000", "9223372036854775807", "9223372036854775808", "1.0", "2e2",
	"-", "01", "true", "false", "null", "\"\"", "\"acquire\"", "\"x y\"", "\"\\n\"",
	"\"\\u00e9\"", "\"\xc3\xa9\"", "[]", "{}", "[1,2]", "{\"a\":1}", "tru", "\"open",
};
static const char *const tokens_ws[] = {"", "", "", " ", "\t", "\r\n", "  "};

#define PICK(a) (a[(size_t)rand() % (sizeof(a) / sizeof(a[0]))])

static size_t random_line(char *buf, size_t cap)
{
	const char *parts[64];
	int n = 0, pairs = rand() % 6;

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

		switch (rand() % 4) {
		case 0:
			parts[k] = "";
			break;
		case 1:
			parts[k] = parts[rand() % n];
			break;
		case 2:
			parts[k] = ",";
			break;
		default:
			parts[k] = "x";
			break;
		}
	}
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		size_t l = strlen(parts[i]);

		cr_assert_lt(len + l, cap);
		memcpy(buf + len, parts[i], l);
		len += l;
	}
	return len;
}

Test(flatjson, random_lines_agree_with_jansson)
{
	char buf[1024];
	int taken = 0, total = 20000;

	srand(20261124);
	for (int i = 0; i < total; i++) {
		size_t len = random_line(buf, sizeof(buf));

		taken += check_n(buf, len);
	}
	/* The subset is the common case: a fair share must take the fast path. */
	cr_assert_gt(taken, total / 10, "only %d of %d lines took the fast path", taken, total);
	cr_assert_lt(taken, total, "every line took the fast path: the mutations are not tested");
}
