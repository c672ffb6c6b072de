/*
 * test_locks.c - acquire and release, waiting (timeout, a grant handed on by
 * a release, cancel), reentrancy by owner, shared mode, semaphores,
 * extend, detached leases by token, inspect, leases, stats and
 * lbc_request.
 */
#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const lbc_acquire_opts_t try_once = {.wait_ms = LBC_NO_WAIT};

Test(locks, acquire_inspect_release, .timeout = 10)
{
	lbc_options_t o = {.client_label = "c-tests/locks"};
	lbc_client_t *c = must_connect(NEED_BROKER(), &o);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "basic"),
	                              &(lbc_acquire_opts_t){.ttl_ms = 10000, .wait_ms = LBC_NO_WAIT});
	lbc_lock_info_t *info;
	int64_t left = -1;

	cr_assert_gt(lbc_lease_fence(l), 0);
	cr_assert_geq(strlen(lbc_lease_token(l)), 32);
	cr_assert_str_eq(lbc_lease_name(l), name);
	cr_assert_str_eq(lbc_lease_mode(l), "exclusive");
	cr_assert_eq(lbc_lease_count(l), 1);
	cr_assert_eq(lbc_lease_ttl_ms(l), 10000);
	cr_assert_not(lbc_lease_detached(l));
	cr_assert_not(lbc_lease_lost(l));
	cr_assert_eq(lbc_lease_check(l, NULL), LBC_OK);

	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->lock, name);
	cr_assert_str_eq(info->state, "exclusive");
	cr_assert_eq(info->n_holders, 1);
	cr_assert_str_eq(info->holders[0].client, "c-tests/locks");
	cr_assert_str_eq(info->holders[0].mode, "exclusive");
	cr_assert(strncmp(info->holders[0].owner, "lbc#", 4) == 0, "owner %s", info->holders[0].owner);
	cr_assert(info->has_fence);
	cr_assert_eq(info->fence, lbc_lease_fence(l));
	cr_assert_eq(info->limit, 0);
	lbc_lock_info_free(info);

	cr_assert_eq(lbc_release(c, l, &left, NULL), LBC_OK);
	cr_assert_eq(left, 0);
	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "free");
	cr_assert_eq(info->n_holders, 0);
	lbc_lock_info_free(info);

	/* a new grant has a greater fence */
	lbc_lease_t *again = must_acquire(c, name, &try_once);
	cr_assert_eq(lbc_release(c, again, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(locks, busy_and_wait_timeout, .timeout = 10)
{
	const char *url = NEED_BROKER();
	lbc_client_t *a = must_connect(url, NULL), *b = must_connect(url, NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(a, unique_name(name, sizeof(name), "busy"), &try_once);
	lbc_lease_t *l = (lbc_lease_t *)1;
	lbc_error_t err;
	int64_t t0;

	cr_assert_eq(lbc_acquire(b, name, &try_once, &l, &err), LBC_TIMEOUT);
	cr_assert_null(l);
	cr_assert(err.from_broker);
	cr_assert_str_eq(err.code, "timeout");
	t0 = now_ms();
	cr_assert_eq(lbc_acquire(b, name, &(lbc_acquire_opts_t){.wait_ms = 300}, &l, &err), LBC_TIMEOUT);
	cr_assert_geq(now_ms() - t0, 250);
	cr_assert_eq(lbc_release(a, held, NULL, NULL), LBC_OK);
	lbc_close(a);
	lbc_close(b);
}

typedef struct waiter {
	lbc_client_t *c;
	const char *name;
	lbc_acquire_opts_t opts;
	lbc_status st;
	lbc_error_t err;
	lbc_lease_t *lease;
	int64_t done_at;
} waiter_t;

static void *wait_thread(void *arg)
{
	waiter_t *w = arg;
	w->st = lbc_acquire(w->c, w->name, &w->opts, &w->lease, &w->err);
	w->done_at = now_ms();
	return NULL;
}

Test(locks, a_release_hands_the_lock_to_a_waiter, .timeout = 10)
{
	const char *url = NEED_BROKER();
	lbc_client_t *a = must_connect(url, NULL), *b = must_connect(url, NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(a, unique_name(name, sizeof(name), "handoff"), &try_once);
	waiter_t w = {.c = b, .name = name};
	pthread_t t;
	int64_t released_at;

	pthread_create(&t, NULL, wait_thread, &w);
	sleep_ms(200);
	cr_assert_eq(w.done_at, 0, "the waiter waits");
	released_at = now_ms();
	cr_assert_eq(lbc_release(a, held, NULL, NULL), LBC_OK);
	pthread_join(t, NULL);
	cr_assert_eq(w.st, LBC_OK, "%s", w.err.message);
	cr_assert_lt(w.done_at - released_at, 1000, "granted at the release, not by polling");
	cr_assert_eq(lbc_release(b, w.lease, NULL, NULL), LBC_OK);
	lbc_close(a);
	lbc_close(b);
}

Test(locks, cancel_gives_a_wait_up, .timeout = 10)
{
	const char *url = NEED_BROKER();
	lbc_client_t *a = must_connect(url, NULL), *b = must_connect(url, NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(a, unique_name(name, sizeof(name), "cancel"), &try_once);
	lbc_cancel_t *tok = lbc_cancel_new();
	waiter_t w = {.c = b, .name = name, .opts = {.cancel = tok}};
	pthread_t t;
	lbc_lock_info_t *info;

	pthread_create(&t, NULL, wait_thread, &w);
	sleep_ms(150);
	lbc_cancel_fire(tok);
	pthread_join(t, NULL);
	cr_assert_eq(w.st, LBC_CANCELLED, "%s: %s", w.err.code, w.err.message);
	cr_assert(w.err.from_broker);
	cr_assert_null(w.lease);
	cr_assert_eq(lbc_inspect(a, name, &info, NULL), LBC_OK);
	cr_assert_eq(info->waiters, 0, "the broker dropped the waiter");
	lbc_lock_info_free(info);
	/* a token already fired: nothing is sent */
	lbc_lease_t *l;
	cr_assert_eq(lbc_acquire(b, name, &(lbc_acquire_opts_t){.cancel = tok}, &l, &w.err), LBC_CANCELLED);
	cr_assert_not(w.err.from_broker);
	lbc_cancel_free(tok);
	cr_assert_eq(lbc_release(a, held, NULL, NULL), LBC_OK);
	lbc_close(a);
	lbc_close(b);
}

Test(locks, reentrancy_needs_the_same_owner, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_acquire_opts_t mine = {.wait_ms = LBC_NO_WAIT, .owner = "worker-1"};
	lbc_lease_t *one = must_acquire(c, unique_name(name, sizeof(name), "reent"), &mine);
	lbc_lease_t *two = must_acquire(c, name, &mine);
	lbc_lease_t *other = NULL;
	int64_t left = -1;

	cr_assert_str_eq(lbc_lease_token(one), lbc_lease_token(two));
	cr_assert_eq(lbc_lease_count(two), 2);
	cr_assert_eq(lbc_lease_fence(two), lbc_lease_fence(one));
	/* another owner is a stranger, even on the same client and thread */
	cr_assert_eq(lbc_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT, .owner = "worker-2"},
	                         &other, NULL),
	             LBC_TIMEOUT);
	cr_assert_eq(lbc_release(c, two, &left, NULL), LBC_OK);
	cr_assert_eq(left, 1);
	cr_assert_eq(lbc_release(c, one, &left, NULL), LBC_OK);
	cr_assert_eq(left, 0);
	lbc_close(c);
}

Test(locks, shared_holders_coexist, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_acquire_opts_t shared = {.mode = LBC_SHARED, .wait_ms = LBC_NO_WAIT, .owner = "reader-1"};
	lbc_acquire_opts_t shared2 = {.mode = LBC_SHARED, .wait_ms = LBC_NO_WAIT, .owner = "reader-2"};
	lbc_lease_t *r1 = must_acquire(c, unique_name(name, sizeof(name), "rw"), &shared);
	lbc_lease_t *r2 = must_acquire(c, name, &shared2);
	lbc_lease_t *w = NULL;
	lbc_lock_info_t *info;

	cr_assert_str_eq(lbc_lease_mode(r1), "shared");
	cr_assert_str_neq(lbc_lease_token(r1), lbc_lease_token(r2), "two owners, two leases");
	cr_assert_eq(lbc_acquire(c, name, &try_once, &w, NULL), LBC_TIMEOUT, "a writer waits for readers");
	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "shared");
	cr_assert_eq(info->n_holders, 2);
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_release(c, r1, NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_release(c, r2, NULL, NULL), LBC_OK);
	w = must_acquire(c, name, &try_once);
	cr_assert_eq(lbc_release(c, w, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(locks, semaphore_permits, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_acquire_opts_t sem = {.limit = 2, .wait_ms = LBC_NO_WAIT};
	lbc_lease_t *p1 = must_acquire(c, unique_name(name, sizeof(name), "sem"), &sem);
	lbc_lease_t *p2 = must_acquire(c, name, &sem);
	lbc_lease_t *p3 = NULL;
	lbc_lock_info_t *info;

	cr_assert_str_eq(lbc_lease_mode(p1), "permit");
	cr_assert_gt(lbc_lease_fence(p2), lbc_lease_fence(p1), "each permit has a fence of its own");
	cr_assert_eq(lbc_acquire(c, name, &sem, &p3, NULL), LBC_TIMEOUT);
	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "semaphore");
	cr_assert_eq(info->limit, 2);
	cr_assert_eq(info->n_holders, 2);
	cr_assert_str_eq(info->holders[0].mode, "permit");
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_release(c, p1, NULL, NULL), LBC_OK);
	p3 = must_acquire(c, name, &sem);
	cr_assert_eq(lbc_release(c, p2, NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_release(c, p3, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(locks, extend_keeps_a_watchdog_off_lease, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "extend"),
	                              &(lbc_acquire_opts_t){.ttl_ms = 400, .watchdog = LBC_OFF,
	                                                    .wait_ms = LBC_NO_WAIT});
	int64_t ttl = 0;

	for (int i = 0; i < 3; i++) {
		sleep_ms(200);
		cr_assert_eq(lbc_extend(c, l, 400, &ttl, NULL), LBC_OK);
		cr_assert_eq(ttl, 400);
	}
	cr_assert_eq(lbc_extend(c, l, 5000, &ttl, NULL), LBC_OK);
	cr_assert_eq(lbc_lease_ttl_ms(l), 5000);
	cr_assert_eq(lbc_poll(c, 0, NULL), 0);
	cr_assert_not(lbc_lease_lost(l));
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(locks, detached_lease_outlives_its_client, .timeout = 10)
{
	const char *url = NEED_BROKER();
	lbc_client_t *a = must_connect(url, NULL);
	char name[96], token[200];
	lbc_lease_t *l = must_acquire(a, unique_name(name, sizeof(name), "detach"),
	                              &(lbc_acquire_opts_t){.detach = true, .ttl_ms = 20000,
	                                                    .wait_ms = LBC_NO_WAIT});
	int64_t left = -1, ttl = 0;
	lbc_lock_info_t *info;

	cr_assert(lbc_lease_detached(l));
	snprintf(token, sizeof(token), "%s", lbc_lease_token(l));
	cr_assert_eq(lbc_close(a), 0, "a detached lease is not lost at close");
	cr_assert_not(lbc_lease_lost(l));
	lbc_error_t err;
	cr_assert_eq(lbc_release(a, l, NULL, &err), LBC_DISCONNECTED, "closed client: release it by token");

	lbc_client_t *b = must_connect(url, NULL);
	cr_assert_eq(lbc_inspect(b, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "exclusive", "still held after its session ended");
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_extend_token(b, token, 15000, &ttl, NULL), LBC_OK);
	cr_assert_eq(ttl, 15000);
	cr_assert_eq(lbc_release_token(b, token, &left, NULL), LBC_OK);
	cr_assert_eq(left, 0);
	lbc_close(b);
}

Test(locks, leases_and_stats, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "list"), &try_once);
	lbc_lease_info_t *v;
	size_t n;
	lbc_stats_t s;

	cr_assert_eq(lbc_leases(c, &v, &n, NULL), LBC_OK);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(v[0].token, lbc_lease_token(l));
	cr_assert_str_eq(v[0].lock, name);
	cr_assert_eq(v[0].fence, lbc_lease_fence(l));
	cr_assert_eq(v[0].count, 1);
	lbc_leases_free(v, n);
	cr_assert_eq(lbc_stats(c, &s, NULL), LBC_OK);
	cr_assert_geq(s.acquired_total, 1);
	cr_assert_geq(s.sessions, 1);
	cr_assert(s.redis_up);
	cr_assert_str_eq(s.redis_mode, "single");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_leases(c, &v, &n, NULL), LBC_OK);
	cr_assert_eq(n, 0);
	lbc_leases_free(v, n);
	lbc_close(c);
}

Test(locks, raw_requests, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char *answer = NULL, name[96], fields[200];
	lbc_error_t err;

	cr_assert_eq(lbc_request(c, "ping", NULL, &answer, &err), LBC_OK);
	cr_assert_not_null(strstr(answer, "\"redis\":\"up\""), "%s", answer);
	free(answer);
	snprintf(fields, sizeof(fields), "{\n  \"lock\": \"%s\"\n}", unique_name(name, sizeof(name), "raw"));
	cr_assert_eq(lbc_request(c, "inspect", fields, &answer, &err), LBC_OK, "%s", err.message);
	cr_assert_not_null(strstr(answer, "\"state\":\"free\""), "%s", answer);
	free(answer);
	cr_assert_eq(lbc_request(c, "frobnicate", "{}", &answer, &err), LBC_UNKNOWN_OP);
	cr_assert_not_null(strstr(answer, "unknown_op"), "the error answer is handed out too");
	free(answer);
	lbc_close(c);
}

/* A leader's value (issue 27): acquire's value shows in inspect; a plain
 * holder has none (NULL); a value with a shared lock is the broker's
 * invalid_argument. lock_delay_ms goes out too (a bad one is refused). */
Test(locks, a_value_shows_in_inspect, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96], plain[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "leader"),
	                              &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT, .value = "10.0.0.9:80",
	                                                    .lock_delay_ms = 100});
	lbc_lease_t *p = must_acquire(c, unique_name(plain, sizeof(plain), "plain"), &try_once);
	lbc_lock_info_t *info;
	lbc_lease_t *x = NULL;
	lbc_error_t err;

	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->holders[0].value, "10.0.0.9:80");
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_inspect(c, plain, &info, NULL), LBC_OK);
	cr_assert_null(info->holders[0].value);
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_acquire(c, "lbc-shared-value",
	                         &(lbc_acquire_opts_t){.mode = LBC_SHARED, .value = "v", .wait_ms = LBC_NO_WAIT},
	                         &x, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_acquire(c, "lbc-bad-delay",
	                         &(lbc_acquire_opts_t){.lock_delay_ms = 600001, .wait_ms = LBC_NO_WAIT}, &x,
	                         &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_release(c, p, NULL, NULL), LBC_OK);
	lbc_close(c);
}

