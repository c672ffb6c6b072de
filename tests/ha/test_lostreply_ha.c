/*
 * test_lostreply_ha.c - lost replies on Redis Sentinel (issue 26, point 9):
 * "`unavailable` must mean 'no effect', and no `not_held` without `lost`."
 *
 * The technique of tests/integration/test_lostreply.c (tests/common/
 * cutreply.h) on the master the sentinels name: the master sleeps (DEBUG
 * SLEEP 0.6, below the sentinels' down-after-milliseconds of 1000, so no
 * failover starts), the client's request is written to it, and the
 * broker's command connections to it are killed by a connection that wrote
 * CLIENT KILL after the broker wrote the script: the script runs, its reply
 * is lost. The broker has to find out what happened and answer exactly
 * that:
 *
 *   release (1 -> 0)   ok, count 0; the lock is free; a second release
 *                      not_held
 *   release of 1 of 2  ok, count 1; still held at count 1; one more frees it
 *   extend             ok; the lease lives past its old end
 *   re-entry           ok, count 2; two releases free it
 *   try (wait_ms 0)    ok and held, or timeout and the lock free at once
 *
 * and the holder never hears an event. The stall: the master is stopped
 * (SIGSTOP) for 3 s, past the broker's 2 s command timeout, with a release
 * in flight; the sentinels' down-after-milliseconds is raised for it (put
 * back at the end, and by the test's fini), so this is a stall and not a
 * failover. The release answers ok, count 0, and the lock is free.
 */
#include "tests/common/cutreply.h"
#include "tests/ha/ha.h"
#include "tests/ha/topo.h"

#include <signal.h>

/* A broker on the sentinels, its two clients, and the master's port. */
static void ha_case(cut_case *k, const char *lock)
{
	lb_broker *b = lb_broker_start_url(ha_sentinel_url(NULL), NULL);

	k->a = lb_connect(b, LB_TCP);
	k->o = lb_connect(b, LB_TCP);
	k->lock = lock;
	k->ports[0] = ha_master_port();
	k->nports = 1;
	k->sleep_ms = 600;
	k->broker_pid = lb_broker_pid(b);
}

HA_TEST(lostreply_ha, a_release_whose_reply_was_cut_answers_released, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-rel");
	cut_case_release(&k);
	lb_end();
}

HA_TEST(lostreply_ha, a_release_of_one_level_whose_reply_was_cut_counts_once, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-lvl");
	cut_case_release_level(&k);
	lb_end();
}

HA_TEST(lostreply_ha, an_extend_whose_reply_was_cut_answers_extended, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-ext");
	cut_case_extend(&k);
	lb_end();
}

HA_TEST(lostreply_ha, a_reentry_whose_reply_was_cut_counts_once, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-re");
	cut_case_reentry(&k);
	lb_end();
}

HA_TEST(lostreply_ha, a_try_whose_reply_was_cut_holds_or_leaves_free, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-try");
	cut_case_try(&k);
	lb_end();
}

/* The release of a detached lease: the pointer's lookup is answered, the
 * release script's reply is cut. */
HA_TEST(lostreply_ha, a_detached_release_whose_reply_was_cut_answers_released, 90)
{
	cut_case k = {0};

	ha_case(&k, "lr-det");
	cut_case_detached_release(&k, NULL);
	lb_end();
}

/* ---- the stall ------------------------------------------------------------- */

static int frozen_port;

static void sentinels_down_after(int ms)
{
	for (int i = 0; i < 3; i++) {
		redisReply *x = ha_sentinel_cmd(i, "SENTINEL SET %s down-after-milliseconds %d",
		                                ha_master_name(), ms);
		cr_assert_eq(x->type, REDIS_REPLY_STATUS, "sentinel %d: SET: %s", i, x->str);
	}
}

static void freeze(void *arg)
{
	(void)arg;
	frozen_port = ha_master_port();
	cr_assert_eq(kill(ha_node_pid(frozen_port), SIGSTOP), 0);
}

static void thaw(void *arg)
{
	(void)arg;
	cr_assert_eq(kill(ha_node_pid(frozen_port), SIGCONT), 0);
	frozen_port = 0;
}

/* Thaws what the test left frozen and puts the sentinels' timing back
 * before ha_teardown (assertions here are not reported: Criterion ignores
 * them in .fini; ha_ready of the next test checks the topology). */
static void stall_fini(void)
{
	if (frozen_port > 0 && ha_node_pid(frozen_port) > 0)
		kill(ha_node_pid(frozen_port), SIGCONT);
	frozen_port = 0;
	for (int i = 0; i < 3; i++) {
		struct timeval tv = {.tv_sec = 2};
		redisContext *c = redisConnectWithTimeout("127.0.0.1", ha_sentinel_port(i), tv);
		if (c && !c->err) {
			redisSetTimeout(c, tv);
			freeReplyObject(redisCommand(c, "SENTINEL SET %s down-after-milliseconds %d",
			                             ha_master_name(), TOPO_DOWN_AFTER_MS));
		}
		if (c)
			redisFree(c);
	}
	ha_teardown();
}

/* A case with the master frozen for 3 s instead of its reply cut; the
 * sentinels must not fail over meanwhile. */
#define HA_STALL_TEST(name, body, lock)                                                  \
	Test(lostreply_ha, name, .init = ha_setup, .fini = stall_fini, .timeout = 90)       \
	{                                                                                  \
		cut_case k = {0};                                                              \
		ha_case(&k, lock);                                                             \
		k.freeze = freeze;                                                             \
		k.thaw = thaw;                                                                 \
		sentinels_down_after(30000);                                                   \
		body(&k);                                                                      \
		cr_assert_eq(ha_master_port(), k.ports[0], "the sentinels failed over");      \
		sentinels_down_after(TOPO_DOWN_AFTER_MS);                                      \
		lb_end();                                                                      \
	}

HA_STALL_TEST(a_release_through_a_stall_answers_released, cut_case_stall, "lr-stall")
HA_STALL_TEST(a_release_of_one_level_through_a_stall_counts_once, cut_case_release_level, "lr-stall-lvl")
HA_STALL_TEST(an_extend_through_a_stall_answers_extended, cut_case_extend, "lr-stall-ext")
HA_STALL_TEST(a_reentry_through_a_stall_counts_once, cut_case_reentry, "lr-stall-re")
HA_STALL_TEST(a_try_through_a_stall_holds_or_leaves_free, cut_case_try, "lr-stall-try")

/* The same stall with the sentinels' own timing: they fail over while the
 * master is stopped with the release in flight (the replica has the
 * lease: it was granted long before). The broker follows, the release is
 * sent again to the new master: ok, count 0, the lock free, no event. The
 * old master is thawed after the failover (its copy of the release then
 * runs there, before the sentinels demote it). */
Test(lostreply_ha, a_release_through_a_stall_that_fails_over_answers_released, .init = ha_setup,
     .fini = stall_fini, .timeout = 120)
{
	cut_case k = {0};
	const char *lease;
	json_t *id, *rl;
	char key[64];

	ha_case(&k, "lr-stall-fo");
	lease = lb_str(cut_grant(&k, 30000, true), "lease");
	snprintf(key, sizeof(key), "lb:{%s}", k.lock);
	for (int64_t end = lb_now_ms() + 5000; !ha_node_has_key(ha_replica_port(), key);) {
		cr_assert_lt(lb_now_ms(), end, "the replica never had the lease");
		lb_sleep_ms(10);
	}
	freeze(NULL);
	id = lb_send_req(k.a, "{s:s, s:s}", "op", "release", "lease", lease);
	ha_wait_failover(k.ports[0], 30000);
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
