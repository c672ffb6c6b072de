/*
 * reqjson.h - the strict JSON loader for request lines.
 *
 * reqjson_load() reads one JSON text (RFC 8259) that fills a whole line and
 * builds the jansson value it holds. It accepts what jansson's json_loadb
 * accepts with JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY,
 * with the same values (objects keep the keys in the order of the line),
 * but for these deliberate differences, which PROTOCOL.md asks for:
 *
 * - A raw 0x00 byte anywhere is an error. (jansson 2.14 skips one that
 *   follows a number or a literal.)
 * - An object key may hold U+0000, written \u0000. (jansson refuses it;
 *   jansson 2.14 objects hold such keys through the *n key-length APIs.)
 * - An integer token beyond json_int_t (int64) is a real of the same sign,
 *   not an error: the nearest double, or +-DBL_MAX past the largest one.
 *   No check that reads an integer takes a real, so such a token is "out of
 *   range" wherever an integer is read, and no value read as an integer
 *   was ever rounded. (jansson fails the whole line with a numeric
 *   overflow.) A token written as a real ('.', 'e' or 'E') is always a
 *   real, as in jansson; one beyond the doubles is an error.
 *
 * Everything else is as jansson: the same UTF-8 rules (no overlong forms,
 * surrogates or code points past U+10FFFF), escapes (surrogate pairs
 * combined, a lone surrogate refused), no raw control byte in a string,
 * duplicate keys refused, values nested at most REQJSON_MAX_DEPTH deep
 * (a scalar counts as one level), whitespace around the value allowed and
 * nothing else after it.
 *
 * The caller owns the value returned. Out of memory aborts.
 */
#ifndef LB_PROTOCOL_REQJSON_H
#define LB_PROTOCOL_REQJSON_H

#include <stddef.h>
#include <jansson.h>

/* jansson's own bound (JSON_PARSER_MAX_DEPTH in 2.14). */
#define REQJSON_MAX_DEPTH 2048

typedef struct reqjson_error {
	size_t offset;    /* bytes of the line before the one at fault (the
			   * line's length when it ended too soon) */
	const char *what; /* static text: "expected ':'", "invalid UTF-8"... */
} reqjson_error_t;

/* Returns the value held by s[0, len), or NULL with *err set. */
json_t *reqjson_load(const char *s, size_t len, reqjson_error_t *err);

#endif
