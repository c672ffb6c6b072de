/*
 * mclient.c - see mclient.h.
 */
#include "tests/integration/mclient.h"

#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>


int mc_connect(mclient *c, int port, const char *unix_path)
{
	c->len = 0;
	if (unix_path) {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", unix_path);
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return -1;
		if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0)
			goto fail;
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int one = 1;
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return -1;
		if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0)
			goto fail;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	return 0;
fail:
	close(c->fd);
	c->fd = -1;
	return -1;
}

void mc_close(mclient *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

bool mc_send(mclient *c, const char *line)
{
	size_t n = strlen(line);
	while (n > 0) {
		ssize_t w = send(c->fd, line, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		line += w;
		n -= (size_t)w;
	}
	return true;
}

/* The next whole message, or NULL on timeout, close or garbage. */
static json_t *next_message(mclient *c, int64_t deadline)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		if (nl) {
			*nl = '\0';
			json_t *m = json_loads(c->buf, 0, NULL);
			size_t used = (size_t)(nl - c->buf) + 1;
			memmove(c->buf, c->buf + used, c->len - used);
			c->len -= used;
			return m;
		}
		int64_t left = deadline - lb_now_ms();
		if (left <= 0 || c->len == sizeof(c->buf))
			return NULL;
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return NULL;
		ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		c->len += (size_t)n;
	}
}

static bool keep_if_event(mclient *c, json_t *m)
{
	if (!json_object_get(m, "event"))
		return false;
	char *d = json_dumps(m, JSON_COMPACT);
	if (d)
		snprintf(c->last_event, sizeof(c->last_event), "%s", d);
	free(d);
	return true;
}

json_t *mc_wait(mclient *c, json_int_t id, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	json_t *m;

	while ((m = next_message(c, deadline)) != NULL) {
		json_t *mid = json_object_get(m, "id");
		if (json_is_integer(mid) && json_integer_value(mid) == id)
			return m;
		keep_if_event(c, m);
		json_decref(m); /* an event or an older answer */
	}
	return NULL;
}

json_t *mc_event(mclient *c, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	json_t *m;

	while ((m = next_message(c, deadline)) != NULL) {
		if (keep_if_event(c, m))
			return m;
		json_decref(m); /* an older answer */
	}
	return NULL;
}

const char *mc_err_code(const json_t *resp)
{
	const char *code = json_string_value(json_object_get(json_object_get(resp, "error"), "code"));
	return code ? code : "";
}

int64_t mc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

unsigned mc_rand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 16) & 0x7fff;
}
