/*
 * cl: the Redis Cluster of cluster_tests, as tests see it.
 *
 * One cluster per test binary (tests/cluster/ctopo.c starts it before the
 * first test and stops it after the last): six redis-server nodes on
 * 127.0.0.1 with --cluster-node-timeout 1000, three masters of 16384 / 3
 * slots each and one replica per master. Tests share it, one at a time
 * (cluster_tests runs with --jobs 1), and may break it: kill or freeze
 * nodes, pause clients, move slots. Each test starts with cl_ready(), which
 * mends what the last one left. A test declares
 *
 *     CL_TEST(suite, name, 90)
 *
 * which is Criterion's Test with .init = cl_setup (lb_setup, then
 * cl_ready) and .fini = cl_teardown, so the integration harness (brokers,
 * clients: tests/integration/harness.h) works as in LB_TEST. A broker on
 * the cluster: lb_broker_start_url(cl_seed_url(), NULL).
 *
 * Ownership: replies, contexts and strings handed out here belong to cl and
 * are freed by cl_teardown(); tests never free them. Call cl_* from the
 * test's own thread only.
 *
 * Ports: nodes keep their port for the whole run (a killed node comes back
 * on it, with its cluster identity); which nodes are masters changes with
 * failovers: ask cl_masters(). Masters are numbered by their lowest slot,
 * which a failover does not change (the replica takes over the ranges), so
 * cl_masters()[i] is "the shard of the i-th third of the slots" across
 * failovers, and cl_lock_name(i, ...) names a lock on it.
 */
#ifndef LB_TESTS_CLUSTER_CL_H
#define LB_TESTS_CLUSTER_CL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>

#include "broker/store/slot.h"
#include "tests/integration/harness.h"

#define CL_TEST(suite, name, secs) \
    Test(suite, name, .init = cl_setup, .fini = cl_teardown, .timeout = (secs))

#define CL_NODES 6
#define CL_MASTERS 3

/* cl_ready's bound; and how long it lets a dead master wait for its
 * replica's failover before it restarts it (empty) as the master. */
#define CL_READY_TIMEOUT_MS 45000
#define CL_READY_DEAD_MASTER_MS 15000
/* How long cl_ready lets a running node not answer PING before it kills
 * (and restarts) it. */
#define CL_READY_MUTE_MS 3000

/* ---- fixture --------------------------------------------------------------- */

void cl_setup(void);
void cl_teardown(void);

/* Brings the cluster back to healthy, or fails the test after
 * CL_READY_TIMEOUT_MS saying what each node is doing:
 * - frozen nodes continued (SIGCONT); client pauses lifted (CLIENT
 *   UNPAUSE; Redis 7.0 holds even that under CLIENT PAUSE ALL, so a node
 *   that does not answer PING for CL_READY_MUTE_MS is killed, and then
 *   handled as dead); replication cut by cl_pause_replication resumed;
 * - a dead node restarted on its port, where it rejoins from its
 *   nodes.conf without data; a dead master with a live replica is first
 *   given CL_READY_DEAD_MASTER_MS for the failover, so that it comes back
 *   as that replica's replica;
 * - open slots (a move left half done) set STABLE where they are open;
 * - nodes that do not know each other (cl_add_as_new_master left half
 *   done): an id a node knows that is no node's own is forgotten there
 *   (CLUSTER FORGET), and a node that does not know another's id meets it
 *   (CLUSTER MEET);
 * - more masters with slots than three (a node added as a master that
 *   kept slots): the slots out of their home range are moved home, as
 *   below, and the node left without slots is a spare for the next step;
 * - a master without a replica given one (CLUSTER REPLICATE of a spare
 *   node), if that does not happen by itself within 3 s.
 * Healthy is ctopo_healthy() (ctopo.h): every node says cluster_state:ok,
 * all agree on a map of the 16384 slots over three masters with one
 * replica each, in sync, and no node sees another failing. Then it
 * flushes every master, moves back any slot that a test moved out of its
 * shard's range (the ranges at the cluster's creation) and waits for each
 * replica to acknowledge (WAIT), so a test starts empty on the same
 * layout. Which node of a shard is master is not restored. */
