/*
 * waitq.c - waiters and wake-ups (see waitq.h).
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
 * Ownership: a waiter holds one reference on its session for its whole
 * life, plus one (counted in the session's inflight) while its acquire is
 * on its way. A wlock lives while it has waiters; heartbeat replies look it
 * up again by name.
 */
#include "broker/locks/waitq.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/random.h"
#include "broker/base/shared.h"
#include "broker/locks/client.h"
#include "broker/locks/holderkey.h"
#include "broker/locks/lease.h"
#include "broker/locks/pointer.h"
#include "broker/locks/reentry.h"
#include "broker/locks/watchdog.h"
#include "broker/store/lockscript.h"
#include "protocol/resp.h"

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
	bool pending;     /* counted in Q.pending: wants the lock, unanswered */
	bool pointer_set; /* detached: its token -> name pointer is stored */
	uint64_t pointer_at; /* when that pointer was sent */
	bool prestep;        /* its first pointer is on its way (session presteps) */
	bool granted;        /* answered with a grant (it holds the lock) */
	timer_ent_t deadline;
	uint64_t sent_at;
	uint64_t created_at; /* for the acquire wait-time metric */

	char *owner;
	size_t owner_len;
	lb_mode_t mode;
	int64_t limit;
	int64_t ttl_ms;
	int64_t max_hold_ms;
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
};

static struct {
	htab_t by_id;
	htab_t by_holder;
	htab_t locks;
	size_t count;   /* waiters in memory, ended ones included */
	size_t pending; /* of those, the ones still wanting the lock (stats,
	                 * --max-waiters) */
	uint64_t serials; /* the last wlock serial handed out */
} Q;

static void waiter_send(waiter_t *w);
static void send_held(wlock_t *wl);
static void unhold_all(wlock_t *wl);
static void wlock_heartbeat(wlock_t *wl);

/* ---- tables -------------------------------------------------------------- */



static bool holder_match(const htab_node_t *n, const void *key)
{
	const waiter_t *w = (const waiter_t *)((const char *)n - offsetof(waiter_t, by_holder));
	const holder_key_t *k = key;

	return holder_key_equal(k, w->s, w->wl->name, w->wl->len, w->owner, w->owner_len);
}

static bool id_match(const htab_node_t *n, const void *key)
{
	const waiter_t *w = (const waiter_t *)((const char *)n - offsetof(waiter_t, by_id));
	const lb_str_t *k = key;

	return k->len == LEASE_TOKEN_LEN && memcmp(w->id, k->ptr, LEASE_TOKEN_LEN) == 0;
}

static bool name_match(const htab_node_t *n, const void *key)
{
	const wlock_t *wl = (const wlock_t *)((const char *)n - offsetof(wlock_t, by_name));
	const lb_str_t *k = key;

	return wl->len == k->len && memcmp(wl->name, k->ptr, k->len) == 0;
}

static waiter_t *waiter_find(const char *id, size_t len)
{
	lb_str_t key = {id, len};
	htab_node_t *n = htab_find(&Q.by_id, htab_hash(HTAB_HASH_INIT, id, len), id_match, &key);

	return n ? (waiter_t *)((char *)n - offsetof(waiter_t, by_id)) : NULL;
}

static wlock_t *wlock_find(const char *name, size_t len)
{
	lb_str_t key = {name, len};
	htab_node_t *n = htab_find(&Q.locks, htab_hash(HTAB_HASH_INIT, name, len), name_match, &key);

	return n ? (wlock_t *)((char *)n - offsetof(wlock_t, by_name)) : NULL;
}

static void on_wlock_timer(timer_ent_t *t)
{
	wlock_heartbeat((wlock_t *)((char *)t - offsetof(wlock_t, timer)));
}

static wlock_t *wlock_get(const char *name, size_t len)
{
	wlock_t *wl = wlock_find(name, len);

	if (wl)
		return wl;
	wl = xcalloc(1, sizeof(*wl));
	wl->serial = ++Q.serials;
	wl->name = xstrndup(name, len);
	wl->len = len;
	timer_init(&wl->timer, on_wlock_timer);
	htab_insert(&Q.locks, &wl->by_name, htab_hash(HTAB_HASH_INIT, name, len));
	return wl;
}

/* The next heartbeat at `at`, unless one is due earlier already. */
static void wlock_arm(wlock_t *wl, uint64_t at)
{
	if (!timer_active(&wl->timer) || wl->timer.node.deadline > at)
		timer_at(&wl->timer, at);
}

static void holder_index_add(waiter_t *w)
{
	holder_key_t k = {w->s, w->wl->name, w->wl->len, w->owner, w->owner_len};

	htab_insert(&Q.by_holder, &w->by_holder, holder_key_hash(&k));
	w->in_holder_index = true;
}

static void holder_index_remove(waiter_t *w)
{
	if (w->in_holder_index)
		htab_remove(&Q.by_holder, &w->by_holder);
	w->in_holder_index = false;
}

static waiter_t *leader_find(const client_t *s, const lb_str_t *lock, const lb_str_t *owner)
{
	holder_key_t k = {s, lock->ptr, lock->len, owner->ptr, owner->len};
	htab_node_t *n = htab_find(&Q.by_holder, holder_key_hash(&k), holder_match, &k);

	return n ? (waiter_t *)((char *)n - offsetof(waiter_t, by_holder)) : NULL;
}

/* ---- life of a waiter ---------------------------------------------------- */

static void on_deadline(timer_ent_t *t);

/* w no longer wants the lock (answered, ended): out of stats' count. */
static void unpend(waiter_t *w)
{
	if (w->pending) {
		Q.pending--;
		w->s->nwaiters--;
	}
	w->pending = false;
}

