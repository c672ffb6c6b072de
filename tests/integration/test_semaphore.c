/*
 * test_semaphore.c - semaphores (issue 4): acquire with limit N. Up to N
 * holders at once, each with its own lease, TTL, watchdog and fence; the
 * next ones wait in the fair queue (fair:false barges when a permit is
 * free); an expired permit or one whose session ends goes to the next
 * waiter at once; the name's kind (lock or semaphore, and the limit) is
 * fixed while it has holders or waiters (conflict); permits are not
 * reentrant; inspect; and a safety check under a contended workload (never
 * more than N holders at once).
 *
 * The multi-threaded workload's threads and their rounds (acquire, release,
 * walk-aways, abrupt disconnects) are those of workload.h, as in
 * test_mutex.c. Worker threads never call cr_assert: they record what went
 * wrong and the main thread asserts.
 */
#include "tests/integration/workload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- acquire requests ------------------------------------------------------------ */

/* LB_AO(...) overrides its own defaults. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* Sends an acquire and waits for its answer. */
static json_t *acq_call(lb_client *c, const char *lock, lb_aopt o)
{
	return lb_acq_call(c, lock, o, LB_CALL_TIMEOUT_MS);
}

/* A semaphore acquire that must be granted at once (wait_ms 0). */
static json_t *permit_now(lb_client *c, const char *lock, lb_aopt o)
{
	o.wait_ms = 0;
	json_t *r = acq_call(c, lock, o);
	cr_assert(lb_is_ok(r), "acquire %s: %s", lock, lb_dump(r));
	cr_assert(lb_is_lease_token(lb_str(r, "lease")), "%s", lb_dump(r));
	if (o.limit > 0) {
		cr_assert_str_eq(lb_str(r, "mode"), "permit", "%s", lb_dump(r));
		cr_assert_eq(lb_int(r, "count"), 1, "%s", lb_dump(r));
	}
	return r;
}

/* Waits for the answer to id, asserts it is a permit with count 1 granted
 * within max_ms of t0; returns it. */
static json_t *expect_permit(lb_client *c, json_t *id, int64_t t0, int max_ms, const char *what)
{
	json_t *g = lb_wait_response(c, id, max_ms + 2000);
	int64_t dt = lb_now_ms() - t0;
	cr_assert(lb_is_ok(g), "%s: %s", what, lb_dump(g));
	cr_assert_str_eq(lb_str(g, "mode"), "permit", "%s: %s", what, lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1, "%s: %s", what, lb_dump(g));
	cr_assert_leq(dt, max_ms, "%s: granted %lld ms after the trigger, want <= %d ms", what,
	              (long long)dt, max_ms);
	return g;
}

/* Asserts that an acquire is answered conflict at once. */
static void expect_conflict(lb_client *c, const char *lock, lb_aopt o, const char *what)
{
	int64_t t0 = lb_now_ms();
	json_t *r = acq_call(c, lock, o);
	cr_assert(lb_is_err(r, "conflict"), "%s: want conflict, got %s", what, lb_dump(r));
	cr_assert_lt(lb_now_ms() - t0, 1000, "%s: conflict must answer at once", what);
}

/* Asserts inspect says semaphore with this limit, holders (all "permit")
 * and waiters. */
static json_t *expect_sem(lb_client *c, const char *lock, json_int_t limit, size_t holders,
                          json_int_t waiters)
{
	json_t *in = lb_inspect(c, lock);
	cr_assert_str_eq(lb_str(in, "state"), "semaphore", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "limit"), limit, "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), holders, "want %zu holders: %s", holders, lb_dump(in));
	for (size_t k = 0; k < holders; k++)
		cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), k), "mode"), "permit",
		                 "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), waiters, "want %lld waiters: %s", (long long)waiters,
	             lb_dump(in));
	return in;
}

/* ---- 1. admission, fences, inspect, the fair queue ---------------------------------------- */

