/*
 * counters.h - what the broker counts for Prometheus: acquires by result,
 * lost leases by reason, renewals, and two histograms (Redis round trips,
 * acquire waits). Any layer records (a few additions, safe on every
 * request); metrics.c, at the top, reads and renders them when scraped.
 */
#ifndef LB_BROKER_BASE_COUNTERS_H
#define LB_BROKER_BASE_COUNTERS_H

#include <stdbool.h>
#include <stdint.h>

#define COUNTERS_NBOUNDS 12
#define COUNTERS_NRESULTS 32 /* acquire results: 0 ok, else an error code */
#define COUNTERS_RESULT_OTHER (COUNTERS_NRESULTS - 1) /* a result out of range */
#define COUNTERS_NLOST 4

typedef struct histogram {
	uint64_t buckets[COUNTERS_NBOUNDS]; /* not cumulative; summed when written */
	uint64_t count;
	double sum;
} histogram_t;

typedef struct counters {
	uint64_t acquires[COUNTERS_NRESULTS]; /* by result */
	uint64_t lost[COUNTERS_NLOST];        /* by counters_lost_reasons */
	uint64_t renewals_ok, renewals_failed;
	histogram_t rtt;  /* seconds, bounds counters_rtt_bounds */
	histogram_t wait; /* seconds, bounds counters_wait_bounds */
	histogram_t batch; /* lock calls per Redis script call, bounds
	                    * counters_batch_bounds (1: a call alone) */
} counters_t;

extern counters_t counters;
extern const double counters_rtt_bounds[COUNTERS_NBOUNDS];
extern const double counters_wait_bounds[COUNTERS_NBOUNDS];
extern const double counters_batch_bounds[COUNTERS_NBOUNDS];
extern const char *const counters_lost_reasons[COUNTERS_NLOST];

/* An acquire was answered: 0 for ok or its error code (protocol/errors.h);
 * waited_ms is the time from the request to the answer. */
void counters_acquire(int result, uint64_t waited_ms);
/* A lease was reported lost with this reason ("expired", "gone", ...). */
void counters_lost(const char *reason);
/* A watchdog renewal came back (ok) or failed. */
void counters_renewal(bool ok);
/* One Redis command's round trip. */
void counters_redis_rtt(uint64_t ns);
/* One script call went to Redis carrying n lock calls (a batch, or 1). */
void counters_redis_batch(unsigned n);

#endif
