/*
 * flatjson.c - the fast loader for flat request objects (see flatjson.h).
 *
 * Why: jansson's lexer reads a line a byte at a time through a stream
 * callback with UTF-8 checks and a growing buffer; for a typical acquire
 * line that was about 0.9 us, 45 % of the broker's own instructions per
 * acquire+release cycle (callgrind). Building the same object from a
 * one-pass scan takes a small part of that.
 *
 * Invariants:
 * - It never rejects: every byte outside the subset (an escape, a control
 *   or non-ASCII byte, a nested value, a real, an integer of more than 18
 *   digits, a duplicate key, bytes after the object) makes it return NULL,
 *   and jansson alone says what such a line is.
 * - An integer of at most 18 digits always fits json_int_t, so no overflow
 *   case exists here.
 * - On success the object holds the keys in the order of the line, as
 *   jansson's own objects do (tests/unit/test_flatjson.c compares the two).
 */
#include "protocol/flatjson.h"

#include <stdbool.h>
#include <string.h>

#define INT_MAX_DIGITS 18

/* json_object_getn and json_object_setn_new_nocheck came with 2.14. */
#if JANSSON_VERSION_HEX < 0x020e00
#error "protocol/flatjson.c needs jansson 2.14 or later"
#endif

typedef struct cursor {
	const char *p, *end;
} cursor_t;

static void skip_ws(cursor_t *c)
{
	while (c->p < c->end &&
	       (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool at(const cursor_t *c, char ch)
{
	return c->p < c->end && *c->p == ch;
}

/* The string after an opening quote: printable ASCII up to the closing
 * quote, which is consumed. False for anything else. */
static bool scan_string(cursor_t *c, const char **s, size_t *len)
{
	const char *start = c->p;

	for (; c->p < c->end; c->p++) {
		unsigned char ch = (unsigned char)*c->p;

		if (ch == '"') {
			*s = start;
			*len = (size_t)(c->p - start);
			c->p++;
			return true;
		}
		if (ch < 0x20 || ch > 0x7e || ch == '\\')
			return false;
	}
	return false;
}

static bool is_digit(const cursor_t *c, const char *p)
{
	return p < c->end && *p >= '0' && *p <= '9';
}

/* -?(0|[1-9][0-9]*) of at most INT_MAX_DIGITS digits, not the start of a
 * real. */
static json_t *scan_int(cursor_t *c)
{
	const char *p = c->p;
	bool neg = false;
	json_int_t v = 0;
	int digits = 0;

	if (p < c->end && *p == '-') {
		neg = true;
		p++;
	}
	if (!is_digit(c, p) || (*p == '0' && is_digit(c, p + 1)))
		return NULL;
	for (; is_digit(c, p); p++) {
		if (++digits > INT_MAX_DIGITS)
			return NULL;
		v = v * 10 + (*p - '0');
	}
	if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E'))
		return NULL;
	c->p = p;
	return json_integer(neg ? -v : v);
}

static json_t *scan_literal(cursor_t *c, const char *lit, size_t n, json_t *v)
{
	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return NULL;
	c->p += n;
	return v;
}

static json_t *scan_value(cursor_t *c)
{
	const char *s;
	size_t len;

	if (c->p == c->end)
		return NULL;
	switch (*c->p) {
	case '"':
		c->p++;
		if (!scan_string(c, &s, &len))
			return NULL;
		return json_stringn_nocheck(s, len);
	case 't':
		return scan_literal(c, "true", 4, json_true());
	case 'f':
		return scan_literal(c, "false", 5, json_false());
	case 'n':
		return scan_literal(c, "null", 4, json_null());
	default:
		return scan_int(c);
	}
}

json_t *flatjson_load(const char *s, size_t len)
{
	cursor_t c;
	json_t *obj;

	if (s == NULL || len == 0)
		return NULL;
	c.p = s;
	c.end = s + len;
	skip_ws(&c);
	if (!at(&c, '{'))
		return NULL;
	c.p++;
	obj = json_object();
	if (obj == NULL)
		return NULL;
	skip_ws(&c);
	if (at(&c, '}')) {
		c.p++;
	} else {
		for (;;) {
			const char *key;
			size_t key_len;
			json_t *v;

			if (!at(&c, '"'))
				goto not_flat;
			c.p++;
			if (!scan_string(&c, &key, &key_len))
				goto not_flat;
			skip_ws(&c);
			if (!at(&c, ':'))
				goto not_flat;
			c.p++;
			skip_ws(&c);
			v = scan_value(&c);
			if (v == NULL)
				goto not_flat;
			if (json_object_getn(obj, key, key_len) != NULL) {
				json_decref(v); /* a duplicate: jansson's to reject */
				goto not_flat;
			}
			if (json_object_setn_new_nocheck(obj, key, key_len, v) != 0)
				goto not_flat; /* v was released by jansson */
			skip_ws(&c);
			if (at(&c, ',')) {
				c.p++;
				skip_ws(&c);
				continue;
			}
			if (!at(&c, '}'))
				goto not_flat;
			c.p++;
			break;
		}
	}
	skip_ws(&c);
	if (c.p != c.end)
		goto not_flat;
	return obj;

not_flat:
	json_decref(obj);
	return NULL;
}
