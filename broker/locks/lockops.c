/*
 * lockops.c - the lock ops that are not waiting: re-entering a held lease,
 * release, extend and inspect; acquire hands everything else to waitq.
 *
 * Every asynchronous op carries an opctx_t: a session reference (taken by
 * session_op_begin, dropped by session_op_end), a new reference to the
 * request id, and copies of what the reply needs. A reply that arrives after
 * the session closed answers nobody.
 *
 * Leases are looked up again by token when a reply comes: the lease may
 * have been released, lost or freed with its session meanwhile. Replies of
 * scripts that free capacity carry grants for this broker's waiters; they
 * go to waitq.
 *
 * A request whose reply was lost may or may not have run. Release, extend
 * and re-entry are repeatable (release and re-entry carry the lease's op
 * seq, so a repeat changes nothing), so they are sent again until Redis
 * answers (LB_RESOLVE_MS): they answer what happened, never `unavailable`
 * for what took effect. A release repeated after its first copy freed the
 * holder finds nothing: a lease this broker still vouched for was freed by
 * that copy, so it answers count 0.
 *
 * Detached leases live in Redis only. Their token -> lock name pointer
 * (lua/lease_index.lua) lets any session on any broker release or extend
 * them: one more round trip, paid only by tokens this broker does not hold.
 */
#include "broker/locks/lockops.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/locks/client.h"
#include "broker/locks/lease.h"
#include "broker/locks/opctx.h"
#include "broker/locks/pointer.h"
#include "broker/locks/reentry.h"
#include "broker/locks/waitq.h"
#include "broker/locks/watchdog.h"
#include "broker/store/lockscript.h"
#include "broker/store/store.h"
#include "protocol/resp.h"

static bool token_valid(lb_str_t t)
{
	if (t.len != LEASE_TOKEN_LEN)
		return false;
	for (size_t k = 0; k < t.len; k++) {
		char ch = t.ptr[k];
		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return false;
	}
	return true;
}

/* ---- acquire ------------------------------------------------------------ */

void lockops_acquire(client_t *s, req_t *req)
{
	const req_acquire_t *a = &req->u.acquire;
	int64_t ttl_ms = a->ttl_ms > 0 ? a->ttl_ms : server.cfg->default_ttl_ms;
	lease_t *held;

	if (store_caps()->exclusive_only && a->mode != LB_MODE_EXCLUSIVE) {
		counters_acquire(LB_E_INVALID_ARGUMENT, 0);
		client_send_error(s, req->id, LB_E_INVALID_ARGUMENT, store_caps()->exclusive_only);
		return;
	}
	/* Reentrancy is for locks: a semaphore acquire always takes a new
	 * permit (permits are not in the holder index either). */
	held = a->detach || a->mode == LB_MODE_PERMIT
	           ? NULL
	           : lease_find_held(s, a->lock.ptr, a->lock.len, a->owner.ptr, a->owner.len);
	if (held && held->count + held->reentering - held->releasing <= 0)
		held = NULL; /* its releases (sent before) free it: a fresh acquire,
		              * which Redis runs after them on the same connection */
	if (held) {
		if (held->mode == LB_MODE_SHARED && a->mode == LB_MODE_EXCLUSIVE)
			client_send_error(s, req->id, LB_E_UPGRADE_UNSUPPORTED, NULL);
		else
			reentry_send(s, req->id, held);
		return;
	}
	waitq_acquire(s, req->id, a, ttl_ms);
}

/* ---- release and extend: local leases and detached ones ----------------- */

/* After the lock name of a detached token is known: the lock script. */
typedef void (*lock_step_fn)(opctx_t *c);

/*
 * The common head of the release and extend replies: answers a failed or
 * malformed reply, a holder Redis no longer has (its local lease is then
 * lost: "gone"), and a local lease that was lost or ended while the command
 * was on its way (never tell a client it holds what it was told it lost).
 * Returns false when it answered; else *out is the local lease, NULL for a
 * detached one.
 */
static void grants_then_done(opctx_t *c, const redisReply *r)
{
	/* After the answer: a release's own answer comes before what it hands
	 * to others (its session's other acquires included). */
	if (r && r->type == REDIS_REPLY_ARRAY)
		waitq_take_grants(c->lock, c->lock_len, r, 1, c->sent_at);
	opctx_done(c);
}

/* A detached lease's end, as Redis recorded it (pointer_why): the
 * not_held says it was lost, and why. */
