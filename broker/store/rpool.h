/*
 * rpool.h - the single-Redis backend of the store (store.h): the pool of
 * async Redis connections that run the lock scripts.
 *
 * A fixed number of hiredis async connections on the broker's loop. Each
 * command goes to the connection its route (a hash of the lock name) picks,
 * so operations on one lock stay in order; when that connection is down the
 * next ready one serves. Scripts are loaded with SCRIPT LOAD on every
 * (re)connect and called with EVALSHA; after a NOSCRIPT reply the
 * connection loads every script again and sends the command once more,
 * without letting a later command of its pipeline pass it. Lost
 * connections come back with capped exponential backoff and jitter; host
 * names are resolved off the loop.
 *
 * A pool is an instance (rpool_t): single.c keeps one; a backend with
 * several servers (Redis Cluster: one per master) keeps one per server.
 * The callbacks' replayed / replicated state (rpool_replayed,
 * rpool_replicated) is the one of the delivery under way, whichever pool.
 *
 * Callbacks: fn(reply, priv) runs exactly once per accepted command. reply
 * is NULL when the command failed without an answer (connection lost and
 * not to be resent, pool closing); an error reply is passed through
 * (rpool_reply_failed says so). The reply is only valid during the
 * callback.
 */
#ifndef LB_BROKER_RPOOL_H
#define LB_BROKER_RPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "broker/store/scripts.h"
#include "broker/store/store.h"
#include "broker/base/url.h"


typedef struct rpool_state rpool_t;

/* The broker's inbox: one more connection, subscribed to one channel. */
typedef struct rpool_inbox {
	const char *channel; /* copied */
	/* A message on the channel (valid during the call); priv as given. */
	void (*on_message)(const char *msg, size_t len, void *priv);
	/* The subscription is (re)established: messages sent while it was
	 * down are lost, so whatever waits on them should look again. */
	void (*on_subscribed)(void *priv);
	void *priv;
} rpool_inbox_t;

typedef struct rpool_callbacks {
	/* The pool went from no ready command connection to one. */
	void (*on_up)(void);
	/* Redis may have lost data: a connection found another run_id than
	 * the one seen before (a restart), or the target changed with
	 * failover set (why is then STORE_LOSS_FAILOVER, and the pool stays
	 * closed until rpool_check_done: see rpool_set_target). */
	void (*on_data_loss)(const char *why);
	/* require_master only: a connection found a replica where the master
	 * should be (ROLE in the handshake, or a READONLY reply). NULL: none. */
	void (*on_not_master)(void);
	/* A command connection was lost or could not connect. NULL: none. */
	void (*on_lost)(void);
	/* Check with ROLE that the server is a master before a connection
	 * serves, and take a READONLY reply as a connection to a replica. */
	bool require_master;
	/* WAIT wait_replicas wait_ms behind every command sent with wait
	 * (0: never), on the same connection: see rpool_replicated. */
	int wait_replicas;
	int64_t wait_ms;
	/* The calls one connection gets in one loop turn leave, at
	 * rpool_flush, as one script call (lua/batch.lua) of up to this many;
	 * 0 or 1: each alone, at once. Each call of a batch is answered,
	 * sent again and failed as it would be alone (rpool_cmd.c). */
	int batch_max;
	/* Batches name the keys of several slots (a Redis Cluster master):
	 * lua/batch_slots.lua, keys passed as args, each call checked against
	 * the slots the node serves first (a call that fails that check is
	 * answered "LBSLOT ..." without having run: the caller sends it again
	 * with RP_ALONE). Needs Redis 7. */
	bool batch_slots;
} rpool_callbacks_t;

/* Starts connecting n command connections to addr (which must outlive the
 * pool; its password and db are used), plus the inbox connection when
 * inbox is not NULL. For a URL_SENTINEL addr nothing connects until
 * rpool_set_target names the master. Each connection names itself in
 * Redis (CLIENT SETNAME) name ":" its index, or name ":inbox", so CLIENT
 * LIST shows whose it is. */
rpool_t *rpool_new(uv_loop_t *loop, const redis_addr_t *addr, int n, const char *name,
                   const rpool_callbacks_t *cb, const rpool_inbox_t *inbox);
/* Frees the pool after it closed (at exit). */
void rpool_free(rpool_t *p);
/* Disconnects every connection; pending callbacks still run (with their
 * replies if Redis answers, else NULL). No reconnects after this. */
