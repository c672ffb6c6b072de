/*
 * reentry.h - a held lease taken once more by its holder (reentrancy).
 */
#ifndef LB_BROKER_LOCKS_REENTRY_H
#define LB_BROKER_LOCKS_REENTRY_H

#include <jansson.h>

#include "broker/locks/client.h"
#include "broker/locks/lease.h"

/* Re-enters lease l for the acquire with request id `id` of s (count + 1)
 * and answers it. */
void reentry_send(client_t *s, const json_t *id, lease_t *l);

#endif
