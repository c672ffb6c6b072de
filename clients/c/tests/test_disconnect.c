/*
 * test_disconnect.c - the broker dies with a lease held: lbc_poll reports
 * it lost ("disconnected"), release says so, calls fail while nothing
 * listens, and once a broker listens again the next call opens a new
 * session (new acquires work, the old token is never sent). An acquire
 * waiting when the broker is killed (LBC_DISCONNECTED, the session's bound
 * leases already lost when it returns) or stopped (shutting_down, then
 * the leases lost when the session closes), with several bound leases and
 * a detached one that survives and is released through the next session.
 * A frozen broker (SIGSTOP) found by the keepalive.
 */
#include "support.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(disconnect, broker_dies_then_comes_back, .timeout = 30, .fini = brokers_stop_all)
{
	broker_t b;
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec, .connect_timeout_ms = 500};
	lbc_client_t *c;
	lbc_lease_t *l, *l2 = NULL;
	lbc_server_info_t before, after;
	char name[96], other[96], token[200];
	lbc_error_t err;

	NEED_BROKER();
	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	c = must_connect(b.url, &o);
	cr_assert_eq(lbc_server_info(c, &before, NULL), LBC_OK);
	l = must_acquire(c, unique_name(name, sizeof(name), "disc"),
	                 &(lbc_acquire_opts_t){.ttl_ms = 1000, .wait_ms = LBC_NO_WAIT});
	snprintf(token, sizeof(token), "%s", lbc_lease_token(l));

	broker_kill(&b, SIGKILL);
	cr_assert_eq(lbc_poll(c, 3000, NULL), 1, "the drop is a loss");
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	cr_assert_eq(lbc_fd(c), -1, "no session");
	cr_assert_geq(recorder_get(&rec).disconnected, 1);
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_DISCONNECTED);

	/* nothing listens: a call fails within connect_timeout_ms */
	int64_t t0 = now_ms();
	cr_assert_eq(lbc_acquire(c, unique_name(other, sizeof(other), "disc"),
	                         &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l2, &err),
	             LBC_DISCONNECTED);
	cr_assert_lt(now_ms() - t0, 2000);
	cr_assert_null(l2);

	/* the broker is back on the same port: the next call reconnects */
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not restart");
	l2 = must_acquire(c, other, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	cr_assert_eq(lbc_server_info(c, &after, NULL), LBC_OK);
	cr_assert_str_neq(before.broker, after.broker, "a new session, on the restarted broker");
	cr_assert_eq(lbc_release(c, l2, NULL, NULL), LBC_OK);
	/* the first lock ends by its TTL (its broker died) and is granted again */
	lbc_lease_t *l3 = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 5000});
	cr_assert_str_neq(lbc_lease_token(l3), token);
	cr_assert_eq(lbc_release(c, l3, NULL, NULL), LBC_OK);
	lbc_close(c);
	broker_free(&b);
}

Test(disconnect, the_broker_closes_the_connection, .timeout = 20, .fini = brokers_stop_all)
{
	/* a graceful stop: shutdown event, then the session ends; every lease
	 * of it is lost, and a waiting acquire answers shutting_down */
	static const char *const extra[] = {"--shutdown-grace-ms", "300", NULL};
	broker_t b;
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec, .connect_timeout_ms = 300};
	lbc_client_t *c;
	char name[96];
	lbc_lease_t *l;

	NEED_BROKER();
	broker_init(&b, 0, NULL, extra);
	cr_assert_eq(broker_start(&b, true), 0);
	c = must_connect(b.url, &o);
	l = must_acquire(c, unique_name(name, sizeof(name), "stop"), &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	broker_kill(&b, SIGTERM);
	cr_assert_eq(lbc_poll(c, 5000, NULL), 1);
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	recorder_t r = recorder_get(&rec);
	cr_assert_eq(r.shutdown, 1);
	cr_assert_eq(r.grace_ms, 300);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	cr_assert_eq(broker_wait(&b, 5000), 0, "the broker exits");
	lbc_close(c);
	broker_free(&b);
}

/* ---- an acquire waiting while the connection drops ------------------------------ */

/* What the waiting thread saw the moment its lbc_acquire returned. */
typedef struct {
	lbc_client_t *c;
	const char *name;
	lbc_lease_t *bound[3];
	lbc_lease_t *detached;
	lbc_status st;
	lbc_error_t err;
	lbc_lease_t *got;
	lbc_lost_reason bound_seen[3]; /* each bound lease's mark at that moment */
	bool detached_lost_seen;
	_Atomic bool done;
} waiter_t;

