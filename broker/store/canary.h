/*
 * canary.h - a canary key in Redis, checked once a second, so that a Redis
 * that lost data (FLUSHALL, FLUSHDB, a restart without persistence, a
 * failover to a replica that missed writes) is noticed within a second,
 * whatever the leases' TTLs (the watchdog alone would notice at the next
 * renewal, up to ttl/3 later). One per Redis master: single.c keeps one,
 * cluster.c one per master, its key in a slot that master serves,
 * redlock.c one per master, sent there alone.
 */
#ifndef LB_BROKER_CANARY_H
#define LB_BROKER_CANARY_H

#include <stddef.h>

typedef struct canary canary_t;

/* Starts checking key (copied; routed by its hash tag, store_eval_key);
 * on_loss(why) runs each time a check finds the key lost. */
canary_t *canary_start(const char *key, size_t key_len, void (*on_loss)(const char *why));
/* The same on master i of a Redlock set (store_eval_key_on). */
canary_t *canary_start_on(int master, const char *key, size_t key_len,
                          void (*on_loss)(const char *why));
/* Stops it and frees it (now, or when the check on its way comes back). */
void canary_stop(canary_t *k);

#endif
