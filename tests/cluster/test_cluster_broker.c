/*
 * test_cluster_broker.c - lockbrokerd on the Redis Cluster (issue 17), as
 * clients see it: every op on locks of all three masters, each lock's keys
 * on the master of its slot; FIFO handoff across two brokers on a lock of
 * each master, woken without polling; a slot moved (ASK in between) under
 * traffic, with a holder and a waiter on it; a master killed: its replica
 * takes over, the broker follows, a lease the new master lost is reported
 * lost (gone), the other masters' leases are left alone.
 *
 * Bounds are generous (a loaded 2-core machine, the broker built with
 * sanitizers); nothing here asserts speed. The one time asserted closely,
 * the FIFO handoffs' mean, tells a wake (a few ms) from the once-a-second
 * safety net (500 ms on average). Figures are printed as
 * "cluster_broker: ..." for the record.
 */
#include "tests/cluster/cl.h"
#include "tests/integration/mclient.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests ------------------------------------------------------------ */

/* LB_AO(...) overrides its own defaults. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* An acquire with the broker's whole budget for it: wait_ms and 10 s. */
static json_t *acq_call(lb_client *c, const char *lock, lb_aopt o)
{
	return lb_acq_call(c, lock, o, (o.wait_ms > 0 ? o.wait_ms : 0) + 10000);
}

/* An acquire that must be granted at once; returns the grant. */
static json_t *acq_now(lb_client *c, const char *lock, lb_aopt o)
{
	o.wait_ms = 0;
	json_t *g = acq_call(c, lock, o);
	cr_assert(lb_is_ok(g), "acquire %s: %s", lock, lb_dump(g));
	cr_assert(lb_is_lease_token(lb_str(g, "lease")), "%s", lb_dump(g));
	cr_assert_str_eq(lb_str(g, "lock"), lock, "%s", lb_dump(g));
	return g;
}

static json_t *release(lb_client *c, const char *lease)
{
	return lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
}

static json_t *extend(lb_client *c, const char *lease, int ttl_ms)
{
	return lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", ttl_ms);
}

