/*
 * test_cluster_election.c - leader election on the Redis Cluster (issue
 * 27, point 1): one election per master (its names hash to that master's
 * slots); the leader's value and a proclaim live on the master of the
 * election's slot, where a second broker's inspect reads them, in the
 * same term.
 */
#include "tests/cluster/cl.h"

#include <stdio.h>
#include <string.h>

CL_TEST(cluster_election, a_leader_on_each_master_publishes_and_proclaims, 60)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *ca = lb_connect(a, LB_TCP), *cb = lb_connect(b, LB_TCP);
	int m[CL_MASTERS];

	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++) {
		char name[32], value[32], key[64];
		int slot = cl_lock_name(i, 7, name, sizeof(name));
		json_t *g, *p, *in;

		cr_assert_eq(cl_master_of_slot(slot), m[i]);
		snprintf(value, sizeof(value), "leader-on-%d", m[i]);
		g = lb_call(ca, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", name, "value", value,
		            "wait_ms", 0, "ttl_ms", 30000);
		lb_expect_ok(g);
		snprintf(key, sizeof(key), "lb:{%s}", name);
		redisReply *v = cl_node_cmd(m[i], "HGET %s V", key);
		cr_assert(v->type == REDIS_REPLY_STRING && strncmp(v->str, "=leader-on-", 11) == 0,
		          "master %d does not keep the value", m[i]);

		p = lb_call(ca, "{s:s, s:s, s:s}", "op", "proclaim", "lease", lb_str(g, "lease"), "value",
		            "moved-on");
		lb_expect_ok(p);
		cr_assert_eq(lb_int(p, "fence"), lb_int(g, "fence"));
		in = lb_inspect(cb, name);
		cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), 0), "value"), "moved-on", "%s",
		                 lb_dump(in));
		cr_assert_eq(lb_int(in, "fence"), lb_int(g, "fence"));
		cr_assert_eq(lb_release(ca, lb_str(g, "lease")), 0);
	}
	lb_end();
}

/* A watch on a lock of each master (issue 27, point 2): its changes,
 * made through another broker, come from the master of its slot (the
 * broker's inbox subscription on every master hears each message once
 * per master; the one from the slot's master counts), each within a
 * second. */
CL_TEST(cluster_election, a_watch_on_each_master_hears_its_changes, 60)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *ca = lb_connect(a, LB_TCP), *cb = lb_connect(b, LB_TCP);
	int m[CL_MASTERS];

	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++) {
		char name[32];
		cl_lock_name(i, 11, name, sizeof(name));
		json_t *w = lb_call(ca, "{s:s, s:s}", "op", "watch", "lock", name);
		lb_expect_ok(w);
		cr_assert_str_eq(lb_str(w, "state"), "free", "%s", lb_dump(w));

		int64_t t0 = lb_now_ms();
		json_t *g = lb_call(cb, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", name, "value", "v",
		                    "wait_ms", 0);
		lb_expect_ok(g);
		json_t *ev = lb_next_event(ca, 1000);
		cr_assert_not_null(ev, "no `changed` for the grant on master %d", m[i]);
		cr_assert_str_eq(lb_str(ev, "state"), "exclusive", "%s", lb_dump(ev));
		cr_assert_eq(lb_int(ev, "fence"), lb_int(g, "fence"));
		cr_assert_lt(lb_now_ms() - t0, 1000);
		lb_release(cb, lb_str(g, "lease"));
		ev = lb_next_event(ca, 1000);
		cr_assert_not_null(ev, "no `changed` for the release on master %d", m[i]);
		cr_assert_str_eq(lb_str(ev, "state"), "free", "%s", lb_dump(ev));
		lb_expect_ok(lb_call(ca, "{s:s, s:s}", "op", "unwatch", "watch", lb_str(w, "watch")));
		cr_assert_null(lb_next_event(ca, 300), "an event after unwatch");
	}
	lb_end();
}

/* Lock-delay on the Cluster (issue 27, point 3): on each master, a holder
 * whose session ends holds its lock back for its delay; a waiter on the
 * other broker is granted when it ends. */
CL_TEST(cluster_election, a_lock_delay_holds_on_each_master, 60)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *w = lb_connect(b, LB_TCP);
	int m[CL_MASTERS];

	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++) {
		char name[32];
		lb_client *h = lb_connect(a, LB_TCP);
		cl_lock_name(i, 13, name, sizeof(name));
		lb_expect_ok(lb_call(h, "{s:s, s:s, s:i, s:i, s:i}", "op", "acquire", "lock", name, "ttl_ms",
		                     30000, "wait_ms", 0, "lock_delay_ms", 800));
		json_t *id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", name, "ttl_ms", 30000);
		lb_sleep_ms(200);
		int64_t t0 = lb_now_ms();
		lb_close(h);
		json_t *g = lb_wait_response(w, id, 6000);
		int64_t took = lb_now_ms() - t0;
		lb_expect_ok(g);
		cr_assert(took >= 700 && took < 800 + 1500, "master %d: granted %lld ms after the end", m[i],
		          (long long)took);
		lb_release(w, lb_str(g, "lease"));
	}
	lb_end();
}

