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
/* Twice Sentinel's ping period (SENTINEL_PING_PERIOD, 1 s), not equal to
 * it. On +switch-master a sentinel drops its links to the master and
 * counts the new master's first PING as sent at that moment, but it opens
 * a link at most once per ping period: the link to the killed master was
 * retried up to 1 s before, so the first PONG of the new master may come
 * 1 s + a timer tick after the switch (Redis's sentinel.c:
 * sentinelResetMaster, sentinelReconnectInstance). With down-after-milliseconds 1000
 * a sentinel took the new master for down after about one switch in five
 * (23 of 113 in ten runs under load; its log: +sdown 1000-1050 ms after
 * its +switch-master, -sdown some 70 ms later), and the stale master_down
 * flags of its peers (topo_healthy) made that an odown and a failover at
 * once: back to the old master when it ran again (3 of the 23), else
 * -failover-abort-no-good-slave, which held the next real failover back
 * by 2 * failover-timeout. 2000 leaves a second for the reconnect;
 * failovers take about a second longer. */
#define TOPO_DOWN_AFTER_MS 2000
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

/* What the sentinels agree on when the topology is healthy. */
typedef struct {
    int master;      /* its port */
    long long epoch; /* SENTINEL master's config-epoch, the same at every sentinel */
} topo_view;

/* 0 and the view in *v when the topology is healthy: the sentinels agree
 * on a master that says role:master, with the same config-epoch; the other
 * node is its replica with the link up; every sentinel is out of TILT and
 * sees the master (flags "master": no s_down, o_down, disconnected or
 * failover_in_progress; role-reported master; no PING unanswered for half
 * of down-after-milliseconds), that replica (flags "slave") and the two
 * other sentinels (flags "sentinel": none left with a master_down answer
 * of the last failover). Else -1 and the first thing found wrong in why.
 * A moment's snapshot: ha_ready wants it to hold for a while. */
int topo_healthy(const topo *t, topo_view *v, char *why, size_t whylen);
/* A few lines on each process for a failure message. */
void topo_describe(const topo *t, char *out, size_t outlen);

void topo_path(const topo *t, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
