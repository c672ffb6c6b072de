/*
 * session.c - one client connection (see session.h).
 *
 * Reads go through one shared buffer (the loop is single-threaded and
 * frame_feed copies what it keeps), so an idle session costs no read
 * buffer. Output is coalesced per loop turn: session_send appends to the
 * out buffer and puts the session on the dirty list (holding a reference);
 * session_flush_dirty tries uv_try_write and hands only what the socket did
 * not take to one uv_write. The read side pauses for backpressure and
 * resumes from session_op_end() and the write callback.
 */
#include "broker/net/session.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/locks/lease.h"
#include "broker/locks/waitq.h"
#include "broker/locks/acquire_all.h"
#include "broker/locks/watch.h"
#include "protocol/resp.h"

#define READ_BUF_SIZE 65536

#define OUT_KEEP_CAP 4096 /* an emptied out buffer larger than this is freed */
#define LOG_LABEL_MAX 128 /* bytes of a client label in the log */

/* The requests' side (dispatch.c) and the lifecycle, registered at start. */
static session_hooks_t H;

/* Every open and closing session, newest first; ids count up from 1. */
static session_t *sessions;
static uint64_t next_id;

/* Sessions with output queued this loop turn; each entry holds a ref. */
static struct {
	session_t **v;
	size_t len, cap;
} dirty;

static void session_process(session_t *s);
static void flush(session_t *s);
static void session_kick(session_t *s);
static void shutdown_when_written(session_t *s);
static bool throttled(const session_t *s);
static void on_keepalive(timer_ent_t *t);
static void on_linger(timer_ent_t *t);
static void on_hup_check(timer_ent_t *t);

static session_t *from_handle(uv_handle_t *h)
{
	return (session_t *)h; /* h is the first member */
}

static void set_state(session_t *s, session_state_t state)
{
	s->state = state;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char read_buf[READ_BUF_SIZE];

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(read_buf, sizeof(read_buf));
}

static void maybe_free(session_t *s)
{
	if (s->state != SESSION_CLOSED || s->refs > 0)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	frame_free(&s->frame);
	free(s->out);
	free(s->lk.label);
	free(s);
	if (H.gone)
		H.gone();
}

void session_unref(session_t *s)
{
	REQUIRE(s->refs > 0);
	s->refs--;
	maybe_free(s);
}

static void on_close(uv_handle_t *h)
{
	session_t *s = from_handle(h);

	server.nconnections--;
	set_state(s, SESSION_CLOSED);
	maybe_free(s);
}

/* Everything but the handle: leases, timers, counters. */
static void end_session(session_t *s, const char *why)
{
	size_t n = s->lk.nleases;

	set_state(s, SESSION_CLOSING);
	server.nsessions--;
	timer_cancel(&s->keepalive);
	timer_cancel(&s->hup_check);
	if (s->reading)
		uv_read_stop(&s->h.stream);
	s->reading = false;
	H.ended(s); /* parked requests are never run */
	/* Waiters first: none of them may be granted what the session's
	 * leases free next (both go out on the lock's connection, in order). */
	waitq_client_end(&s->lk);
	watch_client_end(&s->lk);
	acquire_all_client_end(&s->lk);
	while (s->lk.leases)
		lease_release_now(s->lk.leases);
	char label[LOG_LABEL_MAX + 4];
	/* how it ended: the client's side (eof, reset) or the broker's reason */
	LOG(LOG_INFO, "msg=\"session closed\" session=%s client=\"%s\" ended=%s why=\"%s\" leases_released=%zu",
	    s->name, s->lk.label ? log_masked(s->lk.label, s->lk.label_len, label, LOG_LABEL_MAX) : "",
	    s->ended ? s->ended : "by_broker", why, n);
}

void session_close(session_t *s, const char *why)
{
	if (s->state == SESSION_OPEN)
		end_session(s, why);
	if (s->state == SESSION_CLOSING && !uv_is_closing(&s->h.handle)) {
		timer_cancel(&s->linger);
		uv_close(&s->h.handle, on_close);
	}
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	session_t *s = req->data;

	(void)status;
	session_close(s, "flushed");
}