LB_TEST(semaphore, up_to_limit_holders_then_fifo_queue, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h[3] = {lb_connect(a, LB_TCP), lb_connect(b, LB_TCP), lb_connect(a, LB_UNIX)};
	lb_client *w[3] = {lb_connect(a, LB_TCP), lb_connect(b, LB_UNIX), lb_connect(a, LB_UNIX)};
	lb_client *o = lb_connect(b, LB_TCP);
	static const int ttl[3] = {5000, 10000, 300}; /* the last renewed by its watchdog */
	json_t *g[3];

	lb_expect_err(acq_call(o, "sem", LB_AO(.limit = 3, .mode = "shared", .wait_ms = 0)),
	              "invalid_argument");
	lb_expect_err(acq_call(o, "sem", LB_AO(.limit = 3, .mode = "exclusive", .wait_ms = 0)),
	              "invalid_argument");
	lb_expect_free(o, "sem");

	json_int_t last_fence = 0;
	for (int k = 0; k < 3; k++) {
		g[k] = permit_now(h[k], "sem", LB_AO(.limit = 3, .ttl_ms = ttl[k], .fair = k != 1));
		cr_assert_eq(lb_int(g[k], "ttl_ms"), ttl[k], "%s", lb_dump(g[k]));
		cr_assert_str_eq(lb_str(g[k], "lock"), "sem");
		cr_assert_gt(lb_int(g[k], "fence"), last_fence, "fences strictly increase");
		last_fence = lb_int(g[k], "fence");
		for (int j = 0; j < k; j++)
			cr_assert_str_neq(lb_str(g[k], "lease"), lb_str(g[j], "lease"));
	}
	json_t *in = expect_sem(o, "sem", 3, 3, 0);
	cr_assert_eq(lb_int(in, "fence"), last_fence, "%s", lb_dump(in));
	int seen = 0;
	for (size_t k = 0; k < 3; k++) {
		json_int_t t = lb_int(json_array_get(lb_get(in, "holders"), k), "ttl_ms");
		cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), k), "count"), 1);
		if (t > 0 && t <= 300)
			seen |= 1;
		else if (t > 3000 && t <= 5000)
			seen |= 2;
		else if (t > 8000 && t <= 10000)
			seen |= 4;
	}
	cr_assert_eq(seen, 7, "every holder has its own TTL: %s", lb_dump(in));

	/* the 4th does not get in, fair or not */
	lb_expect_err(acq_call(o, "sem", LB_AO(.limit = 3, .wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(o, "sem", LB_AO(.limit = 3, .wait_ms = 0, .fair = 0)), "timeout");
	lb_expect_err(acq_call(o, "sem", LB_AO(.limit = 3, .wait_ms = 150)), "timeout");

	/* three waiters in arrival order, on both brokers */
	json_t *iw[3];
	for (int k = 0; k < 3; k++) {
		iw[k] = lb_acq_send(w[k], "sem", LB_AO(.limit = 3));
		lb_sleep_ms(30);
	}
	lb_wait_waiters(o, "sem", 3, 2000);
	/* the 300 ms permit is kept by its watchdog: nobody gets in */
	lb_expect_silent(w[0], 700, "first waiter while all permits are held");
	lb_expect_silent(h[2], 0, "the watchdog keeps the short permit");
	expect_sem(o, "sem", 3, 3, 3);

	/* one permit back: the first waiter only */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h[0], lb_str(g[0], "lease")), 0);
	json_t *gw0 = expect_permit(w[0], iw[0], t0, 500, "first waiter");
	cr_assert_gt(lb_int(gw0, "fence"), last_fence);
	lb_expect_silent(w[1], 200, "second waiter after one permit came back");
	lb_expect_silent(w[2], 0, "third waiter after one permit came back");
	/* two permits back: the other two, in order */
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h[1], lb_str(g[1], "lease")), 0);
	json_t *gw1 = expect_permit(w[1], iw[1], t0, 500, "second waiter");
	lb_expect_silent(w[2], 200, "third waiter after the second permit");
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h[2], lb_str(g[2], "lease")), 0);
	json_t *gw2 = expect_permit(w[2], iw[2], t0, 500, "third waiter");
	cr_assert_gt(lb_int(gw1, "fence"), lb_int(gw0, "fence"));
	cr_assert_gt(lb_int(gw2, "fence"), lb_int(gw1, "fence"));
	expect_sem(o, "sem", 3, 3, 0);
	cr_assert_eq(lb_release(w[0], lb_str(gw0, "lease")), 0);
	cr_assert_eq(lb_release(w[1], lb_str(gw1, "lease")), 0);
	expect_sem(o, "sem", 3, 1, 0);
	cr_assert_eq(lb_release(w[2], lb_str(gw2, "lease")), 0);
	lb_expect_no_queue(r, o, "sem", 2000, true);
	lb_end();
}

