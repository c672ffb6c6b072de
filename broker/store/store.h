/*
 * store.h - the seam between what a lock does (locks/) and where its data
 * lives: Redis. Everything locks/ asks of Redis goes through here:
 *
 *   - "run this script on the keys of lock N": store_eval_lock, a call
 *     built with lockscript.h (the lock's keys, the context, the
 *     arguments); the backend picks the connection. Commands of one lock keep their
 *     order; a repeatable one may be sent again after a lost reply
 *     (retry_until), and store_replayed() says so in its callback.
 *   - "run this script on key K" (a key that is no lock's: a detached
 *     lease's pointer, the broker's canary): store_eval_key.
 *   - "wake-ups for lock N arrive here": events.on_wake(N) for each
 *     message on this broker's inbox; events.on_rewatch when messages may
 *     have been missed (the inbox was down).
 *   - "is Redis up, did it lose data": store_up(); events.on_up when it
 *     comes up; events.on_data_loss when it may have lost data (a new
 *     run_id on reconnect, or the canary key, checked every
 *     --canary-interval-ms).
 *   - "renew these leases": each renewal is a call on its lock; calls
 *     that go out in one loop turn leave on their connections together.
 *   - batches: the calls one Redis connection gets in one loop turn leave
 *     at store_flush as one script call (lua/batch.lua runs them in order,
 *     each as alone; --redis-batch-max), each answered, resent and failed
 *     as it would be alone (rpool_cmd.c). Per connection with single and
 *     sentinel, per master connection with redlock. cluster: per master
 *     connection too, across the slots of that master
 *     (lua/batch_slots.lua: allow-cross-slot-keys, no key declared, since
 *     declared keys of two slots are CROSSSLOT even with the flag). Each
 *     call is first checked against the slots the node serves now (one
 *     EXISTS of its keys); a call whose slot moved, is on the move or is
 *     down runs nowhere in the batch and goes again alone, to hear MOVED,
 *     ASK, TRYAGAIN or CLUSTERDOWN (cluster.c). The price during a slot
 *     move: one more round trip for the calls of that slot. locks/ knows
 *     nothing of it.
 *
 * Backends behind this header (seam.c picks one by the URL's kind and
 * passes every call to it: backend.h):
 *   single    (single.c) one Redis (redis:// or unix://), a pool of
 *             connections chosen by a hash of the lock name (rpool.c), the
 *             script cache, one inbox subscription, the canary.
 *   sentinel  (single.c with sentinel.c naming its target; sentinel://):
 *             the same pool, connected to the master that Sentinel names;
 *             +switch-master, a lost connection or a READONLY reply asks
 *             again; a new master closes the pool until every lease is
 *             checked (on_data_loss "failover"), and --redis-wait-replicas
 *             puts WAIT behind each call that grants.
 *   cluster   (cluster.c; cluster://) a pool per master of the slot map
 *             (cluster_topo.c follows it); a lock's call goes to the master
 *             of its key slot (every key of a lock shares the hash tag
 *             {N}), with MOVED/ASK/TRYAGAIN/CLUSTERDOWN handled there; a
 *             master that took over is checked as after a Sentinel
 *             failover; a canary per master. store_up: some master is up;
 *             a call for a master that is down fails alone (unavailable).
 *             Wake-ups: one inbox subscription per master on the same
 *             channel; the broker takes a wake only from the master that
 *             owns the lock's slot (cluster.c says why not sharded
 *             pub/sub).
 *   redlock   (redlock.c; --redlock) every call on N independent
 *             masters at once, the replies merged by the backend (a
 *             grant: a majority within the validity time, its fence
 *             written on a majority first); store_up when a majority is.
 *
 * Callbacks: fn(reply, priv) runs exactly once per accepted call; reply is
 * NULL when there is none (store_reply_failed says so for errors too), and
 * valid during the callback only.
 */
#ifndef LB_BROKER_STORE_STORE_H
#define LB_BROKER_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "broker/base/settings.h"
#include "broker/store/scripts.h"