/* The last step of a close after flush: once everything queued has been
 * handed to the socket and written, shut the write side down; the close
 * follows in on_shutdown. */
static void shutdown_when_written(session_t *s)
{
	if (s->writing || s->out_len > 0 || s->state != SESSION_CLOSING || uv_is_closing(&s->h.handle))
		return;
	s->shutdown_req.data = s;
	if (uv_shutdown(&s->shutdown_req, &s->h.stream, on_shutdown) != 0)
		session_close(s, "shutdown failed");
}

void session_close_after_flush(session_t *s, const char *why)
{
	if (s->state != SESSION_OPEN)
		return;
	end_session(s, why);
	s->flushing = true;
	timer_at(&s->linger, timers_now() + SESSION_LINGER_MS);
	flush(s); /* allowed while closing; on_write continues it */
	shutdown_when_written(s);
}

static void on_linger(timer_ent_t *t)
{
	session_t *s = (session_t *)((char *)t - offsetof(session_t, linger));

	session_close(s, "linger timeout");
}

void session_end_with(session_t *s, const char *reason)
{
	if (s->state != SESSION_OPEN)
		return;
	session_send(s, resp_event_closing(reason));
	session_close_after_flush(s, reason);
}

static void on_keepalive(timer_ent_t *t)
{
	session_t *s = (session_t *)((char *)t - offsetof(session_t, keepalive));
	uint64_t due = s->last_rx + (uint64_t)s->keepalive_ms;

	if (s->eof)
		return; /* a half-closed client sends no more: no liveness to check */
	if (!s->reading) {
		/* The broker itself paused reading (backpressure): what the client
		 * sent waits in the kernel, so silence proves nothing. */
		s->last_rx = timers_now();
		due = s->last_rx + (uint64_t)s->keepalive_ms;
	}
	if (timers_now() >= due) {
		s->ended = "keepalive";
		session_end_with(s, "keepalive");
		return;
	}
	timer_at(&s->keepalive, due);
}

void session_set_keepalive(session_t *s, int64_t keepalive_ms)
{
	s->keepalive_ms = keepalive_ms;
	if (keepalive_ms > 0)
		timer_at(&s->keepalive, s->last_rx + (uint64_t)keepalive_ms);
	else
		timer_cancel(&s->keepalive);
}

/* Did the client close its socket for good, not just its sending side?
 * Both read as EOF. A Unix socket tells at once (POLLHUP); a TCP one only
 * once something was written to it and the client's kernel reset the
 * connection, so a half-closed session that waits for answers is sent
 * {"event":"half_closed"} and looked at again. */
