/*
 * waitq_send.c - waiters, part two: acquires and withdraws on their way to
 * Redis and what their replies say, grants included (from any script's
 * reply: waitq_take_grants). A detached grant that waited stores its token
 * pointer again before it is answered. See waitq_int.h.
 */
#include "broker/locks/waitq.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/locks/lockstat.h"
#include "broker/locks/pointer.h"
#include "broker/locks/reentry.h"
#include "broker/locks/waitq_int.h"
#include "broker/locks/watchdog.h"
#include "broker/store/lockscript.h"
#include "protocol/resp.h"

static void unhold_all(wlock_t *wl);
static void send_held(wlock_t *wl);

/* A detached grant that waits for its pointer to be stored again before
 * it is answered (see grant_to). Holds an op reference on the session. */
struct pointer_refresh {
	client_t *s;
	json_t *id; /* own reference, or NULL */
	uint64_t created_at;
	uint64_t ends_at; /* when the grant ends by its TTL */
	resp_acquired_t ans;
	bool grave; /* the waiter's acquire may still run late (uncertain) */
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
		lease_release_in_redis(p->lock, p->len, p->token, p->ends_at, p->grave);
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
	p->grave = w->uncertain;
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
 * acquire chained behind it re-enters that lease. own: by the reply of its
 * own acquire (else of a script that freed the lock: lockstat_grant). */
static void grant_to(waiter_t *w, int64_t fence, int64_t ttl_granted, int64_t hold_ms,
                     uint64_t sent_at, bool own)
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
	if (fence > server.fence_high)
		server.fence_high = fence;
	if (w->end != WEND_NONE || !client_open(s)) {
		/* Nobody takes it any more: give it back at once. */
		lease_release_in_redis(w->wl->name, w->wl->len, w->id,
		                       sent_at + (uint64_t)ttl_granted + LEASE_RELEASE_SLACK_MS,
		                       w->uncertain);
		server.stats.released_total++;
		wq_answer_end(w);
		wq_finish_failed(w);
		return;
	}
	if (!store_replicated()) {
		/* WAIT did not find it on --redis-wait-replicas replicas in
		 * time: a failover could lose it, so it is not handed out. */
		lease_release_in_redis(w->wl->name, w->wl->len, w->id,
		                       sent_at + (uint64_t)ttl_granted + LEASE_RELEASE_SLACK_MS,
		                       w->uncertain);
		server.stats.released_total++;
		wq_answer_error(w, LB_E_UNAVAILABLE,
		                "the grant was not acknowledged by enough replicas in time "
		                "(or was made by a master a failover demoted); it was given back");
		wq_finish_failed(w);
		return;
	}
	lockstat_grant(w->wl->name, w->wl->len, w->created_at, sent_at, own);
	if (!w->detach) {
		l = lease_new(s, w->id, w->wl->name, w->wl->len, w->owner, w->owner_len, w->mode, fence,
		              w->ttl_ms, w->watchdog);
		l->uncertain = w->uncertain;
		lease_set_value(l, w->value, w->value_len, 0);
		l->lock_delay_ms = w->lock_delay_ms;
		watchdog_start(l, sent_at, ttl_granted, hold_ms);
	} else {
		lease_note_detached_grant(w->id); /* in no table: see waitq_take_grants */
	}
	LOG(LOG_DEBUG, "msg=\"acquired\" session=%s lease=%s fence=%" PRId64 "%s", s->name,
	    log_token(w->id, tb), fence, w->detach ? " detached=1" : "");
	if (w->detach)
		pointer_note_end(w->id, ttl_granted, hold_ms); /* for a later not_held */
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
		wq_waiter_free(f);
	}
	w->followers = NULL;
	w->granted = true;
	if (w->state == W_SENDING)
		wq_set_done(w); /* granted by another reply: its own still comes */
	else
		wq_waiter_free(w);
}

/* ---- scripts ------------------------------------------------------------- */

static const char *mode_arg(lb_mode_t m)
{
	return m == LB_MODE_SHARED ? "s" : m == LB_MODE_PERMIT ? "p" : "x";
}

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
		wq_withdraw_quietly(w);
	}
	if (w->state == W_WITHDRAWING)
		wq_answer_end(w);
	w->state = W_QUEUED; /* no script in flight any more */
	wq_finish_failed(w);
}

