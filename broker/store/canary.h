/*
 * canary.h - a canary key in Redis, checked every --canary-interval-ms
 * (default 250), so that a Redis that lost data (FLUSHALL, FLUSHDB, a
 * restart without persistence, a failover to a replica that missed
 * writes) is noticed within that interval plus a round trip, whatever the
 * leases' TTLs (the watchdog alone would notice at the next renewal, up
 * to ttl/3 later). One per Redis master: single.c keeps one, cluster.c
 * one per master, its key in a slot that master serves, redlock.c one per
 * master, sent there alone.
 *
 * Primed: the canary's first value is in Redis (its first check was
 * answered). Before that a loss could not be told from the first
 * baseline, so a backend serves nothing from a master until its canary
 * is primed (readiness waits for it): every lease granted there was
 * granted after the first value, and a loss takes that value too.
 */
#ifndef LB_BROKER_CANARY_H
#define LB_BROKER_CANARY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct canary canary_t;

/* Starts checking key (copied; routed by its hash tag, store_eval_key);
 * on_loss(why) runs each time a check finds the key lost. */
canary_t *canary_start(const char *key, size_t key_len, void (*on_loss)(const char *why));
/* The same on master i of a Redlock set (store_eval_key_on). */
canary_t *canary_start_on(int master, const char *key, size_t key_len,
                          void (*on_loss)(const char *why));
/* on_primed (NULL: none) runs once, when the canary becomes primed. */
void canary_on_primed(canary_t *k, void (*on_primed)(void));
bool canary_primed(const canary_t *k);
/* Checks now, unless a check is on its way (a master came up: priming
 * need not wait for the timer). */
void canary_check_now(canary_t *k);
/* Stops it and frees it (now, or when the check on its way comes back). */
void canary_stop(canary_t *k);

#endif
