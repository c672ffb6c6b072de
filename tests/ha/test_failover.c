/*
 * The broker on Redis Sentinel (issue 16): it finds the master through the
 * sentinels (one of them down, or none up yet), follows a failover without
 * a restart on two brokers at once (holders the new master lost hear
 * `lost`, waiters are granted or time out as their wait_ms says), keeps its
 * fences above every fence before the switch even when the new master's
 * stored fences are far behind, asks again when a demoted master answers
 * READONLY, and with --redis-wait-replicas answers a grant only once a
 * replica has it.
 *
 * Figures (printed as "ha: ..."): the time from the master's kill to the
 * first grant on the new master. Bounds asserted are generous: a loaded
 * 2-core machine, sentinels with down-after-milliseconds 2000.
 */
#include "tests/ha/ha.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVE_AGAIN_MS 30000

static json_t *acquire(lb_client *c, const char *lock, int ttl_ms, int wait_ms)
{
	return lb_call_timeout(c, wait_ms + 10000, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock,
	                       "ttl_ms", ttl_ms, "wait_ms", wait_ms);
}

static json_t *send_acquire(lb_client *c, const char *lock, int ttl_ms, int wait_ms)
{
	return lb_send_req(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock, "ttl_ms", ttl_ms,
	                   "wait_ms", wait_ms);
}

/* Tries lock (wait_ms 0) until it is granted: the broker serves; fails the
 * test after timeout_ms. Returns the grant. */
static json_t *grant_when_served(lb_client *c, const char *lock, int timeout_ms)
{
	int64_t end = lb_now_ms() + timeout_ms;

	for (;;) {
		json_t *g = acquire(c, lock, 30000, 0);
		if (lb_is_ok(g))
			return g;
		cr_assert(lb_is_err(g, "unavailable"), "while Redis fails over: %s", lb_dump(g));
		cr_assert_lt(lb_now_ms(), end, "%s not granted within %d ms: %s", lock, timeout_ms,
		             lb_dump(g));
		lb_sleep_ms(20);
	}
}

