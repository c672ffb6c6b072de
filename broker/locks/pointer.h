/*
 * pointer.h - the token -> lock name pointer of a detached lease
 * (lua/lease_index.lua): how any session on any broker finds the lock a
 * detached token names, to release or extend it. It lives in a key of its
 * own (PREFIX lease:{TOKEN}), holds no lock state, and ends by its own
 * expiry: a stale pointer is harmless, every lock script checks the holder.
 */
#ifndef LB_BROKER_LOCKS_POINTER_H
#define LB_BROKER_LOCKS_POINTER_H

#include <stddef.h>
#include <stdint.h>

#include "broker/store/store.h"

/* How long a pointer outlives the lease's lifetime. */
#define LB_INDEX_MARGIN_MS 60000
/* A detached acquire granted this long after its pointer was stored
 * stores it again, for the lifetime granted, before it answers. */
#define LB_INDEX_REFRESH_MS 1000

/* Stores token -> lock for life_ms + LB_INDEX_MARGIN_MS; store semantics
 * (0: fn will run, -1: not sent). */
int pointer_set(const char *token, const char *lock, size_t lock_len, int64_t life_ms, store_fn fn,
                void *priv);
/* The lock name of token (a string reply, or nil); the pointer then lives
 * at least life_ms + LB_INDEX_MARGIN_MS more (life_ms 0: as it is). */
int pointer_get(const char *token, int64_t life_ms, store_fn fn, void *priv);
/* Records the lease's end as granted or extended (life_ms and hold_ms
 * left, 0: no max hold), so that a later release or extend of it can say
 * how it ended; the answer is not awaited. */
void pointer_note_end(const char *token, int64_t life_ms, int64_t hold_ms);
/* How the lease of token ended ("max_hold", "expired", "gone": a string
 * reply) or nil when its end is not known. */
int pointer_why(const char *token, store_fn fn, void *priv);
/* Removes it (the lease was released); a failure is only logged. */
void pointer_del(const char *token);

#endif
