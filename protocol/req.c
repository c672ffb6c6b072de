/*
 * req.c - decoding and strict validation of request lines (see req.h).
 *
 * The checks run in the order PROTOCOL.md fixes and stop at the first
 * failure: JSON (bad_json), shape (bad_request), id (invalid_argument),
 * op name (unknown_op) in req_parse; the op's fields (invalid_argument) in
 * req_unpack, driven by one table of fields per op.
 *
 * Invariants:
 * - A req_t owns its document (root) and nothing else: req->id, strings in
 *   req->u and cancel's target all borrow from root until req_clear().
 * - req->id is non-NULL only once the id passed its check, so a caller may
 *   always echo it; it is set as soon as the line is an object with a
 *   valid id, so every answer but bad_json and "not an object" carries it.
 * - A line is loaded by protocol/reqjson.c, which reads every integer
 *   token exactly and on its own: one in json_int_t is an integer, one
 *   beyond is a real, a token written as a real stays one. Integers are
 *   taken in [-2^53, 2^53] only, so anything else where an integer is
 *   read (a real, a larger integer) gets the field's usual message.
 * - bad_json says what is wrong and at which byte (counted from 0), in
 *   reqjson's words; it never quotes the line.
 * - No message ever quotes raw input: names are cut to 64 bytes and every
 *   byte outside printable ASCII becomes '?'.
 */
#include "protocol/req.h"
#include "protocol/reqjson.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUOTE_MAX 64 /* bytes of a client-supplied name quoted in a message */

