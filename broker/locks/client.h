/*
 * client.h - the party a lock is held for, as the locks layer sees it: a
 * session of the net layer, with the leases and pending acquires it owns
 * and the few things locks/ asks of it (an answer, an event, a reference
 * while a reply is on its way). The net layer embeds a client_t in each
 * session and registers the functions behind these once, at start
 * (client_set_ops); locks/ never names the net layer.
 *
 * Ownership: the client's leases, waiters and watches are owned by
 * lease.c, waitq.c and watch.c; label is owned by whoever embeds the client (the session).
 */
#ifndef LB_BROKER_LOCKS_CLIENT_H
#define LB_BROKER_LOCKS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "protocol/errors.h"
#include "protocol/resp.h"

struct lease;
struct waiter;
struct watch;

typedef struct client {
	struct lease *leases;   /* its non-detached leases (lease.c) */
	size_t nleases;
	struct waiter *waiters; /* its pending acquires (waitq.c) */
	size_t nwaiters;        /* of those, the ones that still wait */
	struct watch *watches;  /* its watches (watch.c) */
	size_t nwatches;
	const char *name;       /* "s<id>", in logs */
	char *label;            /* hello's client label (inspect shows it), or NULL */
	size_t label_len;
} client_t;

typedef struct client_ops {
	bool (*open)(const client_t *c); /* answers and events still reach it */
	/* A reference that keeps the client's memory while a reply that names
	 * it is on its way; op_begin/op_end also count toward its throttle. */
	void (*ref)(client_t *c);
	void (*unref)(client_t *c);
	void (*op_begin)(client_t *c);
	void (*op_end)(client_t *c);
	/* A request is on a step before its lock script (its later ones wait). */
	void (*prestep_begin)(client_t *c);
	void (*prestep_end)(client_t *c);
	/* The answer to the request with this id (each request gets one). */
	void (*acquired)(client_t *c, const json_t *id, const resp_acquired_t *a);
	void (*released)(client_t *c, const json_t *id, int64_t count);
	void (*extended)(client_t *c, const json_t *id, int64_t ttl_ms);
	void (*error)(client_t *c, const json_t *id, lb_err_t code, const char *message);
	void (*answer)(client_t *c, const json_t *id, json_t *msg); /* takes msg */
	void (*event)(client_t *c, json_t *msg);                    /* takes msg */
} client_ops_t;

/* The net layer's functions, once at start. */
void client_set_ops(const client_ops_t *ops);

/* The answers to acquire_all's steps (an id that is a JSON real, which no
 * client's id can be: acquire_all.h) go to acquire_all.c, never out. */
void acquire_all_answer_acquired(client_t *c, const json_t *id, const resp_acquired_t *a);
void acquire_all_answer_error(client_t *c, const json_t *id, lb_err_t code, const char *msg);

extern client_ops_t client_ops;

static inline bool client_open(const client_t *c) { return client_ops.open(c); }
static inline void client_ref(client_t *c) { client_ops.ref(c); }
static inline void client_unref(client_t *c) { client_ops.unref(c); }
static inline void client_op_begin(client_t *c) { client_ops.op_begin(c); }
static inline void client_op_end(client_t *c) { client_ops.op_end(c); }
static inline void client_prestep_begin(client_t *c) { client_ops.prestep_begin(c); }
static inline void client_prestep_end(client_t *c) { client_ops.prestep_end(c); }
static inline void client_send_acquired(client_t *c, const json_t *id, const resp_acquired_t *a)
{
	if (id && json_is_real(id))
		acquire_all_answer_acquired(c, id, a);
	else
		client_ops.acquired(c, id, a);
}
static inline void client_send_released(client_t *c, const json_t *id, int64_t count)
{
	if (!(id && json_is_real(id))) /* a give-back of acquire_all's: nobody waits */
		client_ops.released(c, id, count);
}
static inline void client_send_extended(client_t *c, const json_t *id, int64_t ttl_ms)
{
	client_ops.extended(c, id, ttl_ms);
}
static inline void client_send_error(client_t *c, const json_t *id, lb_err_t code, const char *msg)
{
	if (id && json_is_real(id))
		acquire_all_answer_error(c, id, code, msg);
	else
		client_ops.error(c, id, code, msg);
}
static inline void client_answer(client_t *c, const json_t *id, json_t *msg)
{
	client_ops.answer(c, id, msg);
}
static inline void client_send(client_t *c, json_t *msg) { client_ops.event(c, msg); }

#endif
