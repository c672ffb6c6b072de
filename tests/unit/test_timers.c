/*
 * test_timers.c - the broker's deadlines (broker/base/timers.c): both
 * classes fire in deadline order from the loop's timer, and the news
 * class (timer_init_news) fires first when an I/O callback that may
 * answer calls timers_news_first after the loop stalled: libuv hands out
 * the I/O a loop turn found before that turn's timers.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "broker/base/timers.h"

static struct {
	int order[8];
	int nfired;
	bool news_at_read, plain_at_read;
	bool stalled;
	uv_pipe_t in;
	uv_prepare_t stall;
} X;

static timer_ent_t news, plain, later;

static void on_fire(timer_ent_t *t)
{
	X.order[X.nfired++] = t == &news ? 1 : t == &plain ? 2 : 3;
}

static bool fired(int which)
{
	for (int k = 0; k < X.nfired; k++)
		if (X.order[k] == which)
			return true;
	return false;
}

static void on_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
	static char b[64];

	(void)h;
	(void)size;
	*buf = uv_buf_init(b, sizeof(b));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	if (n <= 0)
		return;
	timers_news_first();
	X.news_at_read = fired(1);
	X.plain_at_read = fired(2);
	uv_read_stop(s);
}

/* The loop stalls once, right before it polls: the deadlines come due and
 * the pipe is readable when epoll_wait is asked. */
static void on_prepare(uv_prepare_t *h)
{
	struct timespec ts = {0, 80 * 1000 * 1000};

	if (X.stalled)
		return;
	X.stalled = true;
	nanosleep(&ts, NULL);
	uv_prepare_stop(h);
}

static void close_all(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

Test(timers, news_fire_before_the_io_a_stalled_loop_found, .timeout = 10)
{
	uv_loop_t loop;
	int fds[2];

	memset(&X, 0, sizeof(X));
	cr_assert_eq(uv_loop_init(&loop), 0);
	timers_init(&loop);
	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(write(fds[1], "x", 1), 1);
	cr_assert_eq(uv_pipe_init(&loop, &X.in, 0), 0);
	cr_assert_eq(uv_pipe_open(&X.in, fds[0]), 0);
	cr_assert_eq(uv_read_start((uv_stream_t *)&X.in, on_alloc, on_read), 0);
	uv_prepare_init(&loop, &X.stall);
	uv_prepare_start(&X.stall, on_prepare);

	timer_init_news(&news, on_fire);
	timer_init(&plain, on_fire);
	timer_init_news(&later, on_fire);
	/* plain is due first, news after it, later not within the stall */
	timer_at(&plain, timers_now() + 10);
	timer_at(&news, timers_now() + 20);
	timer_at(&later, timers_now() + 60000);
	cr_assert_eq(timers_count(), 3);

	while (!X.news_at_read && X.nfired < 2 && uv_run(&loop, UV_RUN_ONCE))
		;
	uv_run(&loop, UV_RUN_NOWAIT); /* the turn's own timers */
	cr_assert(X.stalled);
	cr_assert(X.news_at_read, "the news deadline had not fired when the read was handled");
	cr_assert_not(X.plain_at_read, "a plain deadline fired before the I/O (libuv's order)");
	cr_assert(fired(2), "the plain deadline never fired");
	cr_assert_not(fired(3), "a deadline not due fired");
	cr_assert_eq(X.order[0], 1, "the news deadline was not first");

	timer_cancel(&later);
	cr_assert_eq(timers_count(), 0);
	timers_close();
	close(fds[1]);
	uv_walk(&loop, close_all, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(timers, both_classes_fire_in_deadline_order, .timeout = 10)
{
	uv_loop_t loop;

	memset(&X, 0, sizeof(X));
	cr_assert_eq(uv_loop_init(&loop), 0);
	timers_init(&loop);
	timer_init_news(&news, on_fire);
	timer_init(&plain, on_fire);
	timer_init_news(&later, on_fire);
	timer_at(&later, timers_now() + 30);
	timer_at(&plain, timers_now() + 20);
	timer_at(&news, timers_now() + 10);
	timer_cancel(&later);
	timer_at(&later, timers_now() + 40); /* re-armed after a cancel */
	timers_news_first();                /* nothing due: nothing fires */
	cr_assert_eq(X.nfired, 0);
	uv_run(&loop, UV_RUN_DEFAULT); /* returns when the last one fired */
	cr_assert_eq(X.nfired, 3);
	cr_assert_eq(X.order[0], 1);
	cr_assert_eq(X.order[1], 2);
	cr_assert_eq(X.order[2], 3);
	timers_close();
	uv_run(&loop, UV_RUN_DEFAULT);
	cr_assert_eq(uv_loop_close(&loop), 0);
}
