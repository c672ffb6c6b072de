/*
 * test_errors.c - every error code the broker can be made to send reaches
 * the caller as its own status with the broker's message: invalid_argument,
 * unknown_op, bad_request, unauthorized, timeout, cancelled, not_held,
 * conflict, upgrade_unsupported, limit_exceeded, unavailable,
 * shutting_down. line_too_long is refused by the client before the broker
 * would close the session; bad_json and internal cannot be provoked by a
 * correct client (test_fake.c's fake broker sends every code, those
 * included). cancelled also from a signal handler (lbc_cancel_fire is
 * async-signal-safe). Also: arguments the client refuses itself, without
 * asking the broker.
 */
#include "support.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static void expect_broker(lbc_status got, lbc_status want, const lbc_error_t *err)
{
	cr_assert_eq(got, want, "got %s (%s: %s), want %s", lbc_status_code(got), err->code, err->message,
	             lbc_status_code(want));
	cr_assert_eq(err->status, want);
	cr_assert_str_eq(err->code, lbc_status_code(want));
	cr_assert(err->from_broker, "%s should come from the broker", err->code);
	cr_assert_gt(strlen(err->message), 0);
}

static void expect_local(lbc_status got, lbc_status want, const lbc_error_t *err)
{
	cr_assert_eq(got, want, "got %s (%s), want %s", lbc_status_code(got), err->message, lbc_status_code(want));
	cr_assert_not(err->from_broker, "%s should be the client's own", err->message);
}

