/*
 * reqjson.c - the strict JSON loader for request lines (see reqjson.h).
 *
 * Why not json_loadb: jansson's lexer reads a line a byte at a time through
 * a stream callback into a growing buffer (45 % of the broker's own
 * instructions per acquire+release before protocol/flatjson.c took the flat
 * lines off it), it reads a NUL byte after a number as the end of the
 * buffer, it cannot load a key holding U+0000, and one integer beyond int64
 * fails the whole line. This is one recursive-descent pass over the bytes;
 * for the typical flat acquire line it runs as fast as flatjson.c did
 * (about 9 % fewer instructions per line, the same time within noise).
 *
 * Invariants:
 * - The parser reads s[0, len) only, never past end, and never needs a
 *   terminating NUL (the framer's lines have none).
 * - The first fault met wins: it sets err once and every caller returns
 *   NULL (or false) up the stack, releasing what it built; nothing is
 *   returned half-built. A duplicate key is met once its value has been
 *   read (inserting it leaves the object's size unchanged: one hash per key
 *   instead of a lookup and an insert), so a fault inside that value is
 *   reported first; the offset of a duplicate is its key's.
 * - A string without escapes is handed to jansson straight from the line;
 *   one with escapes is decoded into the parser's scratch buffer, which is
 *   reused for the next string: a key decoded there is copied out before
 *   its value is read.
 * - Every string handed to jansson is valid UTF-8 (checked here), so the
 *   *_nocheck constructors are used.
 * - depth counts values as jansson does: the top-level value is at depth 1.
 */
#include "protocol/reqjson.h"

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* json_object_setn_new_nocheck (keys with a length) came with 2.14. */
#if JANSSON_VERSION_HEX < 0x020e00
#error "protocol/reqjson.c needs jansson 2.14 or later"
#endif

#define NUMBER_STACK_BYTES 64 /* number tokens copied for strtod */

typedef struct parser {
	const char *start, *p, *end;
	char *scratch;      /* owned; strings with escapes, decoded */
	size_t scratch_cap;
	reqjson_error_t *err;
} parser_t;

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (q == NULL) {
		fprintf(stderr, "reqjson: out of memory (%zu bytes)\n", n);
		abort();
	}
	return q;
}

static json_t *must(json_t *v)
{
	if (v == NULL) {
		fprintf(stderr, "reqjson: out of memory\n");
		abort();
	}
	return v;
}

/* Records the fault at `at`. The end of the line and a NUL byte say so
 * whatever was expected there. Returns NULL for the callers' convenience.
 * The fault paths are cold: kept out of the way of the hot loops. */
static __attribute__((cold)) json_t *fail(parser_t *ps, const char *at,
					  const char *what)
{
	if (at == ps->end)
		what = "unexpected end of line";
	else if (*at == '\0')
		what = "raw NUL byte";
	ps->err->offset = (size_t)(at - ps->start);
	ps->err->what = what;
	return NULL;
}

/* fail() for the helpers that return a position or a truth value. */
static __attribute__((cold)) const char *fail_esc(parser_t *ps, const char *at,
						  const char *what)
{
	fail(ps, at, what);
	return NULL;
}