static void *wait_for_lock(void *arg)
{
	waiter_t *w = arg;

	w->st = lbc_acquire(w->c, w->name, NULL, &w->got, &w->err); /* waits for ever */
	for (int i = 0; i < 3; i++)
		w->bound_seen[i] = lbc_lease_lost_reason(w->bound[i]);
	w->detached_lost_seen = lbc_lease_lost(w->detached);
	atomic_store(&w->done, true);
	return NULL;
}

/* Waits (generously) for the waiter's call to return; false if it did not. */
static bool waiter_returns(waiter_t *w, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	while (!atomic_load(&w->done) && now_ms() < deadline)
		sleep_ms(10);
	return atomic_load(&w->done);
}

/* A private broker whose client holds three bound leases (exclusive,
 * shared, a permit: different locks) and a detached one, while a fourth
 * acquire waits for a lock held through the shared broker (same Redis). */
typedef struct {
	broker_t b;
	recorder_t rec;
	lbc_client_t *c, *holder;
	lbc_lease_t *held; /* the holder's */
	char busy[96], names[3][96], dname[96], dtoken[200];
	waiter_t w;
	pthread_t t;
} drop_fixture_t;

static void drop_setup(drop_fixture_t *f, const char *const *extra, int64_t bound_ttl_ms)
{
	lbc_options_t o = {.on_event = record_event, .event_arg = &f->rec, .connect_timeout_ms = 500};

	memset(f, 0, sizeof(*f));
	broker_init(&f->b, 0, NULL, extra);
	cr_assert_eq(broker_start(&f->b, true), 0, "private broker did not start");
	f->holder = must_connect(NEED_BROKER(), NULL);
	f->held = must_acquire(f->holder, unique_name(f->busy, sizeof(f->busy), "busy"),
	                       &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	f->c = must_connect(f->b.url, &o);
	f->w.bound[0] = must_acquire(f->c, unique_name(f->names[0], sizeof(f->names[0]), "b-excl"),
	                             &(lbc_acquire_opts_t){.ttl_ms = bound_ttl_ms, .wait_ms = LBC_NO_WAIT});
	f->w.bound[1] = must_acquire(f->c, unique_name(f->names[1], sizeof(f->names[1]), "b-shared"),
	                             &(lbc_acquire_opts_t){.mode = LBC_SHARED, .ttl_ms = bound_ttl_ms,
	                                                   .wait_ms = LBC_NO_WAIT});
	f->w.bound[2] = must_acquire(f->c, unique_name(f->names[2], sizeof(f->names[2]), "b-permit"),
	                             &(lbc_acquire_opts_t){.limit = 3, .ttl_ms = bound_ttl_ms,
	                                                   .wait_ms = LBC_NO_WAIT});
	/* watchdog off (detached): its TTL must outlive the broker's restart */
	f->w.detached = must_acquire(f->c, unique_name(f->dname, sizeof(f->dname), "detached"),
	                             &(lbc_acquire_opts_t){.detach = true, .ttl_ms = 60000,
	                                                   .wait_ms = LBC_NO_WAIT});
	snprintf(f->dtoken, sizeof(f->dtoken), "%s", lbc_lease_token(f->w.detached));
	f->w.c = f->c;
	f->w.name = f->busy;
	pthread_create(&f->t, NULL, wait_for_lock, &f->w);
	cr_assert_eq(wait_for_waiters(f->holder, f->busy, 1, 5000), 1, "the acquire never waited at the broker");
}

/* After the drop: the bound handles are lost ("disconnected"), the
 * detached one is not, lbc_poll reports the three once. */
static void drop_check_marks(drop_fixture_t *f)
{
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(lbc_lease_lost_reason(f->w.bound[i]), LBC_LOST_DISCONNECTED, "bound lease %d: %s", i,
		             lbc_lost_reason_name(lbc_lease_lost_reason(f->w.bound[i])));
	}
	cr_assert_not(lbc_lease_lost(f->w.detached), "a detached lease is not bound to the session");
	cr_assert_eq(lbc_lease_check(f->w.detached, NULL), LBC_OK);
	cr_assert_eq(lbc_poll(f->c, 0, NULL), 3, "the three bound handles, once");
	cr_assert_eq(lbc_poll(f->c, 0, NULL), 0);
	cr_assert_eq(lbc_fd(f->c), -1, "no session");
	cr_assert_geq(recorder_get(&f->rec).disconnected, 1);
	for (int i = 0; i < 3; i++) {
		lbc_error_t err;
		cr_assert_eq(lbc_release(f->c, f->w.bound[i], NULL, &err), LBC_LOST);
		cr_assert_eq(err.lost_reason, LBC_LOST_DISCONNECTED);
		cr_assert_not(err.from_broker, "a lost token is not sent again");
	}
}

