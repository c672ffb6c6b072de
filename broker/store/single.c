/*
 * single.c - the seam to Redis (store.h) over one master: a single Redis
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
#include "broker/store/store.h"

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
static struct {
	bool sentinel;    /* a sentinel:// URL */
	bool had_master;  /* a master was named before */
	char host[URL_HOST_MAX + 1];
	int port;
	/* The master before the last switch, and when it was left. */
	char prev_host[URL_HOST_MAX + 1];
	int prev_port;
	uint64_t switched_at;
} M;

/* An answer that names the master left less than this ago is taken for a
 * sentinel that has not heard of the switch yet; only +switch-master
 * (or, after this, any answer) takes the broker back there. */
#define NO_GOING_BACK_MS 30000

/* The sentinels named a master (maybe the one we have). */
static void on_master(const char *host, int port, bool announced)
{
	bool failover = M.had_master;

	if (!announced && M.prev_port == port && strcmp(M.prev_host, host) == 0 &&
	    timers_now() - M.switched_at < NO_GOING_BACK_MS) {
		LOG(LOG_INFO, "msg=\"a sentinel named the master left before; not going back\" addr=%s:%d",
		    host, port);
		return;
	}
	if (!rpool_set_target(P, host, port, failover))
		return;
	if (failover) {
		server.stats.failovers_total++;
		LOG(LOG_WARN, "msg=\"redis master switched: checking every lease on the new one\" "
		    "from=%s:%d to=%s:%d", M.host, M.port, host, port);
	} else {
		LOG(LOG_INFO, "msg=\"redis master found\" addr=%s:%d", host, port);
	}
	if (M.had_master) {
		snprintf(M.prev_host, sizeof(M.prev_host), "%s", M.host);
		M.prev_port = M.port;
		M.switched_at = timers_now();
	}
	M.had_master = true;
	snprintf(M.host, sizeof(M.host), "%s", host);
	M.port = port;
}

void store_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	char channel[128], name[64];
	rpool_inbox_t inbox;
	rpool_callbacks_t cb;

	E = *events;
	/* The channel lua/lib/prelude.lua publishes this broker's wake-ups to. */
	snprintf(channel, sizeof(channel), "%sinbox:%s", cfg->prefix, server.id);
	snprintf(name, sizeof(name), "lockbroker-%s", server.id);
	inbox = (rpool_inbox_t){channel, E.on_wake, E.on_rewatch};
	memset(&M, 0, sizeof(M));
	M.sentinel = cfg->redis.kind == URL_SENTINEL;
	cb = (rpool_callbacks_t){
		.on_up = E.on_up,
		.on_data_loss = E.on_data_loss,
		.on_not_master = M.sentinel ? sentinel_ask : NULL,
		.on_lost = M.sentinel ? sentinel_ask : NULL,
		.require_master = M.sentinel,
		.wait_replicas = cfg->redis_wait_replicas,
		.wait_ms = cfg->redis_wait_ms,
	};
	P = rpool_new(loop, &cfg->redis, cfg->pool, name, &cb, &inbox);
	canary_start(E.on_data_loss);
	if (M.sentinel)
		sentinel_start(loop, &cfg->redis, on_master);
}

void store_close(void)
{
	canary_stop();
	if (M.sentinel)
		sentinel_close();
	rpool_close(P);
}

void store_loss_checked(void)
{
	rpool_check_done(P);
}

void store_free(void)
{
	rpool_free(P);
	P = NULL;
}

bool store_up(void)
{
	return P && rpool_up(P);
}

size_t store_pending(void)
{
	return P ? rpool_pending(P) : 0;
}

bool store_replayed(void)
{
	return rpool_replayed();
}

bool store_replicated(void)
{
	return rpool_replicated();
}

int store_eval_lock(const char *lock, size_t lock_len, script_id_t script, int nkeys, int argc,
                    const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                    uint64_t retry_until, int floor_arg, bool unwaited)
{
	/* WAIT (--redis-wait-replicas) behind every call that may grant or
	 * change a lease; verify and inspect only read. */
	int wait = script == SCRIPT_VERIFY || script == SCRIPT_INSPECT ? RP_NO_WAIT
	           : unwaited                                          ? RP_UNACKED
	                                                               : RP_WAIT;

	return rpool_eval(P, rpool_route(lock, lock_len), script, nkeys, argc, argv, argvlen, fn, priv,
	                  retry_until, wait, floor_arg);
}

/* The part of key that picks its connection: its hash tag, the way Redis
 * Cluster picks a slot (between the first '{' and the next '}', when not
 * empty), else the whole key. A detached lease's pointer so goes where
 * its token does. */
static const char *route_part(const char *key, size_t len, size_t *out_len)
{
	const char *open = memchr(key, '{', len);
	const char *close = open ? memchr(open + 1, '}', len - (size_t)(open + 1 - key)) : NULL;

	if (close && close > open + 1) {
		*out_len = (size_t)(close - open - 1);
		return open + 1;
	}
	*out_len = len;
	return key;
}

int store_eval_key(const char *key, size_t key_len, script_id_t script, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until)
{
	const char *all[8], *part;
	size_t lens[8], part_len;

	if (argc < 0 || argc > 7)
		return -1;
	all[0] = key;
	lens[0] = key_len;
	memcpy(all + 1, argv, (size_t)argc * sizeof(*argv));
	memcpy(lens + 1, argvlen, (size_t)argc * sizeof(*argvlen));
	part = route_part(key, key_len, &part_len);
	return rpool_eval(P, rpool_route(part, part_len), script, 1, argc + 1, all, lens, fn, priv,
	                  retry_until, RP_NO_WAIT, -1);
}