/* The default client label has the shape of every client's (issue 27):
 * PROGRAM[PID]@HOST lockbroker-c/VERSION. */
Test(locks, the_default_label_has_the_common_shape, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "label"), &try_once);
	lbc_lock_info_t *info;
	char want[32];

	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	snprintf(want, sizeof(want), "[%ld]@", (long)getpid());
	cr_assert(strstr(info->holders[0].client, want) != NULL, "%s", info->holders[0].client);
	cr_assert(strstr(info->holders[0].client, " lockbroker-c/") != NULL, "%s", info->holders[0].client);
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	lbc_close(c);
}

typedef struct stranger_job {
	lbc_client_t *c;
	const char *name;
	lbc_status st;
} stranger_job_t;

static void *stranger_main(void *arg)
{
	stranger_job_t *j = arg;
	lbc_lease_t *l = NULL;

	j->st = lbc_acquire(j->c, j->name, &(lbc_acquire_opts_t){.wait_ms = 300}, &l, NULL);
	if (j->st == LBC_OK)
		lbc_release(j->c, l, NULL, NULL);
	return NULL;
}

/* The calling thread is the default owner (the story every client
 * follows): the same thread re-enters a lock it holds (same token, count
 * 2, each handle one level) instead of waiting for itself; another thread
 * on the same client is a stranger and waits. */
