/*
 * test_cluster_follow.c - the broker follows what the cluster does without
 * being told by a request (issue 17): the cluster down (CLUSTERDOWN) is
 * retried within each call's budget, then answered unavailable with no
 * effect, and served again without a restart once the cluster is back; a
 * slot moved while the broker is idle is seen by its periodic read of the
 * map (CLUSTER_REFRESH_MS), with no redirect; a master that loses its data
 * costs only its own leases; the watchdog keeps short leases on every
 * master; a node added as a master, given a slot, then removed again, is
 * served and listed while it serves the slot and dropped after.
 *
 * How the cluster is made to answer CLUSTERDOWN: a master and its replica
 * are frozen (SIGSTOP). After cluster-node-timeout (1 s) the others flag
 * the master PFAIL, then FAIL once a majority of masters agree, and as it
 * serves slots (cluster-require-full-coverage yes, the default) every
 * other node says cluster_state:fail and answers CLUSTERDOWN for every
 * key, the healthy masters' keys too. No failover can end it: the replica
 * is frozen as well. Thawed, the master answers the others' pings, and as
 * it has been FAIL for longer than 2 node timeouts they clear the flag on
 * its first pong and say ok again within milliseconds (the thawed replica
 * may try an election meanwhile; the masters refuse it, since the master
 * is not failing any more in their eyes, and if one did win, the cluster
 * would still be ok). Unlike CLUSTER DELSLOTS on every node (a slot nobody
 * serves), this leaves every node's slot map whole, gossip cannot undo it
 * halfway, and cl_ready mends what a failed test leaves (it thaws every
 * node).
 *
 * Bounds are generous (a loaded 2-core machine, the broker built with
 * sanitizers); nothing here asserts speed. Figures are printed as
 * "cluster_follow: ..." for the record.
 */
#include "tests/cluster/cl.h"
#include "broker/store/cluster_topo.h"

#include <stdio.h>
#include <string.h>

/* LB_AO(...) overrides its own defaults. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* The broker's least budget for a call that meets CLUSTERDOWN or a
 * redirect (REDIRECT_BUDGET_MS in broker/store/cluster.c; a try's own
 * retry_until is as long, TRY_RESOLVE_MS). Its retries back off up to
 * BACKOFF_MAX_MS, and it stops when the next backoff would end past the
 * budget: the answer comes between budget - backoff and the budget. */
#define BUDGET_MS 2000
#define LAST_BACKOFF_MS 200
#define SLACK_MS 100 /* uv_now is the loop's cached time */

/* ---- small helpers ------------------------------------------------------------------- */

/* A try (wait_ms 0) of lock; the whole budget and more to answer. */
static json_t *try_lock(lb_client *c, const char *lock, int ttl_ms)
{
	return lb_acq_call(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = ttl_ms), 15000);
}

/* A try that must be granted; returns the grant. */
static json_t *grant(lb_client *c, const char *lock, int ttl_ms)
{
	json_t *g = try_lock(c, lock, ttl_ms);

	cr_assert(lb_is_ok(g), "acquire %s: %s", lock, lb_dump(g));
	cr_assert(lb_is_lease_token(lb_str(g, "lease")), "%s", lb_dump(g));
	return g;
}

/* Asserts lock is held exclusively by one holder with fence. */
static void expect_held(lb_client *c, const char *lock, json_int_t fence)
{
	json_t *in = lb_inspect(c, lock);

	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), fence, "the fence changed: %s", lb_dump(in));
}

/* A lease on a lock of each master, held by one client. */
typedef struct {
	int m[CL_MASTERS];        /* the masters' ports (cl_masters) */
	char x[CL_MASTERS][32];   /* x[i]: a lock of master i */
	json_t *g[CL_MASTERS];    /* its grant */
} held_t;

/* h takes a lease of ttl_ms (watchdog on) on a lock of each master. */
static void hold_one_each(lb_client *h, int ttl_ms, held_t *e)
{
	cl_masters(e->m);
	for (int i = 0; i < CL_MASTERS; i++) {
		cl_lock_name(i, 0, e->x[i], sizeof(e->x[i]));
		e->g[i] = grant(h, e->x[i], ttl_ms);
		cr_assert_eq(cl_lock_exists(e->m[i], e->x[i]), 1, "%s is not on its master %d",
		             e->x[i], e->m[i]);
	}
}

