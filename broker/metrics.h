/*
 * metrics.h - the optional --metrics listener: the counters (base/counters.h)
 * as Prometheus text exposition at /metrics, and
 * the health probes: /healthz (liveness: 200 while the process runs) and
 * /readyz (readiness: 200 while Redis is up with the scripts loaded, else
 * 503 with a one-line reason), and the live page: /ui (ui/, embedded:
 * ui_assets.h) and the JSON it polls, /ui/state (ui_state.h), which show
 * lock names and client labels of this broker's sessions, never tokens.
 *
 * The text is built only when scraped. The listener speaks just enough HTTP/1.x: one
 * GET or HEAD per connection, bounded in size and time, answered and closed.
 */
#ifndef LB_BROKER_METRICS_H
#define LB_BROKER_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "broker/base/url.h"

/* Starts the listener; returns 0 or -1 (logged). */
int metrics_listen(uv_loop_t *loop, const listen_addr_t *addr);
/* Stops it and closes its connections. */
void metrics_close(void);

#endif
