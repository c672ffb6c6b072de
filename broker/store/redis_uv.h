/*
 * redis_uv.h - attaches a hiredis 0.14 async context to a libuv loop.
 *
 * Replaces hiredis's adapters/libuv.h, whose poll callback returns early on
 * a poll error: then a refused connect or a reset connection is never
 * reported to hiredis, no connect or disconnect callback runs, and the
 * connection hangs forever. Here an error is handed to hiredis as a
 * readable/writable event, so hiredis reads the socket error and
 * disconnects with it.
 */
#ifndef LB_BROKER_REDIS_UV_H
#define LB_BROKER_REDIS_UV_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/async.h>
#include <uv.h>

/* Returns REDIS_OK or REDIS_ERR (the context is then still the caller's).
 * on_freed(priv) runs when hiredis frees the context, whatever the cause
 * (a failed connect, a disconnect, redisAsyncFree), after the pending
 * callbacks ran: hiredis 0.14 runs no disconnect callback for a context
 * that never connected, so this is the one sure sign that it is gone. */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, void (*on_freed)(void *priv),
                    void *priv);

/* The numeric address of one getaddrinfo result ("10.0.0.5", "::1") into
 * ip; false (ip untouched) when it is neither IPv4 nor IPv6. */
bool redis_uv_addr_name(const struct addrinfo *ai, char *ip, size_t len);

/* A deep copy of a reply that outlives its callback (hiredis 0.14 frees
 * replies when the callback returns: rpool's kept replies, Redlock's
 * inspect merge); redis_reply_free frees one (NULL: nothing). */
redisReply *redis_reply_copy(const redisReply *r);
void redis_reply_free(redisReply *r);

#endif
