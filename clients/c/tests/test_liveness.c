/*
 * test_liveness.c - the client's liveness check (on by default). Issue 26's
 * scenario: a holder on a broker of the test's own, with default options,
 * a waiter on the suite's broker (same Redis), the holder's broker frozen
 * with SIGSTOP: the holder, which does not call the library meanwhile,
 * sees its lease lost within about TTL/3 and before the waiter is granted.
 * Against a fake broker that can go mute and counts pings: the bound
 * applies from the first grant on, follows the shortest TTL (a shorter
 * lease, an extend), relaxes at a release; no pings without a lease; with
 * liveness_check LBC_OFF no ping and no thread; the thread ends with
 * lbc_close.
 */
#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the scenario: a frozen broker ----------------------------------------- */

static pid_t frozen_pid;

/* .fini: a broker stopped with SIGSTOP is continued, whatever happened */
static void continue_then_stop_all(void)
{
	if (frozen_pid > 0)
		kill(frozen_pid, SIGCONT);
	frozen_pid = 0;
	brokers_stop_all();
}

typedef struct waiter {
	lbc_client_t *c;
	const char *name;
	pthread_mutex_t mu;
	bool done;
	lbc_status st;
	int64_t at; /* now_ms() of the answer */
	lbc_lease_t *lease;
	lbc_error_t err;
} waiter_t;

static void *waiter_main(void *arg)
{
	waiter_t *w = arg;
	lbc_lease_t *l = NULL;
	lbc_error_t err;
	lbc_status st = lbc_acquire(w->c, w->name,
	                            &(lbc_acquire_opts_t){.ttl_ms = 3000, .wait_ms = 30000}, &l, &err);
	int64_t at = now_ms();

	pthread_mutex_lock(&w->mu);
	w->st = st;
	w->at = at;
	w->lease = l;
	w->err = err;
	w->done = true;
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static bool waiter_done(waiter_t *w, int64_t *at)
{
	bool d;

	pthread_mutex_lock(&w->mu);
	d = w->done;
	*at = w->at;
	pthread_mutex_unlock(&w->mu);
	return d;
}

Test(liveness, a_frozen_brokers_holder_loses_first, .timeout = 60, .fini = continue_then_stop_all)
{
	const char *shared = NEED_BROKER();
	const int64_t ttl = 3000;
	broker_t b;
	waiter_t w = {0};
	pthread_t t;
	lbc_client_t *holder, *observer;
	lbc_lease_t *l;
	char name[96];
	int64_t t0, lost_at = -1, grant_at = -1;

	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	holder = must_connect(b.url, NULL); /* default options: no keepalive_ms */
	observer = must_connect(shared, NULL);
	unique_name(name, sizeof(name), "frozen");
	l = must_acquire(holder, name, &(lbc_acquire_opts_t){.ttl_ms = ttl, .wait_ms = LBC_NO_WAIT});

	w.c = must_connect(shared, NULL);
	w.name = name;
	pthread_mutex_init(&w.mu, NULL);
	cr_assert_eq(pthread_create(&t, NULL, waiter_main, &w), 0);
	cr_assert_eq(wait_for_waiters(observer, name, 1, 5000), 1, "the waiter did not queue");
	/* a live broker keeps the lease held, the holder calling nothing */
	sleep_ms((int)ttl / 2);
	cr_assert_not(lbc_lease_lost(l), "lost while the broker ran: %s",
	              lbc_lost_reason_name(lbc_lease_lost_reason(l)));

	frozen_pid = b.pid;
	cr_assert_eq(kill(b.pid, SIGSTOP), 0);
	t0 = now_ms();
	/* the holder does not call into the library: the client's own thread
	 * must find the silence, and lbc_lease_lost is a plain read */
	while (now_ms() - t0 < 20000) {
		int64_t at;
		if (lost_at < 0 && lbc_lease_lost(l))
			lost_at = now_ms();
		if (grant_at < 0 && waiter_done(&w, &at))
			grant_at = at;
		if (lost_at >= 0 && grant_at >= 0)
			break;
		sleep_ms(5);
	}
	pthread_join(t, NULL);
	cr_assert_geq(lost_at, 0, "the holder never saw its lease lost");
	cr_assert_eq(w.st, LBC_OK, "waiter: %s: %s", w.err.code, w.err.message);
	cr_log_info("after SIGSTOP: holder lost %lld ms, waiter granted %lld ms (TTL %lld ms)",
	            (long long)(lost_at - t0), (long long)(grant_at - t0), (long long)ttl);
	cr_assert_lt(lost_at, grant_at,
	             "the waiter was granted %lld ms after SIGSTOP, the holder lost its lease only "
	             "%lld ms after it: two holders",
	             (long long)(grant_at - t0), (long long)(lost_at - t0));
	cr_assert_leq(lost_at - t0, ttl / 3 + 1000, "lost %lld ms after SIGSTOP, want about TTL/3",
	              (long long)(lost_at - t0));
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	cr_assert_eq(lbc_poll(holder, 0, NULL), 1, "lbc_poll reports the loss");
	cr_assert_eq(lbc_fd(holder), -1, "the session ended");

	cr_assert_eq(kill(b.pid, SIGCONT), 0);
	frozen_pid = 0;
	cr_assert_eq(lbc_release(holder, l, NULL, NULL), LBC_LOST);
	cr_assert_eq(lbc_release(w.c, w.lease, NULL, NULL), LBC_OK);
	lbc_close(holder);
	lbc_close(w.c);
	lbc_close(observer);
	pthread_mutex_destroy(&w.mu);
	broker_free(&b);
}

/* ---- a fake broker that goes mute and counts pings ----------------------------------- */

typedef struct lfake {
	int lfd, port;
	pthread_t t;
	pthread_mutex_t mu;
	int pings;
	bool muted;
	bool hello_keepalive; /* hello asked for keepalive_ms */
} lfake_t;

/* The integer after "key": in line, or -1. */
static long field(const char *line, const char *key)
{
	char k[40];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(line, k);
	return p ? strtol(p + strlen(k), NULL, 10) : -1;
}

/* One connection: hello, then grants (with the TTL asked), extends,
 * releases and pings are answered, nothing once muted. */
static void *lfake_main(void *arg)
{
	lfake_t *f = arg;
	char line[4096], out[512];
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	while (fake_read_line(fd, line, sizeof(line)) == 0) {
		long id = field(line, "id");
		bool muted;

		pthread_mutex_lock(&f->mu);
		if (strstr(line, "\"op\":\"ping\""))
			f->pings++;
		if (strstr(line, "\"op\":\"hello\"") && strstr(line, "\"keepalive_ms\""))
			f->hello_keepalive = true;
		muted = f->muted;
		pthread_mutex_unlock(&f->mu);
		if (muted)
			continue;
		if (strstr(line, "\"op\":\"hello\""))
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/1\",\"proto\":1,\"session\":\"s\","
			         "\"broker\":\"fk\",\"limits\":{\"max_line\":4096}}\n",
			         id);
		else if (strstr(line, "\"op\":\"acquire\""))
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"lease\":\"tok%ld\",\"lock\":\"x\",\"mode\":\"exclusive\","
			         "\"fence\":%ld,\"ttl_ms\":%ld,\"count\":1}\n",
			         id, id, id, field(line, "ttl_ms"));
		else if (strstr(line, "\"op\":\"extend\""))
			snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"ttl_ms\":%ld}\n", id,
			         field(line, "ttl_ms"));
		else if (strstr(line, "\"op\":\"release\""))
			snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"count\":0}\n", id);
		else
			snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n", id);
		(void)!send(fd, out, strlen(out), MSG_NOSIGNAL);
	}
	close(fd);
	return NULL;
}

