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
 *     run_id on reconnect, or the canary key, checked once a second).
 *   - "renew these leases": each renewal is a call on its lock; calls
 *     that go out in one loop turn leave on their connections together
 *     (pipelined), so the renewals of one connection travel in one batch.
 *
 * Backends behind this header (single.c implements every function; the
 * Sentinel mode is single.c with sentinel.c naming its target):
 *   single    one Redis (redis:// or unix://), a pool of connections
 *             chosen by a hash of the lock name (rpool.c), the script
 *             cache, one inbox subscription, the canary.
 *   sentinel  built (sentinel://): the same pool, connected to the master
 *             that Sentinel names; +switch-master, a lost connection or a
 *             READONLY reply asks again; a new master closes the pool
 *             until every lease is checked (on_data_loss "failover"), and
 *             --redis-wait-replicas puts WAIT behind each call that grants.
 *   cluster   (issue 17; built so far: rpool_t instances, slot.h,
 *             cluster_map.h) a pool per master; a lock's call goes to the
 *             master of its key slot (every key of a lock shares the hash
 *             tag {N}), with MOVED/ASK/TRYAGAIN handled in the backend;
 *             one canary per master, on_data_loss for each (the check of
 *             every lease it starts is wider than needed, never narrower).
 *             store_up: every slot has a reachable master; a per-lock form
 *             (is N's master up) joins it then, so one master down fails
 *             only its locks.
 *             Wake-ups: the per-broker inbox (classic PUBLISH) does not
 *             carry over. A script may PUBLISH in a cluster and the bus
 *             broadcasts it to every node, but PUBLISH then counts only
 *             the receivers on the node that ran it, and promote relies on
 *             that count to find a deaf broker (a broker subscribed on
 *             another node would look deaf and lose its waiters); and
 *             every wake would cross the whole bus. So: sharded pub/sub
 *             (Redis 7). A script SPUBLISHes the wake on PREFIX{N}:w:BROKER,
 *             in N's own slot (a script may only touch its keys' slot),
 *             and SPUBLISH counts that broker's subscription exactly. A
 *             broker SSUBSCRIBEs to that channel for each lock it has
 *             local waiters on, on one subscriber connection per master,
 *             and SUNSUBSCRIBEs when the last one leaves. No subscription
 *             per waiter and no polling. Redis drops the subscription when
 *             the slot moves (-sunsubscribe): the broker subscribes again
 *             where the map now says. A wake lost meanwhile is covered as
 *             today: on (re)subscribe the lock's waiters heartbeat. Single
 *             and sentinel modes keep the inbox: it works on Redis 6,
 *             which they support, and it is measured; SSUBSCRIBE per lock
 *             would add a subscribe round trip to a lock's first waiter.
 *   redlock   every call on N independent masters, the reply merged by the
 *             backend (a majority within the validity time, fences as
 *             max + 1); store_up when a majority is.
 * Each is a sibling of rpool.c behind this interface: an addition, not a
 * rewrite of locks/.
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

/* The `why` of on_data_loss after a failover to another master. */
#define STORE_LOSS_FAILOVER "failover"

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

/* False while a callback runs for a lock's call whose writes
 * --redis-wait-replicas replicas did not acknowledge within
 * --redis-wait-ms (WAIT behind it on its connection): the call ran on the
 * master, and a failover may lose what it did. True otherwise, and always
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
                    uint64_t retry_until, int floor_arg, bool unwaited);

/* unwaited (store_eval_lock): no WAIT behind the call even with
 * --redis-wait-replicas, so it never holds a connection for WAIT; its
 * callback then hears store_replicated() false, and a grant in its reply
 * is given back. For writes whose own effect needs no replica (a release
 * sent again after a failover). */

/* A script on one key that is no lock's, with args after the key (copied);
 * the key's hash tag ({...}, as Redis Cluster reads it) picks where it runs.
 * retry_until as for a lock's call (lockscript.h). Returns 0 when
 * accepted (fn will run), -1 when not. */
int store_eval_key(const char *key, size_t key_len, script_id_t script, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until);

/* NULL or an error reply. */
static inline bool store_reply_failed(const redisReply *r)
{
	return r == NULL || r->type == REDIS_REPLY_ERROR;
}

#endif
