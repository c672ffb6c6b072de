/*
 * test_threads.c - one client shared by threads: two threads taking the
 * same lock exclude each other (each thread is its own owner, so they never
 * re-enter each other's lease), a release from one thread is not held up
 * by another thread's waiting acquire, and many threads pipelining on one
 * connection each get their own answers.
 */
#include "support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct shared {
	lbc_client_t *c;
	const char *name;
	atomic_int inside;
	atomic_int overlaps;
	atomic_int rounds;
	atomic_int errors;
	int64_t last_fence;
	pthread_mutex_t mu;
} shared_t;

static void *exclusive_worker(void *arg)
{
	shared_t *s = arg;

	for (int i = 0; i < 40; i++) {
		lbc_lease_t *l;
		lbc_error_t err;
		if (lbc_acquire(s->c, s->name, &(lbc_acquire_opts_t){.wait_ms = 5000}, &l, &err) != LBC_OK) {
			atomic_fetch_add(&s->errors, 1);
			continue;
		}
		if (atomic_fetch_add(&s->inside, 1) != 0)
			atomic_fetch_add(&s->overlaps, 1);
		pthread_mutex_lock(&s->mu);
		if (lbc_lease_fence(l) <= s->last_fence)
			atomic_fetch_add(&s->overlaps, 1);
		s->last_fence = lbc_lease_fence(l);
		pthread_mutex_unlock(&s->mu);
		sleep_ms(1);
		atomic_fetch_sub(&s->inside, 1);
		if (lbc_release(s->c, l, NULL, &err) != LBC_OK)
			atomic_fetch_add(&s->errors, 1);
		atomic_fetch_add(&s->rounds, 1);
	}
	return NULL;
}

Test(threads, two_threads_one_client_exclude_each_other, .timeout = 20)
{
	char name[96];
	shared_t s = {.c = must_connect(NEED_BROKER(), NULL), .name = unique_name(name, sizeof(name), "thr")};
	pthread_t t[2];

	pthread_mutex_init(&s.mu, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, exclusive_worker, &s);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&s.errors), 0);
	cr_assert_eq(atomic_load(&s.overlaps), 0, "both threads held the lock at once");
	cr_assert_eq(atomic_load(&s.rounds), 80);
	pthread_mutex_destroy(&s.mu);
	lbc_close(s.c);
}

typedef struct waiter {
	lbc_client_t *c;
	const char *name;
	lbc_status st;
	lbc_lease_t *lease;
	int64_t t;
} waiter_t;

static void *waiting_acquire(void *arg)
{
	waiter_t *w = arg;
	w->st = lbc_acquire(w->c, w->name, NULL, &w->lease, NULL); /* waits until granted */
	w->t = now_ms();
	return NULL;
}

Test(threads, a_waiting_acquire_does_not_block_a_release, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *held = must_acquire(c, unique_name(name, sizeof(name), "noblock"),
	                                 &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	waiter_t w = {.c = c, .name = name};
	pthread_t t;
	int64_t t0;

	pthread_create(&t, NULL, waiting_acquire, &w);
	sleep_ms(200); /* the other thread now waits, reading the connection */
	t0 = now_ms();
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
	cr_assert_lt(now_ms() - t0, 1000, "a ping answered while another thread waits");
	cr_assert_eq(lbc_release(c, held, NULL, NULL), LBC_OK);
	pthread_join(t, NULL);
	cr_assert_eq(w.st, LBC_OK);
	cr_assert_eq(lbc_release(c, w.lease, NULL, NULL), LBC_OK);
	lbc_close(c);
}

typedef struct hammer {
	lbc_client_t *c;
	int idx;
	int ok;
} hammer_t;

static void *hammer_thread(void *arg)
{
	hammer_t *h = arg;
	char name[96];

	snprintf(name, sizeof(name), "c-hammer-%d-%d", (int)getpid(), h->idx);
	for (int i = 0; i < 100; i++) {
		lbc_lease_t *l;
		if (lbc_acquire(h->c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l, NULL) != LBC_OK)
			continue;
		if (strcmp(lbc_lease_name(l), name) == 0 && lbc_release(h->c, l, NULL, NULL) == LBC_OK)
			h->ok++;
	}
	return NULL;
}

Test(threads, eight_threads_pipeline_on_one_connection, .timeout = 30)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	hammer_t h[8];
	pthread_t t[8];

	for (int i = 0; i < 8; i++) {
		h[i] = (hammer_t){.c = c, .idx = i};
		pthread_create(&t[i], NULL, hammer_thread, &h[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(h[i].ok, 100, "thread %d: %d of 100", i, h[i].ok);
	}
	lbc_close(c);
}
