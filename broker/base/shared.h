/*
 * shared.h - the little state every layer may read: the settings, the
 * broker's id, its run state, and the counters that stats and metrics
 * show. One struct, `server` (redis keeps one `struct redisServer`).
 *
 * Who writes what: broker.c (the top) sets loop, cfg, id, started_ms and
 * state; net counts sessions and connections; locks counts leases and the
 * totals, and raises fence_high. Everyone else only reads. Nothing here knows any other module.
 */
#ifndef LB_BROKER_BASE_SHARED_H
#define LB_BROKER_BASE_SHARED_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "broker/base/settings.h"

typedef enum broker_state {
	BROKER_RUNNING,
	BROKER_DRAINING, /* shutdown event sent; waiting for clients or grace */
	BROKER_STOPPING, /* releasing what is left, closing handles */
} broker_state_t;

typedef struct broker_stats {
	uint64_t acquired_total;
	uint64_t released_total;
	uint64_t timeouts_total;
	uint64_t lost_total;
	uint64_t failovers_total;     /* master switches followed (sentinel) */
	uint64_t failover_lost_total; /* leases the new master did not hold */
} broker_stats_t;

struct lb_shared {
	uv_loop_t *loop;
	lb_config_t *cfg;      /* refilled in place on SIGHUP */
	char id[17];           /* random, hex: names this broker in Redis */
	uint64_t started_ms;   /* uv_now at start */
	broker_state_t state;
	size_t nsessions;      /* open sessions */
	size_t nconnections;   /* sessions whose handle is not yet closed */
	size_t nleases;        /* leases held by current sessions */
	/* The highest fence seen in any reply (grants, inspect): every fence a
	 * script of this broker grants exceeds it (the lock scripts' context),
	 * so this broker's fences keep increasing across a failover to a
	 * replica that missed the last ones. Locks writes it, store reads it. */
	int64_t fence_high;
	broker_stats_t stats;
};

extern struct lb_shared server;

#endif
