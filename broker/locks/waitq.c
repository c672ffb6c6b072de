/*
 * waitq.c - waiters and wake-ups (see waitq.h), part one: the tables, the
 * life of a waiter (created, answered, ended, freed) and the API. The
 * states and the ownership rules are in waitq_int.h.
 */
#include "broker/locks/waitq.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/log.h"
#include "broker/base/random.h"
#include "broker/base/shared.h"
#include "broker/locks/holderkey.h"
#include "broker/locks/reentry.h"
#include "broker/locks/waitq_int.h"

struct waitq_state waitq;

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

waiter_t *wq_waiter_find(const char *id, size_t len)
{
	lb_str_t key = {id, len};
	htab_node_t *n = htab_find(&waitq.by_id, htab_hash(HTAB_HASH_INIT, id, len), id_match, &key);

	return n ? (waiter_t *)((char *)n - offsetof(waiter_t, by_id)) : NULL;
}

wlock_t *wq_wlock_find(const char *name, size_t len)
{
	lb_str_t key = {name, len};
	htab_node_t *n = htab_find(&waitq.locks, htab_hash(HTAB_HASH_INIT, name, len), name_match, &key);

	return n ? (wlock_t *)((char *)n - offsetof(wlock_t, by_name)) : NULL;
}

static void on_wlock_timer(timer_ent_t *t)
{
	wq_wlock_heartbeat((wlock_t *)((char *)t - offsetof(wlock_t, timer)));
}

static wlock_t *wlock_get(const char *name, size_t len)
{
	wlock_t *wl = wq_wlock_find(name, len);

	if (wl)
		return wl;
	wl = xcalloc(1, sizeof(*wl));
	wl->serial = ++waitq.serials;
	wl->name = xstrndup(name, len);
	wl->len = len;
	timer_init(&wl->timer, on_wlock_timer);
	htab_insert(&waitq.locks, &wl->by_name, htab_hash(HTAB_HASH_INIT, name, len));
	return wl;
}

/* The next heartbeat at `at`, unless one is due earlier already. */
void wq_wlock_arm(wlock_t *wl, uint64_t at)
{
	if (!timer_active(&wl->timer) || wl->timer.node.deadline > at)
		timer_at(&wl->timer, at);
}

static void holder_index_add(waiter_t *w)
{
	holder_key_t k = {w->s, w->wl->name, w->wl->len, w->owner, w->owner_len};

	htab_insert(&waitq.by_holder, &w->by_holder, holder_key_hash(&k));
	w->in_holder_index = true;
}

static void holder_index_remove(waiter_t *w)
{
	if (w->in_holder_index)
		htab_remove(&waitq.by_holder, &w->by_holder);
	w->in_holder_index = false;
}

static waiter_t *leader_find(const client_t *s, const lb_str_t *lock, const lb_str_t *owner)
{
	holder_key_t k = {s, lock->ptr, lock->len, owner->ptr, owner->len};
	htab_node_t *n = htab_find(&waitq.by_holder, holder_key_hash(&k), holder_match, &k);

	return n ? (waiter_t *)((char *)n - offsetof(waiter_t, by_holder)) : NULL;
}

/* ---- life of a waiter ---------------------------------------------------- */

static void on_deadline(timer_ent_t *t);

/* w no longer wants the lock (answered, ended): out of stats' count. */
static void unpend(waiter_t *w)
{
	if (w->pending) {
		waitq.pending--;
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
	if (a->value.ptr) {
		/* '=' V: lua/lib/prelude.lua tells an empty value from none so. */
		w->value_len = a->value.len + 1;
		w->value = xmalloc(w->value_len + 1);
		w->value[0] = '=';
		memcpy(w->value + 1, a->value.ptr, a->value.len);
		w->value[w->value_len] = '\0';
	}
	w->mode = a->mode;
	w->limit = a->limit;
	w->ttl_ms = ttl_ms;
	w->max_hold_ms = a->max_hold_ms;
	w->lock_delay_ms = a->lock_delay_ms;
	w->wait = a->wait_ms != 0;
	w->watchdog = a->watchdog;
	w->detach = a->detach;
	w->fair = a->fair;
	htab_insert(&waitq.by_id, &w->by_id, htab_hash(HTAB_HASH_INIT, w->id, LEASE_TOKEN_LEN));

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
	waitq.count++;
	waitq.pending++;
	w->pending = true;

	timer_init(&w->deadline, on_deadline);
	if (a->wait_ms > 0)
		timer_at(&w->deadline, timers_now() + (uint64_t)a->wait_ms);
	return w;
}

void wq_waiter_new_token(waiter_t *w)
{
	htab_remove(&waitq.by_id, &w->by_id);
	random_hex(w->id, LEASE_TOKEN_LEN / 2);
	htab_insert(&waitq.by_id, &w->by_id, htab_hash(HTAB_HASH_INIT, w->id, LEASE_TOKEN_LEN));
}

void wq_held_unlink(waiter_t *w)
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

void wq_waiter_free(waiter_t *w)
{
	wlock_t *wl = w->wl;
	client_t *s = w->s;

	timer_cancel(&w->deadline);
	unpend(w);
	holder_index_remove(w);
	wq_held_unlink(w);
	htab_remove(&waitq.by_id, &w->by_id);

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
		htab_remove(&waitq.locks, &wl->by_name);
		free(wl->name);
		free(wl);
	}

	if (w->s_prev)
		w->s_prev->s_next = w->s_next;
	else
		s->waiters = w->s_next;
	if (w->s_next)
		w->s_next->s_prev = w->s_prev;
	waitq.count--;

	json_decref(w->req_id);
	free(w->owner);
	free(w->value);
	free(w);
	client_unref(s);
}

