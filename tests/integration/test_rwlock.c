/*
 * test_rwlock.c - read-write locks (issue 4): mode shared / exclusive on one
 * name. Shared holders coexist and an exclusive one excludes everybody; the
 * fair queue grants consecutive shared waiters together and an exclusive
 * waiter holds back everything behind it (across brokers); a waiting
 * exclusive request closes the door to new shared holders in both fair
 * modes; every holder has its own TTL; reentrancy with owner, including
 * upgrade_unsupported; inspect; and a safety check under a mixed workload
 * with abrupt disconnects (an exclusive holder never overlaps anybody).
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

/* An acquire that must be granted at once (wait_ms 0). */
static json_t *acq_now(lb_client *c, const char *lock, lb_aopt o)
{
	o.wait_ms = 0;
	json_t *r = acq_call(c, lock, o);
	cr_assert(lb_is_ok(r), "acquire %s: %s", lock, lb_dump(r));
	cr_assert(lb_is_lease_token(lb_str(r, "lease")), "%s", lb_dump(r));
	return r;
}

/* Waits for the answer to id, asserts it is a grant of mode with count 1
 * that came within max_ms of t0; returns it. */
static json_t *expect_grant(lb_client *c, json_t *id, const char *mode, int64_t t0, int max_ms,
                            const char *what)
{
	json_t *g = lb_wait_response(c, id, max_ms + 2000);
	int64_t dt = lb_now_ms() - t0;
	cr_assert(lb_is_ok(g), "%s: %s", what, lb_dump(g));
	cr_assert_str_eq(lb_str(g, "mode"), mode, "%s: %s", what, lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1, "%s: %s", what, lb_dump(g));
	cr_assert_leq(dt, max_ms, "%s: granted %lld ms after the trigger, want <= %d ms", what,
	              (long long)dt, max_ms);
	return g;
}

/* Asserts inspect's state, number of holders and waiters. */
static json_t *expect_state(lb_client *c, const char *lock, const char *state, size_t holders,
                            json_int_t waiters)
{
	json_t *in = lb_inspect(c, lock);
	cr_assert_str_eq(lb_str(in, "state"), state, "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), holders, "want %zu holders: %s", holders, lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), waiters, "want %lld waiters: %s", (long long)waiters,
	             lb_dump(in));
	return in;
}

/* ---- 1. coexistence and exclusion --------------------------------------------------- */

LB_TEST(rwlock, shared_holders_coexist_exclusive_excludes_everyone, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *s[4] = {lb_connect(a, LB_TCP), lb_connect(b, LB_TCP), lb_connect(a, LB_UNIX),
	                   lb_connect(b, LB_UNIX)};
	lb_client *x = lb_connect(b, LB_TCP);
	const char *lease[4];
	json_int_t last_fence = 0;

	/* any number of shared holders, on both brokers, each with its own lease */
	for (int k = 0; k < 4; k++) {
		json_t *g = acq_now(s[k], "rw", LB_AO(.mode = "shared", .ttl_ms = 20000));
		cr_assert_str_eq(lb_str(g, "mode"), "shared", "%s", lb_dump(g));
		cr_assert_eq(lb_int(g, "count"), 1);
		cr_assert_gt(lb_int(g, "fence"), last_fence, "fences increase: %s", lb_dump(g));
		last_fence = lb_int(g, "fence");
		lease[k] = lb_str(g, "lease");
		for (int j = 0; j < k; j++)
			cr_assert_str_neq(lease[k], lease[j], "shared holders have distinct leases");
	}
	/* the same session, another owner: a second shared lease */
	json_t *g2 = acq_now(s[0], "rw", LB_AO(.mode = "shared", .owner = "other"));
	cr_assert_str_neq(lb_str(g2, "lease"), lease[0]);
	cr_assert_eq(lb_int(g2, "count"), 1);
	json_t *in = expect_state(x, "rw", "shared", 5, 0);
	for (size_t k = 0; k < 5; k++)
		cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), k), "mode"), "shared",
		                 "%s", lb_dump(in));

	/* an exclusive request does not get in, fair or not */
	lb_expect_err(acq_call(x, "rw", LB_AO(.wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(x, "rw", LB_AO(.mode = "exclusive", .wait_ms = 0, .fair = 0)),
	              "timeout");
	lb_expect_err(acq_call(x, "rw", LB_AO(.mode = "exclusive", .wait_ms = 150, .fair = 1)),
	              "timeout");
	cr_assert_eq(lb_release(s[0], lb_str(g2, "lease")), 0);
	for (int k = 0; k < 3; k++) {
		cr_assert_eq(lb_release(s[k], lease[k]), 0);
		/* not while one shared holder is left */
		lb_expect_err(acq_call(x, "rw", LB_AO(.wait_ms = 0, .fair = k % 2)), "timeout");
	}
	cr_assert_eq(lb_release(s[3], lease[3]), 0);

	/* an exclusive holder excludes everyone: shared and exclusive, fair or not */
	json_t *xg = acq_now(x, "rw", LB_AO(.mode = "exclusive", .ttl_ms = 20000));
	cr_assert_str_eq(lb_str(xg, "mode"), "exclusive");
	cr_assert_gt(lb_int(xg, "fence"), last_fence);
	in = expect_state(s[0], "rw", "exclusive", 1, 0);
	cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), 0), "mode"), "exclusive");
	for (int k = 0; k < 4; k++) {
		lb_expect_err(acq_call(s[k], "rw", LB_AO(.mode = "shared", .wait_ms = 0, .fair = k % 2)),
		              "timeout");
		lb_expect_err(acq_call(s[k], "rw", LB_AO(.wait_ms = 0, .fair = k % 2)), "timeout");
	}
	lb_expect_err(acq_call(s[1], "rw", LB_AO(.mode = "shared", .wait_ms = 150)), "timeout");
	/* the same session but another owner is not let in either */
	lb_expect_err(acq_call(x, "rw", LB_AO(.mode = "shared", .owner = "o2", .wait_ms = 0)),
	              "timeout");
	cr_assert_eq(lb_release(x, lb_str(xg, "lease")), 0);

	/* free again: shared on both brokers */
	json_t *ga = acq_now(s[0], "rw", LB_AO(.mode = "shared"));
	json_t *gb = acq_now(s[1], "rw", LB_AO(.mode = "shared", .fair = 0));
	expect_state(x, "rw", "shared", 2, 0);
	cr_assert_eq(lb_release(s[0], lb_str(ga, "lease")), 0);
	cr_assert_eq(lb_release(s[1], lb_str(gb, "lease")), 0);
	lb_expect_no_queue(r, x, "rw", 2000, true);
	lb_end();
}