static waiter_t *waiter_new(client_t *s, const json_t *id, const req_acquire_t *a, int64_t ttl_ms)
{
	waiter_t *w = xcalloc(1, sizeof(*w));

	random_hex(w->id, LEASE_TOKEN_LEN / 2);
	w->created_at = timers_now();
	w->s = s;
	client_ref(s);
	w->req_id = id ? json_incref((json_t *)id) : NULL;
	w->owner = xstrndup(a->owner.ptr, a->owner.len);
	w->owner_len = a->owner.len;
	w->mode = a->mode;
	w->limit = a->limit;
	w->ttl_ms = ttl_ms;
	w->max_hold_ms = a->max_hold_ms;
	w->wait = a->wait_ms != 0;
	w->watchdog = a->watchdog;
	w->detach = a->detach;
	w->fair = a->fair;
	htab_insert(&Q.by_id, &w->by_id, htab_hash(HTAB_HASH_INIT, w->id, LEASE_TOKEN_LEN));

	w->wl = wlock_get(a->lock.ptr, a->lock.len);
	w->wl_prev = w->wl->tail;
	if (w->wl->tail)
		w->wl->tail->wl_next = w;
	else
		w->wl->head = w;
	w->wl->tail = w;

	w->s_next = s->waiters;
	if (s->waiters)
		s->waiters->s_prev = w;
	s->waiters = w;
	s->nwaiters++;
	Q.count++;
	Q.pending++;
	w->pending = true;

	timer_init(&w->deadline, on_deadline);
	if (a->wait_ms > 0)
		timer_at(&w->deadline, timers_now() + (uint64_t)a->wait_ms);
	return w;
}

static void held_unlink(waiter_t *w)
{
	wlock_t *wl = w->wl;

	if (!w->held)
		return;
	if (w->held_prev)
		w->held_prev->held_next = w->held_next;
	else
		wl->held_head = w->held_next;
	if (w->held_next)
		w->held_next->held_prev = w->held_prev;
	else
		wl->held_tail = w->held_prev;
	w->held_prev = w->held_next = NULL;
	w->held = false;
}

static void waiter_free(waiter_t *w)
{
	wlock_t *wl = w->wl;
	client_t *s = w->s;

	timer_cancel(&w->deadline);
	unpend(w);
	holder_index_remove(w);
	held_unlink(w);
	htab_remove(&Q.by_id, &w->by_id);

	if (w->wl_prev)
		w->wl_prev->wl_next = w->wl_next;
	else
		wl->head = w->wl_next;
	if (w->wl_next)
		w->wl_next->wl_prev = w->wl_prev;
	else
		wl->tail = w->wl_prev;
	if (!wl->head) {
		timer_cancel(&wl->timer);
		htab_remove(&Q.locks, &wl->by_name);
		free(wl->name);
		free(wl);
	}

	if (w->s_prev)
		w->s_prev->s_next = w->s_next;
	else
		s->waiters = w->s_next;
	if (w->s_next)
		w->s_next->s_prev = w->s_prev;
	Q.count--;

	json_decref(w->req_id);
	free(w->owner);
	free(w);
	client_unref(s);
}

/* w is answered, but a script that carries it is still on its way: it
 * waits for that reply only, out of every index a new request looks in. */
static void set_done(waiter_t *w)
{
	w->state = W_DONE;
	unpend(w);
	holder_index_remove(w);
	timer_cancel(&w->deadline);
}

/* Answers w's acquire with an error, and counts it. */
static void answer_error(waiter_t *w, lb_err_t code, const char *message)
{
	counters_acquire(code, timers_now() - w->created_at);
	client_send_error(w->s, w->req_id, code, message);
}

/* The answer of a waiter that stopped wanting the lock. */
static void answer_end(waiter_t *w)
{
	switch (w->end) {
	case WEND_TIMEOUT:
		server.stats.timeouts_total++;
		answer_error(w, LB_E_TIMEOUT, NULL);
		break;
	case WEND_CANCELLED:
		answer_error(w, LB_E_CANCELLED, NULL);
		break;
	case WEND_SHUTDOWN:
		answer_error(w, LB_E_SHUTTING_DOWN, NULL);
		break;
	case WEND_NONE:
	case WEND_GONE:
		break;
	}
}

/* lead's acquire came back without a grant and it waits on (queued in
 * Redis, or to be sent again): a try chained behind it answers now, busy. */
static void answer_tries_behind(waiter_t *lead)
{
	waiter_t **pp = &lead->followers;

	while (*pp) {
		waiter_t *f = *pp;

		if (f->wait) {
			pp = &f->chain_next;
			continue;
		}
		*pp = f->chain_next;
		f->chain_next = NULL;
		f->leader = NULL;
		server.stats.timeouts_total++;
		answer_error(f, LB_E_TIMEOUT, "the lock is busy (this session's own acquire of it is waiting)");
		waiter_free(f);
	}
}

/* w ends without a lease (answered already): the first acquire chained
 * behind it goes on as an acquire of its own, the others behind that one. */
static void finish_failed(waiter_t *w)
{
	waiter_t *lead = w->followers;

	w->followers = NULL;
	if (lead) {
		lead->leader = NULL;
		lead->followers = lead->chain_next;
		lead->chain_next = NULL;
		for (waiter_t *f = lead->followers; f; f = f->chain_next)
			f->leader = lead;
	}
	if (w->state == W_SENDING || w->state == W_WITHDRAWING)
		set_done(w); /* its reply frees it */
	else
		waiter_free(w);
	if (lead) {
		holder_index_add(lead);
		waiter_send(lead);
	}
}

