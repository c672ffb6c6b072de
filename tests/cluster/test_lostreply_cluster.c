/*
 * test_lostreply_cluster.c - lost replies on Redis Cluster (issue 26, point
 * 9): "`unavailable` must mean 'no effect', and no `not_held` without
 * `lost`."
 *
 * The technique of tests/integration/test_lostreply.c (tests/common/
 * cutreply.h) on the master of the lock's slot: it sleeps (DEBUG SLEEP 0.6,
 * below cluster-node-timeout, so no failover starts), the client's request
 * is written to it, and the broker's command connections to it are killed
 * by a connection that wrote CLIENT KILL after the broker wrote the
 * script: the script runs, its reply is lost. The broker has to find out
 * what happened and answer exactly that:
 *
 *   release (1 -> 0)   ok, count 0; the lock is free; a second release
 *                      not_held
 *   release of 1 of 2  ok, count 1; still held at count 1; one more frees it
 *   extend             ok; the lease lives past its old end
 *   re-entry           ok, count 2; two releases free it
 *   try (wait_ms 0)    ok and held, or timeout and the lock free at once
 *
 * and the holder never hears an event. Each is run on a lock of the first
 * master (the other two masters keep serving meanwhile). The stall: the
 * master is stopped (SIGSTOP) for 3 s, past the broker's 2 s command
 * timeout, with a release in flight; every node's cluster-node-timeout is
 * raised for it (put back at the end, and by the test's fini), so this is a
 * stall and not a failover. The release answers ok, count 0, and the lock
 * is free.
 */
#include "tests/cluster/cl.h"
#include "tests/cluster/ctopo.h"
#include "tests/common/cutreply.h"

#include <signal.h>

static char lock_name[32];

/* A broker on the cluster, its two clients, a lock of master 0 and that
 * master's port. */
static void cl_case(cut_case *k)
{
	lb_broker *b = lb_broker_start_url(cl_seed_url(), NULL);
	int slot = cl_lock_name(0, 0, lock_name, sizeof(lock_name));

	k->a = lb_connect(b, LB_TCP);
	k->o = lb_connect(b, LB_TCP);
	k->lock = lock_name;
	k->ports[0] = cl_master_of_slot(slot);
	k->nports = 1;
	k->sleep_ms = 600;
	k->broker_pid = lb_broker_pid(b);
}

CL_TEST(lostreply_cluster, a_release_whose_reply_was_cut_answers_released, 120)
{
	cut_case k = {0};

	cl_case(&k);
	cut_case_release(&k);
	lb_end();
}

CL_TEST(lostreply_cluster, a_release_of_one_level_whose_reply_was_cut_counts_once, 120)
{
	cut_case k = {0};

	cl_case(&k);
	cut_case_release_level(&k);
	lb_end();
}

CL_TEST(lostreply_cluster, an_extend_whose_reply_was_cut_answers_extended, 120)
{
	cut_case k = {0};

	cl_case(&k);
	cut_case_extend(&k);
	lb_end();
}

CL_TEST(lostreply_cluster, a_reentry_whose_reply_was_cut_counts_once, 120)
{
	cut_case k = {0};

	cl_case(&k);
	cut_case_reentry(&k);
	lb_end();
}

CL_TEST(lostreply_cluster, a_try_whose_reply_was_cut_holds_or_leaves_free, 120)
{
	cut_case k = {0};

	cl_case(&k);
	cut_case_try(&k);
	lb_end();
}

/* ---- the stall ------------------------------------------------------------- */

static int frozen_port;

/* CONFIG SET cluster-node-timeout on every running node, on connections of
 * its own (no cl_* call while a node may be frozen); no assertion (also
 * used by the fini). Returns how many nodes took it. */
static int node_timeout_all(int ms)
{
	int took = 0;

	for (int i = 0; i < CL_NODES; i++) {
		struct timeval tv = {.tv_sec = 2};
		redisContext *c = redisConnectWithTimeout("127.0.0.1", cl_node_port(i), tv);
		redisReply *r = NULL;
		if (c && !c->err) {
			redisSetTimeout(c, tv);
			r = redisCommand(c, "CONFIG SET cluster-node-timeout %d", ms);
			took += r && r->type == REDIS_REPLY_STATUS;
		}
		if (r)
			freeReplyObject(r);
		if (c)
			redisFree(c);
	}
	return took;
}

static void freeze(void *arg)
{
	frozen_port = *(int *)arg;
	cl_freeze_node(frozen_port);
}