static __attribute__((cold)) bool fail_str(parser_t *ps, const char *at,
					   const char *what)
{
	fail(ps, at, what);
	return false;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Most positions hold no whitespace: one test before the loop. */
static inline void skip_ws(parser_t *ps)
{
	const char *p = ps->p;

	if (p == ps->end || (unsigned char)*p > ' ')
		return;
	while (p < ps->end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	ps->p = p;
}

static bool at(const parser_t *ps, char c)
{
	return ps->p < ps->end && *ps->p == c;
}

/* ---- strings ------------------------------------------------------------ */

/* The bytes a string holds as they are: printable ASCII and DEL but '"' and
 * '\\'. The rest (control bytes, an escape, UTF-8 sequences) take the slow
 * path of parse_string. */
static inline bool is_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

static bool in(unsigned char c, unsigned char lo, unsigned char hi)
{
	return c >= lo && c <= hi;
}

/* Length of the UTF-8 sequence of 2..4 bytes at p (RFC 3629: no overlong
 * form, no surrogate, nothing past U+10FFFF), or 0 when it is not one. */
static size_t utf8_seq(const char *p, const char *end)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t avail = (size_t)(end - p);
	unsigned char c = u[0];

	if (in(c, 0xc2, 0xdf))
		return avail >= 2 && in(u[1], 0x80, 0xbf) ? 2 : 0;
	if (in(c, 0xe0, 0xef)) {
		unsigned char lo = c == 0xe0 ? 0xa0 : 0x80;
		unsigned char hi = c == 0xed ? 0x9f : 0xbf;

		return avail >= 3 && in(u[1], lo, hi) && in(u[2], 0x80, 0xbf) ? 3 : 0;
	}
	if (in(c, 0xf0, 0xf4)) {
		unsigned char lo = c == 0xf0 ? 0x90 : 0x80;
		unsigned char hi = c == 0xf4 ? 0x8f : 0xbf;

		return avail >= 4 && in(u[1], lo, hi) && in(u[2], 0x80, 0xbf) &&
		       in(u[3], 0x80, 0xbf) ? 4 : 0;
	}
	return 0;
}

static void scratch_put(parser_t *ps, size_t *n, const char *src, size_t len)
{
	if (len == 0)
		return;
	if (ps->scratch_cap - *n < len) {
		size_t cap = ps->scratch_cap ? ps->scratch_cap : 64;

		while (cap - *n < len)
			cap *= 2;
		ps->scratch = xrealloc(ps->scratch, cap);
		ps->scratch_cap = cap;
	}
	memcpy(ps->scratch + *n, src, len);
	*n += len;
}

/* The four hex digits at p (p + 4 <= end checked by the caller), or -1. */
static long hex4(const char *p)
{
	long v = 0;
	int i;

	for (i = 0; i < 4; i++) {
		char c = p[i];

		v <<= 4;
		if (is_digit(c))
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* Reads the escape at q (a backslash) into the scratch buffer; returns the
 * byte after it, or NULL with the fault set. */
static const char *unescape(parser_t *ps, const char *q, size_t *n)
{
	const char *end = ps->end;
	char out[4];
	long cp, lo;

	if (end - q < 2)
		return fail_esc(ps, end, NULL);
	switch (q[1]) {
	case '"': out[0] = '"'; break;
	case '\\': out[0] = '\\'; break;
	case '/': out[0] = '/'; break;
	case 'b': out[0] = '\b'; break;
	case 'f': out[0] = '\f'; break;
	case 'n': out[0] = '\n'; break;
	case 'r': out[0] = '\r'; break;
	case 't': out[0] = '\t'; break;
	case 'u':
		if (end - q < 6 || (cp = hex4(q + 2)) < 0)
			return fail_esc(ps, q, "invalid \\u escape");
		if (cp >= 0xdc00 && cp <= 0xdfff)
			return fail_esc(ps, q, "unpaired surrogate in a \\u escape");
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (end - q < 12 || q[6] != '\\' || q[7] != 'u')
				return fail_esc(ps, q, "unpaired surrogate in a \\u escape");
			if ((lo = hex4(q + 8)) < 0)
				return fail_esc(ps, q + 6, "invalid \\u escape");
			if (lo < 0xdc00 || lo > 0xdfff)
				return fail_esc(ps, q, "unpaired surrogate in a \\u escape");
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			out[0] = (char)(0xf0 | (cp >> 18));
			out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
			out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[3] = (char)(0x80 | (cp & 0x3f));
			scratch_put(ps, n, out, 4);
			return q + 12;
		}
		if (cp < 0x80) {
			out[0] = (char)cp;
			scratch_put(ps, n, out, 1);
		} else if (cp < 0x800) {
			out[0] = (char)(0xc0 | (cp >> 6));
			out[1] = (char)(0x80 | (cp & 0x3f));
			scratch_put(ps, n, out, 2);
		} else {
			out[0] = (char)(0xe0 | (cp >> 12));
			out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[2] = (char)(0x80 | (cp & 0x3f));
			scratch_put(ps, n, out, 3);
		}
		return q + 6;
	default:
		return fail_esc(ps, q, "invalid escape");
	}
	scratch_put(ps, n, out, 1);
	return q + 2;
}

/*
 * The rest of a string from q on, when it holds more than plain bytes:
 * escapes (decoded into the scratch buffer from the first one on), UTF-8
 * sequences, or a fault. first is the string's first byte.
 */
static __attribute__((noinline, cold)) bool
parse_string_slow(parser_t *ps, const char *first, const char *q,
		  const char **s, size_t *len, bool *decoded)
{
	const char *end = ps->end;
	const char *run = first; /* start of the bytes not yet copied */
	size_t n = 0;
	bool esc = false;

	for (;;) {
		unsigned char c;
		size_t k;

		while (q < end && is_plain((unsigned char)*q))
			q++;
		if (q == end)
			return fail_str(ps, q, NULL);
		c = (unsigned char)*q;
		if (c == '"')
			break;
		if (c == '\\') {
			esc = true;
			scratch_put(ps, &n, run, (size_t)(q - run));
			if ((q = unescape(ps, q, &n)) == NULL)
				return false;
			run = q;
			continue;
		}
		if (c < 0x20)
			return fail_str(ps, q, "raw control character in a string");
		if ((k = utf8_seq(q, end)) == 0)
			return fail_str(ps, q, "invalid UTF-8");
		q += k;
	}
	if (esc) {
		scratch_put(ps, &n, run, (size_t)(q - run));
		*s = ps->scratch;
		*len = n;
	} else {
		*s = first;
		*len = (size_t)(q - first);
	}
	*decoded = esc;
	ps->p = q + 1;
	return true;
}

/*
 * Reads the string whose opening quote is at ps->p. On success *s, *len is
 * its content: inside the line when it had no escape (*decoded false), else
 * in the scratch buffer until the next string is read (*decoded true).
 * Nearly every string of a request is printable ASCII: one tight loop.
 */
static inline bool parse_string(parser_t *ps, const char **s, size_t *len,
				bool *decoded)
{
	const char *first = ps->p + 1, *q, *end = ps->end;

	for (q = first; q < end; q++) {
		unsigned char c = (unsigned char)*q;

		if (c == '"') {
			*s = first;
			*len = (size_t)(q - first);
			*decoded = false;
			ps->p = q + 1;
			return true;
		}
		if (c < 0x20 || c >= 0x80 || c == '\\') /* !is_plain(c) */
			break;
	}
	return parse_string_slow(ps, first, q, s, len, decoded);
}

/* ---- numbers ------------------------------------------------------------ */

/* strtod of the token [from, to), read with '.' whatever the locale. */
static double token_strtod(parser_t *ps, const char *from, const char *to,
			   bool *overflow)
{
	char stack[NUMBER_STACK_BYTES], *buf = stack, *dot;
	size_t len = (size_t)(to - from), n = 0;
	const char *point = localeconv()->decimal_point;
	double d;

	if (len + 1 > sizeof(stack)) {
		scratch_put(ps, &n, from, len); /* grows it to at least len */
		scratch_put(ps, &n, "", 1);
		buf = ps->scratch;
	} else {
		memcpy(buf, from, len);
		buf[len] = '\0';
	}
	if (point[0] != '.' && point[0] != '\0' && point[1] == '\0' &&
	    (dot = strchr(buf, '.')) != NULL)
		*dot = point[0];
	errno = 0;
	d = strtod(buf, NULL);
	*overflow = errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL);
	return d;
}

/* Reads the number at ps->p: an integer token that fits json_int_t is an
 * integer with that exact value; a larger one is a real (see reqjson.h);
 * a token with a fraction or exponent is a real. */
static json_t *parse_number(parser_t *ps)
{
	const char *start = ps->p, *q = start, *end = ps->end;
	bool neg = false, real = false, overflow = false;
	uint64_t mag = 0, limit;
	const char *digits;
	double d;

	if (*q == '-') {
		neg = true;
		q++;
	}
	if (q == end || !is_digit(*q))
		return fail(ps, start, "invalid number");
	if (*q == '0') {
		q++;
		if (q < end && is_digit(*q))
			return fail(ps, start, "invalid number");
	} else {
		/* 19 digits always fit a uint64_t (10^19 - 1 < 2^64). */
		for (digits = q; q < end && is_digit(*q); q++)
			mag = mag * 10 + (uint64_t)(*q - '0');
		overflow = q - digits > 19;
	}
	if (q < end && *q == '.') {
		q++;
		if (q == end || !is_digit(*q))
			return fail(ps, start, "invalid number");
		while (q < end && is_digit(*q))
			q++;
		real = true;
	}
	if (q < end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < end && (*q == '+' || *q == '-'))
			q++;
		if (q == end || !is_digit(*q))
			return fail(ps, start, "invalid number");
		while (q < end && is_digit(*q))
			q++;
		real = true;
	}
	ps->p = q;

	if (!real) {
		limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
		if (!overflow && mag <= limit) {
			json_int_t v;

			if (!neg)
				v = (json_int_t)mag;
			else if (mag == (uint64_t)INT64_MAX + 1)
				v = INT64_MIN;
			else
				v = -(json_int_t)mag;
			return must(json_integer(v));
		}
		/* Beyond json_int_t: a real that no integer check takes. */
		d = token_strtod(ps, start, q, &overflow);
		if (overflow || isinf(d))
			d = neg ? -DBL_MAX : DBL_MAX;
		return must(json_real(d));
	}
	d = token_strtod(ps, start, q, &overflow);
	if (overflow)
		return fail(ps, start, "number too large");
	return must(json_real(d));
}