/* A detached grant that waits for its pointer to be stored again before
 * it is answered (see grant_to). Holds an op reference on the session. */
struct pointer_refresh {
	client_t *s;
	json_t *id; /* own reference, or NULL */
	uint64_t created_at;
	uint64_t ends_at; /* when the grant ends by its TTL */
	resp_acquired_t ans;
	char token[LEASE_TOKEN_LEN + 1];
	size_t len;
	char lock[];
};

static void on_pointer_refreshed(const redisReply *r, void *priv)
{
	struct pointer_refresh *p = priv;

	p->ans.lease = p->token;
	p->ans.lock = (lb_str_t){p->lock, p->len};
	if (store_reply_failed(r) || !client_open(p->s)) {
		/* Not usable by its token, or nobody to take it: given back. */
		lease_release_in_redis(p->lock, p->len, p->token, p->ends_at);
		server.stats.released_total++;
		counters_acquire(LB_E_UNAVAILABLE, timers_now() - p->created_at);
		client_send_error(p->s, p->id, LB_E_UNAVAILABLE,
		                   "Redis did not store the lease's token; the grant was given back");
	} else {
		counters_acquire(LB_OK, timers_now() - p->created_at);
		client_send_acquired(p->s, p->id, &p->ans);
	}
	json_decref(p->id);
	client_op_end(p->s);
	free(p);
}

/* A detached lease is released and extended by its token through its
 * pointer, stored before the acquire for ttl + margin: one granted after a
 * long wait would outlive it. Stored again for what Redis granted, then
 * answered; false when it could not be sent (w is answered as usual). */
static bool refresh_pointer_then_answer(waiter_t *w, const resp_acquired_t *ans)
{
	struct pointer_refresh *p = xmalloc(sizeof(*p) + w->wl->len);

	p->s = w->s;
	p->id = w->req_id ? json_incref(w->req_id) : NULL;
	p->created_at = w->created_at;
	p->ends_at = timers_now() + (uint64_t)ans->ttl_ms + LEASE_RELEASE_SLACK_MS;
	p->ans = *ans;
	memcpy(p->token, w->id, sizeof(p->token));
	p->len = w->wl->len;
	memcpy(p->lock, w->wl->name, w->wl->len);
	client_op_begin(p->s);
	if (pointer_set(w->id, w->wl->name, w->wl->len, ans->ttl_ms, on_pointer_refreshed, p) == 0)
		return true;
	client_op_end(p->s);
	json_decref(p->id);
	free(p);
	return false;
}

/* w is granted the lock: a lease for its session, the answer, and every
 * acquire chained behind it re-enters that lease. */
static void grant_to(waiter_t *w, int64_t fence, int64_t ttl_granted, int64_t hold_ms,
                     uint64_t sent_at)
{
	client_t *s = w->s;
	lease_t *l = NULL;
	resp_acquired_t ans = {
		.lease = w->id,
		.lock = {w->wl->name, w->wl->len},
		.mode = w->mode,
		.fence = fence,
		.ttl_ms = ttl_granted,
		.count = 1,
	};
	char tb[LOG_TOKEN_LEN];

	server.stats.acquired_total++;
	if (w->end != WEND_NONE || !client_open(s)) {
		/* Nobody takes it any more: give it back at once. */
		lease_release_in_redis(w->wl->name, w->wl->len, w->id,
		                       sent_at + (uint64_t)ttl_granted + LEASE_RELEASE_SLACK_MS);
		server.stats.released_total++;
		answer_end(w);
		finish_failed(w);
		return;
	}
	if (!w->detach) {
		l = lease_new(s, w->id, w->wl->name, w->wl->len, w->owner, w->owner_len, w->mode, fence,
		              w->ttl_ms, w->watchdog);
		watchdog_start(l, sent_at, ttl_granted, hold_ms);
	}
	LOG(LOG_DEBUG, "msg=\"acquired\" session=%s lease=%s fence=%" PRId64 "%s", s->name,
	    log_token(w->id, tb), fence, w->detach ? " detached=1" : "");
	if (w->detach && timers_now() - w->pointer_at >= LB_INDEX_REFRESH_MS &&
	    refresh_pointer_then_answer(w, &ans)) {
		/* answered once the pointer is stored */
	} else {
		counters_acquire(LB_OK, timers_now() - w->created_at);
		client_send_acquired(s, w->req_id, &ans);
	}

	for (waiter_t *f = w->followers, *next; f; f = next) {
		next = f->chain_next;
		f->leader = NULL;
		reentry_send(f->s, f->req_id, l);
		waiter_free(f);
	}
	w->followers = NULL;
	w->granted = true;
	if (w->state == W_SENDING)
		set_done(w); /* granted by another reply: its own still comes */
	else
		waiter_free(w);
}

/* ---- scripts ------------------------------------------------------------- */

static const char *mode_arg(lb_mode_t m)
{
	return m == LB_MODE_SHARED ? "s" : m == LB_MODE_PERMIT ? "p" : "x";
}

static void withdraw_quietly(const waiter_t *w);

static void on_withdrawn(const redisReply *r, void *priv)
{
	waiter_t *w = priv;

	if (!store_reply_failed(r) && r->type == REDIS_REPLY_ARRAY) {
		waitq_take_grants(w->wl->name, w->wl->len, r, 1, w->sent_at);
	} else {
		/* It may or may not have run: answered now, and sent again until
		 * Redis answers it (what it takes back would otherwise hold the
		 * lock for nobody until its TTL or heartbeat deadline). */
		LOG(LOG_WARN, "msg=\"withdraw failed; sent again\" session=%s", w->s->name);
		withdraw_quietly(w);
	}
	if (w->state == W_WITHDRAWING)
		answer_end(w);
	w->state = W_QUEUED; /* no script in flight any more */
	finish_failed(w);
}