/* ---- 2. the fair queue with mixed waiters ---------------------------------------------- */

LB_TEST(rwlock, fair_queue_grants_consecutive_shared_together_in_order, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *s1 = lb_connect(a, LB_TCP);
	lb_client *s2 = lb_connect(b, LB_TCP);
	lb_client *x2 = lb_connect(a, LB_UNIX);
	lb_client *s3 = lb_connect(b, LB_UNIX);
	lb_client *late = lb_connect(b, LB_TCP);

	json_t *hg = acq_now(h, "fq", LB_AO(.mode = "exclusive"));
	json_t *i1 = lb_acq_send(s1, "fq", LB_AO(.mode = "shared"));
	lb_sleep_ms(30);
	json_t *i2 = lb_acq_send(s2, "fq", LB_AO(.mode = "shared"));
	lb_sleep_ms(30);
	json_t *ix = lb_acq_send(x2, "fq", LB_AO(.mode = "exclusive"));
	lb_sleep_ms(30);
	json_t *i3 = lb_acq_send(s3, "fq", LB_AO(.mode = "shared"));
	lb_wait_waiters(h, "fq", 4, 2000);
	lb_expect_silent(s1, 100, "S1 behind the exclusive holder");

	/* release X: S1 and S2 (on two brokers) together, not X2, not S3 */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
	json_t *g1 = expect_grant(s1, i1, "shared", t0, 300, "S1 after X's release");
	json_t *g2 = expect_grant(s2, i2, "shared", t0, 300, "S2 (other broker) with S1");
	cr_assert_gt(lb_int(g2, "fence"), lb_int(hg, "fence"));
	cr_assert_neq(lb_int(g1, "fence"), lb_int(g2, "fence"), "every grant has its own fence");
	lb_expect_silent(x2, 300, "X2 while S1 and S2 hold");
	lb_expect_silent(s3, 0, "S3 behind X2");
	expect_state(h, "fq", "shared", 2, 2);
	/* a newcomer shared request does not pass X2 either */
	lb_expect_err(acq_call(late, "fq", LB_AO(.mode = "shared", .wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(late, "fq", LB_AO(.mode = "shared", .wait_ms = 200)), "timeout");

	/* release S1: nothing new */
	cr_assert_eq(lb_release(s1, lb_str(g1, "lease")), 0);
	lb_expect_silent(x2, 300, "X2 while S2 still holds");
	lb_expect_silent(s3, 0, "S3 after S1's release");
	expect_state(h, "fq", "shared", 1, 2);

	/* release S2: X2 */
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(s2, lb_str(g2, "lease")), 0);
	json_t *gx = expect_grant(x2, ix, "exclusive", t0, 500, "X2 after S2's release");
	cr_assert_gt(lb_int(gx, "fence"), lb_int(g2, "fence"));
	cr_assert_gt(lb_int(gx, "fence"), lb_int(g1, "fence"));
	lb_expect_silent(s3, 300, "S3 while X2 holds");
	expect_state(h, "fq", "exclusive", 1, 1);

	/* release X2: S3 */
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(x2, lb_str(gx, "lease")), 0);
	json_t *g3 = expect_grant(s3, i3, "shared", t0, 500, "S3 after X2's release");
	cr_assert_gt(lb_int(g3, "fence"), lb_int(gx, "fence"));
	expect_state(h, "fq", "shared", 1, 0);
	cr_assert_eq(lb_release(s3, lb_str(g3, "lease")), 0);
	lb_expect_no_queue(r, h, "fq", 2000, true);
	lb_end();
}