static bool peer_gone(session_t *s)
{
	uv_os_fd_t fd;
	struct pollfd p = {.events = POLLIN};

	if (uv_fileno(&s->h.handle, &fd) != 0)
		return false;
	p.fd = fd;
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static void on_hup_check(timer_ent_t *t)
{
	session_t *s = (session_t *)((char *)t - offsetof(session_t, hup_check));

	if (s->state != SESSION_OPEN)
		return;
	if (peer_gone(s)) {
		session_close(s, "client gone");
		return;
	}
	timer_at(&s->hup_check, timers_now() + SESSION_HUP_CHECK_MS);
}

/* The client shut down its sending side, and the lines it sent before
 * were dispatched (as far as the throttle allows). */
static void on_eof(session_t *s)
{
	if (s->state != SESSION_OPEN)
		return; /* nothing was owed: session_process ended it */
	if (s->unanswered == 0 && !s->parked && frame_pending(&s->frame) == 0)
		return;
	if (peer_gone(s)) {
		session_close(s, "client closed");
		return;
	}
	session_send(s, resp_event_half_closed((int64_t)s->unanswered)); /* parked ones included */
	timer_at(&s->hup_check, timers_now() + SESSION_HUP_FIRST_MS);
}

static void on_write(uv_write_t *req, int status)
{
	session_t *s = from_handle((uv_handle_t *)req->handle);

	free(s->wdata);
	s->wdata = NULL;
	s->wlen = 0;
	s->writing = false;
	if (status < 0) {
		if (status != UV_ECANCELED)
			session_close(s, uv_strerror(status));
		return;
	}
	if (s->out_len > 0)
		flush(s);
	if (s->flushing) {
		shutdown_when_written(s);
		return;
	}
	session_kick(s);
}

/* Hands the out buffer to the socket: what uv_try_write takes now, the rest
 * to one uv_write. Runs for open sessions and for ones closing after flush. */
static void flush(session_t *s)
{
	uv_buf_t buf;
	int n;

	if (s->writing || s->out_len == 0 || uv_is_closing(&s->h.handle))
		return;
	buf = uv_buf_init(s->out, (unsigned)s->out_len);
	n = uv_try_write(&s->h.stream, &buf, 1);
	if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
		s->out_len = 0;
		session_close(s, uv_strerror(n));
		return;
	}
	if (n < 0)
		n = 0;
	if ((size_t)n == s->out_len) {
		s->out_len = 0;
		if (s->out_cap > OUT_KEEP_CAP) {
			free(s->out);
			s->out = NULL;
			s->out_cap = 0;
		}
		return;
	}
	/* The rest goes out as one write; the out buffer starts afresh. */
	memmove(s->out, s->out + n, s->out_len - (size_t)n);
	s->wdata = s->out;
	s->wlen = s->out_len - (size_t)n;
	s->out = NULL;
	s->out_len = s->out_cap = 0;
	buf = uv_buf_init(s->wdata, (unsigned)s->wlen);
	if (uv_write(&s->wreq, &s->h.stream, &buf, 1, on_write) != 0) {
		free(s->wdata);
		s->wdata = NULL;
		s->wlen = 0;
		session_close(s, "write failed");
		return;
	}
	s->writing = true;
}

void session_flush_dirty(void)
{
	static bool walking;

	if (walking)
		return;
	walking = true;
	/* Resuming a session may queue more output and put sessions (itself
	 * included) back on the list; the walk goes on until it is empty. */
	for (size_t k = 0; k < dirty.len; k++) {
		session_t *s = dirty.v[k];
		s->dirty = false;
		if (s->state == SESSION_OPEN)
			flush(s);
		/* Parked requests run here, once the replies that let them run
		 * have had all their effects (whatever the throttle says: they
		 * are what it counts). */
		if (s->state == SESSION_OPEN && s->parked)
			H.resume(s);
		if (s->state == SESSION_OPEN && !s->reading && !throttled(s))
			session_process(s);
		session_unref(s);
	}
	dirty.len = 0;
	walking = false;
}

void session_flush_list_free(void)
{
	FAILS_ASSERT(dirty.len == 0);
	free(dirty.v);
	dirty.v = NULL;
	dirty.cap = 0;
}

/* Puts s on the list that the flush pass walks before the loop blocks: its
 * output is written there and, if it paused reading, it resumes there. */
static void session_kick(session_t *s)
{
	if (s->dirty || s->state == SESSION_CLOSED)
		return;
	if (dirty.len == dirty.cap) {
		dirty.cap = dirty.cap ? dirty.cap * 2 : 64;
		dirty.v = xrealloc(dirty.v, dirty.cap * sizeof(*dirty.v));
	}
	dirty.v[dirty.len++] = s;
	s->dirty = true;
	session_ref(s);
}

static void out_append(session_t *s, const char *data, size_t len)
{
	if (s->out_len + len > s->out_cap) {
		size_t cap = s->out_cap ? s->out_cap : 256;
		while (cap < s->out_len + len)
			cap *= 2;
		s->out = xrealloc(s->out, cap);
		s->out_cap = cap;
	}
	memcpy(s->out + s->out_len, data, len);
	s->out_len += len;
	session_kick(s);
}

void session_send(session_t *s, json_t *msg)
{
	size_t len;
	char *line;

	if (s->state != SESSION_OPEN) {
		json_decref(msg);
		return;
	}
	line = resp_dump(msg, &len);
	out_append(s, line, len);
	free(line);
}

/* A direct line when n > 0, else the builder's msg (NULL when n > 0). */
static void send_line_or(session_t *s, const char *line, size_t n, json_t *msg)
{
	if (msg)
		session_send(s, msg);
	else if (s->state == SESSION_OPEN)
		out_append(s, line, n);
}