/* Asserts inspect's state and number of holders. */
static json_t *expect_state(lb_client *c, const char *lock, const char *state, size_t holders)
{
	json_t *in = lb_inspect(c, lock);

	lb_expect_ok(in);
	cr_assert_str_eq(lb_str(in, "state"), state, "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), holders, "%s", lb_dump(in));
	return in;
}

/* ---- where the keys are ----------------------------------------------------- */

/* The lock's keys are on master and nowhere else: master has the header,
 * the other masters answer MOVED to master for it. */
static void expect_keys_on(int master, const char *name)
{
	int m[CL_MASTERS];
	char moved[64];

	cl_masters(m);
	cr_assert_eq(cl_lock_exists(master, name), 1, "lb:{%s} is not on its master %d", name,
	             master);
	snprintf(moved, sizeof(moved), "MOVED %d 127.0.0.1:%d", cl_slot_of(name), master);
	for (int i = 0; i < CL_MASTERS; i++) {
		if (m[i] == master)
			continue;
		redisReply *r = cl_node_cmd(m[i], "EXISTS lb:{%s}", name);
		cr_assert_eq(r->type, REDIS_REPLY_ERROR, "%d answers for lb:{%s}", m[i], name);
		cr_assert_str_eq(r->str, moved);
	}
}

/* ---- 1. every op on every master ----------------------------------------------- */

#define NAMES 5

/* Exclusive lock, reentrancy, extend, inspect, leases, fences, tokens that
 * are not the holder's, on lock x of master. */
static void exclusive_ops(lb_client *a1, lb_client *a2, lb_client *b1, int master, const char *x)
{
	json_t *g = acq_now(a1, x, LB_AO(.ttl_ms = 10000));
	const char *lease = lb_str(g, "lease");
	json_int_t fence = lb_int(g, "fence");

	cr_assert_str_eq(lb_str(g, "mode"), "exclusive", "%s", lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1, "%s", lb_dump(g));
	expect_keys_on(master, x);

	/* reentrant: the same lease, count 2, the same fence */
	json_t *g2 = acq_now(a1, x, LB_AO());
	cr_assert_str_eq(lb_str(g2, "lease"), lease, "%s", lb_dump(g2));
	cr_assert_eq(lb_int(g2, "count"), 2, "%s", lb_dump(g2));
	cr_assert_eq(lb_int(g2, "fence"), fence, "%s", lb_dump(g2));

	/* others are kept out, on both brokers */
	lb_expect_err(acq_call(a2, x, LB_AO(.wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(b1, x, LB_AO(.wait_ms = 0)), "timeout");
	lb_expect_err(acq_call(b1, x, LB_AO(.wait_ms = 150)), "timeout");

	/* inspect (from the other broker), extend, leases */
	json_t *in = expect_state(b1, x, "exclusive", 1);
	cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 2, "%s",
	             lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), fence, "%s", lb_dump(in));
	json_t *e = extend(a1, lease, 25000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 25000, "%s", lb_dump(e));
	in = expect_state(a2, x, "exclusive", 1);
	cr_assert_gt(lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms"), 10000,
	             "extend 25000 did not reach Redis: %s", lb_dump(in));
	lb_expect_err(lb_call(a1, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 99),
	              "invalid_argument");
	json_t *ls = lb_call(a1, "{s:s}", "op", "leases");
	lb_expect_ok(ls);
	json_t *one;
	size_t k;
	bool listed = false;
	json_array_foreach(lb_get(ls, "leases"), k, one) {
		if (strcmp(lb_str(one, "lease"), lease) == 0) {
			listed = true;
			cr_assert_str_eq(lb_str(one, "lock"), x, "%s", lb_dump(one));
			cr_assert_eq(lb_int(one, "count"), 2, "%s", lb_dump(one));
			cr_assert_eq(lb_int(one, "fence"), fence, "%s", lb_dump(one));
		}
	}
	cr_assert(listed, "leases does not list %s: %s", x, lb_dump(ls));

	/* tokens that are not the holder's release nothing */
	char wrong[256];
	snprintf(wrong, sizeof(wrong), "%s", lease);
	wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == '0' ? '1' : '0';
	lb_expect_err(release(a2, wrong), "not_held");
	lb_expect_err(release(b1, "0123456789abcdef0123456789abcdef"), "not_held");
	lb_expect_err(extend(b1, wrong, 1000), "not_held");
	expect_state(b1, x, "exclusive", 1);

	/* release drops one level, then frees */
	json_t *r = release(a1, lease);
	lb_expect_ok(r);
	cr_assert_eq(lb_int(r, "count"), 1, "%s", lb_dump(r));
	expect_state(b1, x, "exclusive", 1);
	cr_assert_eq(lb_release(a1, lease), 0);
	lb_expect_free(b1, x);
	lb_expect_err(release(a1, lease), "not_held");

	/* fences go up with every grant, on either broker; a stale token is
	 * refused while the next holder holds */
	json_t *gb = acq_now(b1, x, LB_AO());
	cr_assert_gt(lb_int(gb, "fence"), fence, "%s after %lld", lb_dump(gb), (long long)fence);
	lb_expect_err(release(a1, lease), "not_held");
	lb_expect_err(extend(a1, lease, 5000), "not_held");
	expect_state(a2, x, "exclusive", 1);
	cr_assert_eq(lb_release(b1, lb_str(gb, "lease")), 0);
	json_t *ga = acq_now(a2, x, LB_AO());
	cr_assert_gt(lb_int(ga, "fence"), lb_int(gb, "fence"), "%s after %s", lb_dump(ga),
	             lb_dump(gb));
	cr_assert_eq(lb_release(a2, lb_str(ga, "lease")), 0);
	lb_expect_free(a1, x);
}

/* Shared holders on both brokers; a queued exclusive request closes the
 * door and is granted when the last shared holder leaves. */
static void shared_ops(lb_client *a1, lb_client *a2, lb_client *b1, lb_client *b2, int master,
                       const char *s)
{
	json_t *ga = acq_now(a1, s, LB_AO(.mode = "shared"));
	json_t *gb = acq_now(b1, s, LB_AO(.mode = "shared"));

	cr_assert_str_eq(lb_str(ga, "mode"), "shared", "%s", lb_dump(ga));
	cr_assert_str_eq(lb_str(gb, "mode"), "shared", "%s", lb_dump(gb));
	cr_assert_str_neq(lb_str(ga, "lease"), lb_str(gb, "lease"));
	expect_keys_on(master, s);
	expect_state(a2, s, "shared", 2);
	lb_expect_err(acq_call(a2, s, LB_AO(.wait_ms = 0)), "timeout");
	/* shared then exclusive in one session: no upgrade */
	lb_expect_err(acq_call(a1, s, LB_AO(.wait_ms = 0)), "upgrade_unsupported");

	json_t *xid = lb_acq_send(a2, s, LB_AO(.wait_ms = 20000));
	lb_wait_waiters(b1, s, 1, 5000);
	lb_expect_err(acq_call(b2, s, LB_AO(.mode = "shared", .wait_ms = 0)), "timeout");
	/* (a holder re-enters without waiting, also past the queue) */
	json_t *again = acq_now(b1, s, LB_AO(.mode = "shared"));
	cr_assert_eq(lb_int(again, "count"), 2, "%s", lb_dump(again));
	cr_assert_eq(lb_release(b1, lb_str(gb, "lease")), 1);
	cr_assert_eq(lb_release(a1, lb_str(ga, "lease")), 0);
	lb_expect_silent(a2, 200, "exclusive waiter while a shared holder is left");
	cr_assert_eq(lb_release(b1, lb_str(gb, "lease")), 0);
	json_t *gx = lb_wait_response(a2, xid, 5000);
	lb_expect_ok(gx);
	cr_assert_str_eq(lb_str(gx, "mode"), "exclusive", "%s", lb_dump(gx));
	cr_assert_gt(lb_int(gx, "fence"), lb_int(gb, "fence"));
	expect_state(b1, s, "exclusive", 1);
	cr_assert_eq(lb_release(a2, lb_str(gx, "lease")), 0);
	lb_expect_free(b1, s);
}

/* A semaphore of 2 permits, one on each broker; a third waits. */
static void semaphore_ops(lb_client *a1, lb_client *a2, lb_client *b1, int master, const char *p)
{
	json_t *g1 = acq_now(a1, p, LB_AO(.limit = 2));
	json_t *g2 = acq_now(b1, p, LB_AO(.limit = 2));

	cr_assert_str_eq(lb_str(g1, "mode"), "permit", "%s", lb_dump(g1));
	cr_assert_str_neq(lb_str(g1, "lease"), lb_str(g2, "lease"));
	cr_assert_gt(lb_int(g2, "fence"), lb_int(g1, "fence"));
	expect_keys_on(master, p);
	json_t *in = expect_state(a2, p, "semaphore", 2);
	cr_assert_eq(lb_int(in, "limit"), 2, "%s", lb_dump(in));
	lb_expect_err(acq_call(a2, p, LB_AO(.limit = 2, .wait_ms = 0)), "timeout");
	/* its kind is fixed while it has holders */
	cr_assert(!lb_is_ok(acq_call(a2, p, LB_AO(.wait_ms = 0))), "an exclusive lock on a semaphore");
	json_t *wid = lb_acq_send(a2, p, LB_AO(.limit = 2, .wait_ms = 20000));
	lb_wait_waiters(b1, p, 1, 5000);
	cr_assert_eq(lb_release(b1, lb_str(g2, "lease")), 0);
	json_t *g3 = lb_wait_response(a2, wid, 5000);
	lb_expect_ok(g3);
	cr_assert_gt(lb_int(g3, "fence"), lb_int(g2, "fence"));
	cr_assert_eq(lb_release(a1, lb_str(g1, "lease")), 0);
	cr_assert_eq(lb_release(a2, lb_str(g3, "lease")), 0);
	lb_expect_free(b1, p);
}

/* A detached lease outlives its session and is released by its token
 * from a session of the other broker. */
static void detach_ops(lb_broker *A, lb_client *b1, int master, const char *d)
{
	lb_client *tmp = lb_connect(A, LB_UNIX);
	json_t *g = acq_now(tmp, d, LB_AO(.detach = 1, .ttl_ms = 30000));
	const char *lease = lb_str(g, "lease");

	lb_close(tmp);
	lb_sleep_ms(300); /* the session's end is done */
	expect_keys_on(master, d);
	expect_state(b1, d, "exclusive", 1);
	lb_expect_err(acq_call(b1, d, LB_AO(.wait_ms = 0)), "timeout");
	json_t *e = extend(b1, lease, 20000);
	lb_expect_ok(e);
	json_t *r = release(b1, lease);
	lb_expect_ok(r);
	cr_assert_eq(lb_int(r, "count"), 0, "%s", lb_dump(r));
	lb_expect_free(b1, d);
	lb_expect_err(release(b1, lease), "not_held");
}

/* A session that ends releases everything it holds, on every master: the
 * waiters on the other broker are granted (long before the leases' TTL). */
static void session_end_ops(lb_broker *A, lb_broker *B, char name[CL_MASTERS][NAMES][32])
{
	lb_client *h = lb_connect(A, LB_TCP);
	lb_client *w[CL_MASTERS];
	json_t *g[CL_MASTERS], *wid[CL_MASTERS];

	for (int i = 0; i < CL_MASTERS; i++) {
		const char *x = name[i][4];
		g[i] = acq_now(h, x, LB_AO(.ttl_ms = 30000));
		acq_now(h, x, LB_AO()); /* count 2: the end releases every level */
		w[i] = lb_connect(B, i % 2 ? LB_UNIX : LB_TCP);
		wid[i] = lb_acq_send(w[i], x, LB_AO(.wait_ms = 20000));
		lb_wait_waiters(w[i], x, 1, 5000);
	}
	json_t *ls = lb_call(h, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), CL_MASTERS, "%s", lb_dump(ls));
	int64_t t0 = lb_now_ms();
	lb_close(h);
	for (int i = 0; i < CL_MASTERS; i++) {
		json_t *got = lb_wait_response(w[i], wid[i], 10000);
		lb_expect_ok(got);
		cr_assert_gt(lb_int(got, "fence"), lb_int(g[i], "fence"));
		cr_assert_eq(lb_int(got, "count"), 1, "%s", lb_dump(got));
		fprintf(stderr, "cluster_broker: %s (master %d) granted %lld ms after its holder's "
		                "session closed\n",
		        name[i][4], i, (long long)(lb_now_ms() - t0));
		cr_assert_eq(lb_release(w[i], lb_str(got, "lease")), 0);
		lb_expect_free(w[i], name[i][4]);
	}
}