/* The broker is back (same port): the detached lease is released through
 * the next session, and the lock is free. */
static void drop_release_detached(drop_fixture_t *f)
{
	lbc_lock_info_t *info = NULL;
	lbc_server_info_t si;
	lbc_error_t err;
	int64_t left = -1;

	cr_assert_eq(broker_start(&f->b, true), 0, "private broker did not restart");
	cr_assert_eq(lbc_release(f->c, f->w.detached, &left, &err), LBC_OK, "%s: %s", err.code, err.message);
	cr_assert_eq(left, 0);
	cr_assert_eq(lbc_server_info(f->c, &si, NULL), LBC_OK, "the release opened a new session");
	cr_assert_eq(lbc_inspect(f->holder, f->dname, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "free", "the detached lease was released");
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_release_token(f->holder, f->dtoken, NULL, &err), LBC_NOT_HELD, "released once: %s",
	             err.code);
}

static void drop_teardown(drop_fixture_t *f)
{
	cr_assert_eq(lbc_release(f->holder, f->held, NULL, NULL), LBC_OK);
	lbc_close(f->c);
	lbc_close(f->holder);
	broker_free(&f->b);
}

Test(disconnect, killed_while_an_acquire_waits, .timeout = 40, .fini = brokers_stop_all)
{
	drop_fixture_t *f = calloc(1, sizeof(*f));

	NEED_BROKER();
	drop_setup(f, NULL, 1000);
	broker_kill(&f->b, SIGKILL);
	/* the waiting call ends (generous bound: it would otherwise wait for ever) */
	cr_assert(waiter_returns(&f->w, 10000), "the waiting acquire did not return after the broker died");
	pthread_join(f->t, NULL);
	cr_assert_eq(f->w.st, LBC_DISCONNECTED, "got %s: %s", lbc_status_code(f->w.st), f->w.err.message);
	cr_assert_eq(f->w.err.status, LBC_DISCONNECTED);
	cr_assert_not(f->w.err.from_broker);
	cr_assert_null(f->w.got);
	/* the documented order: the leases bound to the session were already
	 * lost when the pending request failed */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(f->w.bound_seen[i], LBC_LOST_DISCONNECTED,
		             "bound lease %d was not lost yet when the acquire failed (%s)", i,
		             lbc_lost_reason_name(f->w.bound_seen[i]));
	cr_assert_not(f->w.detached_lost_seen);
	drop_check_marks(f);
	drop_release_detached(f);
	drop_teardown(f);
	free(f);
}

Test(disconnect, graceful_stop_while_an_acquire_waits, .timeout = 40, .fini = brokers_stop_all)
{
	/* SIGTERM: shutdown event; the pending acquire answers shutting_down
	 * (the broker's, the session still up); after the grace the broker
	 * releases the bound leases and closes the session: they are lost
	 * ("disconnected"), the detached one lives on */
	static const char *const extra[] = {"--shutdown-grace-ms", "1000", NULL};
	drop_fixture_t *f = calloc(1, sizeof(*f));
	lbc_lock_info_t *info = NULL;

	NEED_BROKER();
	drop_setup(f, extra, 30000);
	broker_kill(&f->b, SIGTERM);
	cr_assert(waiter_returns(&f->w, 10000), "the waiting acquire did not return after SIGTERM");
	pthread_join(f->t, NULL);
	cr_assert_eq(f->w.st, LBC_SHUTTING_DOWN, "got %s: %s", lbc_status_code(f->w.st), f->w.err.message);
	cr_assert(f->w.err.from_broker);
	cr_assert_null(f->w.got);
	/* an answer, not a drop: during the grace the broker still holds them
	 * (nobody read the connection between the answer and this look) */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(f->w.bound_seen[i], LBC_LOST_NONE, "bound lease %d: %s", i,
		             lbc_lost_reason_name(f->w.bound_seen[i]));
	cr_assert_not(f->w.detached_lost_seen);
	cr_assert_eq(wait_for_waiters(f->holder, f->busy, 0, 5000), 0, "the waiter was withdrawn");
	/* the connection ends after the grace */
	int64_t deadline = now_ms() + 15000;
	int lost = 0;
	while (lost < 3 && now_ms() < deadline)
		lost += lbc_poll(f->c, 200, NULL);
	cr_assert_eq(lost, 3, "the three bound leases are lost when the broker closes the session");
	cr_assert_eq(recorder_get(&f->rec).shutdown, 1);
	cr_assert_eq(recorder_get(&f->rec).grace_ms, 1000);
	cr_assert_eq(broker_wait(&f->b, 10000), 0, "the broker exits");
	for (int i = 0; i < 3; i++)
		cr_assert_eq(lbc_lease_lost_reason(f->w.bound[i]), LBC_LOST_DISCONNECTED);
	cr_assert_not(lbc_lease_lost(f->w.detached));
	cr_assert_eq(lbc_fd(f->c), -1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(lbc_release(f->c, f->w.bound[i], NULL, NULL), LBC_LOST);
	/* a graceful stop released them (their TTL is 30 s: not expired) */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(lbc_inspect(f->holder, f->names[i], &info, NULL), LBC_OK);
		cr_assert_eq(info->n_holders, 0, "the broker released %s at its stop", f->names[i]);
		lbc_lock_info_free(info);
	}
	drop_release_detached(f);
	drop_teardown(f);
	free(f);
}

