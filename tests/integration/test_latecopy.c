/*
 * test_latecopy.c - a copy of an acquire that runs late (issue 26, point
 * 12): the broker's connection to Redis stalls with a try on it (a
 * network that holds the bytes back), the broker gives up on it after its
 * command timeout, answers the try `timeout` and gives back whatever it
 * may have taken; then the stalled bytes reach Redis. Before the fix that
 * copy granted the lock to an id nobody holds any more: held for nobody
 * until its TTL. Now the give-back marks the id as ended in Redis and the
 * late copy is refused.
 *
 * The stall is made by a TCP proxy between the broker and Redis, run by
 * the test in a thread: on hold(), the bytes the broker sends on the
 * connections open then are kept back (connections opened later pass),
 * and on release() they go to Redis, followed by the end of the
 * connection the broker closed meanwhile.
 */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef __clang__
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

#define PX_CONNS 32

struct px_conn {
	int cfd, ufd;          /* the broker's side, Redis's side; -1: closed */
	bool held;             /* its bytes to Redis are kept back */
	bool client_gone;      /* the broker closed it */
	char *buf;             /* kept back */
	size_t len, cap;
};

static struct {
	int lfd, upstream_port, port;
	pthread_t thread;
	atomic_bool stop, hold_now, release_now, cut_now;
	struct px_conn c[PX_CONNS];
	int n;
} P;

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

static void px_close(struct px_conn *k)
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

static void *px_run(void *arg)
{
	(void)arg;
	while (!atomic_load(&P.stop)) {
		struct pollfd pf[1 + 2 * PX_CONNS];
		int map[1 + 2 * PX_CONNS], np = 0;
		char b[65536];

		if (atomic_exchange(&P.hold_now, false))
			for (int i = 0; i < P.n; i++)
				P.c[i].held = P.c[i].cfd >= 0 || P.c[i].ufd >= 0;
		if (atomic_exchange(&P.cut_now, false)) {
			/* The broker's side of a held connection drops at once
			 * (it resends at once); its kept bytes still go later. */
			for (int i = 0; i < P.n; i++) {
				struct px_conn *k = &P.c[i];
				if (k->held && k->cfd >= 0) {
					close(k->cfd);
					k->cfd = -1;
					k->client_gone = true;
				}
			}
		}
		if (atomic_exchange(&P.release_now, false)) {
			for (int i = 0; i < P.n; i++) {
				struct px_conn *k = &P.c[i];
				if (!k->held)
					continue;
				k->held = false;
				if (k->ufd >= 0 && k->len)
					write_all(k->ufd, k->buf, k->len);
				k->len = 0;
				if (k->client_gone && k->ufd >= 0)
					shutdown(k->ufd, SHUT_WR); /* Redis reads it all, then the end */
			}
		}
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
		if (poll(pf, (nfds_t)np, 20) <= 0)
			continue;
		if (pf[0].revents & POLLIN) {
			int cfd = accept(P.lfd, NULL, NULL), slot = -1;
			for (int i = 0; i < P.n && slot < 0; i++)
				if (P.c[i].cfd < 0 && P.c[i].ufd < 0)
					slot = i;
			if (slot < 0 && P.n < PX_CONNS)
				slot = P.n++;
			if (cfd >= 0 && slot >= 0) {
				P.c[slot] = (struct px_conn){.cfd = cfd, .ufd = connect_to(P.upstream_port)};
				if (P.c[slot].ufd < 0)
					px_close(&P.c[slot]);
			} else if (cfd >= 0) {
				close(cfd);
			}
		}
		for (int j = 1; j < np; j++) {
			struct px_conn *k = &P.c[map[j] / 2];
			bool from_client = map[j] % 2 == 0;
			int fd = from_client ? k->cfd : k->ufd;
			ssize_t n;

			if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR)) || fd != pf[j].fd)
				continue;
			n = read(fd, b, sizeof(b));
			if (from_client && n <= 0) {
				close(k->cfd);
				k->cfd = -1;
				if (k->held)
					k->client_gone = true; /* the kept bytes still go, later */
				else
					px_close(k);
				continue;
			}
			if (!from_client && n <= 0) {
				px_close(k);
				continue;
			}
			if (from_client && k->held) {
				if (k->len + (size_t)n > k->cap) {
					k->cap = (k->len + (size_t)n) * 2;
					k->buf = realloc(k->buf, k->cap);
					if (!k->buf)
						abort();
				}
				memcpy(k->buf + k->len, b, (size_t)n);
				k->len += (size_t)n;
			} else if (from_client) {
				write_all(k->ufd, b, (size_t)n);
			} else if (k->cfd >= 0) {
				write_all(k->cfd, b, (size_t)n);
			}
		}
	}
	for (int i = 0; i < P.n; i++)
		px_close(&P.c[i]);
	return NULL;
}