CL_TEST(cluster_broker, every_op_on_locks_of_all_three_masters, 120)
{
	int m[CL_MASTERS];
	char name[CL_MASTERS][NAMES][32];

	cl_masters(m);
	cr_assert(m[0] != m[1] && m[1] != m[2] && m[0] != m[2], "masters %d %d %d", m[0], m[1],
	          m[2]);
	for (int i = 0; i < CL_MASTERS; i++) {
		for (int k = 0; k < NAMES; k++) {
			int slot = cl_lock_name(i, k, name[i][k], sizeof(name[i][k]));
			/* Redis hashes the name (and so the lock's keys) to that slot,
			 * which master i serves */
			redisReply *r = cl_node_cmd(m[(i + 1) % CL_MASTERS], "CLUSTER KEYSLOT lb:{%s}:q",
			                            name[i][k]);
			cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
			cr_assert_eq(r->integer, slot, "KEYSLOT of %s: %lld, want %d", name[i][k],
			             r->integer, slot);
			cr_assert_eq(cl_master_of_slot(slot), m[i], "%s", name[i][k]);
		}
	}
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_broker *B = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *a1 = lb_connect(A, LB_TCP), *a2 = lb_connect(A, LB_UNIX);
	lb_client *b1 = lb_connect(B, LB_TCP), *b2 = lb_connect(B, LB_UNIX);

	cl_expect_three_masters(a1);
	cl_expect_three_masters(b1);
	for (int i = 0; i < CL_MASTERS; i++) {
		lb_expect_free(a1, name[i][0]);
		exclusive_ops(a1, a2, b1, m[i], name[i][0]);
		shared_ops(a1, a2, b1, b2, m[i], name[i][1]);
		semaphore_ops(a1, a2, b1, m[i], name[i][2]);
		detach_ops(A, b1, m[i], name[i][3]);
	}
	session_end_ops(A, B, name);
	/* Nothing held is left, and stats still shows three healthy masters
	 * that gave no redirect (nothing moved). */
	json_t *ls = lb_call(a1, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
	json_t *st = cl_expect_three_masters(a1);
	cr_assert_eq(cl_stats_redirects(st), 0, "redirects with no slot moved: %s", lb_dump(st));
	cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
	cr_assert_eq(lb_int(st, "lost_total"), 0, "%s", lb_dump(st));
	lb_end();
}

/* ---- 2. FIFO across two brokers, woken without polling ----------------------- */

#define NFIFO 6
#define QUIET_S 2
#define MEAN_HANDOFF_MS 250

/* Top-level script calls a node ran (INFO commandstats: EVALSHA and EVAL;
 * the calls scripts make are counted under their own names). */
static long long script_calls(int port)
{
	redisReply *r = cl_node_cmd(port, "INFO commandstats");

	return lb_info_number(r, "cmdstat_evalsha:calls=") + lb_info_number(r, "cmdstat_eval:calls=");
}

/* On a lock of each master, NFIFO waiters alternating between brokers A
 * and B queue in a known order behind a holder; for QUIET_S seconds
 * nothing is released and each master must see only the safety net (per
 * broker and waited lock about one heartbeat a second) and the canaries
 * (one a second per broker); then the lock is handed down the queue, each
 * grant in arrival order, each woken by the one before releasing. */
CL_TEST(cluster_broker, fifo_across_brokers_on_every_master_without_polling, 120)
{
	static const int orders[CL_MASTERS][NFIFO] = {
	    {0, 1, 2, 3, 4, 5},
	    {3, 0, 5, 2, 4, 1},
	    {5, 4, 3, 2, 1, 0},
	};
	int m[CL_MASTERS];
	char lock[CL_MASTERS][32];
	lb_broker *br[2];
	lb_client *h, *c[CL_MASTERS][NFIFO];
	json_t *ids[CL_MASTERS][NFIFO], *hg[CL_MASTERS];

	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++)
		cl_lock_name(i, 0, lock[i], sizeof(lock[i]));
	/* The canaries once a second, as the bound below counts them. */
	br[0] = lb_broker_start_url(cl_seed_url(), "--canary-interval-ms", "1000", NULL);
	br[1] = lb_broker_start_url(cl_seed_url(), "--canary-interval-ms", "1000", NULL);
	h = lb_connect(br[0], LB_TCP);
	for (int i = 0; i < CL_MASTERS; i++) {
		/* a long lease without watchdog: the holder causes no renewals */
		hg[i] = acq_now(h, lock[i], LB_AO(.ttl_ms = 60000, .watchdog = 0));
		for (int k = 0; k < NFIFO; k++)
			c[i][k] = lb_connect(br[k % 2], (k / 2) % 2 ? LB_UNIX : LB_TCP);
	}
	/* arrivals 40 ms apart, the three queues interleaved */
	for (int n = 0; n < NFIFO; n++) {
		for (int i = 0; i < CL_MASTERS; i++) {
			int k = orders[i][n];
			ids[i][k] = lb_acq_send(c[i][k], lock[i], LB_AO());
			lb_sleep_ms(40);
		}
	}
	for (int i = 0; i < CL_MASTERS; i++)
		lb_wait_waiters(h, lock[i], NFIFO, 5000);
	lb_sleep_ms(300);

	/* Nothing released for QUIET_S seconds: what does each master see? */
	long long before[CL_MASTERS];
	lb_monitor mon[CL_MASTERS];
	for (int i = 0; i < CL_MASTERS; i++)
		before[i] = script_calls(m[i]);
	for (int i = 0; i < CL_MASTERS; i++)
		lb_monitor_start(&mon[i], NULL, m[i]);
	lb_sleep_ms(QUIET_S * 1000);
	for (int i = 0; i < CL_MASTERS; i++)
		lb_monitor_stop(&mon[i]);
	for (int i = 0; i < CL_MASTERS; i++) {
		long long calls = script_calls(m[i]) - before[i];
		/* Per broker: a heartbeat of the waited lock and a canary check,
		 * each once a second, and one more of each for the edges of the
		 * window (the single-Redis fairness test allows the same: the
		 * safety net and the canary, once a second each). Polling would
		 * be one per waiter and retry interval. */
		long long bound = 2 * 2 * (QUIET_S + 1);
		fprintf(stderr, "cluster_broker: master %d while %d waiters waited %d s: %lld script "
		                "calls (commandstats), %lld commands (MONITOR)\n",
		        m[i], NFIFO, QUIET_S, calls, mon[i].top);
		cr_assert_leq(calls, bound,
		              "master %d ran %lld scripts in %d s of waiting (bound %lld): polling?",
		              m[i], calls, QUIET_S, bound);
		cr_assert_leq(mon[i].top, bound, "master %d got %lld commands in %d s of waiting:\n%s",
		              m[i], mon[i].top, QUIET_S, mon[i].sample);
		for (int k = 0; k < NFIFO; k++)
			lb_expect_silent(c[i][k], 0, "a waiter while nothing was released");
	}

	/* The handoffs, lock by lock: the grant order is the arrival order. */
	int64_t slowest = 0, total = 0;
	for (int i = 0; i < CL_MASTERS; i++) {
		bool pending[NFIFO];
		json_int_t last_fence = lb_int(hg[i], "fence");
		for (int k = 0; k < NFIFO; k++)
			pending[k] = true;
		int64_t t0 = lb_now_ms();
		cr_assert_eq(lb_release(h, lb_str(hg[i], "lease")), 0);
		for (int n = 0; n < NFIFO; n++) {
			json_t *g;
			int got = lb_read_any(c[i], pending, NFIFO, 10000, &g);
			int64_t dt = lb_now_ms() - t0;
			cr_assert_eq(got, orders[i][n],
			             "%s (master %d): grant %d went to waiter %d, want %d (arrival order): %s",
			             lock[i], m[i], n, got, orders[i][n], lb_dump(g));
			cr_assert(json_equal(lb_get(g, "id"), ids[i][got]), "%s", lb_dump(g));
			lb_expect_ok(g);
			cr_assert_gt(lb_int(g, "fence"), last_fence, "fence went backwards: %s",
			             lb_dump(g));
			last_fence = lb_int(g, "fence");
			pending[got] = false;
			if (dt > slowest)
				slowest = dt;
			total += dt;
			for (int k = 0; k < NFIFO; k++)
				if (pending[k])
					lb_expect_silent(c[i][k], 0, "behind the holder");
			t0 = lb_now_ms();
			cr_assert_eq(lb_release(c[i][got], lb_str(g, "lease")), 0);
		}
		lb_expect_free(h, lock[i]);
		cr_assert_eq(lb_inspect_waiters(h, lock[i]), 0);
	}
	int64_t mean = total / (CL_MASTERS * NFIFO);
	fprintf(stderr, "cluster_broker: FIFO handoffs: mean %lld ms, slowest %lld ms\n",
	        (long long)mean, (long long)slowest);
	/* Nearly every handoff here crosses brokers. A wake that does not
	 * arrive leaves its waiter to its broker's once-a-second safety net,
	 * 500 ms on average (whatever the phase of the two brokers' nets): a
	 * loaded machine slows a handoff now and then, lost wakes slow them
	 * all. */
	cr_assert_lt(mean, MEAN_HANDOFF_MS,
	             "a handoff took %lld ms on average (the slowest %lld ms): the waiters are "
	             "found by the safety net, the wakes do not arrive",
	             (long long)mean, (long long)slowest);
	lb_end();
}

