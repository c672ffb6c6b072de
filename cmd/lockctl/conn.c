/*
 * conn.c - lockctl's one connection to the broker: connect with a timeout
 * (TCP through getaddrinfo, or a Unix socket), send requests with numbered
 * ids, read lines through protocol/frame and parse them as JSON objects.
 *
 * The socket is non-blocking and close-on-exec (a command run by `lockctl
 * run` must never inherit the session, or the lease would outlive lockctl).
 * Waiting is always poll() with a deadline; EINTR just loops, so signal
 * handlers that only write to a self-pipe (run.c) are harmless here.
 */
#include "cmd/lockctl/lockctl.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/base/url.h"
#include "broker/base/version.h"

static int64_t deadline_of(int64_t timeout_ms)
{
	return timeout_ms < 0 ? -1 : lc_now_ms() + timeout_ms;
}

/* Waits for events on fd until deadline. Returns 1 ready, 0 timed out, -1
 * error (errno). */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int r = poll(&p, 1, lc_poll_ms(deadline));
		if (r > 0)
			return 1;
		if (r == 0) {
			if (lc_poll_ms(deadline) == 0)
				return 0;
			continue;
		}
		if (errno != EINTR)
			return -1;
	}
}

/* Non-blocking connect of fd to sa, finished with poll. Returns 0 or an
 * errno value (ETIMEDOUT when the deadline passed). */
static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
	int err = 0;
	socklen_t elen = sizeof(err);

	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno != EINPROGRESS && errno != EINTR)
		return errno;
	switch (wait_fd(fd, POLLOUT, deadline)) {
	case 0:
		return ETIMEDOUT;
	case -1:
		return errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		return errno;
	return err;
}

static int open_tcp(const listen_addr_t *a, int64_t deadline, const char *url)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	char port[16];
	char ub[LC_MASK_BUF];
	int gai, err = ECONNREFUSED;

	snprintf(port, sizeof(port), "%d", a->port);
	gai = getaddrinfo(a->host, port, &hints, &res);
	if (gai != 0) {
		lc_err("cannot resolve %s: %s", lc_masked(url, ub), gai_strerror(gai));
		return -1;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		err = connect_fd(fd, ai->ai_addr, ai->ai_addrlen, deadline);
		if (err == 0) {
			freeaddrinfo(res);
			return fd;
		}
		close(fd);
		if (err == ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	lc_err("cannot connect to %s: %s", lc_masked(url, ub), strerror(err));
	return -1;
}

static int open_unix(const listen_addr_t *a, int64_t deadline, const char *url)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	char ub[LC_MASK_BUF];
	int fd, err;

	memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = errno;
	} else {
		err = connect_fd(fd, (struct sockaddr *)&sun, sizeof(sun), deadline);
		if (err == 0)
			return fd;
		close(fd);
	}
	/* EAGAIN on a Unix socket: the listener's backlog is full */
	lc_err("cannot connect to %s: %s", lc_masked(url, ub),
	       err == EAGAIN ? "the broker's backlog is full" : strerror(err));
	return -1;
}

int conn_open(lc_conn_t *c, const char *url, int64_t timeout_ms)
{
	listen_addr_t a;
	char err[256], ub[LC_MASK_BUF];
	int64_t deadline = deadline_of(timeout_ms);

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->next_id = 1;
	frame_init(&c->frame, LC_MAX_LINE);
	if (url_parse_listen(url, &a, err, sizeof(err)) < 0) {
		lc_err("bad broker URL %s: %s", lc_masked(url, ub), err);
		return LC_EXIT_USAGE;
	}
	if (a.kind == URL_TCP && a.port == 0) {
		lc_err("bad broker URL %s: port 0", lc_masked(url, ub));
		return LC_EXIT_USAGE;
	}
	c->fd = a.kind == URL_TCP ? open_tcp(&a, deadline, url) : open_unix(&a, deadline, url);
	return c->fd < 0 ? LC_EXIT_UNAVAILABLE : 0;
}

void conn_close(lc_conn_t *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	frame_free(&c->frame);
}

int conn_send(lc_conn_t *c, json_t *req, json_int_t *id, int64_t timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	char *text;
	size_t len, off = 0;

	*id = c->next_id++;
	json_object_set_new(req, "id", json_integer(*id));
	text = json_dumps(req, JSON_COMPACT);
	REQUIRE(text != NULL);
	len = strlen(text);
	text[len++] = '\n'; /* over the NUL: we send len bytes, not a C string */
	while (off < len && c->fd >= 0) {
		ssize_t n = send(c->fd, text + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(c->fd, POLLOUT, deadline);
			if (w > 0)
				continue;
			lc_err("sending to the broker: %s", w == 0 ? "timed out" : strerror(errno));
			free(text);
			return LC_EXIT_UNAVAILABLE;
		}
		lc_err("sending to the broker: %s", n < 0 ? strerror(errno) : "connection closed");
		free(text);
		return LC_EXIT_UNAVAILABLE;
	}
	free(text);
	return 0;
}