LB_TEST(rwlock, one_release_wakes_a_whole_shared_batch_across_brokers, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	lb_client *h = lb_connect(br[0], LB_TCP);
	lb_client *x1 = lb_connect(br[1], LB_TCP);
	lb_client *x2 = lb_connect(br[0], LB_UNIX);
	enum { NS = 5 };
	lb_client *s[NS];
	json_t *ids[NS];
	for (int k = 0; k < NS; k++)
		s[k] = lb_connect(br[k % 2], k % 3 ? LB_TCP : LB_UNIX);

	/* a shared holder; queue: X1, S0..S4 (both brokers), X2 */
	json_t *hg = acq_now(h, "batch", LB_AO(.mode = "shared"));
	json_t *ix1 = lb_acq_send(x1, "batch", LB_AO(.mode = "exclusive"));
	lb_wait_waiters(h, "batch", 1, 2000);
	lb_sleep_ms(25);
	for (int k = 0; k < NS; k++) {
		ids[k] = lb_acq_send(s[k], "batch", LB_AO(.mode = "shared", .fair = 1));
		lb_sleep_ms(25);
	}
	json_t *ix2 = lb_acq_send(x2, "batch", LB_AO());
	lb_wait_waiters(h, "batch", NS + 2, 2000);
	/* no reader starvation of the writer: S0..S4 do not join the shared holder */
	for (int k = 0; k < NS; k++)
		lb_expect_silent(s[k], k == 0 ? 200 : 0, "shared waiter behind X1");
	lb_expect_silent(x1, 0, "X1 while the shared holder holds");

	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
	json_t *gx1 = expect_grant(x1, ix1, "exclusive", t0, 500, "X1 after the shared holder");
	for (int k = 0; k < NS; k++)
		lb_expect_silent(s[k], k == 0 ? 200 : 0, "shared waiter while X1 holds");

	/* one release wakes the whole batch, on both brokers; X2 stays behind */
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(x1, lb_str(gx1, "lease")), 0);
	json_t *g[NS];
	for (int k = 0; k < NS; k++) {
		g[k] = expect_grant(s[k], ids[k], "shared", t0, 400, "shared waiter of the batch");
		cr_assert_gt(lb_int(g[k], "fence"), lb_int(gx1, "fence"));
	}
	lb_expect_silent(x2, 300, "X2 while the batch holds");
	expect_state(h, "batch", "shared", NS, 1);
	/* no writer starvation: a new shared request waits behind X2 */
	json_t *il = lb_acq_send(h, "batch", LB_AO(.mode = "shared"));
	lb_wait_waiters(h, "batch", 2, 2000);
	for (int k = 0; k < NS - 1; k++)
		cr_assert_eq(lb_release(s[k], lb_str(g[k], "lease")), 0);
	lb_expect_silent(x2, 200, "X2 while one of the batch holds");
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(s[NS - 1], lb_str(g[NS - 1], "lease")), 0);
	json_t *gx2 = expect_grant(x2, ix2, "exclusive", t0, 500, "X2 after the batch");
	lb_expect_silent(h, 200, "the late shared request behind X2");
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(x2, lb_str(gx2, "lease")), 0);
	json_t *gl = expect_grant(h, il, "shared", t0, 500, "the late shared request after X2");
	cr_assert_eq(lb_release(h, lb_str(gl, "lease")), 0);
	lb_expect_no_queue(r, h, "batch", 2000, true);
	lb_end();
}

/* ---- 3. a waiting exclusive request closes the door --------------------------------------- */

LB_TEST(rwlock, waiting_exclusive_blocks_new_shared_holders_in_both_fair_modes, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP);
	lb_client *w = lb_connect(b, LB_TCP);
	lb_client *n[2] = {lb_connect(a, LB_UNIX), lb_connect(b, LB_UNIX)};

	for (int wfair = 0; wfair <= 1; wfair++) {
		json_t *hg = acq_now(h, "door", LB_AO(.mode = "shared", .fair = wfair));
		/* with only shared holders, a shared request joins them, fair or not */
		for (int k = 0; k < 2; k++) {
			json_t *g = acq_now(n[k], "door", LB_AO(.mode = "shared", .fair = k));
			cr_assert_eq(lb_release(n[k], lb_str(g, "lease")), 0);
		}
		/* an exclusive request waits (fair or not) ... */
		json_t *iw = lb_acq_send(w, "door", LB_AO(.mode = "exclusive", .fair = wfair));
		lb_wait_waiters(h, "door", 1, 2000);
		/* ... and no new shared holder gets in meanwhile, fair or not, on
		 * either broker */
		for (int k = 0; k < 2; k++)
			for (int nfair = 0; nfair <= 1; nfair++) {
				json_t *t = acq_call(n[k], "door",
				                     LB_AO(.mode = "shared", .wait_ms = 0, .fair = nfair));
				cr_assert(lb_is_err(t, "timeout"),
				          "exclusive waiter fair=%d, new shared fair=%d on broker %c: want "
				          "timeout, got %s",
				          wfair, nfair, k ? 'b' : 'a', lb_dump(t));
			}
		json_t *t = acq_call(n[0], "door", LB_AO(.mode = "shared", .wait_ms = 250, .fair = 0));
		cr_assert(lb_is_err(t, "timeout"), "exclusive waiter fair=%d, waiting fair:false shared: %s",
		          wfair, lb_dump(t));
		/* a waiting unfair shared request does not overtake the writer */
		json_t *is = lb_acq_send(n[1], "door", LB_AO(.mode = "shared", .fair = 0));
		lb_wait_waiters(h, "door", 2, 2000);
		lb_expect_silent(n[1], 200, "unfair shared waiter behind a waiting exclusive one");
		expect_state(h, "door", "shared", 1, 2);
		int64_t t0 = lb_now_ms();
		cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
		json_t *gw = expect_grant(w, iw, "exclusive", t0, 500, "the exclusive waiter");
		lb_expect_silent(n[1], 200, "shared waiter while the writer holds");
		t0 = lb_now_ms();
		cr_assert_eq(lb_release(w, lb_str(gw, "lease")), 0);
		json_t *gs = expect_grant(n[1], is, "shared", t0, 500, "shared waiter after the writer");
		cr_assert_eq(lb_release(n[1], lb_str(gs, "lease")), 0);
		lb_expect_no_queue(r, h, "door", 2000, true);
	}

	/* the door opens again when the exclusive waiter gives up */
	json_t *hg = acq_now(h, "door", LB_AO(.mode = "shared"));
	json_t *iw = lb_acq_send(w, "door", LB_AO(.mode = "exclusive", .wait_ms = 400, .fair = 0));
	lb_wait_waiters(h, "door", 1, 2000);
	lb_expect_err(acq_call(n[0], "door", LB_AO(.mode = "shared", .wait_ms = 0, .fair = 0)),
	              "timeout");
	lb_expect_err(lb_wait_response(w, iw, 3000), "timeout");
	lb_wait_waiters(h, "door", 0, 1000);
	for (int k = 0; k < 2; k++) {
		json_t *g = acq_now(n[k], "door", LB_AO(.mode = "shared", .fair = k));
		cr_assert_eq(lb_release(n[k], lb_str(g, "lease")), 0);
	}
	/* and when it disconnects while waiting */
	lb_acq_send(w, "door", LB_AO(.mode = "exclusive", .fair = 0));
	lb_wait_waiters(h, "door", 1, 2000);
	lb_expect_err(acq_call(n[1], "door", LB_AO(.mode = "shared", .wait_ms = 0, .fair = 0)),
	              "timeout");
	lb_close(w);
	lb_wait_waiters(h, "door", 0, 1000);
	json_t *g = acq_now(n[1], "door", LB_AO(.mode = "shared", .fair = 0));
	cr_assert_eq(lb_release(n[1], lb_str(g, "lease")), 0);
	cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
	lb_expect_no_queue(r, h, "door", 2000, true);
	lb_end();
}