/* ---- 2. not reentrant ------------------------------------------------------------------ */

LB_TEST(semaphore, permits_are_not_reentrant, 20)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(a, LB_TCP);
	lb_client *o = lb_connect(a, LB_UNIX);
	json_t *g[3];

	/* the same session and owner: a new permit and a new lease each time */
	for (int k = 0; k < 3; k++) {
		g[k] = permit_now(c, "nr", LB_AO(.limit = 3, .owner = "me"));
		for (int j = 0; j < k; j++) {
			cr_assert_str_neq(lb_str(g[k], "lease"), lb_str(g[j], "lease"));
			cr_assert_gt(lb_int(g[k], "fence"), lb_int(g[j], "fence"));
		}
	}
	json_t *in = expect_sem(o, "nr", 3, 3, 0);
	for (size_t k = 0; k < 3; k++) {
		json_t *hd = json_array_get(lb_get(in, "holders"), k);
		cr_assert_eq(lb_int(hd, "count"), 1, "%s", lb_dump(in));
		cr_assert_str_eq(lb_str(hd, "owner"), "me", "%s", lb_dump(in));
	}
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");
	lb_expect_ok(ls);
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 3, "%s", lb_dump(ls));
	for (size_t k = 0; k < 3; k++)
		cr_assert_str_eq(lb_str(json_array_get(lb_get(ls, "leases"), k), "mode"), "permit",
		                 "%s", lb_dump(ls));
	/* the 4th acquire of the same owner finds no permit: it is not reentrant */
	lb_expect_err(acq_call(c, "nr", LB_AO(.limit = 3, .owner = "me", .wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(c, "nr", LB_AO(.limit = 3, .owner = "me", .wait_ms = 100)), "timeout");
	/* each release frees its own permit */
	cr_assert_eq(lb_release(c, lb_str(g[1], "lease")), 0);
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g[1], "lease")),
	              "not_held");
	expect_sem(o, "nr", 3, 2, 0);
	json_t *g4 = permit_now(c, "nr", LB_AO(.limit = 3, .owner = "me"));
	cr_assert_str_neq(lb_str(g4, "lease"), lb_str(g[0], "lease"));
	cr_assert_str_neq(lb_str(g4, "lease"), lb_str(g[2], "lease"));
	cr_assert_eq(lb_release(c, lb_str(g[0], "lease")), 0);
	cr_assert_eq(lb_release(c, lb_str(g[2], "lease")), 0);
	cr_assert_eq(lb_release(c, lb_str(g4, "lease")), 0);
	lb_expect_no_queue(r, o, "nr", 2000, true);
	lb_end();
}

/* ---- 3. expiry and session end give the permit back ------------------------------------- */