/* ---- keepalive and a frozen broker ------------------------------------------------ */

static pid_t frozen_pid;

/* .fini: a broker stopped with SIGSTOP is continued, whatever happened */
static void continue_then_stop_all(void)
{
	if (frozen_pid > 0)
		kill(frozen_pid, SIGCONT);
	frozen_pid = 0;
	brokers_stop_all();
}

Test(disconnect, keepalive_catches_a_frozen_broker, .timeout = 40, .fini = continue_then_stop_all)
{
	broker_t b;
	recorder_t rec = {0};
	/* the client pings every keepalive_ms / 3 and drops a connection whose
	 * ping is not answered within keepalive_ms */
	lbc_options_t o = {.keepalive_ms = 1000, .connect_timeout_ms = 500, .on_event = record_event,
	                   .event_arg = &rec};
	lbc_client_t *c;
	lbc_lease_t *l;
	lbc_server_info_t before, after;
	char name[96];
	lbc_error_t err;

	NEED_BROKER();
	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	c = must_connect(b.url, &o);
	cr_assert_eq(lbc_server_info(c, &before, NULL), LBC_OK);
	l = must_acquire(c, unique_name(name, sizeof(name), "frozen"),
	                 &(lbc_acquire_opts_t){.ttl_ms = 2000, .wait_ms = LBC_NO_WAIT});

	frozen_pid = b.pid;
	cr_assert_eq(kill(b.pid, SIGSTOP), 0);
	/* nothing but the keepalive can notice: the socket stays open */
	int64_t deadline = now_ms() + 15000;
	int lost = 0;
	while (lost == 0 && now_ms() < deadline)
		lost = lbc_poll(c, 500, NULL);
	cr_assert_eq(lost, 1, "the frozen broker's lease was not reported lost");
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	cr_assert_eq(lbc_fd(c), -1);
	recorder_t r = recorder_get(&rec);
	cr_assert_geq(r.disconnected, 1);
	cr_assert_not_null(strstr(r.last_disconnected_reason, "no answer"), "dropped for: %s",
	                   r.last_disconnected_reason);
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_DISCONNECTED);

	/* still frozen: the next call tries to connect (the kernel accepts,
	 * hello is never answered) and fails within connect_timeout_ms */
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_DISCONNECTED);
	cr_assert_not(err.from_broker);

	cr_assert_eq(kill(b.pid, SIGCONT), 0);
	frozen_pid = 0;
	/* thawed: a later call opens a new session (retried: the broker first
	 * works through what queued up while it was stopped) */
	lbc_status st = LBC_DISCONNECTED;
	deadline = now_ms() + 15000;
	while (st != LBC_OK && now_ms() < deadline)
		st = lbc_ping(c, NULL, &err);
	cr_assert_eq(st, LBC_OK, "%s: %s", err.code, err.message);
	cr_assert_eq(lbc_server_info(c, &after, NULL), LBC_OK);
	cr_assert_str_neq(before.session, after.session, "a new session");
	l = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 10000});
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	lbc_close(c);
	broker_free(&b);
}
