/*
 * lockstat.h - grants and handoffs over time, for the UI (/ui/state) and
 * the metrics: per lock, a bounded table of recent grant rates; for the
 * broker, a ring of per-second samples over the last LOCKSTAT_SECONDS.
 *
 * Only this broker's grants (its waiters', re-entries not included) are
 * seen. A handoff is a grant to an acquire that waited: its latency runs
 * from when this broker learned the lock was free (a wake-up message for
 * it, or the send of the script whose reply carried the grant: a release,
 * a withdraw, a heartbeat) to the grant. Times are the loop's
 * milliseconds (uv_now), so a handoff within one loop turn counts 0.
 *
 * Bounded: LOCKSTAT_SLOTS locks at most (a new name evicts the coldest:
 * the fewest grants in the window, then the oldest grant), names of at
 * most REQ_LOCK_MAX_BYTES (longer ones are not tracked), a fixed sample
 * ring. Nothing is allocated: the tables are static.
 *
 * Recording is off until lockstat_start (the metrics listener starts it):
 * without a reader, the hooks cost a test of a flag.
 */
#ifndef LB_BROKER_LOCKS_LOCKSTAT_H
#define LB_BROKER_LOCKS_LOCKSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "broker/base/counters.h"

#define LOCKSTAT_SLOTS 256  /* locks tracked at most */
#define LOCKSTAT_WINDOW_S 10 /* a lock's grant rate: over this many seconds */
#define LOCKSTAT_SECONDS 300 /* the per-second ring: 5 minutes */
#define LOCKSTAT_LAT_KEPT 256 /* handoff latencies kept per second (a
                               * uniform sample of them past that) */

/* One second of the broker's life, closed by the 1 s sampler. */
typedef struct lockstat_sample {
	uint32_t grants;   /* grants in that second */
	uint32_t handoffs; /* of them, handoffs */
	/* handoff latency in ms: mean, median, 99th percentile, max (0
	 * without handoffs) */
	float mean_ms, p50_ms, p99_ms, max_ms;
	uint32_t leases;  /* this broker's leases at the second's end */
	uint32_t waiters; /* its pending acquires then */
} lockstat_sample_t;

/* A lock of the table, as the UI shows it. name points into the table:
 * valid until the next call of a hook or of lockstat_tick. */
typedef struct lockstat_lock {
	const char *name;
	size_t len;
	double rate;       /* grants per second over the window */
	uint64_t grants;   /* since the lock entered the table */
} lockstat_lock_t;

/* Starts recording and the 1 s sampler on loop (uv_unref'd: it keeps no
 * loop alive); a second call does nothing. */
void lockstat_start(uv_loop_t *loop);
/* Stops recording and closes the sampler (its close completes in the
 * loop's next turn; the handle is static). The data stays readable. */
void lockstat_stop(void);

/* ---- hooks (locks/) ------------------------------------------------------- */

/* A waiter of lock was granted it: created_at is when its acquire came,
 * sent_at when the script whose reply carried the grant went out, own
 * whether that script was the waiter's own acquire. */
void lockstat_grant(const char *lock, size_t len, uint64_t created_at, uint64_t sent_at, bool own);
/* A wake-up message for lock, which has waiters here, came. */
void lockstat_wake(const char *lock, size_t len);

/* ---- reading -------------------------------------------------------------- */

/* Closes the current second (the sampler calls it; tests may). */
void lockstat_tick(void);
/* The lock's grant rate (grants per second over the window); 0 when the
 * table does not hold it. */
double lockstat_rate(const char *lock, size_t len);
/* The hottest locks by rate (ties: more grants first), at most max of
 * them, only those with a grant in the window; returns how many. */
size_t lockstat_hot(lockstat_lock_t *out, size_t max);
/* The last n samples (n <= LOCKSTAT_SECONDS), oldest first; returns how
 * many there are (fewer right after the start). */
size_t lockstat_series(lockstat_sample_t *out, size_t n);
/* ms since the newest sample was closed. */
uint64_t lockstat_since_tick(void);
/* Grants seen since the start. */
uint64_t lockstat_grants_total(void);
/* The handoff latencies since the start, in seconds. */
const histogram_t *lockstat_handoffs(void);
extern const double lockstat_handoff_bounds[COUNTERS_NBOUNDS];

#endif
