/*
 * json.c - the client's JSON: a strict reader for the broker's answers and
 * events, and a writer for requests.
 *
 * Reader: recursive descent over one line into a flat array of nodes (see
 * lbc_jnode_t in internal.h): no allocation per value, two growing arrays
 * per document. It accepts exactly RFC 8259 JSON: no trailing commas, no
 * comments, no control characters in strings, valid UTF-8 only (raw or
 * escaped: a \uD800 escape must pair with a low surrogate), no duplicate
 * keys within an object, nesting at most 64 deep, and nothing after the
 * value but whitespace. Numbers are checked against the grammar; those
 * without fraction or exponent that fit int64 are integers.
 *
 * Writer: appends to one growing buffer; strings are escaped (", \, and
 * every byte below 0x20 and 0x7F as \u00XX, or its short form) and checked
 * for UTF-8 (`bad` is set, sticky, when one is not). Out of memory aborts.
 *
 * Invariants: node indices, never pointers, across appends (the arrays
 * move); every string in the pool ends with a NUL that is not counted.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (q == NULL)
		abort();
	return q;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
			return 0;
		if (c == 0xE0 && s[1] < 0xA0) /* overlong */
			return 0;
		if (c == 0xED && s[1] >= 0xA0) /* surrogates */
			return 0;
		return 3;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
			return 0;
		if (c == 0xF0 && s[1] < 0x90) /* overlong */
			return 0;
		if (c == 0xF4 && s[1] >= 0x90) /* > U+10FFFF */
			return 0;
		return 4;
	}
	return 0;
}

