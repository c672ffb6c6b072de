/*
 * cluster_map.h - what the Redis Cluster backend (issue 17) knows of the
 * cluster, as pure functions: the slot map read from a CLUSTER SLOTS
 * reply (which master serves each of the 16384 slots), and the MOVED and
 * ASK redirects of a reply. No I/O: the backend asks, these read.
 *
 * Invariants: a map names at most CLUSTER_MASTERS_MAX masters, each once
 * (host and port as the cluster gives them; a nil or empty host is the
 * node asked, "?" an unknown one); owner[slot] is an index into
 * masters or -1 for a slot no master serves (the cluster is then partly
 * down: calls on those slots answer unavailable).
 */
#ifndef LB_BROKER_STORE_CLUSTER_MAP_H
#define LB_BROKER_STORE_CLUSTER_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "broker/base/url.h"
#include "broker/store/slot.h"

#define CLUSTER_MASTERS_MAX 64

typedef struct cluster_map {
	int nmasters;
	host_port_t masters[CLUSTER_MASTERS_MAX];
	int64_t epoch[CLUSTER_MASTERS_MAX]; /* each master's config epoch, -1: unknown */
	int16_t owner[SLOT_COUNT]; /* index into masters, or -1 */
} cluster_map_t;

/* Reads a CLUSTER SLOTS reply into m (whatever m held is replaced). A
 * master whose address is empty is the node that was asked (asked_host);
 * one whose address is "?" (unknown to the node) serves nothing here.
 * Returns the number of slots no master serves (0: all covered), or -1
 * with a message in err when the reply is not a CLUSTER SLOTS reply (m is
 * then left with every slot unserved). */
int cluster_map_read_slots(cluster_map_t *m, const redisReply *r, const char *asked_host, char *err,
                           size_t errlen);

/* Reads the config epoch of each master of m from a CLUSTER NODES reply
 * (its text: a line per node, "ID HOST:PORT@BUS[,NAME] FLAGS MASTER PING
 * PONG EPOCH LINK SLOT..."; an empty HOST is the node that was asked).
 * A master the text does not list as a master keeps epoch -1. */
void cluster_map_read_epochs(cluster_map_t *m, const char *text, size_t len, const char *asked_host);

/* The number of slots that m gives to another master than cur does, with
 * an older config epoch than cur's master there (or one m does not tell,
 * where cur's is known): m is older than cur there (a node that has not
 * heard of a failover, or a master deposed behind a partition, still
 * names the old master). 0: m may be taken. */
int cluster_map_older_slots(const cluster_map_t *m, const cluster_map_t *cur);

/* The master that serves slot, or NULL. */
const host_port_t *cluster_map_master_of(const cluster_map_t *m, uint16_t slot);

typedef struct cluster_redirect {
	bool ask;      /* ASK (once, with ASKING), else MOVED (the map is old) */
	uint16_t slot;
	host_port_t to;
} cluster_redirect_t;

/* Reads "MOVED SLOT HOST:PORT" or "ASK SLOT HOST:PORT" (an error reply's
 * text; HOST may be an IPv6 address, the port follows the last colon; an
 * empty HOST is the node that answered, answered_host). Returns 0, or -1
 * when msg is no redirect. */
int cluster_read_redirect(const char *msg, size_t len, const char *answered_host,
                          cluster_redirect_t *out);

#endif