/* ---- values ------------------------------------------------------------- */

static json_t *parse_value(parser_t *ps, int depth);

static json_t *parse_literal(parser_t *ps, const char *lit, json_t *v)
{
	size_t n = strlen(lit);

	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
		return fail(ps, ps->p, "invalid literal");
	ps->p += n;
	return v;
}

static json_t *parse_object(parser_t *ps, int depth)
{
	json_t *obj = must(json_object());
	bool first = true;

	ps->p++; /* '{' */
	skip_ws(ps);
	if (at(ps, '}')) {
		ps->p++;
		return obj;
	}
	for (;;) {
		const char *key_at = ps->p, *key;
		char *owned = NULL;
		size_t key_len, size;
		bool decoded;
		json_t *v;

		if (!at(ps, '"')) {
			fail(ps, ps->p, first ? "expected a string key or '}'"
					      : "expected a string key");
			goto bad;
		}
		if (!parse_string(ps, &key, &key_len, &decoded))
			goto bad;
		if (decoded) {
			/* The value's strings reuse the scratch buffer. */
			owned = xrealloc(NULL, key_len ? key_len : 1);
			memcpy(owned, key, key_len);
			key = owned;
		}
		skip_ws(ps);
		if (!at(ps, ':')) {
			if (owned != NULL)
				free(owned);
			fail(ps, ps->p, "expected ':'");
			goto bad;
		}
		ps->p++;
		skip_ws(ps);
		v = parse_value(ps, depth + 1);
		if (v == NULL) {
			if (owned != NULL)
				free(owned);
			goto bad;
		}
		/* A duplicate key replaces the value: the size tells (one hash
		 * per key instead of a lookup and an insert). */
		size = json_object_size(obj);
		if (json_object_setn_new_nocheck(obj, key, key_len, v) != 0)
			must(NULL);
		if (owned != NULL)
			free(owned);
		if (json_object_size(obj) == size) {
			fail(ps, key_at, "duplicate key");
			goto bad;
		}
		first = false;
		skip_ws(ps);
		if (at(ps, ',')) {
			ps->p++;
			skip_ws(ps);
			continue;
		}
		if (at(ps, '}')) {
			ps->p++;
			return obj;
		}
		fail(ps, ps->p, "expected ',' or '}'");
		goto bad;
	}
bad:
	json_decref(obj);
	return NULL;
}