bool lbc_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		size_t k = utf8_seq(u + i, n - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

/* ---- reader ----------------------------------------------------------------- */

typedef struct parser {
	lbc_jdoc_t *d;
	const unsigned char *s;
	size_t n, i;
	char *err;
	size_t errlen;
	bool failed;
} parser_t;

static int fail(parser_t *p, const char *what)
{
	if (!p->failed && p->err && p->errlen)
		snprintf(p->err, p->errlen, "invalid JSON at byte %zu: %s", p->i, what);
	p->failed = true;
	return -1;
}

static void skip_ws(parser_t *p)
{
	while (p->i < p->n) {
		unsigned char c = p->s[p->i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->i++;
	}
}

static uint32_t new_node(parser_t *p, int type)
{
	lbc_jdoc_t *d = p->d;

	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 32;
		d->nodes = xrealloc(d->nodes, (size_t)d->cap * sizeof(*d->nodes));
	}
	memset(&d->nodes[d->n], 0, sizeof(d->nodes[0]));
	d->nodes[d->n].type = (uint8_t)type;
	d->nodes[d->n].next = LBC_JNONE;
	return d->n++;
}

static void pool_put(lbc_jdoc_t *d, const void *b, size_t n)
{
	if (d->plen + n + 1 > d->pcap) {
		while (d->plen + n + 1 > d->pcap)
			d->pcap = d->pcap ? d->pcap * 2 : 256;
		d->pool = xrealloc(d->pool, d->pcap);
	}
	memcpy(d->pool + d->plen, b, n);
	d->plen += n;
}

static void put_utf8(lbc_jdoc_t *d, uint32_t cp)
{
	unsigned char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xE0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xF0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[3] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	pool_put(d, b, n);
}

static int hex4(parser_t *p, uint32_t *out)
{
	uint32_t v = 0;

	if (p->n - p->i < 4)
		return fail(p, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		unsigned char c = p->s[p->i++];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return fail(p, "bad \\u escape");
	}
	*out = v;
	return 0;
}

/* Reads a string at p->i (the opening quote) into the pool. */
static int parse_string(parser_t *p, uint32_t *off, uint32_t *len)
{
	lbc_jdoc_t *d = p->d;
	size_t start = d->plen;

	p->i++; /* the quote */
	for (;;) {
		if (p->i >= p->n)
			return fail(p, "unterminated string");
		unsigned char c = p->s[p->i];
		if (c == '"') {
			p->i++;
			break;
		}
		if (c < 0x20)
			return fail(p, "control character in a string");
		if (c == '\\') {
			uint32_t cp;
			if (++p->i >= p->n)
				return fail(p, "unterminated string");
			c = p->s[p->i++];
			switch (c) {
			case '"': pool_put(d, "\"", 1); break;
			case '\\': pool_put(d, "\\", 1); break;
			case '/': pool_put(d, "/", 1); break;
			case 'b': pool_put(d, "\b", 1); break;
			case 'f': pool_put(d, "\f", 1); break;
			case 'n': pool_put(d, "\n", 1); break;
			case 'r': pool_put(d, "\r", 1); break;
			case 't': pool_put(d, "\t", 1); break;
			case 'u':
				if (hex4(p, &cp) < 0)
					return -1;
				if (cp >= 0xDC00 && cp <= 0xDFFF)
					return fail(p, "lone low surrogate");
				if (cp >= 0xD800 && cp <= 0xDBFF) {
					uint32_t lo;
					if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
						return fail(p, "lone high surrogate");
					p->i += 2;
					if (hex4(p, &lo) < 0)
						return -1;
					if (lo < 0xDC00 || lo > 0xDFFF)
						return fail(p, "bad surrogate pair");
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				}
				put_utf8(d, cp);
				break;
			default:
				p->i--;
				return fail(p, "bad escape");
			}
			continue;
		}
		/* a run of plain bytes, checked as UTF-8 */
		size_t k = utf8_seq(p->s + p->i, p->n - p->i);
		if (k == 0)
			return fail(p, "invalid UTF-8");
		pool_put(d, p->s + p->i, k);
		p->i += k;
	}
	if (d->plen - start > UINT32_MAX - 1)
		return fail(p, "string too long");
	pool_put(d, "", 0);
	d->pool[d->plen] = '\0';
	d->plen++; /* the NUL belongs to the pool, not to the string */
	*off = (uint32_t)start;
	*len = (uint32_t)(d->plen - 1 - start);
	return 0;
}

static int parse_number(parser_t *p, uint32_t node)
{
	size_t start = p->i;
	bool neg = false, integer = true;
	uint64_t mag = 0;
	bool overflow = false;

	if (p->s[p->i] == '-') {
		neg = true;
		p->i++;
	}
	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		return fail(p, "bad number");
	if (p->s[p->i] == '0') {
		p->i++;
	} else {
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
			unsigned dg = (unsigned)(p->s[p->i] - '0');
			if (mag > (UINT64_MAX - dg) / 10)
				overflow = true;
			else
				mag = mag * 10 + dg;
			p->i++;
		}
	}
	if (p->i < p->n && p->s[p->i] == '.') {
		integer = false;
		p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			return fail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		integer = false;
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			return fail(p, "bad number");
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	(void)start;
	if (integer && !overflow && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= INT64_MAX)) {
		p->d->nodes[node].type = LBC_J_INT;
		p->d->nodes[node].v.i = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag)
		                            : (int64_t)mag;
	} else {
		p->d->nodes[node].type = LBC_J_NUM;
	}
	return 0;
}

static int literal(parser_t *p, const char *word)
{
	size_t k = strlen(word);

	if (p->n - p->i < k || memcmp(p->s + p->i, word, k) != 0)
		return fail(p, "unexpected character");
	p->i += k;
	return 0;
}

static int parse_value(parser_t *p, uint32_t *out, int depth);

static bool key_seen(const lbc_jdoc_t *d, uint32_t first, uint32_t off, uint32_t len)
{
	for (uint32_t k = first; k != LBC_JNONE; k = d->nodes[k].next)
		if (d->nodes[k].key_len == len && memcmp(d->pool + d->nodes[k].key_off, d->pool + off, len) == 0)
			return true;
	return false;
}

