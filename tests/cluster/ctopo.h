/*
 * ctopo: the Redis Cluster of one cluster_tests run (six redis-server
 * nodes, three masters with a replica each; see ctopo.c): where it lives,
 * how its nodes are started and found, what each node says, and the check
 * that it is healthy.
 *
 * Used by the runner's report hooks and by cl.c in the test workers, so
 * nothing here asserts: functions return 0 / a pid / a port, or -1 (or 0
 * for "no pid") with a message in err / why.
 *
 * The runner exports (and every test worker inherits):
 *   LB_CL_DIR         the temp dir: nodes-PORT.conf, logs, pid files,
 *                     keeper.sock
 *   LB_CL_NODES       "P1:B1,...,P6:B6": each node's client port and
 *                     cluster bus port on 127.0.0.1; P1..P3 were the
 *                     first masters
 *   LB_CL_HOME        "0-5460,5461-10922,10923-16383": the slot ranges of
 *                     the three shards at creation (the home layout that
 *                     cl_ready restores)
 *   LB_CL_KEEPER_PID  the keeper, parent of every node
 *   LB_CL_ERROR       set (a message) instead when the start-up failed
 * Pids change when a test restarts a node: the pid files in LB_CL_DIR
 * (node-PORT.pid, written by the keeper) are the truth. Which node is
 * master changes with failovers: the nodes themselves are the truth.
 */
#ifndef LB_TESTS_CLUSTER_CTOPO_H
#define LB_TESTS_CLUSTER_CTOPO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "broker/store/slot.h"
#include "tests/common/rproc.h"

#define CTOPO_NODES 6
#define CTOPO_MASTERS 3
#define CTOPO_NODE_TIMEOUT_MS 1000
#define CTOPO_ID_LEN 40

typedef struct {
    char dir[PATH_MAX];
    int port[CTOPO_NODES]; /* client ports */
    int bus[CTOPO_NODES];  /* cluster bus ports (--cluster-port) */
    int home[CTOPO_MASTERS][2]; /* first and last slot of each shard */
    pid_t keeper;
} ctopo;

/* One line of CLUSTER NODES, as the node asked sees it. */
typedef struct {
    char id[CTOPO_ID_LEN + 1];
    char master_id[CTOPO_ID_LEN + 1]; /* "-" for a master */
    char flags[96];
    int port;
    bool myself, master, fail, pfail, handshake, noaddr, connected;
    int nslots; /* slots it serves (ranges only; open-slot entries apart) */
    int lowest; /* its lowest slot, or -1 */
    int nopen;       /* [slot->-id] / [slot-<-id] entries (myself only): */
    int open[8];     /* their slots (the first 8) */
} ctopo_node;

typedef struct {
    int n;
    ctopo_node node[2 * CTOPO_NODES]; /* strangers would show up too */
} ctopo_view;

/* Fills t from the environment. */
int ctopo_load(ctopo *t, char *err, size_t errlen);
/* Index of a client port in t->port, or -1. */
int ctopo_index(const ctopo *t, int port);

/* Start the node on port (which is one of t's) with its cluster config
 * file as it is (a new node when there is none; a node that rejoins with
 * its identity otherwise) and no data (its dump file is deleted first);
 * waits (10 s) until it answers PING. Returns its pid. */
pid_t ctopo_start_node(const ctopo *t, int port, char *err, size_t errlen);
/* The running process of a node (per its pid file, checked to be a live
 * child of the keeper serving that port), or 0. */
pid_t ctopo_node_pid(const ctopo *t, int port);
/* Processes: rproc_alive, rproc_stopped, rproc_stop (tests/common/rproc.h). */

/* CLUSTER NODES of the node on port, parsed; -1 if it does not answer. */
int ctopo_view_of(int port, ctopo_view *v);
const ctopo_node *ctopo_view_port(const ctopo_view *v, int port);
const ctopo_node *ctopo_view_id(const ctopo_view *v, const char *id);
const ctopo_node *ctopo_view_myself(const ctopo_view *v);
/* CLUSTER SLOTS of the node on port as the master port of each slot (0:
 * unassigned); -1 if it does not answer. */
int ctopo_slot_map(int port, uint16_t owner[SLOT_COUNT]);

/* FLUSHALL on every running node that takes it (replicas refuse it): no
 * data, and a replication stream that moved. Redis 7.0 lists a replica in
 * CLUSTER SLOTS only once its replication offset is above 0, which without
 * writes takes until the master's next replication ping (10 s). */
void ctopo_flush(const ctopo *t);

/* 0 when the cluster is healthy: every node runs and says
 * cluster_state:ok with all 16384 slots ok, 6 known nodes and 3 masters;
 * all nodes give the same CLUSTER SLOTS, which covers every slot with
 * three masters of ours and exactly one replica each; no node sees another
 * as failing, in handshake or disconnected, nor has an open (migrating or
 * importing) slot; each master says role:master and each replica
 * role:slave of its master with master_link_status:up. Else -1 and the
 * first thing found wrong in why. */
int ctopo_healthy(const ctopo *t, char *why, size_t whylen);
/* A line on each node for a failure message. */
void ctopo_describe(const ctopo *t, char *out, size_t outlen);

void ctopo_path(const ctopo *t, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