Test(errors, from_the_shared_broker, .timeout = 15)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96], token[200];
	lbc_error_t err;
	lbc_lease_t *l = NULL;
	lbc_cancel_t *tok = lbc_cancel_new();

	/* invalid_argument: a TTL out of range, a mode the broker refuses */
	expect_broker(lbc_acquire(c, unique_name(name, sizeof(name), "err"), &(lbc_acquire_opts_t){.ttl_ms = 5}, &l, &err),
	              LBC_INVALID_ARGUMENT, &err);
	cr_assert_not_null(strstr(err.message, "ttl_ms"), "%s", err.message);
	expect_broker(lbc_acquire(c, name, &(lbc_acquire_opts_t){.detach = true, .watchdog = LBC_ON}, &l, &err),
	              LBC_INVALID_ARGUMENT, &err);
	/* unknown_op and bad_request through lbc_request */
	expect_broker(lbc_request(c, "frobnicate", NULL, NULL, &err), LBC_UNKNOWN_OP, &err);
	cr_assert_not_null(strstr(err.message, "frobnicate"));
	expect_broker(lbc_request(c, NULL, "{\"op\":42}", NULL, &err), LBC_BAD_REQUEST, &err);
	expect_broker(lbc_request(c, NULL, NULL, NULL, &err), LBC_BAD_REQUEST, &err);

	lbc_lease_t *held = must_acquire(c, name, &(lbc_acquire_opts_t){.mode = LBC_SHARED, .owner = "o1"});
	/* timeout */
	expect_broker(lbc_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 50}, &l, &err), LBC_TIMEOUT, &err);
	/* cancelled: a token fired before the call refuses at once, locally,
	 * sending nothing (the broker's cancelled: cancelled_by_the_broker and
	 * cancel_fired_by_a_signal_handler) */
	lbc_cancel_fire(tok);
	expect_local(lbc_acquire(c, name, &(lbc_acquire_opts_t){.cancel = tok}, &l, &err), LBC_CANCELLED, &err);
	lbc_cancel_free(tok);
	/* conflict: a semaphore on a name held as a lock */
	expect_broker(lbc_acquire(c, name, &(lbc_acquire_opts_t){.limit = 2, .wait_ms = LBC_NO_WAIT}, &l, &err),
	              LBC_CONFLICT, &err);
	/* upgrade_unsupported: the shared holder asks exclusive */
	expect_broker(lbc_acquire(c, name, &(lbc_acquire_opts_t){.owner = "o1", .wait_ms = LBC_NO_WAIT}, &l, &err),
	              LBC_UPGRADE_UNSUPPORTED, &err);
	/* not_held: a released token */
	snprintf(token, sizeof(token), "%s", lbc_lease_token(held));
	cr_assert_eq(lbc_release(c, held, NULL, NULL), LBC_OK);
	expect_broker(lbc_release_token(c, token, NULL, &err), LBC_NOT_HELD, &err);
	expect_broker(lbc_extend_token(c, token, 1000, NULL, &err), LBC_NOT_HELD, &err);
	/* a handle answered not_held is lost (someone released its token) */
	held = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	cr_assert_eq(lbc_release_token(c, lbc_lease_token(held), NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_extend(c, held, 1000, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_NOT_HELD);
	cr_assert_eq(lbc_release(c, held, NULL, &err), LBC_LOST);
	lbc_close(c);
}

static void *fire_later(void *p)
{
	sleep_ms(100);
	lbc_cancel_fire(p);
	return NULL;
}

Test(errors, cancelled_by_the_broker, .timeout = 10)
{
	const char *url = NEED_BROKER();
	lbc_client_t *a = must_connect(url, NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(a, unique_name(name, sizeof(name), "cxl"),
	                                 &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	lbc_cancel_t *tok = lbc_cancel_new();
	lbc_lease_t *l = NULL;
	lbc_error_t err;
	pthread_t t;

	/* the same client and thread, as another owner (the thread's own
	 * owner would re-enter) */
	pthread_create(&t, NULL, fire_later, tok);
	expect_broker(lbc_acquire(a, name, &(lbc_acquire_opts_t){.cancel = tok, .owner = "waiter"}, &l, &err),
	              LBC_CANCELLED, &err);
	pthread_join(t, NULL);
	cr_assert_null(l);
	lbc_cancel_free(tok);
	cr_assert_eq(lbc_release(a, held, NULL, NULL), LBC_OK);
	lbc_close(a);
}

/* ---- lbc_cancel_fire from a signal handler (as lockctl run does) ---------- */

static lbc_cancel_t *volatile sig_token;
static volatile sig_atomic_t sig_seen;

static void on_cancel_signal(int sig)
{
	(void)sig;
	sig_seen++;
	lbc_cancel_fire(sig_token); /* async-signal-safe */
}

typedef struct {
	lbc_client_t *watch; /* its own client: inspect */
	const char *name;
	pthread_t waiter;    /* the thread in lbc_acquire */
	int how;             /* 0: setitimer (SIGALRM to the process); 1: pthread_kill(waiter, SIGUSR1) */
	int64_t waiters_seen;
} sig_job_t;

/* Once the acquire waits at the broker, makes the signal come. */
static void *signal_when_waiting(void *arg)
{
	sig_job_t *j = arg;

	j->waiters_seen = wait_for_waiters(j->watch, j->name, 1, 5000);
	if (j->how == 0) {
		struct itimerval it = {.it_value = {0, 1000}};
		setitimer(ITIMER_REAL, &it, NULL);
	} else {
		pthread_kill(j->waiter, SIGUSR1);
	}
	return NULL;
}

Test(errors, cancel_fired_by_a_signal_handler, .timeout = 30)
{
	const char *url = NEED_BROKER();
	lbc_client_t *holder = must_connect(url, NULL), *c = must_connect(url, NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(holder, unique_name(name, sizeof(name), "sigcxl"),
	                                 &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	struct sigaction sa = {.sa_handler = on_cancel_signal}, old_alrm, old_usr1;
	lbc_lock_info_t *info = NULL;

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &sa, &old_alrm), 0);
	cr_assert_eq(sigaction(SIGUSR1, &sa, &old_usr1), 0);
	for (int how = 0; how < 2; how++) {
		sig_job_t job = {.watch = holder, .name = name, .waiter = pthread_self(), .how = how};
		lbc_cancel_t *tok = lbc_cancel_new();
		lbc_lease_t *l = NULL;
		lbc_error_t err;
		pthread_t t;
		int before = sig_seen;
		lbc_status st;

		cr_assert_not_null(tok);
		sig_token = tok;
		pthread_create(&t, NULL, signal_when_waiting, &job);
		/* waits for ever: only the signal's cancel can end it */
		st = lbc_acquire(c, name, &(lbc_acquire_opts_t){.cancel = tok}, &l, &err);
		pthread_join(t, NULL);
		cr_assert_eq(job.waiters_seen, 1, "round %d: the acquire never waited at the broker", how);
		cr_assert_eq(st, LBC_CANCELLED, "round %d: %s: %s", how, lbc_status_code(st), err.message);
		cr_assert(err.from_broker, "round %d: cancel was sent and the broker answered (%s)", how, err.message);
		cr_assert_str_eq(err.code, "cancelled");
		cr_assert_null(l);
		cr_assert_gt(sig_seen, before, "round %d: the handler ran", how);
		cr_assert(lbc_cancel_fired(tok));
		/* the waiter is gone at the broker; the holder still holds */
		cr_assert_eq(wait_for_waiters(holder, name, 0, 5000), 0, "round %d: the waiter is still queued", how);
		sig_token = NULL;
		lbc_cancel_free(tok);
	}
	sigaction(SIGALRM, &old_alrm, NULL);
	sigaction(SIGUSR1, &old_usr1, NULL);
	cr_assert_eq(lbc_inspect(holder, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "exclusive");
	cr_assert_eq(info->n_holders, 1);
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK, "the session lives on");
	cr_assert_eq(lbc_release(holder, held, NULL, NULL), LBC_OK);
	/* and the lock goes to the next acquire of that client at once */
	lbc_lease_t *l2 = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 5000});
	cr_assert_eq(lbc_release(c, l2, NULL, NULL), LBC_OK);
	lbc_close(c);
	lbc_close(holder);
}

Test(errors, unauthorized, .timeout = 10)
{
	lbc_client_t *c = must_connect(need_env("LOCKBROKER_AUTH_URL"), NULL);
	lbc_error_t err;
	lbc_lock_info_t *info;

	expect_broker(lbc_inspect(c, "c-anything", &info, &err), LBC_UNAUTHORIZED, &err);
	expect_broker(lbc_stats(c, &(lbc_stats_t){0}, &err), LBC_UNAUTHORIZED, &err);
	lbc_close(c);
}

Test(errors, line_too_long_is_refused_before_sending, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	size_t n = 70000;
	char *fields = malloc(n + 32);
	lbc_error_t err;

	memcpy(fields, "{\"lock\":\"", 9);
	memset(fields + 9, 'x', n);
	memcpy(fields + 9 + n, "\"}", 3);
	expect_local(lbc_request(c, "inspect", fields, NULL, &err), LBC_LINE_TOO_LONG, &err);
	free(fields);
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK, "the session lives on");
	lbc_close(c);
}

