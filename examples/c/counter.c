/*
 * counter.c - a counter in Redis, incremented under lock "counter", with
 * fencing checked on every write (the C client's example, like
 * examples/python/counter.py and its Go and Node twins).
 *
 * Each of --iterations rounds takes lock "counter", reads "counter:value"
 * and "fence:last", sleeps a little (so that a missing lock would lose
 * updates), checks that the lease still holds, and writes value + 1
 * together with the lease's fence. A fence not greater than the last one
 * stored is a fencing violation: some earlier holder wrote with a newer
 * lease, so this one is stale. Run several copies at once: the counter then
 * grows by exactly the sum of their iterations.
 *
 *     make build/clients/c/counter
 *     build/clients/c/counter --iterations 50 --url tcp://127.0.0.1:7380 --redis 127.0.0.1:6379
 *
 * Options: --url (default $LOCKBROKER_URL, as lockctl), --redis HOST:PORT
 * (default $LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT, else
 * 127.0.0.1:6379). Exit status: 0 success, 1 fence violation, 2 any other
 * failure (broker error, lost lease, Redis error).
 *
 * The Redis side is a tiny RESP2 client over one blocking socket: just
 * enough for MGET, MSET and GET.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lbclient.h"

/* ---- a tiny RESP client ------------------------------------------------------ */

typedef struct resp {
	int fd;
	char buf[4096];
	size_t len, off;
} resp_t;

static int resp_connect(resp_t *r, const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;

	if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host))
		return -1;
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
		return -1;
	r->fd = -1;
	r->len = r->off = 0;
	for (ai = res; ai && r->fd < 0; ai = ai->ai_next) {
		r->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (r->fd >= 0 && connect(r->fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			close(r->fd);
			r->fd = -1;
		}
	}
	freeaddrinfo(res);
	return r->fd < 0 ? -1 : 0;
}

static int resp_byte(resp_t *r)
{
	if (r->off == r->len) {
		ssize_t n;
		do
			n = recv(r->fd, r->buf, sizeof(r->buf), 0);
		while (n < 0 && errno == EINTR);
		if (n <= 0)
			return -1;
		r->len = (size_t)n;
		r->off = 0;
	}
	return (unsigned char)r->buf[r->off++];
}

/* A line without its \r\n into out (at most cap - 1 bytes). */
static int resp_line(resp_t *r, char *out, size_t cap)
{
	size_t n = 0;
	int ch;

	while ((ch = resp_byte(r)) >= 0) {
		if (ch == '\n') {
			if (n > 0 && out[n - 1] == '\r')
				n--;
			out[n] = '\0';
			return 0;
		}
		if (n + 1 < cap)
			out[n++] = (char)ch;
	}
	return -1;
}

/* One reply. Integers and bulk strings holding integers land in vals (up
 * to nvals of them; a nil bulk is -1 with *nil set per slot); +OK is 0.
 * Returns how many values it stored, or -1 (error reply or I/O). */
static int resp_reply(resp_t *r, int64_t *vals, int *nil, int nvals)
{
	char line[512];

	if (resp_line(r, line, sizeof(line)) < 0)
		return -1;
	switch (line[0]) {
	case '+':
		return 0;
	case ':':
		if (nvals > 0) {
			vals[0] = strtoll(line + 1, NULL, 10);
			nil[0] = 0;
		}
		return 1;
	case '$': {
		long n = strtol(line + 1, NULL, 10);
		if (n < 0) {
			if (nvals > 0) {
				vals[0] = -1;
				nil[0] = 1;
			}
			return 1;
		}
		char data[64] = "";
		for (long i = 0; i < n + 2; i++) {
			int ch = resp_byte(r);
			if (ch < 0)
				return -1;
			if (i < n && i < (long)sizeof(data) - 1)
				data[i] = (char)ch;
		}
		if (nvals > 0) {
			vals[0] = strtoll(data, NULL, 10);
			nil[0] = 0;
		}
		return 1;
	}
	case '*': {
		long n = strtol(line + 1, NULL, 10), got = 0;
		for (long i = 0; i < n; i++) {
			int k = resp_reply(r, vals + got, nil + got, nvals - (int)got);
			if (k < 0)
				return -1;
			got += k;
		}
		return (int)got;
	}
	default:
		fprintf(stderr, "counter: redis: %s\n", line + 1);
		return -1;
	}
}

