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

/* A gated check's verify (after a failover or a restart: the store serves
 * nothing else meanwhile) is resent on lost connections for this long;
 * by VERIFY_DEADLINE_MS every lease not vouched for is lost and the check
 * ends (before the store's own CHECK_TIMEOUT_MS, which opens the pool). */
#define VERIFY_RESEND_MS 2000
#define VERIFY_DEADLINE_MS 4500

/* The pass of watchdog_verify_all under way: a newer one supersedes it and
 * inherits its gated rules and done. */
static struct {
	unsigned pass;
	size_t left; /* answers still to come */
	bool gated;   /* the store waits for it (resends, a deadline) */
	bool failover; /* its losses count as a failover's (stats) */
	bool timer_ready;
	timer_ent_t deadline; /* a gated pass's */
	void (*done)(void);
} V;

static void verify_answered(unsigned pass)
{
	void (*done)(void);

	if (pass != V.pass || V.left == 0 || --V.left > 0)
		return;
	timer_cancel(&V.deadline);
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

/* Every level of l is on its way out (releases sent, not answered): a
 * check or renewal that finds it gone may have run behind the release on
 * some node (a store that merges nodes' answers can hear a quorum of
 * "gone" before the release's own quorum). The release's reply tells what
 * happened: released, or lost (gone) and not_held. */
static bool ending(const lease_t *l)
{
	return l->releasing > 0 && l->count + l->reentering - l->releasing <= 0;
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
		if (!ending(l))
			lease_lost(l, "gone");
		goto out;
	}
	if (!store_replicated()) {
		/* The master has the new end, too few replicas do: a failover
		 * could bring back the old one. Not a renewal, then. */
		char tb[LOG_TOKEN_LEN];
		LOG(LOG_WARN, "msg=\"renewal not acknowledged by enough replicas\" lease=%s",
		    log_token(l->token, tb));
		timer_at(&l->tick, retry_at(l, now));
		goto out;
	}
	watchdog_confirmed(l, r->sent_at, reply->element[0]->integer, reply->element[1]->integer);
out:
	free(r);
}

/* store_caps()->retake: what a node that lost the lease (it restarted
 * empty) needs to hold it again while the lock is free there (lua/lib/prelude.lua's
 * retake_solo), besides the count and its op seq: the fence, the labels
 * and the max hold left. Not while a release that may free the lease is on its
 * way: Redis runs it first, and a retake behind it would hold the lock
 * again for nobody. */
static void retake_args(lockscript_t *ls, const lease_t *l, uint64_t now)
{
	const client_t *s = l->client;

	lockscript_int(ls, l->fence);
	lockscript_arg(ls, l->owner, l->owner_len);
	lockscript_arg(ls, s->label ? s->label : "", s->label ? s->label_len : 0);
	lockscript_int(ls, l->max_hold_at > now ? (int64_t)(l->max_hold_at - now) : 0);
}

static void value_arg(lockscript_t *ls, const lease_t *l)
{
	lockscript_arg(ls, l->value ? l->value : "", l->value_len);
}

static bool may_retake(const lease_t *l)
{
	return store_caps()->retake && l->releasing == 0 && l->count > 0;
}