/* ---- 3. a slot moved under traffic ------------------------------------------- */

#define NTRAFFIC 2    /* threads, one per broker */
#define TRAFFIC_LOCKS 3 /* each thread's own locks in the slot */

/* A client of one broker looping on locks of the moving slot: its own
 * locks (tried, never busy: each try must be granted) and one lock both
 * threads wait for. Every request has the broker's whole budget; any
 * answer but success is an error. Never asserts (the main thread does). */
typedef struct {
	int index;
	int port;
	char own[TRAFFIC_LOCKS][32];
	const char *shared;
	atomic_bool *stop;
	atomic_long *phase_ops; /* ops done, counted into the main thread's phase */
	long ops, errors;
	char first_error[768];
} traffic_t;

static void traffic_error(traffic_t *t, const char *what, json_t *resp)
{
	char *d = resp ? json_dumps(resp, JSON_COMPACT) : NULL;

	if (!t->errors++)
		snprintf(t->first_error, sizeof(t->first_error), "thread %d: %s: %s (at %lld ms)",
		         t->index, what, d ? d : "no answer within 20 s", (long long)lb_now_ms());
	free(d);
}

/* One request; true when it answered ok (and *lease, if asked for, is the
 * lease granted). */
static bool traffic_call(traffic_t *t, mclient *c, json_int_t id, const char *line, char *lease)
{
	json_t *resp;
	bool ok;

	if (!mc_send(c, line)) {
		traffic_error(t, "send failed", NULL);
		return false;
	}
	resp = mc_wait(c, id, 20000);
	ok = resp && json_is_true(json_object_get(resp, "ok"));
	if (!ok)
		traffic_error(t, line, resp);
	else if (lease)
		snprintf(lease, 64, "%s", json_string_value(json_object_get(resp, "lease")) ?: "");
	json_decref(resp);
	if (ok) {
		t->ops++;
		atomic_fetch_add(t->phase_ops, 1);
	}
	return ok;
}

