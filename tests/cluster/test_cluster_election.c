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
