/*
 * watch.c - watched locks (see watch.h): one watched_t per lock name that
 * a session of this broker watches, with its watches; the reads that mark
 * this broker as a watcher in Redis and show the lock; the `changed`
 * events.
 *
 * A watched_t lives while it has watches; one whose last watch ended
 * while a read was on its way is marked dead and freed by that read's
 * callback (its name is then out of the table, so a new watch of the
 * name makes a new one).
 */
#include "broker/locks/watch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/locks/client.h"
#include "broker/locks/lockops.h"
#include "broker/store/lockscript.h"
#include "broker/store/store.h"
#include "protocol/resp.h"

typedef struct watched watched_t;

typedef struct watch {
	watched_t *wd;
	client_t *s;
	struct watch *prev, *next;     /* the lock's watches */
	struct watch *s_prev, *s_next; /* the session's */
	char id[24];
	json_t *req_id;     /* own reference until the watch is answered */
	uint64_t from_read; /* the first read of the lock that may answer it */
	bool answered;
	bool has_fence;
	int64_t fence; /* the highest fence it was shown */
} watch_t;

struct watched {
	htab_node_t by_name;
	char *name;
	size_t len;
	watch_t *head;
	size_t n;
	json_t *shown; /* the last state read, without the holders' ttl_ms */
	timer_ent_t timer;
	uint64_t reads; /* reads sent; the one on its way is number `reads` */
	bool reading;   /* a read is on its way */
	bool again;     /* read once more when it is back */
	bool fresh;     /* the next read goes to every watch, changed or not */
	bool dead;      /* no watch left: freed when its read is back */
};

static struct {
	htab_t locks;
	uint64_t ids;
} W;

static bool name_match(const htab_node_t *n, const void *key)
{
	const watched_t *wd = (const watched_t *)((const char *)n - offsetof(watched_t, by_name));
	const lb_str_t *k = key;

	return wd->len == k->len && memcmp(wd->name, k->ptr, k->len) == 0;
}

static watched_t *find(const char *name, size_t len)
{
	lb_str_t key = {name, len};
	htab_node_t *n = htab_find(&W.locks, htab_hash(HTAB_HASH_INIT, name, len), name_match, &key);

	return n ? (watched_t *)((char *)n - offsetof(watched_t, by_name)) : NULL;
}

static void watched_free(watched_t *wd)
{
	timer_cancel(&wd->timer);
	json_decref(wd->shown);
	free(wd->name);
	free(wd);
}

static void read_now(watched_t *wd);

static void on_timer(timer_ent_t *t)
{
	read_now((watched_t *)((char *)t - offsetof(watched_t, timer)));
}

static watched_t *get(const char *name, size_t len)
{
	watched_t *wd = find(name, len);

	if (wd)
		return wd;
	wd = xcalloc(1, sizeof(*wd));
	wd->name = xstrndup(name, len);
	wd->len = len;
	timer_init(&wd->timer, on_timer);
	htab_insert(&W.locks, &wd->by_name, htab_hash(HTAB_HASH_INIT, name, len));
	return wd;
}

/* ---- answers and events ------------------------------------------------ */

/* The state as watch w may be shown it: a fence below one it was shown
 * (a failover to a replica behind on fences) shows that one, the highest
 * this lock is known to have issued; null (Redis lost the lock's data) is
 * shown as is. Returns a new reference. */
static json_t *state_for(watch_t *w, const json_t *state, const resp_inspect_t *in)
{
	json_t *out = json_incref((json_t *)state);

	if (in->has_fence && w->has_fence && in->fence < w->fence) {
		json_decref(out);
		out = json_deep_copy(state);
		json_object_set_new(out, "fence", json_integer(w->fence));
	} else if (in->has_fence) {
		w->has_fence = true;
		w->fence = in->fence;
	}
	return out;
}

static void answer(watch_t *w, json_t *msg)
{
	client_answer(w->s, w->req_id, msg);
	json_decref(w->req_id);
	w->req_id = NULL;
	w->answered = true;
	client_op_end(w->s);
}

static void unlink_watch(watch_t *w)
{
	watched_t *wd = w->wd;
	client_t *s = w->s;

	if (w->prev)
		w->prev->next = w->next;
	else
		wd->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	if (w->s_prev)
		w->s_prev->s_next = w->s_next;
	else
		s->watches = w->s_next;
	if (w->s_next)
		w->s_next->s_prev = w->s_prev;
	s->nwatches--;
	wd->n--;
}