static void *traffic(void *arg)
{
	traffic_t *t = arg;
	mclient c = {.fd = -1};
	json_int_t id = 0;
	char line[512], lease[64];

	if (mc_connect(&c, t->port, NULL) != 0) {
		traffic_error(t, "connect", NULL);
		return NULL;
	}
	while (!atomic_load(t->stop)) {
		for (int k = 0; k < TRAFFIC_LOCKS + 1; k++) {
			const char *name = k < TRAFFIC_LOCKS ? t->own[k] : t->shared;
			snprintf(line, sizeof(line),
			         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"%s\",\"ttl_ms\":5000,"
			         "\"wait_ms\":%d}\n",
			         (long long)++id, name, k < TRAFFIC_LOCKS ? 0 : 20000);
			if (!traffic_call(t, &c, id, line, lease))
				continue;
			snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"release\",\"lease\":\"%s\"}\n",
			         (long long)++id, lease);
			traffic_call(t, &c, id, line, NULL);
		}
		if (c.last_event[0]) {
			traffic_error(t, "event", NULL);
			snprintf(t->first_error + strlen(t->first_error),
			         sizeof(t->first_error) - strlen(t->first_error), " event %s",
			         c.last_event);
			c.last_event[0] = '\0';
		}
	}
	mc_close(&c);
	return NULL;
}

/* A request sent by the main thread during the move, and when it was
 * answered (ms since the move began). */
typedef struct {
	lb_client *c;
	char lock[32];
	json_t *id, *answer;
	int64_t t0, sent_ms, answered_ms;
} pend_t;

static void pend_add(pend_t *p, lb_client *c, const char *lock, lb_aopt o, int64_t t0)
{
	memset(p, 0, sizeof(*p));
	p->c = c;
	p->t0 = t0;
	p->id = lb_acq_send(c, lock, o);
	snprintf(p->lock, sizeof(p->lock), "%s", lock);
	p->sent_ms = lb_now_ms() - t0;
}

/* Reads the answers that arrive within ms (no other message may); returns
 * early once all are in only when until_all. */
static void pend_poll(pend_t *p, int n, int ms, bool until_all)
{
	int64_t end = lb_now_ms() + ms;

	for (;;) {
		bool all = true;
		for (int k = 0; k < n; k++) {
			if (p[k].answer)
				continue;
			all = false;
			json_t *m = lb_read_msg(p[k].c, 0);
			if (!m)
				continue;
			bool found = false;
			for (int j = 0; j < n; j++) {
				if (p[j].c == p[k].c && !p[j].answer && json_equal(lb_get(m, "id"), p[j].id)) {
					p[j].answer = m;
					p[j].answered_ms = lb_now_ms() - p[j].t0;
					found = true;
				}
			}
			cr_assert(found, "unexpected message during the move: %s", lb_dump(m));
		}
		if ((all && until_all) || lb_now_ms() >= end)
			return;
		lb_sleep_ms(1);
	}
}

