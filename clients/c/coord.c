/*
 * coord.c - coordination beyond the mutex (the broker's value, proclaim,
 * watch and acquire_all; issue 27): watches the client keeps across
 * sessions (lbc_watch, lbc_unwatch, and lbc_watches_resume, which lbc_poll
 * runs), leader election (lbc_campaign, lbc_resign, lbc_leader,
 * lbc_leader_of, lbc_observe) and lbc_lock_all.
 *
 * Watches. A kept watch (lbc_cwatch_t, client.c) is watched on at most one
 * session: its broker id (bid) is recorded by the reader with the watch's
 * answer, on that answer's session, so an event right behind the answer
 * already goes to the caller. When the session ends the watch stays in
 * the client's list; lbc_poll opens a new session and watches it again,
 * and the answer (the state read afresh) is handed over as one more
 * "changed". A watch unwatched while a (re)watch of it is in flight is
 * ended at the broker when that answer comes.
 *
 * A campaign is a waiting exclusive acquire with a value that goes on
 * through dropped connections, broker restarts and Redis outages (the
 * client's reconnect backoff, then a backoff of its own between tries);
 * it returns a lease that was not lost when it returned.
 */
#include "internal.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_REFUSED_MS 1000 /* a re-watch the broker refused: next try */
#define CAMPAIGN_BACKOFF_MIN_MS 100
#define CAMPAIGN_BACKOFF_MAX_MS 2000

/* ---- watches -------------------------------------------------------------------- */

/* Sends w's watch: the first (opening a session if need be), or a
 * re-watch on the current session (whose answer the reader queues as a
 * change, in line order). LBC_OK with an ok answer in p (line and doc);
 * the caller calls lbc_call_done(p) in every case. */
static lbc_status send_watch(lbc_client_t *c, lbc_cwatch_t *w, lbc_pending_t *p, bool rewatch,
                             lbc_error_t *err)
{
	lbc_jw_t jw;
	lbc_status st;

	lbc_pending_init(p, lbc_next_id(c));
	p->watch = w;
	p->want_line = true;
	p->rewatch = rewatch;
	p->no_connect = rewatch;
	lbc_jw_init(&jw);
	lbc_req_begin(&jw, p->id, "watch");
	lbc_jw_kstr(&jw, "lock", w->name);
	lbc_req_finish(&jw);
	st = lbc_call(c, p, &jw, lbc_request_timeout(c), NULL, err);
	lbc_jw_free(&jw);
	if (st == LBC_OK && !lbc_json_true(&p->doc, 0, "ok"))
		st = lbc_set_broker_error(err, &p->doc);
	return st;
}

/* Ends broker watch bid of session gen, best effort: a watch ends with
 * its session anyway (and on another session bid may name another). */
static void end_broker_watch(lbc_client_t *c, const char *bid, uint64_t gen)
{
	lbc_pending_t p;
	lbc_jw_t jw;

	lbc_pending_init(&p, lbc_next_id(c));
	p.no_connect = true;
	p.only_gen = gen;
	lbc_jw_init(&jw);
	lbc_req_begin(&jw, p.id, "unwatch");
	lbc_jw_kstr(&jw, "watch", bid);
	lbc_req_finish(&jw);
	(void)lbc_call(c, &p, &jw, lbc_request_timeout(c), NULL, NULL);
	lbc_jw_free(&jw);
	lbc_call_done(&p);
}

/* After w's (re)watch was answered ok: a watch unwatched meanwhile is
 * ended at the broker. Lock held; released and taken again for that. */
static void settle_unwatched_locked(lbc_client_t *c, lbc_cwatch_t *w)
{
	uint64_t gen = w->gen;
	char *bid;

	if ((w->linked && !w->ending) || w->bid == NULL || gen != lbc_session_gen_locked(c))
		return;
	bid = strdup(w->bid);
	if (bid == NULL)
		abort();
	lbc_unlock(c);
	end_broker_watch(c, bid, gen);
	free(bid);
	lbc_lock(c);
}