/* ---- 4. individual TTLs ------------------------------------------------------------ */

LB_TEST(rwlock, every_holder_has_its_own_ttl, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c1 = lb_connect(a, LB_TCP);
	lb_client *c2 = lb_connect(b, LB_TCP);
	lb_client *c3 = lb_connect(a, LB_UNIX);
	lb_client *x = lb_connect(b, LB_UNIX);
	lb_client *obs = lb_connect(a, LB_TCP);

	/* S1: short TTL, no watchdog. S2: the same TTL, renewed by the watchdog.
	 * S3: a long TTL without watchdog. */
	int64_t t1 = lb_now_ms();
	json_t *g1 = acq_now(c1, "ttl", LB_AO(.mode = "shared", .ttl_ms = 400, .watchdog = 0));
	json_t *g2 = acq_now(c2, "ttl", LB_AO(.mode = "shared", .ttl_ms = 300));
	json_t *g3 = acq_now(c3, "ttl", LB_AO(.mode = "shared", .ttl_ms = 30000, .watchdog = 0));
	cr_assert_eq(lb_int(g1, "ttl_ms"), 400);
	cr_assert_eq(lb_int(g2, "ttl_ms"), 300);
	cr_assert_eq(lb_int(g3, "ttl_ms"), 30000);
	json_t *ix = lb_acq_send(x, "ttl", LB_AO(.mode = "exclusive"));
	lb_wait_waiters(obs, "ttl", 1, 2000);

	/* S1 expires alone */
	lb_expect_lost(c1, lb_str(g1, "lease"), t1, 1400, "S1 (watchdog false, ttl 400)");
	lb_expect_err(lb_call(c1, "{s:s, s:s}", "op", "release", "lease", lb_str(g1, "lease")),
	              "not_held");
	lb_sleep_ms(600); /* S2 needs several renewals by now */
	json_t *in = expect_state(obs, "ttl", "shared", 2, 1);
	bool seen_short = false, seen_long = false;
	for (size_t k = 0; k < 2; k++) {
		json_t *hd = json_array_get(lb_get(in, "holders"), k);
		cr_assert_str_eq(lb_str(hd, "mode"), "shared", "%s", lb_dump(in));
		json_int_t t = lb_int(hd, "ttl_ms");
		if (t <= 300)
			seen_short = t > 0;
		else
			seen_long = t > 28000 && t <= 30000;
	}
	cr_assert(seen_short && seen_long, "want S2 (ttl <= 300) and S3 (ttl ~30000): %s",
	          lb_dump(in));
	lb_expect_silent(c2, 0, "S2 is renewed by the watchdog");
	lb_expect_silent(c3, 0, "S3 has a long TTL");
	lb_expect_silent(x, 0, "the exclusive waiter while S2 and S3 hold");

	/* S3 shortened by extend: it expires, S2 stays */
	int64_t t3 = lb_now_ms();
	json_t *e = lb_call(c3, "{s:s, s:s, s:i}", "op", "extend", "lease", lb_str(g3, "lease"),
	                    "ttl_ms", 200);
	lb_expect_ok(e);
	lb_expect_lost(c3, lb_str(g3, "lease"), t3, 1200, "S3 after extend to 200 ms");
	expect_state(obs, "ttl", "shared", 1, 1);
	lb_expect_silent(x, 300, "the exclusive waiter while S2 holds");
	lb_expect_silent(c2, 0, "S2 is renewed by the watchdog");

	/* X waits for S2 only */
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(c2, lb_str(g2, "lease")), 0);
	json_t *gx = expect_grant(x, ix, "exclusive", t0, 500, "X after S2's release");

	/* an expiring exclusive holder hands over to the next batch of readers */
	cr_assert_eq(lb_release(x, lb_str(gx, "lease")), 0);
	int64_t tx = lb_now_ms();
	gx = acq_now(x, "ttl", LB_AO(.mode = "exclusive", .ttl_ms = 300, .watchdog = 0));
	json_t *i1 = lb_acq_send(c1, "ttl", LB_AO(.mode = "shared", .ttl_ms = 300, .watchdog = 0));
	lb_sleep_ms(20);
	json_t *i2 = lb_acq_send(c2, "ttl", LB_AO(.mode = "shared"));
	lb_wait_waiters(obs, "ttl", 2, 1000);
	g1 = expect_grant(c1, i1, "shared", tx, 1500, "S1' after X's expiry");
	g2 = expect_grant(c2, i2, "shared", tx, 1500, "S2' after X's expiry");
	lb_expect_lost(x, lb_str(gx, "lease"), tx, 1500, "X (watchdog false, ttl 300)");
	/* and S1' expires again while S2' stays */
	json_t *ev = lb_next_event(c1, 1500);
	cr_assert_not_null(ev, "S1' did not expire");
	cr_assert_str_eq(lb_str(ev, "reason"), "expired", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lb_str(g1, "lease"), "%s", lb_dump(ev));
	lb_sleep_ms(300);
	expect_state(obs, "ttl", "shared", 1, 0);
	lb_expect_silent(c2, 0, "S2' is renewed by the watchdog");
	cr_assert_eq(lb_release(c2, lb_str(g2, "lease")), 0);
	lb_expect_no_queue(r, obs, "ttl", 2000, true);
	lb_end();
}

