/*
 * nodeask.h - one hiredis async connection to one node at a time, to ask
 * it something (or to stay subscribed), with the bookkeeping every such
 * connection needs: sentinel.c asks the sentinels one at a time (and
 * watches one), cluster_topo.c asks the cluster's nodes one at a time.
 *
 * nodeask_connect(na, host, port) looks host up (uv_getaddrinfo, unless it
 * is a numeric address), connects, sends AUTH when na->password is set,
 * and calls na->open(na) for the user to queue its commands on na->ac,
 * each with nodeask_tag(na) as its callback's priv. When the node gives
 * no answer (the lookup fails, the connect fails, AUTH is refused, the
 * connection is lost) na->fail(na, in_cb) runs, and the user moves on.
 *
 * Invariants:
 *   - every connect and every abandon bumps `attempt`; a reply callback
 *     asks nodeask_of(ac, priv), which is NULL for a stale attempt, so a
 *     late reply of an abandoned connection changes nothing;
 *   - na->ac is the live context or NULL, never a freed one: hiredis frees
 *     a context itself after a failed connect or a disconnect, and a ref
 *     given to redis_uv's on_freed clears na->ac when that happens; we free
 *     one only outside its callbacks (nodeask_abandon with in_cb false),
 *     and from inside ask hiredis to disconnect;
 *   - one lookup at a time: a connect asked for while a stale lookup is
 *     in flight waits for it and then goes (to the address asked last),
 *     unless an abandon came meanwhile.
 * Log lines name the node as `what` says ("sentinel", "cluster node"),
 * with `key`=host:port and, when set, role=`role`.
 */
#ifndef LB_BROKER_STORE_NODEASK_H
#define LB_BROKER_STORE_NODEASK_H

#include <stdbool.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <uv.h>

#include "broker/base/url.h"

typedef struct nodeask nodeask_t;

struct nodeask {
	/* Set by the user before the first connect. */
	uv_loop_t *loop;
	const char *what;     /* "sentinel", "cluster node": for the log */
	const char *key;      /* the log field of the address: "sentinel", "node" */
	const char *role;     /* a role=... field, or NULL */
	const char *password; /* AUTH first when set (borrowed) */
	bool log_lost;        /* log a connection lost after it was made */
	void (*open)(nodeask_t *na);              /* queue the commands on na->ac */
	void (*fail)(nodeask_t *na, bool in_cb);  /* no answer from the node */
	void *data;

	/* Its state: read ac; the rest is nodeask.c's. */
	redisAsyncContext *ac;
	char host[URL_HOST_MAX + 1];
	int port;
	uintptr_t attempt;
	uv_getaddrinfo_t gai;
	bool resolving;
	uintptr_t gai_attempt; /* the attempt the lookup in flight is for */
	bool reconnect;        /* connect once the stale lookup is back */
	bool closed;
};

/* Gives up the current connection (and any connect waiting for a stale
 * lookup) and connects to host:port. */
void nodeask_connect(nodeask_t *na, const char *host, int port);
/* Gives up the current connection, if any. in_cb: called from one of its
 * own callbacks (hiredis frees it after the disconnect request). */
void nodeask_abandon(nodeask_t *na, bool in_cb);
/* The priv to give each command's callback. */
static inline void *nodeask_tag(const nodeask_t *na)
{
	return (void *)na->attempt;
}
/* In a reply callback: na when the reply is for its current attempt
 * (ac->data is the nodeask), else NULL. */
nodeask_t *nodeask_of(const redisAsyncContext *ac, void *priv);
/* Abandons for good: a lookup in flight is cancelled, nothing connects
 * again. */
void nodeask_close(nodeask_t *na);

#endif
