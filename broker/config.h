/*
 * config.h - the daemon's settings: defaults, a JSON config file, and command
 * line flags (flags win over the file). The flag names are an operator
 * contract (DESIGN.md "Running it"); the config file uses the same names
 * without the leading dashes, with "listen" an array of URLs or one string.
 *
 * Secrets (the auth secret, the Redis password) are read from their files
 * here and never printed. Everything in the struct is owned by it; free with
 * config_free().
 */
#ifndef LB_BROKER_CONFIG_H
#define LB_BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/url.h"

typedef enum log_level {
	LOG_DEBUG = 0,
	LOG_INFO = 1,
	LOG_WARN = 2,
	LOG_ERROR = 3,
} log_level_t;

#define CONFIG_DEFAULT_TCP "tcp://127.0.0.1:7380"
#define CONFIG_DEFAULT_UNIX "unix:///run/lockbroker/lockbroker.sock"
#define CONFIG_DEFAULT_REDIS "redis://127.0.0.1:6379"
#define CONFIG_MAX_LISTEN 16

typedef struct lb_config {
	listen_addr_t listen[CONFIG_MAX_LISTEN];
	size_t nlisten;
	redis_addr_t redis;        /* password resolved: URL, else file, else env */
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

	/* Bounds that are not flags in DESIGN.md but may be set in the file. */
	int64_t max_connections;        /* default 10000 */
	int64_t max_leases_per_session; /* default 10000 */
	int64_t max_inflight;           /* requests in flight per session, default 1024 */
	int64_t max_waiters;            /* pending acquires per broker, default 100000 */
	int64_t max_waiters_per_session; /* default 1000 */
	int64_t max_queue;              /* waiters queued per lock, all brokers, default 10000 */
} lb_config_t;

enum {
	CONFIG_OK = 0,    /* run the daemon */
	CONFIG_EXIT = 1,  /* --help or --version was printed to stdout: exit 0 */
	CONFIG_ERROR = -1 /* message in err: exit 2 */
};

/*
 * Fills cfg from defaults, then the --config file if one is named, then the
 * flags. Reads --auth-file and --redis-password-file (also the env variable
 * LOCKBROKER_REDIS_PASSWORD when no other password is given). argv is not
 * modified. Returns CONFIG_OK, CONFIG_EXIT or CONFIG_ERROR.
 */
int config_load(lb_config_t *cfg, int argc, char **argv, char *err, size_t errlen);
void config_free(lb_config_t *cfg);

/*
 * SIGHUP: applies to the running settings `live` what can change without a
 * restart (log level, default TTL, auth secret, shutdown grace, max-line for
 * new connections, the bounds), taken from `fresh` (a config_load of the same
 * argv). The names of changed settings that need a restart (listen, redis,
 * prefix, pool, socket-mode) go to `restart`, space separated; they are not
 * applied. `fresh` must still be freed with config_free.
 */
void config_apply_reload(lb_config_t *live, lb_config_t *fresh, char *restart, size_t restartlen);
/* "debug" -> LOG_DEBUG etc.; -1 when unknown. */
int config_log_level(const char *name);

#endif
