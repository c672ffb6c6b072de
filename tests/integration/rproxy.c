/*
 * rproxy.c - the stalling TCP proxy of the tests (see rproxy.h).
 *
 * One thread polls the listener and both sides of every connection. The
 * test thread posts a request (hold, cut, release) under a mutex; the
 * proxy thread carries it out at the top of its next turn and signals it
 * done, so a request returns once it is in effect. A connection's name is
 * read from the broker's bytes as they pass (the bulk string after
 * SETNAME); a held connection buffers what the broker sends, and one cut
 * while held keeps its Redis side open until the kept bytes went out.
 */
#include "tests/integration/rproxy.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PX_CONNS 32

struct px_conn {
	int cfd, ufd;     /* the broker's side, Redis's side; -1: closed */
	bool held;        /* its bytes to Redis are kept back */
	bool client_gone; /* the broker's side is closed */
	char name[80];    /* from CLIENT SETNAME, "" until seen */
	char *buf;        /* kept back */
	size_t len, cap;
};

enum px_req { PX_NONE, PX_HOLD, PX_CUT, PX_RELEASE, PX_STOP };

static struct {
	int lfd, upstream_port, port;
	bool running;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum px_req req;
	char suffix[80];
	bool any; /* the request names no suffix */
	struct px_conn c[PX_CONNS];
	int n;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int connect_to(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void conn_close(struct px_conn *k)
{
	if (k->cfd >= 0)
		close(k->cfd);
	if (k->ufd >= 0)
		close(k->ufd);
	free(k->buf);
	*k = (struct px_conn){.cfd = -1, .ufd = -1};
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* The name in "...SETNAME\r\n$N\r\nNAME\r\n", if these bytes hold it. */
static void learn_name(struct px_conn *k, const char *b, size_t n)
{
	const char *p = memmem(b, n, "SETNAME\r\n$", 10), *end = b + n;
	size_t len = 0;

	if (k->name[0] || !p)
		return;
	p += 10;
	while (p < end && *p >= '0' && *p <= '9')
		len = len * 10 + (size_t)(*p++ - '0');
	if (end - p < 2 || p[0] != '\r' || len >= sizeof(k->name) || (size_t)(end - p - 2) < len)
		return;
	memcpy(k->name, p + 2, len);
	k->name[len] = '\0';
}

static bool named(const struct px_conn *k)
{
	size_t n = strlen(k->name), s = strlen(P.suffix);

	return P.any || (n >= s && strcmp(k->name + n - s, P.suffix) == 0);
}

static void carry_out(enum px_req req)
{
	for (int i = 0; i < P.n; i++) {
		struct px_conn *k = &P.c[i];
		if (k->cfd < 0 && k->ufd < 0)
			continue;
		if (req == PX_HOLD && named(k)) {
			k->held = true;
		} else if (req == PX_CUT && (P.any ? k->held : named(k)) && k->cfd >= 0) {
			close(k->cfd);
			k->cfd = -1;
			k->client_gone = true;
			if (!k->held)
				conn_close(k);
		} else if (req == PX_RELEASE && k->held) {
			k->held = false;
			if (k->ufd >= 0 && k->len)
				write_all(k->ufd, k->buf, k->len);
			k->len = 0;
			if (k->client_gone && k->ufd >= 0)
				shutdown(k->ufd, SHUT_WR); /* Redis reads it all, then the end */
		}
	}
}

static void accept_one(void)
{
	int cfd = accept(P.lfd, NULL, NULL), slot = -1;

	for (int i = 0; i < P.n && slot < 0; i++)
		if (P.c[i].cfd < 0 && P.c[i].ufd < 0)
			slot = i;
	if (slot < 0 && P.n < PX_CONNS)
		slot = P.n++;
	if (cfd < 0 || slot < 0) {
		if (cfd >= 0)
			close(cfd);
		return;
	}
	P.c[slot] = (struct px_conn){.cfd = cfd, .ufd = connect_to(P.upstream_port)};
	if (P.c[slot].ufd < 0)
		conn_close(&P.c[slot]);
}

/* Bytes came on one side of k. */
static void relay(struct px_conn *k, bool from_broker)
{
	char b[65536];
	ssize_t n = read(from_broker ? k->cfd : k->ufd, b, sizeof(b));

	if (n <= 0) {
		if (from_broker && k->held) {
			close(k->cfd);
			k->cfd = -1;
			k->client_gone = true; /* the kept bytes still go, later */
		} else {
			conn_close(k);
		}
		return;
	}
	if (!from_broker) {
		if (k->cfd >= 0)
			write_all(k->cfd, b, (size_t)n);
		return;
	}
	learn_name(k, b, (size_t)n);
	if (!k->held) {
		write_all(k->ufd, b, (size_t)n);
		return;
	}
	if (k->len + (size_t)n > k->cap) {
		k->cap = (k->len + (size_t)n) * 2;
		k->buf = realloc(k->buf, k->cap);
		if (!k->buf)
			abort();
	}
	memcpy(k->buf + k->len, b, (size_t)n);
	k->len += (size_t)n;
}

static void *run(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd pf[1 + 2 * PX_CONNS];
		int map[1 + 2 * PX_CONNS], np = 0;

		pthread_mutex_lock(&P.mu);
		enum px_req req = P.req;
		if (req != PX_NONE && req != PX_STOP)
			carry_out(req);
		if (req != PX_STOP)
			P.req = PX_NONE;
		pthread_cond_broadcast(&P.cv);
		pthread_mutex_unlock(&P.mu);
		if (req == PX_STOP)
			break;
		pf[np] = (struct pollfd){.fd = P.lfd, .events = POLLIN};
		map[np++] = -1;
		for (int i = 0; i < P.n; i++) {
			if (P.c[i].cfd >= 0) {
				pf[np] = (struct pollfd){.fd = P.c[i].cfd, .events = POLLIN};
				map[np++] = 2 * i;
			}
			if (P.c[i].ufd >= 0) {
				pf[np] = (struct pollfd){.fd = P.c[i].ufd, .events = POLLIN};
				map[np++] = 2 * i + 1;
			}
		}
		if (poll(pf, (nfds_t)np, 10) <= 0)
			continue;
		if (pf[0].revents & POLLIN)
			accept_one();
		for (int j = 1; j < np; j++) {
			struct px_conn *k = &P.c[map[j] / 2];
			bool from_broker = map[j] % 2 == 0;

			if ((pf[j].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    pf[j].fd == (from_broker ? k->cfd : k->ufd))
				relay(k, from_broker);
		}
	}
	for (int i = 0; i < P.n; i++)
		conn_close(&P.c[i]);
	return NULL;
}

static void request(enum px_req req, const char *suffix)
{
	pthread_mutex_lock(&P.mu);
	P.any = suffix == NULL;
	snprintf(P.suffix, sizeof(P.suffix), "%s", suffix ? suffix : "");
	P.req = req;
	while (P.req == req && req != PX_STOP)
		pthread_cond_wait(&P.cv, &P.mu);
	pthread_mutex_unlock(&P.mu);
}

int rproxy_start(int upstream_port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int one = 1;

	cr_assert_not(P.running, "one proxy per test");
	for (int i = 0; i < PX_CONNS; i++)
		P.c[i] = (struct px_conn){.cfd = -1, .ufd = -1};
	P.n = 0;
	P.req = PX_NONE;
	P.upstream_port = upstream_port;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	P.lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(P.lfd, 0);
	setsockopt(P.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert_eq(bind(P.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(P.lfd, 64), 0);
	cr_assert_eq(getsockname(P.lfd, (struct sockaddr *)&a, &len), 0);
	P.port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&P.thread, NULL, run, NULL), 0);
	P.running = true;
	return P.port;
}

void rproxy_stop(void)
{
	if (!P.running)
		return;
	request(PX_STOP, NULL);
	pthread_join(P.thread, NULL);
	close(P.lfd);
	P.running = false;
}

void rproxy_hold(const char *suffix)
{
	request(PX_HOLD, suffix);
}

void rproxy_cut(const char *suffix)
{
	request(PX_CUT, suffix);
}

void rproxy_release(void)
{
	request(PX_RELEASE, NULL);
}