static int parse_container(parser_t *p, uint32_t node, int depth, bool is_obj)
{
	uint32_t last = LBC_JNONE, count = 0;
	char close = is_obj ? '}' : ']';

	if (depth >= MAX_DEPTH)
		return fail(p, "nested too deep");
	p->i++; /* the opening bracket */
	p->d->nodes[node].v.c.first = LBC_JNONE;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
		p->i++;
		return 0;
	}
	for (;;) {
		uint32_t koff = 0, klen = 0, child;

		skip_ws(p);
		if (is_obj) {
			if (p->i >= p->n || p->s[p->i] != '"')
				return fail(p, "expected a string key");
			if (parse_string(p, &koff, &klen) < 0)
				return -1;
			if (key_seen(p->d, p->d->nodes[node].v.c.first, koff, klen))
				return fail(p, "duplicate key");
			skip_ws(p);
			if (p->i >= p->n || p->s[p->i] != ':')
				return fail(p, "expected ':'");
			p->i++;
			skip_ws(p);
		}
		if (parse_value(p, &child, depth + 1) < 0)
			return -1;
		p->d->nodes[child].key_off = koff;
		p->d->nodes[child].key_len = klen;
		if (last == LBC_JNONE)
			p->d->nodes[node].v.c.first = child;
		else
			p->d->nodes[last].next = child;
		last = child;
		count++;
		skip_ws(p);
		if (p->i >= p->n)
			return fail(p, "unterminated container");
		if (p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->s[p->i] == (unsigned char)close) {
			p->i++;
			break;
		}
		return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
	p->d->nodes[node].v.c.n = count;
	return 0;
}

static int parse_value(parser_t *p, uint32_t *out, int depth)
{
	uint32_t node;

	skip_ws(p);
	if (p->i >= p->n)
		return fail(p, "expected a value");
	node = new_node(p, LBC_J_NULL);
	*out = node;
	switch (p->s[p->i]) {
	case '{':
		p->d->nodes[node].type = LBC_J_OBJ;
		return parse_container(p, node, depth, true);
	case '[':
		p->d->nodes[node].type = LBC_J_ARR;
		return parse_container(p, node, depth, false);
	case '"': {
		uint32_t off, len;
		if (parse_string(p, &off, &len) < 0)
			return -1;
		p->d->nodes[node].type = LBC_J_STR;
		p->d->nodes[node].v.s.off = off;
		p->d->nodes[node].v.s.len = len;
		return 0;
	}
	case 't':
		p->d->nodes[node].type = LBC_J_TRUE;
		return literal(p, "true");
	case 'f':
		p->d->nodes[node].type = LBC_J_FALSE;
		return literal(p, "false");
	case 'n':
		return literal(p, "null");
	default:
		if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9'))
			return parse_number(p, node);
		return fail(p, "unexpected character");
	}
}

int lbc_json_parse(lbc_jdoc_t *d, const char *s, size_t n, char *errbuf, size_t errlen)
{
	parser_t p = {.d = d, .s = (const unsigned char *)s, .n = n, .err = errbuf, .errlen = errlen};
	uint32_t root;

	memset(d, 0, sizeof(*d));
	if (n > LBC_MAX_ANSWER)
		return fail(&p, "too long");
	if (parse_value(&p, &root, 0) < 0)
		return -1;
	skip_ws(&p);
	if (p.i != p.n)
		return fail(&p, "data after the value");
	return 0;
}

void lbc_json_free(lbc_jdoc_t *d)
{
	if (d == NULL)
		return;
	free(d->nodes);
	free(d->pool);
	memset(d, 0, sizeof(*d));
}

int lbc_json_type(const lbc_jdoc_t *d, uint32_t node)
{
	if (node == LBC_JNONE || node >= d->n)
		return -1;
	return d->nodes[node].type;
}

