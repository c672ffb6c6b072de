/*
 * fakeresp.h - fake Redis masters, Redis Cluster nodes and Redis
 * Sentinels for the integration tests, speaking RESP on loopback TCP from
 * one thread of the test process: for what a real server cannot be made
 * to say on demand (a sentinel with an old view of the master and its
 * config epoch, a deposed cluster master that still claims every slot).
 *
 * A fake Redis answers the broker's handshake as a master would (AUTH,
 * CLIENT SETNAME, ROLE, SELECT, INFO server with a run_id of its own,
 * SCRIPT LOAD with a 40-hex sha, SUBSCRIBE of the inbox, PING) and every
 * EVALSHA with :1 (the broker's canary takes that as "my value is
 * there"; a lock script does not, so a lock served from a fake fails).
 * Given a cluster view (fr_cluster_view) it also answers CLUSTER INFO,
 * CLUSTER SLOTS and CLUSTER NODES: every slot served by one master.
 *
 * A fake sentinel answers SENTINEL MASTER NAME (a flat field/value array
 * with "ip", "port", "config-epoch", ...) and the older SENTINEL
 * get-master-addr-by-name NAME with the same view (fr_sentinel_view), and
 * confirms SUBSCRIBE (+switch-master) without ever publishing.
 *
 * Every server counts the commands it was sent (fr_count) and the
 * connections that named themselves (CLIENT SETNAME) with a prefix
 * (fr_named_conns): the broker's pool connections are "lockbroker-ID:k"
 * and "lockbroker-ID:inbox"; its sentinel and cluster-topology questions
 * come on connections without a name.
 *
 * Use: fr_add each server, fr_start, then change views and fr_set_down
 * at will (they take effect before the next command is answered); end
 * with fr_stop after the brokers are stopped (lb_teardown first: the
 * brokers close their connections while the fakes still answer), e.g. in
 * the test's .fini. One set of fakes per test process (Criterion runs
 * each test in a worker of its own); every function is called from the
 * test's thread.
 */
#ifndef LB_TESTS_INTEGRATION_FAKERESP_H
#define LB_TESTS_INTEGRATION_FAKERESP_H

#include <stdbool.h>

#define FR_SERVERS_MAX 8

typedef enum { FR_REDIS, FR_SENTINEL } fr_kind;

/* A server of that kind listening on a free port of 127.0.0.1, up; its
 * id. Before fr_start only. */
int fr_add(fr_kind kind);
int fr_port(int id);
/* Starts the thread that serves every server added. */
void fr_start(void);
/* Stops the thread and closes every socket; nothing when not started. */
void fr_stop(void);

/* down: the server closes every connection it has, and from then on each
 * one it accepts at once (the broker sees its questions go unanswered
 * with a lost connection); up again: it answers again. */
void fr_set_down(int id, bool down);

/* What sentinel id says of master name: at 127.0.0.1:master_port with
 * this config-epoch; master_port 0: it knows no such master. */
void fr_sentinel_view(int id, const char *name, int master_port, long long epoch);

/* Makes Redis id a cluster node: its cluster_current_epoch is
 * current_epoch, and all 16384 slots are served by the master
 * 127.0.0.1:owner_port, whose config epoch is owner_epoch (owner_port may
 * be the node's own port: a master that believes it still is one). */
void fr_cluster_view(int id, long long current_epoch, int owner_port, long long owner_epoch);

/* The commands server id was sent whose name is cmd ("EVALSHA"), or
 * whose name and first argument are cmd ("CLUSTER NODES"), ignoring case. */
int fr_count(int id, const char *cmd);
/* The connections to server id that named themselves with a name that
 * starts with prefix, since it was added (closed ones too). */
int fr_named_conns(int id, const char *prefix);

#endif
