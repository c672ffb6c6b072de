/*
 * test_cluster_order.c - a lock's calls keep their order across a slot
 * move on Redis Cluster (issue 26, point 7): a call on its way to the
 * lock's old master comes back with MOVED and goes to the new one; a
 * later call of the lock, sent after the broker learned the new map, must
 * not get there first.
 *
 * The old master is made slow (DEBUG SLEEP, shorter than the cluster's
 * node timeout) with a release on it; the broker learns the new map from
 * another lock's MOVED meanwhile; then the holder's next acquire of the
 * lock goes out. Before the fix it went straight to the new master, ran
 * before the release, and found the lock busy.
 */
#include "tests/cluster/cl.h"

#include <stdio.h>
#include <string.h>

/* LB_AO(...) overrides its own defaults. */
#ifdef __clang__
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

static json_int_t slots_of(lb_client *c, int port)
{
	json_t *e = cl_stats_master(lb_stats(c), port);

	return e ? lb_int(e, "slots") : 0;
}

CL_TEST(cluster_order, a_release_redirected_by_a_move_keeps_its_place, 90)
{
	int m[CL_MASTERS];
	char lock[32], other[32];

	cl_masters(m);
	cl_lock_name(2, 0, lock, sizeof(lock));   /* on m[2], which goes to sleep */
	cl_lock_name(0, 0, other, sizeof(other)); /* on m[0], awake: its MOVED */
	lb_broker *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(c, lock, 30000);
	json_int_t before = slots_of(o, m[2]);

	/* Both slots move to m[1]; the broker's map does not know yet (it
	 * asks every 10 s, or when told). */
	cl_move_slot(cl_slot_of(lock), m[1]);
	cl_move_slot(cl_slot_of(other), m[1]);
	cr_assert_eq(slots_of(o, m[2]), before, "the broker learned the map too early to test");

	redisContext *z = redisConnect("127.0.0.1", m[2]);
	int done = 0;
	cr_assert(z && !z->err);
	redisAppendCommand(z, "DEBUG SLEEP 0.7");
	while (!done)
		cr_assert_eq(redisBufferWrite(z, &done), REDIS_OK);
	lb_sleep_ms(50);
	json_t *rid = lb_send_req(c, "{s:s, s:s}", "op", "release", "lease", lease); /* to m[2] */
	lb_sleep_ms(50);
	json_t *t = lb_try_acquire(o, other, 30000); /* MOVED from m[0]: the map is asked for */
	lb_expect_ok(t);
	for (int64_t end = lb_now_ms() + 500; slots_of(o, m[2]) == before;) {
		cr_assert_lt(lb_now_ms(), end, "the broker did not take the new map");
		lb_sleep_ms(5);
	}
	json_t *aid = lb_acq_send(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000));

	json_t *rel = lb_wait_response(c, rid, 10000), *g = lb_wait_response(c, aid, 10000);
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	cr_assert(lb_is_ok(g), "the acquire sent after the release found the lock busy: %s",
	          lb_dump(g));
	redisReply *rep = NULL;
	cr_assert_eq(redisGetReply(z, (void **)&rep), REDIS_OK);
	freeReplyObject(rep);
	redisFree(z);
	lb_release(c, lb_str(g, "lease"));
	lb_release(o, lb_str(t, "lease"));
	lb_end();
}

/* The same with ASK (issue 26, point 7): the lock's slot is held open
 * mid-move, its keys already on the target, so the source answers ASK for
 * them; a lock script runs on neither side then (Redis 7: with ASKING the
 * target answers TRYAGAIN while any of the lock's keys is missing), so the
 * release goes round, ASK then TRYAGAIN, on its growing backoff. The
 * holder's acquire of the lock (another owner), sent once the release's
 * backoff is at its longest, must still run after it when the move is
 * over. Before the fix the acquire, parked behind the release and sent
 * with it, went round on its own backoff from 10 ms again, ran first after
 * the move and found the lock busy. Then the same pair once more after the
 * move (the broker's map still names the source: MOVED). */
