/*
 * lockscript.h - builds one call of a lock script: the lock's keys (see
 * lua/lib/prelude.lua for their order), the context the queue-aware
 * scripts take first (retention, broker id, prefix, lock name, heartbeat,
 * fence floor: server.fence_high),
 * then the script's own arguments; and sends it on the lock's route.
 *
 * A lockscript_t lives on the stack for one call; strings added are
 * referenced, not copied, until lockscript_send (which copies everything).
 */
#ifndef LB_BROKER_LOCKSCRIPT_H
#define LB_BROKER_LOCKSCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include "broker/store/store.h"
#include "broker/store/scripts.h"

/* How long the fence key outlives the lock's other keys. */
#define LB_FENCE_RETENTION_MS 60000
#define LB_FENCE_RETENTION_STR "60000"
#define LOCK_NKEYS 7      /* holders, info, header, queue, waiters, deadlines, seq */
#define LOCK_NKEYS_HOLDER 3 /* holders, info, header: scripts that touch no queue */
#define LOCKSCRIPT_INLINE_ARGS 32
/* lua/inspect.lua's reply: INSPECT_HEAD values (limit, fence, waiters,
 * delay_ms), then INSPECT_HOLDER_WIDTH per holder (mode, ttl, count,
 * owner, client, value). */
#define INSPECT_HEAD 4
#define INSPECT_HOLDER_WIDTH 6
/* Waiters stop heartbeating when their broker dies; Redis drops them this
 * long after the last heartbeat. The safety net heartbeats every second. */
#define LOCK_HEARTBEAT_MS 5000
/* A grant in a script's reply: {id, fence, ttl_ms, hold_ms}, hold_ms the ms
 * left of the max hold on the Redis clock (0: none). GRANT_WIDTH in
 * lua/lib/prelude.lua. */
#define LOCK_GRANT_WIDTH 4
#define LOCK_SAFETY_NET_MS 1000

typedef struct lockscript {
	const char *lock;
	size_t lock_len;
	int nkeys;
	int argc, cap;
	const char **argv;
	size_t *len;
	const char *argv_inline[LOCKSCRIPT_INLINE_ARGS];
	size_t len_inline[LOCKSCRIPT_INLINE_ARGS];
	char keys[LOCK_NKEYS * (64 + 512 + 9)];
	char ints[16][24]; /* storage of lockscript_int */
	int nints;
	uint64_t retry_until; /* store.h's; 0 unless lockscript_retry_until */
	uint64_t deadline;    /* store.h's; 0 unless lockscript_deadline */
	int floor_arg;        /* the fence floor's index in argv, or -1 */
	bool unwaited;        /* store_eval_lock's: no WAIT behind it */
} lockscript_t;

/* Starts a call with the lock's first nkeys keys and, when context, the
 * six context arguments. */
void lockscript_begin(lockscript_t *ls, const char *lock, size_t lock_len, int nkeys, bool context);
void lockscript_arg(lockscript_t *ls, const char *s, size_t len);
void lockscript_str(lockscript_t *ls, const char *s);
void lockscript_int(lockscript_t *ls, int64_t v);
/* The call is idempotent: resent after a lost reply until t (store.h's
 * retry_until). */
static inline void lockscript_retry_until(lockscript_t *ls, uint64_t t) { ls->retry_until = t; }
/* How long the call is worth waiting for the store to settle (store.h:
 * store_eval_lock's deadline; Redis Cluster's redirects and retries). */
static inline void lockscript_deadline(lockscript_t *ls, uint64_t t) { ls->deadline = t; }
/* No WAIT behind this call (store.h: store_eval_lock's unwaited). */
static inline void lockscript_unwaited(lockscript_t *ls) { ls->unwaited = true; }
/* Sends it (store semantics: 0, or -1 when it was not accepted and fn
 * will not run) and frees what the builder allocated. */
int lockscript_send(lockscript_t *ls, script_id_t script, store_fn fn, void *priv);

#endif