static void send_withdraw(waiter_t *w)
{
	lockscript_t ls;

	lockscript_begin(&ls, w->wl->name, w->wl->len, LOCK_NKEYS, true);
	lockscript_arg(&ls, w->id, LEASE_TOKEN_LEN);
	w->sent_at = timers_now();
	w->state = W_WITHDRAWING;
	if (lockscript_send(&ls, SCRIPT_WITHDRAW, on_withdrawn, w) < 0) {
		/* Redis is down: sent when it is back (or the entry ends with its
		 * heartbeat deadline). */
		w->state = W_QUEUED;
		withdraw_quietly(w);
		answer_end(w);
		finish_failed(w);
	}
}

struct quiet_withdraw {
	uint64_t sent_at;
	size_t len;
	char lock[];
};

static void on_withdrawn_quietly(const redisReply *r, void *priv)
{
	struct quiet_withdraw *q = priv;

	if (!store_reply_failed(r) && r->type == REDIS_REPLY_ARRAY)
		waitq_take_grants(q->lock, q->len, r, 1, q->sent_at);
	free(q);
}

/* w is finished, but an acquire of it may have run in Redis without its
 * reply reaching us: take back whatever it left (a grant, a queue entry),
 * so the lock is not held or reserved for nobody. Sent again after a lost
 * reply, and while Redis is down, until what it takes back has ended by
 * itself (the grant's TTL, the entry's heartbeat deadline). */
static void withdraw_quietly(const waiter_t *w)
{
	struct quiet_withdraw *q = xmalloc(sizeof(*q) + w->wl->len);
	lockscript_t ls;

	q->sent_at = timers_now();
	q->len = w->wl->len;
	memcpy(q->lock, w->wl->name, w->wl->len);
	lockscript_begin(&ls, w->wl->name, w->wl->len, LOCK_NKEYS, true);
	lockscript_arg(&ls, w->id, LEASE_TOKEN_LEN);
	lockscript_retry_until(&ls, q->sent_at + (uint64_t)w->ttl_ms + LOCK_HEARTBEAT_MS +
	                                LEASE_RELEASE_SLACK_MS);
	if (lockscript_send(&ls, SCRIPT_WITHDRAW, on_withdrawn_quietly, q) < 0)
		free(q); /* no script loaded yet: nothing of it can be in Redis */
}

/* w stops wanting the lock (why): answered now, or once Redis confirmed. */
static void end_waiter(waiter_t *w, waiter_end_t why)
{
	if (w->end != WEND_NONE || w->state == W_DONE)
		return;
	w->end = why;
	unpend(w);
	switch (w->state) {
	case W_CHAINED: {
		waiter_t **pp = &w->leader->followers;
		while (*pp != w)
			pp = &(*pp)->chain_next;
		*pp = w->chain_next;
		answer_end(w);
		waiter_free(w);
		break;
	}
	case W_QUEUED:
		if (w->held && !w->was_sent) { /* nothing of it is in Redis */
			answer_end(w);
			finish_failed(w);
		} else if (w->unsent || w->held) {
			answer_end(w);
			withdraw_quietly(w); /* an earlier send may have queued it */
			finish_failed(w);
		} else {
			send_withdraw(w);
		}
		break;
	case W_SENDING:       /* the acquire reply decides */
	case W_WITHDRAWING:
	case W_DONE:
		break;
	}
}

static void on_deadline(timer_ent_t *t)
{
	end_waiter((waiter_t *)((char *)t - offsetof(waiter_t, deadline)), WEND_TIMEOUT);
}