/* ---- 5. reentrancy -------------------------------------------------------------------- */

LB_TEST(rwlock, reentrancy_with_owner_and_upgrade_unsupported, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(a, LB_TCP);
	lb_client *d = lb_connect(b, LB_TCP);
	lb_client *o = lb_connect(b, LB_UNIX);

	/* exclusive then exclusive */
	json_t *g = acq_now(c, "re", LB_AO(.mode = "exclusive", .owner = "t1"));
	const char *l = lb_str(g, "lease");
	json_t *g2 = acq_call(c, "re", LB_AO(.owner = "t1"));
	lb_expect_ok(g2);
	cr_assert_str_eq(lb_str(g2, "lease"), l);
	cr_assert_eq(lb_int(g2, "count"), 2);
	cr_assert_str_eq(lb_str(g2, "mode"), "exclusive");
	cr_assert_eq(lb_int(g2, "fence"), lb_int(g, "fence"), "a re-acquire keeps the fence");
	/* exclusive then shared: the lease stays exclusive */
	json_t *g3 = acq_call(c, "re", LB_AO(.mode = "shared", .owner = "t1"));
	lb_expect_ok(g3);
	cr_assert_str_eq(lb_str(g3, "lease"), l, "%s", lb_dump(g3));
	cr_assert_eq(lb_int(g3, "count"), 3, "%s", lb_dump(g3));
	cr_assert_str_eq(lb_str(g3, "mode"), "exclusive", "%s", lb_dump(g3));
	json_t *in = expect_state(o, "re", "exclusive", 1, 0);
	json_t *hd = json_array_get(lb_get(in, "holders"), 0);
	cr_assert_str_eq(lb_str(hd, "mode"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_int(hd, "count"), 3, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(hd, "owner"), "t1", "%s", lb_dump(in));
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");
	lb_expect_ok(ls);
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
	cr_assert_str_eq(lb_str(json_array_get(lb_get(ls, "leases"), 0), "mode"), "exclusive",
	                 "%s", lb_dump(ls));
	/* another owner of the same session, or the same owner on another
	 * session, is not reentrant */
	lb_expect_err(acq_call(c, "re", LB_AO(.owner = "t2", .wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(c, "re", LB_AO(.mode = "shared", .owner = "t2", .wait_ms = 0)),
	              "timeout");
	lb_expect_err(acq_call(d, "re", LB_AO(.owner = "t1", .wait_ms = 0)), "timeout");
	/* a reentrant acquire does not wait behind a queued waiter */
	json_t *iw = lb_acq_send(d, "re", LB_AO(.mode = "shared"));
	lb_wait_waiters(o, "re", 1, 2000);
	json_t *g4 = acq_call(c, "re", LB_AO(.owner = "t1", .wait_ms = 0));
	cr_assert(lb_is_ok(g4), "reentrant exclusive with a queued waiter: %s", lb_dump(g4));
	cr_assert_eq(lb_int(g4, "count"), 4);
	for (json_int_t k = 3; k >= 1; k--) {
		cr_assert_eq(lb_release(c, l), k);
		lb_expect_silent(d, 0, "waiter while the reentrant holder still holds");
	}
	int64_t t0 = lb_now_ms();
	cr_assert_eq(lb_release(c, l), 0);
	json_t *gd = expect_grant(d, iw, "shared", t0, 500, "waiter after the last release");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l), "not_held");

	/* shared then shared */
	g = acq_now(c, "re", LB_AO(.mode = "shared", .owner = "t1"));
	l = lb_str(g, "lease");
	g2 = acq_call(c, "re", LB_AO(.mode = "shared", .owner = "t1", .wait_ms = 0));
	lb_expect_ok(g2);
	cr_assert_str_eq(lb_str(g2, "lease"), l);
	cr_assert_eq(lb_int(g2, "count"), 2);
	cr_assert_str_eq(lb_str(g2, "mode"), "shared");
	cr_assert_eq(lb_int(g2, "fence"), lb_int(g, "fence"));
	/* shared then exclusive: upgrade_unsupported at once (not a deadlock),
	 * with or without wait_ms, fair or not */
	t0 = lb_now_ms();
	lb_expect_err(acq_call(c, "re", LB_AO(.mode = "exclusive", .owner = "t1")),
	              "upgrade_unsupported");
	lb_expect_err(acq_call(c, "re", LB_AO(.owner = "t1", .wait_ms = 5000, .fair = 0)),
	              "upgrade_unsupported");
	lb_expect_err(acq_call(c, "re", LB_AO(.owner = "t1", .wait_ms = 0)), "upgrade_unsupported");
	cr_assert_lt(lb_now_ms() - t0, 1000, "upgrade_unsupported must answer at once");
	/* the shared lease is untouched */
	in = expect_state(o, "re", "shared", 2, 0);
	bool found = false;
	for (size_t k = 0; k < 2; k++) {
		hd = json_array_get(lb_get(in, "holders"), k);
		if (strcmp(lb_str(hd, "owner"), "t1") == 0) {
			found = true;
			cr_assert_eq(lb_int(hd, "count"), 2, "%s", lb_dump(in));
			cr_assert_str_eq(lb_str(hd, "mode"), "shared", "%s", lb_dump(in));
		}
	}
	cr_assert(found, "%s", lb_dump(in));
	/* shared then exclusive with another owner of the same session just waits */
	lb_expect_err(acq_call(c, "re", LB_AO(.owner = "t2", .wait_ms = 200)), "timeout");
	/* reentrant shared does not wait behind a queued exclusive waiter */
	json_t *ix = lb_acq_send(o, "re", LB_AO(.mode = "exclusive"));
	lb_wait_waiters(d, "re", 1, 2000);
	g3 = acq_call(c, "re", LB_AO(.mode = "shared", .owner = "t1", .wait_ms = 0));
	cr_assert(lb_is_ok(g3), "reentrant shared with an exclusive waiter queued: %s", lb_dump(g3));
	cr_assert_eq(lb_int(g3, "count"), 3);
	cr_assert_str_eq(lb_str(g3, "lease"), l);
	cr_assert_eq(lb_release(c, l), 2);
	cr_assert_eq(lb_release(c, l), 1);
	cr_assert_eq(lb_release(d, lb_str(gd, "lease")), 0);
	lb_expect_silent(o, 200, "exclusive waiter while t1 holds shared");
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(c, l), 0);
	json_t *gx = expect_grant(o, ix, "exclusive", t0, 500, "exclusive waiter");

	/* a PENDING shared acquire then exclusive, same session and owner:
	 * upgrade_unsupported at once as well */
	json_t *ip = lb_acq_send(c, "re", LB_AO(.mode = "shared", .owner = "t3"));
	lb_wait_waiters(d, "re", 1, 2000);
	t0 = lb_now_ms();
	json_t *up = acq_call(c, "re", LB_AO(.mode = "exclusive", .owner = "t3"));
	cr_assert(lb_is_err(up, "upgrade_unsupported"),
	          "exclusive after a pending shared acquire of the same owner: %s", lb_dump(up));
	cr_assert_lt(lb_now_ms() - t0, 1000);
	expect_state(d, "re", "exclusive", 1, 1);
	/* the pending shared acquire goes on and is granted */
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(o, lb_str(gx, "lease")), 0);
	json_t *gp = expect_grant(c, ip, "shared", t0, 500, "the pending shared acquire");
	lb_expect_silent(c, 100, "no more answers");
	cr_assert_eq(lb_release(c, lb_str(gp, "lease")), 0);
	lb_expect_no_queue(r, o, "re", 2000, true);
	lb_end();
}