static void on_why(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	char why[24];
	const char *msg = NULL;

	if (!store_reply_failed(r) && r->type == REDIS_REPLY_STRING && r->len < sizeof(why)) {
		memcpy(why, r->str, r->len);
		why[r->len] = '\0';
		msg = lease_lost_message(why);
	}
	client_send_error(c->s, c->id, LB_E_NOT_HELD, msg);
	opctx_done(c);
}

static bool lease_reply_or_answer(opctx_t *c, const redisReply *r, const char *script,
                                  int64_t *result, lease_t **out)
{
	lease_t *l = lease_find(c->token, LEASE_TOKEN_LEN);

	if (store_reply_failed(r)) {
		opctx_fail_lease_op(c, r);
		return false;
	}
	if (r->type == REDIS_REPLY_INTEGER) {
		*result = r->integer;
	} else if (!opctx_reply_int(r, 0, result)) {
		LOG(LOG_ERROR, "msg=\"unexpected script reply\" script=%s type=%d", script, r->type);
		opctx_fail(c, LB_E_INTERNAL, "unexpected reply from a lock script");
		return false;
	}
	if (*result < 0) {
		if (l)
			lease_lost(l, "gone");
		if (!l && c->detach) {
			/* Ended in Redis: how is asked of its pointer first (the
			 * grants this reply carries go out now). */
			if (r->type == REDIS_REPLY_ARRAY)
				waitq_take_grants(c->lock, c->lock_len, r, 1, c->sent_at);
			if (pointer_why(c->token, on_why, c) < 0)
				on_why(NULL, c);
			return false;
		}
		client_send_error(c->s, c->id, LB_E_NOT_HELD,
		                  lease_lost_message(l ? "gone" : lease_lost_reason(c->token, LEASE_TOKEN_LEN)));
		grants_then_done(c, r);
		return false;
	}
	if (!l && !c->detach) {
		/* It ended here while the op was on its way: released, or lost
		 * (then with the reason its holder was told). */
		client_send_error(c->s, c->id, LB_E_NOT_HELD,
		                  lease_lost_message(lease_lost_reason(c->token, LEASE_TOKEN_LEN)));
		grants_then_done(c, r);
		return false;
	}
	*out = l;
	return true;
}

/* A detached lease's release, sent again after a lost reply, found it
 * gone: its first copy freed it (released, count 0), unless its end as
 * Redis recorded it had passed (then it was lost: expired, max_hold). */
static void on_why_replayed_release(const redisReply *r, void *priv)
{
	opctx_t *c = priv;

	if (!store_reply_failed(r) && r->type == REDIS_REPLY_STRING &&
	    (r->len != 4 || memcmp(r->str, "gone", 4) != 0)) {
		on_why(r, c);
		return;
	}
	lease_note_released(c->lock, c->lock_len, c->token,
	                    timers_now() + REQ_TTL_MAX_MS + LEASE_RELEASE_SLACK_MS);
	server.stats.released_total++;
	pointer_del(c->token);
	client_send_released(c->s, c->id, 0);
	opctx_done(c);
}

static void on_release_reply(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	lease_t *mine = lease_find(c->token, LEASE_TOKEN_LEN);
	int64_t count;
	lease_t *l;

	if (mine && mine->releasing > 0)
		mine->releasing--;
	if (mine && store_replayed() && !store_reply_failed(r) && opctx_reply_int(r, 0, &count) && count < 0) {
		/* Its first copy ran and freed the holder; the lease was ours and
		 * not lost (a lost one is no longer in the table). */
		lease_note_released(c->lock, c->lock_len, c->token,
		                    mine->expires_at + LEASE_RELEASE_SLACK_MS);
		lease_drop(mine);
		client_send_released(c->s, c->id, 0);
		grants_then_done(c, r);
		return;
	}
	if (!mine && c->detach && store_replayed() && !store_reply_failed(r) &&
	    opctx_reply_int(r, 0, &count) && count < 0) {
		/* A detached lease has no op seq: the resent copy cannot tell its
		 * first copy's work; the end Redis recorded tells (the grants
		 * this reply carries go out now). */
		waitq_take_grants(c->lock, c->lock_len, r, 1, c->sent_at);
		if (pointer_why(c->token, on_why_replayed_release, c) < 0)
			on_why_replayed_release(NULL, c);
		return;
	}
	if (!lease_reply_or_answer(c, r, "release", &count, &l))
		return;
	if (count == 0) {
		/* A detached lease's end is not known here: its longest TTL. */
		lease_note_released(c->lock, c->lock_len, c->token,
		                    l ? l->expires_at + LEASE_RELEASE_SLACK_MS
		                      : timers_now() + REQ_TTL_MAX_MS + LEASE_RELEASE_SLACK_MS);
		if (l)
			lease_drop(l);
		else
			server.stats.released_total++;
		if (c->detach)
			pointer_del(c->token);
	} else if (l) {
		lease_set_count(l, count, c->seq);
	}
	client_send_released(c->s, c->id, count);
	grants_then_done(c, r);
}