uint32_t lbc_json_get(const lbc_jdoc_t *d, uint32_t obj, const char *key)
{
	size_t klen = strlen(key);

	if (lbc_json_type(d, obj) != LBC_J_OBJ)
		return LBC_JNONE;
	for (uint32_t k = d->nodes[obj].v.c.first; k != LBC_JNONE; k = d->nodes[k].next)
		if (d->nodes[k].key_len == klen && memcmp(d->pool + d->nodes[k].key_off, key, klen) == 0)
			return k;
	return LBC_JNONE;
}

const char *lbc_json_str(const lbc_jdoc_t *d, uint32_t obj, const char *key, size_t *len)
{
	uint32_t k = lbc_json_get(d, obj, key);

	if (lbc_json_type(d, k) != LBC_J_STR)
		return NULL;
	if (len)
		*len = d->nodes[k].v.s.len;
	return d->pool + d->nodes[k].v.s.off;
}

int lbc_json_int(const lbc_jdoc_t *d, uint32_t obj, const char *key, int64_t *out)
{
	uint32_t k = lbc_json_get(d, obj, key);

	if (lbc_json_type(d, k) != LBC_J_INT)
		return -1;
	*out = d->nodes[k].v.i;
	return 0;
}

bool lbc_json_true(const lbc_jdoc_t *d, uint32_t obj, const char *key)
{
	return lbc_json_type(d, lbc_json_get(d, obj, key)) == LBC_J_TRUE;
}

/* ---- writer ------------------------------------------------------------------ */

void lbc_jw_init(lbc_jw_t *w)
{
	w->cap = 256;
	w->buf = xrealloc(NULL, w->cap);
	w->len = 0;
	w->bad = false;
}

void lbc_jw_free(lbc_jw_t *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
}

static void reserve(lbc_jw_t *w, size_t n)
{
	if (w->len + n > w->cap) {
		while (w->len + n > w->cap)
			w->cap *= 2;
		w->buf = xrealloc(w->buf, w->cap);
	}
}

void lbc_jw_raw(lbc_jw_t *w, const char *s, size_t n)
{
	reserve(w, n);
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

void lbc_jw_str(lbc_jw_t *w, const char *s, size_t n)
{
	static const char hexd[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	if (!lbc_utf8_valid(s, n))
		w->bad = true;
	reserve(w, n + 2);
	w->buf[w->len++] = '"';
	while (i < n) {
		size_t run = i;
		/* copy a run of bytes that need no escape at once */
		while (run < n && u[run] >= 0x20 && u[run] != 0x7F && u[run] != '"' && u[run] != '\\')
			run++;
		if (run > i) {
			lbc_jw_raw(w, s + i, run - i);
			i = run;
			continue;
		}
		unsigned char c = u[i++];
		char esc[6];
		size_t k = 2;
		esc[0] = '\\';
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		default:
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hexd[c >> 4];
			esc[5] = hexd[c & 15];
			k = 6;
		}
		lbc_jw_raw(w, esc, k);
	}
	reserve(w, 1);
	w->buf[w->len++] = '"';
}

void lbc_jw_key(lbc_jw_t *w, const char *key)
{
	if (w->len > 0 && w->buf[w->len - 1] != '{')
		lbc_jw_raw(w, ",", 1);
	lbc_jw_str(w, key, strlen(key));
	lbc_jw_raw(w, ":", 1);
}

void lbc_jw_int(lbc_jw_t *w, int64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%" PRId64, v);
	lbc_jw_raw(w, b, (size_t)n);
}

void lbc_jw_kstr(lbc_jw_t *w, const char *key, const char *s)
{
	lbc_jw_key(w, key);
	lbc_jw_str(w, s, strlen(s));
}

void lbc_jw_kint(lbc_jw_t *w, const char *key, int64_t v)
{
	lbc_jw_key(w, key);
	lbc_jw_int(w, v);
}

void lbc_jw_kbool(lbc_jw_t *w, const char *key, bool v)
{
	lbc_jw_key(w, key);
	lbc_jw_raw(w, v ? "true" : "false", v ? 4 : 5);
}
