/*
 * waitq_int.h - what the parts of the wait queue share: the waiter
 * and the wlock, the tables, and the functions each part offers the
 * others. waitq.c keeps the tables and the life of a waiter (and the API
 * of waitq.h); waitq_send.c sends acquires and withdraws and reads their
 * replies (where grants land); waitq_wake.c is the wake-up path
 * (heartbeats, inbox messages, orphans); waitq_round.c the rounds
 * strategy (below). Only these four include it.
 *
 * A waiter's state:
 *   CHAINED      behind a pending acquire of the same (session, lock,
 *                owner); nothing of it is in Redis.
 *   SENDING      its acquire script is on its way (the reply decides).
 *   QUEUED       queued in Redis; heartbeats keep it there and grant it.
 *                `unsent`: its acquire could not be sent (or Redis lost
 *                it): the next heartbeat of its lock sends it again.
 *                `held`: in its lock's held list, not sent (again) yet,
 *                because ACQUIRE_INFLIGHT_MAX acquires of the lock are on
 *                their way; each of their replies sends the oldest held
 *                one, and a failed one makes every held waiter unsent
 *                (so the next heartbeat sends them, in order, after the
 *                older ones it resends).
 *   WITHDRAWING  its withdraw script is on its way; the reply answers it.
 *   DONE         answered, but its own acquire reply is still to come.
 * A waiter is freed only when no script that carries it (acquire, withdraw)
 * is in flight, so every reply finds valid memory. `end` records why a
 * waiter stopped wanting the lock (timeout, cancel, session end, shutdown);
 * a grant that arrives after that is given back, never answered.
 *
 * How a waiter waits is the store's to say (store_caps()->wait), and one of
 * two strategies here serves it: queued (STORE_WAIT_QUEUED; the heartbeats
 * of waitq_wake.c), or rounds (STORE_WAIT_ROUNDS; waitq_round.c): nothing
 * of a waiter is queued in Redis, each acquire is a round of its own (the
 * store merges it), a waiter whose round was lost is QUEUED and `unsent`,
 * and the lock's next round goes when waitq_round.c says.
 *
 * Ownership: a waiter holds one reference on its client for its whole
 * life, plus one (counted in the client's inflight) while its acquire is
 * on its way. A wlock lives while it has waiters; heartbeat replies look it
 * up again by name.
 */
#ifndef LB_BROKER_LOCKS_WAITQ_INT_H
#define LB_BROKER_LOCKS_WAITQ_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "broker/base/htab.h"
#include "broker/base/timers.h"
#include "broker/locks/client.h"
#include "broker/locks/lease.h"
#include "broker/store/store.h"
#include "protocol/errors.h"
#include "protocol/req.h"

#define HEARTBEAT_MAX_IDS 256 /* waiter ids per heartbeat call */
/* Acquire scripts of one lock on their way from this broker at most; the
 * others wait in the broker, in order. Redis runs everything a connection
 * sent before it writes any reply or PUBLISH: a burst of acquires on one
 * lock (a batch of readers re-queueing together) made the wake-up of
 * another broker's waiter, and that broker's heartbeat, wait for all of
 * them (rw convoy at 64 clients: cross-broker handoff p99 3-4 ms). */
#define ACQUIRE_INFLIGHT_MAX 4
/* A try whose reply was lost is sent again for this long after it was
 * first sent; then (Redis stalls) it answers timeout. The command timeout:
 * a connection that stalls longer is dropped, so a lost reply is known by
 * then. */
#define TRY_RESOLVE_MS 2000

typedef enum waiter_state {
	W_CHAINED,
	W_SENDING,
	W_QUEUED,
	W_WITHDRAWING,
	W_DONE,
} waiter_state_t;

typedef enum waiter_end {
	WEND_NONE,
	WEND_TIMEOUT,
	WEND_CANCELLED,
	WEND_GONE,
	WEND_SHUTDOWN,
} waiter_end_t;

typedef struct wlock wlock_t;
typedef struct waiter waiter_t;

struct waiter {
	htab_node_t by_id;
	htab_node_t by_holder; /* leaders only: (session, lock, owner) */
	bool in_holder_index;
	char id[LEASE_TOKEN_LEN + 1];
	client_t *s;
	json_t *req_id; /* own reference, or NULL */
	wlock_t *wl;
	waiter_t *wl_prev, *wl_next;
	waiter_t *s_prev, *s_next;
	waiter_t *leader;     /* CHAINED: the acquire it waits behind */
	waiter_t *followers;  /* leader: CHAINED waiters, by chain_next */
	waiter_t *chain_next;
	waiter_state_t state;
	waiter_end_t end;
	bool unsent;
	bool held;        /* QUEUED, in wl's held list (see above) */
	bool was_sent;    /* an acquire of it went out: Redis may hold its entry */
	waiter_t *held_prev, *held_next;
	bool pending;     /* counted in waitq.pending: wants the lock, unanswered */
	bool pointer_set; /* detached: its token -> name pointer is stored */
	uint64_t pointer_at; /* when that pointer was sent */
	bool prestep;        /* its first pointer is on its way (session presteps) */
	bool granted;        /* answered with a grant (it holds the lock) */
	bool uncertain;      /* a reply of its acquire was lost: a copy may run
	                      * late; its end makes its id never granted again */
	bool confirming;     /* granted by a reply no replica acknowledged: its
	                      * lock's next heartbeat lists it, WAITed, to
	                      * confirm the grant (waitq_take_grants) */
	bool round_token_new; /* rounds: its token is new, no round sent with it yet */
	timer_ent_t deadline;
	uint64_t sent_at;
	uint64_t created_at; /* for the acquire wait-time metric */