LB_TEST(semaphore, expired_permit_goes_to_the_next_waiter, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *p1 = lb_connect(a, LB_TCP);
	lb_client *p2 = lb_connect(b, LB_TCP);
	lb_client *w1 = lb_connect(b, LB_UNIX);
	lb_client *w2 = lb_connect(a, LB_UNIX);
	lb_client *o = lb_connect(a, LB_TCP);

	int64_t t1 = lb_now_ms();
	json_t *g1 = permit_now(p1, "exp", LB_AO(.limit = 2, .ttl_ms = 400, .watchdog = 0));
	json_t *g2 = permit_now(p2, "exp", LB_AO(.limit = 2, .ttl_ms = 300));
	json_t *i1 = lb_acq_send(w1, "exp", LB_AO(.limit = 2));
	lb_sleep_ms(30);
	json_t *i2 = lb_acq_send(w2, "exp", LB_AO(.limit = 2, .ttl_ms = 300, .watchdog = 0));
	lb_wait_waiters(o, "exp", 2, 1000);

	/* P1 expires (400 ms): W1 within 1.5 s of the expiry; P2 stays */
	json_t *gw1 = expect_permit(w1, i1, t1, 400 + 1500, "W1 after P1's expiry");
	lb_expect_lost(p1, lb_str(g1, "lease"), t1, 400 + 1500, "P1 (watchdog false, ttl 400)");
	lb_expect_err(lb_call(p1, "{s:s, s:s}", "op", "release", "lease", lb_str(g1, "lease")),
	              "not_held");
	lb_expect_silent(w2, 300, "W2 while P2 and W1 hold");
	lb_expect_silent(p2, 0, "P2 is renewed by its watchdog");
	expect_sem(o, "exp", 2, 2, 1);

	/* W1 leaves; W2 gets a short permit without watchdog, which expires
	 * while P2 stays */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(w1, lb_str(gw1, "lease")), 0);
	json_t *gw2 = expect_permit(w2, i2, t0, 500, "W2 after W1's release");
	int64_t t2 = lb_now_ms();
	json_t *i3 = lb_acq_send(w1, "exp", LB_AO(.limit = 2));
	lb_sleep_ms(20);
	json_t *i4 = lb_acq_send(p1, "exp", LB_AO(.limit = 2));
	lb_wait_waiters(o, "exp", 2, 1000);
	json_t *gw3 = expect_permit(w1, i3, t2, 300 + 1500, "W3 after W2's expiry");
	lb_expect_lost(w2, lb_str(gw2, "lease"), t2, 300 + 1500, "W2 (watchdog false, ttl 300)");
	lb_expect_silent(p1, 200, "the next waiter: no permit is free");
	lb_expect_silent(p2, 0, "P2 is renewed by its watchdog");
	expect_sem(o, "exp", 2, 2, 1);
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(p2, lb_str(g2, "lease")), 0);
	json_t *gw4 = expect_permit(p1, i4, t0, 500, "the last waiter after P2's release");
	cr_assert_eq(lb_release(w1, lb_str(gw3, "lease")), 0);
	cr_assert_eq(lb_release(p1, lb_str(gw4, "lease")), 0);
	lb_expect_no_queue(r, o, "exp", 2000, true);
	lb_end();
}


