/*
 * test_fairness.c - the fair FIFO queue across brokers (issue 3): grant
 * order equals arrival order chain after chain, a waiter that leaves the
 * head does not block the others, a dead broker's waiter is dropped,
 * fair:false barges, every wake-up across brokers arrives, and waiting
 * costs Redis only the safety-net retries (no polling).
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *acq_send(lb_client *c, json_t *id, const char *lock, int wait_ms, int fair)
{
	return lb_send_req(c, "{s:o*, s:s, s:s, s:o*, s:o*}", "id", id, "op", "acquire", "lock",
	                   lock, "wait_ms", wait_ms >= 0 ? json_integer(wait_ms) : NULL, "fair",
	                   fair >= 0 ? json_boolean(fair) : NULL);
}

/* ---- FIFO across brokers ------------------------------------------------------ */

#define NFIFO 10

LB_TEST(fairness, fifo_across_brokers_chain_after_chain, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	lb_client *h = lb_connect(br[0], LB_TCP);
	lb_client *c[NFIFO];
	json_t *ids[NFIFO];
	static const int orders[3][NFIFO] = {
	    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
	    {7, 2, 9, 4, 0, 5, 1, 8, 3, 6},
	    {9, 8, 7, 6, 5, 4, 3, 2, 1, 0},
	};
	for (int k = 0; k < NFIFO; k++)
		c[k] = lb_connect(br[k % 2], (k / 2) % 2 ? LB_UNIX : LB_TCP);

	json_t *hg = lb_try_acquire(h, "fifo", 30000);
	lb_expect_ok(hg);
	const char *hlease = lb_str(hg, "lease");
	json_int_t last_fence = lb_int(hg, "fence");

	for (int round = 0; round < 3; round++) {
		const int *order = orders[round];
		bool pending[NFIFO];
		/* arrivals 50 ms apart, so their order is known */
		for (int n = 0; n < NFIFO; n++) {
			int k = order[n];
			ids[k] = acq_send(c[k], json_integer(round * 100 + k), "fifo", -1, -1);
			pending[k] = true;
			lb_sleep_ms(50);
		}
		lb_wait_waiters(h, "fifo", NFIFO, 2000);
		cr_assert_eq(lb_release(h, hlease), 0);
		for (int n = 0; n < NFIFO; n++) {
			json_t *m;
			int got = lb_read_any(c, pending, NFIFO, 3000, &m);
			cr_assert_eq(got, order[n],
			             "round %d: grant %d went to client %d, want client %d (arrival order): %s",
			             round, n, got, order[n], lb_dump(m));
			cr_assert(json_equal(lb_get(m, "id"), ids[got]), "%s", lb_dump(m));
			lb_expect_ok(m);
			cr_assert_eq(lb_int(m, "count"), 1, "%s", lb_dump(m));
			json_int_t f = lb_int(m, "fence");
			cr_assert_gt(f, last_fence, "fence went backwards: %lld after %lld",
			             (long long)f, (long long)last_fence);
			last_fence = f;
			pending[got] = false;
			lb_sleep_ms(5); /* hold briefly */
			if (n == NFIFO - 1) {
				/* the holder queues again before the last releases */
				json_t *hid = acq_send(h, NULL, "fifo", -1, -1);
				lb_wait_waiters(h, "fifo", 1, 2000);
				cr_assert_eq(lb_release(c[got], lb_str(m, "lease")), 0);
				hg = lb_wait_response(h, hid, 3000);
				lb_expect_ok(hg);
				hlease = lb_str(hg, "lease");
				cr_assert_gt(lb_int(hg, "fence"), last_fence);
				last_fence = lb_int(hg, "fence");
			} else {
				cr_assert_eq(lb_release(c[got], lb_str(m, "lease")), 0);
			}
		}
		for (int k = 0; k < NFIFO; k++)
			lb_expect_silent(c[k], 0, "after the chain");
	}
	cr_assert_eq(lb_release(h, hlease), 0);
	lb_expect_free(h, "fifo");
	lb_expect_no_queue(r, h, "fifo", 1000, false);
	lb_end();
}

/* ---- wake-ups across brokers ------------------------------------------------ */

#define NWAKE 8

/* Each handoff here crosses brokers: the releasing script only tells the
 * other broker (once, until that broker's heartbeat answers), and that
 * broker grants its waiter. Every wake must arrive: a lost or suppressed
 * one would leave the waiter to the 1 s safety net. */
