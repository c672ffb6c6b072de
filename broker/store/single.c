/*
 * single.c - the store's backend (backend.h) over one master: a single Redis
 * reached through the connection pool (rpool.c), watched by the canary
 * (canary.c); with a sentinel:// URL, the master that Redis Sentinel names
 * (sentinel.c), followed across failovers. The names this broker uses in
 * Redis (its inbox channel, its connections' client name) are made here,
 * from the prefix and the broker's id.
 *
 * Sentinel: the pool checks ROLE before a connection serves, and a
 * replica found there (ROLE, or a READONLY reply), a lost connection or a
 * +switch-master makes the sentinels be asked again. A master other than
 * the current one is a failover: the pool moves to it, and before it
 * serves anything else the locks layer checks every lease there
 * (on_data_loss with STORE_LOSS_FAILOVER; it calls store_loss_checked).
 */
#include "broker/store/backend.h"

#include <stdio.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/canary.h"
#include "broker/store/rpool.h"
#include "broker/store/sentinel.h"

static store_events_t E;
static rpool_t *P; /* the one pool */
static canary_t *K;
static struct {
	bool sentinel;    /* a sentinel:// URL */
	bool had_master;  /* a master was named before */
	char host[URL_HOST_MAX + 1];
	int port;
} M;

/* The sentinels named a master (maybe the one we have). An older view
 * than one taken before never comes here: sentinel.c compares the
 * sentinels' config epochs. */
static void on_master(const char *host, int port, bool announced)
{
	bool failover = M.had_master;

	(void)announced;
	if (!rpool_set_target(P, host, port, failover))
		return;
	if (failover) {
		server.stats.failovers_total++;
		LOG(LOG_WARN, "msg=\"redis master switched: checking every lease on the new one\" "
		    "from=%s:%d to=%s:%d", M.host, M.port, host, port);
	} else {
		LOG(LOG_INFO, "msg=\"redis master found\" addr=%s:%d", host, port);
	}
	M.had_master = true;
	snprintf(M.host, sizeof(M.host), "%s", host);
	M.port = port;
}

/* Serving needs the pool up and the canary primed (canary.h): each waits
 * for the other. */
static void on_pool_up(void)
{
	if (canary_primed(K))
		E.on_up();
	else
		canary_check_now(K);
}

static void on_canary_primed(void)
{
	if (rpool_up(P))
		E.on_up();
}

static void on_inbox_message(const char *msg, size_t len, void *priv)
{
	(void)priv;
	E.on_wake(msg, len);
}

static void on_inbox_subscribed(void *priv)
{
	(void)priv;
	E.on_rewatch();
}

/* Redis may have lost data: every lease is checked again (a new pass of
 * watchdog_verify_all); a failover check under way now ends with that one,
 * so the pool's wait for it counts from now. */
static void on_loss(const char *why)
{
	if (P)
		rpool_check_extend(P);
	E.on_data_loss(why);
}

static void single_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	char channel[128], name[64];
	rpool_inbox_t inbox;
	rpool_callbacks_t cb;

	E = *events;
	/* The channel lua/lib/prelude.lua publishes this broker's wake-ups to. */
	snprintf(channel, sizeof(channel), "%sinbox:%s", cfg->prefix, server.id);
	snprintf(name, sizeof(name), "lockbroker-%s", server.id);
	inbox = (rpool_inbox_t){channel, on_inbox_message, on_inbox_subscribed, NULL};
	memset(&M, 0, sizeof(M));
	M.sentinel = cfg->redis.kind == URL_SENTINEL;
	cb = (rpool_callbacks_t){
		.on_up = on_pool_up,
		.on_data_loss = on_loss,
		.on_not_master = M.sentinel ? sentinel_ask : NULL,
		.on_lost = M.sentinel ? sentinel_ask : NULL,
		.require_master = M.sentinel,
		.wait_replicas = cfg->redis_wait_replicas,
		.wait_ms = cfg->redis_wait_ms,
		.batch_max = cfg->redis_batch_max,
	};
	P = rpool_new(loop, &cfg->redis, cfg->pool, name, &cb, &inbox);
	{
		char key[128];
		int n = snprintf(key, sizeof(key), "%sbroker:{%s}:canary", cfg->prefix, server.id);
		K = canary_start(key, (size_t)n, on_loss);
		canary_on_primed(K, on_canary_primed);
	}
	if (M.sentinel)
		sentinel_start(loop, &cfg->redis, on_master);
}

static void single_close(void)
{
	canary_stop(K);
	K = NULL;
	if (M.sentinel)
		sentinel_close();
	rpool_close(P);
}

static void single_loss_checked(void)
{
	rpool_check_done(P);
}

static void single_free(void)
{
	rpool_free(P);
	P = NULL;
}

static bool single_up(void)
{
	return P && rpool_up(P) && canary_primed(K);
}

static size_t single_pending(void)
{
	return P ? rpool_pending(P) : 0;
}

static bool single_replayed(void)
{
	return rpool_replayed();
}

static int single_eval(const char *route, size_t route_len, script_id_t script, int nkeys,
                       int argc, const char *const *argv, const size_t *argvlen, store_fn fn,
                       void *priv, uint64_t retry_until, uint64_t deadline, int wait,
                       int floor_arg)
{
	(void)deadline; /* no redirects to wait through */
	return rpool_eval(P, rpool_route(route, route_len), script, nkeys, argc, argv, argvlen, fn,
	                  priv, retry_until, wait, floor_arg);
}

/* One Redis: nothing per master to show (stats has "redis" already). */
static size_t single_masters(store_master_t *out, size_t max)
{
	(void)out;
	(void)max;
	return 0;
}

static const store_caps_t single_caps = {.wait = STORE_WAIT_QUEUED};

const store_backend_t store_single_backend = {
	.caps = &single_caps,
	.start = single_start,
	.close = single_close,
	.free = single_free,
	.loss_checked = single_loss_checked,
	.up = single_up,
	.pending = single_pending,
	.replayed = single_replayed,
	.eval = single_eval,
	.masters = single_masters,
};
