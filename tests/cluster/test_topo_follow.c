/*
 * test_topo_follow.c - broker/store/cluster_topo.h against the real
 * cluster (issue 17): it finds the slot map through the seeds (the first
 * one dead), follows a slot move and a master's failover when told to
 * refresh, coalesces a burst of refreshes into one or two questions, and
 * gives no map, without leaking, when no node answers. The module runs on
 * a private libuv loop in the test's thread.
 */
#include "tests/cluster/cl.h"
#include "broker/base/timers.h"
#include "broker/store/cluster_topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uv_loop_t L;
static int maps;
static cluster_map_t last;

static void on_map(const cluster_map_t *m)
{
	last = *m;
	maps++;
}

static void loop_open(void)
{
	cr_assert_eq(uv_loop_init(&L), 0);
	timers_init(&L);
	maps = 0;
	memset(&last, 0, sizeof(last));
}

/* Runs the loop until maps reaches want or timeout_ms passed. */
static bool run_until(int want, int timeout_ms)
{
	int64_t end = lb_now_ms() + timeout_ms;

	while (maps < want && lb_now_ms() < end) {
		uv_update_time(&L);
		uv_run(&L, UV_RUN_NOWAIT);
		lb_sleep_ms(2);
	}
	return maps >= want;
}

static void run_for(int ms)
{
	int64_t end = lb_now_ms() + ms;

	while (lb_now_ms() < end) {
		uv_update_time(&L);
		uv_run(&L, UV_RUN_NOWAIT);
		lb_sleep_ms(2);
	}
}

static void loop_close(void)
{
	cluster_topo_close();
	run_for(200); /* abandoned contexts and lookups finish */
	timers_close();
	uv_run(&L, UV_RUN_DEFAULT);
	cr_assert_eq(uv_loop_close(&L), 0, "handles left on the loop");
}

static long long slots_calls(void)
{
	long long total = 0;

	for (int i = 0; i < CL_NODES; i++) {
		redisReply *r = cl_node_try_cmd(cl_node_port(i), 1000, "INFO commandstats");
		const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_cluster|slots:calls=") : NULL;
		if (p)
			total += atoll(p + strlen("cmdstat_cluster|slots:calls="));
	}
	return total;
}

static void check_owner(int master_index)
{
	int masters[CL_MASTERS];
	char name[64];

	cl_masters(masters);
	int slot = cl_lock_name(master_index, 0, name, sizeof(name));
	const host_port_t *hp = cluster_map_master_of(&last, (uint16_t)slot);
	cr_assert_not_null(hp, "slot %d of %s unserved in the map", slot, name);
	cr_assert_eq(hp->port, masters[master_index], "slot %d: map says %d, the cluster %d", slot,
	             hp->port, masters[master_index]);
}

CL_TEST(topo_follow, finds_the_map_through_a_live_seed, 60)
{
	int masters[CL_MASTERS];
	host_port_t seeds[2];

	cl_masters(masters);
	seeds[0] = (host_port_t){"127.0.0.1", lb_free_tcp_port()}; /* nobody there */
	seeds[1] = (host_port_t){"localhost", masters[1]};         /* a name: resolved */
	loop_open();
	cluster_topo_start(&L, seeds, 2, NULL, on_map);
	cr_assert(run_until(1, 10000), "no map within 10 s");
	cr_assert_eq(last.nmasters, CL_MASTERS);
	for (int s = 0; s < SLOT_COUNT; s++)
		cr_assert_not_null(cluster_map_master_of(&last, (uint16_t)s), "slot %d unserved", s);
	for (int i = 0; i < CL_MASTERS; i++)
		check_owner(i);
	run_for(300);
	cr_assert_eq(maps, 1, "the same map was given again");
	loop_close();
}

CL_TEST(topo_follow, follows_a_moved_slot_and_a_failover_when_told, 90)
{
	int masters[CL_MASTERS];
	char name[64];
	host_port_t seed;

	cl_masters(masters);
	seed = (host_port_t){"127.0.0.1", masters[0]};
	loop_open();
	cluster_topo_start(&L, &seed, 1, NULL, on_map);
	cr_assert(run_until(1, 10000), "no map within 10 s");

	int slot = cl_lock_name(0, 3, name, sizeof(name));
	cl_move_slot(slot, masters[2]);
	cluster_topo_refresh();
	cr_assert(run_until(2, 10000), "the moved slot was not seen");
	cr_assert_eq(cluster_map_master_of(&last, (uint16_t)slot)->port, masters[2]);

	/* The seed itself dies: the map's other masters are asked. */
	int killed = masters[0];
	cl_kill_node(killed);
	cl_wait_failover(killed, 20000);
	int before = maps;
	cluster_topo_refresh();
	cr_assert(run_until(before + 1, 10000), "the failover was not seen");
	cl_masters(masters);
	for (int k = 0; k < last.nmasters; k++)
		cr_assert_neq(last.masters[k].port, killed, "the dead master is still in the map");
	for (int i = 0; i < CL_MASTERS; i++)
		check_owner(i);
	loop_close();
}

CL_TEST(topo_follow, a_burst_of_refreshes_is_one_or_two_questions, 60)
{
	int masters[CL_MASTERS];
	host_port_t seed;

	cl_masters(masters);
	seed = (host_port_t){"127.0.0.1", masters[1]};
	loop_open();
	cluster_topo_start(&L, &seed, 1, NULL, on_map);
	cr_assert(run_until(1, 10000), "no map within 10 s");
	run_for(100);
	long long before = slots_calls();
	for (int k = 0; k < 200; k++)
		cluster_topo_refresh();
	run_for(500);
	long long asked = slots_calls() - before;
	cr_assert_geq(asked, 1, "the refresh asked nothing");
	cr_assert_leq(asked, 2, "200 refreshes asked %lld times", asked);
	loop_close();
}

CL_TEST(topo_follow, no_node_answers_no_map_and_nothing_left, 60)
{
	host_port_t seeds[2] = {{"127.0.0.1", lb_free_tcp_port()}, {"127.0.0.1", lb_free_tcp_port()}};

	loop_open();
	cluster_topo_start(&L, seeds, 2, "some-password", on_map);
	run_for(1500); /* a round, a backoff, another round */
	cr_assert_eq(maps, 0);
	loop_close();
}