static void px_start(int upstream_port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int one = 1;

	memset(&P, 0, sizeof(P));
	for (int i = 0; i < PX_CONNS; i++)
		P.c[i] = (struct px_conn){.cfd = -1, .ufd = -1};
	P.upstream_port = upstream_port;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	P.lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(P.lfd, 0);
	setsockopt(P.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert_eq(bind(P.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(P.lfd, 64), 0);
	cr_assert_eq(getsockname(P.lfd, (struct sockaddr *)&a, &len), 0);
	P.port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&P.thread, NULL, px_run, NULL), 0);
}

static void px_stop(void)
{
	atomic_store(&P.stop, true);
	pthread_join(P.thread, NULL);
	close(P.lfd);
}

static void hold(void)
{
	atomic_store(&P.hold_now, true);
	lb_sleep_ms(60); /* the proxy has taken it */
}

static void cut(void)
{
	atomic_store(&P.cut_now, true);
	lb_sleep_ms(60);
}

static void release(void)
{
	atomic_store(&P.release_now, true);
	lb_sleep_ms(60);
}

/* inspect, once the broker serves again (it reconnects after giving up
 * on the stalled connection). */
static json_t *inspect_served(lb_client *c, const char *lock)
{
	for (int64_t end = lb_now_ms() + 5000;;) {
		json_t *in = lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", lock);
		if (!lb_is_err(in, "unavailable"))
			return in;
		cr_assert_lt(lb_now_ms(), end, "the broker does not serve again: %s", lb_dump(in));
		lb_sleep_ms(20);
	}
}

static int port_of(const lb_redis *r)
{
	return atoi(strrchr(lb_redis_url(r), ':') + 1);
}

/* The broker's try stalls on the way; the broker answers it timeout and
 * gives back what it may have taken; then the stalled copy runs. */
LB_TEST(latecopy, a_try_that_runs_after_its_give_back_takes_nothing, 60)
{
	lb_redis *r = lb_redis_start(true);
	char url[64];

	px_start(port_of(r));
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", P.port);
	/* One connection, so the try goes where the stall is; the canary
	 * quiet meanwhile (a stalled check would look like a data loss). */
	lb_broker *b = lb_broker_start_url(url, "--pool", "1", "--canary-interval-ms", "60000", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);

	hold();
	int64_t t0 = lb_now_ms();
	json_t *g = lb_try_acquire(c, "late", 30000);
	lb_expect_err(g, "timeout"); /* the broker gave up on its stalled connection */
	fprintf(stderr, "latecopy: the stalled try answered %s after %lld ms\n",
	        lb_str(g, "error.code"), (long long)(lb_now_ms() - t0));
	/* the give-back ran, on a new connection */
	cr_assert_str_eq(lb_str(inspect_served(o, "late"), "state"), "free");
	release();                 /* the stalled copy reaches Redis now */
	for (int64_t end = lb_now_ms() + 1000; lb_now_ms() < end; lb_sleep_ms(50)) {
		json_t *in = inspect_served(o, "late");
		cr_assert_str_eq(lb_str(in, "state"), "free",
		                 "the late copy took the lock for nobody: %s", lb_dump(in));
	}
	json_t *t = lb_try_acquire(o, "late", 30000);
	lb_expect_ok(t);
	lb_release(o, lb_str(t, "lease"));
	lb_end();
	px_stop();
}

/* The connection carrying a try drops before its reply (the broker sends
 * the try again on a new one, where it is granted); the holder works and
 * releases; then the first copy, kept back all along, reaches Redis. It
 * must not take the lock again for the lease that ended. */
LB_TEST(latecopy, a_granted_try_whose_first_copy_runs_after_its_release_takes_nothing, 60)
{
	lb_redis *r = lb_redis_start(true);
	char url[64];

	px_start(port_of(r));
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", P.port);
	lb_broker *b = lb_broker_start_url(url, "--pool", "1", "--canary-interval-ms", "60000", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);

	hold();
	json_t *id = lb_acq_send(c, "late2", LB_AO(.wait_ms = 0, .ttl_ms = 30000));
	lb_sleep_ms(100); /* the try is kept back by the proxy */
	cut();
	json_t *g = lb_wait_response(c, id, 5000);
	lb_expect_ok(g); /* granted by the copy sent again */
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	cr_assert_str_eq(lb_str(inspect_served(o, "late2"), "state"), "free");
	release(); /* the first copy reaches Redis now */
	for (int64_t end = lb_now_ms() + 1000; lb_now_ms() < end; lb_sleep_ms(50)) {
		json_t *in = inspect_served(o, "late2");
		cr_assert_str_eq(lb_str(in, "state"), "free",
		                 "the late copy took the lock for nobody: %s", lb_dump(in));
	}
	lb_expect_ok(lb_try_acquire(o, "late2", 30000));
	lb_end();
	px_stop();
}
