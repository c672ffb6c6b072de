/*
 * reentry.c - a held lease taken once more by its holder: count + 1 in
 * Redis (lua/reenter.lua), answered as an acquire. The call carries the
 * lease's op seq, so a copy resent after a lost reply counts once.
 */
#include "broker/locks/reentry.h"

#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/timers.h"
#include "broker/locks/lease.h"
#include "broker/locks/opctx.h"
#include "broker/store/lockscript.h"
#include "broker/store/store.h"
#include "protocol/resp.h"

static void on_reentered(const redisReply *r, void *priv)
{
	opctx_t *c = priv;
	lease_t *l = lease_find(c->token, LEASE_TOKEN_LEN);
	int64_t count, ms_left;
	resp_acquired_t a;

	if (l && l->reentering > 0)
		l->reentering--;
	if (store_reply_failed(r)) {
		/* unavailable says the re-entry had no effect, yet it may have
		 * run where no reply came back (nodes of a quorum that never
		 * answered in time, and which may run it later from their
		 * sockets): taken back wherever it ran, in order
		 * before any later op of the lease. */
		if (l && r && !lease_lost_reason(c->token, LEASE_TOKEN_LEN))
			lease_undo_reentry_in_redis(l, c->seq, timers_now() + LB_RESOLVE_MS);
		opctx_fail_lease_op(c, r);
		return;
	}
	if (!opctx_reply_int(r, 0, &count) || !opctx_reply_int(r, 1, &ms_left)) {
		opctx_fail(c, LB_E_INTERNAL, "unexpected reply from the reenter script");
		return;
	}
	if (count < 0 || !l) {
		/* Redis no longer holds it, or it ended here meanwhile. */
		if (l)
			lease_lost(l, "gone");
		opctx_fail(c, LB_E_NOT_HELD, "the lease this acquire re-enters is gone");
		return;
	}
	if (!store_replicated()) {
		/* Too few replicas have the new count: a failover could lose
		 * it and free the lock at the holder's next release. Taken
		 * back; the holder keeps the levels it had. */
		lease_undo_reentry_in_redis(l, c->seq, timers_now() + LB_RESOLVE_MS);
		opctx_fail(c, LB_E_UNAVAILABLE,
		           "the re-entry was not acknowledged by enough replicas in time "
		           "(or was made by a master a failover demoted); it was taken back");
		return;
	}
	lease_set_count(l, count, c->seq);
	counters_acquire(LB_OK, timers_now() - c->sent_at);
	a = (resp_acquired_t){
		.lease = l->token,
		.lock = {l->lock, l->lock_len},
		.mode = l->mode,
		.fence = l->fence,
		.ttl_ms = l->ttl_ms,
		.count = count,
	};
	client_send_acquired(c->s, c->id, &a);
	opctx_done(c);
}

void reentry_send(client_t *s, const json_t *id, lease_t *l)
{
	opctx_t *c = opctx_new(s, id);
	lockscript_t ls;

	memcpy(c->token, l->token, sizeof(c->token));
	lockscript_begin(&ls, l->lock, l->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, l->token, LEASE_TOKEN_LEN);
	c->seq = ++l->opseq;
	lockscript_int(&ls, c->seq);
	lockscript_retry_until(&ls, timers_now() + LB_RESOLVE_MS);
	if (lockscript_send(&ls, SCRIPT_REENTER, on_reentered, c) < 0) {
		opctx_fail(c, LB_E_UNAVAILABLE, "Redis is not reachable");
		return;
	}
	l->reentering++;
}