static bool log_has(const lb_broker *b, const char *what)
{
	FILE *f = fopen(lb_broker_log(b), "r");
	char line[4096];
	bool found = false;

	cr_assert_not_null(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Waits until node port has key (replication caught up). */
static void wait_key(int port, const char *key)
{
	int64_t end = lb_now_ms() + 5000;

	while (!ha_node_has_key(port, key)) {
		cr_assert_lt(lb_now_ms(), end, "%s never reached node %d", key, port);
		lb_sleep_ms(10);
	}
}

HA_TEST(failover, finds_the_master_with_one_sentinel_down, 60)
{
	ha_stop_sentinel(0); /* the first in the URL: asked and watched first */
	lb_broker *b = lb_broker_start_url(ha_sentinel_url(NULL), NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *g = acquire(c, "found", 10000, 0);

	lb_expect_ok(g);
	cr_assert(ha_node_has_key(ha_master_port(), "lb:{found}"), "the lock is not on the master");
	json_t *st = lb_call(c, "{s:s}", "op", "stats");
	cr_assert_str_eq(lb_str(st, "redis"), "up");
	cr_assert_eq(lb_int(st, "failovers_total"), 0);
	cr_assert_eq(lb_int(st, "failover_lost_total"), 0);
	cr_assert(log_has(b, "redis master found"), "no master found in the log");
	lb_end();
}

HA_TEST(failover, an_unknown_master_name_serves_nothing_and_says_so, 60)
{
	lb_broker *b = lb_broker_start_url_no_redis_wait(ha_sentinel_url("no-such-master"), NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	int64_t t = lb_now_ms();
	json_t *g = acquire(c, "nowhere", 10000, 0);

	lb_expect_err(g, "unavailable");
	cr_assert_lt(lb_now_ms() - t, 1000, "unavailable must come at once");
	cr_assert_str_eq(lb_str(lb_call(c, "{s:s}", "op", "stats"), "redis"), "down");
	lb_sleep_ms(1500); /* a round of all three, then a backoff */
	cr_assert(log_has(b, "no sentinel named the master"), "the log does not say why");
	lb_end();
}

HA_TEST(failover, serves_once_the_sentinels_come_up, 90)
{
	for (int i = 0; i < 3; i++)
		ha_stop_sentinel(i);
	lb_broker *b = lb_broker_start_url_no_redis_wait(ha_sentinel_url(NULL), NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	lb_expect_err(acquire(c, "late", 10000, 0), "unavailable");
	for (int i = 0; i < 3; i++)
		ha_start_sentinel(i);
	lb_expect_ok(grant_when_served(c, "late", 20000));
	lb_end();
}

/* Two brokers; a holder whose grant reached the replica, one whose grant
 * did not (replication cut first), a waiter that outlasts the failover and
 * one whose wait_ms ends during it. The master is killed. */
HA_TEST(failover, both_brokers_serve_again_and_a_lost_grant_is_reported, 120)
{
	const char *url = ha_sentinel_url(NULL);
	lb_broker *A = lb_broker_start_url(url, NULL);
	lb_broker *B = lb_broker_start_url(url, NULL);
	lb_client *a1 = lb_connect(A, LB_TCP), *a2 = lb_connect(A, LB_UNIX);
	lb_client *b1 = lb_connect(B, LB_TCP), *b2 = lb_connect(B, LB_UNIX);
	lb_client *pa = lb_connect(A, LB_TCP), *pb = lb_connect(B, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();

	json_t *kept = acquire(a1, "kept", 30000, 0);
	lb_expect_ok(kept);
	wait_key(r, "lb:{kept}");
	ha_pause_replication(r);
	json_t *lost = acquire(a2, "lost", 30000, 0);
	lb_expect_ok(lost);
	json_int_t fence_before = lb_int(lost, "fence") > lb_int(kept, "fence") ? lb_int(lost, "fence")
	                                                                        : lb_int(kept, "fence");
	json_t *w_long = send_acquire(b1, "kept", 30000, 60000);
	json_t *w_short = send_acquire(b2, "kept", 30000, 1500);
	lb_sleep_ms(300); /* both queued */
	cr_assert_eq(lb_int(lb_inspect(pb, "kept"), "waiters"), 2);

	int64_t t0 = lb_now_ms();
	ha_kill_node(m);

	/* The short wait ends while there is no master: timeout, as wait_ms says. */
	lb_expect_err(lb_wait_response(b2, w_short, 10000), "timeout");
	cr_assert_lt(lb_now_ms() - t0, 6000, "the short waiter's timeout came late");

	/* Both brokers serve again, with no restart. */
	json_t *first = grant_when_served(pb, "probe-b", SERVE_AGAIN_MS);
	int64_t served_ms = lb_now_ms() - t0;
	fprintf(stderr, "ha: master killed -> first grant on the new master: %lld ms\n",
	        (long long)served_ms);
	cr_assert_gt(lb_int(first, "fence"), fence_before);
	grant_when_served(pa, "probe-a", SERVE_AGAIN_MS);
	cr_assert_eq(ha_master_port(), r);

	/* The grant the new master never had: lost, gone; "kept" stays held. */
	json_t *ev = lb_next_event(a2, 5000);
	cr_assert_not_null(ev, "no lost event for the grant the new master lost");
	cr_assert_str_eq(lb_str(ev, "event"), "lost");
	cr_assert_str_eq(lb_str(ev, "reason"), "gone");
	cr_assert_str_eq(lb_str(ev, "lease"), lb_str(lost, "lease"));
	cr_assert_null(lb_next_event(a1, 500), "the replicated holder was told something");
	json_t *ls = lb_call(a1, "{s:s}", "op", "leases");
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 1, "%s", lb_dump(ls));
	lb_expect_err(lb_call(a2, "{s:s, s:s}", "op", "release", "lease", lb_str(lost, "lease")),
	              "not_held");

	/* The long waiter (queued again on the new master) gets "kept" once it
	 * is released, with a fence above every fence before the switch. */
	json_t *rel = lb_call(a1, "{s:s, s:s}", "op", "release", "lease", lb_str(kept, "lease"));
	lb_expect_ok(rel);
	json_t *g = lb_wait_response(b1, w_long, 15000);
	lb_expect_ok(g);
	cr_assert_gt(lb_int(g, "fence"), fence_before);

	json_t *sa = lb_call(pa, "{s:s}", "op", "stats"), *sb = lb_call(pb, "{s:s}", "op", "stats");
	cr_assert_eq(lb_int(sa, "failovers_total"), 1, "%s", lb_dump(sa));
	cr_assert_eq(lb_int(sb, "failovers_total"), 1, "%s", lb_dump(sb));
	cr_assert_eq(lb_int(sa, "failover_lost_total"), 1, "%s", lb_dump(sa));
	cr_assert_eq(lb_int(sb, "failover_lost_total"), 0, "%s", lb_dump(sb));
	cr_assert(log_has(A, "redis master switched"), "the switch is not in the log");
	lb_end();
}

/* The old master's fence for the lock is an hour ahead of every clock (as
 * if its clock were), and that grant never reached the replica: the new
 * master's stored fence and its clock are both behind it. */
HA_TEST(failover, fences_pass_every_fence_before_also_when_the_new_master_is_behind, 120)
{
	lb_broker *A = lb_broker_start_url(ha_sentinel_url(NULL), NULL);
	lb_client *c = lb_connect(A, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();

	json_t *g1 = acquire(c, "f", 10000, 0);
	lb_expect_ok(g1);
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g1, "lease")));
	wait_key(r, "lb:{f}");
	ha_pause_replication(r);
	long long ahead = (long long)lb_int(g1, "fence") + 3600LL * 1000000;
	redisReply *set = ha_node_cmd(m, "HSET lb:{f} f %lld", ahead);
	cr_assert_neq(set->type, REDIS_REPLY_ERROR);
	json_t *g2 = acquire(c, "f", 10000, 0);
	lb_expect_ok(g2);
	cr_assert_gt(lb_int(g2, "fence"), ahead);
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g2, "lease")));

	ha_kill_node(m);
	ha_wait_failover(m, SERVE_AGAIN_MS);
	redisReply *stored = ha_node_cmd(r, "HGET lb:{f} f");
	cr_assert_eq(stored->type, REDIS_REPLY_STRING, "the new master has no fence for f");
	cr_assert_lt(atoll(stored->str), ahead, "the new master has the fence: nothing to prove");

	json_t *g3 = grant_when_served(c, "f", SERVE_AGAIN_MS);
	cr_assert_gt(lb_int(g3, "fence"), lb_int(g2, "fence"),
	             "fence %lld after the failover, %lld before", (long long)lb_int(g3, "fence"),
	             (long long)lb_int(g2, "fence"));
	/* A broker that never saw the old fence still goes up from the new
	 * master's stored one. */
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g3, "lease")));
	lb_broker *B = lb_broker_start_url(ha_sentinel_url(NULL), NULL);
	lb_client *cb = lb_connect(B, LB_TCP);
	json_t *g4 = acquire(cb, "f", 10000, 0);
	lb_expect_ok(g4);
	cr_assert_gt(lb_int(g4, "fence"), lb_int(g3, "fence"));
	lb_end();
}

