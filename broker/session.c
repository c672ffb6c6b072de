/*
 * session.c - one client connection (see session.h).
 *
 * Reads go through one shared buffer (the loop is single-threaded and
 * frame_feed copies what it keeps), so an idle session costs no read
 * buffer. Writes try uv_try_write first and queue only what the socket did
 * not take. The read side pauses for backpressure and resumes from
 * session_op_end() and the write callback.
 */
#include "broker/session.h"

#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"
#include "broker/dispatch.h"
#include "broker/lease.h"
#include "broker/log.h"
#include "protocol/resp.h"

#define READ_BUF_SIZE 65536

typedef struct write_req {
	uv_write_t req;
	char *data; /* owned */
	size_t len;
} write_req_t;

static void session_process(session_t *s);
static void on_keepalive(timer_ent_t *t);
static void on_linger(timer_ent_t *t);

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
		server.sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	frame_free(&s->frame);
	free(s->client);
	free(s);
	broker_session_gone();
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
	size_t n = s->nleases;

	set_state(s, SESSION_CLOSING);
	server.nsessions--;
	timer_cancel(&s->keepalive);
	if (s->reading)
		uv_read_stop(&s->h.stream);
	s->reading = false;
	while (s->leases)
		lease_release_now(s->leases);
	LOG(LOG_INFO, "msg=\"session closed\" session=%s why=\"%s\" leases_released=%zu", s->name, why, n);
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

void session_close_after_flush(session_t *s, const char *why)
{
	if (s->state != SESSION_OPEN)
		return;
	end_session(s, why);
	s->shutdown_req.data = s;
	if (uv_shutdown(&s->shutdown_req, &s->h.stream, on_shutdown) != 0) {
		session_close(s, why);
		return;
	}
	s->flushing = true;
	timer_at(&s->linger, timers_now() + SESSION_LINGER_MS);
}

static void on_linger(timer_ent_t *t)
{
	session_t *s = (session_t *)((char *)t - offsetof(session_t, linger));

	session_close(s, "linger timeout");
}

static void on_keepalive(timer_ent_t *t)
{
	session_t *s = (session_t *)((char *)t - offsetof(session_t, keepalive));
	uint64_t due = s->last_rx + (uint64_t)s->keepalive_ms;

	if (timers_now() >= due) {
		session_close(s, "keepalive expired");
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

static void on_write(uv_write_t *req, int status)
{
	write_req_t *w = (write_req_t *)req;
	session_t *s = from_handle((uv_handle_t *)req->handle);

	s->unsent -= w->len;
	free(w->data);
	free(w);
	if (status < 0) {
		if (status != UV_ECANCELED)
			session_close(s, uv_strerror(status));
		return;
	}
	if (s->state == SESSION_OPEN && !s->reading && s->unsent < SESSION_WRITE_LOW)
		session_process(s);
}

static void write_line(session_t *s, char *data, size_t len)
{
	uv_buf_t buf = uv_buf_init(data, (unsigned)len);
	write_req_t *w;
	int n = 0;

	if (s->unsent == 0) {
		n = uv_try_write(&s->h.stream, &buf, 1);
		if (n == (int)len) {
			free(data);
			return;
		}
		if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
			free(data);
			session_close(s, uv_strerror(n));
			return;
		}
		if (n < 0)
			n = 0;
	}
	w = xmalloc(sizeof(*w));
	w->data = data;
	w->len = len - (size_t)n;
	buf = uv_buf_init(data + n, (unsigned)w->len);
	if (uv_write(&w->req, &s->h.stream, &buf, 1, on_write) != 0) {
		free(data);
		free(w);
		session_close(s, "write failed");
		return;
	}
	s->unsent += w->len;
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
	write_line(s, line, len);
}

void session_send_error(session_t *s, const json_t *id, lb_err_t code, const char *message)
{
	session_send(s, resp_error(id, code, message));
}

void session_op_end(session_t *s)
{
	REQUIRE(s->inflight > 0);
	s->inflight--;
	if (s->state == SESSION_OPEN && !s->reading)
		session_process(s);
	session_unref(s);
}

static bool throttled(const session_t *s)
{
	return s->inflight >= (unsigned)server.cfg->max_inflight || s->unsent >= SESSION_WRITE_HIGH;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* Answers the complete lines buffered, as far as the limits allow, then
 * reads on or pauses. */
static void session_process(session_t *s)
{
	const char *line;
	size_t len;
	int rc;

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
			dispatch_line(s, line, len);
			continue;
		}
		if (rc == FRAME_TOO_LONG) {
			session_send_error(s, NULL, LB_E_LINE_TOO_LONG, NULL);
			session_close_after_flush(s, "line too long");
			return;
		}
		if (s->eof) {
			/* A half-close still gets the answers to what it sent; the
			 * session (and its leases) ends once they are out. */
			if (s->inflight == 0)
				session_close_after_flush(s, "client closed");
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

	if (nread == UV_EOF && s->state == SESSION_OPEN) {
		uv_read_stop(stream);
		s->reading = false;
		s->eof = true;
		session_process(s);
		return;
	}
	if (nread < 0) {
		session_close(s, uv_strerror((int)nread));
		return;
	}
	if (nread == 0 || s->state != SESSION_OPEN)
		return;
	s->last_rx = timers_now();
	frame_feed(&s->frame, buf->base, (size_t)nread);
	session_process(s);
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
	s->id = ++server.next_session;
	snprintf(s->name, sizeof(s->name), "s%llu", (unsigned long long)s->id);
	frame_init(&s->frame, server.cfg->max_line);
	timer_init(&s->keepalive, on_keepalive);
	timer_init(&s->linger, on_linger);
	s->authed = server.cfg->auth_secret == NULL;
	s->last_rx = timers_now();
	s->next = server.sessions;
	if (server.sessions)
		server.sessions->prev = s;
	server.sessions = s;
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
		session_send_error(s, NULL, LB_E_LIMIT_EXCEEDED, "too many connections");
		session_close_after_flush(s, "connection limit");
		return;
	}
	if (server.state != BROKER_RUNNING) {
		session_send_error(s, NULL, LB_E_SHUTTING_DOWN, NULL);
		session_close_after_flush(s, "shutting down");
		return;
	}
	LOG(LOG_DEBUG, "msg=\"session opened\" session=%s", s->name);
	session_process(s);
}
