/*
 * test_cluster_mutex.c - mutual exclusion on the Redis Cluster (issue 17):
 * workers on two brokers loop on three locks, one on each master, each
 * lock contended by a worker of each broker. Inside the critical section a
 * worker increments its lock's counter in a separate plain Redis (GET,
 * sleep, SET: an overlap loses an update); some give up after a short
 * wait_ms, some disconnect abruptly while waiting or while holding. No
 * increment is lost, two holders of a lock never overlap, and each lock's
 * fencing tokens, taken in grant order, strictly increase.
 *
 * The mutex workload of tests/integration/test_mutex.c (workload.h),
 * spread over the masters.
 */
#include "tests/cluster/cl.h"
#include "tests/integration/workload.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define NWORKERS 6
#define NLOCKS CL_MASTERS
#define RUN_MS 4000

static atomic_int inside[NLOCKS];
static atomic_int overlaps[NLOCKS];

CL_TEST(cluster_mutex, exclusion_on_every_master_with_two_brokers, 120)
{
	int m[CL_MASTERS];
	char name[NLOCKS][32], counter[NLOCKS][32];
	static wl_mutex w[NWORKERS];

	cl_masters(m);
	for (int i = 0; i < NLOCKS; i++) {
		int slot = cl_lock_name(i, 0, name[i], sizeof(name[i]));
		cr_assert_eq(cl_master_of_slot(slot), m[i]);
	}
	lb_redis *counters = lb_redis_start(false);
	const char *url = lb_redis_url(counters);
	cr_assert(strncmp(url, "unix://", 7) == 0, "%s", url);
	lb_broker *br[2] = {lb_broker_start_url(cl_seed_url(), NULL),
	                    lb_broker_start_url(cl_seed_url(), NULL)};
	int64_t end = lb_now_ms() + RUN_MS;

	for (int i = 0; i < NLOCKS; i++) {
		atomic_store(&inside[i], 0);
		atomic_store(&overlaps[i], 0);
		snprintf(counter[i], sizeof(counter[i]), "cl-counter:%d", i);
	}
	/* worker k: lock k % 3, broker k % 2, so each lock has a worker on
	 * each broker */
	for (int k = 0; k < NWORKERS; k++) {
		int lock = k % NLOCKS;
		memset(&w[k], 0, sizeof(w[k]));
		wl_thread_init(&w[k].t, k, br, end, 4242u);
		w[k].lock = name[lock];
		w[k].counter = counter[lock];
		w[k].counter_sock = url + 7;
		w[k].inside = &inside[lock];
		w[k].overlaps = &overlaps[lock];
	}
	wl_run(NWORKERS, wl_mutex_thread, w, sizeof(w[0]));

	wl_mutex_sum sum[NLOCKS] = {{0}}, all = {0};
	for (int i = 0; i < NLOCKS; i++)
		wl_mutex_total(w, NWORKERS, name[i], &sum[i]);
	wl_mutex_total(w, NWORKERS, NULL, &all);
	fprintf(stderr, "cluster_mutex: %d grants; increments per lock %ld, %ld, %ld; %ld abrupt "
	                "disconnects while holding, %ld while waiting, %ld timeouts\n",
	        all.ngrants, sum[0].completed, sum[1].completed, sum[2].completed, all.aborts,
	        all.walkaways, all.timeouts);
	wl_mutex_expect_ran(w, NWORKERS);
	cr_assert_gt(all.ngrants, 50, "only %d grants in %d ms", all.ngrants, RUN_MS);
	cr_assert_gt(all.aborts, 0, "no worker disconnected while holding");
	/* on each lock: no overlap, no increment lost, fences strictly increase */
	for (int i = 0; i < NLOCKS; i++)
		wl_mutex_expect_safe(w, NWORKERS, name[i], counters);

	/* everything ended: each lock free, no queue left on its master */
	lb_client *c = lb_connect(br[0], LB_TCP);
	for (int i = 0; i < NLOCKS; i++) {
		int64_t deadline = lb_now_ms() + 3000;
		while (strcmp(lb_str(lb_inspect(c, name[i]), "state"), "free") != 0 &&
		       lb_now_ms() < deadline)
			lb_sleep_ms(20);
		lb_expect_free(c, name[i]);
		cr_assert_eq(lb_inspect_waiters(c, name[i]), 0);
		static const char *const sfx[] = {"q", "w", "d", "h"};
		for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
			redisReply *ex = cl_node_cmd(m[i], "EXISTS lb:{%s}:%s", name[i], sfx[k]);
			cr_assert_eq(ex->type, REDIS_REPLY_INTEGER, "EXISTS on %d: %s", m[i],
			             ex->str ? ex->str : "?");
			cr_assert_eq(ex->integer, 0, "lb:{%s}:%s left on %d", name[i], sfx[k], m[i]);
		}
		redisReply *hdr = cl_node_cmd(m[i], "EXISTS lb:{%s}", name[i]);
		cr_assert_eq(hdr->integer, 1, "the header (fence) of %s is not on its master %d",
		             name[i], m[i]);
	}
	for (int k = 0; k < 2; k++) {
		lb_client *s = lb_connect(br[k], LB_UNIX);
		json_t *st = lb_stats(s);
		cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "lost_total"), 0, "%s", lb_dump(st));
		cr_assert_eq(json_array_size(lb_get(st, "redis_masters")), CL_MASTERS, "%s",
		             lb_dump(st));
	}
	lb_end();
}