/* acquire_all across the masters (issue 27, point 4): the names live in
 * different slots on different masters; all are granted, or none; sets
 * asked in opposite orders on two brokers never deadlock. */
CL_TEST(cluster_election, acquire_all_spans_the_masters, 90)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *x = lb_connect(a, LB_TCP), *y = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	char n[CL_MASTERS][32];
	int m[CL_MASTERS];

	cl_masters(m);
	for (int i = 0; i < CL_MASTERS; i++)
		cr_assert_eq(cl_master_of_slot(cl_lock_name(i, 17, n[i], sizeof(n[i]))), m[i]);
	json_t *g = lb_call(x, "{s:s, s:[{s:s},{s:s},{s:s}], s:i}", "op", "acquire_all", "locks", "lock",
	                    n[2], "lock", n[0], "lock", n[1], "wait_ms", 0);
	lb_expect_ok(g);
	for (int i = 0; i < CL_MASTERS; i++)
		cr_assert_str_eq(lb_str(lb_inspect(o, n[i]), "state"), "exclusive");
	/* one of them busy: none taken by another caller */
	json_t *t = lb_call(y, "{s:s, s:[{s:s},{s:s}], s:i}", "op", "acquire_all", "locks", "lock",
	                    "cl-free-one", "lock", n[1], "wait_ms", 200);
	lb_expect_err(t, "timeout");
	lb_expect_free(o, "cl-free-one");
	for (size_t k = 0; k < 3; k++)
		lb_release(x, lb_str(json_array_get(lb_get(g, "leases"), k), "lease"));

	for (int k = 0; k < 10; k++) {
		json_t *ix = lb_send_req(x, "{s:s, s:[{s:s},{s:s},{s:s}], s:i}", "op", "acquire_all", "locks",
		                         "lock", n[0], "lock", n[1], "lock", n[2], "wait_ms", 10000);
		json_t *iy = lb_send_req(y, "{s:s, s:[{s:s},{s:s},{s:s}], s:i}", "op", "acquire_all", "locks",
		                         "lock", n[2], "lock", n[1], "lock", n[0], "wait_ms", 10000);
		json_t *gx = NULL, *gy = NULL;
		int64_t t0 = lb_now_ms();
		while (!gx && !gy && lb_now_ms() - t0 < 15000) {
			gx = lb_read_msg(x, 10);
			gy = gx ? NULL : lb_read_msg(y, 10);
		}
		cr_assert(gx || gy, "neither was granted: a deadlock");
		lb_client *first = gx ? x : y, *second = gx ? y : x;
		json_t *g1 = gx ? gx : gy;
		lb_expect_ok(g1);
		for (size_t j = 0; j < 3; j++)
			lb_release(first, lb_str(json_array_get(lb_get(g1, "leases"), j), "lease"));
		json_t *g2 = lb_wait_response(second, gx ? iy : ix, 15000);
		lb_expect_ok(g2);
		for (size_t j = 0; j < 3; j++)
			lb_release(second, lb_str(json_array_get(lb_get(g2, "leases"), j), "lease"));
	}
	lb_end();
}

/* Reads events of watch w until one shows state (and, when value is not
 * NULL, that value on its first holder); fails after timeout_ms. Fences
 * never go down. */
static json_t *until_shown(lb_client *c, const char *w, const char *state, const char *value,
                           int timeout_ms, int64_t *fence)
{
	for (int64_t end = lb_now_ms() + timeout_ms;;) {
		int64_t left = end - lb_now_ms();
		json_t *ev = left > 0 ? lb_next_event(c, (int)left) : NULL;
		cr_assert_not_null(ev, "no `changed` to %s (%s) within %d ms", state, value ? value : "-",
		                   timeout_ms);
		cr_assert_str_eq(lb_str(ev, "watch"), w, "%s", lb_dump(ev));
		if (json_is_integer(json_object_get(ev, "fence"))) {
			cr_assert_geq(lb_int(ev, "fence"), *fence, "the fence went down: %s", lb_dump(ev));
			*fence = lb_int(ev, "fence");
		}
		if (strcmp(lb_str(ev, "state"), state) != 0)
			continue;
		json_t *h = json_array_get(lb_get(ev, "holders"), 0);
		if (value && (!h || !json_is_string(json_object_get(h, "value")) ||
		              strcmp(lb_str(h, "value"), value) != 0))
			continue;
		return ev;
	}
}

/* The election's slot moves to another master while a leader leads and a
 * watcher watches (issue 27): the lease, its value and the watcher's mark
 * move with the keys; the leader's proclaim and resignation after the move
 * reach the watcher from the new master, and the term never goes back. */
