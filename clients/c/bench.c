/*
 * bench.c - uncontended acquire+release cycles/s: the C client against a
 * raw socket loop, from 1 and from 16 threads.
 *
 * Each thread takes and releases a lock of its own (wait_ms 0, so nothing
 * ever waits) as fast as it can for --seconds; a run's figure is the cycles
 * of all threads over the elapsed time. Variants, run in turn within each
 * round so that they share the machine's conditions:
 *
 *   raw            one blocking socket per thread, write the request, read
 *                  the line, find the token with strstr: the floor
 *   client         one lbc_client_t shared by every thread (one connection)
 *   client/thread  one lbc_client_t per thread
 *
 * Prints each run and the median of --runs per variant (cycles/s, and CPU
 * microseconds of this process per cycle). Run it under the test harness,
 * against the release build:
 *
 *     make build/lockbrokerd build/clients/c/bench
 *     LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh build/clients/c/bench
 *
 * Options: --url URL (default $LOCKBROKER_URL, as lockctl), --seconds S
 * (2), --runs N (3), --threads LIST (1,16).
 */
#include "internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef enum { V_RAW, V_CLIENT, V_CLIENT_PER_THREAD, V_COUNT } variant_t;
static const char *const vnames[V_COUNT] = {"raw", "client", "client/thread"};

typedef struct worker {
	variant_t v;
	const char *url;
	lbc_client_t *client;
	char name[64];
	atomic_bool *stop;
	long cycles;
	int failed;
	pthread_t t;
} worker_t;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- raw loop ---------------------------------------------------------------------- */

typedef struct rawconn {
	int fd;
	char buf[8192];
	size_t len;
} rawconn_t;

static int raw_line(rawconn_t *r, char *out, size_t cap)
{
	for (;;) {
		char *nl = memchr(r->buf, '\n', r->len);
		if (nl) {
			size_t n = (size_t)(nl - r->buf);
			if (n >= cap)
				return -1;
			memcpy(out, r->buf, n);
			out[n] = '\0';
			memmove(r->buf, nl + 1, r->len - n - 1);
			r->len -= n + 1;
			return 0;
		}
		ssize_t got = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
		if (got <= 0)
			return -1;
		r->len += (size_t)got;
	}
}

static void *raw_main(void *arg)
{
	worker_t *w = arg;
	lbc_addr_t a;
	char msg[160], acq[200], rel[200], line[1024];
	int e;
	rawconn_t r = {.fd = -1};

	if (lbc_url_parse(w->url, &a, msg, sizeof(msg)) < 0 ||
	    (r.fd = lbc_sock_open(&a, lbc_now_ms() + 5000, &e, msg, sizeof(msg))) < 0) {
		w->failed = 1;
		return NULL;
	}
	fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) & ~O_NONBLOCK);
	int an = snprintf(acq, sizeof(acq), "{\"id\":1,\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0}\n", w->name);
	while (!atomic_load(w->stop)) {
		char *tok, *end;
		if (send(r.fd, acq, (size_t)an, MSG_NOSIGNAL) != an || raw_line(&r, line, sizeof(line)) < 0 ||
		    (tok = strstr(line, "\"lease\":\"")) == NULL) {
			w->failed = 1;
			break;
		}
		tok += 9;
		end = strchr(tok, '"');
		if (end == NULL) {
			w->failed = 1;
			break;
		}
		int rn = snprintf(rel, sizeof(rel), "{\"id\":2,\"op\":\"release\",\"lease\":\"%.*s\"}\n",
		                  (int)(end - tok), tok);
		if (send(r.fd, rel, (size_t)rn, MSG_NOSIGNAL) != rn || raw_line(&r, line, sizeof(line)) < 0 ||
		    strstr(line, "\"count\":0") == NULL) {
			w->failed = 1;
			break;
		}
		w->cycles++;
	}
	close(r.fd);
	return NULL;
}

/* ---- the client ------------------------------------------------------------------- */