static void renew(lease_t *l, uint64_t now)
{
	struct renewal *r;
	lockscript_t ls;

	lockscript_begin(&ls, l->lock, l->lock_len, LOCK_NKEYS_HOLDER, false);
	lockscript_arg(&ls, l->token, LEASE_TOKEN_LEN);
	lockscript_int(&ls, l->ttl_ms);
	lockscript_str(&ls, LB_FENCE_RETENTION_STR);
	if (may_retake(l) && !(l->max_hold_at && now >= l->max_hold_at)) {
		lockscript_int(&ls, l->count);
		lockscript_int(&ls, lease_state_seq(l));
		retake_args(&ls, l, now);
		value_arg(&ls, l);
		lockscript_int(&ls, l->lock_delay_ms);
	}
	/* Worth waiting for (a slot on the move) until the lease ends here. */
	lockscript_deadline(&ls, l->expires_at);
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

	bool gated = r->pass == V.pass && V.gated;
	bool failover = gated && V.failover;

	if (l && l->verify_pass == r->pass)
		l->verify_pass = 0;
	else if (gated)
		l = NULL; /* already lost at the deadline */
	/* A master the store no longer serves from (it left the slot map)
	 * vouches for nothing: taken as no answer (store_replicated). */
	if (l && !store_reply_failed(reply) && store_replicated() && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == 2 && reply->element[0]->type == REDIS_REPLY_INTEGER &&
	    reply->element[1]->type == REDIS_REPLY_INTEGER) {
		if (reply->element[0]->integer < 0) {
			if (!ending(l)) {
				if (failover)
					server.stats.failover_lost_total++;
				lease_lost(l, "gone");
			}
		} else {
			watchdog_confirmed(l, r->sent_at, reply->element[0]->integer,
			                reply->element[1]->integer);
		}
	} else if (l && gated) {
		/* The new master was not asked after all (the check's
		 * connection died until it gave up): the lease cannot be
		 * vouched for, and the pool opens once the check ends. */
		if (failover)
			server.stats.failover_lost_total++;
		lease_lost(l, "redis_unavailable");
	}
	verify_answered(r->pass);
	free(r); /* else no answer: the renewals find out in their turn */
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
	/* Redis replays what it missed of the answered count and value
	 * (verify.lua). */
	lockscript_int(&ls, l->count);
	lockscript_int(&ls, lease_state_seq(l));
	value_arg(&ls, l);
	if (may_retake(l) && l->expires_at > r->sent_at &&
	    !(l->max_hold_at && r->sent_at >= l->max_hold_at)) {
		/* For the life this broker vouches for, no longer. */
		lockscript_int(&ls, (int64_t)(l->expires_at - r->sent_at));
		retake_args(&ls, l, r->sent_at);
		lockscript_str(&ls, LB_FENCE_RETENTION_STR);
		lockscript_int(&ls, l->lock_delay_ms);
	}
	if (V.gated) /* resent on a lost connection, while the pool waits */
		lockscript_retry_until(&ls, r->sent_at + VERIFY_RESEND_MS);
	lockscript_deadline(&ls, V.gated ? r->sent_at + VERIFY_DEADLINE_MS : l->expires_at);
	if (lockscript_send(&ls, SCRIPT_VERIFY, on_verified, r) < 0) {
		free(r); /* only when the store closes: with retry_until it waits */
		return;
	}
	l->verify_pass = V.pass;
	(*n)++;
}

struct tokens {
	char (*t)[LEASE_TOKEN_LEN];
	size_t n;
};

static void collect_unverified(lease_t *l, void *arg)
{
	struct tokens *u = arg;

	if (l->verify_pass == V.pass)
		memcpy(u->t[u->n++], l->token, LEASE_TOKEN_LEN);
}

static void on_verify_deadline(timer_ent_t *t)
{
	void (*done)(void) = V.done;

	(void)t;
	LOG(LOG_WARN, "msg=\"the new master did not answer for every lease in time; "
	              "those it did not are lost\" leases=%zu", V.left);
	/* Collected first: ending a lease may end others (lease_foreach). */
	struct tokens u = {xcalloc(lease_count() + 1, LEASE_TOKEN_LEN), 0};
	lease_foreach(collect_unverified, &u);
	for (size_t k = 0; k < u.n; k++) {
		lease_t *l = lease_find(u.t[k], LEASE_TOKEN_LEN);
		if (l) {
			l->verify_pass = 0;
			if (V.failover)
				server.stats.failover_lost_total++;
			lease_lost(l, "redis_unavailable");
		}
	}
	free(u.t);
	V.left = 0;
	V.done = NULL;
	if (done)
		done();
}

void watchdog_verify_all(bool gated, bool failover, void (*done)(void))
{
	size_t n = 0;
	bool open = V.left > 0;

	/* A pass still under way is superseded, not dropped: this one asks
	 * about every lease again, so it takes over the other's failover
	 * rules and its done (a store closed for the other's check stays
	 * closed until this one ends). With several masters, one master's
	 * failover and another's lost data may overlap. */
	if (open && V.gated)
		gated = true;
	if (open && V.failover)
		failover = true;
	if (open && V.done && !done)
		done = V.done;

	if (!V.timer_ready) {
		timer_init(&V.deadline, on_verify_deadline);
		V.timer_ready = true;
	}
	timer_cancel(&V.deadline);
	V.pass++;
	if (V.pass == 0)
		V.pass++; /* 0 means none in lease_t */
	V.left = 0;
	V.gated = gated || failover;
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
	if (V.gated)
		timer_at(&V.deadline, timers_now() + VERIFY_DEADLINE_MS);
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
	/* News first (timers.h): a broker that wakes from a stall tells its
	 * holders what expired meanwhile before it answers anything else. */
	timer_init_news(&l->tick, watchdog_on_tick);
	timer_init_news(&l->max_hold, watchdog_on_max_hold);
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
