/*
 * lease.c - leases: acquire, release, extend (by handle or by token), the
 * lease handle's accessors, and cancel tokens.
 *
 * A handle (lbc_lease_t) is one acquire's hold on a lease: it is made by
 * the thread that reads the acquire's answer (client.c, under the client's
 * lock), so a "lost" event right behind the grant always finds it. It
 * stays linked in its client's list until lbc_release or lbc_lease_free,
 * and is unlinked (client = NULL) by lbc_close. Reentrant acquires get
 * handles of their own on one token; each releases one level.
 *
 * Invariants: token, name, mode, fence, count, detached and gen never
 * change after the grant; lost goes from LBC_LOST_NONE to a reason once
 * (atomic compare-and-swap, under the client's lock); ttl_ms is atomic.
 * A lost handle's token is never sent again (release/extend answer
 * LBC_LOST without asking the broker).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- cancel tokens ----------------------------------------------------------- */

struct lbc_cancel {
	int pipe[2];
	atomic_bool fired;
};

lbc_cancel_t *lbc_cancel_new(void)
{
	lbc_cancel_t *t = calloc(1, sizeof(*t));

	if (t == NULL)
		abort();
	if (pipe2(t->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(t);
		return NULL;
	}
	atomic_init(&t->fired, false);
	return t;
}

void lbc_cancel_fire(lbc_cancel_t *t)
{
	int saved = errno;

	if (t == NULL || atomic_exchange(&t->fired, true))
		return;
	/* async-signal-safe: an atomic and a write(2) */
	if (write(t->pipe[1], "x", 1) < 0) {
	}
	errno = saved;
}

bool lbc_cancel_fired(const lbc_cancel_t *t)
{
	return t && atomic_load(&((lbc_cancel_t *)t)->fired);
}

void lbc_cancel_free(lbc_cancel_t *t)
{
	if (t == NULL)
		return;
	close(t->pipe[0]);
	close(t->pipe[1]);
	free(t);
}

int lbc_cancel_rfd(const lbc_cancel_t *t)
{
	return t ? t->pipe[0] : -1;
}

/* ---- handles ---------------------------------------------------------------------- */

bool lbc_name_valid(const char *name)
{
	size_t n;

	if (name == NULL)
		return false;
	n = strlen(name);
	if (n == 0 || n > LBC_NAME_MAX || !lbc_utf8_valid(name, n))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7F)
			return false;
	return true;
}

lbc_lease_t *lbc_lease_from_answer(lbc_client_t *c, const lbc_jdoc_t *d, uint32_t obj,
                                   uint64_t gen, bool detached)
{
	size_t tlen;
	const char *token = lbc_json_str(d, obj, "lease", &tlen);
	const char *lock = lbc_json_str(d, obj, "lock", NULL);
	const char *mode = lbc_json_str(d, obj, "mode", NULL);
	int64_t fence, ttl = 0, count = 1;
	lbc_lease_t *l;

	if (token == NULL || tlen == 0 || tlen > LBC_TOKEN_MAX || strlen(token) != tlen ||
	    lbc_json_int(d, obj, "fence", &fence) < 0)
		return NULL;
	(void)lbc_json_int(d, obj, "ttl_ms", &ttl);
	(void)lbc_json_int(d, obj, "count", &count);
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		abort();
	memcpy(l->token, token, tlen + 1);
	l->name = strdup(lock ? lock : "");
	if (l->name == NULL)
		abort();
	snprintf(l->mode, sizeof(l->mode), "%s", mode ? mode : "exclusive");
	l->fence = fence;
	l->count = count;
	atomic_init(&l->ttl_ms, ttl);
	l->detached = detached;
	l->gen = gen;
	atomic_init(&l->lost, LBC_LOST_NONE);
	l->client = c;
	lbc_link_lease_locked(c, l);
	return l;
}

void lbc_lease_free(lbc_lease_t *l)
{
	if (l == NULL)
		return;
	if (l->client) {
		lbc_client_t *c = l->client;
		lbc_lock(c);
		lbc_unlink_lease_locked(l);
		lbc_unlock(c);
	}
	free(l->name);
	free(l);
}

int64_t lbc_lease_fence(const lbc_lease_t *l)
{
	return l ? l->fence : 0;
}

const char *lbc_lease_token(const lbc_lease_t *l)
{
	return l ? l->token : NULL;
}

const char *lbc_lease_name(const lbc_lease_t *l)
{
	return l ? l->name : NULL;
}

const char *lbc_lease_mode(const lbc_lease_t *l)
{
	return l ? l->mode : NULL;
}

int64_t lbc_lease_count(const lbc_lease_t *l)
{
	return l ? l->count : 0;
}