static void *client_main(void *arg)
{
	worker_t *w = arg;
	lbc_acquire_opts_t o = {.wait_ms = LBC_NO_WAIT};

	while (!atomic_load(w->stop)) {
		lbc_lease_t *l;
		lbc_error_t err;
		if (lbc_acquire(w->client, w->name, &o, &l, &err) != LBC_OK) {
			fprintf(stderr, "bench: acquire: %s\n", err.message);
			w->failed = 1;
			break;
		}
		if (lbc_release(w->client, l, NULL, &err) != LBC_OK) {
			fprintf(stderr, "bench: release: %s\n", err.message);
			w->failed = 1;
			break;
		}
		w->cycles++;
	}
	return NULL;
}

/* One run; returns cycles/s (and CPU us per cycle in *cpu_us), or -1. */
static double run(variant_t v, const char *url, int threads, double seconds, int tag, double *cpu_us)
{
	worker_t *w = calloc((size_t)threads, sizeof(*w));
	lbc_client_t *shared = NULL;
	atomic_bool stop;
	long total = 0;
	int failed = 0;
	double t0, c0, elapsed;
	struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};

	atomic_init(&stop, false);
	if (v == V_CLIENT && (shared = lbc_connect(url, NULL, NULL)) == NULL)
		return -1;
	for (int i = 0; i < threads; i++) {
		w[i].v = v;
		w[i].url = url;
		w[i].stop = &stop;
		snprintf(w[i].name, sizeof(w[i].name), "bench-c-%d-%d-%d", (int)getpid(), tag, i);
		if (v == V_CLIENT)
			w[i].client = shared;
		else if (v == V_CLIENT_PER_THREAD && (w[i].client = lbc_connect(url, NULL, NULL)) == NULL)
			return -1;
	}
	t0 = now_s();
	c0 = cpu_s();
	for (int i = 0; i < threads; i++)
		pthread_create(&w[i].t, NULL, v == V_RAW ? raw_main : client_main, &w[i]);
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].t, NULL);
		total += w[i].cycles;
		failed |= w[i].failed;
	}
	elapsed = now_s() - t0;
	*cpu_us = (cpu_s() - c0) * 1e6 / (double)(total ? total : 1);
	for (int i = 0; i < threads; i++)
		if (v == V_CLIENT_PER_THREAD)
			lbc_close(w[i].client);
	lbc_close(shared);
	free(w);
	return failed ? -1 : (double)total / elapsed;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *url = NULL, *tlist = "1,16";
	double seconds = 2;
	int runs = 3, tag = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--url") == 0)
			url = argv[i + 1];
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--runs") == 0)
			runs = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--threads") == 0)
			tlist = argv[i + 1];
		else {
			fprintf(stderr, "usage: bench [--url URL] [--seconds S] [--runs N] [--threads 1,16]\n");
			return 2;
		}
	}
	if (url == NULL)
		url = lbc_default_url();
	if (runs < 1 || runs > 50 || seconds <= 0) {
		fprintf(stderr, "bench: bad --runs or --seconds\n");
		return 2;
	}
	char *list = strdup(tlist), *save = NULL;
	printf("bench: %s, %d run(s) of %.1f s per variant\n", url, runs, seconds);
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int threads = atoi(tok);
		double rate[V_COUNT][50], cpu[V_COUNT][50];
		if (threads < 1 || threads > 1024)
			continue;
		for (int r = 0; r < runs; r++)
			for (int v = 0; v < V_COUNT; v++) {
				rate[v][r] = run((variant_t)v, url, threads, seconds, tag++, &cpu[v][r]);
				printf("  %2d thread(s) %-14s run %d: %9.0f cycles/s  %6.1f us CPU/cycle\n", threads,
				       vnames[v], r + 1, rate[v][r], cpu[v][r]);
				fflush(stdout);
				if (rate[v][r] < 0) {
					fprintf(stderr, "bench: %s failed\n", vnames[v]);
					free(list);
					return 1;
				}
			}
		printf("median, %d thread(s):\n", threads);
		for (int v = 0; v < V_COUNT; v++) {
			qsort(rate[v], (size_t)runs, sizeof(double), cmp_double);
			qsort(cpu[v], (size_t)runs, sizeof(double), cmp_double);
			printf("  %-14s %9.0f cycles/s  %6.1f us CPU/cycle  (%.0f%% of raw)\n", vnames[v],
			       rate[v][runs / 2], cpu[v][runs / 2], 100.0 * rate[v][runs / 2] / rate[V_RAW][runs / 2]);
		}
	}
	free(list);
	return 0;
}