static json_t *leases_of(lb_client *c)
{
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");

	lb_expect_ok(ls);
	return lb_get(ls, "leases");
}

/* True when every node of ports says cluster_state:want (a node that does
 * not answer within a second says nothing). */
static bool states_are(const int *ports, int n, const char *want)
{
	char field[32];

	snprintf(field, sizeof(field), "cluster_state:%s\r", want);
	for (int i = 0; i < n; i++) {
		redisReply *r = cl_node_try_cmd(ports[i], 1000, "CLUSTER INFO");
		if (!r || r->type != REDIS_REPLY_STRING || !strstr(r->str, field))
			return false;
	}
	return true;
}

/* Waits until every node of ports says cluster_state:want; returns the ms
 * it took, failing the test after timeout_ms. */
static int64_t wait_states(const int *ports, int n, const char *want, int timeout_ms)
{
	int64_t t0 = lb_now_ms();

	while (!states_are(ports, n, want)) {
		cr_assert_lt(lb_now_ms() - t0, timeout_ms,
		             "not every node of the %d says cluster_state:%s after %d ms:%s", n, want,
		             timeout_ms, cl_describe());
		lb_sleep_ms(20);
	}
	return lb_now_ms() - t0;
}

/* ---- 1. the cluster down --------------------------------------------------------------- */

#define DOWN_WITHIN_MS 20000
#define BACK_WITHIN_MS 30000
#define THAW_AFTER_MS 500

/* Shard 2's master and replica frozen: the cluster is down. Tries of
 * locks of the two healthy masters, sent while it is down, answer
 * unavailable once their budget is spent and leave no trace; a try sent
 * while down, with the shard thawed THAW_AFTER_MS later, is granted; then
 * every master is served again, the broker never restarted. */