static void on_acquire_reply(const redisReply *r, void *priv)
{
	waiter_t *w = priv;
	int64_t status, a = 0, b = 0, hold = 0;

	client_op_end(w->s); /* the waiter's own reference keeps s alive */
	REQUIRE(w->wl->acq_inflight > 0);
	w->wl->acq_inflight--;
	/* w stays in its wlock until below */
	if (store_reply_failed(r))
		unhold_all(w->wl);
	else
		send_held(w->wl);
	if (w->state == W_DONE) {
		/* Answered meanwhile by another reply. This one may still carry
		 * grants for other waiters, and a grant of w's id must go back
		 * when w had ended (a granted w holds it: as a lease here, or
		 * detached, in no table at all). */
		if (!store_reply_failed(r) && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
		    r->element[0]->type == REDIS_REPLY_INTEGER) {
			status = r->element[0]->integer;
			waitq_take_grants(w->wl->name, w->wl->len, r, status == 1 ? LOCK_GRANT_WIDTH : 2,
			                  w->sent_at);
			if (status == 1 && !w->granted && !lease_find(w->id, LEASE_TOKEN_LEN))
				lease_release_in_redis(w->wl->name, w->wl->len, w->id,
				                       w->sent_at + (uint64_t)w->ttl_ms + LEASE_RELEASE_SLACK_MS);
		}
		waiter_free(w);
		return;
	}
	if (store_reply_failed(r) || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
		if (!store_reply_failed(r))
			LOG(LOG_ERROR, "msg=\"unexpected reply from the acquire script\"");
		if (w->wait && w->end == WEND_NONE) {
			/* It may or may not be queued: the next heartbeat sends the
			 * acquire again (the script takes a repeat as a repeat). */
			w->state = W_QUEUED;
			w->unsent = true;
			wlock_arm(w->wl, timers_now() + LOCK_SAFETY_NET_MS);
			answer_tries_behind(w);
			return;
		}
		/* An error from Redis: the script did not run. No reply: a try
		 * was resent for TRY_RESOLVE_MS and its fate is still unknown
		 * (Redis stalls): like a wait that ran out, it answers timeout,
		 * and what it may have taken is given back below. */
		if (w->end != WEND_NONE) {
			answer_end(w);
		} else if (r) {
			answer_error(w, LB_E_UNAVAILABLE, "Redis answered the request with an error");
		} else {
			server.stats.timeouts_total++;
			answer_error(w, LB_E_TIMEOUT, "Redis did not answer in time; anything the try took is given back");
		}
		w->state = W_QUEUED;
		withdraw_quietly(w); /* the script may have run: a grant or a queue entry */
		finish_failed(w);
		return;
	}
	status = r->element[0]->integer;
	a = r->element[1]->integer;
	if (status == 1 && r->elements >= LOCK_GRANT_WIDTH &&
	    r->element[2]->type == REDIS_REPLY_INTEGER && r->element[3]->type == REDIS_REPLY_INTEGER) {
		b = r->element[2]->integer;
		hold = r->element[3]->integer;
	}
	waitq_take_grants(w->wl->name, w->wl->len, r, status == 1 ? LOCK_GRANT_WIDTH : 2, w->sent_at);

	if (status == 1) {
		w->state = W_QUEUED;
		grant_to(w, a, b, hold, w->sent_at);
		return;
	}
	w->state = W_QUEUED;
	w->unsent = false;
	if (status == 0 && w->wait && w->end == WEND_NONE) {
		uint64_t now = timers_now();
		wlock_arm(w->wl, now + (a > 0 && a < LOCK_SAFETY_NET_MS ? (uint64_t)a + 1 : LOCK_SAFETY_NET_MS));
		answer_tries_behind(w);
		return;
	}
	if (status == 0 && w->wait) {
		send_withdraw(w); /* ended while the acquire was on its way */
		return;
	}
	if (w->end != WEND_NONE) {
		answer_end(w);
	} else if (status == 0) {
		server.stats.timeouts_total++;
		answer_error(w, LB_E_TIMEOUT, "the lock is busy");
	} else if (status == -1) {
		answer_error(w, LB_E_CONFLICT, NULL);
	} else {
		answer_error(w, LB_E_LIMIT_EXCEEDED, "the lock's queue is full");
	}
	finish_failed(w);
}

static void on_pointer_stored(const redisReply *r, void *priv)
{
	waiter_t *w = priv;

	client_op_end(w->s);
	if (w->prestep) {
		/* Requests behind it run after this reply's effects: its
		 * acquire goes out below, before they do. */
		w->prestep = false;
		client_prestep_end(w->s);
	}
	if (w->state == W_DONE) { /* answered meanwhile (granted or ended) */
		waiter_free(w);
		return;
	}
	w->state = W_QUEUED;
	if (store_reply_failed(r) && w->was_sent && w->wait && w->end == WEND_NONE) {
		/* Stored again for a waiter queued again: it waits on, and the
		 * next heartbeat tries again. */
		w->unsent = true;
		wlock_arm(w->wl, timers_now() + LOCK_SAFETY_NET_MS);
		return;
	}
	if (store_reply_failed(r)) {
		if (w->end == WEND_NONE)
			answer_error(w, LB_E_UNAVAILABLE, "Redis did not answer the request");
		else
			answer_end(w);
		finish_failed(w);
		return;
	}
	w->pointer_set = true;
	w->pointer_at = w->sent_at;
	if (w->end != WEND_NONE) {
		answer_end(w);
		finish_failed(w);
		return;
	}
	waiter_send(w);
}

static void waiter_send_now(waiter_t *w);

/* Sends w's acquire, or holds it (see ACQUIRE_INFLIGHT_MAX) behind the
 * lock's other held waiters. */
static void waiter_send(waiter_t *w)
{
	wlock_t *wl = w->wl;

	REQUIRE(!w->held);
	/* A try goes out at once: it answers now and queues nothing, so it
	 * holds up no other broker's wake-up, and held it could wait for a
	 * burst of others to be answered first. */
	if ((w->detach && !w->pointer_set) || !w->wait ||
	    (wl->acq_inflight < ACQUIRE_INFLIGHT_MAX && !wl->held_head)) {
		waiter_send_now(w);
		return;
	}
	w->state = W_QUEUED;
	w->unsent = false;
	w->held = true;
	w->held_next = NULL;
	w->held_prev = wl->held_tail;
	if (wl->held_tail)
		wl->held_tail->held_next = w;
	else
		wl->held_head = w;
	wl->held_tail = w;
}

/* An acquire of wl failed (its connection went, say): it is resent by the
 * next heartbeat, and the held waiters, all younger, with it and after it
 * rather than ahead of it on another connection. */
static void unhold_all(wlock_t *wl)
{
	if (!wl->held_head)
		return;
	while (wl->held_head) {
		waiter_t *w = wl->held_head;

		held_unlink(w);
		w->unsent = true;
	}
	wlock_arm(wl, timers_now() + LOCK_SAFETY_NET_MS);
}

/* An acquire of wl came back: the oldest held waiters go out. */
static void send_held(wlock_t *wl)
{
	while (wl->held_head && wl->acq_inflight < ACQUIRE_INFLIGHT_MAX) {
		waiter_t *w = wl->held_head;

		held_unlink(w);
		waiter_send_now(w);
	}
}

/* Sends w's acquire (for a detached one, its token -> name pointer first:
 * the token must be usable on any broker the moment the client learns it;
 * the pointer names the lock only and expires by itself). */