LB_TEST(semaphore, session_end_returns_the_permit_at_once, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *p1 = lb_connect(a, LB_TCP);
	lb_client *p2 = lb_connect(b, LB_TCP);
	lb_client *w1 = lb_connect(b, LB_UNIX);
	lb_client *w2 = lb_connect(a, LB_UNIX);
	lb_client *w3 = lb_connect(b, LB_TCP);
	lb_client *o = lb_connect(a, LB_TCP);

	permit_now(p1, "se", LB_AO(.limit = 2));
	json_t *g2 = permit_now(p2, "se", LB_AO(.limit = 2));
	json_t *i1 = lb_acq_send(w1, "se", LB_AO(.limit = 2));
	lb_sleep_ms(30);
	lb_acq_send(w2, "se", LB_AO(.limit = 2));
	lb_sleep_ms(30);
	json_t *i3 = lb_acq_send(w3, "se", LB_AO(.limit = 2));
	lb_wait_waiters(o, "se", 3, 2000);

	/* a waiter that disconnects is withdrawn */
	lb_close(w2);
	lb_wait_waiters(o, "se", 2, 1000);

	/* a holder that disconnects: its permit goes to the head waiter at once */
	int64_t t0 = lb_now_ms();
	lb_close(p1);
	expect_permit(w1, i1, t0, 1000, "W1 after P1's disconnect");
	lb_expect_silent(w3, 200, "W3 while P2 and W1 hold");
	expect_sem(o, "se", 2, 2, 1);
	/* W1 disconnects while holding: W3 (the withdrawn W2 was before it) */
	t0 = lb_now_ms();
	lb_close(w1);
	json_t *gw3 = expect_permit(w3, i3, t0, 1000, "W3 after W1's disconnect");
	expect_sem(o, "se", 2, 2, 0);

	/* a session with two permits gives both back when it ends */
	cr_assert_eq(lb_release(w3, lb_str(gw3, "lease")), 0);
	json_t *g2b = permit_now(p2, "se", LB_AO(.limit = 2));
	cr_assert_str_neq(lb_str(g2b, "lease"), lb_str(g2, "lease"));
	lb_client *w4 = lb_connect(a, LB_UNIX);
	lb_client *w5 = lb_connect(b, LB_UNIX);
	json_t *i4 = lb_acq_send(w4, "se", LB_AO(.limit = 2));
	lb_sleep_ms(30);
	json_t *i5 = lb_acq_send(w5, "se", LB_AO(.limit = 2, .fair = 0));
	lb_wait_waiters(o, "se", 2, 2000);
	t0 = lb_now_ms();
	lb_close(p2);
	json_t *gw4 = expect_permit(w4, i4, t0, 1000, "W4 after P2's disconnect");
	json_t *gw5 = expect_permit(w5, i5, t0, 1000, "W5 after P2's disconnect");
	expect_sem(o, "se", 2, 2, 0);
	cr_assert_eq(lb_release(w4, lb_str(gw4, "lease")), 0);
	cr_assert_eq(lb_release(w5, lb_str(gw5, "lease")), 0);
	lb_expect_no_queue(r, o, "se", 2000, true);
	lb_end();
}

/* ---- 4. the kind of a name is fixed while it has holders or waiters ---------------------- */