static void on_unmarked(const redisReply *r, void *priv)
{
	(void)r;
	(void)priv;
}

/* No watch is left on wd: this broker's mark goes (it would end within
 * WATCH_MARK_MS anyway) and wd is forgotten. */
static void forget(watched_t *wd)
{
	lockscript_t ls;

	htab_remove(&W.locks, &wd->by_name);
	timer_cancel(&wd->timer);
	lockscript_begin(&ls, wd->name, wd->len, LOCK_NKEYS, true);
	lockscript_str(&ls, store_notice_channel());
	lockscript_int(&ls, 0);
	(void)lockscript_send(&ls, SCRIPT_INSPECT, on_unmarked, NULL);
	if (wd->reading)
		wd->dead = true;
	else
		watched_free(wd);
}

static void end_watch(watch_t *w)
{
	watched_t *wd = w->wd;

	unlink_watch(w);
	if (!w->answered) {
		json_decref(w->req_id);
		client_op_end(w->s);
	}
	free(w);
	if (wd->n == 0)
		forget(wd);
}

/* The watches a read sent as number `serial` may answer, when it failed. */
static void fail_waiting(watched_t *wd, uint64_t serial, lb_err_t code, const char *why)
{
	watch_t *w = wd->head;

	while (w) {
		watch_t *next = w->next;
		if (!w->answered && w->from_read <= serial) {
			client_send_error(w->s, w->req_id, code, why);
			w->answered = true; /* its answer is sent: end_watch ends its op */
			json_decref(w->req_id);
			w->req_id = NULL;
			client_op_end(w->s);
			unlink_watch(w);
			free(w);
		}
		w = next;
	}
	if (wd->n == 0)
		forget(wd);
}

/* The state without what changes by itself (the holders' ttl_ms). */
static json_t *comparable(const json_t *state)
{
	json_t *c = json_deep_copy(state);
	json_t *holders = json_object_get(c, "holders");
	size_t k;
	json_t *h;

	json_array_foreach(holders, k, h)
		json_object_del(h, "ttl_ms");
	return c;
}

/* When to read again: the safety net, or just after the first holder's
 * TTL or the lock delay runs out (nobody tells of either). */
static uint64_t next_read(const resp_inspect_t *in, uint64_t now)
{
	uint64_t at = now + WATCH_SAFETY_MS;

	if (in->delay_ms > 0 && now + (uint64_t)in->delay_ms + 5 < at)
		at = now + (uint64_t)in->delay_ms + 5;
	for (size_t k = 0; k < in->nholders; k++) {
		int64_t t = in->holders[k].ttl_ms;
		if (t >= 0 && now + (uint64_t)t + 5 < at)
			at = now + (uint64_t)t + 5;
	}
	return at;
}

static void on_read(const redisReply *r, void *priv)
{
	watched_t *wd = priv;
	uint64_t serial = wd->reads;
	resp_inspect_t in = {0};
	json_t *state, *cmp;
	bool changed;

	wd->reading = false;
	if (wd->dead) {
		watched_free(wd);
		return;
	}
	if (store_reply_failed(r) || !lockops_read_inspect(r, &in)) {
		LOG(LOG_WARN, "msg=\"watch: the lock could not be read\" error=\"%s\"",
		    store_reply_failed(r) ? (r ? r->str : "no reply") : "unexpected reply");
		timer_at(&wd->timer, timers_now() + WATCH_SAFETY_MS);
		fail_waiting(wd, serial, store_reply_failed(r) ? LB_E_UNAVAILABLE : LB_E_INTERNAL,
		             !r ? "Redis is not reachable"
		             : store_reply_failed(r) ? "Redis answered the read with an error"
		                                     : "unexpected reply from Redis");
		return; /* wd may be gone */
	}
	in.lock = (lb_str_t){wd->name, wd->len};
	state = resp_lock_state(&in);
	cmp = comparable(state);
	changed = !wd->shown || !json_equal(cmp, wd->shown);
	for (watch_t *w = wd->head; w; w = w->next) {
		json_t *st;
		if (!w->answered) {
			if (w->from_read > serial)
				continue; /* sent before it started: the next read answers it */
			st = state_for(w, state, &in);
			answer(w, resp_watched(w->req_id, w->id, st));
			json_decref(st);
		} else if (changed || wd->fresh) {
			st = state_for(w, state, &in);
			client_send(w->s, resp_event_changed(w->id, st));
			json_decref(st);
		}
	}
	json_decref(wd->shown);
	wd->shown = cmp;
	wd->fresh = false;
	timer_at(&wd->timer, next_read(&in, timers_now()));
	json_decref(state);
	free((void *)in.holders);
	if (wd->again) {
		wd->again = false;
		read_now(wd);
	}
}