CL_TEST(cluster_follow, clusterdown_is_retried_within_the_budget_then_unavailable, 120)
{
	int m[CL_MASTERS], healthy[CL_NODES - 2], nhealthy = 0, all[CL_NODES];
	char x[2][32], y[32], probe[CL_MASTERS][32];

	cl_masters(m);
	int frozen_m = m[2], frozen_r = cl_replica_of(frozen_m);
	for (int i = 0; i < CL_NODES; i++) {
		all[i] = cl_node_port(i);
		if (all[i] != frozen_m && all[i] != frozen_r)
			healthy[nhealthy++] = all[i];
	}
	cr_assert_eq(nhealthy, CL_NODES - 2);
	cl_lock_name(0, 0, x[0], sizeof(x[0]));
	cl_lock_name(1, 0, x[1], sizeof(x[1]));
	cl_lock_name(0, 1, y, sizeof(y));
	for (int i = 0; i < CL_MASTERS; i++)
		cl_lock_name(i, 2, probe[i], sizeof(probe[i]));
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *c[2] = {lb_connect(A, LB_TCP), lb_connect(A, LB_UNIX)};
	cl_expect_three_masters(c[0]);

	/* The replica first: it never sees its master fail unfrozen. */
	cl_freeze_node(frozen_r);
	cl_freeze_node(frozen_m);
	int64_t down_ms = wait_states(healthy, nhealthy, "fail", DOWN_WITHIN_MS);
	fprintf(stderr, "cluster_follow: shard 2 (%d, replica %d) frozen: every other node says "
	                "cluster_state:fail after %lld ms\n",
	        frozen_m, frozen_r, (long long)down_ms);
	redisReply *r = cl_node_cmd(m[0], "EXISTS lb:{%s}", x[0]);
	cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "CLUSTERDOWN", 11) == 0,
	          "a healthy master, with the cluster down, answers: %s",
	          r->str ? r->str : "(not an error)");

	/* Down all along: tries on both healthy masters answer unavailable
	 * after the budget. */
	json_t *id[2];
	int64_t t0 = lb_now_ms(), took[2];
	for (int k = 0; k < 2; k++)
		id[k] = lb_acq_send(c[k], x[k], LB_AO(.wait_ms = 0, .ttl_ms = 10000));
	for (int k = 0; k < 2; k++) {
		json_t *a = lb_wait_response(c[k], id[k], 15000);
		took[k] = lb_now_ms() - t0;
		cr_assert(lb_is_err(a, "unavailable"),
		          "a try of %s (master %d) with the cluster down, answered after %lld ms: %s",
		          x[k], m[k], (long long)took[k], lb_dump(a));
		cr_assert_geq(took[k], BUDGET_MS - LAST_BACKOFF_MS - SLACK_MS,
		              "%s answered unavailable after %lld ms: before its budget (%d ms) was "
		              "spent on retries",
		              x[k], (long long)took[k], BUDGET_MS);
		cr_assert_leq(took[k], 4 * BUDGET_MS, "%s answered after %lld ms: long past its budget",
		              x[k], (long long)took[k]);
	}
	cr_assert(states_are(healthy, nhealthy, "fail"),
	          "the cluster came back before the answers:%s", cl_describe());
	fprintf(stderr, "cluster_follow: tries with the cluster down answered unavailable after "
	                "%lld and %lld ms\n",
	        (long long)took[0], (long long)took[1]);

	/* Sent while down, the shard thawed THAW_AFTER_MS later: granted
	 * within its budget. */
	json_t *yid = lb_acq_send(c[0], y, LB_AO(.wait_ms = 0, .ttl_ms = 10000));
	int64_t t1 = lb_now_ms();
	lb_sleep_ms(THAW_AFTER_MS);
	cl_thaw_node(frozen_m);
	cl_thaw_node(frozen_r);
	int64_t thawed = lb_now_ms() - t1;
	json_t *yg = lb_wait_response(c[0], yid, 15000);
	int64_t ytook = lb_now_ms() - t1;
	fprintf(stderr, "cluster_follow: a try sent while down, the shard thawed %lld ms later: "
	                "answered after %lld ms: %s\n",
	        (long long)thawed, (long long)ytook, lb_dump(yg));
	cr_assert(lb_is_ok(yg),
	          "a try sent with the cluster down and the shard thawed %lld ms later (its budget "
	          "%d ms) answered after %lld ms: %s;%s",
	          (long long)thawed, BUDGET_MS, (long long)ytook, lb_dump(yg), cl_describe());

	/* The cluster ok again: every master served, no restart. */
	int64_t ok_ms = wait_states(all, CL_NODES, "ok", BACK_WITHIN_MS);
	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++) {
		json_t *g = lb_acquire_within(c[1], probe[i], 10000, BACK_WITHIN_MS);
		cr_assert(lb_is_ok(g), "%s (master %d) not served %d ms after the cluster was ok: %s",
		          probe[i], m[i], BACK_WITHIN_MS, lb_dump(g));
		cr_assert_eq(cl_lock_exists(m[i], probe[i]), 1);
		cr_assert_eq(lb_release(c[1], lb_str(g, "lease")), 0);
	}
	fprintf(stderr, "cluster_follow: every node ok %lld ms after the thaw; masters now %d %d "
	                "%d\n",
	        (long long)ok_ms, m[0], m[1], m[2]);
	cl_expect_three_masters(c[0]);

	/* The tries that answered unavailable touched nothing. */
	for (int k = 0; k < 2; k++) {
		lb_expect_free(c[1], x[k]);
		cr_assert_eq(cl_lock_exists(m[k], x[k]), 0, "%s, answered unavailable, has keys on %d",
		             x[k], m[k]);
	}
	cr_assert_eq(json_array_size(leases_of(c[1])), 0);
	expect_held(c[1], y, lb_int(yg, "fence"));
	cr_assert_eq(lb_release(c[0], lb_str(yg, "lease")), 0);
	lb_expect_free(c[1], y);
	lb_end();
}

/* ---- 2. a slot moved while the broker is idle ------------------------------------------ */

#define SEEN_WITHIN_MS (CLUSTER_REFRESH_MS + 10000)

/* A slot of master i (cl_masters()[i], on port master) with no key in
 * it (none of the broker's canaries, which a move would redirect), and a
 * lock name in it. */
