/*
 * redis_uv.c - hiredis <-> libuv glue (see redis_uv.h).
 *
 * One uv_poll_t per context, owned by a small struct that hiredis frees
 * through the cleanup hook; the struct is freed when the poll and the
 * flush handles have both closed, never before.
 *
 * Writes of a connected context are not polled for: hiredis asks to write
 * after every command, and a poll for POLLOUT would cost two epoll_ctl
 * calls to start and two to stop per batch. Instead an idle handle flushes
 * the context's buffer once per loop turn (before the loop next waits, and
 * an active idle handle keeps it from waiting). Only when the socket does
 * not take everything does the poll wait for POLLOUT. The poll itself is
 * only restarted when what it watches changes.
 */
#include "broker/store/redis_uv.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"

typedef struct redis_uv {
	redisAsyncContext *ac; /* NULL once hiredis let go of it */
	uv_poll_t poll;
	uv_idle_t flush;
	int events;    /* what the poll watches */
	bool flushing; /* inside on_flush: a write request means the socket is full */
	int open;      /* handles not yet closed */
	void (*on_freed)(void *priv);
	void *priv;
} redis_uv_t;

static void on_poll(uv_poll_t *h, int status, int events)
{
	redis_uv_t *p = h->data;

	/* What expired while the broker stalled is told before any reply read
	 * now answers a client (timers.h). */
	timers_news_first();
	if (status < 0) {
		/* libuv stopped the poll; let hiredis find the socket error. When
		 * connecting, the write path checks SO_ERROR; otherwise a read
		 * returns the error. Either way hiredis disconnects. If the read
		 * returns data instead, hiredis asks for reads again, and the
		 * poll must restart: it watches nothing now. */
		int was = p->events;

		p->events = 0;
		if (p->ac && (was & UV_WRITABLE))
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
	if (events == p->events)
		return;
	p->events = events;
	if (events)
		uv_poll_start(&p->poll, events, on_poll);
	else
		uv_poll_stop(&p->poll);
}

static void on_flush(uv_idle_t *h)
{
	redis_uv_t *p = h->data;

	uv_idle_stop(h);
	if (!p->ac)
		return;
	p->flushing = true;
	redisAsyncHandleWrite(p->ac); /* may end in cleanup(): p stays valid */
	p->flushing = false;
}

static void add_read(void *priv) { redis_uv_t *p = priv; update(p, p->events | UV_READABLE); }
static void del_read(void *priv) { redis_uv_t *p = priv; update(p, p->events & ~UV_READABLE); }

static void add_write(void *priv)
{
	redis_uv_t *p = priv;

	/* A connect in progress, or a buffer the socket did not take: wait
	 * until the socket is writable. */
	if (p->flushing || !(p->ac->c.flags & REDIS_CONNECTED))
		update(p, p->events | UV_WRITABLE);
	else
		uv_idle_start(&p->flush, on_flush);
}

static void del_write(void *priv)
{
	redis_uv_t *p = priv;

	uv_idle_stop(&p->flush);
	update(p, p->events & ~UV_WRITABLE);
}

static void on_closed(uv_handle_t *h)
{
	redis_uv_t *p = h->data;

	if (--p->open == 0)
		free(p);
}

static void cleanup(void *priv)
{
	redis_uv_t *p = priv;

	p->ac = NULL;
	uv_close((uv_handle_t *)&p->poll, on_closed);
	uv_close((uv_handle_t *)&p->flush, on_closed);
	if (p->on_freed)
		p->on_freed(p->priv);
}

int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, void (*on_freed)(void *priv),
                    void *priv)
{
	redis_uv_t *p;

	if (ac->ev.data != NULL)
		return REDIS_ERR;
	p = xcalloc(1, sizeof(*p));
	if (uv_poll_init(loop, &p->poll, ac->c.fd) != 0) {
		free(p);
		return REDIS_ERR;
	}
	uv_idle_init(loop, &p->flush);
	p->open = 2;
	p->ac = ac;
	p->on_freed = on_freed;
	p->priv = priv;
	p->poll.data = p;
	p->flush.data = p;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}

bool redis_uv_addr_name(const struct addrinfo *ai, char *ip, size_t len)
{
	if (ai->ai_family == AF_INET6)
		return uv_ip6_name((const struct sockaddr_in6 *)ai->ai_addr, ip, len) == 0;
	if (ai->ai_family == AF_INET)
		return uv_ip4_name((const struct sockaddr_in *)ai->ai_addr, ip, len) == 0;
	return false;
}

redisReply *redis_reply_copy(const redisReply *r)
{
	redisReply *c = xcalloc(1, sizeof(*c));

	c->type = r->type;
	c->integer = r->integer;
	if (r->str) {
		c->str = xmalloc(r->len + 1);
		memcpy(c->str, r->str, r->len);
		c->str[r->len] = '\0';
		c->len = r->len;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
		c->element = xcalloc(r->elements, sizeof(*c->element));
		c->elements = r->elements;
		for (size_t k = 0; k < r->elements; k++)
			c->element[k] = redis_reply_copy(r->element[k]);
	}
	return c;
}

void redis_reply_free(redisReply *r)
{
	if (!r)
		return;
	for (size_t k = 0; k < r->elements; k++)
		redis_reply_free(r->element[k]);
	free(r->element);
	free(r->str);
	free(r);
}
