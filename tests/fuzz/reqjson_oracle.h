/*
 * reqjson_oracle.h - jansson as the oracle for protocol/reqjson.c, shared by
 * tests/unit/test_reqjson.c (random token lines) and the libFuzzer target
 * tests/fuzz/fuzz_req.c.
 *
 * reqjson_oracle_check() loads the same line with json_loadb (the flags
 * req.c used before reqjson) and says where the two disagree beyond the
 * deliberate differences listed in protocol/reqjson.h:
 *
 * - a line with a raw NUL byte: reqjson must refuse it; jansson is not asked
 *   (it may skip the byte);
 * - jansson refuses a key holding U+0000: reqjson must have accepted a
 *   document that holds such a key (nothing more is compared);
 * - jansson overflows on an integer token: the line is loaded again with
 *   JSON_DECODE_INT_AS_REAL and compared number by number as doubles
 *   (reqjson's integers exactly, its reals for the tokens beyond int64).
 *   When that load overflows as well (an integer token beyond the doubles),
 *   reqjson must have accepted the line, with nothing more compared.
 *
 * Everywhere else: the same accept or refuse, and on accept the same value:
 * the same types, object keys in the same order, the same bytes, the same
 * numbers (a real's sign included).
 *
 * Header-only (static functions) so that both drivers build it with their
 * own compiler and flags; it reports, the driver asserts.
 */
#ifndef LB_TESTS_REQJSON_ORACLE_H
#define LB_TESTS_REQJSON_ORACLE_H

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <jansson.h>

#include "protocol/reqjson.h"

#define REQJSON_ORACLE_FLAGS (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY)

/* How the two loaders stood on a line, for the drivers' tallies. */
typedef enum reqjson_verdict {
	ORACLE_BOTH_ACCEPT,
	ORACLE_BOTH_REFUSE,
	ORACLE_RAW_NUL,   /* reqjson refused; jansson not asked */
	ORACLE_NUL_KEY,   /* reqjson accepted; jansson refuses NUL in a key */
	ORACLE_BIG_INT,   /* reqjson accepted; jansson overflowed on an integer */
} reqjson_verdict_t;

static bool oracle_same_number(const json_t *a, const json_t *b, bool loose)
{
	double x, y;

	if (json_is_integer(a) && json_is_integer(b))
		return json_integer_value(a) == json_integer_value(b);
	if (json_is_real(a) && json_is_real(b)) {
		x = json_real_value(a);
		y = json_real_value(b);
		return x == y && signbit(x) == signbit(y);
	}
	if (!loose || !json_is_number(a) || !json_is_number(b))
		return false;
	x = json_is_integer(a) ? (double)json_integer_value(a) : json_real_value(a);
	y = json_is_integer(b) ? (double)json_integer_value(b) : json_real_value(b);
	return x == y;
}

/* a and b hold the same value; loose: numbers compared as doubles. */
static bool oracle_same(const json_t *a, const json_t *b, bool loose)
{
	size_t i;

	if (json_is_number(a) || json_is_number(b))
		return oracle_same_number(a, b, loose);
	if (json_typeof(a) != json_typeof(b))
		return false;
	switch (json_typeof(a)) {
	case JSON_OBJECT: {
		void *ia = json_object_iter((json_t *)a), *ib = json_object_iter((json_t *)b);

		if (json_object_size(a) != json_object_size(b))
			return false;
		for (; ia != NULL && ib != NULL; ia = json_object_iter_next((json_t *)a, ia),
						 ib = json_object_iter_next((json_t *)b, ib)) {
			size_t la = json_object_iter_key_len(ia), lb = json_object_iter_key_len(ib);

			if (la != lb ||
			    memcmp(json_object_iter_key(ia), json_object_iter_key(ib), la) != 0 ||
			    !oracle_same(json_object_iter_value(ia), json_object_iter_value(ib), loose))
				return false;
		}
		return ia == NULL && ib == NULL;
	}
	case JSON_ARRAY:
		if (json_array_size(a) != json_array_size(b))
			return false;
		for (i = 0; i < json_array_size(a); i++)
			if (!oracle_same(json_array_get(a, i), json_array_get(b, i), loose))
				return false;
		return true;
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
	default: /* true, false, null */
		return true;
	}
}

/* True when some object key anywhere in v holds a NUL byte. */
static bool oracle_has_nul_key(const json_t *v)
{
	const char *key;
	size_t key_len, i;
	json_t *m;

	if (json_is_object(v)) {
		json_object_keylen_foreach((json_t *)v, key, key_len, m) {
			if (memchr(key, '\0', key_len) != NULL || oracle_has_nul_key(m))
				return true;
		}
	} else if (json_is_array(v)) {
		for (i = 0; i < json_array_size(v); i++)
			if (oracle_has_nul_key(json_array_get(v, i)))
				return true;
	}
	return false;
}

/*
 * Checks reqjson's outcome on s[0, len) (ours: its value or NULL) against
 * jansson. Returns NULL when they agree (*verdict says how), else what is
 * wrong.
 */
static const char *reqjson_oracle_check(const char *s, size_t len, const json_t *ours,
					reqjson_verdict_t *verdict)
{
	json_error_t jerr;
	json_t *theirs;
	const char *wrong = NULL;
	int code;

	if (memchr(s, '\0', len) != NULL) {
		*verdict = ORACLE_RAW_NUL;
		return ours == NULL ? NULL : "reqjson accepted a line with a raw NUL byte";
	}
	theirs = json_loadb(s, len, REQJSON_ORACLE_FLAGS, &jerr);
	if (theirs != NULL) {
		*verdict = ORACLE_BOTH_ACCEPT;
		if (ours == NULL)
			wrong = "reqjson refused a line jansson accepts";
		else if (!oracle_same(ours, theirs, false))
			wrong = "reqjson and jansson loaded different values";
		json_decref(theirs);
		return wrong;
	}
	*verdict = ORACLE_BOTH_REFUSE;
	if (ours == NULL)
		return NULL;
	code = json_error_code(&jerr);
	if (code == json_error_null_byte_in_key) {
		*verdict = ORACLE_NUL_KEY;
		return oracle_has_nul_key(ours) ? NULL
						: "reqjson accepted a line jansson refuses (NUL key?)";
	}
	if (code != json_error_numeric_overflow)
		return "reqjson accepted a line jansson refuses";
	*verdict = ORACLE_BIG_INT;
	theirs = json_loadb(s, len, REQJSON_ORACLE_FLAGS | JSON_DECODE_INT_AS_REAL, &jerr);
	if (theirs == NULL) {
		code = json_error_code(&jerr);
		if (code == json_error_null_byte_in_key && oracle_has_nul_key(ours))
			return NULL;
		/* An integer token beyond the doubles: reqjson holds +-DBL_MAX. */
		return code == json_error_numeric_overflow ? NULL
			: "reqjson accepted a line jansson refuses (big integer?)";
	}
	if (!oracle_same(ours, theirs, true))
		wrong = "reqjson and jansson (integers as reals) loaded different values";
	json_decref(theirs);
	return wrong;
}

#endif