lbc_status lbc_watch(lbc_client_t *c, const char *name, lbc_lock_info_t **state,
                     char **watch_id, lbc_error_t *err)
{
	lbc_cwatch_t *w;
	lbc_pending_t p;
	lbc_status st;

	if (state)
		*state = NULL;
	if (watch_id)
		*watch_id = NULL;
	if (c == NULL || name == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_watch: NULL argument");
	if (!lbc_name_valid(name))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "the lock name must be 1..512 bytes of UTF-8 without control characters");
	lbc_lock(c);
	w = lbc_cwatch_new_locked(c, name);
	lbc_unlock(c);
	st = send_watch(c, w, &p, false, err);
	lbc_lock(c);
	w->inflight = false;
	if (st != LBC_OK) {
		/* not watched: not kept either */
		lbc_cwatch_unlink_locked(c, w);
	} else {
		settle_unwatched_locked(c, w);
		if (watch_id && (*watch_id = strdup(w->id)) == NULL)
			abort();
		if (state)
			*state = lbc_lock_info_from(&p.doc, 0);
	}
	lbc_cwatch_put_locked(w);
	lbc_unlock(c);
	lbc_call_done(&p);
	return st;
}

lbc_status lbc_unwatch(lbc_client_t *c, const char *watch_id, lbc_error_t *err)
{
	lbc_cwatch_t *w;
	uint64_t gen = 0;
	char *bid = NULL;

	if (c == NULL || watch_id == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_unwatch: NULL argument");
	lbc_lock(c);
	w = lbc_cwatch_find_locked(c, watch_id);
	if (w == NULL) {
		lbc_unlock(c);
		return lbc_set_error(err, LBC_NOT_HELD, "no such watch (unwatched already?)");
	}
	/* its events are dropped from now on (it is still found by its broker
	 * id until the broker ended it); one in flight is ended by the taker
	 * of its answer (settle_unwatched_locked) */
	w->ending = true;
	if (!w->inflight && w->bid && w->gen == lbc_session_gen_locked(c)) {
		gen = w->gen;
		if ((bid = strdup(w->bid)) == NULL)
			abort();
	}
	w->refs++;
	lbc_unlock(c);
	if (bid) {
		end_broker_watch(c, bid, gen);
		free(bid);
	}
	lbc_lock(c);
	lbc_cwatch_unlink_locked(c, w);
	lbc_cwatch_put_locked(w);
	lbc_unlock(c);
	return LBC_OK;
}

void lbc_watches_resume(lbc_client_t *c, int64_t deadline)
{
	lbc_cwatch_t *w;
	bool first = true;

	lbc_lock(c);
	if (!lbc_has_watches_locked(c) || !lbc_session_wait_locked(c, deadline)) {
		lbc_unlock(c);
		return;
	}
	/* one at least, then while the caller's time lasts */
	while ((first || deadline < 0 || lbc_now_ms() < deadline) &&
	       (w = lbc_cwatch_stale_locked(c)) != NULL) {
		uint64_t gen = lbc_session_gen_locked(c);
		lbc_pending_t p;
		lbc_status st;

		first = false;
		lbc_unlock(c);
		st = send_watch(c, w, &p, true, NULL);
		lbc_lock(c);
		w->inflight = false;
		if (st == LBC_OK)
			settle_unwatched_locked(c, w); /* unwatched meanwhile */
		/* refused, or an answer without a watch id: not again at once */
		if (st != LBC_DISCONNECTED && w->gen != gen)
			w->retry_at = lbc_now_ms() + RETRY_REFUSED_MS;
		lbc_cwatch_put_locked(w);
		lbc_call_done(&p);
		if (st != LBC_OK)
			break; /* the next lbc_poll tries again */
	}
	lbc_unlock(c);
}

/* ---- leader election ----------------------------------------------------------------- */

/* Sleeps ms, or less when cancel fires; true when it fired. */
static bool sleep_or_cancel(lbc_cancel_t *cancel, int64_t ms)
{
	struct pollfd p = {.fd = cancel ? lbc_cancel_rfd(cancel) : -1, .events = POLLIN};

	if (ms > 0)
		(void)poll(&p, 1, (int)ms);
	return lbc_cancel_fired(cancel);
}

static bool campaign_retries(lbc_status st)
{
	return st == LBC_DISCONNECTED || st == LBC_UNAVAILABLE || st == LBC_SHUTTING_DOWN;
}

lbc_status lbc_campaign(lbc_client_t *c, const char *name, const char *value,
                        const lbc_acquire_opts_t *opts, lbc_lease_t **term, lbc_error_t *err)
{
	lbc_acquire_opts_t o = {0};
	int64_t deadline, backoff = 0;

	if (term == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_campaign: term is NULL");
	*term = NULL;
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_campaign: NULL client");
	if (opts)
		o = *opts;
	if (o.mode != LBC_EXCLUSIVE || o.limit != 0 || o.value != NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "an election is an exclusive lock: leave mode, limit and value "
		                     "of the options at 0 (the value is lbc_campaign's argument)");
	if (value && strlen(value) > LBC_VALUE_MAX)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "the value is longer than 4096 bytes");
	o.value = value;
	deadline = o.wait_ms > 0 ? lbc_now_ms() + o.wait_ms : -1;
	for (;;) {
		lbc_status st;

		if (deadline >= 0) {
			int64_t left = deadline - lbc_now_ms();
			if (left <= 0)
				return lbc_set_error(err, LBC_TIMEOUT, "the campaign did not win within wait_ms");
			o.wait_ms = left;
		}
		st = lbc_acquire(c, name, &o, term, err);
		if (st == LBC_OK && !lbc_lease_lost(*term))
			return LBC_OK;
		if (st == LBC_OK) { /* lost before it could be used: stand again */
			lbc_lease_free(*term);
			*term = NULL;
			continue;
		}
		if (!campaign_retries(st) || o.wait_ms == LBC_NO_WAIT)
			return st;
		backoff = backoff ? (backoff * 2 > CAMPAIGN_BACKOFF_MAX_MS ? CAMPAIGN_BACKOFF_MAX_MS
		                                                       : backoff * 2)
		                  : CAMPAIGN_BACKOFF_MIN_MS;
		int64_t nap = backoff;
		if (deadline >= 0 && deadline - lbc_now_ms() < nap)
			nap = deadline - lbc_now_ms();
		if (sleep_or_cancel(o.cancel, nap))
			return lbc_set_error(err, LBC_CANCELLED, "the campaign was cancelled");
	}
}

lbc_status lbc_resign(lbc_client_t *c, lbc_lease_t *term, lbc_error_t *err)
{
	return lbc_release(c, term, NULL, err);
}

bool lbc_leader_of(const lbc_lock_info_t *info, lbc_leader_t *out)
{
	if (out == NULL)
		return false;
	memset(out, 0, sizeof(*out));
	if (info == NULL || strcmp(info->state, "exclusive") != 0 || info->n_holders == 0)
		return false;
	out->leading = true;
	out->term = info->has_fence ? info->fence : 0;
	if (info->holders[0].value) {
		out->has_value = true;
		snprintf(out->value, sizeof(out->value), "%s", info->holders[0].value);
	}
	if (info->holders[0].client)
		snprintf(out->client, sizeof(out->client), "%s", info->holders[0].client);
	return true;
}

lbc_status lbc_leader(lbc_client_t *c, const char *name, lbc_leader_t *out, lbc_error_t *err)
{
	lbc_lock_info_t *info;
	lbc_status st;

	if (out == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_leader: out is NULL");
	memset(out, 0, sizeof(*out));
	if ((st = lbc_inspect(c, name, &info, err)) != LBC_OK)
		return st;
	(void)lbc_leader_of(info, out);
	lbc_lock_info_free(info);
	return LBC_OK;
}

lbc_status lbc_observe(lbc_client_t *c, const char *name, lbc_leader_t *now, char **watch_id,
                       lbc_error_t *err)
{
	lbc_lock_info_t *info;
	lbc_status st;

	if (now)
		memset(now, 0, sizeof(*now));
	if ((st = lbc_watch(c, name, &info, watch_id, err)) != LBC_OK)
		return st;
	(void)lbc_leader_of(info, now);
	lbc_lock_info_free(info);
	return LBC_OK;
}

/* ---- all or nothing ------------------------------------------------------------------- */

static void release_all(lbc_client_t *c, lbc_lease_t **all, size_t n)
{
	for (size_t i = 0; i < n; i++)
		(void)lbc_release(c, all[i], NULL, NULL);
}

lbc_status lbc_lock_all(lbc_client_t *c, const lbc_lock_spec_t *locks, size_t n,
                        const lbc_acquire_opts_t *opts, lbc_lease_t **out, lbc_error_t *err)
{
	lbc_acquire_opts_t o = {0};
	char owner[LBC_OWNER_MAX + 1];
	lbc_pending_t p;
	lbc_jw_t w;
	lbc_status st;

	if (out == NULL || locks == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_lock_all: NULL argument");
	if (n == 0 || n > LBC_LOCK_ALL_MAX)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_lock_all takes 1..64 locks");
	for (size_t i = 0; i < n; i++)
		out[i] = NULL;
	if (opts)
		o = *opts;
	if (o.value != NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "acquire_all takes no value");
	o.mode = LBC_EXCLUSIVE; /* per lock, in locks[] */
	o.limit = 0;
	for (size_t i = 0; i < n; i++) {
		const lbc_lock_spec_t *s = &locks[i];
		if (!lbc_name_valid(s->name))
			return lbc_set_errorf(err, LBC_INVALID_ARGUMENT,
			                      "lock %zu: the name must be 1..512 bytes of UTF-8 without control characters",
			                      i);
		if ((s->mode != LBC_EXCLUSIVE && s->mode != LBC_SHARED) || s->limit < 0 ||
		    (s->limit > 0 && s->mode == LBC_SHARED))
			return lbc_set_errorf(err, LBC_INVALID_ARGUMENT,
			                      "lock %zu: mode must be LBC_EXCLUSIVE or LBC_SHARED, limit >= 0, "
			                      "and a semaphore (limit) has no shared mode",
			                      i);
	}
	if ((st = lbc_acquire_opts_check(c, &o, owner, sizeof(owner), err)) != LBC_OK)
		return st;
	if (!o.detach && (st = lbc_liveness_start(c, err)) != LBC_OK)
		return st;

	lbc_pending_init(&p, lbc_next_id(c));
	p.is_acquire_all = true;
	p.lease_detached = o.detach;
	lbc_jw_init(&w);
	lbc_req_begin(&w, p.id, "acquire_all");
	lbc_jw_key(&w, "locks");
	lbc_jw_raw(&w, "[", 1);
	for (size_t i = 0; i < n; i++) {
		lbc_jw_raw(&w, i ? ",{" : "{", i ? 2 : 1);
		lbc_jw_kstr(&w, "lock", locks[i].name);
		if (locks[i].mode == LBC_SHARED)
			lbc_jw_kstr(&w, "mode", "shared");
		if (locks[i].limit > 0)
			lbc_jw_kint(&w, "limit", locks[i].limit);
		lbc_jw_raw(&w, "}", 1);
	}
	lbc_jw_raw(&w, "]", 1);
	lbc_acquire_opts_write(&w, &o, owner);
	lbc_req_finish(&w);

	st = lbc_call(c, &p, &w, lbc_acquire_timeout(c, o.wait_ms), o.cancel, err);
	lbc_jw_free(&w);
	if (st == LBC_OK) {
		if (!lbc_json_true(&p.doc, 0, "ok")) {
			st = lbc_set_broker_error(err, &p.doc);
		} else if (p.all == NULL || p.nall != n) {
			release_all(c, p.all, p.nall);
			st = lbc_set_error(err, LBC_IO, "the broker's grant does not hold a lease per lock");
		} else if (p.cancel_sent) {
			/* the grant crossed the cancel: give it back */
			release_all(c, p.all, n);
			st = lbc_set_error(err, LBC_CANCELLED,
			                   "the acquire was cancelled (a grant that crossed the cancel was released)");
		} else {
			memcpy(out, p.all, n * sizeof(*out));
		}
	}
	free(p.all);
	lbc_call_done(&p);
	return st;
}