void session_answer(session_t *s, const json_t *id, json_t *msg)
{
	session_send(s, msg);
	H.answered(s, id);
}

void session_send_acquired(session_t *s, const json_t *id, const resp_acquired_t *a)
{
	char line[RESP_LINE_MAX];
	size_t n = resp_line_acquired(line, id, a);

	send_line_or(s, line, n, n ? NULL : resp_acquired(id, a));
	H.answered(s, id);
}

void session_send_released(session_t *s, const json_t *id, int64_t count)
{
	char line[RESP_LINE_MAX];
	size_t n = resp_line_released(line, id, count);

	send_line_or(s, line, n, n ? NULL : resp_released(id, count));
	H.answered(s, id);
}

void session_send_extended(session_t *s, const json_t *id, int64_t ttl_ms)
{
	char line[RESP_LINE_MAX];
	size_t n = resp_line_extended(line, id, ttl_ms);

	send_line_or(s, line, n, n ? NULL : resp_extended(id, ttl_ms));
	H.answered(s, id);
}

void session_send_error(session_t *s, const json_t *id, lb_err_t code, const char *message)
{
	session_answer(s, id, resp_error(id, code, message));
}

void session_op_end(session_t *s)
{
	REQUIRE(s->inflight > 0);
	s->inflight--;
	if (s->state == SESSION_OPEN && (!s->reading || s->parked))
		session_kick(s);
	session_unref(s);
}

void session_prestep_end(session_t *s)
{
	REQUIRE(s->presteps > 0);
	s->presteps--;
	if (s->state == SESSION_OPEN && s->parked)
		session_kick(s);
}

void session_wake(session_t *s)
{
	if (s->state == SESSION_OPEN)
		session_kick(s);
}