/* Master and replica are swapped by hand and the sentinels re-pointed
 * without a +switch-master (ha_switch_master_quietly): the broker's
 * connections to the old master stay up, and only the READONLY reply to its
 * next write tells it. It must ask the sentinels again, serve on the new
 * master, and keep the lease the new master has. */
HA_TEST(failover, a_readonly_reply_makes_the_broker_ask_the_sentinels_again, 120)
{
	lb_broker *A = lb_broker_start_url(ha_sentinel_url(NULL), NULL);
	lb_client *c = lb_connect(A, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();

	json_t *kept = acquire(c, "ro-before", 30000, 0);
	lb_expect_ok(kept);
	wait_key(r, "lb:{ro-before}");
	cr_assert_eq(ha_switch_master_quietly(), r);
	cr_assert_str_eq(ha_node_role(m), "slave");
	cr_assert_eq(ha_master_port(), r);

	json_t *g = grant_when_served(c, "ro-after", SERVE_AGAIN_MS);
	cr_assert(ha_node_has_key(r, "lb:{ro-after}"), "granted, but not on the new master");
	cr_assert(log_has(A, "READONLY"), "the broker never saw the READONLY reply");
	cr_assert(log_has(A, "redis master switched"), "the log does not name the switch");
	json_t *st = lb_call(c, "{s:s}", "op", "stats");
	cr_assert_geq(lb_int(st, "failovers_total"), 1, "%s", lb_dump(st));
	cr_assert_eq(lb_int(st, "failover_lost_total"), 0, "%s", lb_dump(st));
	/* Nothing was lost: the lease from before is still held, and released. */
	json_t *rel = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(kept, "lease"));
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	cr_assert_str_eq(lb_str(lb_inspect(c, "ro-before"), "state"), "free");
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease")));
	lb_end();
}