void cl_ready(void);

/* ---- where things are --------------------------------------------------------- */

/* "cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3": the seed nodes, the
 * first masters (any node serves as a seed after failovers). */
const char *cl_seed_url(void);
/* "redis://127.0.0.1:PORT". */
const char *cl_node_url(int port);
int cl_node_port(int i); /* i = 0..5; 0..2 were the first masters */
const char *cl_dir(void);
/* Running process, or 0. */
pid_t cl_node_pid(int port);

/* The current masters' ports, ordered by their lowest slot, per the slot
 * map of the first live node that answers. Fails the test unless that map
 * has three masters. */
void cl_masters(int out[CL_MASTERS]);
/* The master serving slot, as the first live node that answers says. */
int cl_master_of_slot(int slot);
/* A live replica of master_port (per CLUSTER NODES); fails if none. */
int cl_replica_of(int master_port);
/* The k-th (k = 0, 1, ...) name "clk-N", N counting from 0, whose slot
 * (slot_of_key of the name: a lock's keys are PREFIX{NAME}...) is served by
 * cl_masters()[master_index], written to out. Returns its slot. The same
 * names on the same layout, which cl_ready restores. */
int cl_lock_name(int master_index, int k, char *out, size_t len);
/* Slot of a lock name (slot_of_key of the name). */
int cl_slot_of(const char *name);
/* n lock names (prefix followed by a number, from 0 up) whose slot is
 * slot, written to out. */
void cl_names_in_slot(int slot, const char *prefix, int n, char out[][32]);
/* What each node says, one line each (for failure messages). */
const char *cl_describe(void);

/* ---- talking to them ----------------------------------------------------------- */

/* A command on a kept sync connection to the node (remade when the node
 * was restarted or the connection broke). Fails the test if it cannot
 * connect or the command gets no reply (10 s); error replies (MOVED, ASK,
 * ...) are returned. */
redisReply *cl_node_cmd(int port, const char *fmt, ...);
/* The same with argv (binary-safe keys). */
redisReply *cl_node_cmd_argv(int port, int argc, const char **argv);
/* A command on a new connection with timeout_ms for connect and reply;
 * NULL when the node is unreachable or does not answer in time (frozen,
 * paused). */
redisReply *cl_node_try_cmd(int port, int timeout_ms, const char *fmt, ...);
/* The lock's header key (lb:{NAME}: its fence; every lock the broker
 * ever granted has one) on the node: 1 or 0, as EXISTS says. Fails on an
 * error reply (MOVED: the slot is not that node's). */
long long cl_lock_exists(int port, const char *name);
/* INFO replication's role ("master", "slave") of a node. */
const char *cl_node_role(int port);
/* CLUSTER INFO's cluster_state of a node ("ok", "fail"). */
const char *cl_node_state(int port);

/* ---- breaking them --------------------------------------------------------------- */

/* SIGKILL a node; returns once it is gone. */
void cl_kill_node(int port);
/* Start a node that is down, on its port, with its nodes.conf, empty. */
void cl_start_node(int port);
/* SIGSTOP a running node (cl's connection to it dropped first, so that
 * no cl_* call then waits on it); cl_thaw_node sends SIGCONT. cl_ready
 * thaws whatever a test left frozen. */
void cl_freeze_node(int port);
void cl_thaw_node(int port);
/* Makes the replica on replica_port miss every write from now on, and stay
 * a replica of the same master in everybody's eyes (as tests/ha's
 * ha_pause_replication): its link to the master is cut and it cannot log
 * in again (CONFIG SET masteruser/masterauth to an unknown user, CLIENT
 * KILL TYPE master). Returns once INFO says master_link_status:down. Its
 * master killed, the cluster promotes it without those writes (the nodes
 * run with cluster-replica-validity-factor 0: a replica takes over however
 * old its data). CONFIG SET masteruser "" masterauth "" undoes it (the
 * replica logs in again within a second); so does cl_ready, on every node. */