static void waiter_send_now(waiter_t *w)
{
	client_t *s = w->s;
	lockscript_t ls;
	int rc;

	w->sent_at = timers_now();
	w->state = W_SENDING;
	w->unsent = false;
	client_op_begin(s);
	if (w->detach && !w->pointer_set) {
		rc = pointer_set(w->id, w->wl->name, w->wl->len, w->ttl_ms, on_pointer_stored, w);
		if (rc == 0 && !w->was_sent) {
			/* Later requests of the session wait until the acquire
			 * itself is on its way (they must not pass it). */
			w->prestep = true;
			client_prestep_begin(s);
		}
	} else {
		lockscript_begin(&ls, w->wl->name, w->wl->len, LOCK_NKEYS, true);
		lockscript_arg(&ls, w->id, LEASE_TOKEN_LEN);
		lockscript_str(&ls, mode_arg(w->mode));
		lockscript_int(&ls, w->limit);
		lockscript_int(&ls, w->ttl_ms);
		lockscript_arg(&ls, w->owner, w->owner_len);
		lockscript_arg(&ls, s->label ? s->label : "", s->label ? s->label_len : 0);
		lockscript_int(&ls, w->max_hold_ms);
		lockscript_str(&ls, w->wait ? "1" : "0");
		lockscript_str(&ls, w->fair ? "1" : "0");
		lockscript_int(&ls, server.cfg->max_queue);
		/* A try is repeatable (the script knows its id): after a lost
		 * reply it is sent again for a while. A waiting acquire is
		 * resent by its lock's heartbeat instead. */
		if (!w->wait)
			lockscript_retry_until(&ls, w->sent_at + TRY_RESOLVE_MS);
		rc = lockscript_send(&ls, SCRIPT_ACQUIRE, on_acquire_reply, w);
		if (rc == 0) {
			w->wl->acq_inflight++;
			w->was_sent = true;
		}
	}
	if (rc == 0)
		return;
	client_op_end(s);
	w->state = W_QUEUED;
	if (w->wait && w->end == WEND_NONE) {
		w->unsent = true; /* waits on; the next heartbeat tries again */
		wlock_arm(w->wl, timers_now() + LOCK_SAFETY_NET_MS);
		return;
	}
	if (w->end == WEND_NONE)
		answer_error(w, LB_E_UNAVAILABLE, "Redis is not reachable");
	else
		answer_end(w);
	finish_failed(w);
}

void waitq_take_grants(const char *lock, size_t lock_len, const redisReply *r, size_t from,
                       uint64_t sent_at)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t k = from; k + LOCK_GRANT_WIDTH <= r->elements; k += LOCK_GRANT_WIDTH) {
		const redisReply *id = r->element[k];
		waiter_t *w;

		if (id->type != REDIS_REPLY_STRING || r->element[k + 1]->type != REDIS_REPLY_INTEGER ||
		    r->element[k + 2]->type != REDIS_REPLY_INTEGER ||
		    r->element[k + 3]->type != REDIS_REPLY_INTEGER || id->len != LEASE_TOKEN_LEN)
			continue;
		w = waiter_find(id->str, id->len);
		if (!w && lease_find(id->str, id->len))
			continue; /* reported again (a heartbeat sent before the grant's
			           * reply came back): it is a lease here already */
		if (!w) {
			/* A grant nobody here waits for: give it back. */
			char token[LEASE_TOKEN_LEN + 1];
			memcpy(token, id->str, LEASE_TOKEN_LEN);
			token[LEASE_TOKEN_LEN] = '\0';
			int64_t ttl = r->element[k + 2]->integer;
			lease_release_in_redis(lock, lock_len, token,
			                       sent_at + (uint64_t)(ttl > 0 ? ttl : 0) + LEASE_RELEASE_SLACK_MS);
			continue;
		}
		if (w->state == W_DONE)
			continue; /* answered already; its own reply frees it */
		if (w->state == W_WITHDRAWING)
			continue; /* its withdraw, sent later, gives it back */
		grant_to(w, r->element[k + 1]->integer, r->element[k + 2]->integer,
		         r->element[k + 3]->integer, sent_at);
	}
}

/* ---- heartbeats ---------------------------------------------------------- */

struct heartbeat {
	uint64_t sent_at;
	uint64_t serial; /* of the wlock that sent it */
	size_t len;
	char name[]; /* the lock */
};

/* The wlock that sent hb, if it still exists: a later wlock of the same
 * name (all waiters ended, then a new one came) did not send it. */
static wlock_t *sender_of(const struct heartbeat *hb)
{
	wlock_t *wl = wlock_find(hb->name, hb->len);

	return wl && wl->serial == hb->serial ? wl : NULL;
}

static void on_heartbeat(const redisReply *r, void *priv)
{
	struct heartbeat *hb = priv;
	wlock_t *wl = sender_of(hb);
	int64_t retry_ms, nlost;

	if (wl && wl->hb_inflight > 0)
		wl->hb_inflight--;
	if (store_reply_failed(r) || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->integer < 0 || (size_t)r->element[1]->integer > r->elements - 2) {
		free(hb); /* the armed safety net tries again */
		if (wl && wl->hb_again && wl->hb_inflight == 0) {
			wl->hb_again = false;
			wlock_heartbeat(wl);
		}
		return;
	}
	retry_ms = r->element[0]->integer;
	nlost = r->element[1]->integer;
	waitq_take_grants(hb->name, hb->len, r, 2 + (size_t)nlost, hb->sent_at);
	for (int64_t k = 0; k < nlost; k++) {
		const redisReply *id = r->element[2 + k];
		waiter_t *w = id->type == REDIS_REPLY_STRING ? waiter_find(id->str, id->len) : NULL;
		/* Dropped from the queue (Redis restarted empty, or this broker
		 * stalled past its heartbeat): queue it again, at the end (a
		 * detached one with its pointer, which went the same way). */
		if (w && w->state == W_QUEUED && w->end == WEND_NONE && !w->unsent && !w->held) {
			w->pointer_set = false;
			waiter_send(w);
		}
	}
	wl = sender_of(hb);
	free(hb);
	if (!wl)
		return;
	if (retry_ms > 0 && retry_ms < LOCK_SAFETY_NET_MS)
		wlock_arm(wl, timers_now() + (uint64_t)retry_ms + 1);
	if (wl->hb_again && wl->hb_inflight == 0) {
		wl->hb_again = false;
		wlock_heartbeat(wl);
	}
}

