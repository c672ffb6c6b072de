/*
 * lockctl.h - what the files of lockctl, the command-line client, share:
 * exit statuses, the blocking connection to the broker (conn.c), small
 * helpers (util.c) and the subcommands (main.c, run.c).
 *
 * lockctl is single-threaded and uses blocking-style I/O on a non-blocking
 * socket with poll(); it holds one session (one connection) at a time.
 * Ownership: a lc_conn_t owns its socket and frame buffer; messages handed
 * out by conn_next() / conn_wait() belong to the caller (json_decref, free).
 */
#ifndef LB_CMD_LOCKCTL_H
#define LB_CMD_LOCKCTL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "broker/base/log.h"
#include "protocol/frame.h"

/* Exit statuses (sysexits.h numbers where one fits; documented in --help).
 * `run` otherwise exits with the command's status, 128+N when the command
 * was killed by signal N, 126/127 when it could not be executed / found. */
enum {
	LC_EXIT_OK = 0,
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
#define LC_DEFAULT_UNIX "/run/lockbroker/lockbroker.sock"
#define LC_DEFAULT_TCP "tcp://127.0.0.1:7380"
#define LC_MAX_LINE (16u << 20) /* longest answer accepted from the broker */
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
/* The exit status for a broker error answer; prints "lockctl: WHAT: CODE:
 * MESSAGE" unless quiet. wait_ms tells a busy lock (0) from a timeout. */
int lc_broker_error(const char *what, const json_t *resp, int64_t wait_ms);

/* ---- conn.c ---------------------------------------------------------------- */

typedef struct lc_conn {
	int fd;             /* -1 when closed */
	frame_t frame;
	json_int_t next_id; /* ids of our requests: 1, 2, ... */
	bool eof;           /* the broker closed the connection */
	char server[64];    /* "lockbroker/X.Y.Z" from hello, masked */
	json_int_t proto;
} lc_conn_t;

/* Connect to url (tcp://HOST:PORT or unix:///PATH) within timeout_ms.
 * Returns 0, LC_EXIT_USAGE (bad URL) or LC_EXIT_UNAVAILABLE, having printed
 * the error. c is usable with conn_close() in every case. */
int conn_open(lc_conn_t *c, const char *url, int64_t timeout_ms);
void conn_close(lc_conn_t *c);
/* Sends req (not taken) with "id" set to a fresh id, returned in *id.
 * Returns 0 or LC_EXIT_UNAVAILABLE (printed). */
int conn_send(lc_conn_t *c, json_t *req, json_int_t *id, int64_t timeout_ms);
/* Reads what the socket has without blocking. Returns 0, or -1 once the
 * connection is closed or failed (c->eof set). */
int conn_fill(lc_conn_t *c);
/* Takes the next buffered message: 1 with *msg (new reference) and *raw
 * (malloc'd line, may be NULL if not wanted); 0 when none is complete;
 * LC_EXIT_INTERNAL (printed) when the broker sent something that is not a
 * JSON object or too long a line. */
int conn_next(lc_conn_t *c, json_t **msg, char **raw);
/* Waits up to timeout_ms (< 0: forever) for the answer to id; events and
 * other answers met on the way are dropped. Returns 0 with *resp (new
 * reference) and *raw (malloc'd, if raw is not NULL), or an exit status
 * (printed; what names the request). */
int conn_wait(lc_conn_t *c, json_int_t id, int64_t timeout_ms, const char *what,
              json_t **resp, char **raw);
/* conn_send + conn_wait; req is taken. */
int conn_call(lc_conn_t *c, json_t *req, int64_t timeout_ms, const char *what,
              json_t **resp, char **raw);
/* hello with client "lockctl/VERSION" and, when auth is not NULL, the
 * secret. Returns 0 or an exit status (printed; never the secret). Without
 * a secret, an unauthorized hello is not an error: ping needs no auth, and
 * every other op then answers unauthorized by itself. */
int conn_hello(lc_conn_t *c, const char *auth, int64_t timeout_ms);

/* ---- the subcommands ------------------------------------------------------- */

typedef struct lc_global {
	const char *url;       /* --broker, $LOCKBROKER_URL or the default */
	char *auth;            /* secret from --auth-file, or NULL; owned */
	bool json;             /* --json */
	int64_t timeout_ms;    /* --timeout: connect and each answer */
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
} lc_lock_opts_t;

/* The acquire request for o (new reference). */
json_t *lc_acquire_req(const lc_lock_opts_t *o);
/* The exit status for an acquire's error answer (printed): busy, timeout
 * or what lc_broker_error says. */
int lc_acquire_error(const lc_lock_opts_t *o, const json_t *resp);
/* Connects and says hello. Returns 0 or an exit status (printed). */
int lc_connect(const lc_global_t *g, lc_conn_t *c);
/* run: cmd is the NULL-terminated command line. Returns the exit status. */
int lc_run(const lc_global_t *g, const lc_lock_opts_t *o, char **cmd);

#endif