typedef void (*store_fn)(const redisReply *reply, void *priv);

/* A lock script's fence floor is sent as this many digits (leading zeros),
 * so the store can write the newest floor into it at every send. */
#define STORE_FLOOR_DIGITS 20

/* The `why` of on_data_loss after a failover to another master, and after
 * a reconnect that found another run_id (Redis restarted: empty, or from
 * an older snapshot). After either, the store serves nothing but the
 * check of every lease (watchdog_verify_all) until store_loss_checked:
 * the check replays what Redis missed before any other call runs there. */
#define STORE_LOSS_FAILOVER "failover"
#define STORE_LOSS_RESTART "redis restarted"

typedef struct store_events {
	void (*on_up)(void);                         /* Redis became reachable */
	void (*on_data_loss)(const char *why);       /* Redis may have lost data */
	void (*on_wake)(const char *lock, size_t len); /* a wake-up for a lock */
	void (*on_rewatch)(void);                    /* wake-ups may have been lost */
} store_events_t;

/* Connects to the Redis of cfg (which must outlive the store) and starts
 * the checks; the events run as they happen. */
void store_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events);
/* Stops: pending calls still get their replies (or NULL); nothing new. */
void store_close(void);
/* Frees what the store keeps after it closed (at exit). */
void store_free(void);

/* The check that on_data_loss(STORE_LOSS_FAILOVER) started (every lease
 * asked about on the new master) is over: the store serves again. Any
 * other time: nothing. */
void store_loss_checked(void);
/* True when a call can go out now. */
bool store_up(void);
/* Calls accepted and not yet answered. */
size_t store_pending(void);
/* True while a callback runs for a call that went out more than once
 * because a reply was lost: an earlier copy may have run. */
bool store_replayed(void);

/* Redlock, while an inspect's callback runs: what each master showed, in
 * store_masters' order: 1 a holder, 0 none, -1 no answer; returns how
 * many masters (at most max filled). 0 in other modes and at other times. */
size_t store_inspect_masters(int *holds, size_t max);
/* The channel a lock script publishes a watched lock's changes on for
 * this broker to hear them (see 'W' in lua/lib/prelude.lua): its inbox, or
 * with --redlock the channel every Redlock broker hears on every master.
 * Its messages reach events.on_wake as "\1" NAME. */
const char *store_notice_channel(void);
/* "single", "sentinel", "cluster" or "redlock": how locks are kept. */
const char *store_mode(void);
/* What the store can serve, the way locks/ needs to know it: locks/ picks
 * its waiting strategy, the modes it takes and its renewals by these,
 * never by the store's name (tests/deps_check.sh forbids store names in
 * locks/).
 *
 * wait: how waiters wait.
 *   STORE_WAIT_QUEUED  in a queue in Redis (wait '1' in lua/acquire.lua),
 *                      first come first served across every broker; each
 *                      lock's heartbeats keep this broker's waiters there
 *                      and take their grants; a wake for a lock with no
 *                      waiter here drops this broker's orphans there.
 *                      single, sentinel, cluster.
 *   STORE_WAIT_ROUNDS  nothing of a waiter stays in Redis: each acquire is
 *                      a round of its own (wait 'r', a try 'R') that the
 *                      store merges from independent nodes, one round per
 *                      lock at a time from this broker, each round with a
 *                      new token (what a lost round left is given back by
 *                      token); the next round goes on a wake that a release
 *                      published, at the holder's expiry, after a random
 *                      backoff when the vote split. redlock.
 * exclusive_only: NULL when every mode is served; else why only exclusive
 *   locks are (the message of invalid_argument for shared and limit).
 * retake: a renewal or check that finds its lease gone on a node where the
 *   lock is free takes it again there (the lease is the same everywhere
 *   else; retake_solo in lua/lib/prelude.lua): nodes that restart empty
 *   each count in a quorum. redlock. */