static lbc_client_t *lfake_start(lfake_t *f, const lbc_options_t *o)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	char url[64];

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &len);
	f->port = ntohs(sa.sin_port);
	cr_assert_eq(pthread_create(&f->t, NULL, lfake_main, f), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", f->port);
	return must_connect(url, o);
}

/* Closes the client (which ends the fake's connection), then the fake. */
static void lfake_stop(lfake_t *f, lbc_client_t *c)
{
	lbc_close(c);
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->t, NULL);
	close(f->lfd);
	pthread_mutex_destroy(&f->mu);
}

static int pings(lfake_t *f)
{
	int n;

	pthread_mutex_lock(&f->mu);
	n = f->pings;
	pthread_mutex_unlock(&f->mu);
	return n;
}

static int pings_during(lfake_t *f, int ms)
{
	int before = pings(f);

	sleep_ms(ms);
	return pings(f) - before;
}

/* Mutes the fake; returns how long l took to be lost (asserting it was,
 * within limit_ms, "disconnected"), without calling into the library. */
static int64_t lost_within(lfake_t *f, lbc_lease_t *l, int limit_ms)
{
	int64_t t0;

	pthread_mutex_lock(&f->mu);
	f->muted = true;
	pthread_mutex_unlock(&f->mu);
	t0 = now_ms();
	while (!lbc_lease_lost(l) && now_ms() - t0 < limit_ms)
		sleep_ms(2);
	cr_assert(lbc_lease_lost(l), "no loss within %d ms of the broker going mute", limit_ms);
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	return now_ms() - t0;
}

