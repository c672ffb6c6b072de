/*
 * mclient.h - a tiny blocking line-protocol client that threads can use
 * (the harness client keeps one global state per test process and is not
 * thread-safe). Used by the multi-threaded safety workloads; a thread never
 * calls cr_assert: it records what went wrong for the main thread.
 */
#ifndef LB_TESTS_INTEGRATION_MCLIENT_H
#define LB_TESTS_INTEGRATION_MCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct {
	int fd;
	char buf[65536];
	size_t len;
	char last_event[512];
} mclient;

/* Connects over the Unix socket unix_path, or TCP 127.0.0.1:port when it is
 * NULL. Returns 0 or -1 (c->fd is then -1). */
int mc_connect(mclient *c, int port, const char *unix_path);
void mc_close(mclient *c);
/* Writes all of line; false when the connection failed. */
bool mc_send(mclient *c, const char *line);
/* Reads the response to the integer id (events are skipped, the last one
 * kept in c->last_event). NULL on timeout, close or garbage. The caller
 * decrefs. */
json_t *mc_wait(mclient *c, json_int_t id, int timeout_ms);
/* The next event within timeout_ms (answers read on the way are dropped),
 * or NULL. The caller decrefs. */
json_t *mc_event(mclient *c, int timeout_ms);
/* The error code of a response ("timeout", "not_held", ...), "" when it
 * has none. */
const char *mc_err_code(const json_t *resp);

/* CLOCK_MONOTONIC in ns: one clock for every thread's records. */
int64_t mc_now_ns(void);
/* A small LCG for per-thread randomness with a fixed seed. */
unsigned mc_rand(unsigned *s);

#endif