HA_TEST(failover, wait_replicas_answers_unavailable_without_the_replica, 90)
{
	lb_broker *A = lb_broker_start_url(ha_sentinel_url(NULL), "--redis-wait-replicas", "1",
	                                   "--redis-wait-ms", "300", NULL);
	lb_client *c = lb_connect(A, LB_TCP), *d = lb_connect(A, LB_TCP);
	int r = ha_replica_port();

	json_t *held = acquire(c, "w-held", 10000, 0);
	lb_expect_ok(held);
	ha_pause_replication(r);

	int64_t t = lb_now_ms();
	json_t *g = acquire(d, "w-new", 10000, 0);
	lb_expect_err(g, "unavailable");
	cr_assert_geq(lb_now_ms() - t, 250, "answered before WAIT could time out");
	cr_assert_str_eq(lb_str(lb_inspect(d, "w-new"), "state"), "free", "the grant was not given back");

	lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lb_str(held, "lease"),
	                      "ttl_ms", 20000),
	              "unavailable");
	lb_expect_err(acquire(c, "w-held", 10000, 0), "unavailable"); /* a re-entry */
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");
	cr_assert_eq(lb_int(json_array_get(lb_get(ls, "leases"), 0), "count"), 1, "%s", lb_dump(ls));

	/* A waiter granted by the holder's release is answered the same. */
	json_t *w = send_acquire(d, "w-held", 10000, 5000);
	lb_sleep_ms(700); /* queued (its answer waited for WAIT too) */
	json_t *rel = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(held, "lease"));
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "the re-entry was not taken back: %s", lb_dump(rel));
	lb_expect_err(lb_wait_response(d, w, 10000), "unavailable");
	cr_assert_str_eq(lb_str(lb_inspect(d, "w-held"), "state"), "free");

	ha_resume_replication(r);
	lb_expect_ok(acquire(d, "w-new", 10000, 0));
	lb_end();
}

/* A watchdog renewal the replica does not acknowledge does not move the
 * lease's end: a failover could bring the old end back. With replication
 * cut, the holder hears `lost` by the TTL counted from its last
 * acknowledged renewal. */
HA_TEST(failover, wait_replicas_a_renewal_without_the_replica_is_no_renewal, 90)
{
	lb_broker *A = lb_broker_start_url(ha_sentinel_url(NULL), "--redis-wait-replicas", "1",
	                                   "--redis-wait-ms", "200", NULL);
	lb_client *c = lb_connect(A, LB_TCP);
	int r = ha_replica_port();

	json_t *g = acquire(c, "w-renew", 1500, 0);
	lb_expect_ok(g);
	cr_assert_null(lb_next_event(c, 2000), "lost while the replica acknowledged the renewals");
	ha_pause_replication(r);
	int64_t t = lb_now_ms();
	json_t *ev = lb_next_event(c, 5000);
	cr_assert_not_null(ev, "no lost event: renewals the replica never had kept the lease");
	cr_assert_str_eq(lb_str(ev, "event"), "lost");
	cr_assert_str_eq(lb_str(ev, "reason"), "redis_unavailable");
	cr_assert_lt(lb_now_ms() - t, 1500 + 1000, "lost later than the TTL allows");
	cr_assert(log_has(A, "renewal not acknowledged by enough replicas"));
	lb_end();
}

