/*
 * broker.h - the broker's lifecycle (start, shutdown, free), included by
 * main alone, and the glossary of broker/.
 *
 * Glossary
 *   session  one client connection; requests on it are pipelined and may be
 *            answered out of order. Owns its non-detached leases.
 *   lease    the right to a lock granted to a session, named by an
 *            unguessable token. Knowing the token is the right to extend and
 *            release it. A detached lease belongs to no session and lives in
 *            Redis only.
 *   holder   Redis's view of a lease: an entry in the lock's holder set with
 *            its own expiry. The holder id is the lease token.
 *   waiter   a pending acquire queued on a lock (issue 3).
 *   fence    the fencing token: strictly increasing per lock name.
 *
 * Truth lives in Redis and changes only in lua/ scripts; this process keeps
 * only what is local: sessions, their leases, timers, and counters.
 *
 * Layers, bottom to top (a layer includes only itself and those below it,
 * and reports upward through callbacks registered at start; `make
 * deps-check` holds them): base/ (heap, tables, timers, log, URLs,
 * settings, the shared state), protocol/ (the wire format), store/ (the
 * seam to Redis), locks/ (what a lock does), net/ (bytes in and out), and
 * on top broker.c, config.c and metrics.c, which start, wire and stop.
 */
#ifndef LB_BROKER_BROKER_H
#define LB_BROKER_BROKER_H

#include <uv.h>

#include "broker/config.h"

/* Starts listening and connecting; returns 0 or -1 (logged). */
int broker_start(uv_loop_t *loop, lb_config_t *cfg, int argc, char **argv);
/* Begins a graceful shutdown (as on SIGTERM). */
void broker_shutdown(void);
/* Frees what outlives the loop (call after uv_run returned). */
void broker_free(void);

#endif
