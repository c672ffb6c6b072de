/*
 * support.h - what the C client's tests share: the environment that
 * tests/clients/with-broker.sh sets up (a test that needs it is skipped
 * without it), unique lock names, a tiny RESP client to reach behind the
 * broker's back, and private brokers a test may kill and restart.
 *
 * Private brokers are children of the test's process with
 * PR_SET_PDEATHSIG, and every test that starts one has .fini =
 * brokers_stop_all, so none outlives its test, failed or not.
 */
#ifndef LBC_TESTS_SUPPORT_H
#define LBC_TESTS_SUPPORT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <criterion/criterion.h>

#include "lbclient.h"

/* The variable's value, or skips the test. */
const char *need_env(const char *name);
#define NEED_BROKER() need_env("LOCKBROKER_URL")

/* A lock name no other test uses: "c-WHAT-<pid>-<n>" (static per call site
 * is not enough across forks: pid makes it unique). Into buf. */
const char *unique_name(char *buf, size_t len, const char *what);

/* lbc_connect to url with opts (NULL: defaults); asserts it worked. */
lbc_client_t *must_connect(const char *url, const lbc_options_t *opts);
/* lbc_acquire that must succeed. */
lbc_lease_t *must_acquire(lbc_client_t *c, const char *name, const lbc_acquire_opts_t *o);

int64_t now_ms(void);
void sleep_ms(int ms);

/* ---- Redis behind the broker's back ---------------------------------------------- */

/* Deletes lock name's keys ("lb:{NAME}" and "lb:{NAME}:*") in the suite's
 * Redis. Returns how many were deleted, or -1. */
int redis_delete_lock(const char *name);

/* ---- private brokers ------------------------------------------------------------- */

typedef struct broker {
	pid_t pid;
	int port;
	char url[64];
	char redis[128];
	char *args[16]; /* extra flags, owned */
	int nargs;
} broker_t;

/* A free loopback TCP port (bound then closed). */
int free_port(void);
/* Prepares b: port (0: a free one), Redis URL (NULL: the suite's), extra
 * flags (NULL-terminated, may be NULL). Does not start it. */
void broker_init(broker_t *b, int port, const char *redis, const char *const *extra);
/* Starts it and waits until it serves (want_redis: an acquire is granted;
 * else it answers ping). Returns 0 or -1. */
int broker_start(broker_t *b, bool want_redis);
/* Sends sig; for SIGKILL also reaps it. */
void broker_kill(broker_t *b, int sig);
/* Waits for it to exit (up to timeout_ms); 0 when it did. */
int broker_wait(broker_t *b, int timeout_ms);
void broker_free(broker_t *b);
/* .fini of tests that start brokers: kills whatever still runs. */
void brokers_stop_all(void);

/* An on_event callback recording events (thread-safe); the recorder is
 * the callback's arg. */
typedef struct recorder {
	int lost, shutdown, closing, disconnected, other;
	char last_lost_lease[136];
	char last_lost_reason[32];
	char last_disconnected_reason[160]; /* the client's "disconnected": why */
	int64_t grace_ms;
} recorder_t;
void record_event(void *arg, const lbc_event_t *ev);
/* A copy of r taken under the recorder's lock. */
recorder_t recorder_get(recorder_t *r);

/* Inspects lock name through c until it has want waiters or timeout_ms
 * passed; returns the last count seen (-1: inspect failed). */
int64_t wait_for_waiters(lbc_client_t *c, const char *name, int64_t want, int timeout_ms);

/* ---- fake brokers (threads of a test) ----------------------------------------------- */

/* Reads one request line (without its \n) from fd into buf, a byte at a
 * time. 0, or -1 at EOF, error or a line longer than cap - 1. */
int fake_read_line(int fd, char *buf, size_t cap);
/* The request's "id", or -1. */
long fake_request_id(const char *line);

/* ---- protocol/PROTOCOL.md ---------------------------------------------------------- */

/* The codes of the "Error codes" table of protocol/PROTOCOL.md (the tests
 * run from the top of the tree; a few parent directories are tried too),
 * as written in its first column, into codes (at most max). Returns how
 * many, or -1 with why (the file, the heading or the table not found, or a
 * row that is not a code). */
int protocol_error_codes(char (*codes)[32], int max, char *why, size_t why_len);

#endif
