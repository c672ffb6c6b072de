/*
 * waitq_wake.c - waiters, part three: the wake-up path. A lock's heartbeat
 * runs on a message from Redis on the broker's inbox, at the holders'
 * expiry, and as the slow safety net (never a short poll); it refreshes
 * the waiters' deadlines, takes grants, and queues again the waiters Redis
 * lost. A wake for a lock with no waiter here drops this broker's orphans
 * there. See waitq_int.h.
 */
#include "broker/locks/waitq.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/locks/lockstat.h"
#include "broker/locks/waitq_int.h"
#include "broker/store/lockscript.h"

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
	wlock_t *wl = wq_wlock_find(hb->name, hb->len);

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
			wq_wlock_heartbeat(wl);
		}
		return;
	}
	retry_ms = r->element[0]->integer;
	nlost = r->element[1]->integer;
	waitq_take_grants(hb->name, hb->len, r, 2 + (size_t)nlost, hb->sent_at);
	for (int64_t k = 0; k < nlost; k++) {
		const redisReply *id = r->element[2 + k];
		waiter_t *w = id->type == REDIS_REPLY_STRING ? wq_waiter_find(id->str, id->len) : NULL;
		/* Dropped from the queue (Redis restarted empty, or this broker
		 * stalled past its heartbeat): queue it again, at the end (a
		 * detached one with its pointer, which went the same way). */
		if (w && w->state == W_QUEUED && w->end == WEND_NONE && !w->unsent && !w->held) {
			w->pointer_set = false;
			wq_waiter_send(w);
		}
	}
	wl = sender_of(hb);
	free(hb);
	if (!wl)
		return;
	if (retry_ms > 0 && retry_ms < LOCK_SAFETY_NET_MS)
		wq_wlock_arm(wl, timers_now() + (uint64_t)retry_ms + 1);
	if (wl->hb_again && wl->hb_inflight == 0) {
		wl->hb_again = false;
		wq_wlock_heartbeat(wl);
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
	/* Worth waiting for (a slot on the move) until the waiters' deadline. */
	lockscript_deadline(&ls, now + LOCK_HEARTBEAT_MS);
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
void wq_wlock_heartbeat(wlock_t *wl)
{
	const char *ids[HEARTBEAT_MAX_IDS];
	size_t n = 0, batches = 0;
	bool sending = false, queued = false;
	uint64_t now = timers_now();

	if (wq_rounds()) {
		wq_round_next(wl);
		return;
	}
	for (waiter_t *w = wl->head, *next; w; w = next) {
		next = w->wl_next;
		if (w->state == W_QUEUED && w->unsent && w->end == WEND_NONE) {
			/* Its acquire failed: Redis may have lost the detached
			 * one's pointer too (a restart), so that goes first. */
			w->pointer_set = false;
			wq_waiter_send(w); /* never frees wl: w stays in it */
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
				wq_wlock_arm(wl, now + LOCK_SAFETY_NET_MS);
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
			waiter_t *w = id->type == REDIS_REPLY_STRING ? wq_waiter_find(id->str, id->len) : NULL;
			/* Not an orphan: a waiter of ours whose acquire, sent after
			 * this script on another connection, ran before it. */
			if (w && w->state == W_QUEUED && w->end == WEND_NONE && !w->unsent && !w->held) {
				w->pointer_set = false;
				wq_waiter_send(w);
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
	wlock_t *wl = wq_wlock_find(name, len);

	if (wl) {
		lockstat_wake(name, len);
		wl->round_woken = true; /* rounds only: see wq_round_next */
		wq_wlock_heartbeat(wl);
	} else if (len > 0 && len <= REQ_LOCK_MAX_BYTES && !wq_rounds())
		drop_orphans(name, len);
}

void waitq_on_subscribed(void)
{
	/* Collect first: a heartbeat may end waiters and free wlocks. */
	wlock_t **all;
	size_t n = 0;

	if (waitq.locks.count == 0)
		return;
	all = xcalloc(waitq.locks.count, sizeof(*all));
	for (size_t b = 0; b < waitq.locks.nbuckets; b++) {
		for (htab_node_t *e = waitq.locks.buckets[b]; e; e = e->next)
			all[n++] = (wlock_t *)((char *)e - offsetof(wlock_t, by_name));
	}
	for (size_t k = 0; k < n; k++)
		wq_wlock_arm(all[k], timers_now());
	free(all);
}
