/*
 * test_cluster_batch.c - batches on Redis Cluster (issue 29, point 3):
 * the calls one master's connection gets in one loop turn go as one
 * script call (lua/batch_slots.lua) although their locks live in several
 * slots of that master; a call of a batch whose slot that master does not
 * serve now (moved, or open mid-move) runs nowhere in the batch (LBSLOT),
 * goes again alone, follows MOVED or ASK, and is answered as alone; the
 * others of the batch are answered at once.
 *
 * "--pool 1" puts every call of a broker to one master on one connection,
 * so the calls of one pipelined write meet in one batch.
 */
#include "tests/cluster/cl.h"

#include <stdio.h>
#include <string.h>

#define NLOCKS 8

static long long evalsha_calls(int port)
{
	return lb_info_number(cl_node_cmd(port, "INFO commandstats"), "cmdstat_evalsha:calls=");
}

/* One write of n acquires (wait_ms 0) of names[0..n-1]; their answers. */
static void acquire_all_at_once(lb_client *c, char names[][32], int n, json_t **out)
{
	char lines[4096] = "";
	size_t len = 0;

	for (int k = 0; k < n; k++)
		len += (size_t)snprintf(lines + len, sizeof(lines) - len,
		                        "{\"id\":%d,\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0,"
		                        "\"ttl_ms\":30000}\n",
		                        k + 1, names[k]);
	lb_pipeline(c, lines, out, n, 15000);
}

/* One write of the releases of the n leases in g. */
static void release_all_at_once(lb_client *c, json_t **g, int n)
{
	char lines[4096] = "";
	json_t *out[NLOCKS];
	size_t len = 0;

	for (int k = 0; k < n; k++)
		len += (size_t)snprintf(lines + len, sizeof(lines) - len,
		                        "{\"id\":%d,\"op\":\"release\",\"lease\":\"%s\"}\n", k + 1,
		                        lb_str(g[k], "lease"));
	lb_pipeline(c, lines, out, n, 15000);
	for (int k = 0; k < n; k++) {
		cr_assert(lb_is_ok(out[k]), "release %d: %s", k, lb_dump(out[k]));
		cr_assert_eq(lb_int(out[k], "count"), 0, "release %d: %s", k, lb_dump(out[k]));
	}
}

/* NLOCKS acquires then NLOCKS releases of locks of master m, each set in
 * one write; the script calls m ran for them. */
static long long run_on_master(lb_broker *b, int m, char names[][32])
{
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *g[NLOCKS];
	long long before = evalsha_calls(m);

	acquire_all_at_once(c, names, NLOCKS, g);
	for (int k = 0; k < NLOCKS; k++) {
		cr_assert(lb_is_ok(g[k]), "acquire %d: %s", k, lb_dump(g[k]));
		cr_assert_eq(lb_int(g[k], "count"), 1);
	}
	release_all_at_once(c, g, NLOCKS);
	return evalsha_calls(m) - before;
}

CL_TEST(cluster_batch, calls_of_several_slots_of_a_master_go_as_one_script_call, 90)
{
	int m[CL_MASTERS], slots[NLOCKS], distinct = 0;
	char names[NLOCKS][32];

	cl_masters(m);
	for (int k = 0; k < NLOCKS; k++) {
		slots[k] = cl_lock_name(0, k, names[k], sizeof(names[k]));
		bool seen = false;
		for (int j = 0; j < k; j++)
			seen |= slots[j] == slots[k];
		distinct += !seen;
	}
	cr_assert_geq(distinct, 4, "the names share too few slots to test: %d", distinct);

	lb_broker *on = lb_broker_start_url(cl_seed_url(), "--pool", "1", NULL);
	lb_broker *off = lb_broker_start_url(cl_seed_url(), "--pool", "1", "--redis-batch-max", "0", NULL);
	long long with = run_on_master(on, m[0], names), without = run_on_master(off, m[0], names);

	fprintf(stderr, "cluster_batch: %d acquires + %d releases of %d slots of one master in two "
	        "writes: %lld script calls with batches, %lld without\n",
	        NLOCKS, NLOCKS, distinct, with, without);
	cr_assert_geq(without, 2 * NLOCKS, "each call alone: %lld", without);
	cr_assert_leq(with, NLOCKS, "no batch across slots was made: %lld script calls for %d lock "
	              "calls", with, 2 * NLOCKS);
	lb_end();
}

