/*
 * test_cluster_metrics.c - what an operator sees of a Redis Cluster: the
 * per-master series on /metrics (lockbroker_redis_master_*) name every
 * master of the slot map with its slots, and follow a failover.
 */
#include "tests/cluster/cl.h"

#include <stdio.h>
#include <string.h>

/* The sample of series{addr="127.0.0.1:port"}; -1 when absent. */
static double master_sample(const char *text, const char *series, int port)
{
	char s[160];

	snprintf(s, sizeof(s), "%s{addr=\"127.0.0.1:%d\"}", series, port);
	return lb_metric_sample(text, s);
}

static const char *scrape(int port)
{
	char cmd[160];
	const char *text;
	int status;

	snprintf(cmd, sizeof(cmd), "curl -sS --max-time 5 http://127.0.0.1:%d/metrics", port);
	text = lb_run_cmd(cmd, &status);
	cr_assert_eq(status, 0, "curl failed: %s", text);
	return text;
}

CL_TEST(cluster_metrics, every_master_with_its_slots_and_a_failover_followed, 120)
{
	int masters[CL_MASTERS], mport = lb_free_tcp_port();
	char url[64], name[64];
	const char *text;
	double slots = 0;
	lb_broker *b;
	lb_client *c;

	cl_masters(masters);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", mport);
	b = lb_broker_start_url(cl_seed_url(), "--metrics", url, NULL);
	c = lb_connect(b, LB_TCP);
	cl_lock_name(1, 0, name, sizeof(name));
	lb_must_acquire(c, name, 5000);

	text = scrape(mport);
	cr_assert_not_null(strstr(text, "# TYPE lockbroker_redis_master_up gauge"));
	cr_assert_not_null(strstr(text, "# TYPE lockbroker_redis_master_redirects_total counter"));
	for (int i = 0; i < CL_MASTERS; i++) {
		cr_expect_eq(master_sample(text, "lockbroker_redis_master_up", masters[i]), 1,
		             "master %d not up: %s", masters[i], text);
		cr_expect_eq(master_sample(text, "lockbroker_redis_master_redirects_total", masters[i]), 0);
		cr_expect_geq(master_sample(text, "lockbroker_redis_master_pending", masters[i]), 0);
		slots += master_sample(text, "lockbroker_redis_master_slots", masters[i]);
	}
	cr_expect_eq(slots, SLOT_COUNT, "the masters' slots add up to %.0f", slots);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_redis_up"), 1);

	/* Master 1 dies: its replica's series replace its own. */
	int old = masters[1];
	cl_kill_node(old);
	cl_wait_failover(old, 30000);
	cl_masters(masters);
	for (int t = 0; t < 100; t++) {
		text = scrape(mport);
		if (master_sample(text, "lockbroker_redis_master_up", masters[1]) == 1 &&
		    master_sample(text, "lockbroker_redis_master_up", old) < 0)
			break;
		lb_sleep_ms(100);
	}
	cr_expect_eq(master_sample(text, "lockbroker_redis_master_up", masters[1]), 1,
	             "the new master is not shown up: %s", text);
	cr_expect_lt(master_sample(text, "lockbroker_redis_master_up", old), 0,
	             "the dead master is still shown: %s", text);
	slots = 0;
	for (int i = 0; i < CL_MASTERS; i++)
		slots += master_sample(text, "lockbroker_redis_master_slots", masters[i]);
	cr_expect_eq(slots, SLOT_COUNT, "after the failover the slots add up to %.0f", slots);
	lb_close(c);
	lb_end();
}