/* ---- 6. inspect ------------------------------------------------------------------------ */

LB_TEST(rwlock, inspect_shows_holders_modes_ttls_and_waiters, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c1 = lb_connect(a, LB_TCP);
	lb_client *c2 = lb_connect(b, LB_TCP);
	lb_client *w1 = lb_connect(a, LB_UNIX);
	lb_client *w2 = lb_connect(b, LB_UNIX);
	lb_client *w3 = lb_connect(a, LB_TCP);
	lb_expect_ok(lb_call(c1, "{s:s, s:s}", "op", "hello", "client", "reader-one"));
	lb_expect_ok(lb_call(c2, "{s:s, s:s}", "op", "hello", "client", "reader-two"));

	lb_expect_free(c1, "ins");
	json_t *g1 = acq_now(c1, "ins", LB_AO(.mode = "shared", .ttl_ms = 5000, .owner = "o1"));
	json_t *g2 =
	    acq_now(c2, "ins", LB_AO(.mode = "shared", .ttl_ms = 20000, .owner = "o2", .watchdog = 0));
	json_t *i1 = lb_acq_send(w1, "ins", LB_AO(.mode = "exclusive"));
	lb_sleep_ms(20);
	json_t *i2 = lb_acq_send(w2, "ins", LB_AO(.mode = "shared"));
	lb_sleep_ms(20);
	json_t *i3 = lb_acq_send(w3, "ins", LB_AO(.mode = "exclusive"));
	lb_wait_waiters(c1, "ins", 3, 2000);

	for (int k = 0; k < 2; k++) {
		json_t *in = expect_state(k ? c2 : w1, "ins", "shared", 2, 3);
		cr_assert_str_eq(lb_str(in, "lock"), "ins");
		cr_assert(json_is_null(lb_get(in, "limit")), "%s", lb_dump(in));
		cr_assert_geq(lb_int(in, "fence"), lb_int(g2, "fence"), "%s", lb_dump(in));
		cr_assert_null(strstr(lb_dump(in), lb_str(g1, "lease")), "inspect reveals a lease");
		cr_assert_null(strstr(lb_dump(in), lb_str(g2, "lease")), "inspect reveals a lease");
		int seen = 0;
		for (size_t j = 0; j < 2; j++) {
			json_t *hd = json_array_get(lb_get(in, "holders"), j);
			cr_assert_str_eq(lb_str(hd, "mode"), "shared", "%s", lb_dump(in));
			cr_assert_eq(lb_int(hd, "count"), 1, "%s", lb_dump(in));
			json_int_t t = lb_int(hd, "ttl_ms");
			if (strcmp(lb_str(hd, "owner"), "o1") == 0) {
				seen |= 1;
				cr_assert_str_eq(lb_str(hd, "client"), "reader-one", "%s", lb_dump(in));
				cr_assert(t > 3000 && t <= 5000, "o1's ttl: %s", lb_dump(in));
			} else {
				seen |= 2;
				cr_assert_str_eq(lb_str(hd, "owner"), "o2", "%s", lb_dump(in));
				cr_assert_str_eq(lb_str(hd, "client"), "reader-two", "%s", lb_dump(in));
				cr_assert(t > 18000 && t <= 20000, "o2's ttl: %s", lb_dump(in));
			}
		}
		cr_assert_eq(seen, 3, "%s", lb_dump(in));
	}
	cr_assert_eq(lb_release(c1, lb_str(g1, "lease")), 0);
	cr_assert_eq(lb_release(c2, lb_str(g2, "lease")), 0);
	json_t *gw1 = expect_grant(w1, i1, "exclusive", lb_now_ms(), 500, "W1");
	json_t *in = expect_state(c1, "ins", "exclusive", 1, 2);
	json_t *hd = json_array_get(lb_get(in, "holders"), 0);
	cr_assert_str_eq(lb_str(hd, "mode"), "exclusive", "%s", lb_dump(in));
	cr_assert(lb_int(hd, "ttl_ms") > 0 && lb_int(hd, "ttl_ms") <= 30000, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), lb_int(gw1, "fence"), "%s", lb_dump(in));
	cr_assert_eq(lb_release(w1, lb_str(gw1, "lease")), 0);
	json_t *gw2 = expect_grant(w2, i2, "shared", lb_now_ms(), 500, "W2");
	expect_state(c1, "ins", "shared", 1, 1);
	cr_assert_eq(lb_release(w2, lb_str(gw2, "lease")), 0);
	json_t *gw3 = expect_grant(w3, i3, "exclusive", lb_now_ms(), 500, "W3");
	expect_state(c1, "ins", "exclusive", 1, 0);
	cr_assert_eq(lb_release(w3, lb_str(gw3, "lease")), 0);
	lb_expect_no_queue(r, c1, "ins", 2000, true);
	lb_end();
}