int64_t lbc_lease_ttl_ms(const lbc_lease_t *l)
{
	return l ? atomic_load(&((lbc_lease_t *)l)->ttl_ms) : 0;
}

bool lbc_lease_detached(const lbc_lease_t *l)
{
	return l && l->detached;
}

lbc_lost_reason lbc_lease_lost_reason(const lbc_lease_t *l)
{
	return l ? (lbc_lost_reason)atomic_load(&((lbc_lease_t *)l)->lost) : LBC_LOST_NONE;
}

bool lbc_lease_lost(const lbc_lease_t *l)
{
	return lbc_lease_lost_reason(l) != LBC_LOST_NONE;
}

static lbc_status lost_error(lbc_error_t *err, const lbc_lease_t *l, lbc_lost_reason r)
{
	char nb[84];

	lbc_set_errorf(err, LBC_LOST, "the lease on lock \"%s\" was lost (%s)",
	               lbc_masked(l->name, nb), lbc_lost_reason_name(r));
	if (err)
		err->lost_reason = r;
	return LBC_LOST;
}

lbc_status lbc_lease_check(const lbc_lease_t *l, lbc_error_t *err)
{
	lbc_lost_reason r;

	if (l == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL lease");
	r = lbc_lease_lost_reason(l);
	if (r != LBC_LOST_NONE)
		return lost_error(err, l, r);
	return LBC_OK;
}

/* ---- acquire ---------------------------------------------------------------------- */

lbc_status lbc_acquire_opts_check(lbc_client_t *c, const lbc_acquire_opts_t *o, char *owner,
                                  size_t owner_len, lbc_error_t *err)
{
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL client");
	if (o->mode != LBC_EXCLUSIVE && o->mode != LBC_SHARED)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "mode must be LBC_EXCLUSIVE or LBC_SHARED");
	if (o->limit < 0 || (o->limit > 0 && o->mode == LBC_SHARED))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "limit must be >= 0, and a semaphore (limit) has no shared mode");
	if (o->ttl_ms < 0 || o->max_hold_ms < 0 || o->wait_ms < LBC_NO_WAIT || o->lock_delay_ms < 0)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "ttl_ms, max_hold_ms and lock_delay_ms must be >= 0, wait_ms >= LBC_NO_WAIT");
	if (o->watchdog < -1 || o->watchdog > 1 || o->fair < -1 || o->fair > 1)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "watchdog and fair must be LBC_DEFAULT, LBC_ON or LBC_OFF");
	if (o->owner) {
		size_t n = strlen(o->owner);
		if (n > LBC_OWNER_MAX || !lbc_utf8_valid(o->owner, n))
			return lbc_set_error(err, LBC_INVALID_ARGUMENT,
			                     "the owner must be UTF-8 of at most 128 bytes");
		snprintf(owner, owner_len, "%s", o->owner);
	} else {
		lbc_thread_owner(owner, owner_len);
	}
	if (lbc_cancel_fired(o->cancel))
		return lbc_set_error(err, LBC_CANCELLED, "the acquire was cancelled before it was sent");
	return LBC_OK;
}

void lbc_acquire_opts_write(lbc_jw_t *w, const lbc_acquire_opts_t *o, const char *owner)
{
	if (o->ttl_ms > 0)
		lbc_jw_kint(w, "ttl_ms", o->ttl_ms);
	if (o->wait_ms != LBC_WAIT_FOREVER)
		lbc_jw_kint(w, "wait_ms", o->wait_ms == LBC_NO_WAIT ? 0 : o->wait_ms);
	if (o->watchdog != LBC_DEFAULT)
		lbc_jw_kbool(w, "watchdog", o->watchdog == LBC_ON);
	if (o->fair != LBC_DEFAULT)
		lbc_jw_kbool(w, "fair", o->fair == LBC_ON);
	if (o->detach)
		lbc_jw_kbool(w, "detach", true);
	if (o->max_hold_ms > 0)
		lbc_jw_kint(w, "max_hold_ms", o->max_hold_ms);
	if (o->lock_delay_ms > 0)
		lbc_jw_kint(w, "lock_delay_ms", o->lock_delay_ms);
	lbc_jw_kstr(w, "owner", owner);
}

int64_t lbc_acquire_timeout(lbc_client_t *c, int64_t wait_ms)
{
	/* the broker enforces wait_ms; our limit only catches a mute broker */
	int64_t rt = lbc_request_timeout(c);

	if (wait_ms == LBC_WAIT_FOREVER || rt < 0)
		return -1;
	return (wait_ms == LBC_NO_WAIT ? 0 : wait_ms) + rt;
}