static void release_step(opctx_t *c)
{
	lease_t *l = lease_find(c->token, LEASE_TOKEN_LEN);
	lockscript_t ls;

	lockscript_begin(&ls, c->lock, c->lock_len, LOCK_NKEYS, true);
	lockscript_arg(&ls, c->token, LEASE_TOKEN_LEN);
	/* "g": the lease's acquire may still run late; once freed, its id is
	 * never granted again (lua/release.lua). */
	lockscript_str(&ls, l && l->uncertain ? "g" : "0");
	c->seq = l ? ++l->opseq : 0; /* a detached lease has one level */
	lockscript_int(&ls, c->seq);
	c->sent_at = timers_now();
	lockscript_retry_until(&ls, c->sent_at + LB_RESOLVE_MS);
	if (lockscript_send(&ls, SCRIPT_RELEASE, on_release_reply, c) < 0) {
		opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
		return;
	}
	if (l)
		l->releasing++;
}

static void on_extend_reply(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	int64_t ms, hold = 0;
	lease_t *l;

	if (!lease_reply_or_answer(c, r, "extend", &ms, &l))
		return;
	if (!store_replicated()) {
		/* The master has it, too few replicas do: a failover could undo
		 * it, so the lease keeps the end it had here. */
		opctx_fail(c, LB_E_UNAVAILABLE,
		           "the extension was not acknowledged by enough replicas in time "
		           "(or was made by a master a failover demoted)");
		return;
	}
	opctx_reply_int(r, 1, &hold);
	if (l)
		watchdog_confirmed(l, c->sent_at, ms, hold);
	else
		pointer_note_end(c->token, ms, hold); /* detached: for a later not_held */
	client_send_extended(c->s, c->id, ms);
	opctx_done(c);
}

static void extend_step(opctx_t *c)
{
	lockscript_t ls;

	lockscript_begin(&ls, c->lock, c->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, c->token, LEASE_TOKEN_LEN);
	lockscript_int(&ls, c->ttl_ms);
	lockscript_str(&ls, LB_FENCE_RETENTION_STR);
	c->sent_at = timers_now();
	lockscript_retry_until(&ls, c->sent_at + LB_RESOLVE_MS);
	if (lockscript_send(&ls, SCRIPT_EXTEND, on_extend_reply, c) < 0)
		opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
}

/* ---- proclaim ------------------------------------------------------------ */

static void on_proclaim_reply(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	int64_t held, fence;
	lease_t *l;

	if (!store_reply_failed(r) && opctx_reply_int(r, 0, &held) && held == -2) {
		opctx_fail(c, LB_E_INVALID_ARGUMENT, "the lease is not exclusive: only an exclusive "
		                                     "holder has a value");
		return;
	}
	if (!lease_reply_or_answer(c, r, "proclaim", &held, &l))
		return;
	if (!opctx_reply_int(r, 1, &fence)) {
		opctx_fail(c, LB_E_INTERNAL, "unexpected reply from the proclaim script");
		return;
	}
	/* Answered: a new master that missed it gets it again from the
	 * data-loss check (verify.lua), as a count is. A detached lease has no
	 * such check: its value lives in Redis alone. */
	if (l)
		lease_set_value(l, c->value, c->value_len, c->seq);
	client_answer(c->s, c->id, resp_proclaimed(c->id, fence));
	opctx_done(c);
}

static void proclaim_step(opctx_t *c)
{
	lease_t *l = lease_find(c->token, LEASE_TOKEN_LEN);
	lockscript_t ls;

	if (l && l->mode != LB_MODE_EXCLUSIVE) {
		opctx_fail(c, LB_E_INVALID_ARGUMENT, "the lease is not exclusive: only an exclusive "
		                                     "holder has a value");
		return;
	}
	lockscript_begin(&ls, c->lock, c->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, c->token, LEASE_TOKEN_LEN);
	lockscript_arg(&ls, c->value, c->value_len);
	c->seq = l ? ++l->opseq : 0; /* a detached lease has no op seq */
	lockscript_int(&ls, c->seq);
	c->sent_at = timers_now();
	/* Repeatable (its op seq, and setting a value twice is setting it
	 * once): sent again after a lost reply until Redis answers. */
	lockscript_retry_until(&ls, c->sent_at + LB_RESOLVE_MS);
	if (lockscript_send(&ls, SCRIPT_PROCLAIM, on_proclaim_reply, c) < 0)
		opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
}