CL_TEST(cluster_election, a_slot_move_under_a_leader_and_a_watcher, 90)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *l = lb_connect(a, LB_TCP), *w = lb_connect(b, LB_TCP);
	int m[CL_MASTERS];
	char name[32];
	int64_t fence = 0;

	cl_masters(m);
	int slot = cl_lock_name(0, 21, name, sizeof(name));
	json_t *g = lb_call(l, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", name, "value", "v1",
	                    "wait_ms", 0, "ttl_ms", 6000);
	lb_expect_ok(g);
	json_t *wa = lb_call(w, "{s:s, s:s}", "op", "watch", "lock", name);
	lb_expect_ok(wa);
	const char *wid = lb_str(wa, "watch");
	fence = lb_int(wa, "fence");

	int64_t took = cl_move_slot(slot, m[1]);
	fprintf(stderr, "cluster_election: slot %d of a led election moved to %d in %lld ms\n", slot, m[1],
	        (long long)took);
	cr_assert_gt(cl_lock_exists(m[1], name), 0, "the election's keys did not move");
	lb_sleep_ms(2500); /* renewals (ttl 6000: every 2 s) go to the new master */
	cr_assert_null(lb_next_event(l, 0), "the leader was told something across the move");
	lb_expect_ok(lb_call_timeout(l, 10000, "{s:s, s:s, s:s}", "op", "proclaim", "lease",
	                             lb_str(g, "lease"), "value", "v2"));
	until_shown(w, wid, "exclusive", "v2", 3000, &fence);
	cr_assert_eq(fence, lb_int(g, "fence"), "a proclaim is no new term");
	cr_assert_eq(lb_release(l, lb_str(g, "lease")), 0);
	until_shown(w, wid, "free", NULL, 3000, &fence);
	json_t *g2 = lb_call(l, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", name, "value", "v3",
	                     "wait_ms", 0);
	lb_expect_ok(g2);
	cr_assert_gt(lb_int(g2, "fence"), lb_int(g, "fence"), "the term went back across the move");
	until_shown(w, wid, "exclusive", "v3", 3000, &fence);
	lb_end();
}

/* The election's master fails over while a leader leads and a watcher
 * watches (issue 27): the replica took the lease and its value (or the
 * leader is told `lost`, never both holding); the watcher gets one fresh
 * `changed` and hears the leader's proclaim made after the failover from
 * the new master; the next term's fence is above the old one. */
CL_TEST(cluster_election, a_failover_of_the_elections_master_under_a_leader_and_a_watcher, 120)
{
	lb_broker *a = lb_broker_start_url(cl_seed_url(), NULL), *b = lb_broker_start_url(cl_seed_url(), NULL);
	lb_client *l = lb_connect(a, LB_TCP), *w = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	int m[CL_MASTERS];
	char name[32], key[64];
	int64_t fence = 0;

	cl_masters(m);
	cl_lock_name(2, 23, name, sizeof(name));
	int old = m[2], replica = cl_replica_of(old);
	json_t *g = lb_call(l, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", name, "value",
	                    "leader-1", "wait_ms", 0, "ttl_ms", 30000);
	lb_expect_ok(g);
	json_t *wa = lb_call(w, "{s:s, s:s}", "op", "watch", "lock", name);
	lb_expect_ok(wa);
	const char *wid = lb_str(wa, "watch");
	fence = lb_int(wa, "fence");
	snprintf(key, sizeof(key), "lb:{%s}", name);
	redisReply *rw = cl_node_cmd(old, "WAIT 1 5000");
	cr_assert(rw->type == REDIS_REPLY_INTEGER && rw->integer >= 1, "replica %d did not catch up", replica);

	cl_kill_node(old);
	int64_t fo = cl_wait_failover(old, 30000);
	json_t *ev = lb_next_event(w, 30000);
	cr_assert_not_null(ev, "no fresh `changed` after the failover");
	cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
	cr_assert(json_is_null(json_object_get(ev, "fence")) || lb_int(ev, "fence") >= fence, "%s",
	          lb_dump(ev));
	json_t *lost = lb_next_event(l, 1000);
	fprintf(stderr, "cluster_election: failover of %d in %lld ms; the leader %s; the watcher saw %s\n",
	        old, (long long)fo, lost ? "was told lost" : "kept its lease", lb_str(ev, "state"));
	if (lost) {
		/* lost: nobody else may believe it leads; the lock is free or taken anew */
		cr_assert_str_eq(lb_str(lost, "event"), "lost", "%s", lb_dump(lost));
	} else {
		json_t *in = lb_inspect(o, name);
		cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
		cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), 0), "value"), "leader-1");
		lb_expect_ok(lb_call_timeout(l, 15000, "{s:s, s:s, s:s}", "op", "proclaim", "lease",
		                             lb_str(g, "lease"), "value", "leader-1b"));
		until_shown(w, wid, "exclusive", "leader-1b", 5000, &fence);
		cr_assert_eq(lb_release(l, lb_str(g, "lease")), 0);
	}
	json_t *g2 = NULL;
	for (int64_t end = lb_now_ms() + 10000; !g2 || !lb_is_ok(g2); lb_sleep_ms(50)) {
		cr_assert_lt(lb_now_ms(), end, "no new term after the failover: %s", g2 ? lb_dump(g2) : "-");
		g2 = lb_call(o, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", name, "value", "leader-2",
		             "wait_ms", 0);
	}
	cr_assert_gt(lb_int(g2, "fence"), lb_int(g, "fence"), "the term went back across the failover");
	until_shown(w, wid, "exclusive", "leader-2", 5000, &fence);
	lb_end();
}