static json_t *parse_array(parser_t *ps, int depth)
{
	json_t *arr = must(json_array());

	ps->p++; /* '[' */
	skip_ws(ps);
	if (at(ps, ']')) {
		ps->p++;
		return arr;
	}
	for (;;) {
		json_t *v = parse_value(ps, depth + 1);

		if (v == NULL)
			goto bad;
		if (json_array_append_new(arr, v) != 0)
			must(NULL);
		skip_ws(ps);
		if (at(ps, ',')) {
			ps->p++;
			skip_ws(ps);
			continue;
		}
		if (at(ps, ']')) {
			ps->p++;
			return arr;
		}
		fail(ps, ps->p, "expected ',' or ']'");
		goto bad;
	}
bad:
	json_decref(arr);
	return NULL;
}

static json_t *parse_value(parser_t *ps, int depth)
{
	const char *s;
	size_t len;
	bool decoded;

	if (depth > REQJSON_MAX_DEPTH)
		return fail(ps, ps->p, "nested deeper than 2048 levels");
	if (ps->p == ps->end)
		return fail(ps, ps->p, NULL);
	switch (*ps->p) {
	case '{':
		return parse_object(ps, depth);
	case '[':
		return parse_array(ps, depth);
	case '"':
		if (!parse_string(ps, &s, &len, &decoded))
			return NULL;
		return must(json_stringn_nocheck(s, len));
	case 't':
		return parse_literal(ps, "true", json_true());
	case 'f':
		return parse_literal(ps, "false", json_false());
	case 'n':
		return parse_literal(ps, "null", json_null());
	case '-': case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		return parse_number(ps);
	default:
		return fail(ps, ps->p, "expected a value");
	}
}

json_t *reqjson_load(const char *s, size_t len, reqjson_error_t *err)
{
	parser_t ps = {s, s, s + len, NULL, 0, err};
	json_t *v;

	if (s == NULL)
		ps.start = ps.p = ps.end = "";
	skip_ws(&ps);
	v = parse_value(&ps, 1);
	if (v != NULL) {
		skip_ws(&ps);
		if (ps.p != ps.end) {
			fail(&ps, ps.p, "extra bytes after the value");
			json_decref(v);
			v = NULL;
		}
	}
	if (ps.scratch != NULL)
		free(ps.scratch);
	return v;
}
