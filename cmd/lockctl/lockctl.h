/*
 * lockctl.h - what the files of lockctl, the command-line client, share:
 * exit statuses, its use of the C client library (client.c: connecting,
 * acquire options, statuses to exit statuses), small helpers (util.c) and
 * the subcommands (main.c, run.c).
 *
 * lockctl talks to the broker only through clients/c (lbclient.h): one
 * lbc_client_t, one session. Its own code runs on one thread; while run
 * holds its lease the client runs its liveness thread too (unless
 * --no-liveness-check), so run's child does only async-signal-safe calls
 * between fork() and exec (run.c).
 * Ownership: the client from lc_connect is the caller's (lbc_close).
 */
#ifndef LB_CMD_LOCKCTL_H
#define LB_CMD_LOCKCTL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "broker/base/log.h"
#include "clients/c/lbclient.h"

/* Exit statuses (sysexits.h numbers where one fits; documented in --help).
 * `run` otherwise exits with the command's status, 128+N when the command
 * was killed by signal N, 126/127 when it could not be executed / found. */
enum {
	LC_EXIT_OK = 0,
	LC_EXIT_NOLEADER = 3,     /* leader: nobody leads the election now */
	LC_EXIT_USAGE = 64,       /* EX_USAGE: bad option, duration, auth file */
	LC_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: no broker, connection lost,
	                             Redis down (unavailable), shutting_down */
	LC_EXIT_INTERNAL = 70,    /* EX_SOFTWARE: unexpected answer, fork failed */
	LC_EXIT_BUSY = 73,        /* the lock is held and we were not to wait */
	LC_EXIT_TIMEOUT = 74,     /* --wait ran out */
	LC_EXIT_LOST = 75,        /* run: the lease was lost, the command stopped */
	LC_EXIT_REFUSED = 76,     /* the broker answered another error */
	LC_EXIT_NOEXEC = 126,     /* run: the command could not be executed */
	LC_EXIT_NOTFOUND = 127,   /* run: the command was not found */
};

#define LC_NAME "lockctl"
#define LC_DURATION_MAX_MS INT64_C(9007199254740991) /* 2^53 - 1: a JSON integer */

/* ---- util.c ---------------------------------------------------------------- */

/* One line "lockctl: ..." on stderr. */
void lc_err(const char *fmt, ...) LB_PRINTF(1, 2);
/* "500ms", "30s", "1.5s", "5m", "1h", "0" -> milliseconds in [0,
 * LC_DURATION_MAX_MS]. Returns 0, or -1 for anything else (no unit, junk,
 * sign, fraction of a millisecond, overflow). */
int lc_parse_duration(const char *s, int64_t *ms);
/* Strict decimal integer in [min, max]; returns 0 or -1. */
int lc_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);
/* Monotonic clock in milliseconds. */
int64_t lc_now_ms(void);
/* poll(2)'s timeout until deadline (ms of lc_now_ms): -1 for none (deadline
 * < 0), 0 once passed, capped at 1000 s. */
int lc_poll_ms(int64_t deadline);
/* s masked for a message: printable ASCII only, at most 80 bytes, in buf
 * (at least 84 bytes). */
const char *lc_masked(const char *s, char *buf);
#define LC_MASK_BUF 84

/* ---- client.c: lockctl on the C client ------------------------------------- */

/* The exit status of a failed lbc_* call (st != LBC_OK); wait_ms tells a
 * busy lock (0) from a timeout (anything else). */
int lc_status_exit(lbc_status st, int64_t wait_ms);
/* Prints "lockctl: WHAT: CODE: MESSAGE" (masked; lbc never puts a secret
 * in a message) and returns lc_status_exit(err->status, wait_ms). */
int lc_fail(const char *what, const lbc_error_t *err, int64_t wait_ms);

/* ---- the subcommands ------------------------------------------------------- */

typedef struct lc_global {
	const char *url;       /* --broker, $LOCKBROKER_URL or the default */
	char *auth;            /* secret from --auth-file, or NULL; owned */
	bool json;             /* --json */
	int64_t timeout_ms;    /* --timeout: connect and each answer */
	bool no_liveness_check; /* --no-liveness-check */
} lc_global_t;

typedef struct lc_lock_opts {
	const char *name;
	bool shared;
	int64_t limit;         /* 0: not a semaphore */
	int64_t wait_ms;       /* -1: wait until granted */
	int64_t ttl_ms;        /* -1: the broker's default */
	int64_t max_hold_ms;   /* -1: no cap */
	bool detach;
	int64_t kill_after_ms; /* run: SIGTERM -> SIGKILL grace */
	const char *value;     /* --value (elect: the leader's), or NULL */
	int64_t lock_delay_ms; /* --lock-delay, 0: none */
} lc_lock_opts_t;

/* The lbc options for o. */
lbc_acquire_opts_t lc_acquire_opts(const lc_lock_opts_t *o);
/* The fields of o's acquire request as a JSON object's text (malloc'd),
 * for lbc_request (--json). */
char *lc_acquire_fields(const lc_lock_opts_t *o);
/* The exit status for a failed acquire (printed): busy, timeout, or what
 * lc_fail says. */
int lc_acquire_fail(const lc_lock_opts_t *o, const lbc_error_t *err);
/* Connects and says hello (label "lockctl/VERSION", the secret of
 * --auth-file, --timeout for connecting and each answer). on_event may be
 * NULL. Returns 0 with *out, or an exit status (printed): LC_EXIT_USAGE
 * for a bad URL, LC_EXIT_UNAVAILABLE when the broker cannot be reached. */
int lc_connect(const lc_global_t *g, void (*on_event)(void *, const lbc_event_t *), void *arg,
               lbc_client_t **out);
/* run: cmd is the NULL-terminated command line. Returns the exit status. */
int lc_run(const lc_global_t *g, const lc_lock_opts_t *o, char **cmd);

#endif