/* A release the old master answered but never passed on: the new master
 * holds that lease again, for nobody. The broker sends its recent releases
 * again after the switch, so the lock is free at once, not at the end of
 * the lease's 30 s TTL. With --redis-wait-replicas they go without WAIT
 * (the new master has no replica yet: each WAIT would hold a connection). */
static void release_missed(bool wait_mode)
{
	lb_broker *A = wait_mode ? lb_broker_start_url(ha_sentinel_url(NULL), "--redis-wait-replicas",
	                                               "1", "--redis-wait-ms", "500", NULL)
	                         : lb_broker_start_url(ha_sentinel_url(NULL), NULL);
	lb_client *c = lb_connect(A, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();

	/* Releases before it, sent again first: with a WAIT each (500 ms,
	 * no replica) they would hold the lock's release back for minutes. */
	for (int k = 0; k < 120; k++) {
		char name[32];
		snprintf(name, sizeof(name), "rel-pad-%d", k);
		/* served once the topology ha_ready left has settled */
		json_t *p = grant_when_served(c, name, SERVE_AGAIN_MS);
		lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(p, "lease")));
	}
	json_t *g = grant_when_served(c, "rel-missed", SERVE_AGAIN_MS);
	wait_key(r, "lb:{rel-missed}");
	ha_pause_replication(r);
	json_t *rel = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease"));
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0);
	redisReply *ghost = ha_node_cmd(r, "HGET lb:{rel-missed} o");
	cr_assert_eq(ghost->type, REDIS_REPLY_STRING, "the replica has the release: nothing to prove");
	ha_kill_node(m);
	ha_wait_failover(m, SERVE_AGAIN_MS);

	int64_t t0 = lb_now_ms(), end = t0 + 10000; /* the TTL is 30 s */
	for (;;) {
		/* unavailable while the broker checks its leases on the new master */
		json_t *in = lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", "rel-missed");
		if (lb_is_ok(in) && strcmp(lb_str(in, "state"), "free") == 0)
			break;
		cr_assert(lb_is_ok(in) || lb_is_err(in, "unavailable"), "%s", lb_dump(in));
		cr_assert_lt(lb_now_ms(), end, "the lock stayed held by the released lease: %s",
		             lb_dump(in));
		lb_sleep_ms(50);
	}
	fprintf(stderr, "ha: a missed release%s: lock free %lld ms after the failover\n",
	        wait_mode ? " (WAIT 1, no replica yet)" : "", (long long)(lb_now_ms() - t0));
	cr_assert(log_has(A, "recent releases sent again"));
	if (!wait_mode)
		lb_expect_ok(acquire(c, "rel-missed", 30000, 0));
	lb_end();
}

HA_TEST(failover, a_release_the_new_master_missed_is_sent_again, 120)
{
	release_missed(false);
}

HA_TEST(failover, a_release_sent_again_needs_no_replica, 120)
{
	release_missed(true);
}

/* ---- the reentrancy count across a failover (issue 26, point 1) --------- */

static json_int_t release_count(lb_client *c, const char *lease)
{
	json_t *rel = lb_call_timeout(c, 15000, "{s:s, s:s}", "op", "release", "lease", lease);

	lb_expect_ok(rel);
	return lb_int(rel, "count");
}

/* Holder A on broker A, a client of broker B that tries the same lock; the
 * replica misses the count changes `miss` makes, then the master dies.
 * Returns A's lease after the failover has been served on both brokers. */