static int fail(req_error_t *err, lb_err_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(req_error_t *err, lb_err_t code, const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

/* Copies at most QUOTE_MAX bytes of s into out (size >= QUOTE_MAX + 4),
 * masking every byte outside printable ASCII, and marks a cut with "...". */
static const char *quote(const char *s, size_t len, char *out)
{
	size_t i, n = len < QUOTE_MAX ? len : QUOTE_MAX;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (len > QUOTE_MAX) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

/* ---- values ------------------------------------------------------------ */

/* True with *out set when v is an integer in [-2^53, 2^53]. */
static bool get_int(const json_t *v, int64_t *out)
{
	json_int_t i;

	if (!json_is_integer(v))
		return false;
	i = json_integer_value(v);
	if (i < -REQ_ID_MAX_INT || i > REQ_ID_MAX_INT)
		return false;
	*out = (int64_t)i;
	return true;
}

bool req_id_valid(const json_t *v)
{
	int64_t i;

	if (json_is_string(v))
		return json_string_length(v) <= REQ_ID_MAX_BYTES;
	return get_int(v, &i);
}

/* ---- ops and their fields ---------------------------------------------- */

typedef enum field_kind {
	F_STR,  /* lb_str_t; min..max bytes */
	F_INT,  /* int64_t; min..max */
	F_BOOL, /* bool */
	F_MODE, /* lb_mode_t; "exclusive" or "shared" */
	F_ID,   /* json_t *; a valid id value */
	F_ARRAY, /* json_t *; an array of min..max elements (the op checks them) */
} field_kind_t;

enum {
	F_REQUIRED = 1 << 0,
	F_NO_CTRL = 1 << 1, /* strings: no U+0000..U+001F, no U+007F */
};

typedef struct field {
	const char *name;
	field_kind_t kind;
	int flags;
	int64_t min, max; /* F_STR: length in bytes; F_INT: value */
	size_t off;       /* destination inside req_t */
} field_t;

/* Post-processing of an op once every field passed: defaults that depend on
 * presence, and checks across fields. present has bit i set when field i of
 * the op's table was given (not null). */
typedef int (*finish_fn)(req_t *req, unsigned present, req_error_t *err);

typedef struct op_def {
	const char *name;
	const field_t *fields;
	size_t nfields;
	finish_fn finish;
} op_def_t;

#define U(member) offsetof(req_t, u.member)

static const field_t hello_fields[] = {
	{"client", F_STR, 0, 0, REQ_LABEL_MAX_BYTES, U(hello.client)},
	{"auth", F_STR, 0, 0, REQ_AUTH_MAX_BYTES, U(hello.auth)},
	{"keepalive_ms", F_INT, 0, REQ_KEEPALIVE_MIN_MS, REQ_KEEPALIVE_MAX_MS,
	 U(hello.keepalive_ms)},
};

/* Indices into acquire_fields, for acquire_finish. */
enum { A_LOCK, A_MODE, A_LIMIT, A_TTL, A_WAIT, A_WATCHDOG, A_OWNER, A_FAIR,
       A_DETACH, A_MAX_HOLD, A_VALUE, A_LOCK_DELAY };

static const field_t acquire_fields[] = {
	[A_LOCK] = {"lock", F_STR, F_REQUIRED | F_NO_CTRL, 1, REQ_LOCK_MAX_BYTES,
		    U(acquire.lock)},
	[A_MODE] = {"mode", F_MODE, 0, 0, 0, U(acquire.mode)},
	[A_LIMIT] = {"limit", F_INT, 0, 1, REQ_LIMIT_MAX, U(acquire.limit)},
	[A_TTL] = {"ttl_ms", F_INT, 0, REQ_TTL_MIN_MS, REQ_TTL_MAX_MS,
		   U(acquire.ttl_ms)},
	[A_WAIT] = {"wait_ms", F_INT, 0, 0, REQ_ID_MAX_INT, U(acquire.wait_ms)},
	[A_WATCHDOG] = {"watchdog", F_BOOL, 0, 0, 0, U(acquire.watchdog)},
	[A_OWNER] = {"owner", F_STR, 0, 0, REQ_LABEL_MAX_BYTES, U(acquire.owner)},
	[A_FAIR] = {"fair", F_BOOL, 0, 0, 0, U(acquire.fair)},
	[A_DETACH] = {"detach", F_BOOL, 0, 0, 0, U(acquire.detach)},
	[A_MAX_HOLD] = {"max_hold_ms", F_INT, 0, REQ_TTL_MIN_MS, REQ_TTL_MAX_MS,
			U(acquire.max_hold_ms)},
	[A_VALUE] = {"value", F_STR, 0, 0, REQ_VALUE_MAX_BYTES, U(acquire.value)},
	[A_LOCK_DELAY] = {"lock_delay_ms", F_INT, 0, 0, REQ_LOCK_DELAY_MAX_MS, U(acquire.lock_delay_ms)},
};

static const field_t release_fields[] = {
	{"lease", F_STR, F_REQUIRED, 1, REQ_LEASE_MAX_BYTES, U(release.lease)},
};

static const field_t extend_fields[] = {
	{"lease", F_STR, F_REQUIRED, 1, REQ_LEASE_MAX_BYTES, U(extend.lease)},
	{"ttl_ms", F_INT, F_REQUIRED, REQ_TTL_MIN_MS, REQ_TTL_MAX_MS,
	 U(extend.ttl_ms)},
};

static const field_t proclaim_fields[] = {
	{"lease", F_STR, F_REQUIRED, 1, REQ_LEASE_MAX_BYTES, U(proclaim.lease)},
	{"value", F_STR, F_REQUIRED, 0, REQ_VALUE_MAX_BYTES, U(proclaim.value)},
};

static const field_t watch_fields[] = {
	{"lock", F_STR, F_REQUIRED | F_NO_CTRL, 1, REQ_LOCK_MAX_BYTES, U(watch.lock)},
};

/* Indices into all_fields, for all_finish. */
enum { L_LOCKS, L_TTL, L_WAIT, L_WATCHDOG, L_OWNER, L_FAIR, L_DETACH, L_MAX_HOLD, L_LOCK_DELAY };

#define UA(member) offsetof(req_t, u.acquire_all.opts.member)
static const field_t all_fields[] = {
	[L_LOCKS] = {"locks", F_ARRAY, F_REQUIRED, 1, REQ_ALL_MAX_LOCKS, U(acquire_all.locks)},
	[L_TTL] = {"ttl_ms", F_INT, 0, REQ_TTL_MIN_MS, REQ_TTL_MAX_MS, UA(ttl_ms)},
	[L_WAIT] = {"wait_ms", F_INT, 0, 0, REQ_ID_MAX_INT, UA(wait_ms)},
	[L_WATCHDOG] = {"watchdog", F_BOOL, 0, 0, 0, UA(watchdog)},
	[L_OWNER] = {"owner", F_STR, 0, 0, REQ_LABEL_MAX_BYTES, UA(owner)},
	[L_FAIR] = {"fair", F_BOOL, 0, 0, 0, UA(fair)},
	[L_DETACH] = {"detach", F_BOOL, 0, 0, 0, UA(detach)},
	[L_MAX_HOLD] = {"max_hold_ms", F_INT, 0, REQ_TTL_MIN_MS, REQ_TTL_MAX_MS, UA(max_hold_ms)},
	[L_LOCK_DELAY] = {"lock_delay_ms", F_INT, 0, 0, REQ_LOCK_DELAY_MAX_MS, UA(lock_delay_ms)},
};

static const field_t unwatch_fields[] = {
	{"watch", F_STR, F_REQUIRED, 1, REQ_WATCH_MAX_BYTES, U(unwatch.watch)},
};

static const field_t cancel_fields[] = {
	{"target", F_ID, F_REQUIRED, 0, 0, U(cancel.target)},
};

static const field_t inspect_fields[] = {
	{"lock", F_STR, F_REQUIRED | F_NO_CTRL, 1, REQ_LOCK_MAX_BYTES,
	 U(inspect.lock)},
};

#define BIT(i) (1u << (i))

/* The defaults of the options acquire and acquire_all share, for those
 * not given, and the check across them. */
static int acquire_defaults(req_acquire_t *a, bool wait, bool owner, bool fair, bool detach,
			    bool watchdog, req_error_t *err)
{
	if (!wait)
		a->wait_ms = -1;
	if (!owner) {
		a->owner.ptr = "";
		a->owner.len = 0;
	}
	if (!fair)
		a->fair = true;
	if (!detach)
		a->detach = false;
	if (!watchdog)
		a->watchdog = !a->detach;
	else if (a->watchdog && a->detach)
		return fail(err, LB_E_INVALID_ARGUMENT,
			    "field 'watchdog' cannot be true when 'detach' is true");
	return 0;
}

static int acquire_finish(req_t *req, unsigned present, req_error_t *err)
{
	req_acquire_t *a = &req->u.acquire;

	if (present & BIT(A_LIMIT)) {
		if (present & BIT(A_MODE))
			return fail(err, LB_E_INVALID_ARGUMENT,
				    "field 'mode' must be absent when 'limit' is given");
		a->mode = LB_MODE_PERMIT;
	}
	if ((present & BIT(A_VALUE)) && a->mode != LB_MODE_EXCLUSIVE)
		return fail(err, LB_E_INVALID_ARGUMENT,
			    "field 'value' is allowed only with mode \"exclusive\" (an election's "
			    "leader is one holder)");
	return acquire_defaults(a, present & BIT(A_WAIT), present & BIT(A_OWNER), present & BIT(A_FAIR),
				present & BIT(A_DETACH), present & BIT(A_WATCHDOG), err);
}

static bool streq(const char *s, size_t len, const char *lit);
static bool has_ctrl(const char *s, size_t len);

/* One entry of acquire_all's locks: an object of lock (as acquire's),
 * mode and limit, nothing else. */
static int all_entry_check(json_t *e, size_t k, req_error_t *err)
{
	const char *key;
	size_t key_len;
	json_t *v, *lock, *mode, *limit;
	int64_t l;

	if (!json_is_object(e))
		return fail(err, LB_E_INVALID_ARGUMENT, "locks[%zu] must be an object of 'lock', 'mode', 'limit'",
			    k);
	json_object_keylen_foreach(e, key, key_len, v) {
		if (!streq(key, key_len, "lock") && !streq(key, key_len, "mode") &&
		    !streq(key, key_len, "limit"))
			return fail(err, LB_E_INVALID_ARGUMENT,
				    "locks[%zu]: unknown field (an entry takes 'lock', 'mode', 'limit')", k);
	}
	lock = json_object_get(e, "lock");
	mode = json_object_get(e, "mode");
	limit = json_object_get(e, "limit");
	if (!json_is_string(lock) || json_string_length(lock) < 1 ||
	    json_string_length(lock) > REQ_LOCK_MAX_BYTES ||
	    has_ctrl(json_string_value(lock), json_string_length(lock)))
		return fail(err, LB_E_INVALID_ARGUMENT,
			    "locks[%zu]: 'lock' must be a string of 1..%d bytes without control characters", k,
			    REQ_LOCK_MAX_BYTES);
	if (mode && !json_is_null(mode) &&
	    (!json_is_string(mode) ||
	     (!streq(json_string_value(mode), json_string_length(mode), "exclusive") &&
	      !streq(json_string_value(mode), json_string_length(mode), "shared"))))
		return fail(err, LB_E_INVALID_ARGUMENT, "locks[%zu]: 'mode' must be \"exclusive\" or \"shared\"",
			    k);
	if (limit && !json_is_null(limit)) {
		if (!get_int(limit, &l) || l < 1 || l > REQ_LIMIT_MAX)
			return fail(err, LB_E_INVALID_ARGUMENT, "locks[%zu]: 'limit' must be an integer in 1..%d", k,
				    REQ_LIMIT_MAX);
		if (mode && !json_is_null(mode))
			return fail(err, LB_E_INVALID_ARGUMENT,
				    "locks[%zu]: 'mode' must be absent when 'limit' is given", k);
	}
	return 0;
}

static int all_finish(req_t *req, unsigned present, req_error_t *err)
{
	req_acquire_t *a = &req->u.acquire_all.opts;
	json_t *locks = req->u.acquire_all.locks;
	size_t n = json_array_size(locks);

	if (acquire_defaults(a, present & BIT(L_WAIT), present & BIT(L_OWNER), present & BIT(L_FAIR),
			     present & BIT(L_DETACH), present & BIT(L_WATCHDOG), err) != 0)
		return -1;
	for (size_t k = 0; k < n; k++) {
		json_t *e = json_array_get(locks, k);
		if (all_entry_check(e, k, err) != 0)
			return -1;
		for (size_t j = 0; j < k; j++) {
			json_t *x = json_object_get(json_array_get(locks, j), "lock");
			json_t *y = json_object_get(e, "lock");
			if (json_string_length(x) == json_string_length(y) &&
			    memcmp(json_string_value(x), json_string_value(y), json_string_length(x)) == 0)
				return fail(err, LB_E_INVALID_ARGUMENT,
					    "locks[%zu] names the same lock as locks[%zu]", k, j);
		}
	}
	return 0;
}

void req_all_lock(const req_t *req, size_t k, lb_str_t *lock, lb_mode_t *mode, int64_t *limit)
{
	json_t *e = json_array_get(req->u.acquire_all.locks, k);
	json_t *l = json_object_get(e, "lock"), *m = json_object_get(e, "mode");
	json_t *p = json_object_get(e, "limit");

	*lock = (lb_str_t){json_string_value(l), json_string_length(l)};
	*limit = 0;
	*mode = LB_MODE_EXCLUSIVE;
	if (p && !json_is_null(p)) {
		get_int(p, limit);
		*mode = LB_MODE_PERMIT;
	} else if (m && json_is_string(m) && streq(json_string_value(m), json_string_length(m), "shared")) {
		*mode = LB_MODE_SHARED;
	}
}

#define OPDEF(n, f, fin) {n, f, sizeof(f) / sizeof(f[0]), fin}

static const op_def_t ops[OP__COUNT] = {
	[OP_HELLO] = OPDEF("hello", hello_fields, NULL),
	[OP_PING] = {"ping", NULL, 0, NULL},
	[OP_ACQUIRE] = OPDEF("acquire", acquire_fields, acquire_finish),
	[OP_RELEASE] = OPDEF("release", release_fields, NULL),
	[OP_EXTEND] = OPDEF("extend", extend_fields, NULL),
	[OP_CANCEL] = OPDEF("cancel", cancel_fields, NULL),
	[OP_INSPECT] = OPDEF("inspect", inspect_fields, NULL),
	[OP_LEASES] = {"leases", NULL, 0, NULL},
	[OP_STATS] = {"stats", NULL, 0, NULL},
	[OP_PROCLAIM] = OPDEF("proclaim", proclaim_fields, NULL),
	[OP_WATCH] = OPDEF("watch", watch_fields, NULL),
	[OP_UNWATCH] = OPDEF("unwatch", unwatch_fields, NULL),
	[OP_ACQUIRE_ALL] = OPDEF("acquire_all", all_fields, all_finish),
};

_Static_assert(sizeof(acquire_fields) / sizeof(acquire_fields[0]) <= 32,
	       "presence is a 32-bit mask");

const char *req_op_name(req_op_t op)
{
	if ((int)op < 0 || op >= OP__COUNT)
		return NULL;
	return ops[op].name;
}

const char *lb_mode_name(lb_mode_t mode)
{
	switch (mode) {
	case LB_MODE_EXCLUSIVE:
		return "exclusive";
	case LB_MODE_SHARED:
		return "shared";
	case LB_MODE_PERMIT:
		return "permit";
	}
	return "exclusive";
}

static bool streq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static bool has_ctrl(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f)
			return true;
	}
	return false;
}

/* Why a value of field fd is refused, for the message. */
static int field_fail(const field_t *fd, req_error_t *err)
{
	const char *n = fd->name;
	lb_err_t e = LB_E_INVALID_ARGUMENT;

	switch (fd->kind) {
	case F_STR:
		if (fd->flags & F_NO_CTRL)
			return fail(err, e, "field '%s' must be a string of %" PRId64
				    "..%" PRId64 " bytes without control characters",
				    n, fd->min, fd->max);
		if (fd->min > 0)
			return fail(err, e, "field '%s' must be a string of %" PRId64
				    "..%" PRId64 " bytes", n, fd->min, fd->max);
		return fail(err, e, "field '%s' must be a string of at most %" PRId64
			    " bytes", n, fd->max);
	case F_INT:
		return fail(err, e, "field '%s' must be an integer in %" PRId64
			    "..%" PRId64, n, fd->min, fd->max);
	case F_BOOL:
		return fail(err, e, "field '%s' must be a boolean", n);
	case F_MODE:
		return fail(err, e, "field '%s' must be \"exclusive\" or \"shared\"", n);
	case F_ARRAY:
		return fail(err, e, "field '%s' must be an array of %" PRId64 "..%" PRId64 " locks", n,
			    fd->min, fd->max);
	case F_ID:
		return fail(err, e, "field '%s' must be a string of at most %d bytes "
			    "or an integer in -%" PRId64 "..%" PRId64,
			    n, REQ_ID_MAX_BYTES, REQ_ID_MAX_INT, REQ_ID_MAX_INT);
	}
	return fail(err, LB_E_INTERNAL, "field '%s' has no kind", n);
}

/* Checks v (present, not null) against fd and stores it at dst. */
static int unpack_field(const field_t *fd, json_t *v, char *dst,
			req_error_t *err)
{
	switch (fd->kind) {
	case F_STR: {
		lb_str_t s;

		if (!json_is_string(v))
			return field_fail(fd, err);
		s.ptr = json_string_value(v);
		s.len = json_string_length(v);
		if ((int64_t)s.len < fd->min || (int64_t)s.len > fd->max)
			return field_fail(fd, err);
		if ((fd->flags & F_NO_CTRL) && has_ctrl(s.ptr, s.len))
			return field_fail(fd, err);
		memcpy(dst, &s, sizeof(s));
		return 0;
	}
	case F_INT: {
		int64_t i;

		if (!get_int(v, &i) || i < fd->min || i > fd->max)
			return field_fail(fd, err);
		memcpy(dst, &i, sizeof(i));
		return 0;
	}
	case F_BOOL: {
		bool b;

		if (!json_is_boolean(v))
			return field_fail(fd, err);
		b = json_is_true(v);
		memcpy(dst, &b, sizeof(b));
		return 0;
	}
	case F_MODE: {
		lb_mode_t m;
		const char *s;
		size_t len;

		if (!json_is_string(v))
			return field_fail(fd, err);
		s = json_string_value(v);
		len = json_string_length(v);
		if (streq(s, len, "exclusive"))
			m = LB_MODE_EXCLUSIVE;
		else if (streq(s, len, "shared"))
			m = LB_MODE_SHARED;
		else
			return field_fail(fd, err);
		memcpy(dst, &m, sizeof(m));
		return 0;
	}
	case F_ID:
		if (!req_id_valid(v))
			return field_fail(fd, err);
		memcpy(dst, &v, sizeof(v));
		return 0;
	case F_ARRAY:
		if (!json_is_array(v) || (int64_t)json_array_size(v) < fd->min ||
		    (int64_t)json_array_size(v) > fd->max)
			return field_fail(fd, err);
		memcpy(dst, &v, sizeof(v));
		return 0;
	}
	return fail(err, LB_E_INTERNAL, "field '%s' has no kind", fd->name);
}

/* True when key names a field of an op other than def (a request sent with
 * the wrong op's fields, "lock" on a release). */
static bool field_of_another_op(const op_def_t *def, const char *key,
				size_t key_len)
{
	size_t i, j;

	for (i = 0; i < OP__COUNT; i++) {
		if (&ops[i] == def)
			continue;
		for (j = 0; j < ops[i].nfields; j++)
			if (streq(key, key_len, ops[i].fields[j].name))
				return true;
	}
	return false;
}

/* "unknown field 'F'", and when F belongs to another op, the fields this
 * op takes: "unknown field 'lock' (release takes 'lease')". */
static int unknown_field(const op_def_t *def, const char *key, size_t key_len,
			 req_error_t *err)
{
	char q[QUOTE_MAX + 4], list[160];
	size_t i, n = 0;

	quote(key, key_len, q);
	if (!field_of_another_op(def, key, key_len))
		return fail(err, LB_E_INVALID_ARGUMENT, "unknown field '%s'", q);
	if (def->nfields == 0)
		return fail(err, LB_E_INVALID_ARGUMENT,
			    "unknown field '%s' (%s takes no fields)", q, def->name);
	list[0] = '\0';
	for (i = 0; i < def->nfields && n < sizeof(list); i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s'%s'",
				      i > 0 ? ", " : "", def->fields[i].name);
	return fail(err, LB_E_INVALID_ARGUMENT, "unknown field '%s' (%s takes %s)",
		    q, def->name, list);
}

/* ---- entry points ------------------------------------------------------ */

int req_parse(const char *line, size_t len, req_t *req, req_error_t *err)
{
	reqjson_error_t jerr;
	json_t *root, *op, *id;
	const char *name;
	size_t name_len;
	char q[QUOTE_MAX + 4];
	bool id_ok;
	int i;

	memset(req, 0, sizeof(*req));
	root = reqjson_load(line, len, &jerr);
	if (root == NULL)
		return fail(err, LB_E_BAD_JSON, "invalid JSON at byte %zu: %s",
			    jerr.offset, jerr.what);
	req->root = root;

	if (!json_is_object(root))
		return fail(err, LB_E_BAD_REQUEST, "the request must be a JSON object");
	/* From here on every answer carries a valid id, bad_request included;
	 * a bad id is reported once the shape is known to be right. */
	id = json_object_get(root, "id");
	id_ok = id == NULL || json_is_null(id) || req_id_valid(id);
	if (id_ok && id != NULL && !json_is_null(id))
		req->id = id;

	op = json_object_get(root, "op");
	if (op == NULL)
		return fail(err, LB_E_BAD_REQUEST, "field 'op' is required");
	if (!json_is_string(op))
		return fail(err, LB_E_BAD_REQUEST, "field 'op' must be a string");
	if (!id_ok)
		return fail(err, LB_E_INVALID_ARGUMENT,
			    "field 'id' must be a string of at most %d bytes "
			    "or an integer in -%" PRId64 "..%" PRId64,
			    REQ_ID_MAX_BYTES, REQ_ID_MAX_INT, REQ_ID_MAX_INT);

	name = json_string_value(op);
	name_len = json_string_length(op);
	for (i = 0; i < OP__COUNT; i++) {
		if (streq(name, name_len, ops[i].name)) {
			req->op = (req_op_t)i;
			return 0;
		}
	}
	return fail(err, LB_E_UNKNOWN_OP, "unknown op '%s'",
		    quote(name, name_len, q));
}

int req_unpack(req_t *req, req_error_t *err)
{
	const op_def_t *def;
	const char *key;
	size_t key_len, i;
	json_t *v;
	unsigned present = 0;

	if (req->root == NULL || !json_is_object(req->root) ||
	    (int)req->op < 0 || req->op >= OP__COUNT)
		return fail(err, LB_E_INTERNAL, "req_unpack without a parsed request");
	def = &ops[req->op];
	memset(&req->u, 0, sizeof(req->u));

	/* Unknown fields first, even null ones, so a typo is always named. */
	json_object_keylen_foreach(req->root, key, key_len, v) {
		bool known = streq(key, key_len, "id") || streq(key, key_len, "op");

		for (i = 0; !known && i < def->nfields; i++)
			known = streq(key, key_len, def->fields[i].name);
		if (!known)
			return unknown_field(def, key, key_len, err);
	}

	for (i = 0; i < def->nfields; i++) {
		const field_t *fd = &def->fields[i];

		v = json_object_get(req->root, fd->name);
		if (v == NULL || json_is_null(v)) {
			if (fd->flags & F_REQUIRED)
				return fail(err, LB_E_INVALID_ARGUMENT,
					    "field '%s' is required", fd->name);
			continue;
		}
		if (unpack_field(fd, v, (char *)req + fd->off, err) != 0)
			return -1;
		present |= BIT(i);
	}
	if (def->finish != NULL)
		return def->finish(req, present, err);
	return 0;
}

void req_clear(req_t *req)
{
	if (req == NULL)
		return;
	json_decref(req->root);
	memset(req, 0, sizeof(*req));
}