/* A lock whose slot moved to another master (the broker's map does not
 * know yet) in one write with locks that stayed: the batch on the old
 * master runs nothing of it; alone it hears MOVED and is granted on the
 * new master; the others are granted where they are. Exclusion holds
 * across it: a second acquire of the moved lock is busy. */
CL_TEST(cluster_batch, a_call_whose_slot_moved_goes_again_alone_and_follows_moved, 90)
{
	int m[CL_MASTERS];
	char names[4][32];

	cl_masters(m);
	for (int k = 0; k < 4; k++)
		cl_lock_name(0, k, names[k], sizeof(names[k]));
	lb_broker *b = lb_broker_start_url(cl_seed_url(), "--pool", "1", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);
	/* The broker knows every master's pool before the move. */
	cl_expect_three_masters(o);
	json_int_t redirects = cl_stats_redirects(lb_stats(o));

	cl_move_slot(cl_slot_of(names[1]), m[1]);
	json_t *g[4];
	acquire_all_at_once(c, names, 4, g);
	for (int k = 0; k < 4; k++) {
		cr_assert(lb_is_ok(g[k]), "acquire of %s: %s", names[k], lb_dump(g[k]));
		cr_assert_eq(lb_int(g[k], "count"), 1, "%s", lb_dump(g[k]));
	}
	cr_assert_gt(cl_stats_redirects(lb_stats(o)) - redirects, 0,
	             "the moved lock's call met no MOVED: it was not sent again alone");
	cr_assert_eq(cl_lock_exists(m[1], names[1]), 1, "the moved lock is not on its new master");
	cr_assert_eq(cl_lock_exists(m[0], names[0]), 1);
	json_t *again = lb_try_acquire(o, names[1], 30000);
	cr_assert(lb_is_err(again, "timeout"), "the moved lock was granted twice: %s", lb_dump(again));
	json_t *in = lb_inspect(o, names[1]);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	release_all_at_once(c, g, 4);
	for (int k = 0; k < 4; k++)
		lb_expect_free(o, names[k]);
	lb_end();
}

/* A release of a lock whose slot is held open mid-move (its keys on the
 * target: the source has none of them) in one write with an acquire of a
 * lock of another slot of the same master: the acquire is answered at
 * once; the release runs nowhere until the move ends (ASK, then TRYAGAIN
 * on the target: a lock script runs on no side of a moving slot), then
 * once, and the lock is free on its new master. */
CL_TEST(cluster_batch, a_release_in_a_batch_waits_through_a_move_and_runs_once, 90)
{
	int m[CL_MASTERS];
	char lock[32], other[32];
	char lines[1024];

	cl_masters(m);
	int slot = cl_lock_name(0, 0, lock, sizeof(lock));
	for (int k = 1; cl_lock_name(0, k, other, sizeof(other)) == slot; k++)
		;
	lb_broker *b = lb_broker_start_url(cl_seed_url(), "--pool", "1", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(c, lock, 30000);

	cr_assert_eq(cl_move_slot_begin(slot, m[1]), m[0]);
	cr_assert_gt(cl_move_slot_keys(slot, -1), 0, "the lock's keys were not on its master");
	snprintf(lines, sizeof(lines),
	         "{\"id\":1,\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":2,\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0,\"ttl_ms\":30000}\n",
	         lease, other);
	cr_assert(lb_send_raw(c, lines, strlen(lines)));
	json_t *two = json_integer(2), *one = json_integer(1);
	json_t *g = lb_wait_response(c, two, 5000);
	cr_assert_not_null(g, "the acquire of another slot waited for the moving one");
	lb_expect_ok(g);
	lb_sleep_ms(300);
	cr_assert_null(lb_poll_response(c, one, 1), "the release was answered while its slot moved");
	cl_move_slot_end(slot);
	json_t *rel = lb_wait_response(c, one, 10000);
	json_decref(one);
	json_decref(two);
	cr_assert_not_null(rel, "no answer to the release after the move");
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	cr_assert(lb_is_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held"), "a second release found it held");
	lb_expect_free(o, lock);
	cr_assert_eq(cl_lock_exists(m[1], lock), 1, "the lock is not on its new master");
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	lb_end();
}