LB_TEST(fairness, every_cross_broker_wake_arrives, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	lb_client *h = lb_connect(br[1], LB_TCP);
	lb_client *c[NWAKE];
	json_t *ids[NWAKE];
	const char *lease;
	int64_t t0, worst = 0;

	for (int k = 0; k < NWAKE; k++)
		c[k] = lb_connect(br[k % 2], LB_UNIX);
	lease = lb_must_acquire(h, "wake", 30000);
	for (int k = 0; k < NWAKE; k++) {
		ids[k] = acq_send(c[k], json_integer(k), "wake", -1, -1);
		lb_sleep_ms(20); /* arrivals in index order */
	}
	lb_wait_waiters(h, "wake", NWAKE, 2000);
	for (int k = 0; k < NWAKE; k++) {
		json_t *m;

		t0 = lb_now_ms();
		cr_assert_eq(lb_release(k == 0 ? h : c[k - 1], lease), 0);
		m = lb_wait_response(c[k], ids[k], 3000);
		lb_expect_ok(m);
		if (lb_now_ms() - t0 > worst)
			worst = lb_now_ms() - t0;
		cr_expect_lt(lb_now_ms() - t0, 400,
		             "grant %d (broker %d after broker %d) took %lld ms: a wake-up was lost",
		             k, k % 2, k == 0 ? 1 : (k - 1) % 2, (long long)(lb_now_ms() - t0));
		lease = lb_str(m, "lease");
	}
	cr_assert_eq(lb_release(c[NWAKE - 1], lease), 0);
	cr_log_info("slowest cross-broker handoff: %lld ms", (long long)worst);
	lb_expect_free(h, "wake");
	lb_end();
}

/* Wake-up heartbeats list the broker's waiters (refreshing their 5 s
 * deadlines) only about once a second: a waiter that waits longer than a
 * deadline through wake-ups 0.8 s apart, which keep the safety-net timer
 * from ever firing, must keep its place. W (on B) queues behind 16 clients
 * alternating between the brokers, each holding 0.4 s; X (on A) queues
 * after W. Dropped at its deadline, W would be granted after X, or never. */
#define NLONG 16
LB_TEST(fairness, a_long_wait_through_frequent_wakes_keeps_its_place, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	lb_client *h = lb_connect(br[0], LB_TCP);
	lb_client *c[NLONG + 2];
	json_t *ids[NLONG + 2];
	const char *lease;
	int64_t t0 = lb_now_ms();

	for (int k = 0; k < NLONG + 2; k++)
		c[k] = lb_connect(br[k < NLONG ? k % 2 : k == NLONG ? 1 : 0], LB_UNIX);
	lease = lb_must_acquire(h, "long", 30000);
	for (int k = 0; k < NLONG + 2; k++) {
		ids[k] = acq_send(c[k], json_integer(k), "long", -1, -1);
		lb_sleep_ms(20); /* arrivals in index order */
	}
	lb_wait_waiters(h, "long", NLONG + 2, 2000);
	for (int k = 0; k < NLONG + 2; k++) {
		json_t *m;

		cr_assert_eq(lb_release(k == 0 ? h : c[k - 1], lease), 0);
		m = lb_wait_response(c[k], ids[k], 3000);
		lb_expect_ok(m);
		lease = lb_str(m, "lease");
		if (k < NLONG)
			lb_sleep_ms(400);
	}
	cr_assert_gt(lb_now_ms() - t0, 6000, "W waited less than a deadline: the test proves nothing");
	cr_assert_eq(lb_release(c[NLONG + 1], lease), 0);
	lb_expect_free(h, "long");
	lb_end();
}

/* ---- a waiter leaving the queue --------------------------------------------- */

