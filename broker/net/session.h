/*
 * session.h - one client connection: framing, dispatch, writes with
 * backpressure, keepalive, and the leases it owns.
 *
 * States: OPEN (reading and answering) -> CLOSING (handle being closed; its
 * leases already released) -> CLOSED (handle closed). session_set_state() is
 * the one place the state changes. A session is freed only when it is
 * CLOSED and no asynchronous operation holds a reference (refs == 0), so a
 * Redis reply that arrives after a disconnect still finds valid memory
 * (redis freeClientAsync does the same).
 *
 * Backpressure: while more than max_inflight requests wait on Redis or more
 * than SESSION_WRITE_HIGH bytes wait to be written, the session stops
 * reading and parsing; it resumes below the limits. So a client that never
 * reads its responses cannot grow the broker's memory without bound.
 *
 * Order: requests take effect in the order they were sent (dispatch.c
 * parks a request that would overtake an earlier one), and every request
 * gets exactly one answer; `unanswered` counts those still owed, so a
 * half-closed session (the client shut down its sending side) ends once
 * the last is out.
 *
 * Output: responses and events are appended to the session's out buffer and
 * written once per loop turn (session_flush_dirty, from the broker's check
 * handle), so a pipelined burst costs one write, not one per response. At
 * most one uv_write per session is in flight; its buffer is `wdata`.
 */
#ifndef LB_BROKER_SESSION_H
#define LB_BROKER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

#include "broker/base/timers.h"
#include "broker/locks/client.h"
#include "protocol/errors.h"
#include "protocol/frame.h"
#include "protocol/resp.h"

#define SESSION_WRITE_HIGH (1u << 20)
#define SESSION_WRITE_LOW (256u << 10)
#define SESSION_LINGER_MS 2000 /* how long a closing session may flush */
#define SESSION_MAX_AUTH_FAILURES 3
/* A half-closed session that is still owed answers checks this long after
 * the half-close, then every SESSION_HUP_CHECK_MS, whether its client is
 * gone for good (see session.c). */
#define SESSION_HUP_FIRST_MS 200
#define SESSION_HUP_CHECK_MS 1000

struct pending_id;
struct parked;

typedef enum session_state {
	SESSION_OPEN,
	SESSION_CLOSING,
	SESSION_CLOSED,
} session_state_t;

typedef struct session {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} h;
	struct session *prev, *next; /* server.sessions */
	session_state_t state;
	uint64_t id;
	char name[24]; /* "s<id>": in logs and in hello's answer */

	frame_t frame;
	char *out;         /* responses not yet handed to libuv; owned */
	size_t out_len, out_cap;
	char *wdata;       /* the buffer of the write in flight; owned */
	size_t wlen;
	uv_write_t wreq;
	bool writing;      /* wreq is in flight */
	bool dirty;        /* in the list of sessions to flush */
	unsigned inflight; /* requests waiting on Redis */
	unsigned refs;     /* asynchronous operations holding this pointer */
	bool reading;
	bool flushing; /* closing after its last writes (uv_shutdown) */
	bool eof;      /* the client sent EOF: answer what was read, then close */
	const char *ended; /* how the connection ended, for the log: "eof" (the
	                      client closed it, or half-closed it), "reset",
	                      "read_error"; NULL: the broker ended it (why) */

	bool authed;
	int auth_failures;

	int64_t keepalive_ms; /* 0: off */
	uint64_t last_rx;     /* uv_now of the last bytes received */
	timer_ent_t keepalive;
	timer_ent_t linger;
	timer_ent_t hup_check; /* half-closed: is the client gone for good? */
	uv_shutdown_t shutdown_req;

	/* What the locks layer sees of it: its leases and waiters, its name,
	 * hello's client label (an owned, NUL-terminated copy, or NULL). */
	client_t lk;

	/* Requests (dispatch.c): */
	size_t unanswered;          /* read and not yet answered */
	uint64_t answers;           /* answers sent so far */
	struct pending_id *ids;     /* ids of requests not yet answered */
	struct parked *parked, *parked_tail; /* waiting for their turn */
	size_t nparked;
	unsigned presteps; /* requests on a step before their lock script (a
	                    * detached lease's pointer): later ones wait */
} session_t;

/* What the session layer reports upward, registered once at start: a
 * request line (line), a session's parked requests may run (resume), a
 * session ends (ended: before its waiters and leases go), an answer was
 * sent (answered), and a session finished closing (gone). */
typedef struct session_hooks {
	void (*line)(session_t *s, const char *line, size_t len);
	void (*resume)(session_t *s);
	void (*ended)(session_t *s);
	void (*answered)(session_t *s, const json_t *id);
	void (*gone)(void);
} session_hooks_t;
void session_set_hooks(const session_hooks_t *h);

/* The functions behind the locks layer's client.h, for client_set_ops. */
extern const client_ops_t session_client_ops;

/* The open and closing sessions, newest first (walk with ->next). */
session_t *session_first(void);

/* Accepts a connection from a listener. */
void session_accept(uv_stream_t *listener, bool is_tcp);

/* Takes ownership of msg (an event) and queues it as one line. Dropped
 * when the session is not open. */
void session_send(session_t *s, json_t *msg);
/* The same for msg, the answer to the request with this id (NULL: none):
 * every request gets one answer, through this or the functions below. */
void session_answer(session_t *s, const json_t *id, json_t *msg);
/* The hot answers, written straight into the output when resp can (see
 * resp_line_acquired), through the builders otherwise. */
void session_send_acquired(session_t *s, const json_t *id, const resp_acquired_t *a);
void session_send_released(session_t *s, const json_t *id, int64_t count);
void session_send_extended(session_t *s, const json_t *id, int64_t ttl_ms);
/* Sends an error response; message may be NULL for the code's default. */
void session_send_error(session_t *s, const json_t *id, lb_err_t code, const char *message);

/* Ends the session now: releases its leases, closes the connection. */
void session_close(session_t *s, const char *why);
/* Ends the session after what was queued has been written (at most
 * SESSION_LINGER_MS). */
void session_close_after_flush(session_t *s, const char *why);
/* The broker closes the session for its own reason: sends
 * {"event":"closing","reason":reason}, then closes after the flush. */
void session_end_with(session_t *s, const char *reason);

static inline bool session_open(const session_t *s) { return s->state == SESSION_OPEN; }
static inline void session_ref(session_t *s) { s->refs++; }
void session_unref(session_t *s);

/* An asynchronous request began / ended: counts toward max_inflight. */
static inline void session_op_begin(session_t *s) { s->inflight++; s->refs++; }
void session_op_end(session_t *s);
/* A request's step before its lock script began / ended (see presteps). */
static inline void session_prestep_begin(session_t *s) { s->presteps++; }
void session_prestep_end(session_t *s);
/* The session has requests waiting for their turn, or owes a half-closed
 * client its last answer: look at it in the next flush pass. */
void session_wake(session_t *s);

/* Bytes queued and not yet written. */
static inline size_t session_unsent(const session_t *s) { return s->out_len + s->wlen; }
/* Writes what every session queued this loop turn. */
void session_flush_dirty(void);
/* Frees the list of sessions to flush (at exit). */
void session_flush_list_free(void);

/* Arms or re-arms keepalive checking (hello's keepalive_ms). */
void session_set_keepalive(session_t *s, int64_t keepalive_ms);

#endif
