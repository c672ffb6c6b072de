/*
 * ha: the Redis Sentinel set of ha_tests, as tests see it.
 *
 * One topology per test binary (tests/ha/topo.c starts it before the first
 * test and stops it after the last): two redis-server nodes on 127.0.0.1,
 * one master and one replica, and three sentinels (quorum 2,
 * down-after-milliseconds 2000, failover-timeout 3000: topo.h says why)
 * monitoring ha_master_name(). Tests share it, one at a time (ha_tests
 * runs with --jobs 1), and may break it: kill the master, stop sentinels, cut
 * replication. Each test starts with ha_ready(), which mends what the last
 * one left. A test declares
 *
 *     HA_TEST(suite, name, 90)
 *
 * which is Criterion's Test with .init = ha_setup (lb_setup, then
 * ha_ready) and .fini = ha_teardown, so the integration harness (brokers,
 * clients: tests/integration/harness.h) works as in LB_TEST. A broker on the
 * sentinels: lb_broker_start_url(ha_sentinel_url(NULL), NULL).
 *
 * Ownership: replies, contexts and strings handed out here belong to ha and
 * are freed by ha_teardown(); tests never free them.
 *
 * Ports: nodes keep their port for the whole run (a killed node comes back
 * on it); which one is master changes with failovers: ask ha_master_port().
 */
#ifndef LB_TESTS_HA_HA_H
#define LB_TESTS_HA_HA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>

#include "tests/integration/harness.h"

#define HA_TEST(suite, name, secs) \
    Test(suite, name, .init = ha_setup, .fini = ha_teardown, .timeout = (secs))

/* ha_ready's bound; how long the topology must stay healthy, on the same
 * master and config-epoch, before ha_ready returns; and how long it lets a
 * dead master wait for a failover before it restarts it (empty) as the
 * master. */
#define HA_READY_TIMEOUT_MS 30000
#define HA_READY_QUIET_MS 1500
#define HA_READY_DEAD_MASTER_MS 15000

/* ---- fixture --------------------------------------------------------------- */

void ha_setup(void);
void ha_teardown(void);

/* Brings the topology back to a healthy, stable master, or fails the
 * test after HA_READY_TIMEOUT_MS saying what is wrong: every sentinel
 * running (a stopped one restarted with its config file) and none frozen;
 * both nodes running (a dead one restarted on its port, empty, as a
 * replica of the master the sentinels name; a dead master is first given
 * time for the sentinels' failover); the paused replication resumed, client
 * pauses lifted. Healthy (topo_healthy): the sentinels agree on the master,
 * which says role:master, with the same config-epoch; the other node says
 * role:slave of it with master_link_status:up; every sentinel is out of
 * TILT and shows the master (flags "master": no failover in progress, no
 * s_down, its links made again after the last switch; its PINGs answered),
 * the replica (flags "slave") and its two peers up (flags "sentinel": the
 * master_down answers of the last failover gone, about 5 s after it).
 * Stable: healthy at every look (each 50 ms) for HA_READY_QUIET_MS, on
 * the same master and config-epoch; a master that moves meanwhile (the
 * sentinels failing over again) starts the wait anew and is logged. Then
 * it flushes the master and waits for the replica to acknowledge (WAIT),
 * so a test starts empty. */
void ha_ready(void);

/* ---- where things are --------------------------------------------------------- */

/* The master as the sentinels name it (the first that answers). */
int ha_master_port(void);
/* The node that is not ha_master_port(). */
int ha_replica_port(void);
int ha_node_port(int i);     /* i = 0, 1 */
int ha_sentinel_port(int i); /* i = 0, 1, 2 */
const char *ha_master_name(void);
const char *ha_dir(void);
/* "sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/NAME"; NAME is the
 * monitored name when master_name is NULL. */
const char *ha_sentinel_url(const char *master_name);
/* "redis://127.0.0.1:PORT". */
const char *ha_node_url(int port);
/* Running process, or 0. */
pid_t ha_node_pid(int port);
pid_t ha_sentinel_pid(int i);

/* ---- talking to them ----------------------------------------------------------- */

/* A sync hiredis connection to a node (kept; made anew when the node was
 * restarted or the connection broke). Fails the test if it cannot connect. */
redisContext *ha_node_ctx(int port);
/* A command on it; fails the test if the connection fails (not on an error
 * reply). */
redisReply *ha_node_cmd(int port, const char *fmt, ...);
redisReply *ha_sentinel_cmd(int i, const char *fmt, ...);
/* INFO replication's role ("master", "slave") of a node. */
const char *ha_node_role(int port);
bool ha_node_has_key(int port, const char *key);

/* ---- breaking them --------------------------------------------------------------- */

/* SIGKILL a node; returns once it is gone. */
void ha_kill_node(int port);
/* Start a node that is down, on its port, empty: a replica of the master
 * the sentinels name (a master if it is that one). */
void ha_start_node(int port);
/* SIGTERM sentinel i (SIGKILL after 5 s); ha_start_sentinel starts it
 * again with its config file (a no-op if it runs). */
void ha_stop_sentinel(int i);
void ha_start_sentinel(int i);
/* Waits until every running sentinel names the same master, not
 * old_master_port, and that node says role:master. Returns the ms since the
 * call; ha_wait_failover fails the test after timeout_ms, showing what each
 * process says, and ha_try_wait_failover returns -1. */
int64_t ha_wait_failover(int old_master_port, int timeout_ms);
int64_t ha_try_wait_failover(int old_master_port, int timeout_ms);

/* Swaps master and replica by hand, the way an operator's mistake or a
 * split would: REPLICAOF NO ONE on the replica, REPLICAOF on the master
 * (Redis keeps their clients connected), then every sentinel is pointed at
 * the new master with SENTINEL REMOVE and MONITOR. No +switch-master is
 * published and no client is killed, so a broker connected to the old
 * master learns of the switch only from a READONLY reply. The replica must
 * be in sync (wait for the keys the test needs first). Returns the new
 * master's port; ha_ready later waits until the sentinels know each other
 * again. */
int ha_switch_master_quietly(void);

/* Makes the replica on replica_port miss every write from now on, and stay
 * a replica of the same master in everybody's eyes: its link to the master
 * is cut and it cannot log in again (CONFIG SET masteruser/masterauth to an
 * unknown user, CLIENT KILL TYPE master), so it retries each second and
 * fails. Returns once INFO says master_link_status:down. If the master is
 * then killed, the sentinels promote this replica without those writes
 * (they do so only if the link went down less than about
 * down-after-milliseconds * 10 = 20 s before the master failed).
 * ha_resume_replication undoes it and waits until the link is up (the
 * replica catches up); ha_ready does too. */
void ha_pause_replication(int replica_port);
void ha_resume_replication(int replica_port);

#endif