/* The threads of this process (/proc/self/status). */
static int threads_now(void)
{
	char line[256];
	int n = -1;
	FILE *f = fopen("/proc/self/status", "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

Test(liveness, the_first_lease_is_watched_at_once, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, NULL);
	lbc_lease_t *l;
	int64_t took;

	cr_assert_eq(pings_during(&f, 400), 0, "pings while no lease was held");
	l = must_acquire(c, "a", &(lbc_acquire_opts_t){.ttl_ms = 600}); /* bound 200 ms */
	sleep_ms(500);
	cr_assert_not(lbc_lease_lost(l), "lost while the broker answered");
	took = lost_within(&f, l, 10000);
	cr_assert_leq(took, 1200, "lost %lld ms after the broker went mute, bound 200 ms",
	              (long long)took);
	cr_assert_eq(lbc_poll(c, 0, NULL), 1);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	lfake_stop(&f, c);
}

Test(liveness, the_bound_follows_the_shortest_ttl, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, NULL);
	lbc_lease_t *lng, *shrt;
	int64_t took;
	int n;

	lng = must_acquire(c, "long", &(lbc_acquire_opts_t){.ttl_ms = 30000}); /* the 5 s cap */
	n = pings_during(&f, 600);
	cr_assert_eq(n, 0, "%d pings in 600 ms with a bound of 5 s (one every 1.67 s)", n);
	shrt = must_acquire(c, "short", &(lbc_acquire_opts_t){.ttl_ms = 600}); /* bound 200 ms */
	n = pings_during(&f, 600);
	cr_assert_geq(n, 3, "%d pings in 600 ms with a bound of 200 ms (one every 67 ms)", n);
	took = lost_within(&f, shrt, 10000);
	cr_assert_leq(took, 1200, "lost %lld ms after the broker went mute, bound 200 ms",
	              (long long)took);
	cr_assert(lbc_lease_lost(lng), "the session ended: every lease is lost");
	lbc_release(c, lng, NULL, NULL);
	lbc_release(c, shrt, NULL, NULL);
	lfake_stop(&f, c);
}

Test(liveness, an_extend_shrinks_the_bound, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, NULL);
	lbc_lease_t *l = must_acquire(c, "x", &(lbc_acquire_opts_t){.ttl_ms = 30000});
	int64_t took, ttl = 0;

	cr_assert_eq(lbc_extend(c, l, 600, &ttl, NULL), LBC_OK);
	cr_assert_eq(ttl, 600);
	took = lost_within(&f, l, 10000);
	cr_assert_leq(took, 1200, "lost %lld ms after the broker went mute, bound 200 ms",
	              (long long)took);
	lbc_release(c, l, NULL, NULL);
	lfake_stop(&f, c);
}

Test(liveness, a_release_relaxes_the_bound, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, NULL);
	lbc_lease_t *lng = must_acquire(c, "long", &(lbc_acquire_opts_t){.ttl_ms = 3000}); /* 1 s */
	lbc_lease_t *shrt = must_acquire(c, "short", &(lbc_acquire_opts_t){.ttl_ms = 300}); /* 100 ms */
	int64_t took;
	int n;

	sleep_ms(200);
	cr_assert_eq(lbc_release(c, shrt, NULL, NULL), LBC_OK);
	n = pings_during(&f, 700);
	cr_assert_leq(n, 3, "%d pings in 700 ms after the release, bound 1 s (one every 333 ms)", n);
	took = lost_within(&f, lng, 10000);
	cr_assert(took >= 500 && took <= 2500, "lost %lld ms after the broker went mute, bound 1 s",
	          (long long)took);
	lbc_release(c, lng, NULL, NULL);
	lfake_stop(&f, c);
}

Test(liveness, no_pings_without_a_lease_and_the_thread_ends_with_close, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, NULL);
	int before = threads_now();
	lbc_lease_t *l = must_acquire(c, "x", &(lbc_acquire_opts_t){.ttl_ms = 300});
	int n;

	cr_assert_eq(threads_now(), before + 1, "one liveness thread once a lease is held");
	cr_assert_gt(pings_during(&f, 300), 0, "no ping in 300 ms with a bound of 100 ms");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	sleep_ms(50); /* a ping may have crossed the release */
	n = pings_during(&f, 1000);
	cr_assert_eq(n, 0, "%d pings in 1 s with no lease held", n);
	pthread_mutex_lock(&f.mu);
	bool ka = f.hello_keepalive;
	pthread_mutex_unlock(&f.mu);
	cr_assert_not(ka, "hello asked for keepalive");
	lfake_stop(&f, c);
	cr_assert_eq(threads_now(), before - 1, "the liveness thread (and the fake's) ended");
}

Test(liveness, turned_off_sends_no_ping_and_starts_no_thread, .timeout = 20)
{
	lfake_t f;
	lbc_client_t *c = lfake_start(&f, &(lbc_options_t){.liveness_check = LBC_OFF});
	int before = threads_now();
	lbc_lease_t *l = must_acquire(c, "x", &(lbc_acquire_opts_t){.ttl_ms = 300});
	int n;

	cr_assert_eq(threads_now(), before, "a thread was started with the liveness check off (%d, %d)", before, threads_now());
	n = pings_during(&f, 1000);
	cr_assert_eq(n, 0, "%d pings with the liveness check off", n);
	pthread_mutex_lock(&f.mu);
	f.muted = true;
	pthread_mutex_unlock(&f.mu);
	sleep_ms(500);
	cr_assert_not(lbc_lease_lost(l), "the lease ended with the liveness check off");
	lbc_lease_free(l);
	lfake_stop(&f, c);
}

Test(liveness, bad_option, .timeout = 10)
{
	lbc_error_t err;

	cr_assert_null(lbc_connect("tcp://127.0.0.1:1", &(lbc_options_t){.liveness_check = 2}, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
}