void cl_pause_replication(int replica_port);
/* Waits until a node that was a replica of old_master_port (per the live
 * nodes, at the call) serves what was old_master_port's lowest slot, no
 * live node names old_master_port as the owner of a slot, and every live
 * node (running, not frozen) says cluster_state:ok. Returns the ms since
 * the call; cl_wait_failover fails the test after timeout_ms, showing what
 * each node says, and cl_try_wait_failover returns -1. If the failover was
 * over before the call, only the last two are waited for. */
int64_t cl_wait_failover(int old_master_port, int timeout_ms);
int64_t cl_try_wait_failover(int old_master_port, int timeout_ms);

/* Moves slot to the master on to_master_port by hand, as redis-cli
 * --cluster reshard does: CLUSTER SETSLOT IMPORTING on the target,
 * MIGRATING on the source, MIGRATE of every key of the slot (CLUSTER
 * GETKEYSINSLOT, 100 at a time), then CLUSTER SETSLOT NODE on the target,
 * the source and the other masters. Returns (the ms it took) once every
 * node names the target for the slot and none has it open. A no-op (0) if
 * the target has it already. Fails the test on any error reply, but one:
 * a source that gave its last slot may have heard of it by gossip before
 * its own SETSLOT and turned into the target's replica (Redis 7 does
 * that), and then answers that SETSLOT is for masters only. */
int64_t cl_move_slot(int slot, int to_master_port);
/* The same in steps, to hold a slot in the middle of its move (clients
 * then get ASK): begin sets IMPORTING / MIGRATING and returns the source;
 * keys MIGRATEs up to max_keys keys (all when max_keys < 0) and returns
 * how many; end migrates what is left, assigns the slot and waits as
 * above. One move at a time; cl_ready sets a move left open STABLE (the
 * source keeps the slot). */
int cl_move_slot_begin(int slot, int to_master_port);
int cl_move_slot_keys(int slot, int max_keys);
void cl_move_slot_end(int slot);

/* ---- adding and removing a node ------------------------------------------------ */

/* Makes the node on port (a replica, or a master without slots) look like
 * a node just added to the cluster: CLUSTER FORGET of it on every other
 * node (Redis bans a forgotten id from gossip for 60 s; all are sent
 * within a second, a replica's own master takes it too), CLUSTER RESET
 * HARD on it (a master again, with a new id and no data), CLUSTER MEET
 * from it to each other node. Returns (the ms it took) once every node
 * knows its new id, connected, as a master without slots, and every node
 * says cluster_state:ok. A master it replicated is left without a replica
 * (cl_make_replica gives it back; cl_ready would). Fails the test on any
 * error reply. While it then serves slots the cluster has four masters:
 * cl_masters, cl_lock_name and cl_expect_three_masters fail until they
 * are moved away. */
int64_t cl_add_as_new_master(int port);
/* Makes the master on port, which has neither slots nor keys, a replica
 * of the master on master_port (CLUSTER REPLICATE; fine if it is one
 * already: Redis 7 turns a master that gives away its last slot, by its
 * own CLUSTER SETSLOT NODE or by gossip, into a replica of the slot's new
 * owner, so after cl_move_slot of a node's only slot it is one). Returns
 * (the ms it took) once every node sees it as that master's replica and it
 * is in sync (master_link_status:up). */
int64_t cl_make_replica(int port, int master_port);

/* ---- the broker's view: stats ------------------------------------------------- */

/* The entry of stats' redis_masters whose addr is 127.0.0.1:port, or
 * NULL; fails if st has no redis_masters. */
json_t *cl_stats_master(json_t *st, int port);
/* The sum of the redirects of stats' redis_masters. */
json_int_t cl_stats_redirects(json_t *st);
/* stats of c's broker, asserting it names the cluster's three masters
 * (cl_masters), each up, whose slots add up to 16384. */
json_t *cl_expect_three_masters(lb_client *c);

#endif