LB_TEST(semaphore, kind_and_limit_are_fixed_while_held_or_awaited, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *x = lb_connect(a, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	lb_client *c = lb_connect(b, LB_UNIX);
	lb_client *d = lb_connect(a, LB_UNIX);

	/* a lock held exclusive: a semaphore request conflicts, with or without
	 * waiting, fair or not, on either broker */
	json_t *gx = permit_now(x, "kind", LB_AO(.mode = "exclusive"));
	expect_conflict(c, "kind", LB_AO(.limit = 2, .wait_ms = 0), "semaphore on an exclusive lock");
	expect_conflict(c, "kind", LB_AO(.limit = 2), "semaphore (no wait_ms) on an exclusive lock");
	expect_conflict(d, "kind", LB_AO(.limit = 1, .fair = 0), "semaphore limit 1 on a lock");
	/* ... also with a lock waiter queued */
	json_t *iw = lb_acq_send(w, "kind", LB_AO(.mode = "exclusive"));
	lb_wait_waiters(c, "kind", 1, 2000);
	expect_conflict(c, "kind", LB_AO(.limit = 2, .wait_ms = 1000), "semaphore on a lock w/ waiter");
	json_t *in = lb_inspect(c, "kind");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 1, "a conflict does not queue: %s", lb_dump(in));
	cr_assert_eq(lb_release(x, lb_str(gx, "lease")), 0);
	json_t *gw = lb_wait_response(w, iw, 2000);
	lb_expect_ok(gw);
	cr_assert_eq(lb_release(w, lb_str(gw, "lease")), 0);
	/* a lock held shared */
	json_t *gs = permit_now(x, "kind", LB_AO(.mode = "shared"));
	expect_conflict(d, "kind", LB_AO(.limit = 5), "semaphore on a shared lock");
	cr_assert_eq(lb_release(x, lb_str(gs, "lease")), 0);
	lb_expect_free(c, "kind");

	/* free: the name may become a semaphore */
	json_t *p1 = permit_now(x, "kind", LB_AO(.limit = 2));
	expect_conflict(c, "kind", LB_AO(.mode = "exclusive", .wait_ms = 0), "lock on a semaphore");
	expect_conflict(c, "kind", LB_AO(), "lock (no wait_ms) on a semaphore");
	expect_conflict(d, "kind", LB_AO(.mode = "shared", .fair = 0), "shared lock on a semaphore");
	expect_conflict(d, "kind", LB_AO(.limit = 3), "semaphore with another limit");
	expect_conflict(c, "kind", LB_AO(.limit = 1, .wait_ms = 0), "semaphore with a smaller limit");
	json_t *p2 = permit_now(w, "kind", LB_AO(.limit = 2));
	/* full, with a semaphore waiter queued */
	json_t *iq = lb_acq_send(d, "kind", LB_AO(.limit = 2));
	lb_wait_waiters(c, "kind", 1, 2000);
	expect_conflict(c, "kind", LB_AO(.mode = "exclusive"), "lock on a full semaphore w/ waiter");
	expect_conflict(c, "kind", LB_AO(.limit = 4, .fair = 0), "other limit on a full semaphore");
	expect_sem(c, "kind", 2, 2, 1);
	cr_assert_eq(lb_release(x, lb_str(p1, "lease")), 0);
	json_t *gq = expect_permit(d, iq, lb_now_ms(), 500, "the semaphore waiter");
	cr_assert_eq(lb_release(w, lb_str(p2, "lease")), 0);
	expect_conflict(c, "kind", LB_AO(.mode = "shared", .wait_ms = 0), "lock on a semaphore");
	cr_assert_eq(lb_release(d, lb_str(gq, "lease")), 0);
	lb_expect_no_queue(r, c, "kind", 2000, true);

	/* neither holders nor waiters: a lock again, then another limit */
	json_t *l = permit_now(c, "kind", LB_AO(.mode = "exclusive"));
	cr_assert_str_eq(lb_str(l, "mode"), "exclusive");
	cr_assert_eq(lb_release(c, lb_str(l, "lease")), 0);
	json_t *q = permit_now(c, "kind", LB_AO(.limit = 7));
	expect_sem(d, "kind", 7, 1, 0);
	cr_assert_eq(lb_release(c, lb_str(q, "lease")), 0);
	lb_expect_no_queue(r, c, "kind", 2000, true);
	lb_end();
}

/* A name with ONLY waiters (its head waiter's broker died, so it stays
 * queued a few seconds after the last permit came back) keeps its kind; a
 * fair request does not pass that waiter, fair:false takes a free permit. */