/* The slot of lock X (master 0) goes to master 1 in steps (begin, 300 ms,
 * 3 keys, 300 ms, the rest and the end). Meanwhile Redis runs no lock
 * script of that slot: the source answers ASK when a script's keys are all
 * missing there and TRYAGAIN when only some are, the target TRYAGAIN to
 * ASKING (a lock's keys never all exist); the broker must retry within
 * each call's budget (2 s at least), well past the ~0.7 s move. Meanwhile
 * a thread per broker acquires and releases locks of that slot, X's holder
 * keeps renewing and a waiter of the other broker waits for X. */
CL_TEST(cluster_broker, slot_moved_under_traffic_keeps_leases_and_requests, 120)
{
	int m[CL_MASTERS];
	char x[32], own[NTRAFFIC][TRAFFIC_LOCKS][32], shared[1][32];
	lb_broker *br[2];
	traffic_t t[NTRAFFIC];
	pthread_t th[NTRAFFIC];
	atomic_bool stop;
	atomic_long phase_ops;

	cl_masters(m);
	int slot = cl_lock_name(0, 0, x, sizeof(x));
	int src = m[0], dst = m[1];
	cl_names_in_slot(slot, "mv-a-", TRAFFIC_LOCKS, own[0]);
	cl_names_in_slot(slot, "mv-b-", TRAFFIC_LOCKS, own[1]);
	cl_names_in_slot(slot, "mv-s-", 1, shared);
	br[0] = lb_broker_start_url(cl_seed_url(), NULL);
	br[1] = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *h = lb_connect(br[0], LB_TCP), *w = lb_connect(br[1], LB_TCP);
	lb_client *sa = lb_connect(br[0], LB_UNIX), *sb = lb_connect(br[1], LB_UNIX);

	/* X held (renewed every 2 s by the watchdog), a waiter on the other
	 * broker */
	json_t *hg = acq_now(h, x, LB_AO(.ttl_ms = 6000));
	json_t *wid = lb_acq_send(w, x, LB_AO(.wait_ms = 60000));
	lb_wait_waiters(sb, x, 1, 5000);
	expect_keys_on(src, x);
	json_t *st0[2] = {cl_expect_three_masters(sa), cl_expect_three_masters(sb)};
	json_int_t src_slots = lb_int(cl_stats_master(st0[0], src), "slots");
	json_int_t dst_slots = lb_int(cl_stats_master(st0[0], dst), "slots");

	atomic_store(&stop, false);
	atomic_store(&phase_ops, 0);
	for (int k = 0; k < NTRAFFIC; k++) {
		memset(&t[k], 0, sizeof(t[k]));
		t[k].index = k;
		t[k].port = lb_broker_port(br[k]);
		memcpy(t[k].own, own[k], sizeof(t[k].own));
		t[k].shared = shared[0];
		t[k].stop = &stop;
		t[k].phase_ops = &phase_ops;
		cr_assert_eq(pthread_create(&th[k], NULL, traffic, &t[k]), 0);
	}
	lb_sleep_ms(500);
	long before_move = atomic_exchange(&phase_ops, 0);

	/* The move, in steps. Requests the main thread sends at each step:
	 * tries of locks of the slot that never existed (all their keys
	 * missing: ASK from the source, then TRYAGAIN from the target) and a
	 * try of X (busy), on both brokers, all sent before the slot settles
	 * and all within their budget when it does. */
	pend_t p[2 * 2 * 2 + 2];
	int np = 0;
	int64_t t0 = lb_now_ms();
	cr_assert_eq(cl_move_slot_begin(slot, dst), src);
	for (int step = 0; step < 2; step++) {
		for (int k = 0; k < 2; k++) {
			char pre[32], fresh[2][32];
			snprintf(pre, sizeof(pre), "mv-f%d%d-", step, k);
			cl_names_in_slot(slot, pre, 2, fresh);
			for (int j = 0; j < 2; j++)
				pend_add(&p[np++], k ? sb : sa, fresh[j], LB_AO(.wait_ms = 0, .ttl_ms = 10000),
				         t0);
		}
		if (step == 0) {
			pend_add(&p[np++], sa, x, LB_AO(.wait_ms = 0), t0);
			pend_add(&p[np++], sb, x, LB_AO(.wait_ms = 0), t0);
			pend_poll(p, np, 300, false);
			cl_move_slot_keys(slot, 3); /* X's keys may be split now */
		} else {
			pend_poll(p, np, 300, false);
		}
	}
	cl_move_slot_end(slot);
	int64_t window = lb_now_ms() - t0;
	long during_move = atomic_exchange(&phase_ops, 0);
	pend_poll(p, np, 5000, true);
	int64_t slowest = 0;
	for (int k = 0; k < np; k++) {
		bool held_x = strcmp(p[k].lock, x) == 0;
		cr_assert_not_null(p[k].answer, "no answer to a try of %s", p[k].lock);
		cr_expect(held_x ? lb_is_err(p[k].answer, "timeout") : lb_is_ok(p[k].answer),
		          "a try of %s (%s), sent %lld ms into a %lld ms move of its slot, answered "
		          "%lld ms later%s: %s",
		          p[k].lock, held_x ? "held" : "a lock of the moving slot that never existed",
		          (long long)p[k].sent_ms, (long long)window,
		          (long long)(p[k].answered_ms - p[k].sent_ms),
		          p[k].answered_ms < window ? ", with the slot still moving and its 2 s budget "
		                                      "left"
		                                    : "",
		          lb_dump(p[k].answer));
		if (p[k].answered_ms - window > slowest)
			slowest = p[k].answered_ms - window;
		if (lb_is_ok(p[k].answer))
			cr_assert_eq(lb_release(p[k].c, lb_str(p[k].answer, "lease")), 0);
	}
	fprintf(stderr, "cluster_broker: the tries sent during the move were answered at most %lld "
	                "ms after it ended\n", (long long)slowest);
	lb_sleep_ms(1500);
	atomic_store(&stop, true);
	for (int k = 0; k < NTRAFFIC; k++)
		pthread_join(th[k], NULL);
	long after_move = atomic_load(&phase_ops);
	fprintf(stderr, "cluster_broker: slot %d moved %d -> %d in %lld ms; traffic ops before "
	                "%ld, during %ld, after %ld\n",
	        slot, src, dst, (long long)window, before_move, during_move, after_move);
	cr_assert_eq(cl_master_of_slot(slot), dst);

	for (int k = 0; k < NTRAFFIC; k++)
		cr_expect_eq(t[k].errors, 0, "%ld failed requests (of %ld) of broker %d; first: %s",
		             t[k].errors, t[k].ops + t[k].errors, k, t[k].first_error);
	cr_assert_gt(before_move, 0, "no traffic before the move");
	cr_assert_gt(after_move, 0, "no traffic after the move");

	/* The holder kept its lease, now on the new master; the waiter waits. */
	cr_assert_null(lb_next_event(h, 0), "the holder was told something");
	json_t *e = extend(h, lb_str(hg, "lease"), 20000);
	cr_assert(lb_is_ok(e), "extend of X after the move: %s", lb_dump(e));
	json_t *in = expect_state(sb, x, "exclusive", 1);
	cr_assert_eq(lb_int(in, "waiters"), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), lb_int(hg, "fence"), "%s", lb_dump(in));
	cr_assert_gt(lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms"), 6000,
	             "the extend did not reach the new master: %s", lb_dump(in));
	expect_keys_on(dst, x);
	lb_expect_silent(w, 0, "the waiter while X is held");

	/* Both brokers were redirected, and their maps follow the move. */
	for (int k = 0; k < 2; k++) {
		lb_client *s = k ? sb : sa;
		json_t *st;
		int64_t end = lb_now_ms() + 10000;
		for (;;) {
			st = cl_expect_three_masters(s);
			if (lb_int(cl_stats_master(st, dst), "slots") == dst_slots + 1 &&
			    lb_int(cl_stats_master(st, src), "slots") == src_slots - 1)
				break;
			cr_assert_lt(lb_now_ms(), end, "broker %d's map does not show slot %d moved: %s",
			             k, slot, lb_dump(st));
			lb_sleep_ms(50);
		}
		cr_assert_gt(cl_stats_redirects(st), cl_stats_redirects(st0[k]),
		             "broker %d counted no redirect: %s", k, lb_dump(st));
		fprintf(stderr, "cluster_broker: broker %d redis_masters after the move: %s\n", k,
		        lb_dump(lb_get(st, "redis_masters")));
	}

	/* Released, X goes to the waiter. */
	cr_assert_eq(lb_release(h, lb_str(hg, "lease")), 0);
	json_t *g = lb_wait_response(w, wid, 10000);
	lb_expect_ok(g);
	cr_assert_gt(lb_int(g, "fence"), lb_int(hg, "fence"));
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_expect_free(sa, x);
	lb_end();
}