static int empty_slot(int i, int master, char *name, size_t len)
{
	for (int k = 0; k < 100; k++) {
		int slot = cl_lock_name(i, k, name, len);
		redisReply *r = cl_node_cmd(master, "CLUSTER COUNTKEYSINSLOT %d", slot);
		cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "COUNTKEYSINSLOT on %d: %s", master,
		             r->str ? r->str : "?");
		if (r->integer == 0)
			return slot;
	}
	cr_assert_fail("no empty slot among the first 100 lock names of master %d", master);
	return -1;
}

/* Master 0 gives an empty slot to master 1 while the broker has nothing
 * to do: no request, so no MOVED tells it; only its periodic read of the
 * map can. Then a lock of that slot goes straight to master 1. */
CL_TEST(cluster_follow, a_slot_moved_without_traffic_is_seen_by_the_periodic_refresh, 90)
{
	int m[CL_MASTERS];
	char name[32];

	cl_masters(m);
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *c = lb_connect(A, LB_TCP);
	lb_sleep_ms(1500); /* every canary has written its key */
	int slot = empty_slot(0, m[0], name, sizeof(name));
	json_t *st0 = cl_expect_three_masters(c);
	json_int_t src_slots = lb_int(cl_stats_master(st0, m[0]), "slots");
	json_int_t dst_slots = lb_int(cl_stats_master(st0, m[1]), "slots");
	cr_assert_eq(cl_stats_redirects(st0), 0, "%s", lb_dump(st0));

	int64_t move_ms = cl_move_slot(slot, m[1]);
	int64_t t0 = lb_now_ms();
	json_t *st;
	for (;;) {
		st = cl_expect_three_masters(c);
		if (lb_int(cl_stats_master(st, m[0]), "slots") == src_slots - 1 &&
		    lb_int(cl_stats_master(st, m[1]), "slots") == dst_slots + 1)
			break;
		cr_assert_eq(lb_int(cl_stats_master(st, m[0]), "slots"), src_slots,
		             "slot %d moved %d -> %d, master 0's slots in stats: %s", slot, m[0], m[1],
		             lb_dump(st));
		cr_assert_lt(lb_now_ms() - t0, SEEN_WITHIN_MS,
		             "slot %d moved %d -> %d with no traffic: not in the broker's map after %d "
		             "ms (it reads the map every %d ms): %s",
		             slot, m[0], m[1], SEEN_WITHIN_MS, CLUSTER_REFRESH_MS, lb_dump(st));
		lb_sleep_ms(100);
	}
	int64_t seen_ms = lb_now_ms() - t0;
	fprintf(stderr, "cluster_follow: slot %d moved %d -> %d (%lld ms) with no traffic: in the "
	                "broker's map %lld ms later\n",
	        slot, m[0], m[1], (long long)move_ms, (long long)seen_ms);
	cr_assert_eq(cl_stats_redirects(st), 0, "a redirect with no traffic: %s", lb_dump(st));

	/* A lock of the slot: straight to its new master. */
	json_t *g = grant(c, name, 10000);
	cr_assert_eq(cl_lock_exists(m[1], name), 1, "%s is not on the slot's new master %d", name,
	             m[1]);
	st = cl_expect_three_masters(c);
	cr_assert_eq(cl_stats_redirects(st), 0, "the first request on the moved slot was "
	                                        "redirected: %s", lb_dump(st));
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	lb_expect_free(c, name);
	cr_assert_eq(cl_stats_redirects(cl_expect_three_masters(c)), 0);
	lb_end();
}

/* ---- 3. one master loses its data ------------------------------------------------------ */

#define LOSS_WITHIN_MS 5000
#define QUIET_MS 2000

/* One client holds a lease (watchdog on; ttl 30 s, so no renewal for 10
 * s: only the canary can tell) on a lock of each master; master 1 is
 * flushed (FLUSHALL replicates: its replica is empty too). Its lease is
 * lost (gone); the others are not told anything and are still held, with
 * their fences. */