/* One heartbeat call for ids[0..n-1] (may be none: see wlock_heartbeat). */
static void send_heartbeat(wlock_t *wl, const char *const *ids, size_t n, uint64_t now)
{
	struct heartbeat *hb;
	lockscript_t ls;

	lockscript_begin(&ls, wl->name, wl->len, LOCK_NKEYS, true);
	for (size_t k = 0; k < n; k++)
		lockscript_arg(&ls, ids[k], LEASE_TOKEN_LEN);
	hb = xmalloc(sizeof(*hb) + wl->len);
	hb->sent_at = now;
	hb->serial = wl->serial;
	hb->len = wl->len;
	memcpy(hb->name, wl->name, wl->len);
	if (lockscript_send(&ls, SCRIPT_HEARTBEAT, on_heartbeat, hb) < 0) {
		free(hb);
		return;
	}
	wl->hb_inflight++;
}

/* Sends the acquires that could not be sent, then a heartbeat that grants
 * whatever of wl fits and, when the last listing is a safety-net interval
 * old, lists every queued waiter of wl, HEARTBEAT_MAX_IDS per call (a
 * waiter left out would lose its place when its deadline passes); the
 * safety net is armed again either way. */
static void wlock_heartbeat(wlock_t *wl)
{
	const char *ids[HEARTBEAT_MAX_IDS];
	size_t n = 0, batches = 0;
	bool sending = false, queued = false;
	uint64_t now = timers_now();

	for (waiter_t *w = wl->head, *next; w; w = next) {
		next = w->wl_next;
		if (w->state == W_QUEUED && w->unsent && w->end == WEND_NONE) {
			/* Its acquire failed: Redis may have lost the detached
			 * one's pointer too (a restart), so that goes first. */
			w->pointer_set = false;
			waiter_send(w); /* never frees wl: w stays in it */
		}
	}
	for (waiter_t *w = wl->head; w; w = w->wl_next) {
		if (w->state == W_QUEUED && !w->unsent && !w->held)
			queued = true;
		else if (w->state == W_SENDING)
			sending = true;
	}
	if (!queued && !sending && !wl->hb_inflight) {
		/* Nothing of ours in Redis: only the unsent need the timer. */
		for (waiter_t *w = wl->head; w; w = w->wl_next) {
			if (w->unsent) {
				wlock_arm(wl, now + LOCK_SAFETY_NET_MS);
				break;
			}
		}
		return;
	}
	timer_at(&wl->timer, now + LOCK_SAFETY_NET_MS);
	if (wl->hb_inflight) {
		wl->hb_again = true;
		return;
	}
	/* A waiter whose acquire reply is still on its way is queued in Redis
	 * already and may be what a wake-up is about: the script grants every
	 * waiter of this broker that fits, listed or not, so a call goes out
	 * even with no id to refresh. The ids (deadlines refreshed, lost ones
	 * found) go at most about once per safety-net interval, which is five
	 * times within a deadline: a wake-up is on the way of a handoff, and
	 * listing some 30 waiters made its script 2.5 times as long. */
	if (wl->refreshed_at != 0 && now - wl->refreshed_at < LOCK_SAFETY_NET_MS) {
		send_heartbeat(wl, NULL, 0, now);
		return;
	}
	wl->refreshed_at = now;
	for (waiter_t *w = wl->head; w; w = w->wl_next) {
		if (!(w->state == W_QUEUED && !w->unsent && !w->held))
			continue;
		ids[n++] = w->id;
		if (n == HEARTBEAT_MAX_IDS) {
			send_heartbeat(wl, ids, n, now);
			n = 0;
			batches++;
		}
	}
	if (n > 0 || batches == 0)
		send_heartbeat(wl, ids, n, now);
}

/* ---- the API --------------------------------------------------------------- */