void wq_send_withdraw(waiter_t *w)
{
	lockscript_t ls;

	lockscript_begin(&ls, w->wl->name, w->wl->len, LOCK_NKEYS, true);
	lockscript_arg(&ls, w->id, LEASE_TOKEN_LEN);
	if (w->uncertain)
		lockscript_str(&ls, "g"); /* never granted again (lua/withdraw.lua) */
	w->sent_at = timers_now();
	w->state = W_WITHDRAWING;
	if (lockscript_send(&ls, SCRIPT_WITHDRAW, on_withdrawn, w) < 0) {
		/* Redis is down: sent when it is back (or the entry ends with its
		 * heartbeat deadline). */
		w->state = W_QUEUED;
		wq_withdraw_quietly(w);
		wq_answer_end(w);
		wq_finish_failed(w);
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
void wq_withdraw_quietly(const waiter_t *w)
{
	struct quiet_withdraw *q = xmalloc(sizeof(*q) + w->wl->len);
	lockscript_t ls;

	q->sent_at = timers_now();
	q->len = w->wl->len;
	memcpy(q->lock, w->wl->name, w->wl->len);
	lockscript_begin(&ls, w->wl->name, w->wl->len, LOCK_NKEYS, true);
	lockscript_arg(&ls, w->id, LEASE_TOKEN_LEN);
	/* A copy of its acquire may run after this (a reply of it was lost):
	 * never granted again. An error reply says the script did not run. */
	if (w->uncertain)
		lockscript_str(&ls, "g");
	lockscript_retry_until(&ls, q->sent_at + (uint64_t)w->ttl_ms + LOCK_HEARTBEAT_MS +
	                                LEASE_RELEASE_SLACK_MS);
	if (lockscript_send(&ls, SCRIPT_WITHDRAW, on_withdrawn_quietly, q) < 0)
		free(q); /* no script loaded yet: nothing of it can be in Redis */
}

/* w waits on, but its acquire did not go out or its fate is unknown: the
 * lock's next heartbeat (rounds: round) sends it again, a safety-net
 * interval from now, and no wake brings that forward. */
static void retry_at_safety_net(waiter_t *w)
{
	uint64_t at = timers_now() + LOCK_SAFETY_NET_MS;

	w->unsent = true;
	w->wl->round_not_before = at; /* rounds only */
	w->wl->round_wakeable = false;
	wq_wlock_arm(w->wl, at);
}

static void acquire_reply(const redisReply *r, waiter_t *w)
{
	int64_t status, a = 0, b = 0, hold = 0;

	client_op_end(w->s); /* the waiter's own reference keeps s alive */
	REQUIRE(w->wl->acq_inflight > 0);
	w->wl->acq_inflight--;
	if (!r || store_replayed())
		w->uncertain = true; /* a copy of its acquire may still run late */
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
				                       w->sent_at + (uint64_t)w->ttl_ms + LEASE_RELEASE_SLACK_MS,
				                       true);
		}
		wq_waiter_free(w);
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
			retry_at_safety_net(w);
			wq_answer_tries_behind(w);
			return;
		}
		/* An error from Redis: the script did not run. No reply: a try
		 * was resent for TRY_RESOLVE_MS and its fate is still unknown
		 * (Redis stalls): like a wait that ran out, it answers timeout,
		 * and what it may have taken is given back below. */
		if (w->end != WEND_NONE) {
			wq_answer_end(w);
		} else if (r) {
			wq_answer_error(w, LB_E_UNAVAILABLE, "Redis answered the request with an error");
		} else {
			server.stats.timeouts_total++;
			wq_answer_error(w, LB_E_TIMEOUT, "Redis did not answer in time; anything the try took is given back");
		}
		w->state = W_QUEUED;
		wq_withdraw_quietly(w); /* the script may have run: a grant or a queue entry */
		wq_finish_failed(w);
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
		w->wl->round_losses = 0;
		w->wl->round_splits = 0;
		w->wl->round_not_before = 0;
		grant_to(w, a, b, hold, w->sent_at, true);
		return;
	}
	w->state = W_QUEUED;
	w->unsent = false;
	if (status == 0 && w->wait && w->end == WEND_NONE && wq_rounds()) {
		/* {0, retry_ms, fresh, split}: the store's merge of a round */
		wq_round_lost(w, a,
		                r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER &&
		                    r->element[2]->integer == 1,
		                r->elements >= 4 && r->element[3]->type == REDIS_REPLY_INTEGER &&
		                    r->element[3]->integer == 1);
		wq_answer_tries_behind(w);
		return;
	}
	if (status == 0 && w->wait && w->end == WEND_NONE) {
		uint64_t now = timers_now();
		if (w->confirming) {
			/* A grant of it waits for confirmation: the next heartbeat
			 * lists it now that its acquire is in. */
			w->wl->refreshed_at = 0;
			wq_wlock_arm(w->wl, now);
		}
		wq_wlock_arm(w->wl, now + (a > 0 && a < LOCK_SAFETY_NET_MS ? (uint64_t)a + 1 : LOCK_SAFETY_NET_MS));
		wq_answer_tries_behind(w);
		return;
	}
	if (status == 0 && w->wait) {
		wq_send_withdraw(w); /* ended while the acquire was on its way */
		return;
	}
	if (w->end != WEND_NONE) {
		wq_answer_end(w);
	} else if (status == 0) {
		server.stats.timeouts_total++;
		wq_answer_error(w, LB_E_TIMEOUT, "the lock is busy");
	} else if (status == -1) {
		wq_answer_error(w, LB_E_CONFLICT, NULL);
	} else {
		wq_answer_error(w, LB_E_LIMIT_EXCEEDED, "the lock's queue is full");
	}
	wq_finish_failed(w);
}