static bool throttled(const session_t *s)
{
	return s->inflight + s->nparked >= (size_t)server.cfg->max_inflight ||
	       session_unsent(s) >= SESSION_WRITE_HIGH;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* Answers the complete lines buffered, as far as the limits allow, then
 * reads on or pauses. */
static void session_process(session_t *s)
{
	const char *line;
	size_t len;
	int rc;

	H.resume(s);
	while (s->state == SESSION_OPEN) {
		if (throttled(s)) {
			if (s->reading) {
				uv_read_stop(&s->h.stream);
				s->reading = false;
			}
			return;
		}
		rc = frame_next(&s->frame, &line, &len);
		if (rc == FRAME_LINE) {
			H.line(s, line, len);
			continue;
		}
		if (rc == FRAME_TOO_LONG) {
			char msg[96];
			snprintf(msg, sizeof(msg), "the line is longer than max_line (%zu bytes)",
			         s->frame.max_line);
			session_send(s, resp_error(NULL, LB_E_LINE_TOO_LONG, msg));
			session_end_with(s, "line_too_long");
			return;
		}
		if (s->eof) {
			/* A half-close still gets the answer to every request it sent,
			 * waiting acquires included; the session (and its leases) ends
			 * once they are out. */
			if (s->unanswered == 0 && !s->parked)
				session_end_with(s, "idle_half_closed");
			return;
		}
		if (!s->reading) {
			uv_read_start(&s->h.stream, on_alloc, on_read);
			s->reading = true;
		}
		return;
	}
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	session_t *s = from_handle((uv_handle_t *)stream);

	timers_news_first(); /* what expired while the broker stalled, first */
	if (nread == UV_EOF && s->state == SESSION_OPEN) {
		s->ended = "eof";
		uv_read_stop(stream);
		s->reading = false;
		s->eof = true;
		timer_cancel(&s->keepalive);
		session_process(s);
		on_eof(s);
		return;
	}
	if (nread < 0) {
		if (s->state == SESSION_OPEN)
			s->ended = nread == UV_ECONNRESET ? "reset" : "read_error";
		session_close(s, uv_strerror((int)nread));
		return;
	}
	if (nread == 0 || s->state != SESSION_OPEN)
		return;
	s->last_rx = timers_now();
	frame_feed(&s->frame, buf->base, (size_t)nread);
	session_process(s);
}

/* ---- the locks layer's view (client.h) ---------------------------------- */

static session_t *of(const client_t *c)
{
	return (session_t *)((char *)c - offsetof(session_t, lk));
}

static bool lk_open(const client_t *c) { return session_open(of(c)); }
static void lk_ref(client_t *c) { session_ref(of(c)); }
static void lk_unref(client_t *c) { session_unref(of(c)); }
static void lk_op_begin(client_t *c) { session_op_begin(of(c)); }
static void lk_op_end(client_t *c) { session_op_end(of(c)); }
static void lk_prestep_begin(client_t *c) { session_prestep_begin(of(c)); }
static void lk_prestep_end(client_t *c) { session_prestep_end(of(c)); }

static void lk_acquired(client_t *c, const json_t *id, const resp_acquired_t *a)
{
	session_send_acquired(of(c), id, a);
}

static void lk_released(client_t *c, const json_t *id, int64_t count)
{
	session_send_released(of(c), id, count);
}

static void lk_extended(client_t *c, const json_t *id, int64_t ttl_ms)
{
	session_send_extended(of(c), id, ttl_ms);
}

static void lk_error(client_t *c, const json_t *id, lb_err_t code, const char *message)
{
	session_send_error(of(c), id, code, message);
}

static void lk_answer(client_t *c, const json_t *id, json_t *msg) { session_answer(of(c), id, msg); }
static void lk_event(client_t *c, json_t *msg) { session_send(of(c), msg); }

const client_ops_t session_client_ops = {
	.open = lk_open,
	.ref = lk_ref,
	.unref = lk_unref,
	.op_begin = lk_op_begin,
	.op_end = lk_op_end,
	.prestep_begin = lk_prestep_begin,
	.prestep_end = lk_prestep_end,
	.acquired = lk_acquired,
	.released = lk_released,
	.extended = lk_extended,
	.error = lk_error,
	.answer = lk_answer,
	.event = lk_event,
};

/* ---- the list and the hooks ---------------------------------------------- */

void session_set_hooks(const session_hooks_t *h)
{
	H = *h;
}

session_t *session_first(void)
{
	return sessions;
}

void session_accept(uv_stream_t *listener, bool is_tcp)
{
	session_t *s = xcalloc(1, sizeof(*s));
	int rc;

	if (is_tcp)
		uv_tcp_init(server.loop, &s->h.tcp);
	else
		uv_pipe_init(server.loop, &s->h.pipe, 0);
	server.nconnections++;
	s->id = ++next_id;
	snprintf(s->name, sizeof(s->name), "s%llu", (unsigned long long)s->id);
	s->lk.name = s->name;
	frame_init(&s->frame, server.cfg->max_line);
	timer_init(&s->keepalive, on_keepalive);
	timer_init(&s->linger, on_linger);
	timer_init(&s->hup_check, on_hup_check);
	s->authed = server.cfg->auth_secret == NULL;
	s->last_rx = timers_now();
	s->next = sessions;
	if (sessions)
		sessions->prev = s;
	sessions = s;
	server.nsessions++;
	set_state(s, SESSION_OPEN);

	rc = uv_accept(listener, &s->h.stream);
	if (rc != 0) {
		LOG(LOG_WARN, "msg=\"accept failed\" err=\"%s\"", uv_strerror(rc));
		session_close(s, "accept failed");
		return;
	}
	if (is_tcp)
		uv_tcp_nodelay(&s->h.tcp, 1);
	if ((int64_t)server.nconnections > server.cfg->max_connections) {
		LOG(LOG_WARN, "msg=\"connection limit reached\" session=%s max=%lld", s->name,
		    (long long)server.cfg->max_connections);
		session_send(s, resp_error(NULL, LB_E_LIMIT_EXCEEDED, "too many connections"));
		session_end_with(s, "max_connections");
		return;
	}
	if (server.state != BROKER_RUNNING) {
		session_send(s, resp_error(NULL, LB_E_SHUTTING_DOWN, NULL));
		session_end_with(s, "shutdown");
		return;
	}
	LOG(LOG_DEBUG, "msg=\"session opened\" session=%s", s->name);
	session_process(s);
}