CL_TEST(cluster_follow, data_loss_on_one_master_loses_only_its_leases, 90)
{
	held_t e;
	const int victim = 1;

	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *h = lb_connect(A, LB_TCP), *c = lb_connect(A, LB_UNIX);
	hold_one_each(h, 30000, &e);
	lb_sleep_ms(1500); /* every master's canary has been checked once */

	redisReply *r = cl_node_cmd(e.m[victim], "FLUSHALL");
	cr_assert(r->type == REDIS_REPLY_STATUS, "FLUSHALL on %d: %s", e.m[victim],
	          r->str ? r->str : "?");
	int64_t t0 = lb_now_ms();
	json_t *ev = lb_next_event(h, LOSS_WITHIN_MS);
	int64_t took = lb_now_ms() - t0;
	cr_assert_not_null(ev, "no event within %d ms of FLUSHALL on master %d", LOSS_WITHIN_MS,
	                   e.m[victim]);
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "gone", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lb_str(e.g[victim], "lease"),
	                 "a lease of another master than the flushed one is lost: %s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lock"), e.x[victim], "%s", lb_dump(ev));
	fprintf(stderr, "cluster_follow: FLUSHALL on master %d: lost(gone) of its lease %lld ms "
	                "later\n",
	        e.m[victim], (long long)took);
	ev = lb_next_event(h, QUIET_MS);
	cr_assert_null(ev, "a second event after one master's data loss: %s", lb_dump(ev));

	/* The flushed master's lease is gone; its lock is free and its fence
	 * goes on above the lost one's. */
	lb_expect_err(lb_call(h, "{s:s, s:s}", "op", "release", "lease", lb_str(e.g[victim], "lease")),
	              "not_held");
	lb_expect_free(c, e.x[victim]);
	json_t *again = grant(c, e.x[victim], 10000);
	cr_assert_gt(lb_int(again, "fence"), lb_int(e.g[victim], "fence"),
	             "the fence went back after the data loss: %s after %s", lb_dump(again),
	             lb_dump(e.g[victim]));
	cr_assert_eq(lb_release(c, lb_str(again, "lease")), 0);

	/* The other masters' leases: listed, held, extended, fences kept. */
	json_t *ls = leases_of(h);
	cr_assert_eq(json_array_size(ls), CL_MASTERS - 1, "%s", lb_dump(ls));
	for (int i = 0; i < CL_MASTERS; i++) {
		if (i == victim)
			continue;
		json_t *ext = lb_call(h, "{s:s, s:s, s:i}", "op", "extend", "lease",
		                      lb_str(e.g[i], "lease"), "ttl_ms", 20000);
		cr_assert(lb_is_ok(ext), "extend of %s (master %d) after master %d lost its data: %s",
		          e.x[i], e.m[i], e.m[victim], lb_dump(ext));
		expect_held(c, e.x[i], lb_int(e.g[i], "fence"));
		cr_assert_eq(cl_lock_exists(e.m[i], e.x[i]), 1);
	}
	json_t *st = lb_stats(c);
	cr_assert_eq(lb_int(st, "lost_total"), 1, "%s", lb_dump(st));
	for (int i = 0; i < CL_MASTERS; i++)
		if (i != victim)
			cr_assert_eq(lb_release(h, lb_str(e.g[i], "lease")), 0);
	lb_expect_silent(h, 0, "the holder after its releases");
	lb_end();
}

/* ---- 4. the watchdog on every master --------------------------------------------------- */

#define HOLD_MS 4000
#define SHORT_TTL_MS 1000

/* Leases of 1 s on a lock of each master, renewed by broker A's watchdog
 * for 4 s: never lost, and broker B's tries are refused all along. */
