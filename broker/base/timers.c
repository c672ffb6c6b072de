/*
 * timers.c - two heaps of deadlines (the news first: see timers.h), one
 * uv_timer_t armed to the earliest of both.
 *
 * Invariant: after every change the uv timer is armed to the earliest
 * deadline of the two heaps, or stopped when both are empty. Firing pops
 * entries one at a time, so a callback may arm or cancel any entry, itself
 * included.
 */
#include "broker/base/timers.h"

#include "broker/base/log.h"

static struct {
	uv_loop_t *loop;
	uv_timer_t timer;
	theap_t heap;
	theap_t news; /* timer_init_news entries */
	bool firing;
	bool closed;
} T;

static void on_timer(uv_timer_t *h);

static theap_t *heap_of(const timer_ent_t *t)
{
	return t->news ? &T.news : &T.heap;
}

/* The earliest entry of both heaps, or NULL. */
static theap_node_t *earliest(void)
{
	theap_node_t *a = theap_peek(&T.heap), *b = theap_peek(&T.news);

	if (!a || (b && (b->deadline < a->deadline ||
	                 (b->deadline == a->deadline && b->seq < a->seq))))
		return b;
	return a;
}

static void rearm(void)
{
	theap_node_t *n;
	uint64_t now;

	if (T.firing)
		return; /* the firing loop rearms when it is done */
	n = earliest();
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
	while ((n = earliest()) && n->deadline <= now) {
		timer_ent_t *t = (timer_ent_t *)n;
		theap_pop(heap_of(t));
		t->fire(t);
	}
	T.firing = false;
	rearm();
}

void timers_news_first(void)
{
	uint64_t now;
	theap_node_t *n;

	if (T.firing || T.closed || !T.loop)
		return;
	now = uv_now(T.loop);
	n = theap_peek(&T.news);
	if (!n || n->deadline > now)
		return;
	T.firing = true;
	while ((n = theap_peek(&T.news)) && n->deadline <= now) {
		timer_ent_t *t = (timer_ent_t *)n;
		theap_pop(&T.news);
		t->fire(t);
	}
	T.firing = false;
	rearm();
}

void timers_init(uv_loop_t *loop)
{
	T.loop = loop;
	T.closed = false;
	theap_init(&T.heap);
	theap_init(&T.news);
	uv_timer_init(loop, &T.timer);
}

void timers_unref(void)
{
	uv_unref((uv_handle_t *)&T.timer);
}

void timers_close(void)
{
	FAILS_ASSERT(theap_size(&T.heap) == 0 && theap_size(&T.news) == 0);
	T.closed = true;
	uv_timer_stop(&T.timer);
	uv_close((uv_handle_t *)&T.timer, NULL);
	theap_free(&T.heap);
	theap_free(&T.news);
}

void timer_at(timer_ent_t *t, uint64_t deadline)
{
	if (FAILS_ASSERT(!T.closed))
		return; /* a bug: nothing may be scheduled once the loop winds down */
	theap_set(heap_of(t), &t->node, deadline);
	rearm();
}

void timer_cancel(timer_ent_t *t)
{
	if (!timer_active(t))
		return;
	theap_remove(heap_of(t), &t->node);
	rearm();
}

uint64_t timers_now(void)
{
	return uv_now(T.loop);
}

size_t timers_count(void)
{
	return theap_size(&T.heap) + theap_size(&T.news);
}
