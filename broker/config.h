/*
 * config.h - the daemon's settings: defaults, a JSON config file, and command
 * line flags (flags win over the file). The flag names are an operator
 * contract (DESIGN.md "Running it"); the config file uses the same names
 * without the leading dashes, with "listen" an array of URLs or one string.
 *
 * Secrets (the auth secret, the Redis password, the Redis Sentinel password)
 * are read from their files here and never printed. Everything in the struct is owned by it; free with
 * config_free().
 */
#ifndef LB_BROKER_CONFIG_H
#define LB_BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/base/settings.h"

enum {
	CONFIG_OK = 0,    /* run the daemon */
	CONFIG_EXIT = 1,  /* --help or --version was printed to stdout: exit 0 */
	CONFIG_ERROR = -1 /* message in err: exit 2 */
};

/*
 * Fills cfg from defaults, then the --config file if one is named, then the
 * flags. Reads --auth-file and --redis-password-file (also the env variable
 * LOCKBROKER_REDIS_PASSWORD when no other password is given), for a
 * cluster:// URL its password_file (which wins over both), and, for a
 * sentinel:// URL, its sentinel_password_file (else the env variable
 * LOCKBROKER_SENTINEL_PASSWORD). argv is not modified. Returns CONFIG_OK, CONFIG_EXIT or CONFIG_ERROR.
 */
int config_load(lb_config_t *cfg, int argc, char **argv, char *err, size_t errlen);
void config_free(lb_config_t *cfg);

/*
 * SIGHUP: applies to the running settings `live` what can change without a
 * restart (log level, default TTL, auth secret, shutdown grace, max-line for
 * new connections, the bounds), taken from `fresh` (a config_load of the same
 * argv). The names of changed settings that need a restart (listen, redis,
 * redis-wait-replicas, redis-wait-ms, prefix, pool, socket-mode, metrics) go
 * to `restart`, space separated; they are not applied. `fresh` must still be freed with config_free.
 */
void config_apply_reload(lb_config_t *live, lb_config_t *fresh, char *restart, size_t restartlen);
/* "debug" -> LOG_DEBUG etc.; -1 when unknown. */
int config_log_level(const char *name);

#endif