int conn_fill(lc_conn_t *c)
{
	char buf[16384];

	if (c->fd < 0 || c->eof)
		return -1;
	for (;;) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
		if (n > 0) {
			/* a too-long line is sticky in the frame: conn_next reports it */
			(void)frame_feed(&c->frame, buf, (size_t)n);
			if ((size_t)n < sizeof(buf))
				return 0;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		c->eof = true;
		return -1;
	}
}

int conn_next(lc_conn_t *c, json_t **msg, char **raw)
{
	const char *line;
	size_t len;
	json_error_t jerr;
	json_t *j;
	int r = frame_next(&c->frame, &line, &len);

	*msg = NULL;
	if (raw)
		*raw = NULL;
	if (r == FRAME_NEED_MORE)
		return 0;
	if (r == FRAME_TOO_LONG) {
		lc_err("the broker sent a line longer than %u bytes", LC_MAX_LINE);
		return LC_EXIT_INTERNAL;
	}
	j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL || !json_is_object(j)) {
		json_decref(j);
		lc_err("the broker sent something that is not a JSON object");
		return LC_EXIT_INTERNAL;
	}
	if (raw)
		*raw = xstrndup(line, len);
	*msg = j;
	return 1;
}

int conn_wait(lc_conn_t *c, json_int_t id, int64_t timeout_ms, const char *what,
              json_t **resp, char **raw)
{
	int64_t deadline = deadline_of(timeout_ms);

	for (;;) {
		json_t *m;
		char *line;
		int r;

		while ((r = conn_next(c, &m, raw ? &line : NULL)) == 1) {
			json_t *mid = json_object_get(m, "id");
			if (json_is_integer(mid) && json_integer_value(mid) == id) {
				*resp = m;
				if (raw)
					*raw = line;
				return 0;
			}
			/* an event, or an answer to a request we gave up on */
			json_decref(m);
			if (raw)
				free(line);
		}
		if (r != 0)
			return r;
		if (c->eof || c->fd < 0) {
			lc_err("%s: the broker closed the connection", what);
			return LC_EXIT_UNAVAILABLE;
		}
		switch (wait_fd(c->fd, POLLIN, deadline)) {
		case 0:
			lc_err("%s: no answer from the broker within %lld ms", what,
			       (long long)timeout_ms);
			return LC_EXIT_UNAVAILABLE;
		case -1:
			lc_err("%s: poll: %s", what, strerror(errno));
			return LC_EXIT_INTERNAL;
		}
		(void)conn_fill(c); /* EOF is seen after the buffered lines */
	}
}

int conn_call(lc_conn_t *c, json_t *req, int64_t timeout_ms, const char *what,
              json_t **resp, char **raw)
{
	json_int_t id;
	int r = conn_send(c, req, &id, timeout_ms);

	json_decref(req);
	if (r != 0)
		return r;
	return conn_wait(c, id, timeout_ms, what, resp, raw);
}

int conn_hello(lc_conn_t *c, const char *auth, int64_t timeout_ms)
{
	json_t *req = json_pack("{s:s, s:s}", "op", "hello", "client",
	                        LC_NAME "/" LOCKBROKER_VERSION);
	json_t *resp = NULL;
	const char *server = NULL;
	int r;

	REQUIRE(req != NULL);
	if (auth)
		json_object_set_new(req, "auth", json_string(auth));
	r = conn_call(c, req, timeout_ms, "hello", &resp, NULL);
	if (r != 0)
		return r;
	if (!json_is_true(json_object_get(resp, "ok"))) {
		const char *code = NULL;
		json_unpack(resp, "{s:{s:s}}", "error", "code", &code);
		if (auth == NULL && code && strcmp(code, "unauthorized") == 0) {
			/* no secret given: ping still works; other ops say unauthorized */
			json_decref(resp);
			return 0;
		}
		r = lc_broker_error("hello", resp, -1);
		json_decref(resp);
		return r;
	}
	char sb[LC_MASK_BUF];
	if (json_unpack(resp, "{s:s}", "server", &server) == 0)
		snprintf(c->server, sizeof(c->server), "%s", lc_masked(server, sb));
	c->proto = json_integer_value(json_object_get(resp, "proto"));
	json_decref(resp);
	return 0;
}
