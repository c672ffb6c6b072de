/*
 * timers.h - every deadline of the broker (renewals, lease expiry, max-hold,
 * keepalive, reconnect backoff, shutdown grace) in one theap with one
 * uv_timer_t armed to the earliest (redis timeout.c). Entries are embedded in
 * their owners; timer_cancel() must run before an owner is freed.
 *
 * Times are milliseconds of uv_now() (monotonic, updated once per loop turn).
 */
#ifndef LB_BROKER_TIMERS_H
#define LB_BROKER_TIMERS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "broker/base/theap.h"

typedef struct timer_ent timer_ent_t;
typedef void (*timer_fn)(timer_ent_t *t);

struct timer_ent {
	theap_node_t node; /* first: the heap gives back node pointers */
	timer_fn fire;
};

void timers_init(uv_loop_t *loop);
/* The broker is stopping: timers still fire while anything else keeps the
 * loop running (replies still to come), but no longer keep it running. */
void timers_unref(void);
/* Closes the uv timer, after uv_run returned; every entry must have been
 * cancelled by then. Run the loop once more to finish the close. */
void timers_close(void);
static inline void timer_init(timer_ent_t *t, timer_fn fire) { theap_node_init(&t->node); t->fire = fire; }
/* Arms t to fire at deadline (ms of uv_now), replacing an earlier arming. */
void timer_at(timer_ent_t *t, uint64_t deadline);
void timer_cancel(timer_ent_t *t);
static inline bool timer_active(const timer_ent_t *t) { return theap_node_active(&t->node); }
/* uv_now of the broker's loop. */
uint64_t timers_now(void);
size_t timers_count(void);

#endif
