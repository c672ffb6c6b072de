/*
 * listener.c - TCP and Unix listeners (see listener.h). Each listener_t is
 * freed in its handle's close callback, never before.
 */
#include "broker/net/listener.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/base/shared.h"
#include "broker/base/log.h"
#include "broker/net/session.h"

/* Thousands of clients may connect at once (a fleet restarting); the kernel
 * caps this at net.core.somaxconn. */
#define LISTEN_BACKLOG 4096

static listener_t *listeners; /* the open ones */

static void on_connection(uv_stream_t *stream, int status)
{
	listener_t *l = (listener_t *)stream;

	if (status < 0) {
		LOG(LOG_WARN, "msg=\"accept error\" err=\"%s\"", uv_strerror(status));
		return;
	}
	session_accept(stream, l->addr.kind == URL_TCP);
}

static void on_listener_closed(uv_handle_t *h)
{
	listener_t *l = (listener_t *)h;

	if (l->bound_path)
		unlink(l->addr.path);
	free(l);
}

/* -1: a live process answers on path or it is not a socket; 0: free now. */
static int clear_stale_socket(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode)) {
		LOG(LOG_ERROR, "msg=\"listen path exists and is not a socket\" path=\"%s\"", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0) {
		LOG(LOG_ERROR, "msg=\"another process listens on the socket\" path=\"%s\"", path);
		return -1;
	}
	LOG(LOG_INFO, "msg=\"replacing stale socket\" path=\"%s\"", path);
	return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int resolve_tcp(const listen_addr_t *a, struct sockaddr_storage *ss)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char port[8];
	int rc;

	if (uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)ss) == 0)
		return 0;
	if (uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	snprintf(port, sizeof(port), "%d", a->port);
	rc = getaddrinfo(a->host, port, &hints, &res);
	if (rc != 0 || !res) {
		LOG(LOG_ERROR, "msg=\"cannot resolve listen host\" host=\"%s\" err=\"%s\"", a->host,
		    gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static int open_one(uv_loop_t *loop, const listen_addr_t *a, listener_t **out)
{
	listener_t *l = xcalloc(1, sizeof(*l));
	char url[URL_PATH_MAX + URL_HOST_MAX + 32];
	int rc;

	l->addr = *a;
	url_format_listen(a, url, sizeof(url));
	if (a->kind == URL_TCP) {
		struct sockaddr_storage ss;
		if (resolve_tcp(a, &ss) < 0) {
			free(l);
			return -1;
		}
		uv_tcp_init(loop, &l->h.tcp);
		rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0);
	} else {
		uv_pipe_init(loop, &l->h.pipe, 0);
		rc = clear_stale_socket(a->path) < 0 ? UV_EADDRINUSE : uv_pipe_bind(&l->h.pipe, a->path);
		if (rc == 0) {
			l->bound_path = true;
			if (chmod(a->path, server.cfg->socket_mode) != 0) {
				LOG(LOG_ERROR, "msg=\"cannot set socket mode\" path=\"%s\" err=\"%s\"", a->path,
				    strerror(errno));
				rc = UV_EPERM;
			}
		}
	}
	if (rc == 0)
		rc = uv_listen(&l->h.stream, LISTEN_BACKLOG, on_connection);
	if (rc != 0) {
		LOG(LOG_ERROR, "msg=\"cannot listen\" url=\"%s\" err=\"%s\"", url, uv_strerror(rc));
		uv_close(&l->h.handle, on_listener_closed);
		return -1;
	}
	if (a->kind == URL_TCP && a->port == 0) {
		struct sockaddr_storage ss;
		int len = sizeof(ss);
		uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&ss, &len);
		l->addr.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		url_format_listen(&l->addr, url, sizeof(url));
	}
	LOG(LOG_INFO, "msg=\"listening\" url=\"%s\"", url);
	*out = l;
	return 0;
}

int listeners_open(uv_loop_t *loop)
{
	const lb_config_t *cfg = server.cfg;

	for (size_t k = 0; k < cfg->nlisten; k++) {
		listener_t *l;
		if (open_one(loop, &cfg->listen[k], &l) < 0) {
			listeners_close();
			return -1;
		}
		l->next = listeners;
		listeners = l;
	}
	return 0;
}

void listeners_close(void)
{
	listener_t *l = listeners;

	listeners = NULL;
	while (l) {
		listener_t *next = l->next;
		uv_close(&l->h.handle, on_listener_closed);
		l = next;
	}
}