/* Reads the lock (and renews this broker's mark), unless a read is on its
 * way: then once more after it. */
static void read_now(watched_t *wd)
{
	lockscript_t ls;

	if (wd->reading) {
		wd->again = true;
		return;
	}
	lockscript_begin(&ls, wd->name, wd->len, LOCK_NKEYS, true);
	lockscript_str(&ls, store_notice_channel());
	lockscript_int(&ls, WATCH_MARK_MS);
	/* A read is repeatable: it waits a while for a connection (one
	 * coming up, a failover) and is sent again after a lost reply. */
	lockscript_retry_until(&ls, timers_now() + WATCH_MARK_MS);
	lockscript_deadline(&ls, timers_now() + WATCH_MARK_MS);
	wd->reads++;
	if (lockscript_send(&ls, SCRIPT_INSPECT, on_read, wd) < 0) {
		timer_at(&wd->timer, timers_now() + WATCH_SAFETY_MS);
		fail_waiting(wd, wd->reads, LB_E_UNAVAILABLE, "Redis is not reachable");
		return;
	}
	wd->reading = true;
	timer_cancel(&wd->timer); /* set again when it is back */
}

/* ---- the ops ----------------------------------------------------------- */

void watch_start(client_t *s, req_t *req)
{
	const lb_str_t *lock = &req->u.watch.lock;
	watched_t *wd;
	watch_t *w;

	if ((int64_t)s->nwatches >= server.cfg->max_watches_per_session) {
		client_send_error(s, req->id, LB_E_LIMIT_EXCEEDED, "too many watches in this session");
		return;
	}
	wd = get(lock->ptr, lock->len);
	w = xcalloc(1, sizeof(*w));
	w->wd = wd;
	w->s = s;
	snprintf(w->id, sizeof(w->id), "w%" PRIu64, ++W.ids);
	w->req_id = req->id ? json_incref(req->id) : NULL;
	w->from_read = wd->reads + 1;
	w->next = wd->head;
	if (wd->head)
		wd->head->prev = w;
	wd->head = w;
	wd->n++;
	w->s_next = s->watches;
	if (s->watches)
		s->watches->s_prev = w;
	s->watches = w;
	s->nwatches++;
	client_op_begin(s);
	read_now(wd);
}

void watch_stop(client_t *s, req_t *req)
{
	const lb_str_t *id = &req->u.unwatch.watch;

	for (watch_t *w = s->watches; w; w = w->s_next) {
		if (w->answered && strlen(w->id) == id->len && memcmp(w->id, id->ptr, id->len) == 0) {
			end_watch(w);
			client_answer(s, req->id, resp_ok(req->id));
			return;
		}
	}
	client_send_error(s, req->id, LB_E_NOT_HELD, "no such watch in this session");
}

void watch_client_end(client_t *s)
{
	while (s->watches)
		end_watch(s->watches);
}

void watch_noticed(const char *name, size_t len)
{
	watched_t *wd = find(name, len);

	if (wd)
		read_now(wd);
}

void watch_read_all(bool fresh)
{
	watched_t **all;
	size_t n = 0;

	if (W.locks.count == 0)
		return;
	/* Collect first: a read that fails at once may end watches. */
	all = xcalloc(W.locks.count, sizeof(*all));
	for (size_t b = 0; b < W.locks.nbuckets; b++)
		for (htab_node_t *e = W.locks.buckets[b]; e; e = e->next)
			all[n++] = (watched_t *)((char *)e - offsetof(watched_t, by_name));
	for (size_t k = 0; k < n; k++) {
		all[k]->fresh = all[k]->fresh || fresh;
		read_now(all[k]);
	}
	free(all);
}

void watch_free(void)
{
	for (size_t b = 0; b < W.locks.nbuckets; b++) {
		htab_node_t *e = W.locks.buckets[b];
		while (e) {
			watched_t *wd = (watched_t *)((char *)e - offsetof(watched_t, by_name));
			e = e->next;
			while (wd->head) {
				watch_t *w = wd->head;
				wd->head = w->next;
				json_decref(w->req_id);
				free(w);
			}
			watched_free(wd);
		}
	}
	htab_free(&W.locks);
	memset(&W, 0, sizeof(W));
}