void rpool_close(rpool_t *p);
/* Points every connection at host:port (a master that Sentinel named).
 * Same as now: nothing (false). Else (true) every connection is dropped at once (lost
 * replies are resent there as for any lost connection) and reconnects to
 * the new target. With failover, the first connection ready there reports
 * on_data_loss(STORE_LOSS_FAILOVER) before anything else goes out, and
 * the pool stays closed (rpool_up false; what may wait, waits; the rest
 * is refused) but for what that callback sends, until rpool_check_done
 * (or CHECK_TIMEOUT_MS). */
bool rpool_set_target(rpool_t *p, const char *host, int port, bool failover);
/* The pool's first ready connection reports on_data_loss(STORE_LOSS_FAILOVER)
 * and the pool stays closed until rpool_check_done, as rpool_set_target
 * with failover does: for a new pool on a master that took over (Redis
 * Cluster: a replica promoted). Call before the loop runs again. */
void rpool_expect_failover(rpool_t *p);
/* Another check starts while this pool is closed for one (it supersedes
 * the first: watchdog_verify_all): the pool's CHECK_TIMEOUT_MS counts
 * again from now, so it cannot open before the newer check could end. */
void rpool_check_extend(rpool_t *pool);
/* The data-loss check that on_data_loss started is over: the pool opens. */
void rpool_check_done(rpool_t *p);
/* True once rpool_close finished: every connection is gone; only then may
 * rpool_free run before the loop ends. */
bool rpool_closed(const rpool_t *p);
/* True when at least one connection is ready for commands. */
bool rpool_up(const rpool_t *p);
/* Commands sent and not yet answered. */
size_t rpool_pending(const rpool_t *p);

/*
 * EVALSHA of a script with nkeys keys followed by the other arguments
 * (argv[0..nkeys-1] are keys). The arguments are copied. Returns 0 when the
 * command was accepted (fn will run), or -1 when it was not (fn will not
 * run): no connection is ready and retry_until is not in the future.
 *
 * wait: WAIT follows it on its connection (when wait_replicas > 0), and
 * the callback runs once WAIT answered (rpool_replicated says how).
 *
 * retry_until (uv_now ms; 0 for none): the command is idempotent. While
 * that time has not come, a reply lost with its connection (whether the
 * command ran is unknown) makes it go out again on a connection that is
 * ready, or as soon as one is; fn sees NULL only after that time. Such a
 * command is also accepted while no connection is ready.
 *
 * A verify (SCRIPT_VERIFY, a read) passes the failover gate as the
 * check's own commands do: any pass of them is part of a check.
 *
 * floor_arg: the index in argv of the fence floor (STORE_FLOOR_DIGITS
 * digits), rewritten with server.fence_high each time the command goes
 * out, so a command sent again after a failover carries every fence seen
 * since it was built; -1 for none.
 */
/* wait: RP_WAIT sends WAIT behind it (see above); RP_NO_WAIT does not (a
 * read); RP_UNACKED does not either, and its callback hears that it is not
 * acknowledged (rpool_replicated false) when the pool WAITs at all: for a
 * write that must not hold a connection for WAIT and whose grants are
 * then given back. */
enum { RP_NO_WAIT, RP_WAIT, RP_UNACKED };
/* Or'ed into wait: ASKING goes right before it on its connection, each
 * time it is sent (Redis Cluster's ASK redirect: the slot is being
 * imported there). */
#define RP_ASKING 8
/* Or'ed into wait: never in a batch (a call a batch answered LBSLOT, sent
 * again alone to hear what the cluster says of its slot). */
#define RP_ALONE 16
int rpool_eval(rpool_t *p, uint32_t route, script_id_t script, int nkeys, int argc,
               const char *const *argv, const size_t *argvlen,
               store_fn fn, void *priv, uint64_t retry_until, int wait, int floor_arg);

/* False while a callback runs for a command sent with wait whose WAIT did
 * not count wait_replicas replicas that have its writes (too few within
 * wait_ms, an error, or the connection lost before WAIT answered: the
 * command ran, its writes may be on the master alone). True otherwise. */
bool rpool_replicated(void);

/* True while a callback runs for a command that went out more than once
 * because a reply was lost: an earlier copy may have run, so a repeatable
 * script may find its own effect (a holder it released already). */
bool rpool_replayed(void);


/* Sends what the pools' connections queued in this loop turn (see
 * batch_max): the broker calls it once the turn's callbacks ran, before
 * the loop blocks again. */
void rpool_flush(void);
/* True when some pool has calls queued for rpool_flush. */
bool rpool_flush_pending(void);

/* FNV-1a of a lock name: the route of its commands. */
uint32_t rpool_route(const char *name, size_t len);

#endif
