/*
 * watchdog.c - renews watchdog leases every ttl/3 and reports leases whose
 * lifetime ran out (see watchdog.h).
 *
 * A renewal carries the token and its send time, never the lease pointer:
 * the lease may be released or lost while the renewal is in flight, and the
 * reply then finds nothing. At most one renewal per lease is in flight.
 */
#include "broker/locks/watchdog.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/shared.h"
#include "broker/locks/lease.h"
#include "broker/store/lockscript.h"
#include "broker/base/log.h"
#include "broker/base/counters.h"
#include "broker/store/store.h"
#include "broker/locks/client.h"

struct renewal {
	char token[LEASE_TOKEN_LEN + 1];
	uint64_t sent_at;
	unsigned pass; /* verify: the pass it belongs to */
};

/* The pass of watchdog_verify_all under way: a newer one supersedes it. */
static struct {
	unsigned pass;
	size_t left; /* answers still to come */
	bool failover;
	void (*done)(void);
} V;

static void verify_answered(unsigned pass)
{
	void (*done)(void);

	if (pass != V.pass || V.left == 0 || --V.left > 0)
		return;
	done = V.done;
	V.done = NULL;
	LOG(LOG_INFO, "msg=\"every lease checked\"");
	if (done)
		done();
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t retry_at(const lease_t *l, uint64_t now)
{
	uint64_t wait = (uint64_t)l->ttl_ms / 10;

	if (wait > LEASE_RETRY_MS)
		wait = LEASE_RETRY_MS;
	return min_u64(now + wait, l->expires_at);
}

void watchdog_schedule(lease_t *l, uint64_t sent_at)
{
	uint64_t left = l->expires_at > sent_at ? l->expires_at - sent_at : 0;

	/* Renew after a third of the TTL, and always well before the expiry,
	 * even when Redis granted less than the TTL (max-hold cap, a racing
	 * extend): a renewal due at the expiry itself would be too late. */
	if (l->watchdog && !(l->max_hold_at && l->expires_at >= l->max_hold_at))
		timer_at(&l->tick, sent_at + min_u64((uint64_t)l->ttl_ms / 3, left / 2));
	else
		timer_at(&l->tick, l->expires_at); /* nothing left to renew */
}

static void on_renewed(const redisReply *reply, void *priv)
{
	struct renewal *r = priv;
	lease_t *l = lease_find(r->token, LEASE_TOKEN_LEN);
	uint64_t now = timers_now();
	bool ok;

	if (!l)
		goto out; /* released or lost meanwhile */
	l->renewing = false;
	ok = !store_reply_failed(reply) && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
	     reply->element[0]->type == REDIS_REPLY_INTEGER &&
	     reply->element[1]->type == REDIS_REPLY_INTEGER;
	counters_renewal(ok);
	if (!ok) {
		char tb[LOG_TOKEN_LEN];
		LOG(LOG_WARN, "msg=\"renewal failed\" lease=%s err=\"%.200s\"", log_token(l->token, tb),
		    reply && reply->type == REDIS_REPLY_ERROR ? reply->str : "no reply");
		timer_at(&l->tick, retry_at(l, now));
		goto out;
	}
	if (reply->element[0]->integer < 0) {
		lease_lost(l, "gone");
		goto out;
	}
	watchdog_confirmed(l, r->sent_at, reply->element[0]->integer, reply->element[1]->integer);
out:
	free(r);
}

static void renew(lease_t *l, uint64_t now)
{
	struct renewal *r;
	lockscript_t ls;

	lockscript_begin(&ls, l->lock, l->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, l->token, LEASE_TOKEN_LEN);
	lockscript_int(&ls, l->ttl_ms);
	lockscript_str(&ls, LB_FENCE_RETENTION_STR);
	r = xmalloc(sizeof(*r));
	memcpy(r->token, l->token, sizeof(r->token));
	r->sent_at = now;
	if (lockscript_send(&ls, SCRIPT_EXTEND, on_renewed, r) < 0) {
		free(r);
		timer_at(&l->tick, retry_at(l, now));
		return;
	}
	l->renewing = true;
	/* Until the reply: the deadline by which the lease counts as lost. */
	timer_at(&l->tick, l->expires_at);
}

static void on_verified(const redisReply *reply, void *priv)
{
	struct renewal *r = priv;
	lease_t *l = lease_find(r->token, LEASE_TOKEN_LEN);

	if (l && !store_reply_failed(reply) && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == 2 && reply->element[0]->type == REDIS_REPLY_INTEGER &&
	    reply->element[1]->type == REDIS_REPLY_INTEGER) {
		if (reply->element[0]->integer < 0) {
			if (r->pass == V.pass && V.failover)
				server.stats.failover_lost_total++;
			lease_lost(l, "gone");
		} else {
			watchdog_confirmed(l, r->sent_at, reply->element[0]->integer,
			                reply->element[1]->integer);
		}
	}
	verify_answered(r->pass);
	free(r); /* no answer: the renewals find out in their turn */
}

static void verify(lease_t *l, void *arg)
{
	struct renewal *r = xmalloc(sizeof(*r));
	size_t *n = arg;
	lockscript_t ls;

	memcpy(r->token, l->token, sizeof(r->token));
	r->sent_at = timers_now();
	r->pass = V.pass;
	lockscript_begin(&ls, l->lock, l->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, l->token, LEASE_TOKEN_LEN);
	if (lockscript_send(&ls, SCRIPT_VERIFY, on_verified, r) < 0)
		free(r);
	else
		(*n)++;
}

void watchdog_verify_all(bool failover, void (*done)(void))
{
	size_t n = 0;

	V.pass++;
	V.left = 0;
	V.failover = failover;
	V.done = NULL;
	lease_foreach(verify, &n);
	LOG(LOG_INFO, "msg=\"asking redis about every lease\" leases=%zu", n);
	if (n == 0) {
		if (done)
			done();
		return;
	}
	V.left = n;
	V.done = done;
}

void watchdog_confirmed(lease_t *l, uint64_t sent_at, int64_t ms_left, int64_t hold_ms)
{
	uint64_t ends = sent_at + (uint64_t)(ms_left > 0 ? ms_left : 0);

	if (hold_ms > 0 && sent_at + (uint64_t)hold_ms > l->max_hold_at) {
		/* The latest send time gives the closest bound below Redis's
		 * deadline; every such bound is safe. */
		l->max_hold_at = sent_at + (uint64_t)hold_ms;
		timer_at(&l->max_hold, l->max_hold_at);
	}
	if (sent_at < l->confirmed_at) {
		/* Sent before the newest one applied, answered after it (another
		 * connection): Redis may have run it last, so it may only bring
		 * the end closer. */
		if (ends < l->expires_at) {
			l->expires_at = ends;
			watchdog_schedule(l, sent_at);
		}
		return;
	}
	l->confirmed_at = sent_at;
	l->expires_at = ends;
	/* Redis capped the lifetime at the max-hold deadline (it says so: the
	 * lifetime reaches the hold left): the lease ends by max_hold, at the
	 * same moment, so the two timers cannot report different reasons. */
	if (hold_ms > 0 && ms_left >= hold_ms)
		l->expires_at = l->max_hold_at;
	watchdog_schedule(l, sent_at);
}

void watchdog_start(lease_t *l, uint64_t sent_at, int64_t ttl_granted, int64_t hold_ms)
{
	timer_init(&l->tick, watchdog_on_tick);
	timer_init(&l->max_hold, watchdog_on_max_hold);
	watchdog_confirmed(l, sent_at, ttl_granted, hold_ms);
}

void watchdog_on_tick(timer_ent_t *t)
{
	lease_t *l = (lease_t *)((char *)t - offsetof(lease_t, tick));
	uint64_t now = timers_now();

	if (l->max_hold_at && now >= l->max_hold_at) {
		lease_lost(l, "max_hold");
		return;
	}
	if (now >= l->expires_at) {
		lease_lost(l, l->watchdog ? "redis_unavailable" : "expired");
		return;
	}
	if (!l->watchdog) {
		timer_at(&l->tick, l->expires_at);
		return;
	}
	if (l->renewing) {
		timer_at(&l->tick, l->expires_at);
		return;
	}
	renew(l, now);
}

void watchdog_on_max_hold(timer_ent_t *t)
{
	lease_t *l = (lease_t *)((char *)t - offsetof(lease_t, max_hold));

	lease_lost(l, "max_hold");
}
