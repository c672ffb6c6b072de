/*
 * timers.h - every deadline of the broker (renewals, lease expiry, max-hold,
 * keepalive, reconnect backoff, shutdown grace) in one theap with one
 * uv_timer_t armed to the earliest (redis timeout.c). Entries are embedded in
 * their owners; timer_cancel() must run before an owner is freed.
 *
 * Times are milliseconds of uv_now() (monotonic, updated once per loop turn).
 *
 * News first: an entry made with timer_init_news (a lease's expiry and
 * max-hold) is news a client must hear before any answer that could
 * contradict it. libuv runs the I/O a loop turn found before that turn's
 * timers, so a broker that wakes from a stall (SIGSTOP, a long swap-in)
 * would answer requests read on waking before its overdue lease
 * deadlines fired. timers_news_first(), called at the top of every I/O
 * callback that may answer (a client's bytes, a Redis reply), fires the
 * due entries of that class first. The other entries keep libuv's order:
 * a keepalive or a command timeout must see the bytes that are waiting.
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
	bool news;         /* in the news heap (timer_init_news) */
};

void timers_init(uv_loop_t *loop);
/* The broker is stopping: timers still fire while anything else keeps the
 * loop running (replies still to come), but no longer keep it running. */
void timers_unref(void);
/* Closes the uv timer, after uv_run returned; every entry must have been
 * cancelled by then. Run the loop once more to finish the close. */
void timers_close(void);
static inline void timer_init(timer_ent_t *t, timer_fn fire) { theap_node_init(&t->node); t->fire = fire; t->news = false; }
static inline void timer_init_news(timer_ent_t *t, timer_fn fire) { timer_init(t, fire); t->news = true; }
/* Fires the due entries made with timer_init_news (see above). */
void timers_news_first(void);
/* Arms t to fire at deadline (ms of uv_now), replacing an earlier arming. */
void timer_at(timer_ent_t *t, uint64_t deadline);
void timer_cancel(timer_ent_t *t);
static inline bool timer_active(const timer_ent_t *t) { return theap_node_active(&t->node); }
/* uv_now of the broker's loop. */
uint64_t timers_now(void);
size_t timers_count(void);

#endif