/* w is answered, but a script that carries it is still on its way: it
 * waits for that reply only, out of every index a new request looks in. */
void wq_set_done(waiter_t *w)
{
	w->state = W_DONE;
	unpend(w);
	holder_index_remove(w);
	timer_cancel(&w->deadline);
}

/* Answers w's acquire with an error, and counts it. */
void wq_answer_error(waiter_t *w, lb_err_t code, const char *message)
{
	counters_acquire(code, timers_now() - w->created_at);
	client_send_error(w->s, w->req_id, code, message);
}

/* The answer of a waiter that stopped wanting the lock. */
void wq_answer_end(waiter_t *w)
{
	switch (w->end) {
	case WEND_TIMEOUT:
		server.stats.timeouts_total++;
		wq_answer_error(w, LB_E_TIMEOUT, NULL);
		break;
	case WEND_CANCELLED:
		wq_answer_error(w, LB_E_CANCELLED, NULL);
		break;
	case WEND_SHUTDOWN:
		wq_answer_error(w, LB_E_SHUTTING_DOWN, NULL);
		break;
	case WEND_NONE:
	case WEND_GONE:
		break;
	}
}

/* lead's acquire came back without a grant and it waits on (queued in
 * Redis, or to be sent again): a try chained behind it answers now, busy. */
void wq_answer_tries_behind(waiter_t *lead)
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
		wq_answer_error(f, LB_E_TIMEOUT, "the lock is busy (this session's own acquire of it is waiting)");
		wq_waiter_free(f);
	}
}

/* w ends without a lease (answered already): the first acquire chained
 * behind it goes on as an acquire of its own, the others behind that one. */
void wq_finish_failed(waiter_t *w)
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
		wq_set_done(w); /* its reply frees it */
	else
		wq_waiter_free(w);
	if (lead) {
		holder_index_add(lead);
		wq_waiter_send(lead);
	}
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
		wq_answer_end(w);
		wq_waiter_free(w);
		break;
	}
	case W_QUEUED:
		if (w->held && !w->was_sent) { /* nothing of it is in Redis */
			wq_answer_end(w);
			wq_finish_failed(w);
		} else if (w->unsent || w->held) {
			wq_answer_end(w);
			wq_withdraw_quietly(w); /* an earlier send may have queued it */
			wq_finish_failed(w);
		} else {
			wq_send_withdraw(w);
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
	if ((int64_t)waitq.pending >= cfg->max_waiters) {
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
	wq_waiter_send(w);
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

size_t waitq_count(void)
{
	return waitq.pending;
}

void waitq_foreach_pending(void (*fn)(const waitq_view_t *v, void *arg), void *arg)
{
	for (size_t b = 0; b < waitq.locks.nbuckets; b++) {
		for (htab_node_t *e = waitq.locks.buckets[b]; e; e = e->next) {
			const wlock_t *wl = (const wlock_t *)((const char *)e - offsetof(wlock_t, by_name));
			for (const waiter_t *w = wl->head; w; w = w->wl_next) {
				waitq_view_t v = {wl->name, wl->len, w->s, w->mode, w->created_at};
				if (w->pending)
					fn(&v, arg);
			}
		}
	}
}

void waitq_free(void)
{
	FAILS_ASSERT(waitq.count == 0);
	htab_free(&waitq.by_id);
	htab_free(&waitq.by_holder);
	htab_free(&waitq.locks);
}