static int resp_command(resp_t *r, int argc, const char **argv, int64_t *vals, int *nil,
                        int nvals)
{
	char out[1024];
	size_t n = (size_t)snprintf(out, sizeof(out), "*%d\r\n", argc);

	for (int i = 0; i < argc; i++)
		n += (size_t)snprintf(out + n, sizeof(out) - n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
	if (n >= sizeof(out) || send(r->fd, out, n, MSG_NOSIGNAL) != (ssize_t)n)
		return -1;
	return resp_reply(r, vals, nil, nvals);
}

/* ---- the program ----------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: counter [--iterations N] [--url URL] [--redis HOST:PORT]\n");
}

int main(int argc, char **argv)
{
	long iterations = 10;
	const char *url = NULL;
	char redis_default[300];
	const char *redis = NULL;
	const char *rh = getenv("LOCKBROKER_REDIS_HOST"), *rp = getenv("LOCKBROKER_REDIS_PORT");
	lbc_options_t opts = {.client_label = "counter.c"};
	lbc_acquire_opts_t ao = {.ttl_ms = 10000};
	lbc_error_t err;
	lbc_client_t *c;
	resp_t r;
	int status = 0;

	snprintf(redis_default, sizeof(redis_default), "%s:%s", rh ? rh : "127.0.0.1", rp ? rp : "6379");
	redis = redis_default;
	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && strcmp(argv[i], "--iterations") == 0) {
			char *end;
			iterations = strtol(argv[++i], &end, 10);
			if (*end || iterations < 0) {
				usage();
				return 2;
			}
		} else if (i + 1 < argc && strcmp(argv[i], "--url") == 0) {
			url = argv[++i];
		} else if (i + 1 < argc && strcmp(argv[i], "--redis") == 0) {
			redis = argv[++i];
		} else {
			usage();
			return 2;
		}
	}
	if (resp_connect(&r, redis) < 0) {
		fprintf(stderr, "counter: cannot connect to redis at %s\n", redis);
		return 2;
	}
	c = lbc_connect(url, &opts, &err);
	if (c == NULL) {
		fprintf(stderr, "counter: %s: %s\n", err.code, err.message);
		close(r.fd);
		return 2;
	}
	srand((unsigned)getpid());
	for (long it = 0; it < iterations && status == 0; it++) {
		lbc_lease_t *lease;
		int64_t vals[2];
		int nil[2];
		const char *mget[] = {"MGET", "counter:value", "fence:last"};

		if (lbc_acquire(c, "counter", &ao, &lease, &err) != LBC_OK) {
			fprintf(stderr, "counter: acquire: %s: %s\n", err.code, err.message);
			status = 2;
			break;
		}
		int64_t fence = lbc_lease_fence(lease);
		if (resp_command(&r, 3, mget, vals, nil, 2) != 2) {
			status = 2;
		} else if (!nil[1] && fence <= vals[1]) {
			fprintf(stderr, "counter: fence violation: %" PRId64 " after %" PRId64 "\n", fence,
			        vals[1]);
			status = 1;
		} else {
			struct timespec ts = {0, (1 + rand() % 5) * 1000000L};
			nanosleep(&ts, NULL);
			/* never write under a lease that was lost meanwhile */
			lbc_poll(c, 0, NULL);
			if (lbc_lease_check(lease, &err) != LBC_OK) {
				fprintf(stderr, "counter: %s\n", err.message);
				status = 2;
			} else {
				char v[32], f[32];
				snprintf(v, sizeof(v), "%" PRId64, nil[0] ? 1 : vals[0] + 1);
				snprintf(f, sizeof(f), "%" PRId64, fence);
				const char *mset[] = {"MSET", "counter:value", v, "fence:last", f};
				if (resp_command(&r, 5, mset, vals, nil, 0) != 0)
					status = 2;
			}
		}
		if (lbc_release(c, lease, NULL, &err) != LBC_OK && status == 0) {
			fprintf(stderr, "counter: release: %s: %s\n", err.code, err.message);
			status = 2;
		}
	}
	if (status == 0) {
		const char *get[] = {"GET", "counter:value"};
		int64_t v = 0;
		int nl = 1;
		if (resp_command(&r, 2, get, &v, &nl, 1) == 1)
			printf("counter.c: %ld increments, counter:value is %" PRId64 "\n", iterations, v);
	}
	lbc_close(c);
	close(r.fd);
	return status;
}
