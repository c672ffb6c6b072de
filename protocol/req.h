/*
 * req.h - decoding and strict validation of request lines into typed requests.
 *
 * The checks run in the order PROTOCOL.md fixes, and the first that fails
 * answers: JSON (bad_json), shape (bad_request), id (invalid_argument), op
 * name (unknown_op), [auth: the broker's business, between req_parse and
 * req_unpack], fields (invalid_argument, the message names the field; a
 * field of another op also gets the list of this op's fields).
 *
 * Ownership: a req_t owns its parsed JSON document (root). Every string and
 * the id inside a req_t point into that document and stay valid until
 * req_clear(). For every optional field, null is the same as absent; a field
 * the op does not define is an error even when null.
 *
 * This module knows nothing of Redis, sessions or the broker's config; a
 * value the broker defaults (ttl_ms) is left 0 here.
 */
#ifndef LB_PROTOCOL_REQ_H
#define LB_PROTOCOL_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "protocol/errors.h"

/* Bounds from PROTOCOL.md. */
#define REQ_ID_MAX_BYTES 128
#define REQ_ID_MAX_INT (INT64_C(1) << 53)
#define REQ_LOCK_MAX_BYTES 512
#define REQ_LABEL_MAX_BYTES 128 /* owner, client */
#define REQ_AUTH_MAX_BYTES 4096
#define REQ_LEASE_MAX_BYTES 128
#define REQ_TTL_MIN_MS 100
#define REQ_TTL_MAX_MS 86400000
#define REQ_KEEPALIVE_MIN_MS 500
#define REQ_KEEPALIVE_MAX_MS 600000
#define REQ_LIMIT_MAX 1000000
#define REQ_VALUE_MAX_BYTES 4096 /* an election's value (acquire, proclaim) */
#define REQ_WATCH_MAX_BYTES 64   /* a watch's id (unwatch) */
#define REQ_LOCK_DELAY_MAX_MS 600000
#define REQ_ALL_MAX_LOCKS 64 /* acquire_all's locks */

typedef enum req_op {
	OP_HELLO,
	OP_PING,
	OP_ACQUIRE,
	OP_RELEASE,
	OP_EXTEND,
	OP_CANCEL,
	OP_INSPECT,
	OP_LEASES,
	OP_STATS,
	OP_PROCLAIM,
	OP_WATCH,
	OP_UNWATCH,
	OP_ACQUIRE_ALL,
	OP__COUNT
} req_op_t;

typedef enum lb_mode {
	LB_MODE_EXCLUSIVE = 0,
	LB_MODE_SHARED = 1,
	LB_MODE_PERMIT = 2, /* a semaphore permit: acquire with limit */
} lb_mode_t;

/* A string inside the request's JSON document: not NUL-terminated by
 * contract (jansson does terminate it, but it may contain NUL bytes where the
 * protocol allows them). ptr is NULL when the field was absent. */
typedef struct lb_str {
	const char *ptr;
	size_t len;
} lb_str_t;

typedef struct req_hello {
	lb_str_t client;      /* absent: ptr NULL */
	lb_str_t auth;        /* absent: ptr NULL */
	int64_t keepalive_ms; /* 0 = off */
} req_hello_t;

typedef struct req_acquire {
	lb_str_t lock;
	lb_mode_t mode;      /* LB_MODE_PERMIT iff limit > 0 */
	int64_t limit;       /* 0 = absent (not a semaphore) */
	int64_t ttl_ms;      /* 0 = absent: the broker's default */
	int64_t wait_ms;     /* -1 = absent: wait until granted; 0 = try once */
	bool watchdog;       /* resolved: default true, false when detach */
	lb_str_t owner;      /* absent: ptr "" len 0 */
	bool fair;           /* default true */
	bool detach;         /* default false */
	int64_t max_hold_ms; /* 0 = absent: no cap */
	lb_str_t value;      /* absent: ptr NULL; exclusive locks only */
	int64_t lock_delay_ms; /* 0 = absent: none */
} req_acquire_t;

typedef struct req_lease {
	lb_str_t lease;
	int64_t ttl_ms; /* extend only; required there */
} req_lease_t;

typedef struct req_proclaim {
	lb_str_t lease;
	lb_str_t value; /* required; may be empty */
} req_proclaim_t;

/* acquire_all: the options every lock gets (as acquire's; lock, mode,
 * limit and value unused), and the locks, checked (1..REQ_ALL_MAX_LOCKS
 * distinct names, each entry as acquire's lock, mode and limit): read
 * them with req_all_lock. */
typedef struct req_acquire_all {
	req_acquire_t opts;
	json_t *locks; /* borrowed: the array */
} req_acquire_all_t;

typedef struct req_unwatch {
	lb_str_t watch;
} req_unwatch_t;

typedef struct req_cancel {
	json_t *target; /* borrowed; a string or an integer, as a valid id */
} req_cancel_t;

typedef struct req_inspect {
	lb_str_t lock;
} req_inspect_t;

typedef struct req {
	json_t *root; /* owned; NULL before req_parse or after req_clear */
	json_t *id;   /* borrowed from root; NULL when absent or null */
	req_op_t op;  /* valid after a successful req_parse */
	union {
		req_hello_t hello;
		req_acquire_t acquire;
		req_lease_t release; /* ttl_ms unused */
		req_lease_t extend;
		req_cancel_t cancel;
		req_inspect_t inspect;
		req_proclaim_t proclaim;
		req_inspect_t watch; /* the lock, as inspect's */
		req_unwatch_t unwatch;
		req_acquire_all_t acquire_all;
	} u;
} req_t;

typedef struct req_error {
	lb_err_t code;
	char message[256];
} req_error_t;

/*
 * Parses one line (without its newline) up to and including the op name.
 * Returns 0 with req->root, req->id and req->op set, or -1 with *err set.
 * On failure req->id is set whenever the line is a JSON object whose id is
 * valid, whichever check failed (bad_request included), so the caller
 * echoes it; for bad_json, a line that is not an object and a bad id it is
 * NULL. Either way the caller calls req_clear() afterwards.
 */
int req_parse(const char *line, size_t len, req_t *req, req_error_t *err);

/* Validates and unpacks the op's fields into req->u. Returns 0 or -1 with
 * *err set (invalid_argument naming the field). */
int req_unpack(req_t *req, req_error_t *err);

/* acquire_all's lock k (k < json_array_size(locks)), after req_unpack:
 * its name, mode (LB_MODE_PERMIT with a limit) and limit (0: none). */
void req_all_lock(const req_t *req, size_t k, lb_str_t *lock, lb_mode_t *mode, int64_t *limit);

/* Releases the parsed document; req may be reused. Accepts a zeroed req. */
void req_clear(req_t *req);

/* "acquire" etc.; NULL for an out-of-range op. */
const char *req_op_name(req_op_t op);
/* "exclusive", "shared", "permit". */
const char *lb_mode_name(lb_mode_t mode);

/* True when v is a valid id value (string of at most 128 bytes, or integer
 * in [-2^53, 2^53]). null is not an id value. Exposed for cancel. */
bool req_id_valid(const json_t *v);

#endif