LB_TEST(fairness, waiters_leaving_the_head_do_not_block_the_rest, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w1 = lb_connect(a, LB_TCP);
	lb_client *w2 = lb_connect(a, LB_UNIX);
	lb_client *w3 = lb_connect(b, LB_UNIX);
	lb_client *w4 = lb_connect(a, LB_TCP);
	const char *hl = lb_must_acquire(h, "hd", 30000);

	json_t *i1 = acq_send(w1, NULL, "hd", 500, -1);
	lb_sleep_ms(20);
	json_t *i2 = acq_send(w2, json_string("c2"), "hd", -1, -1);
	lb_sleep_ms(20);
	json_t *i3 = acq_send(w3, NULL, "hd", -1, -1);
	lb_sleep_ms(20);
	json_t *i4 = acq_send(w4, NULL, "hd", -1, -1);
	lb_wait_waiters(h, "hd", 4, 2000);

	/* the head times out: it leaves at once */
	lb_expect_err(lb_wait_response(w1, i1, 3000), "timeout");
	cr_assert_eq(lb_inspect_waiters(h, "hd"), 3);
	/* the new head is cancelled: it leaves at once */
	json_t *cn = lb_call(w2, "{s:s, s:s}", "op", "cancel", "target", "c2");
	cr_assert(lb_bool(cn, "cancelled"), "%s", lb_dump(cn));
	lb_expect_err(lb_wait_response(w2, i2, 2000), "cancelled");
	cr_assert_eq(lb_inspect_waiters(h, "hd"), 2);

	/* the next in line is served promptly, then the one after it */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, hl), 0);
	json_t *g = lb_wait_response(w3, i3, 2000);
	cr_assert_lt(lb_now_ms() - t0, 500);
	lb_expect_ok(g);
	lb_expect_silent(w4, 100, "w4 behind w3");
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(w3, lb_str(g, "lease")), 0);
	g = lb_wait_response(w4, i4, 2000);
	cr_assert_lt(lb_now_ms() - t0, 500);
	lb_expect_ok(g);
	lb_expect_silent(w1, 0, "timed-out waiter");
	lb_expect_silent(w2, 0, "cancelled waiter");
	cr_assert_eq(lb_release(w4, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "hd", 1000, false);
	lb_end();
}

/* ---- a dead broker's waiter --------------------------------------------------- */

LB_TEST(fairness, dead_broker_waiter_is_dropped_and_fair_false_barges, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *dead = lb_connect(a, LB_TCP);
	lb_client *w = lb_connect(b, LB_UNIX);
	lb_client *t = lb_connect(b, LB_TCP);
	const char *hl = lb_must_acquire(h, "dead", 30000);

	acq_send(dead, NULL, "dead", -1, -1); /* the head of the queue */
	lb_wait_waiters(h, "dead", 1, 2000);
	lb_sleep_ms(30);
	json_t *wid = acq_send(w, NULL, "dead", -1, -1);
	lb_wait_waiters(h, "dead", 2, 2000);

	lb_broker_kill9(a);
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, hl), 0);

	/* While the dead waiter is still in the queue (its heartbeat deadline
	 * has not passed), a fair try-once does not pass it ... */
	json_t *ft = lb_wait_response(t, acq_send(t, NULL, "dead", 0, 1), 2000);
	lb_expect_err(ft, "timeout");
	/* ... but fair:false may take the free lock ahead of the queue. */
	json_t *uf = lb_wait_response(t, acq_send(t, NULL, "dead", 0, 0), 2000);
	cr_assert(lb_is_ok(uf), "fair:false on a free lock with a queue: %s (%lld ms after the kill)",
	          lb_dump(uf), (long long)(lb_now_ms() - t0));
	cr_assert_lt(lb_now_ms() - t0, 4000, "the checks above must run before the deadline");
	cr_assert_eq(lb_release(t, lb_str(uf, "lease")), 0);

	/* The dead waiter is dropped; the live one gets the lock. */
	json_t *g = lb_wait_response(w, wid, 10000);
	int64_t dt = lb_now_ms() - t0;
	lb_expect_ok(g);
	cr_log_info("granted %lld ms after the head's broker was killed", (long long)dt);
	cr_assert_leq(dt, 8000, "a dead broker's waiter blocked the lock for %lld ms", (long long)dt);
	cr_assert_eq(lb_inspect_waiters(h, "dead"), 0);
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "dead", 1000, false);
	lb_end();
}

/* ---- fair:false ------------------------------------------------------------------ */