lbc_status lbc_acquire(lbc_client_t *c, const char *name, const lbc_acquire_opts_t *opts,
                       lbc_lease_t **out, lbc_error_t *err)
{
	lbc_acquire_opts_t o = {0};
	char owner[LBC_OWNER_MAX + 1];
	lbc_pending_t p;
	lbc_jw_t w;
	lbc_status st;

	if (out == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_acquire: out is NULL");
	*out = NULL;
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_acquire: NULL client");
	if (!lbc_name_valid(name))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "the lock name must be 1..512 bytes of UTF-8 without control characters");
	if (opts)
		o = *opts;
	if ((st = lbc_acquire_opts_check(c, &o, owner, sizeof(owner), err)) != LBC_OK)
		return st;
	/* a lease bound to the session is watched from its grant on */
	if (!o.detach && (st = lbc_liveness_start(c, err)) != LBC_OK)
		return st;

	lbc_pending_init(&p, lbc_next_id(c));
	p.is_acquire = true;
	p.lease_detached = o.detach;
	lbc_jw_init(&w);
	lbc_req_begin(&w, p.id, "acquire");
	lbc_jw_kstr(&w, "lock", name);
	if (o.mode == LBC_SHARED)
		lbc_jw_kstr(&w, "mode", "shared");
	if (o.limit > 0)
		lbc_jw_kint(&w, "limit", o.limit);
	if (o.value)
		lbc_jw_kstr(&w, "value", o.value);
	lbc_acquire_opts_write(&w, &o, owner);
	lbc_req_finish(&w);

	st = lbc_call(c, &p, &w, lbc_acquire_timeout(c, o.wait_ms), o.cancel, err);
	lbc_jw_free(&w);
	if (st == LBC_OK) {
		if (!lbc_json_true(&p.doc, 0, "ok")) {
			st = lbc_set_broker_error(err, &p.doc);
		} else if (p.lease == NULL) {
			st = lbc_set_error(err, LBC_IO, "the broker's grant has no lease token or fence");
		} else if (p.cancel_sent) {
			/* the grant crossed the cancel: give it back */
			(void)lbc_release(c, p.lease, NULL, NULL);
			st = lbc_set_error(err, LBC_CANCELLED,
			                   "the acquire was cancelled (a grant that crossed the cancel was released)");
		} else {
			*out = p.lease;
		}
	}
	lbc_call_done(&p);
	return st;
}

/* ---- release and extend -------------------------------------------------------------- */

/* One release or extend of token; *doc_ok says whether the answer was ok.
 * Returns the call's status (LBC_OK: the answer is in p->doc). */
static lbc_status token_op(lbc_client_t *c, lbc_pending_t *p, const char *op, const char *token,
                           int64_t ttl_ms, bool no_connect, lbc_error_t *err)
{
	lbc_jw_t w;
	lbc_status st;

	lbc_pending_init(p, lbc_next_id(c));
	p->no_connect = no_connect;
	lbc_jw_init(&w);
	lbc_req_begin(&w, p->id, op);
	lbc_jw_kstr(&w, "lease", token);
	if (ttl_ms >= 0)
		lbc_jw_kint(&w, "ttl_ms", ttl_ms);
	lbc_req_finish(&w);
	st = lbc_call(c, p, &w, lbc_request_timeout(c), NULL, err);
	lbc_jw_free(&w);
	return st;
}

/* The outcome of a release/extend of handle l whose answer (or failure)
 * is in p / st. */
static lbc_status lease_outcome(lbc_client_t *c, lbc_lease_t *l, lbc_pending_t *p,
                                lbc_status st, lbc_error_t *err)
{
	lbc_lost_reason r;

	if (st != LBC_OK) {
		/* the session ended with the request in flight: a bound lease went
		 * with it (teardown marked it); a detached one's fate is unknown */
		r = lbc_lease_lost_reason(l);
		if (r != LBC_LOST_NONE)
			return lost_error(err, l, r);
		return st;
	}
	if (lbc_json_true(&p->doc, 0, "ok"))
		return LBC_OK;
	st = lbc_set_broker_error(err, &p->doc);
	if (st != LBC_NOT_HELD)
		return st;
	/* not_held: lost, whether or not the broker said so first */
	lbc_lock(c);
	lbc_mark_lost_locked(c, l->token, LBC_LOST_NOT_HELD);
	r = lbc_lease_lost_reason(l);
	lbc_unlock(c);
	return lost_error(err, l, r);
}

/* Checks a handle before use. LBC_OK, or the status to return. */
static lbc_status lease_usable(lbc_client_t *c, lbc_lease_t *l, lbc_error_t *err)
{
	lbc_lost_reason r;

	if (l == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL lease");
	if (l->client == NULL) { /* its client was closed */
		r = lbc_lease_lost_reason(l);
		if (r == LBC_LOST_NONE) /* detached: the broker still holds it */
			return lbc_set_error(err, LBC_DISCONNECTED,
			                     "the client is closed; a detached lease is released by its token");
		return lost_error(err, l, r);
	}
	if (c == NULL || l->client != c)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "the lease belongs to another client");
	r = lbc_lease_lost_reason(l);
	if (r != LBC_LOST_NONE)
		return lost_error(err, l, r);
	return LBC_OK;
}

