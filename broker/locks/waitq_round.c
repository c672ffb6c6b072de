/*
 * waitq_round.c - waiters, the rounds strategy: how a waiter waits when the
 * store keeps nothing of it (store_caps: STORE_WAIT_ROUNDS). Each acquire
 * is a round of its own; a lost round leaves its waiter QUEUED and
 * `unsent`, and the lock's next round (one at a time per lock from this
 * broker, its oldest waiter first) goes on a wake from a release, at the
 * holder's expiry plus a jitter, after a random backoff that grows with
 * the losses when the vote split, and at least once per safety-net
 * interval. The queued strategy (heartbeats) is waitq_wake.c's. See
 * waitq_int.h.
 */
#include "broker/locks/waitq.h"

#include "broker/base/random.h"
#include "broker/locks/waitq_int.h"
#include "broker/store/lockscript.h"

/* A split vote backs off a random while below ROUND_BACKOFF_MS << losses
 * (at most << ROUND_BACKOFF_SHIFT_MAX); a lock held by another is tried
 * again at its holder's expiry plus up to ROUND_JITTER_MS, or on a wake. */
#define ROUND_BACKOFF_MS 4
#define ROUND_BACKOFF_SHIFT_MAX 5
#define ROUND_JITTER_MS 5
/* Rounds in a row that got a grant and lost before the next backs off:
 * one such loss is most often a rival that won (it holds the others). */
#define ROUND_SPLITS_BACK_OFF 3

void wq_round_lost(waiter_t *w, int64_t hint, bool fresh, bool split)
{
	wlock_t *wl = w->wl;
	uint64_t now = timers_now(), at;

	w->unsent = true;
	wl->round_splits = split ? wl->round_splits + 1 : 0;
	if (hint <= 0 || wl->round_splits >= ROUND_SPLITS_BACK_OFF) {
		/* The vote split: a quorum may be free now, or rounds that got
		 * a grant lost ROUND_SPLITS_BACK_OFF times in a row (its rivals'
		 * fresh grants look held, so their wakes would bring them all
		 * back together). A random while, growing with the losses, so
		 * that brokers woken together do not meet again. */
		unsigned k = hint <= 0 ? wl->round_losses++ : wl->round_splits - ROUND_SPLITS_BACK_OFF;
		unsigned shift = k < ROUND_BACKOFF_SHIFT_MAX ? k : ROUND_BACKOFF_SHIFT_MAX;
		at = now + 1 + random_below((uint32_t)ROUND_BACKOFF_MS << shift);
		wl->round_wakeable = false;
	} else {
		/* A node that refused it published a release since it went
		 * out: again at once. Else at the next wake, or the expiry. */
		at = fresh ? now : now + (uint64_t)hint + 1 + random_below(ROUND_JITTER_MS);
		wl->round_wakeable = true;
	}
	wl->hb_again = false;
	if (at > now + LOCK_SAFETY_NET_MS)
		at = now + LOCK_SAFETY_NET_MS;
	wl->round_not_before = at;
	timer_at(&wl->timer, at);
}

void wq_round_next(wlock_t *wl)
{
	uint64_t now = timers_now();
	bool woken = wl->round_woken || wl->hb_again;
	waiter_t *next = NULL;

	wl->round_woken = false;
	wl->hb_again = false;
	for (waiter_t *w = wl->head; w && !next; w = w->wl_next)
		if (w->state == W_QUEUED && w->unsent && w->end == WEND_NONE)
			next = w;
	if (!next)
		return;
	if (wl->acq_inflight > 0) {
		/* Its reply decides: a waiter's lost round says whether a wake
		 * meanwhile was news (the store's fresh) and drops this; after
		 * a try's, the next round takes it. */
		wl->hb_again = woken;
		return;
	}
	if (now < wl->round_not_before && !(woken && wl->round_wakeable)) {
		timer_at(&wl->timer, wl->round_not_before);
		return;
	}
	wl->round_not_before = 0;
	timer_at(&wl->timer, now + LOCK_SAFETY_NET_MS); /* the safety net */
	wq_waiter_send_now(next);
}

bool wq_round_may_send(const waiter_t *w)
{
	const wlock_t *wl = w->wl;

	if (wl->acq_inflight > 0 || timers_now() < wl->round_not_before)
		return false;
	for (const waiter_t *o = wl->head; o && o != w; o = o->wl_next)
		if (o->state == W_QUEUED && o->unsent && o->end == WEND_NONE)
			return false;
	return true;
}

size_t wq_round_waiting(const wlock_t *wl)
{
	size_t n = 0;

	for (const waiter_t *k = wl->head; k; k = k->wl_next)
		n += k->wait && k->end == WEND_NONE && k->state != W_DONE && !k->granted;
	return n;
}