Test(locks, the_calling_thread_is_the_default_owner, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lock_info_t *info;
	pthread_t t;
	int64_t left = -1;

	unique_name(name, sizeof(name), "thread-owner");
	lbc_lease_t *one = must_acquire(c, name, &try_once);
	lbc_lease_t *two = must_acquire(c, name, &try_once);
	cr_assert_str_eq(lbc_lease_token(one), lbc_lease_token(two));
	cr_assert_eq(lbc_lease_count(two), 2);
	cr_assert_eq(lbc_inspect(c, name, &info, NULL), LBC_OK);
	cr_assert_eq(info->n_holders, 1);
	cr_assert(strncmp(info->holders[0].owner, "lbc#t", 5) == 0, "owner %s", info->holders[0].owner);
	lbc_lock_info_free(info);

	stranger_job_t j = {.c = c, .name = name};
	pthread_create(&t, NULL, stranger_main, &j);
	pthread_join(t, NULL);
	cr_assert_eq(j.st, LBC_TIMEOUT, "another thread re-entered: %s", lbc_status_code(j.st));

	cr_assert_eq(lbc_release(c, two, &left, NULL), LBC_OK);
	cr_assert_eq(left, 1);
	cr_assert_eq(lbc_release(c, one, &left, NULL), LBC_OK);
	cr_assert_eq(left, 0);
	lbc_close(c);
}