/* ---- 4. a master killed -------------------------------------------------------- */

#define SERVE_AGAIN_MS 30000

/* Tries lock (wait_ms 0) until it is granted: the broker serves it again.
 * Meanwhile the answers may only say so (unavailable) or that the try's
 * reply was lost (timeout). Returns the grant. */
static json_t *grant_when_served(lb_client *c, const char *lock, int timeout_ms)
{
	int64_t end = lb_now_ms() + timeout_ms;

	for (;;) {
		json_t *g = acq_call(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000));
		if (lb_is_ok(g))
			return g;
		cr_assert(lb_is_err(g, "unavailable") || lb_is_err(g, "timeout"),
		          "%s while its master fails over: %s", lock, lb_dump(g));
		cr_assert_lt(lb_now_ms(), end, "%s not granted within %d ms: %s", lock, timeout_ms,
		             lb_dump(g));
		lb_sleep_ms(50);
	}
}

/* The lock's key, read on a replica (READONLY on cl's connection). */
static long long header_on_replica(int port, const char *name)
{
	redisReply *r = cl_node_cmd(port, "READONLY");
	cr_assert(r->type == REDIS_REPLY_STATUS, "READONLY on %d: %s", port, r->str ? r->str : "?");
	return cl_lock_exists(port, name);
}

/* The master of shard 0 is killed. Before: "kept" is held and on the
 * replica (WAIT), replication to the replica is cut, then "lost" is
 * granted (never on the replica) and a waiter of the other broker queues
 * for "kept"; leases on the other two masters are held throughout. */