static void on_acquire_reply(const redisReply *r, void *priv)
{
	waiter_t *w = priv;
	wlock_t *wl = w->wl;
	char name[REQ_LOCK_MAX_BYTES];
	size_t len = wl->len;
	uint64_t serial = wl->serial;

	if (!wq_rounds()) {
		acquire_reply(r, w);
		return;
	}
	/* Rounds: the lock's next round may go now (wq_round_next says
	 * whether it may: a lost round set its time). */
	memcpy(name, wl->name, len);
	acquire_reply(r, w);
	wl = wq_wlock_find(name, len);
	if (wl && wl->serial == serial)
		wq_wlock_arm(wl, timers_now());
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
		wq_waiter_free(w);
		return;
	}
	w->state = W_QUEUED;
	if (store_reply_failed(r) && w->was_sent && w->wait && w->end == WEND_NONE) {
		/* Stored again for a waiter queued again: it waits on, and the
		 * next heartbeat tries again. */
		w->unsent = true;
		wq_wlock_arm(w->wl, timers_now() + LOCK_SAFETY_NET_MS);
		return;
	}
	if (store_reply_failed(r)) {
		if (w->end == WEND_NONE)
			wq_answer_error(w, LB_E_UNAVAILABLE, "Redis did not answer the request");
		else
			wq_answer_end(w);
		wq_finish_failed(w);
		return;
	}
	w->pointer_set = true;
	w->pointer_at = w->sent_at;
	if (w->end != WEND_NONE) {
		wq_answer_end(w);
		wq_finish_failed(w);
		return;
	}
	wq_waiter_send(w);
}

/* Sends w's acquire, or holds it (see ACQUIRE_INFLIGHT_MAX) behind the
 * lock's other held waiters. */
void wq_waiter_send(waiter_t *w)
{
	wlock_t *wl = w->wl;

	REQUIRE(!w->held);
	if (wq_rounds() && w->wait && !wq_round_may_send(w)) {
		w->state = W_QUEUED;
		w->unsent = true;
		wq_wlock_arm(wl, wl->round_not_before > timers_now() ? wl->round_not_before
		                                                      : timers_now() + LOCK_SAFETY_NET_MS);
		return;
	}
	/* A try goes out at once: it answers now and queues nothing, so it
	 * holds up no other broker's wake-up, and held it could wait for a
	 * burst of others to be answered first. */
	if ((w->detach && !w->pointer_set) || !w->wait || wq_rounds() ||
	    (wl->acq_inflight < ACQUIRE_INFLIGHT_MAX && !wl->held_head)) {
		wq_waiter_send_now(w);
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

		wq_held_unlink(w);
		w->unsent = true;
	}
	wq_wlock_arm(wl, timers_now() + LOCK_SAFETY_NET_MS);
}

/* An acquire of wl came back: the oldest held waiters go out. */
static void send_held(wlock_t *wl)
{
	while (wl->held_head && wl->acq_inflight < ACQUIRE_INFLIGHT_MAX) {
		waiter_t *w = wl->held_head;

		wq_held_unlink(w);
		wq_waiter_send_now(w);
	}
}

/* Sends w's acquire (for a detached one, its token -> name pointer first:
 * the token must be usable on any broker the moment the client learns it;
 * the pointer names the lock only and expires by itself). */
