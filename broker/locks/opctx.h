/*
 * opctx.h - the context of a lock op on its way to Redis: a reference on
 * the client (counted in its in-flight requests), a new reference to the
 * request id, the send time, and copies of what the reply needs. A reply
 * that arrives after the client closed answers nobody. Shared by the ops
 * that answer one request each (lockops.c, reentry.c).
 */
#ifndef LB_BROKER_LOCKS_OPCTX_H
#define LB_BROKER_LOCKS_OPCTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "broker/locks/client.h"
#include "broker/locks/lease.h"

typedef struct op_ctx {
	client_t *s;
	json_t *id; /* own reference, or NULL */
	uint64_t sent_at;
	char token[LEASE_TOKEN_LEN + 1];
	char *lock; /* owned copy */
	size_t lock_len;
	int64_t ttl_ms;
	int64_t seq; /* the op seq a re-entry, release or proclaim carries */
	char *value; /* proclaim: the value as Redis keeps it ('=' V); owned */
	size_t value_len;
	bool detach;
} opctx_t;

/* Starts an op of s for the request with this id. */
opctx_t *opctx_new(client_t *s, const json_t *id);
/* Keeps a copy of the lock's name. */
void opctx_set_lock(opctx_t *c, const char *lock, size_t len);
/* Ends the op: the client may read on; frees the context. */
void opctx_done(opctx_t *c);
/* Answers the error, then ends the op. */
void opctx_fail(opctx_t *c, lb_err_t code, const char *message);
/* The message of a failed reply, for logs. */
const char *opctx_failure_text(const redisReply *r);
/* A failed reply: unavailable (logged), then the op ends. */
void opctx_fail_unavailable(opctx_t *c, const redisReply *r);
/* A lease op's failed reply: an error from Redis (the script did not
 * run: unavailable), or none at all after LB_RESOLVE_MS of resending, when
 * the lease has ended whatever happened (not_held); not_held, with the
 * reason, for a lease reported lost meanwhile. */
void opctx_fail_lease_op(opctx_t *c, const redisReply *r);
/* Element k of an array reply as an integer; false when it is not one. */
bool opctx_reply_int(const redisReply *r, size_t k, int64_t *out);

#endif