CL_TEST(cluster_broker, master_killed_replica_takes_over_lost_lease_reported, 150)
{
	int m[CL_MASTERS];
	char kept[32], lost[32], probe[2][32], other[2][32];

	cl_masters(m);
	int old = m[0], rep = cl_replica_of(old);
	cl_lock_name(0, 0, kept, sizeof(kept));
	cl_lock_name(0, 1, lost, sizeof(lost));
	cl_lock_name(0, 2, probe[0], sizeof(probe[0]));
	cl_lock_name(0, 3, probe[1], sizeof(probe[1]));
	cl_lock_name(1, 0, other[0], sizeof(other[0]));
	cl_lock_name(2, 0, other[1], sizeof(other[1]));
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_broker *B = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *a1 = lb_connect(A, LB_TCP), *a2 = lb_connect(A, LB_UNIX);
	lb_client *b1 = lb_connect(B, LB_TCP), *b2 = lb_connect(B, LB_UNIX);
	lb_client *pa = lb_connect(A, LB_TCP), *pb = lb_connect(B, LB_TCP);

	json_t *kg = acq_now(a1, kept, LB_AO(.ttl_ms = 30000));
	json_t *og[2] = {acq_now(a1, other[0], LB_AO(.ttl_ms = 30000)),
	                 acq_now(b1, other[1], LB_AO(.ttl_ms = 30000))};
	redisReply *r = cl_node_cmd(old, "WAIT 1 5000");
	cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer >= 1, "replica %d did not catch up",
	          rep);
	cr_assert_eq(header_on_replica(rep, kept), 1, "%s is not on the replica", kept);

	cl_pause_replication(rep);
	json_t *lg = acq_now(a2, lost, LB_AO(.ttl_ms = 30000));
	json_t *wid = lb_acq_send(b2, kept, LB_AO(.wait_ms = 60000));
	lb_wait_waiters(pb, kept, 1, 5000);
	cr_assert_eq(cl_lock_exists(old, lost), 1);
	cr_assert_eq(header_on_replica(rep, lost), 0, "%s reached the cut-off replica", lost);
	json_int_t fence_before = lb_int(lg, "fence");

	int64_t t0 = lb_now_ms();
	cl_kill_node(old);
	/* Nothing is left to replicate: the replica may log in again (to the
	 * dead master, or to whoever it follows later). */
	r = cl_node_cmd(rep, "CONFIG SET masteruser %s masterauth %s", "", "");
	cr_assert(r->type == REDIS_REPLY_STATUS, "CONFIG SET masteruser: %s", r->str ? r->str : "?");
	int64_t failover_ms = cl_wait_failover(old, 30000);
	cr_assert_eq(cl_master_of_slot(cl_slot_of(kept)), rep);

	/* Both brokers serve shard 0 again, with no restart. */
	json_t *first = grant_when_served(pa, probe[0], SERVE_AGAIN_MS);
	int64_t served_ms = lb_now_ms() - t0;
	grant_when_served(pb, probe[1], SERVE_AGAIN_MS);
	fprintf(stderr, "cluster_broker: master %d killed: replica %d took over in %lld ms, the "
	                "first grant on it %lld ms after the kill\n",
	        old, rep, (long long)failover_ms, (long long)served_ms);
	cr_assert_gt(lb_int(first, "fence"), fence_before);
	expect_keys_on(rep, probe[0]);

	/* The lease the new master never had: lost, gone. */
	json_t *ev = lb_next_event(a2, 10000);
	cr_assert_not_null(ev, "no lost event for %s, which the new master never had", lost);
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "gone", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lb_str(lg, "lease"), "%s", lb_dump(ev));
	lb_expect_err(release(a2, lb_str(lg, "lease")), "not_held");
	json_t *ls = lb_call(a2, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));

	/* The replicated lease is still held, on the new master, never lost;
	 * the leases of the other masters were never disturbed. */
	cr_assert_null(lb_next_event(a1, 1000), "a holder of a lease the new master has, or of "
	                                       "another master, was told something");
	cr_assert_null(lb_next_event(b1, 0), "the holder on master 2 was told something");
	json_t *e = extend(a1, lb_str(kg, "lease"), 30000);
	cr_assert(lb_is_ok(e), "extend of %s after the failover: %s", kept, lb_dump(e));
	json_t *in = expect_state(pa, kept, "exclusive", 1);
	cr_assert_eq(lb_int(in, "fence"), lb_int(kg, "fence"), "%s", lb_dump(in));
	expect_keys_on(rep, kept);
	for (int k = 0; k < 2; k++) {
		lb_client *c = k ? b1 : a1;
		e = extend(c, lb_str(og[k], "lease"), 30000);
		cr_assert(lb_is_ok(e), "extend of %s (master %d) after the failover: %s", other[k],
		          k + 1, lb_dump(e));
		in = expect_state(pb, other[k], "exclusive", 1);
		cr_assert_eq(lb_int(in, "fence"), lb_int(og[k], "fence"), "%s", lb_dump(in));
		expect_keys_on(m[k + 1], other[k]);
	}
	ls = lb_call(a1, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 2, "%s", lb_dump(ls));

	/* stats: the new master in place of the old, all three up. */
	for (int k = 0; k < 2; k++) {
		lb_client *c = k ? pb : pa;
		json_t *st;
		int64_t end = lb_now_ms() + 10000;
		for (;;) {
			st = lb_stats(c);
			json_t *nm = json_array_size(lb_get(st, "redis_masters")) == CL_MASTERS
			                 ? cl_stats_master(st, rep)
			                 : NULL;
			if (nm && lb_bool(nm, "up") && !cl_stats_master(st, old))
				break;
			cr_assert_lt(lb_now_ms(), end, "broker %d's stats after the failover: %s", k,
			             lb_dump(st));
			lb_sleep_ms(50);
		}
		cl_expect_three_masters(c);
		fprintf(stderr, "cluster_broker: broker %d after the failover: failovers_total %s, "
		                "failover_lost_total %s, lost_total %s\n",
		        k, lb_dump(lb_get(st, "failovers_total")),
		        lb_dump(lb_get(st, "failover_lost_total")), lb_dump(lb_get(st, "lost_total")));
		cr_assert_eq(lb_int(st, "lost_total"), k ? 0 : 1, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "failovers_total"), 1, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "failover_lost_total"), k ? 0 : 1, "%s", lb_dump(st));
	}

	/* The waiter (queued again on the new master) gets "kept" once it is
	 * released, with a fence above every fence before the switch. */
	lb_expect_silent(b2, 0, "the waiter while kept is held");
	cr_assert_eq(lb_release(a1, lb_str(kg, "lease")), 0);
	json_t *g = lb_wait_response(b2, wid, 15000);
	lb_expect_ok(g);
	cr_assert_gt(lb_int(g, "fence"), fence_before);
	cr_assert_eq(lb_release(b2, lb_str(g, "lease")), 0);
	lb_end();
}