static const char *count_across_failover(lb_broker **pa, lb_client **ca, lb_client **cb,
                                          const char *lock, int before, void (*miss)(lb_client *, const char *))
{
	const char *url = ha_sentinel_url(NULL);
	lb_broker *A = lb_broker_start_url(url, NULL), *B = lb_broker_start_url(url, NULL);
	lb_client *a = lb_connect(A, LB_TCP), *b = lb_connect(B, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();
	char key[64];
	const char *lease = NULL;

	for (int k = 0; k < before; k++) {
		json_t *g = grant_when_served(a, lock, SERVE_AGAIN_MS);
		cr_assert_eq(lb_int(g, "count"), k + 1, "%s", lb_dump(g));
		lease = lb_str(g, "lease");
	}
	/* The replica has the count as it is now. */
	snprintf(key, sizeof(key), "lb:{%s}", lock);
	wait_key(r, key);
	for (int64_t end = lb_now_ms() + 5000;;) {
		redisReply *c = ha_node_cmd(r, "HGET %s c", key);
		if (c->type == REDIS_REPLY_STRING && atoi(c->str) == before)
			break;
		cr_assert_lt(lb_now_ms(), end, "the replica never had count %d", before);
		lb_sleep_ms(10);
	}
	ha_pause_replication(r);
	miss(a, lease);
	ha_kill_node(m);
	ha_wait_failover(m, SERVE_AGAIN_MS);
	/* Both brokers serve on the new master (each checked its leases). */
	lb_expect_ok(lb_call(b, "{s:s, s:s}", "op", "release", "lease",
	                     lb_str(grant_when_served(b, "count-probe-b", SERVE_AGAIN_MS), "lease")));
	lb_expect_ok(lb_call(a, "{s:s, s:s}", "op", "release", "lease",
	                     lb_str(grant_when_served(a, "count-probe-a", SERVE_AGAIN_MS), "lease")));
	cr_assert_null(lb_next_event(a, 300), "the holder was told something");
	*pa = A;
	*ca = a;
	*cb = b;
	return lease;
}

static void reenter_once(lb_client *a, const char *lease)
{
	json_t *g = acquire(a, "count-up", 30000, 0);

	lb_expect_ok(g);
	cr_assert_str_eq(lb_str(g, "lease"), lease);
	cr_assert_eq(lb_int(g, "count"), 2, "%s", lb_dump(g));
}

/* A re-entry the new master never had: the holder still holds a level
 * after its first release, and nobody else is granted the lock before
 * its second (before the fix, the first release freed it: two holders). */
HA_TEST(failover, a_reentry_the_new_master_missed_is_replayed, 150)
{
	lb_broker *A;
	lb_client *a, *b;
	const char *lease = count_across_failover(&A, &a, &b, "count-up", 1, reenter_once);

	cr_assert_eq(release_count(a, lease), 1, "the re-entry was lost with the failover");
	lb_expect_err(acquire(b, "count-up", 30000, 0), "timeout");
	json_t *in = lb_inspect(b, "count-up");
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 1, "%s", lb_dump(in));
	cr_assert_eq(release_count(a, lease), 0);
	lb_expect_ok(acquire(b, "count-up", 30000, 0));
	cr_assert_null(lb_next_event(a, 300), "the holder was told something");
	lb_end();
}

static void release_once(lb_client *a, const char *lease)
{
	cr_assert_eq(release_count(a, lease), 1);
}

/* The mirror: a partial release the new master never had. One release
 * more frees the lock (before the fix it stayed held, for nobody, until
 * the session ended). */
HA_TEST(failover, a_partial_release_the_new_master_missed_is_replayed, 150)
{
	lb_broker *A;
	lb_client *a, *b;
	const char *lease = count_across_failover(&A, &a, &b, "count-down", 2, release_once);

	json_t *in = lb_inspect(b, "count-down");
	cr_assert_eq(lb_int(json_array_get(lb_get(in, "holders"), 0), "count"), 1, "%s", lb_dump(in));
	cr_assert_eq(release_count(a, lease), 0);
	lb_expect_ok(acquire(b, "count-down", 30000, 0));
	lb_end();
}

static void proclaim_once(lb_client *a, const char *lease)
{
	json_t *p = lb_call_timeout(a, 15000, "{s:s, s:s, s:s}", "op", "proclaim", "lease", lease,
	                            "value", "10.9.0.2:80");

	lb_expect_ok(p);
}

/* A leader's proclaim the new master never had (issue 27, point 1): the
 * broker's check after the failover writes the answered value again, so
 * the other broker's inspect shows it in the same term. */
