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