CL_TEST(cluster_follow, watchdog_keeps_leases_on_every_master, 90)
{
	held_t e;

	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_broker *B = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *h = lb_connect(A, LB_TCP), *o = lb_connect(B, LB_TCP);
	hold_one_each(h, SHORT_TTL_MS, &e);
	int64_t t0 = lb_now_ms();
	int rounds = 0;
	while (lb_now_ms() - t0 < HOLD_MS) {
		for (int i = 0; i < CL_MASTERS; i++) {
			json_t *t = try_lock(o, e.x[i], 10000);
			cr_assert(lb_is_err(t, "timeout"),
			          "broker B's try of %s (master %d), %lld ms into a hold of 1 s leases: %s",
			          e.x[i], e.m[i], (long long)(lb_now_ms() - t0), lb_dump(t));
		}
		json_t *ev = lb_next_event(h, 0);
		cr_assert_null(ev, "%lld ms into the hold: %s", (long long)(lb_now_ms() - t0),
		               lb_dump(ev));
		rounds++;
		lb_sleep_ms(100);
	}
	fprintf(stderr, "cluster_follow: %d rounds of tries on broker B in %d ms of 1 s leases\n",
	        rounds, HOLD_MS);
	cr_assert_gt(rounds, 3, "only %d rounds of tries in %d ms", rounds, HOLD_MS);
	for (int i = 0; i < CL_MASTERS; i++) {
		expect_held(o, e.x[i], lb_int(e.g[i], "fence"));
		cr_assert_eq(cl_lock_exists(e.m[i], e.x[i]), 1);
	}
	cr_assert_eq(json_array_size(leases_of(h)), CL_MASTERS);
	cr_assert_null(lb_next_event(h, 0), "the holder was told something");
	for (int i = 0; i < CL_MASTERS; i++) {
		cr_assert_eq(lb_release(h, lb_str(e.g[i], "lease")), 0);
		lb_expect_free(o, e.x[i]);
	}
	cr_assert_eq(lb_int(lb_stats(h), "lost_total"), 0);
	lb_end();
}

/* ---- 5. a node added, then removed ----------------------------------------------------- */

#define MAP_WITHIN_MS (CLUSTER_REFRESH_MS + 10000)
#define ADDED_TTL_MS 30000

/* True when stats' redis_masters has n entries, all up, whose slots add
 * up to 16384 (so it is a map the broker read: a MOVED alone changes the
 * owner of one slot, not the counts), and the entry of port has slots
 * (slots 0: port is not listed). */
static bool masters_are(json_t *st, size_t n, int port, json_int_t slots)
{
	json_t *e = cl_stats_master(st, port), *m;
	json_int_t sum = 0;
	bool up = true;
	size_t k;

	json_array_foreach(lb_get(st, "redis_masters"), k, m) {
		up = up && lb_bool(m, "up");
		sum += lb_int(m, "slots");
	}
	return json_array_size(lb_get(st, "redis_masters")) == n && up && sum == SLOT_COUNT &&
	       (slots ? e && lb_int(e, "slots") == slots : !e);
}

/* stats of c's broker once masters_are(n, port, slots); fails after
 * MAP_WITHIN_MS. */
static json_t *wait_masters(lb_client *c, size_t n, int port, json_int_t slots)
{
	int64_t t0 = lb_now_ms();
	json_t *st;

	while (!masters_are(st = lb_stats(c), n, port, slots)) {
		cr_assert_lt(lb_now_ms() - t0, MAP_WITHIN_MS,
		             "the broker does not list %zu masters, all up, %d with %lld slots, after "
		             "%d ms (it reads the map every %d ms): %s;%s",
		             n, port, (long long)slots, MAP_WITHIN_MS, CLUSTER_REFRESH_MS, lb_dump(st),
		             cl_describe());
		lb_sleep_ms(100);
	}
	cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
	return st;
}

/* h's grant g on lock is extended, and c sees the lock held with g's
 * fence; when says where the slot is. */
static void expect_extends(lb_client *h, lb_client *c, const char *lock, json_t *g,
                           const char *when)
{
	json_t *ext = lb_call(h, "{s:s, s:s, s:i}", "op", "extend", "lease", lb_str(g, "lease"),
	                      "ttl_ms", ADDED_TTL_MS);

	cr_assert(lb_is_ok(ext), "extend of the lease on %s %s: %s", lock, when, lb_dump(ext));
	expect_held(c, lock, lb_int(g, "fence"));
}

/* Master 0's replica R is taken out of the cluster and added again as a
 * new master without slots (cl_add_as_new_master), broker A running since
 * before; then a slot of master 0 on which h holds a lease moves to R.
 * A serves the slot on R (the lease's keys went there; a new lock of the
 * slot is granted there) and, once it has read the map (after the MOVED,
 * or its periodic read), lists four masters, R up with its one slot. Then
 * R is removed: the slot goes back to master 0, R turns into its replica
 * again; A lists three masters, R no more, and serves the slot on master
 * 0. h's lease lives through both moves: extended, its fence kept, never
 * reported lost. */