void wq_waiter_send_now(waiter_t *w)
{
	client_t *s = w->s;
	lockscript_t ls;
	int rc;

	/* Rounds: every round has its own token. What a lost round left on a
	 * node is given back by token (the store undoes a grant that comes
	 * after the round was lost), and that must never take back the grant
	 * of a later round that won. A detached waiter stores the new token's
	 * pointer first. */
	if (wq_rounds() && w->was_sent && !w->round_token_new) {
		wq_waiter_new_token(w);
		w->round_token_new = true;
		w->pointer_set = false;
	}

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
		lockscript_str(&ls, wq_rounds() ? (w->wait ? "r" : "R") : w->wait ? "1" : "0");
		lockscript_str(&ls, w->fair ? "1" : "0");
		lockscript_int(&ls, server.cfg->max_queue);
		if (wq_rounds() && w->wait)
			lockscript_int(&ls, (int64_t)wq_round_waiting(w->wl)); /* inspect counts them */
		else
			lockscript_str(&ls, "1"); /* read with 'r' only */
		lockscript_arg(&ls, w->value ? w->value : "", w->value_len);
		lockscript_int(&ls, w->lock_delay_ms);
		/* A try is repeatable (the script knows its id): after a lost
		 * reply it is sent again for a while. A waiting acquire is
		 * resent by its lock's heartbeat instead. */
		if (!w->wait)
			lockscript_retry_until(&ls, w->sent_at + TRY_RESOLVE_MS);
		else /* worth waiting for (a slot on the move) while it waits */
			lockscript_deadline(&ls, timer_active(&w->deadline) &&
			                                 w->deadline.node.deadline < w->sent_at + LOCK_HEARTBEAT_MS
			                             ? w->deadline.node.deadline
			                             : w->sent_at + LOCK_HEARTBEAT_MS);
		rc = lockscript_send(&ls, SCRIPT_ACQUIRE, on_acquire_reply, w);
		if (rc == 0) {
			w->wl->acq_inflight++;
			w->was_sent = true;
		}
		if (wq_rounds()) {
			/* Refused as a whole, it may still have gone to some
			 * nodes (undone there): the token is spent either way. */
			w->was_sent = true;
			w->round_token_new = false;
		}
	}
	if (rc == 0)
		return;
	client_op_end(s);
	w->state = W_QUEUED;
	if (w->wait && w->end == WEND_NONE) {
		retry_at_safety_net(w); /* waits on; the next heartbeat tries again */
		return;
	}
	if (w->end == WEND_NONE)
		wq_answer_error(w, LB_E_UNAVAILABLE, "Redis is not reachable");
	else
		wq_answer_end(w);
	wq_finish_failed(w);
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
		if (r->element[k + 1]->integer > server.fence_high)
			server.fence_high = r->element[k + 1]->integer; /* given or given back */
		w = wq_waiter_find(id->str, id->len);
		if (!w && (lease_find(id->str, id->len) ||
		           lease_granted_detached_lately(id->str, id->len)))
			continue; /* reported again (a heartbeat sent before the grant's
			           * reply came back): it is a lease here already, or
			           * one granted detached, in no table */
		if (!w) {
			/* A grant nobody here waits for: give it back. */
			char token[LEASE_TOKEN_LEN + 1];
			memcpy(token, id->str, LEASE_TOKEN_LEN);
			token[LEASE_TOKEN_LEN] = '\0';
			int64_t ttl = r->element[k + 2]->integer;
			/* Its acquire's reply never reached this broker (else a
			 * waiter would wait for it here): a copy may run late. */
			lease_release_in_redis(lock, lock_len, token,
			                       sent_at + (uint64_t)(ttl > 0 ? ttl : 0) + LEASE_RELEASE_SLACK_MS,
			                       true);
			continue;
		}
		if (w->state == W_DONE)
			continue; /* answered already; its own reply frees it */
		if (w->state == W_WITHDRAWING)
			continue; /* its withdraw, sent later, gives it back */
		if (!store_replicated() && !w->confirming && w->end == WEND_NONE &&
		    client_open(w->s) && (w->state == W_QUEUED || w->state == W_SENDING)) {
			/* Granted by a call whose writes no replica acknowledged
			 * (a quiet release goes without WAIT: lease.c): the lock's
			 * next heartbeat, WAITed, lists w and reports the grant
			 * again; answered then, or given back if that one is not
			 * acknowledged either (grant_to). */
			w->confirming = true;
			w->wl->refreshed_at = 0;
			wq_wlock_arm(w->wl, timers_now());
			continue;
		}
		grant_to(w, r->element[k + 1]->integer, r->element[k + 2]->integer,
		         r->element[k + 3]->integer, sent_at, false);
	}
}