	char *owner;
	size_t owner_len;
	char *value; /* the holder's value as Redis keeps it ('=' V), NULL: none */
	size_t value_len;
	lb_mode_t mode;
	int64_t limit;
	int64_t ttl_ms;
	int64_t max_hold_ms;
	int64_t lock_delay_ms;
	bool wait;
	bool watchdog;
	bool detach;
	bool fair;
};

struct wlock {
	htab_node_t by_name;
	uint64_t serial; /* tells this wlock from a later one of the same name */
	char *name;
	size_t len;
	waiter_t *head, *tail;
	timer_ent_t timer; /* the next heartbeat */
	unsigned hb_inflight; /* heartbeat calls on their way (one per batch) */
	unsigned acq_inflight; /* acquire scripts on their way */
	waiter_t *held_head, *held_tail; /* held waiters, oldest first */
	bool hb_again; /* woken while a heartbeat was on its way */
	uint64_t refreshed_at; /* last heartbeat that listed the waiters, 0: none */
	/* Rounds (waitq_round.c): no round before round_not_before, unless a
	 * wake comes and round_wakeable (the last round found the lock held,
	 * and a wake says it was released); round_losses: rounds lost in a row
	 * to a split vote (the backoff grows with it); round_woken: a wake
	 * came. */
	uint64_t round_not_before;
	bool round_wakeable;
	bool round_woken;
	unsigned round_losses;
	unsigned round_splits; /* rounds in a row that got a grant and lost */
};

struct waitq_state {
	htab_t by_id;
	htab_t by_holder;
	htab_t locks;
	size_t count;   /* waiters in memory, ended ones included */
	size_t pending; /* of those, the ones still wanting the lock (stats,
	                 * --max-waiters) */
	uint64_t serials; /* the last wlock serial handed out */
};

/* The tables (waitq.c). */
extern struct waitq_state waitq;

/* ---- between the parts ------------------------------------------------------ */

/* waitq.c: the tables and the life of a waiter. */
waiter_t *wq_waiter_find(const char *id, size_t len);
wlock_t *wq_wlock_find(const char *name, size_t len);
/* The next heartbeat of wl at `at`, unless one is due earlier already. */
void wq_wlock_arm(wlock_t *wl, uint64_t at);
void wq_held_unlink(waiter_t *w);
void wq_waiter_free(waiter_t *w);
/* Rounds: w takes a new token for its next round (see wq_waiter_send_now). */
void wq_waiter_new_token(waiter_t *w);
/* w is answered, but a script that carries it is still on its way: it
 * waits for that reply only, out of every index a new request looks in. */
void wq_set_done(waiter_t *w);
/* Answers w's acquire with an error, and counts it. */
void wq_answer_error(waiter_t *w, lb_err_t code, const char *message);
/* The answer of a waiter that stopped wanting the lock. */
void wq_answer_end(waiter_t *w);
/* lead's acquire came back without a grant and it waits on: a try chained
 * behind it answers now, busy. */
void wq_answer_tries_behind(waiter_t *lead);
/* w ends without a lease (answered already): the first acquire chained
 * behind it goes on as an acquire of its own. */
void wq_finish_failed(waiter_t *w);

/* waitq_send.c: acquires and withdraws on their way, and their replies. */
/* Sends w's acquire, or holds it behind the lock's other held waiters. */
void wq_waiter_send(waiter_t *w);
/* Sends w's acquire now. */
void wq_waiter_send_now(waiter_t *w);
void wq_send_withdraw(waiter_t *w);
/* Takes back whatever w may have left in Redis (a grant, a queue entry). */
void wq_withdraw_quietly(const waiter_t *w);

/* waitq_wake.c: the wake-up path. */
/* Sends the acquires that could not be sent, then a heartbeat of wl
 * (rounds: wq_round_next). */
void wq_wlock_heartbeat(wlock_t *wl);

/* waitq_round.c: the rounds strategy. */
static inline bool wq_rounds(void)
{
	return store_caps()->wait == STORE_WAIT_ROUNDS;
}
/* The next round of wl's oldest waiter, when one may go now. */
void wq_round_next(wlock_t *wl);
/* w's round was lost and w waits on; hint: ms until a quorum may be free
 * (0: it may be now, the vote split); fresh: a node that did not grant
 * has published a release since the round went out; split: the round got
 * a grant (others may have split the vote with it). */
void wq_round_lost(waiter_t *w, int64_t hint, bool fresh, bool split);
/* A waiting acquire goes when no round of its lock is on its way, no
 * older waiter waits for its round, and no backoff holds the lock back;
 * else it waits for its turn (wq_round_next). */
bool wq_round_may_send(const waiter_t *w);
/* The acquires of wl that still wait on this broker (its rounds count
 * them in Redis for inspect: lua/acquire.lua). */
size_t wq_round_waiting(const wlock_t *wl);

#endif
