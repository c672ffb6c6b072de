/*
 * canary.h - a per-broker canary key in Redis, checked once a second, so
 * that a Redis that lost data (FLUSHALL, FLUSHDB, a restart without
 * persistence, a failover to a replica that missed writes) is noticed
 * within a second, whatever the leases' TTLs (the watchdog alone would
 * notice at the next renewal, up to ttl/3 later).
 */
#ifndef LB_BROKER_CANARY_H
#define LB_BROKER_CANARY_H

/* Starts the checks; on_loss(why) runs each time one finds the key lost. */
void canary_start(void (*on_loss)(const char *why));
/* Stops them (shutdown). */
void canary_stop(void);

#endif