/* ---- 7. safety under a mixed workload ---------------------------------------------------- */

#define NTHREADS 12
#define RUN_MS 4000
#define MAX_LOG 20000
#define SLOCK "rwsafe"

typedef struct {
	int64_t enter_ns, exit_ns;
	json_int_t fence;
	bool exclusive;
	int thread;
} interval_t;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static interval_t ilog[MAX_LOG];
static int nlog;
static atomic_int readers_in, writers_in, live_violations;

typedef struct {
	wl_thread t;
	long grants_x, grants_s;
} worker_t;

static void *worker(void *arg)
{
	worker_t *w = arg;
	wl_thread *t = &w->t;
	char fields[64];
	wl_grant g;

	while (lb_now_ms() < t->end_ms) {
		bool excl = mc_rand(&t->seed) % 100 < 35;
		bool fair = mc_rand(&t->seed) % 4 != 0;
		snprintf(fields, sizeof(fields), ",\"mode\":\"%s\",\"fair\":%s",
		         excl ? "exclusive" : "shared", fair ? "true" : "false");
		wl_step s = wl_acquire(t, SLOCK, fields, 0, &g);
		if (s == WL_AGAIN)
			continue;
		if (s != WL_OK)
			break;
		/* inside the critical section */
		int64_t enter = mc_now_ns();
		if (excl) {
			int wb = atomic_fetch_add(&writers_in, 1);
			if (wb != 0 || atomic_load(&readers_in) != 0)
				atomic_fetch_add(&live_violations, 1);
		} else {
			atomic_fetch_add(&readers_in, 1);
			if (atomic_load(&writers_in) != 0)
				atomic_fetch_add(&live_violations, 1);
		}
		usleep(500 + mc_rand(&t->seed) % 1000);
		if (excl)
			atomic_fetch_sub(&writers_in, 1);
		else
			atomic_fetch_sub(&readers_in, 1);
		int64_t exit_ = mc_now_ns();
		pthread_mutex_lock(&log_mu);
		if (nlog < MAX_LOG)
			ilog[nlog++] = (interval_t){enter, exit_, g.fence, excl, t->index};
		pthread_mutex_unlock(&log_mu);
		if (excl)
			w->grants_x++;
		else
			w->grants_s++;
		if (g.count != 1 || strcmp(g.mode, excl ? "exclusive" : "shared") != 0) {
			wl_fail(t, "fresh %s acquire answered count %lld mode %s",
			        excl ? "exclusive" : "shared", (long long)g.count, g.mode[0] ? g.mode : "?");
			break;
		}
		s = wl_release(t, &g);
		if (s != WL_OK && s != WL_AGAIN)
			break;
	}
	mc_close(&t->c);
	return NULL;
}