LB_TEST(fairness, fair_false_waiters_are_woken_on_release, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *c[3] = {lb_connect(a, LB_UNIX), lb_connect(b, LB_TCP), lb_connect(b, LB_UNIX)};
	json_t *ids[3];
	bool pending[3] = {true, true, true};
	const char *hl = lb_must_acquire(h, "ff", 30000);

	/* a fair waiter and two unfair ones */
	ids[0] = acq_send(c[0], NULL, "ff", -1, 0);
	ids[1] = acq_send(c[1], NULL, "ff", -1, 1);
	ids[2] = acq_send(c[2], NULL, "ff", -1, 0);
	lb_wait_waiters(h, "ff", 3, 2000);
	for (int k = 0; k < 3; k++)
		lb_expect_silent(c[k], k == 0 ? 300 : 0, "waiting on a held lock, fair or not");
	/* fair:false does not take a held lock either */
	lb_client *x = lb_connect(b, LB_TCP);
	lb_expect_err(lb_wait_response(x, acq_send(x, NULL, "ff", 0, 0), 2000), "timeout");
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, hl), 0);
	for (int n = 0; n < 3; n++) {
		json_t *m;
		int k = lb_read_any(c, pending, 3, 2000, &m);
		cr_assert_lt(lb_now_ms() - t0, 500, "granted %lld ms after the release",
		             (long long)(lb_now_ms() - t0));
		lb_expect_ok(m);
		cr_assert(json_equal(lb_get(m, "id"), ids[k]));
		pending[k] = false;
		for (int j = 0; j < 3; j++)
			if (pending[j])
				lb_expect_silent(c[j], 50, "one holder at a time");
		t0 = lb_now_ms();
		cr_assert_eq(lb_release(c[k], lb_str(m, "lease")), 0);
	}
	lb_expect_no_queue(r, h, "ff", 1000, false);
	lb_end();
}

/* ---- no polling ------------------------------------------------------------------ */

LB_TEST(fairness, waiting_does_not_poll_redis, 40)
{
	lb_redis *r = lb_redis_start(false);
	/* The canary once a second, as the bound below counts it (its own
	 * interval is a setting: --canary-interval-ms). */
	lb_broker *b = lb_broker_start(r, "--canary-interval-ms", "1000", NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *w1 = lb_connect(b, LB_TCP);
	lb_client *w2 = lb_connect(b, LB_UNIX);
	enum { WAIT_S = 4 };
	const char *url = lb_redis_url(r);
	lb_monitor mon;

	/* a long lease without watchdog: the holder causes no renewals */
	json_t *hg = lb_call(h, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "np", "ttl_ms",
	                     60000, "wait_ms", 0, "watchdog", 0);
	lb_expect_ok(hg);
	/* two waiters of one lock on one broker: one safety net between them */
	json_t *i1 = acq_send(w1, NULL, "np", -1, -1);
	json_t *i2 = acq_send(w2, NULL, "np", -1, -1);
	lb_wait_waiters(h, "np", 2, 2000);
	lb_sleep_ms(300);

	cr_assert(strncmp(url, "unix://", 7) == 0, "%s", url);
	long long e0 = lb_info_number(lb_redis_cmd(r, "INFO commandstats"), "cmdstat_evalsha:calls=");
	lb_monitor_start(&mon, url + 7, 0);
	lb_sleep_ms(WAIT_S * 1000);
	lb_monitor_stop(&mon);
	long long evalsha =
	    lb_info_number(lb_redis_cmd(r, "INFO commandstats"), "cmdstat_evalsha:calls=") - e0;
	cr_log_info("while waiting %d s: %lld EVALSHA (commandstats), %lld commands sent, "
	            "%lld of them EVALSHA (MONITOR)",
	            WAIT_S, evalsha, mon.top, mon.evalsha);
	cr_assert_leq(evalsha, 2 * WAIT_S,
	              "%lld EVALSHA in %d s of waiting: polling? (want the safety net only, about "
	              "one a second per waiting lock)",
	              evalsha, WAIT_S);
	cr_assert_leq(mon.top, 2 * WAIT_S, "%lld Redis commands in %d s of waiting:\n%s", mon.top,
	              WAIT_S, mon.sample);
	lb_expect_silent(w1, 0, "w1");
	lb_expect_silent(w2, 0, "w2");

	/* and the wake-up still comes at once */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
	json_t *g = lb_wait_response(w1, i1, 2000);
	lb_expect_ok(g);
	cr_assert_lt(lb_now_ms() - t0, 500);
	cr_assert_eq(lb_release(w1, lb_str(g, "lease")), 0);
	g = lb_wait_response(w2, i2, 2000);
	lb_expect_ok(g);
	cr_assert_eq(lb_release(w2, lb_str(g, "lease")), 0);
	lb_expect_no_queue(r, h, "np", 1000, false);
	lb_end();
}
