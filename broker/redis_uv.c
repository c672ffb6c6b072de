/*
 * redis_uv.c - hiredis <-> libuv glue (see redis_uv.h).
 *
 * One uv_poll_t per context, owned by a small struct that hiredis frees
 * through the cleanup hook; the struct is freed in the poll handle's close
 * callback, never before.
 */
#include "broker/redis_uv.h"

#include <stdlib.h>

#include "broker/log.h"

typedef struct redis_uv {
	redisAsyncContext *ac; /* NULL once hiredis let go of it */
	uv_poll_t poll;
	int events;
} redis_uv_t;

static void on_poll(uv_poll_t *h, int status, int events)
{
	redis_uv_t *p = h->data;

	if (status < 0) {
		/* libuv stopped the poll; let hiredis find the socket error. When
		 * connecting, the write path checks SO_ERROR; otherwise a read
		 * returns the error. Either way hiredis disconnects. */
		if (p->ac && (p->events & UV_WRITABLE))
			redisAsyncHandleWrite(p->ac);
		else if (p->ac)
			redisAsyncHandleRead(p->ac);
		return;
	}
	if (p->ac && (events & UV_READABLE))
		redisAsyncHandleRead(p->ac);
	if (p->ac && (events & UV_WRITABLE))
		redisAsyncHandleWrite(p->ac);
}

static void update(redis_uv_t *p, int events)
{
	p->events = events;
	if (events)
		uv_poll_start(&p->poll, events, on_poll);
	else
		uv_poll_stop(&p->poll);
}

static void add_read(void *priv) { redis_uv_t *p = priv; update(p, p->events | UV_READABLE); }
static void del_read(void *priv) { redis_uv_t *p = priv; update(p, p->events & ~UV_READABLE); }
static void add_write(void *priv) { redis_uv_t *p = priv; update(p, p->events | UV_WRITABLE); }
static void del_write(void *priv) { redis_uv_t *p = priv; update(p, p->events & ~UV_WRITABLE); }

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

static void cleanup(void *priv)
{
	redis_uv_t *p = priv;

	p->ac = NULL;
	uv_close((uv_handle_t *)&p->poll, on_closed);
}

int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
	redis_uv_t *p;

	if (ac->ev.data != NULL)
		return REDIS_ERR;
	p = xcalloc(1, sizeof(*p));
	if (uv_poll_init(loop, &p->poll, ac->c.fd) != 0) {
		free(p);
		return REDIS_ERR;
	}
	p->ac = ac;
	p->poll.data = p;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}
