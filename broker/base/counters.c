/* counters.c - see counters.h. */
#include "broker/base/counters.h"

#include <string.h>

counters_t counters;

const double counters_rtt_bounds[COUNTERS_NBOUNDS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.25,   1};
const double counters_wait_bounds[COUNTERS_NBOUNDS] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                                       1,     5,     10,   30,   60,  300};
const char *const counters_lost_reasons[COUNTERS_NLOST] = {"expired", "gone", "redis_unavailable",
                                                           "max_hold"};

static void observe(histogram_t *h, const double *bounds, double v)
{
	for (int k = 0; k < COUNTERS_NBOUNDS; k++) {
		if (v <= bounds[k]) {
			h->buckets[k]++;
			break;
		}
	}
	h->count++;
	h->sum += v;
}

void counters_acquire(int result, uint64_t waited_ms)
{
	if (result < 0 || result >= COUNTERS_NRESULTS)
		result = COUNTERS_RESULT_OTHER;
	counters.acquires[result]++;
	observe(&counters.wait, counters_wait_bounds, (double)waited_ms / 1000.0);
}

void counters_lost(const char *reason)
{
	for (int k = 0; k < COUNTERS_NLOST; k++) {
		if (strcmp(reason, counters_lost_reasons[k]) == 0)
			counters.lost[k]++;
	}
}

void counters_renewal(bool ok)
{
	if (ok)
		counters.renewals_ok++;
	else
		counters.renewals_failed++;
}

void counters_redis_rtt(uint64_t ns)
{
	observe(&counters.rtt, counters_rtt_bounds, (double)ns / 1e9);
}

const double counters_batch_bounds[COUNTERS_NBOUNDS] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128};

void counters_redis_batch(unsigned n)
{
	observe(&counters.batch, counters_batch_bounds, (double)n);
}
