/*
 * metrics.h - counters and histograms for Prometheus, and the optional
 * --metrics listener that serves them as text exposition at /metrics, and
 * the health probes: /healthz (liveness: 200 while the process runs) and
 * /readyz (readiness: 200 while Redis is up with the scripts loaded, else
 * 503 with a one-line reason).
 *
 * Recording is a few additions, safe to call on every request; the text is
 * built only when scraped. The listener speaks just enough HTTP/1.x: one
 * GET or HEAD per connection, bounded in size and time, answered and closed.
 */
#ifndef LB_BROKER_METRICS_H
#define LB_BROKER_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "broker/url.h"
#include "protocol/errors.h"

/* An acquire was answered: LB_OK or its error code; waited_ms is the time
 * from the request to the answer. */
void metrics_acquire(lb_err_t result, uint64_t waited_ms);
/* A lease was reported lost with this reason ("expired", "gone", ...). */
void metrics_lost(const char *reason);
/* A watchdog renewal came back (ok) or failed. */
void metrics_renewal(bool ok);
/* One Redis command's round trip. */
void metrics_redis_rtt(uint64_t ns);

/* Starts the listener; returns 0 or -1 (logged). */
int metrics_listen(uv_loop_t *loop, const listen_addr_t *addr);
/* Stops it and closes its connections. */
void metrics_close(void);

#endif