LB_TEST(semaphore, only_waiters_keep_the_kind_and_fair_false_barges, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_broker *dead = lb_broker_start(r, NULL);
	lb_client *h1 = lb_connect(a, LB_TCP);
	lb_client *h2 = lb_connect(b, LB_TCP);
	lb_client *dw = lb_connect(dead, LB_TCP);
	lb_client *c = lb_connect(b, LB_UNIX);
	lb_client *d = lb_connect(a, LB_UNIX);

	json_t *g1 = permit_now(h1, "ow", LB_AO(.limit = 2));
	json_t *g2 = permit_now(h2, "ow", LB_AO(.limit = 2));
	lb_acq_send(dw, "ow", LB_AO(.limit = 2));
	lb_wait_waiters(c, "ow", 1, 2000);
	lb_broker_kill9(dead);
	int64_t tk = lb_now_ms();

	/* a permit is free, the dead waiter still heads the queue */
	cr_assert_eq(lb_release(h1, lb_str(g1, "lease")), 0);
	lb_expect_err(acq_call(c, "ow", LB_AO(.limit = 2, .wait_ms = 0, .fair = 1)), "timeout");
	json_t *bg = acq_call(d, "ow", LB_AO(.limit = 2, .wait_ms = 0, .fair = 0));
	cr_assert(lb_is_ok(bg), "fair:false with a free permit and a queue: %s (%lld ms after the kill)",
	          lb_dump(bg), (long long)(lb_now_ms() - tk));
	cr_assert_str_eq(lb_str(bg, "mode"), "permit");
	/* no permit free: fair:false does not get in */
	lb_expect_err(acq_call(c, "ow", LB_AO(.limit = 2, .wait_ms = 0, .fair = 0)), "timeout");
	cr_assert_eq(lb_release(d, lb_str(bg, "lease")), 0);
	cr_assert_eq(lb_release(h2, lb_str(g2, "lease")), 0);

	/* no holder now, only the (dead) waiter: the kind and limit still hold */
	json_t *in = lb_inspect(c, "ow");
	cr_assert_eq(lb_nholders(in), 0, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 1, "%s", lb_dump(in));
	expect_conflict(c, "ow", LB_AO(.mode = "exclusive", .wait_ms = 0), "lock on an awaited semaphore");
	expect_conflict(d, "ow", LB_AO(.mode = "shared"), "shared lock on an awaited semaphore");
	expect_conflict(c, "ow", LB_AO(.limit = 3, .wait_ms = 0), "another limit, awaited semaphore");
	cr_assert_lt(lb_now_ms() - tk, 4000, "the checks above must run before the waiter is dropped");

	/* the dead waiter is dropped: the name may be reused with another kind */
	int64_t deadline = lb_now_ms() + 10000;
	while (lb_inspect_waiters(c, "ow") != 0 && lb_now_ms() < deadline)
		lb_sleep_ms(50);
	cr_assert_eq(lb_inspect_waiters(c, "ow"), 0, "the dead broker's waiter was never dropped");
	json_t *l = permit_now(c, "ow", LB_AO(.mode = "exclusive"));
	cr_assert_eq(lb_release(c, lb_str(l, "lease")), 0);
	lb_expect_no_queue(r, c, "ow", 2000, true);
	lb_end();
}

/* ---- 5. safety: never more than N holders ------------------------------------------------ */

#define NTHREADS 10
#define LIMIT 3
#define RUN_MS 4000
#define MAX_LOG 20000
#define SLOCK "semsafe"

typedef struct {
	int64_t enter_ns, exit_ns;
	json_int_t fence;
	int thread;
} interval_t;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static interval_t ilog[MAX_LOG];
static int nlog;
static atomic_int inside, max_inside;

typedef struct {
	wl_thread t;
	long grants;
} worker_t;

static void *worker(void *arg)
{
	worker_t *w = arg;
	wl_thread *t = &w->t;
	char fields[64];
	wl_grant g;

	while (lb_now_ms() < t->end_ms) {
		bool fair = mc_rand(&t->seed) % 4 != 0;
		snprintf(fields, sizeof(fields), ",\"limit\":%d,\"fair\":%s", LIMIT,
		         fair ? "true" : "false");
		wl_step s = wl_acquire(t, SLOCK, fields, 0, &g);
		if (s == WL_AGAIN)
			continue;
		if (s != WL_OK)
			break;
		/* inside */
		int now = atomic_fetch_add(&inside, 1) + 1;
		int m = atomic_load(&max_inside);
		while (now > m && !atomic_compare_exchange_weak(&max_inside, &m, now))
			;
		int64_t enter = mc_now_ns();
		usleep(500 + mc_rand(&t->seed) % 1500);
		int64_t exit_ = mc_now_ns();
		atomic_fetch_sub(&inside, 1);
		pthread_mutex_lock(&log_mu);
		if (nlog < MAX_LOG)
			ilog[nlog++] = (interval_t){enter, exit_, g.fence, t->index};
		pthread_mutex_unlock(&log_mu);
		w->grants++;
		if (g.count != 1 || strcmp(g.mode, "permit") != 0) {
			wl_fail(t, "a permit answered count %lld mode %s", (long long)g.count,
			        g.mode[0] ? g.mode : "?");
			break;
		}
		s = wl_release(t, &g);
		if (s != WL_OK && s != WL_AGAIN)
			break;
	}
	mc_close(&t->c);
	return NULL;
}