typedef enum store_wait {
	STORE_WAIT_QUEUED,
	STORE_WAIT_ROUNDS,
} store_wait_t;

typedef struct store_caps {
	store_wait_t wait;
	const char *exclusive_only;
	bool retake;
} store_caps_t;

const store_caps_t *store_caps(void);

/* False while a callback runs for a lock's call whose writes
 * --redis-wait-replicas replicas did not acknowledge within
 * --redis-wait-ms (WAIT behind it on its connection): the call ran on the
 * master, and a failover may lose what it did. Redis Cluster: false too
 * for a reply from a master that left the slot map meanwhile (a failover
 * demoted it; its pool waits for its last replies): what it did there is
 * not on the master that serves the slot now. True otherwise, and always
 * without the flag. */
bool store_replicated(void);

/* A script on the keys of the lock named lock: argv holds nkeys keys, then
 * the script's args (all copied; lockscript.h builds them). The backend
 * picks where it runs: single, the connection that serves the lock's name,
 * so the calls of one lock keep their order. retry_until: 0, or the moment
 * until which a call whose reply was lost is sent again (only for calls
 * the script takes a repeat of as a repeat). Returns 0 when accepted (fn
 * will run), -1 when not (fn will not). */
int store_eval_lock(const char *lock, size_t lock_len, script_id_t script, int nkeys, int argc,
                    const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                    uint64_t retry_until, uint64_t deadline, int floor_arg, bool unwaited);

/* deadline (store_eval_lock; 0: none): until when the call is worth
 * waiting for the store to settle. Redis Cluster: a call that meets MOVED,
 * ASK, TRYAGAIN or CLUSTERDOWN (a slot on the move, a failover) is tried
 * again until the later of deadline, retry_until and a short least budget,
 * then fails (unavailable): a renewal is worth it until its lease ends
 * here, a heartbeat until its waiters' deadline. */

/* unwaited (store_eval_lock): no WAIT behind the call even with
 * --redis-wait-replicas, so it never holds a connection for WAIT; its
 * callback then hears store_replicated() false, and a grant in its reply
 * is given back. For writes whose own effect needs no replica (a release
 * sent again after a failover). */

/* One master the store serves from: Redis Cluster's masters, in the
 * order of their lowest slot (none outside a cluster). */
typedef struct store_master {
	char addr[URL_HOST_MAX + 8]; /* host:port, or the Unix socket's path */
	bool up;                     /* a call can go out to it now */
	int slots;                   /* Redis Cluster: the slots it serves; else 0 */
	size_t pending;              /* calls sent to it, not yet answered */
	uint64_t redirects;          /* MOVED and ASK replies it gave */
} store_master_t;

/* Fills up to max masters; returns how many there are (may exceed max).
 * Stats and metrics show at most STORE_MASTERS_SHOWN. */
#define STORE_MASTERS_SHOWN 64
size_t store_masters(store_master_t *out, size_t max);

/* A script on one key that is no lock's, with args after the key (copied);
 * the key's hash tag ({...}, as Redis Cluster reads it) picks where it runs.
 * retry_until as for a lock's call (lockscript.h). Returns 0 when
 * accepted (fn will run), -1 when not. */
int store_eval_key(const char *key, size_t key_len, script_id_t script, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until);
/* The same with more keys: argv[0..nmore-1] are keys too (in the same
 * hash tag as key, so they go where it goes), the script's args follow. */
int store_eval_keys(const char *key, size_t key_len, int nmore, script_id_t script, int argc,
                    const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                    uint64_t retry_until);

/* Sends the calls this loop turn made (they may go as batches: rpool.h's
 * batch_max). The broker calls it once the turn's callbacks ran, before
 * the loop blocks again; locks/ never does. */
void store_flush(void);
/* True when calls wait for store_flush. */
bool store_flush_pending(void);

/* NULL or an error reply. */
static inline bool store_reply_failed(const redisReply *r)
{
	return r == NULL || r->type == REDIS_REPLY_ERROR;
}

#endif