lbc_status lbc_release(lbc_client_t *c, lbc_lease_t *l, int64_t *count_left, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st = lease_usable(c, l, err);

	if (st == LBC_INVALID_ARGUMENT)
		return st;
	if (st != LBC_OK) {
		lbc_lease_free(l);
		return st;
	}
	/* a bound lease lives on its own session only: never reconnect for it */
	st = token_op(c, &p, "release", l->token, -1, !l->detached, err);
	st = lease_outcome(c, l, &p, st, err);
	if (st == LBC_OK && count_left)
		(void)lbc_json_int(&p.doc, 0, "count", count_left);
	lbc_call_done(&p);
	lbc_lease_free(l);
	return st;
}

lbc_status lbc_extend(lbc_client_t *c, lbc_lease_t *l, int64_t ttl_ms, int64_t *new_ttl_ms,
                      lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st = lease_usable(c, l, err);
	int64_t t = ttl_ms;

	if (st != LBC_OK)
		return st;
	if (ttl_ms < 0)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "ttl_ms must be >= 0");
	st = token_op(c, &p, "extend", l->token, ttl_ms, !l->detached, err);
	st = lease_outcome(c, l, &p, st, err);
	if (st == LBC_OK) {
		(void)lbc_json_int(&p.doc, 0, "ttl_ms", &t);
		atomic_store(&l->ttl_ms, t);
		lbc_bound_changed(c, t); /* the broker renews it every t/3 from now on */
		if (new_ttl_ms)
			*new_ttl_ms = t;
	}
	lbc_call_done(&p);
	return st;
}

lbc_status lbc_proclaim(lbc_client_t *c, lbc_lease_t *l, const char *value, int64_t *fence,
                        lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_jw_t w;
	lbc_status st = lease_usable(c, l, err);
	int64_t f = 0;

	if (st != LBC_OK)
		return st;
	if (value == NULL || !lbc_utf8_valid(value, strlen(value)) || strlen(value) > 4096)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "value must be UTF-8 of at most 4096 bytes");
	lbc_pending_init(&p, lbc_next_id(c));
	p.no_connect = !l->detached;
	lbc_jw_init(&w);
	lbc_req_begin(&w, p.id, "proclaim");
	lbc_jw_kstr(&w, "lease", l->token);
	lbc_jw_kstr(&w, "value", value);
	lbc_req_finish(&w);
	st = lbc_call(c, &p, &w, lbc_request_timeout(c), NULL, err);
	lbc_jw_free(&w);
	st = lease_outcome(c, l, &p, st, err);
	if (st == LBC_OK) {
		(void)lbc_json_int(&p.doc, 0, "fence", &f);
		if (fence)
			*fence = f;
	}
	lbc_call_done(&p);
	return st;
}

static lbc_status token_valid(const char *token, lbc_error_t *err)
{
	size_t n;

	if (token == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL token");
	n = strlen(token);
	if (n == 0 || n > 1024 || !lbc_utf8_valid(token, n))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "a token is 1..1024 bytes of UTF-8");
	return LBC_OK;
}

lbc_status lbc_release_token(lbc_client_t *c, const char *token, int64_t *count_left,
                             lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;

	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL client");
	if ((st = token_valid(token, err)) != LBC_OK)
		return st;
	st = token_op(c, &p, "release", token, -1, false, err);
	if (st == LBC_OK) {
		if (lbc_json_true(&p.doc, 0, "ok")) {
			if (count_left)
				(void)lbc_json_int(&p.doc, 0, "count", count_left);
		} else {
			st = lbc_set_broker_error(err, &p.doc);
		}
	}
	lbc_call_done(&p);
	return st;
}

lbc_status lbc_extend_token(lbc_client_t *c, const char *token, int64_t ttl_ms,
                            int64_t *new_ttl_ms, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;

	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL client");
	if ((st = token_valid(token, err)) != LBC_OK)
		return st;
	if (ttl_ms < 0)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "ttl_ms must be >= 0");
	st = token_op(c, &p, "extend", token, ttl_ms, false, err);
	if (st == LBC_OK) {
		if (lbc_json_true(&p.doc, 0, "ok")) {
			if (new_ttl_ms)
				(void)lbc_json_int(&p.doc, 0, "ttl_ms", new_ttl_ms);
		} else {
			st = lbc_set_broker_error(err, &p.doc);
		}
	}
	lbc_call_done(&p);
	return st;
}