void waitq_acquire(client_t *s, const json_t *id, const req_acquire_t *a, int64_t ttl_ms)
{
	const lb_config_t *cfg = server.cfg;
	bool reentrant = !a->detach && a->mode != LB_MODE_PERMIT;
	waiter_t *lead = reentrant ? leader_find(s, &a->lock, &a->owner) : NULL;
	waiter_t *w;

	if ((int64_t)s->nwaiters >= cfg->max_waiters_per_session) {
		counters_acquire(LB_E_LIMIT_EXCEEDED, 0);
		client_send_error(s, id, LB_E_LIMIT_EXCEEDED, "too many pending acquires in this session");
		return;
	}
	/* Pending ones, as stats counts them: a waiter already ended (its
	 * withdraw on its way) wants nothing and goes within a round trip. */
	if ((int64_t)Q.pending >= cfg->max_waiters) {
		counters_acquire(LB_E_LIMIT_EXCEEDED, 0);
		client_send_error(s, id, LB_E_LIMIT_EXCEEDED, "too many pending acquires on this broker");
		return;
	}
	if ((int64_t)(s->nleases + s->nwaiters) >= cfg->max_leases_per_session) {
		counters_acquire(LB_E_LIMIT_EXCEEDED, 0);
		client_send_error(s, id, LB_E_LIMIT_EXCEEDED, "too many leases in this session");
		return;
	}
	if (lead && lead->mode == LB_MODE_SHARED && a->mode == LB_MODE_EXCLUSIVE) {
		counters_acquire(LB_E_UPGRADE_UNSUPPORTED, 0);
		client_send_error(s, id, LB_E_UPGRADE_UNSUPPORTED, NULL);
		return;
	}
	if (lead && a->wait_ms == 0 && lead->state != W_SENDING) {
		/* A try behind an acquire of its own holder that waits in Redis:
		 * the lock is busy now, and a try answers now. */
		server.stats.timeouts_total++;
		counters_acquire(LB_E_TIMEOUT, 0);
		client_send_error(s, id, LB_E_TIMEOUT,
		                   "the lock is busy (this session's own acquire of it is waiting)");
		return;
	}
	w = waiter_new(s, id, a, ttl_ms);
	if (lead) {
		/* Behind the pending acquire of the same holder: re-enters its
		 * lease once granted, never waits on itself in Redis (a try
		 * waits for that acquire's first answer only: see
		 * answer_tries_behind). */
		waiter_t **pp = &lead->followers;
		while (*pp)
			pp = &(*pp)->chain_next;
		*pp = w;
		w->leader = lead;
		w->state = W_CHAINED;
		return;
	}
	if (reentrant)
		holder_index_add(w);
	waiter_send(w);
}

bool waitq_cancel(client_t *s, const json_t *target)
{
	for (waiter_t *w = s->waiters; w; w = w->s_next) {
		if (w->end == WEND_NONE && w->state != W_DONE && w->req_id &&
		    json_equal(w->req_id, (json_t *)target)) {
			end_waiter(w, WEND_CANCELLED);
			return true;
		}
	}
	return false;
}

/* Ends every waiter of s (chained ones first, so that none is promoted to
 * leader only to be ended next). */
static void end_all(client_t *s, waiter_end_t why)
{
	waiter_t *w, *next;

	for (w = s->waiters; w; w = next) {
		next = w->s_next;
		if (w->state == W_CHAINED)
			end_waiter(w, why);
	}
	for (w = s->waiters; w; w = next) {
		next = w->s_next;
		end_waiter(w, why);
	}
}

void waitq_client_end(client_t *s)
{
	end_all(s, WEND_GONE);
}

void waitq_client_shutdown(client_t *s)
{
	end_all(s, WEND_SHUTDOWN);
}

static void on_orphans_dropped(const redisReply *r, void *priv)
{
	struct heartbeat *hb = priv;

	if (!store_reply_failed(r) && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer >= 0 &&
	    (size_t)r->element[0]->integer < r->elements) {
		size_t n = (size_t)r->element[0]->integer;

		if (n > 0)
			LOG(LOG_INFO, "msg=\"dropped orphaned waiters\" count=%zu", n);
		for (size_t k = 1; k <= n; k++) {
			const redisReply *id = r->element[k];
			waiter_t *w = id->type == REDIS_REPLY_STRING ? waiter_find(id->str, id->len) : NULL;
			/* Not an orphan: a waiter of ours whose acquire, sent after
			 * this script on another connection, ran before it. */
			if (w && w->state == W_QUEUED && w->end == WEND_NONE && !w->unsent && !w->held) {
				w->pointer_set = false;
				waiter_send(w);
			}
		}
		waitq_take_grants(hb->name, hb->len, r, 1 + n, hb->sent_at);
	}
	free(hb);
}

/* A wake for a lock this broker has no waiter on: whatever waiter of ours
 * Redis still queues there is an orphan reserving the lock. The script
 * goes on the lock's route, behind anything this broker sent for it. */
static void drop_orphans(const char *name, size_t len)
{
	struct heartbeat *hb;
	lockscript_t ls;

	lockscript_begin(&ls, name, len, LOCK_NKEYS, true);
	hb = xmalloc(sizeof(*hb) + len);
	hb->sent_at = timers_now();
	hb->len = len;
	memcpy(hb->name, name, len);
	if (lockscript_send(&ls, SCRIPT_ORPHANS, on_orphans_dropped, hb) < 0)
		free(hb);
}

void waitq_on_message(const char *name, size_t len)
{
	wlock_t *wl = wlock_find(name, len);

	if (wl)
		wlock_heartbeat(wl);
	else if (len > 0 && len <= REQ_LOCK_MAX_BYTES)
		drop_orphans(name, len);
}

void waitq_on_subscribed(void)
{
	/* Collect first: a heartbeat may end waiters and free wlocks. */
	wlock_t **all;
	size_t n = 0;

	if (Q.locks.count == 0)
		return;
	all = xcalloc(Q.locks.count, sizeof(*all));
	for (size_t b = 0; b < Q.locks.nbuckets; b++) {
		for (htab_node_t *e = Q.locks.buckets[b]; e; e = e->next)
			all[n++] = (wlock_t *)((char *)e - offsetof(wlock_t, by_name));
	}
	for (size_t k = 0; k < n; k++)
		wlock_arm(all[k], timers_now());
	free(all);
}

size_t waitq_count(void)
{
	return Q.pending;
}

void waitq_free(void)
{
	FAILS_ASSERT(Q.count == 0);
	htab_free(&Q.by_id);
	htab_free(&Q.by_holder);
	htab_free(&Q.locks);
}
