/*
 * sock.c - the client's socket: connect within a deadline (TCP through
 * getaddrinfo, every address in turn, or a Unix socket), write a whole
 * buffer, and the monotonic clock that every deadline is counted on.
 *
 * Sockets are close-on-exec (a program the caller runs must never inherit
 * the session: the lease would outlive the caller), with TCP_NODELAY (one
 * request is one small write). Connecting is non-blocking, finished with
 * poll() against the deadline; the connected socket is then blocking with
 * a receive timeout of LBC_RECV_SLICE_MS, so that a reader with a far
 * deadline waits in recv() alone (one system call per answer, not two),
 * and every other wait is poll() with MSG_DONTWAIT. EINTR just loops.
 * Writes use MSG_NOSIGNAL: a closed connection is an error, never SIGPIPE.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t lbc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int lbc_poll_ms(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - lbc_now_ms();
	if (left <= 0)
		return 0;
	return left > 1000000 ? 1000000 : (int)left;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int r = poll(&p, 1, lbc_poll_ms(deadline));
		if (r > 0)
			return 1;
		if (r == 0) {
			if (lbc_poll_ms(deadline) == 0)
				return 0;
			continue;
		}
		if (errno != EINTR)
			return -1;
	}
}

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

/* The connected socket: blocking, with the receive slice. */
static int connected(int fd)
{
	struct timeval tv = {LBC_RECV_SLICE_MS / 1000, (LBC_RECV_SLICE_MS % 1000) * 1000};

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int lbc_sock_open(const lbc_addr_t *a, int64_t deadline, int *err_no, char *errbuf,
                  size_t errlen)
{
	int err = ECONNREFUSED;

	if (a->is_unix) {
		struct sockaddr_un sun = {.sun_family = AF_UNIX};
		int fd;

		memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
		} else {
			err = connect_fd(fd, (struct sockaddr *)&sun, sizeof(sun), deadline);
			if (err == 0)
				return connected(fd);
			close(fd);
		}
		*err_no = err;
		/* EAGAIN on a Unix socket: the listener's backlog is full */
		snprintf(errbuf, errlen, "cannot connect to unix socket: %s",
		         err == EAGAIN ? "the broker's backlog is full" : strerror(err));
		return -1;
	}

	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	char port[16];
	int gai;

	snprintf(port, sizeof(port), "%d", a->port);
	gai = getaddrinfo(a->host, port, &hints, &res);
	if (gai != 0) {
		*err_no = gai == EAI_SYSTEM ? errno : EHOSTUNREACH;
		snprintf(errbuf, errlen, "cannot resolve the broker's host: %s", gai_strerror(gai));
		return -1;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                ai->ai_protocol);
		int one = 1;

		if (fd < 0) {
			err = errno;
			continue;
		}
		err = connect_fd(fd, ai->ai_addr, ai->ai_addrlen, deadline);
		if (err == 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			freeaddrinfo(res);
			return connected(fd);
		}
		close(fd);
		if (err == ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	*err_no = err;
	snprintf(errbuf, errlen, "cannot connect to the broker: %s", strerror(err));
	return -1;
}

int lbc_sock_write(int fd, const char *buf, size_t len, int64_t deadline)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(fd, POLLOUT, deadline);
			if (w > 0)
				continue;
			return w == 0 ? ETIMEDOUT : errno;
		}
		return n < 0 ? errno : EPIPE;
	}
	return 0;
}