static void thaw(void *arg)
{
	(void)arg;
	cl_thaw_node(frozen_port);
	frozen_port = 0;
}

/* Thaws what the test left frozen and puts the node timeout back before
 * cl_teardown (cl_ready of the next test mends the rest). */
static void stall_fini(void)
{
	if (frozen_port > 0 && cl_node_pid(frozen_port) > 0)
		kill(cl_node_pid(frozen_port), SIGCONT);
	frozen_port = 0;
	node_timeout_all(CTOPO_NODE_TIMEOUT_MS);
	cl_teardown();
}

/* A case with the lock's master frozen for 3 s instead of its reply cut;
 * the cluster must not fail over meanwhile. */
#define CL_STALL_TEST(name, body)                                                        \
	Test(lostreply_cluster, name, .init = cl_setup, .fini = stall_fini, .timeout = 120) \
	{                                                                                  \
		cut_case k = {0};                                                              \
		cl_case(&k);                                                                   \
		k.freeze = freeze;                                                             \
		k.thaw = thaw;                                                                 \
		k.arg = &k.ports[0];                                                           \
		cr_assert_eq(node_timeout_all(30000), CL_NODES);                               \
		body(&k);                                                                      \
		cr_assert_eq(cl_master_of_slot(cl_slot_of(k.lock)), k.ports[0],                \
		             "the cluster failed over during the stall");                      \
		cr_assert_eq(node_timeout_all(CTOPO_NODE_TIMEOUT_MS), CL_NODES);               \
		lb_end();                                                                      \
	}

CL_STALL_TEST(a_release_through_a_stall_answers_released, cut_case_stall)
CL_STALL_TEST(a_release_of_one_level_through_a_stall_counts_once, cut_case_release_level)
CL_STALL_TEST(an_extend_through_a_stall_answers_extended, cut_case_extend)
CL_STALL_TEST(a_reentry_through_a_stall_counts_once, cut_case_reentry)
CL_STALL_TEST(a_try_through_a_stall_holds_or_leaves_free, cut_case_try)

/* The same stall with the cluster's own timing: the lock's master is
 * stopped with a release in flight until its replica took over (the
 * replica has the lease: it was granted long before). The broker
 * follows, the release is sent again to the new master: ok, count 0, the
 * lock free, no event. */
Test(lostreply_cluster, a_release_through_a_stall_that_fails_over_answers_released, .init = cl_setup,
     .fini = stall_fini, .timeout = 120)
{
	cut_case k = {0};
	const char *lease;
	json_t *id, *rl;
	int rep;

	cl_case(&k);
	lease = lb_str(cut_grant(&k, 30000, true), "lease");
	rep = cl_replica_of(k.ports[0]);
	/* READONLY on cl's connection: EXISTS on the replica answers (no MOVED). */
	cr_assert_eq(cl_node_cmd(rep, "READONLY")->type, REDIS_REPLY_STATUS);
	for (int64_t end = lb_now_ms() + 5000; cl_lock_exists(rep, k.lock) != 1;) {
		cr_assert_lt(lb_now_ms(), end, "the replica never had the lease");
		lb_sleep_ms(10);
	}
	freeze(&k.ports[0]);
	id = lb_send_req(k.a, "{s:s, s:s}", "op", "release", "lease", lease);
	cl_wait_failover(k.ports[0], 30000);
	rl = lb_wait_response(k.a, id, CUT_ANSWER_MS);
	thaw(NULL);
	cr_assert(lb_is_ok(rl), "a release through a stall and a failover answered %s", lb_dump(rl));
	cr_assert_eq(lb_int(rl, "count"), 0, "%s", lb_dump(rl));
	cut_no_event(&k, 300);
	cut_expect_free(&k, 10000);
	cut_expect_not_held(&k, lease);
	cut_no_event(&k, 300);
	lb_end();
}

/* ---- a detached lease ------------------------------------------------------ */

static int lock_master;

/* The token's pointer (PREFIX lease:{TOKEN}) is on another master than
 * the lock: the cut of the lock's master then reaches the release script,
 * not the pointer's lookup before it. */
static bool pointer_elsewhere(const char *token)
{
	return cl_master_of_slot(cl_slot_of(token)) != lock_master;
}

CL_TEST(lostreply_cluster, a_detached_release_whose_reply_was_cut_answers_released, 120)
{
	cut_case k = {0};

	cl_case(&k);
	lock_master = k.ports[0];
	cut_case_detached_release(&k, pointer_elsewhere);
	lb_end();
}
