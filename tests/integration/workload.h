/*
 * workload.h - the contended workloads of the safety tests (test_mutex,
 * test_semaphore, test_rwlock, tests/cluster/test_cluster_mutex): threads
 * that loop on one lock for a few seconds, each over its own mclient (the
 * harness client is not thread-safe). A round is an acquire, now and then
 * with a short wait_ms or given up by disconnecting while it waits, then
 * the caller's critical section, then a release or, now and then, an
 * abrupt disconnect while holding.
 *
 * The mutex workload is here whole: inside the critical section a thread
 * increments a counter in a plain Redis (GET, sleep, SET: an overlap loses
 * an update) and records each grant's fence; after the run, the checks.
 *
 * Threads never call cr_assert: they record what went wrong in their
 * wl_thread's error and stop; the main thread asserts after joining them.
 */
#ifndef LB_TESTS_INTEGRATION_WORKLOAD_H
#define LB_TESTS_INTEGRATION_WORKLOAD_H

#include "tests/integration/harness.h"
#include "tests/integration/mclient.h"

#include <stdatomic.h>
#include <stddef.h>

/* One thread of a workload: where it connects, until when, its own random
 * sequence, its connection and what it counted. */
typedef struct {
	int index;
	int port;
	const char *unix_path; /* NULL: TCP */
	int64_t end_ms;
	unsigned seed;
	mclient c;
	json_int_t id;    /* of the last request sent */
	long timeouts;    /* short waits answered timeout */
	long walkaways;   /* disconnects while waiting */
	long aborts;      /* disconnects while holding */
	char error[2048]; /* what stopped the thread, or the first release refused */
} wl_thread;

/* Sets up t (clearing it) as thread k of a workload on two brokers: broker
 * k % 2, over TCP or that broker's Unix socket by turns of two
 * ((k / 2) % 2), until end_ms, seeded seed + 7919 k; not connected yet. */
void wl_thread_init(wl_thread *t, int k, lb_broker *const br[2], int64_t end_ms, unsigned seed);
/* Starts n threads running body, thread k on (char *)threads + k * size,
 * and joins them all. */
void wl_run(int n, void *(*body)(void *), void *threads, size_t size);
/* Records "thread INDEX: " and the message in t->error. */
void wl_fail(wl_thread *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A grant, as the acquire's answer said. */
typedef struct {
	const char *lock;
	json_int_t fence, count;
	char mode[16]; /* "" when the answer had none */
	char lease[256];
} wl_grant;

typedef enum {
	WL_OK,      /* acquire: granted (*g says what); release: answered ok, count 0 */
	WL_AGAIN,   /* acquire: given up (walked away) or a short wait timed out;
	             * release: disconnected abruptly instead; counted either way */
	WL_REFUSED, /* release: answered, but not ok with count 0 (the lease was
	             * taken from its holder); t->error has the first such answer */
	WL_FAILED,  /* t->error says why: the thread stops */
} wl_step;

/* Connects if need be and sends
 *   {"id":N,"op":"acquire","lock":"LOCK"FIELDS,"ttl_ms":10000[,"wait_ms":W]}
 * (fields: more members, each after a comma, or ""). 3 times in 20 with a
 * short wait, W = wait_min + 0..14 ms (a timeout is then an answer, not an
 * error); once in 20 it disconnects right after sending. Waits 20 s for
 * the answer. */
wl_step wl_acquire(wl_thread *t, const char *lock, const char *fields, unsigned wait_min,
                   wl_grant *g);
/* Ends the hold of g: once in 12 by disconnecting, else by a release that
 * must answer ok with count 0 within 10 s. */
wl_step wl_release(wl_thread *t, const wl_grant *g);

/* ---- the mutex workload --------------------------------------------------------------- */

#define WL_MAX_GRANTS 8192

typedef struct {
	int64_t at_ns;
	json_int_t fence;
	int thread;
} wl_fence_at;

/* A thread of the mutex workload; wl_mutex_thread is its body. Fill t with
 * wl_thread_init, then the fields up to overlaps. */
typedef struct {
	wl_thread t;
	const char *lock;
	const char *counter;      /* the key it increments while it holds lock */
	const char *counter_sock; /* the Unix socket of that plain Redis */
	atomic_int *inside;       /* holders of lock inside now (shared by its threads) */
	atomic_int *overlaps;     /* times a holder of lock found another inside */
	/* results */
	wl_fence_at grants[WL_MAX_GRANTS];
	int ngrants;
	long completed; /* increments done and then released (or the session closed) */
	long uncertain; /* increments whose release was refused */
} wl_mutex;

void *wl_mutex_thread(void *arg);

typedef struct {
	long completed, uncertain, aborts, walkaways, timeouts;
	int ngrants;
} wl_mutex_sum;

/* Adds what the n threads on lock (every one when lock is NULL) did to *s. */
void wl_mutex_total(const wl_mutex *w, int n, const char *lock, wl_mutex_sum *s);
/* Expects every thread to have ended without error and been granted at
 * least once; fails the test if one stopped (an error that is not a
 * refused release). */
void wl_mutex_expect_ran(const wl_mutex *w, int n);
/* The checks of lock after the run: no release refused, never two holders
 * inside at once, no increment of its counter (on counters) lost, and its
 * fences, in grant order, strictly increase. */
void wl_mutex_expect_safe(const wl_mutex *w, int n, const char *lock, lb_redis *counters);

#endif