CL_TEST(cluster_order, a_release_redirected_by_ask_keeps_its_place, 90)
{
	int m[CL_MASTERS];
	char lock[32];

	cl_masters(m);
	int slot = cl_lock_name(0, 0, lock, sizeof(lock));
	lb_broker *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);
	json_t *g1 = lb_acq_call(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000, .owner = "first"),
	                         10000);
	lb_expect_ok(g1);
	cr_assert_eq(lb_int(g1, "count"), 1, "%s", lb_dump(g1));
	json_int_t redirects = cl_stats_redirects(lb_stats(o));

	cr_assert_eq(cl_move_slot_begin(slot, m[1]), m[0]);
	cr_assert_gt(cl_move_slot_keys(slot, -1), 0, "the lock's keys were not on its master");
	redisReply *r = cl_node_cmd(m[0], "EXISTS lb:{%s}", lock);
	cr_assert(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0,
	          "the source does not answer ASK for the lock's keys: %s",
	          r->str ? r->str : "(not an error)");

	int64_t t0 = lb_now_ms();
	json_t *rid = lb_send_req(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g1, "lease"));
	lb_sleep_ms(600); /* its backoff is at its longest */
	json_t *aid = lb_acq_send(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000, .owner = "second"));
	lb_sleep_ms(150); /* and the acquire has gone round, too */
	json_int_t asked = cl_stats_redirects(lb_stats(o)) - redirects;
	cr_assert_gt(asked, 0, "the broker met no ASK");
	cl_move_slot_end(slot);
	int64_t moved = lb_now_ms() - t0;

	json_t *rel = lb_wait_response(c, rid, 10000), *g = lb_wait_response(c, aid, 10000);
	fprintf(stderr, "cluster_order: slot %d open %lld ms, %lld redirects: release %s, then "
	                "acquire %s\n",
	        slot, (long long)moved, (long long)asked, lb_dump(rel), lb_dump(g));
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	cr_assert(lb_is_ok(g), "the acquire sent after the release ran first, found the lock busy: "
	                       "%s", lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1, "%s", lb_dump(g));
	cr_assert_gt(lb_int(g, "fence"), lb_int(g1, "fence"), "%s", lb_dump(g));
	json_t *in = lb_inspect(o, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	json_t *h = json_array_get(lb_get(in, "holders"), 0);
	cr_assert_str_eq(lb_str(h, "owner"), "second", "%s", lb_dump(in));
	cr_assert_eq(lb_int(h, "count"), 1, "%s", lb_dump(in));
	cr_assert_eq(cl_lock_exists(m[1], lock), 1, "the lock is not on its new master");

	/* Moved: the same pair again, on the new master. */
	rid = lb_send_req(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease"));
	aid = lb_acq_send(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000, .owner = "third"));
	rel = lb_wait_response(c, rid, 10000);
	json_t *g3 = lb_wait_response(c, aid, 10000);
	lb_expect_ok(rel);
	lb_expect_ok(g3);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s, %s", lb_dump(rel), lb_dump(g3));
	cr_assert_eq(lb_int(g3, "count"), 1, "%s", lb_dump(g3));
	in = lb_inspect(o, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	h = json_array_get(lb_get(in, "holders"), 0);
	cr_assert_str_eq(lb_str(h, "owner"), "third", "%s", lb_dump(in));
	cr_assert_eq(lb_int(h, "count"), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_release(c, lb_str(g3, "lease")), 0);
	lb_expect_free(o, lock);
	lb_end();
}

/* A grant from a master a failover demoted (issue 26, point 2): the
 * master sleeps (DEBUG SLEEP, shorter than the node timeout) with a try on
 * it; its replica takes over meanwhile (CLUSTER FAILOVER TAKEOVER) and the
 * broker learns the new map (another lock's MOVED asks for it), retiring
 * the old master's pool, which waits for its last replies; the old master
 * wakes and runs the try before it hears of the takeover. That grant is
 * not on the new master: before the fix the broker answered it granted,
 * and another client was granted the lock on the new master at once (two
 * holders). Now it is given back and answered unavailable. */
CL_TEST(cluster_order, a_grant_from_a_demoted_master_is_given_back, 120)
{
	int m[CL_MASTERS];
	char lock[32], other[32];

	cl_masters(m);
	int old = m[2], rep = cl_replica_of(m[2]);
	cl_lock_name(2, 0, lock, sizeof(lock));
	cl_lock_name(0, 0, other, sizeof(other));
	lb_broker *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_UNIX);
	lb_release(c, lb_must_acquire(c, lock, 30000)); /* the pool to old is up */
	/* A slot of m[0] moves, so a try there brings a MOVED (and the map). */
	cl_move_slot(cl_slot_of(other), m[1]);

	redisContext *z = redisConnect("127.0.0.1", old);
	int done = 0;
	cr_assert(z && !z->err);
	redisAppendCommand(z, "DEBUG SLEEP 0.9");
	while (!done)
		cr_assert_eq(redisBufferWrite(z, &done), REDIS_OK);
	lb_sleep_ms(50);
	json_t *id = lb_acq_send(c, lock, LB_AO(.wait_ms = 0, .ttl_ms = 30000)); /* to old, asleep */
	lb_sleep_ms(50);
	redisReply *r = cl_node_cmd(rep, "CLUSTER FAILOVER TAKEOVER");
	cr_assert_eq(r->type, REDIS_REPLY_STATUS, "TAKEOVER: %s", r->str ? r->str : "?");
	for (int64_t end = lb_now_ms() + 500; strcmp(cl_node_role(rep), "master") != 0;) {
		cr_assert_lt(lb_now_ms(), end, "the replica did not take over");
		lb_sleep_ms(5);
	}
	lb_sleep_ms(50); /* the others heard of it */
	json_t *t = lb_try_acquire(o, other, 30000); /* its MOVED: the new map */
	lb_expect_ok(t);

	json_t *g = lb_wait_response(c, id, 10000);
	redisReply *slept = NULL;
	cr_assert_eq(redisGetReply(z, (void **)&slept), REDIS_OK);
	freeReplyObject(slept);
	redisFree(z);
	fprintf(stderr, "cluster_order: the try the demoted master ran: %s\n", lb_dump(g));
	json_t *g2 = NULL;
	for (int64_t end = lb_now_ms() + 5000;;) {
		g2 = lb_try_acquire(o, lock, 30000);
		if (!lb_is_err(g2, "unavailable"))
			break; /* the new master checked its leases first */
		cr_assert_lt(lb_now_ms(), end, "the new master never served: %s", lb_dump(g2));
		lb_sleep_ms(50);
	}
	cr_assert(!(lb_is_ok(g) && lb_is_ok(g2)), "two holders: %s and %s", lb_dump(g), lb_dump(g2));
	lb_expect_err(g, "unavailable");
	lb_expect_ok(g2);
	lb_release(o, lb_str(t, "lease"));
	lb_release(o, lb_str(g2, "lease"));
	lb_end();
}