Test(errors, limit_exceeded_then_shutting_down, .timeout = 20, .fini = brokers_stop_all)
{
	static const char *const extra[] = {"--max-leases-per-session", "1", "--shutdown-grace-ms", "3000", NULL};
	broker_t b;
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec};
	lbc_client_t *c;
	char n1[96], n2[96];
	lbc_lease_t *one, *l = NULL;
	lbc_error_t err;

	NEED_BROKER();
	broker_init(&b, 0, NULL, extra);
	cr_assert_eq(broker_start(&b, true), 0);
	c = must_connect(b.url, &o);
	one = must_acquire(c, unique_name(n1, sizeof(n1), "lim"), &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	expect_broker(lbc_acquire(c, unique_name(n2, sizeof(n2), "lim"), &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT},
	                          &l, &err),
	              LBC_LIMIT_EXCEEDED, &err);
	broker_kill(&b, SIGTERM);
	int64_t deadline = now_ms() + 3000;
	while (recorder_get(&rec).shutdown == 0 && now_ms() < deadline)
		lbc_poll(c, 50, NULL);
	cr_assert_eq(recorder_get(&rec).shutdown, 1, "the shutdown event");
	cr_assert_eq(recorder_get(&rec).grace_ms, 3000);
	cr_assert_eq(lbc_release(c, one, NULL, NULL), LBC_OK);
	expect_broker(lbc_acquire(c, n2, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l, &err),
	              LBC_SHUTTING_DOWN, &err);
	lbc_close(c);
	broker_free(&b);
}

Test(errors, unavailable_when_redis_is_down, .timeout = 20, .fini = brokers_stop_all)
{
	char redis[64], name[96];
	broker_t b;
	lbc_client_t *c;
	lbc_lease_t *l = NULL;
	lbc_error_t err;
	bool up = true;

	NEED_BROKER();
	snprintf(redis, sizeof(redis), "redis://127.0.0.1:%d", free_port());
	broker_init(&b, 0, redis, NULL);
	cr_assert_eq(broker_start(&b, false), 0);
	c = must_connect(b.url, NULL);
	cr_assert_eq(lbc_ping(c, &up, NULL), LBC_OK);
	cr_assert_not(up);
	expect_broker(lbc_acquire(c, unique_name(name, sizeof(name), "unav"),
	                          &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l, &err),
	              LBC_UNAVAILABLE, &err);
	lbc_close(c);
	broker_free(&b);
}

Test(errors, refused_locally, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL), *d = must_connect(NEED_BROKER(), NULL);
	char long_name[600], long_owner[200], name[96];
	lbc_lease_t *l = NULL;
	lbc_error_t err;
	lbc_lock_info_t *info = NULL;
	memset(long_name, 'n', 513);
	long_name[513] = '\0';
	memset(long_owner, 'o', 129);
	long_owner[129] = '\0';
	expect_local(lbc_acquire(c, NULL, NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "", NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, long_name, NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	long_name[512] = '\0'; /* 512 bytes are fine */
	l = must_acquire(c, long_name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	expect_local(lbc_acquire(c, "bad\nname", NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "del\x7f", NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "bad\xff", NULL, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", NULL, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.owner = long_owner}, &l, &err),
	             LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.limit = 2, .mode = LBC_SHARED}, &l, &err),
	             LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.mode = (lbc_mode)7}, &l, &err),
	             LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.ttl_ms = -5}, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.wait_ms = -2}, &l, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.watchdog = 5}, &l, &err), LBC_INVALID_ARGUMENT, &err);
	cr_assert_null(l);
	expect_local(lbc_inspect(c, "x", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	long_name[512] = 'n';
	expect_local(lbc_inspect(c, long_name, &info, &err), LBC_INVALID_ARGUMENT, &err);
	cr_assert_null(info);
	expect_local(lbc_release(c, NULL, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_release_token(c, NULL, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_release_token(c, "", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_extend_token(c, "tok", -1, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_request(c, "ping", "[1]", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_request(c, "ping", "{\"id\":5}", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_request(c, "ping", "{\"op\":\"stats\"}", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_request(c, "ping", "{\"a\":1,}", NULL, &err), LBC_INVALID_ARGUMENT, &err);
	/* a lease of another client: refused, and left alone */
	l = must_acquire(c, unique_name(name, sizeof(name), "other"), &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	expect_local(lbc_release(d, l, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	expect_local(lbc_extend(d, l, 1000, NULL, &err), LBC_INVALID_ARGUMENT, &err);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	lbc_close(c);
	lbc_close(d);
}