static int cmp_enter(const void *a, const void *b)
{
	const interval_t *x = a, *y = b;
	if (x->enter_ns != y->enter_ns)
		return x->enter_ns < y->enter_ns ? -1 : 1;
	return 0;
}

LB_TEST(rwlock, safety_exclusive_never_overlaps_under_mixed_workload, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	static worker_t w[NTHREADS];
	int64_t end = lb_now_ms() + RUN_MS;

	nlog = 0;
	atomic_store(&readers_in, 0);
	atomic_store(&writers_in, 0);
	atomic_store(&live_violations, 0);
	for (int k = 0; k < NTHREADS; k++) {
		memset(&w[k], 0, sizeof(w[k]));
		wl_thread_init(&w[k].t, k, br, end, 4242u);
	}
	wl_run(NTHREADS, worker, w, sizeof(w[0]));

	long gx = 0, gs = 0, timeouts = 0, walkaways = 0, aborts = 0;
	for (int k = 0; k < NTHREADS; k++) {
		cr_expect_eq(w[k].t.error[0], '\0', "%s", w[k].t.error);
		gx += w[k].grants_x;
		gs += w[k].grants_s;
		timeouts += w[k].t.timeouts;
		walkaways += w[k].t.walkaways;
		aborts += w[k].t.aborts;
		cr_expect_gt(w[k].grants_x + w[k].grants_s, 0, "thread %d was never granted", k);
	}
	cr_log_info("%ld exclusive and %ld shared grants, %ld timeouts, %ld disconnects while "
	            "waiting, %ld while holding",
	            gx, gs, timeouts, walkaways, aborts);
	cr_assert_eq(atomic_load(&live_violations), 0,
	             "%d times an exclusive holder was inside with another holder",
	             atomic_load(&live_violations));

	/* from the clients' own records: an exclusive interval overlaps nothing */
	int n = nlog;
	qsort(ilog, (size_t)n, sizeof(*ilog), cmp_enter);
	long shared_overlaps = 0;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n && ilog[j].enter_ns < ilog[i].exit_ns; j++) {
			cr_assert(!ilog[i].exclusive && !ilog[j].exclusive,
			          "overlap: thread %d (%s, fence %lld) [%lld, %lld] ns and thread %d (%s, "
			          "fence %lld) entered at %lld ns",
			          ilog[i].thread, ilog[i].exclusive ? "exclusive" : "shared",
			          (long long)ilog[i].fence, (long long)ilog[i].enter_ns,
			          (long long)ilog[i].exit_ns, ilog[j].thread,
			          ilog[j].exclusive ? "exclusive" : "shared", (long long)ilog[j].fence,
			          (long long)ilog[j].enter_ns);
			shared_overlaps++;
		}
	/* fences: an exclusive grant's fence exceeds every earlier grant's; a
	 * shared grant's exceeds every earlier exclusive grant's */
	json_int_t max_all = 0, max_x = 0;
	for (int i = 0; i < n; i++) {
		if (ilog[i].exclusive)
			cr_assert_gt(ilog[i].fence, max_all,
			             "exclusive grant (thread %d) with fence %lld after a grant with %lld",
			             ilog[i].thread, (long long)ilog[i].fence, (long long)max_all);
		else
			cr_assert_gt(ilog[i].fence, max_x,
			             "shared grant (thread %d) with fence %lld after an exclusive grant "
			             "with %lld",
			             ilog[i].thread, (long long)ilog[i].fence, (long long)max_x);
		if (ilog[i].fence > max_all)
			max_all = ilog[i].fence;
		if (ilog[i].exclusive && ilog[i].fence > max_x)
			max_x = ilog[i].fence;
	}
	cr_log_info("%d intervals, %ld pairs of overlapping shared holders", n, shared_overlaps);
	for (int k = 0; k < NTHREADS; k++)
		if (w[k].t.error[0])
			cr_assert_fail("%s", w[k].t.error);
	cr_assert_gt(gx, 30, "only %ld exclusive grants", gx);
	cr_assert_gt(gs, 30, "only %ld shared grants", gs);
	cr_assert_gt(shared_overlaps, 0, "shared holders never coexisted");
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