/* A slot held mid-move for 7 s (issue 26, point 10): its lock scripts get
 * TRYAGAIN all along (the lock's keys are split between the two
 * masters). Calls wait through it within their own deadlines, not a fixed
 * count of tries: the holder's renewals keep its lease (ttl 10 s); a lease
 * released by its session's end right as the move begins is free soon
 * after the move (before the fix the release gave up after 32 tries,
 * about 5 s, and the lock stayed held for nobody until its TTL, 30 s);
 * and a waiter queued before the move keeps its place: it is granted
 * before one that came after the move, though its heartbeat deadline
 * passed during it. */
CL_TEST(cluster_order, a_slot_held_mid_move_is_waited_through, 120)
{
	int m[CL_MASTERS];
	char names[3][32];

	cl_masters(m);
	cl_lock_name(0, 0, names[0], sizeof(names[0]));
	int slot = cl_slot_of(names[0]);
	cl_names_in_slot(slot, "mv-", 2, &names[1]);
	const char *x = names[0], *y = names[1];
	lb_broker *A = lb_broker_start_url(cl_seed_url(), NULL);
	lb_broker *B = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *h = lb_connect(A, LB_TCP), *w1 = lb_connect(A, LB_UNIX), *w2 = lb_connect(B, LB_TCP);
	lb_client *s = lb_connect(B, LB_UNIX), *o = lb_connect(B, LB_TCP);

	const char *hl = lb_must_acquire(h, x, 10000);
	lb_must_acquire(s, y, 30000);
	json_t *i1 = lb_acq_send(w1, x, LB_AO(.ttl_ms = 30000));
	lb_wait_waiters(o, x, 1, 5000);

	int64_t t0 = lb_now_ms();
	cr_assert_eq(cl_move_slot_begin(slot, m[1]), m[0]);
	cr_assert_gt(cl_move_slot_keys(slot, 3), 0);
	lb_close(s); /* its release meets TRYAGAIN from now on */
	lb_sleep_ms(7000 - (lb_now_ms() - t0));
	cl_move_slot_end(slot);
	int64_t moved = lb_now_ms() - t0;

	json_t *i2 = lb_acq_send(w2, x, LB_AO(.ttl_ms = 30000)); /* after the move */
	int64_t end = lb_now_ms() + 5000;
	json_t *gy = NULL;
	while (!gy || !lb_is_ok(gy)) {
		gy = lb_call(o, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", y, "wait_ms", 0,
		             "ttl_ms", 30000);
		cr_assert(lb_is_ok(gy) || lb_is_err(gy, "timeout") || lb_is_err(gy, "unavailable"),
		          "%s", lb_dump(gy));
		cr_assert_lt(lb_now_ms(), end, "the lock the ended session held stays held: %s",
		             lb_dump(gy));
		if (!lb_is_ok(gy))
			lb_sleep_ms(50);
	}
	fprintf(stderr, "cluster_order: slot %d held mid-move %lld ms; the ended session's lock "
	                "free %lld ms after it\n",
	        slot, (long long)moved, (long long)(lb_now_ms() - t0 - moved));
	lb_wait_waiters(o, x, 2, 5000);
	cr_assert_null(lb_next_event(h, 0), "the holder heard of a loss");
	cr_assert_eq(lb_release(h, hl), 0, "the holder's lease did not survive the move");

	bool pend[2] = {true, true};
	lb_client *ws[2] = {w1, w2};
	json_t *first = NULL;
	int k = lb_read_any(ws, pend, 2, 10000, &first);
	cr_assert_eq(k, 0, "the waiter that came after the move was granted first: %s",
	             lb_dump(first));
	lb_expect_ok(first);
	cr_assert(json_equal(lb_get(first, "id"), i1));
	lb_release(w1, lb_str(first, "lease"));
	json_t *g2 = lb_wait_response(w2, i2, 10000);
	lb_expect_ok(g2);
	lb_release(w2, lb_str(g2, "lease"));
	lb_release(o, lb_str(gy, "lease"));
	lb_end();
}
