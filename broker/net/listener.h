/*
 * listener.h - the sockets clients connect to: TCP and Unix.
 *
 * A Unix socket file left by a dead broker is replaced; one a live process
 * answers on is never stolen, and a path that is not a socket is never
 * removed. The socket file gets the configured mode and is removed again
 * when its listener closes.
 */
#ifndef LB_BROKER_LISTENER_H
#define LB_BROKER_LISTENER_H

#include <stdbool.h>
#include <uv.h>

#include "broker/base/url.h"

typedef struct listener {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} h;
	listen_addr_t addr;
	struct listener *next;
	bool bound_path; /* we created addr.path and remove it on close */
} listener_t;

/* Opens every configured listener; returns 0, or -1 (logged) after closing
 * whatever it had opened. */
int listeners_open(uv_loop_t *loop);
/* Stops accepting: closes every listener (idempotent). */
void listeners_close(void);

#endif