struct index_lookup {
	opctx_t *c;
	lock_step_fn step;
};

static void on_index_found(const redisReply *r, void *priv)
{
	struct index_lookup *q = priv;
	opctx_t *c = q->c;
	lock_step_fn step = q->step;

	free(q);
	client_prestep_end(c->s); /* after this the lock script goes out */
	if (store_reply_failed(r)) {
		opctx_fail_unavailable(c, r);
		return;
	}
	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > REQ_LOCK_MAX_BYTES) {
		opctx_fail(c, LB_E_NOT_HELD, NULL);
		return;
	}
	opctx_set_lock(c, r->str, r->len);
	c->detach = true;
	step(c);
}

/* Runs step on the lease's lock: at once for a lease of this broker, after
 * looking up the lock name of a detached lease otherwise. */
static void with_lease(client_t *s, req_t *req, lb_str_t token, int64_t ttl_ms, lock_step_fn step)
{
	lease_t *l;
	opctx_t *c;

	if (lockops_answer_locally(s, req))
		return;
	c = opctx_new(s, req->id);
	memcpy(c->token, token.ptr, LEASE_TOKEN_LEN);
	c->ttl_ms = ttl_ms;
	if (req->op == OP_PROCLAIM) {
		/* '=' V: see lua/lib/prelude.lua */
		const lb_str_t *v = &req->u.proclaim.value;
		c->value_len = v->len + 1;
		c->value = xmalloc(c->value_len + 1);
		c->value[0] = '=';
		memcpy(c->value + 1, v->ptr, v->len);
		c->value[c->value_len] = '\0';
	}
	l = lease_find(token.ptr, token.len);
	if (l) {
		/* Renewals sent from now on carry the new TTL, so none sent after
		 * this extend can shorten the lease again. */
		if (ttl_ms > 0)
			l->ttl_ms = ttl_ms;
		opctx_set_lock(c, l->lock, l->lock_len);
		step(c);
		return;
	}
	{
		struct index_lookup *q = xmalloc(sizeof(*q));
		q->c = c;
		q->step = step;
		/* Until the lock script is sent, later requests of the session
		 * wait: one on the same lock must not pass this one. */
		client_prestep_begin(s);
		if (pointer_get(c->token, ttl_ms > 0 ? ttl_ms : 0, on_index_found, q) < 0) {
			free(q);
			client_prestep_end(s);
			opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
		}
	}
}

bool lockops_answer_locally(client_t *s, req_t *req)
{
	lb_str_t token;

	if (req->op == OP_RELEASE)
		token = req->u.release.lease;
	else if (req->op == OP_EXTEND)
		token = req->u.extend.lease;
	else if (req->op == OP_PROCLAIM)
		token = req->u.proclaim.lease;
	else
		return false;
	if (token_valid(token) && !lease_was_lost(token.ptr, token.len))
		return false;
	/* Not a token this broker could have issued, or a lease it told its
	 * holder was lost: not held, whatever Redis (up or not) would say;
	 * lost, with the reason the holder was told. */
	client_send_error(s, req->id, LB_E_NOT_HELD,
	                  token_valid(token) ? lease_lost_message(lease_lost_reason(token.ptr, token.len))
	                                     : NULL);
	return true;
}

void lockops_release(client_t *s, req_t *req)
{
	with_lease(s, req, req->u.release.lease, 0, release_step);
}

void lockops_extend(client_t *s, req_t *req)
{
	with_lease(s, req, req->u.extend.lease, req->u.extend.ttl_ms, extend_step);
}

void lockops_proclaim(client_t *s, req_t *req)
{
	with_lease(s, req, req->u.proclaim.lease, 0, proclaim_step);
}

/* ---- inspect ------------------------------------------------------------ */

static bool reply_str(const redisReply *e, lb_str_t *out)
{
	if (e->type != REDIS_REPLY_STRING)
		return false;
	*out = (lb_str_t){e->str, e->len};
	return true;
}

