/*
 * config_reload.c - SIGHUP: which settings a reloaded config may change in
 * the running broker, and which ones only a restart can (see config.h).
 * Settings that need a restart are named, not applied: the listeners, the
 * Redis address (sentinels, master name, cluster seeds and passwords
 * included), the replication wait (redis-wait-replicas, redis-wait-ms), the
 * key prefix and the pool are what the broker was started with, and stay so.
 */
#include "broker/config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Whether two listen lists name the same addresses in the same order. */
static bool same_listen(const lb_config_t *a, const lb_config_t *b)
{
	if (a->nlisten != b->nlisten)
		return false;
	for (size_t k = 0; k < a->nlisten; k++) {
		const listen_addr_t *x = &a->listen[k], *y = &b->listen[k];
		if (x->kind != y->kind || x->port != y->port || strcmp(x->host, y->host) != 0 ||
		    strcmp(x->path, y->path) != 0)
			return false;
	}
	return true;
}

/* Both NULL, or the same string. */
static bool same_opt_string(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Whether two host lists are the same hosts in the same order. */
static bool same_hosts(const host_port_t *a, int na, const host_port_t *b, int nb)
{
	if (na != nb)
		return false;
	for (int k = 0; k < na; k++)
		if (a[k].port != b[k].port || strcmp(a[k].host, b[k].host) != 0)
			return false;
	return true;
}

/* Whether two Redis addresses would connect the same way: the same place
 * (for sentinel:// the same sentinels in the same order and the same master
 * name, for cluster:// the same seeds in the same order), db and passwords.
 * The password files' names are not compared, their content is. */
static bool same_redis(const redis_addr_t *a, const redis_addr_t *b)
{
	if (a->kind != b->kind || a->port != b->port || a->db != b->db || strcmp(a->host, b->host) != 0 ||
	    strcmp(a->path, b->path) != 0)
		return false;
	if (!same_opt_string(a->password, b->password) ||
	    !same_opt_string(a->sentinel_password, b->sentinel_password))
		return false;
	if (strcmp(a->master_name, b->master_name) != 0)
		return false;
	return same_hosts(a->sentinels, a->nsentinels, b->sentinels, b->nsentinels) &&
	       same_hosts(a->seeds, a->nseeds, b->seeds, b->nseeds);
}

static bool same_redlock(const lb_config_t *a, const lb_config_t *b)
{
	if (a->nredlock != b->nredlock)
		return false;
	for (int i = 0; i < a->nredlock; i++)
		if (!same_redis(&a->redlock[i], &b->redlock[i]))
			return false;
	return true;
}

void config_apply_reload(lb_config_t *live, lb_config_t *fresh, char *restart, size_t restartlen)
{
	char *secret;
	size_t n = 0;

	restart[0] = '\0';
#define NEEDS_RESTART(cond, name)                                                                  \
	do {                                                                                           \
		if (cond) {                                                                                \
			int w = snprintf(restart + n, restartlen - n, "%s%s", n ? " " : "", name);             \
			if (w > 0 && (size_t)w < restartlen - n)                                               \
				n += (size_t)w;                                                                    \
		}                                                                                          \
	} while (0)
	NEEDS_RESTART(!same_listen(live, fresh), "listen");
	NEEDS_RESTART(!same_redis(&live->redis, &fresh->redis), "redis");
	NEEDS_RESTART(!same_redlock(live, fresh), "redlock");
	NEEDS_RESTART(live->redis_wait_replicas != fresh->redis_wait_replicas, "redis-wait-replicas");
	NEEDS_RESTART(live->redis_wait_ms != fresh->redis_wait_ms, "redis-wait-ms");
	NEEDS_RESTART(strcmp(live->prefix, fresh->prefix) != 0, "prefix");
	NEEDS_RESTART(live->pool != fresh->pool, "pool");
	NEEDS_RESTART(live->redis_batch_max != fresh->redis_batch_max, "redis-batch-max");
	NEEDS_RESTART(live->socket_mode != fresh->socket_mode, "socket-mode");
	NEEDS_RESTART(live->has_metrics != fresh->has_metrics ||
	                  (live->has_metrics && (live->metrics.port != fresh->metrics.port ||
	                                         strcmp(live->metrics.host, fresh->metrics.host) != 0)),
	              "metrics");
#undef NEEDS_RESTART

	live->log_level = fresh->log_level;
	live->log_json = fresh->log_json;
	live->default_ttl_ms = fresh->default_ttl_ms;
	live->shutdown_grace_ms = fresh->shutdown_grace_ms;
	live->canary_interval_ms = fresh->canary_interval_ms;
	live->max_line = fresh->max_line;
	live->max_connections = fresh->max_connections;
	live->max_leases_per_session = fresh->max_leases_per_session;
	live->max_inflight = fresh->max_inflight;
	live->max_waiters = fresh->max_waiters;
	live->max_waiters_per_session = fresh->max_waiters_per_session;
	live->max_watches_per_session = fresh->max_watches_per_session;
	live->max_queue = fresh->max_queue;
	/* Swap, so that config_free(fresh) frees the old secret. */
	secret = live->auth_secret;
	live->auth_secret = fresh->auth_secret;
	fresh->auth_secret = secret;
}