CL_TEST(cluster_follow, a_node_added_and_removed_is_followed, 150)
{
	int m[CL_MASTERS];
	char x[32], y[1][32];

	cl_masters(m);
	const int M = m[0], R = cl_replica_of(M);
	int slot = cl_lock_name(0, 0, x, sizeof(x));
	cl_names_in_slot(slot, "added-", 1, y);
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *h = lb_connect(A, LB_TCP), *c = lb_connect(A, LB_UNIX);
	json_t *st = cl_expect_three_masters(c);
	json_int_t m_slots = lb_int(cl_stats_master(st, M), "slots");
	json_t *g = grant(h, x, ADDED_TTL_MS);
	cr_assert_eq(cl_lock_exists(M, x), 1, "%s is not on its master %d", x, M);

	/* Added: a master without slots, which no map lists. */
	int64_t add_ms = cl_add_as_new_master(R);
	cr_assert_str_eq(cl_node_role(R), "master");
	st = cl_expect_three_masters(c);
	cr_assert_null(cl_stats_master(st, R), "a master without slots in stats: %s", lb_dump(st));
	int64_t in_ms = cl_move_slot(slot, R);
	cr_assert_eq(cl_lock_exists(R, x), 1, "%s did not move to %d with its slot %d", x, R, slot);

	/* Served on R. */
	int64_t t0 = lb_now_ms();
	json_t *gy = grant(c, y[0], 10000);
	cr_assert_eq(cl_lock_exists(R, y[0]), 1, "%s (slot %d) is not on %d, the slot's master", y[0],
	             slot, R);
	expect_held(c, y[0], lb_int(gy, "fence"));
	expect_extends(h, c, x, g, "on the added master");
	st = wait_masters(c, CL_MASTERS + 1, R, 1);
	int64_t four_ms = lb_now_ms() - t0;
	cr_assert_eq(lb_int(cl_stats_master(st, M), "slots"), m_slots - 1, "%s", lb_dump(st));
	for (int i = 1; i < CL_MASTERS; i++)
		cr_assert_not_null(cl_stats_master(st, m[i]), "master %d is not in stats: %s", m[i],
		                   lb_dump(st));
	cr_assert_eq(lb_release(c, lb_str(gy, "lease")), 0);

	/* Removed: the slot back home, R a replica again. */
	int64_t out_ms = cl_move_slot(slot, M);
	cr_assert_eq(cl_lock_exists(M, x), 1, "%s did not move back to %d with its slot %d", x, M,
	             slot);
	cr_assert_eq(cl_lock_exists(M, y[0]), 1, "the header of %s did not move back to %d", y[0],
	             M);
	int64_t rep_ms = cl_make_replica(R, M);
	t0 = lb_now_ms();
	wait_masters(c, CL_MASTERS, R, 0);
	int64_t three_ms = lb_now_ms() - t0;
	st = cl_expect_three_masters(c);
	cr_assert_eq(lb_int(cl_stats_master(st, M), "slots"), m_slots, "%s", lb_dump(st));
	cr_assert_eq(cl_replica_of(M), R);

	/* Served on M. */
	gy = grant(c, y[0], 10000);
	cr_assert_eq(cl_lock_exists(M, y[0]), 1);
	expect_extends(h, c, x, g, "back on its first master");
	cr_assert_null(lb_next_event(h, 0), "the holder was told something");
	cr_assert_eq(lb_release(c, lb_str(gy, "lease")), 0);
	cr_assert_eq(lb_release(h, lb_str(g, "lease")), 0);
	lb_expect_free(c, x);
	lb_expect_free(c, y[0]);
	st = lb_stats(c);
	cr_assert_eq(lb_int(st, "lost_total"), 0, "%s", lb_dump(st));
	fprintf(stderr, "cluster_follow: %d added as a master in %lld ms; slot %d moved to it in "
	                "%lld ms, four masters in stats %lld ms after; moved back in %lld ms, %d a "
	                "replica again in %lld ms, three masters in stats %lld ms after\n",
	        R, (long long)add_ms, slot, (long long)in_ms, (long long)four_ms, (long long)out_ms, R,
	        (long long)rep_ms, (long long)three_ms);
	lb_end();
}