HA_TEST(failover, a_proclaim_the_new_master_missed_is_replayed, 150)
{
	lb_broker *A;
	lb_client *a, *b;
	const char *lease = count_across_failover(&A, &a, &b, "lead-fo", 1, proclaim_once);
	json_t *in = lb_inspect(b, "lead-fo");
	json_t *h = json_array_get(lb_get(in, "holders"), 0);

	cr_assert(json_is_string(json_object_get(h, "value")), "the value was lost: %s", lb_dump(in));
	cr_assert_str_eq(lb_str(h, "value"), "10.9.0.2:80", "%s", lb_dump(in));
	cr_assert_eq(release_count(a, lease), 0);
	lb_end();
}

/* A watch across a failover (issue 27, point 2): the watcher's broker
 * reads the lock afresh on the new master (one `changed`, its fence not
 * below the one shown before) and marks itself there again, so the
 * changes made after the failover reach it as before. */
HA_TEST(failover, a_watch_follows_the_lock_across_a_failover, 150)
{
	const char *url = ha_sentinel_url(NULL);
	lb_broker *A = lb_broker_start_url(url, NULL), *B = lb_broker_start_url(url, NULL);
	lb_client *a = lb_connect(A, LB_TCP), *w = lb_connect(B, LB_TCP), *b = lb_connect(B, LB_TCP);
	int m = ha_master_port(), r = ha_replica_port();
	json_t *g = grant_when_served(a, "watched-fo", SERVE_AGAIN_MS), *wa, *ev;
	int64_t fence = lb_int(g, "fence");

	grant_when_served(b, "watched-fo-ready", SERVE_AGAIN_MS); /* B serves too */
	wa = lb_call(w, "{s:s, s:s}", "op", "watch", "lock", "watched-fo");
	lb_expect_ok(wa);
	cr_assert_eq(lb_int(wa, "fence"), fence, "%s", lb_dump(wa));
	wait_key(r, "lb:{watched-fo}");
	ha_kill_node(m);
	ha_wait_failover(m, SERVE_AGAIN_MS);
	ev = lb_next_event(w, SERVE_AGAIN_MS);
	cr_assert_not_null(ev, "no fresh `changed` after the failover");
	cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "watch"), lb_str(wa, "watch"), "%s", lb_dump(ev));
	cr_assert(json_is_null(json_object_get(ev, "fence")) || lb_int(ev, "fence") >= fence,
	          "the fence went down: %s", lb_dump(ev));

	/* Served again on the new master: the holder releases, another takes it. */
	grant_when_served(b, "watched-fo-probe", SERVE_AGAIN_MS);
	if (strcmp(lb_str(ev, "state"), "exclusive") == 0) {
		/* A, the holder's broker, may still be checking its leases on
		 * the new master (it serves nothing else meanwhile): unavailable
		 * (no effect), then asked again. */
		json_t *rl;
		for (int64_t t0 = lb_now_ms();;) {
			rl = lb_call_timeout(a, 15000, "{s:s, s:s}", "op", "release", "lease",
			                     lb_str(g, "lease"));
			if (!lb_is_err(rl, "unavailable") || lb_now_ms() - t0 > SERVE_AGAIN_MS)
				break;
			lb_sleep_ms(50);
		}
		lb_expect_ok(rl);
		do {
			ev = lb_next_event(w, 3000);
			cr_assert_not_null(ev, "the release after the failover was not heard");
		} while (strcmp(lb_str(ev, "state"), "free") != 0);
	}
	json_t *g2 = grant_when_served(b, "watched-fo", SERVE_AGAIN_MS);
	int64_t t0 = lb_now_ms();
	do {
		ev = lb_next_event(w, 3000);
		cr_assert_not_null(ev, "the grant after the failover was not heard");
	} while (strcmp(lb_str(ev, "state"), "exclusive") != 0);
	cr_assert_eq(lb_int(ev, "fence"), lb_int(g2, "fence"), "%s", lb_dump(ev));
	cr_assert_gt(lb_int(g2, "fence"), fence);
	fprintf(stderr, "ha: a watch after the failover heard a grant %lld ms after it\n",
	        (long long)(lb_now_ms() - t0));
	lb_end();
}
