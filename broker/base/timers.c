/*
 * timers.c - one heap of deadlines, one uv_timer_t armed to the earliest.
 *
 * Invariant: after every change the uv timer is armed to the heap's earliest
 * deadline, or stopped when the heap is empty. Firing pops entries one at a
 * time, so a callback may arm or cancel any entry, itself included.
 */
#include "broker/base/timers.h"

#include "broker/base/log.h"

static struct {
	uv_loop_t *loop;
	uv_timer_t timer;
	theap_t heap;
	bool firing;
	bool closed;
} T;

static void on_timer(uv_timer_t *h);

static void rearm(void)
{
	theap_node_t *n;
	uint64_t now;

	if (T.firing)
		return; /* the firing loop rearms when it is done */
	n = theap_peek(&T.heap);
	if (!n) {
		uv_timer_stop(&T.timer);
		return;
	}
	now = uv_now(T.loop);
	uv_timer_start(&T.timer, on_timer, n->deadline > now ? n->deadline - now : 0, 0);
}

static void on_timer(uv_timer_t *h)
{
	uint64_t now = uv_now(h->loop);
	theap_node_t *n;

	T.firing = true;
	while ((n = theap_peek(&T.heap)) && n->deadline <= now) {
		timer_ent_t *t = (timer_ent_t *)n;
		theap_pop(&T.heap);
		t->fire(t);
	}
	T.firing = false;
	rearm();
}

void timers_init(uv_loop_t *loop)
{
	T.loop = loop;
	theap_init(&T.heap);
	uv_timer_init(loop, &T.timer);
}

void timers_unref(void)
{
	uv_unref((uv_handle_t *)&T.timer);
}

void timers_close(void)
{
	FAILS_ASSERT(theap_size(&T.heap) == 0);
	T.closed = true;
	uv_timer_stop(&T.timer);
	uv_close((uv_handle_t *)&T.timer, NULL);
	theap_free(&T.heap);
}

void timer_at(timer_ent_t *t, uint64_t deadline)
{
	if (FAILS_ASSERT(!T.closed))
		return; /* a bug: nothing may be scheduled once the loop winds down */
	theap_set(&T.heap, &t->node, deadline);
	rearm();
}

void timer_cancel(timer_ent_t *t)
{
	if (!timer_active(t))
		return;
	theap_remove(&T.heap, &t->node);
	rearm();
}

uint64_t timers_now(void)
{
	return uv_now(T.loop);
}

size_t timers_count(void)
{
	return theap_size(&T.heap);
}
