/*
 * settings.h - the daemon's settings as every layer reads them: the values
 * broker/config.c fills from defaults, the config file and the flags (and
 * refills in place on SIGHUP, for what may change live). Plain data: what
 * a setting means and its bounds are config.c's business.
 */
#ifndef LB_BROKER_BASE_SETTINGS_H
#define LB_BROKER_BASE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/base/log.h"
#include "broker/base/url.h"

#define CONFIG_DEFAULT_TCP "tcp://127.0.0.1:7380"
#define CONFIG_DEFAULT_UNIX "unix:///run/lockbroker/lockbroker.sock"
#define CONFIG_DEFAULT_REDIS "redis://127.0.0.1:6379"
#define CONFIG_MAX_LISTEN 16
#define CONFIG_REDLOCK_MAX 7 /* --redlock: 3, 5 or 7 masters */

typedef struct lb_config {
	listen_addr_t listen[CONFIG_MAX_LISTEN];
	size_t nlisten;
	redis_addr_t redis;        /* password resolved: URL (for cluster:// also
	                            * its password_file), else file, else env;
	                            * sentinel:// also sentinel_password: its file,
	                            * else env, else NULL */
	/* --redlock: nredlock (3, 5 or 7) independent masters, redis:// or
	 * unix:// each, passwords resolved as for redis; 0: not in that mode
	 * (then redis serves). */
	int nredlock;
	redis_addr_t redlock[CONFIG_REDLOCK_MAX];
	int redis_wait_replicas;   /* 0..16, default 0 (off): after a grant or an
	                            * extend, WAIT for this many replicas; fewer
	                            * acks undo the grant (answered unavailable) */
	int64_t redis_wait_ms;     /* 1..10000, default 500: WAIT's timeout */
	char *prefix;              /* default "lb:"; 1..64 bytes, no control chars */
	int64_t default_ttl_ms;    /* 100..86400000, default 30000 */
	char *auth_secret;         /* NULL: no auth; the file's content without one trailing \n or \r\n */
	unsigned socket_mode;      /* default 0660; 0..0777 */
	int pool;                  /* Redis command connections, 1..64, default 4 */
	size_t max_line;           /* 64..16777216, default 65536 */
	log_level_t log_level;     /* default LOG_INFO */
	bool log_json;             /* --log-format json */
	bool has_metrics;          /* --metrics given */
	listen_addr_t metrics;     /* tcp://HOST:PORT serving /metrics */
	int64_t shutdown_grace_ms; /* 0..3600000, default 5000 */
	int64_t canary_interval_ms; /* 10..60000, default 250: how often each
	                             * master's canary key is checked (a data
	                             * loss is noticed within it plus a round
	                             * trip); live on SIGHUP */
	int redis_batch_max;        /* 0..1024, default 64: lock calls one
	                             * Redis connection sends as one script
	                             * call (lua/batch.lua); 0 or 1: none */

	/* Bounds that are not flags in DESIGN.md but may be set in the file. */
	int64_t max_connections;        /* default 10000 */
	int64_t max_leases_per_session; /* default 10000 */
	int64_t max_inflight;           /* requests in flight per session, default 1024 */
	int64_t max_waiters;            /* pending acquires per broker, default 100000 */
	int64_t max_waiters_per_session; /* default 1000 */
	int64_t max_watches_per_session; /* default 1000 */
	int64_t max_queue;              /* waiters queued per lock, all brokers, default 10000 */
} lb_config_t;

#endif
