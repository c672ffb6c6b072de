/*
 * topo: the HA topology of one ha_tests run (two redis-server nodes, three
 * sentinels; see topo.c): where it lives, how its processes are started and
 * found, and the check that it is healthy.
 *
 * Used by the runner's report hooks and by ha.c in the test workers, so
 * nothing here asserts: functions return 0 / a pid / a port, or -1 (or 0
 * for "no pid") with a message in err / why.
 *
 * The runner exports (and every test worker inherits):
 *   LB_HA_DIR           the temp dir: configs, logs, pid files, keeper.sock
 *   LB_HA_NODES         "P1,P2": the two nodes' TCP ports on 127.0.0.1
 *   LB_HA_SENTINELS     "S1,S2,S3": the sentinels' ports
 *   LB_HA_MASTER_NAME   the name the sentinels monitor
 *   LB_HA_KEEPER_PID    the keeper, parent of every node and sentinel
 *   LB_HA_ERROR         set (a message) instead when the start-up failed
 * Pids change when a test restarts a process, and a worker cannot change the
 * environment of the next ones: the pid files in LB_HA_DIR are the truth
 * (node-PORT.pid, sentinel-I.pid, I = 0..2, written by the keeper).
 */
#ifndef LB_TESTS_HA_TOPO_H
#define LB_TESTS_HA_TOPO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "tests/common/rproc.h"

#define TOPO_NODES 2
#define TOPO_SENTINELS 3
#define TOPO_MASTER_NAME "lbha"
#define TOPO_QUORUM 2
#define TOPO_DOWN_AFTER_MS 1000
#define TOPO_FAILOVER_TIMEOUT_MS 3000

typedef struct {
    char dir[PATH_MAX];
    char name[64];
    int node[TOPO_NODES];
    int sentinel[TOPO_SENTINELS];
    pid_t keeper;
} topo;

/* Fills t from the environment. */
int topo_load(topo *t, char *err, size_t errlen);
/* The node port that is not port (the other node of the two). */
int topo_other_node(const topo *t, int port);
bool topo_is_node(const topo *t, int port);

/* Start a node on port, as a replica of master_port (0: as a master), with
 * a config file written afresh and no data; waits (10 s) until it answers
 * PING. Returns its pid. */
pid_t topo_start_node(const topo *t, int port, int master_port, char *err, size_t errlen);
/* Start sentinel i with its config file (kept across restarts: the
 * sentinel rewrites it); waits until it answers PING. */
pid_t topo_start_sentinel(const topo *t, int i, char *err, size_t errlen);

/* The running process of a node / sentinel (per its pid file, checked to be
 * a live child of the keeper serving that port), or 0. */
pid_t topo_node_pid(const topo *t, int port);
pid_t topo_sentinel_pid(const topo *t, int i);
/* Processes: rproc_alive, rproc_stop (tests/common/rproc.h). */

/* Field of INFO replication (e.g. "role") into out; -1 if unreachable or
 * absent. */
int topo_info(int port, const char *field, char *out, size_t outlen);
/* The master port that sentinel i names, or -1. */
int topo_sentinel_master(const topo *t, int i);
/* Value of key in a flat key/value array reply (SENTINEL master ...), or
 * NULL. */
const char *topo_field(const redisReply *kv, const char *key);

/* 0 and the master's port in *master when the topology is healthy: the
 * sentinels agree on a master that says role:master; the other node is its
 * replica with the link up; every sentinel sees the master (flags "master"),
 * that replica (flags "slave") and the two other sentinels (flags
 * "sentinel", maybe with a stale "master_down"). Else -1 and the first thing found wrong in why. */
int topo_healthy(const topo *t, int *master, char *why, size_t whylen);
/* A few lines on each process for a failure message. */
void topo_describe(const topo *t, char *out, size_t outlen);

void topo_path(const topo *t, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