bool lockops_read_inspect(const redisReply *r, resp_inspect_t *in)
{
	resp_holder_t *holders = NULL;
	int64_t limit, waiters, delay;
	size_t n;

	in->state = RESP_STATE_FREE;
	in->holders = NULL;
	in->nholders = 0;
	if (!opctx_reply_int(r, 0, &limit) || !opctx_reply_int(r, 2, &waiters) ||
	    !opctx_reply_int(r, 3, &delay) || (r->elements - INSPECT_HEAD) % INSPECT_HOLDER_WIDTH != 0)
		return false;
	n = (r->elements - INSPECT_HEAD) / INSPECT_HOLDER_WIDTH;
	in->delay_ms = delay > 0 ? delay : 0;
	in->has_fence = false;
	if (r->element[1]->type == REDIS_REPLY_STRING) {
		in->has_fence = true;
		in->fence = strtoll(r->element[1]->str, NULL, 10);
		if (in->fence > server.fence_high)
			server.fence_high = in->fence;
	}
	holders = n ? xcalloc(n, sizeof(*holders)) : NULL;
	for (size_t k = 0; k < n; k++) {
		const redisReply *const *e =
		    (const redisReply *const *)&r->element[INSPECT_HEAD + INSPECT_HOLDER_WIDTH * k];
		lb_str_t mode, value;
		if (!reply_str(e[0], &mode) || mode.len != 1 || e[1]->type != REDIS_REPLY_INTEGER ||
		    e[2]->type != REDIS_REPLY_INTEGER || !reply_str(e[3], &holders[k].owner) ||
		    !reply_str(e[4], &holders[k].client) || !reply_str(e[5], &value) ||
		    (value.len > 0 && value.ptr[0] != '=')) {
			free(holders);
			return false;
		}
		holders[k].mode = mode.ptr[0] == 's' ? LB_MODE_SHARED
		                : mode.ptr[0] == 'p' ? LB_MODE_PERMIT : LB_MODE_EXCLUSIVE;
		/* '' none, '=' V: see lua/lib/prelude.lua */
		if (value.len > 0 && holders[k].mode == LB_MODE_EXCLUSIVE)
			holders[k].value = (lb_str_t){value.ptr + 1, value.len - 1};
		holders[k].ttl_ms = e[1]->integer;
		holders[k].count = e[2]->integer;
		if (holders[k].mode == LB_MODE_EXCLUSIVE)
			in->state = RESP_STATE_EXCLUSIVE;
		else if (in->state == RESP_STATE_FREE)
			in->state = holders[k].mode == LB_MODE_PERMIT ? RESP_STATE_SEMAPHORE : RESP_STATE_SHARED;
	}
	if (n == 0 && in->delay_ms > 0)
		in->state = RESP_STATE_DELAYED;
	in->limit = limit;
	in->holders = holders;
	in->nholders = n;
	in->waiters = waiters;
	return true;
}

static void on_inspected(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	resp_inspect_t in = {.lock = {c->lock, c->lock_len}};

	if (store_reply_failed(r)) {
		opctx_fail_unavailable(c, r);
		return;
	}
	if (!lockops_read_inspect(r, &in)) {
		opctx_fail(c, LB_E_INTERNAL, "unexpected reply from the inspect script");
		return;
	}
	{
		store_master_t m[STORE_MASTERS_SHOWN];
		int holds[STORE_MASTERS_SHOWN];
		resp_master_state_t ms[STORE_MASTERS_SHOWN];
		size_t nm = store_inspect_masters(holds, STORE_MASTERS_SHOWN);

		if (nm > 0 && store_masters(m, STORE_MASTERS_SHOWN) >= nm) {
			for (size_t k = 0; k < nm && k < STORE_MASTERS_SHOWN; k++)
				ms[k] = (resp_master_state_t){m[k].addr, holds[k]};
			in.masters = ms;
			in.nmasters = nm < STORE_MASTERS_SHOWN ? nm : STORE_MASTERS_SHOWN;
		}
		client_answer(c->s, c->id, resp_inspect(c->id, &in));
	}
	free((void *)in.holders);
	opctx_done(c);
}

void lockops_inspect(client_t *s, req_t *req)
{
	opctx_t *c = opctx_new(s, req->id);
	lockscript_t ls;

	opctx_set_lock(c, req->u.inspect.lock.ptr, req->u.inspect.lock.len);
	lockscript_begin(&ls, c->lock, c->lock_len, LOCK_NKEYS, false);
	if (lockscript_send(&ls, SCRIPT_INSPECT, on_inspected, c) < 0)
		opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
}