typedef struct {
	int64_t at;
	int delta; /* +1 enter, -1 exit */
} edge_t;

static int cmp_edge(const void *a, const void *b)
{
	const edge_t *x = a, *y = b;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->delta - y->delta; /* exits first at equal times */
}

static int cmp_fence(const void *a, const void *b)
{
	const interval_t *x = a, *y = b;
	return x->fence < y->fence ? -1 : x->fence > y->fence;
}

LB_TEST(semaphore, safety_never_more_than_limit_holders, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	static worker_t w[NTHREADS];
	int64_t end = lb_now_ms() + RUN_MS;

	nlog = 0;
	atomic_store(&inside, 0);
	atomic_store(&max_inside, 0);
	for (int k = 0; k < NTHREADS; k++) {
		memset(&w[k], 0, sizeof(w[k]));
		wl_thread_init(&w[k].t, k, br, end, 777u);
	}
	wl_run(NTHREADS, worker, w, sizeof(w[0]));

	long grants = 0, timeouts = 0, walkaways = 0, aborts = 0;
	for (int k = 0; k < NTHREADS; k++) {
		cr_expect_eq(w[k].t.error[0], '\0', "%s", w[k].t.error);
		grants += w[k].grants;
		timeouts += w[k].t.timeouts;
		walkaways += w[k].t.walkaways;
		aborts += w[k].t.aborts;
		cr_expect_gt(w[k].grants, 0, "thread %d was never granted", k);
	}
	cr_log_info("%ld permits granted, %ld timeouts, %ld disconnects while waiting, %ld while "
	            "holding; at most %d inside at once",
	            grants, timeouts, walkaways, aborts, atomic_load(&max_inside));
	cr_assert_leq(atomic_load(&max_inside), LIMIT, "%d holders inside at once (limit %d)",
	              atomic_load(&max_inside), LIMIT);

	/* from the recorded intervals too */
	int n = nlog;
	edge_t *e = malloc(sizeof(edge_t) * 2 * (size_t)(n ? n : 1));
	cr_assert_not_null(e);
	for (int i = 0; i < n; i++) {
		e[2 * i] = (edge_t){ilog[i].enter_ns, +1};
		e[2 * i + 1] = (edge_t){ilog[i].exit_ns, -1};
	}
	qsort(e, 2 * (size_t)n, sizeof(*e), cmp_edge);
	int cur = 0, peak = 0;
	for (int i = 0; i < 2 * n; i++) {
		cur += e[i].delta;
		if (cur > peak)
			peak = cur;
	}
	free(e);
	cr_assert_leq(peak, LIMIT, "the records show %d holders at once (limit %d)", peak, LIMIT);
	/* every grant has its own fence */
	qsort(ilog, (size_t)n, sizeof(*ilog), cmp_fence);
	for (int i = 1; i < n; i++)
		cr_assert_neq(ilog[i].fence, ilog[i - 1].fence, "threads %d and %d got fence %lld",
		              ilog[i].thread, ilog[i - 1].thread, (long long)ilog[i].fence);
	for (int k = 0; k < NTHREADS; k++)
		if (w[k].t.error[0])
			cr_assert_fail("%s", w[k].t.error);
	cr_assert_gt(grants, 100, "only %ld permits in %d ms", grants, RUN_MS);
	cr_assert_eq(peak, LIMIT, "the limit was never reached (peak %d): no contention", peak);
	cr_assert_gt(aborts, 0, "no client disconnected while holding");
	cr_assert_gt(walkaways, 0, "no client disconnected while waiting");

	/* everything ended: free, no waiter, no queue key in Redis */
	lb_client *c = lb_connect(br[0], LB_TCP);
	lb_expect_no_queue(r, c, SLOCK, 2000, true);
	for (int k = 0; k < 2; k++) {
		lb_client *s = lb_connect(br[k], LB_UNIX);
		json_t *st = lb_stats(s);
		cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
	}
	lb_end();
}
