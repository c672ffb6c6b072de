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
 * The workload of tests/integration/test_mutex.c, spread over the masters.
 * The harness client is not thread-safe: each thread has its own mclient
 * and hiredis connection, never calls cr_assert, and records what went
 * wrong for the main thread.
 */
#include "tests/cluster/cl.h"
#include "tests/integration/mclient.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NWORKERS 6
#define NLOCKS CL_MASTERS
#define RUN_MS 4000
#define MAX_GRANTS 8192

typedef struct {
	int64_t at_ns;
	json_int_t fence;
	int worker;
} grant_t;

typedef struct {
	int index;
	int lock;              /* index into the locks: its master */
	const char *name;
	int port;
	const char *unix_path; /* NULL: TCP */
	const char *counter_sock;
	int64_t end_ms;
	unsigned seed;
	/* results */
	grant_t grants[MAX_GRANTS];
	int ngrants;
	long completed;        /* increments done and released (or closed) */
	long uncertain;        /* increments whose release answered not ok */
	long aborts, walkaways, timeouts;
	char error[1024];
} worker_t;

static atomic_int inside[NLOCKS];
static atomic_int overlaps[NLOCKS];

#define FAIL(...)                                                          \
	do {                                                                   \
		snprintf(w->error, sizeof(w->error), __VA_ARGS__);                 \
		goto out;                                                          \
	} while (0)

static const char *err_code(json_t *resp)
{
	const char *code = json_string_value(json_object_get(json_object_get(resp, "error"), "code"));
	return code ? code : "";
}

static void *worker(void *arg)
{
	worker_t *w = arg;
	mclient c = {.fd = -1};
	json_int_t id = 0;
	char line[512], lease[128];
	redisContext *rc = redisConnectUnix(w->counter_sock);

	if (!rc || rc->err)
		FAIL("worker %d: cannot connect to the counters' redis", w->index);
	while (lb_now_ms() < w->end_ms) {
		if (c.fd < 0 && mc_connect(&c, w->port, w->unix_path) != 0)
			FAIL("worker %d: cannot connect to the broker", w->index);
		unsigned dice = mc_rand(&w->seed) % 20;
		bool short_wait = dice < 3;
		id++;
		if (short_wait)
			snprintf(line, sizeof(line),
			         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"%s\",\"ttl_ms\":10000,"
			         "\"wait_ms\":%u}\n",
			         (long long)id, w->name, 1 + mc_rand(&w->seed) % 15);
		else
			snprintf(line, sizeof(line),
			         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"%s\",\"ttl_ms\":10000}\n",
			         (long long)id, w->name);
		if (!mc_send(&c, line))
			FAIL("worker %d: send failed", w->index);
		if (dice == 3) {
			/* gives up while waiting (or just granted): disconnects */
			mc_close(&c);
			w->walkaways++;
			continue;
		}
		json_t *resp = mc_wait(&c, id, 20000);
		if (!resp)
			FAIL("worker %d: no answer to acquire %lld of %s within 20 s", w->index,
			     (long long)id, w->name);
		if (!json_is_true(json_object_get(resp, "ok"))) {
			bool to = short_wait && strcmp(err_code(resp), "timeout") == 0;
			char *d = json_dumps(resp, JSON_COMPACT);
			json_decref(resp);
			if (to) {
				free(d);
				w->timeouts++;
				continue;
			}
			snprintf(w->error, sizeof(w->error), "worker %d: acquire of %s failed: %s",
			         w->index, w->name, d ? d : "?");
			free(d);
			goto out;
		}
		int64_t at = mc_now_ns();
		json_int_t fence = json_integer_value(json_object_get(resp, "fence"));
		json_int_t count = json_integer_value(json_object_get(resp, "count"));
		snprintf(lease, sizeof(lease), "%s",
		         json_string_value(json_object_get(resp, "lease")) ?: "");
		json_decref(resp);
		if (count != 1)
			FAIL("worker %d: count %lld on a fresh acquire of %s", w->index, (long long)count,
			     w->name);
		if (atomic_exchange(&inside[w->lock], 1) != 0)
			atomic_fetch_add(&overlaps[w->lock], 1);

		/* the critical section: a read-modify-write of the lock's counter */
		redisReply *rep = redisCommand(rc, "GET cl-counter:%d", w->lock);
		if (!rep)
			FAIL("worker %d: GET failed", w->index);
		long v = rep->type == REDIS_REPLY_STRING ? atol(rep->str) : 0;
		freeReplyObject(rep);
		lb_sleep_ms(1);
		rep = redisCommand(rc, "SET cl-counter:%d %ld", w->lock, v + 1);
		if (!rep)
			FAIL("worker %d: SET failed", w->index);
		freeReplyObject(rep);
		if (w->ngrants < MAX_GRANTS)
			w->grants[w->ngrants++] = (grant_t){at, fence, w->index};
		atomic_store(&inside[w->lock], 0);

		if (mc_rand(&w->seed) % 12 == 0) {
			/* abrupt disconnect while holding: the session's end frees it */
			mc_close(&c);
			w->completed++;
			w->aborts++;
			continue;
		}
		id++;
		snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"release\",\"lease\":\"%s\"}\n",
		         (long long)id, lease);
		if (!mc_send(&c, line))
			FAIL("worker %d: send failed", w->index);
		resp = mc_wait(&c, id, 10000);
		if (!resp)
			FAIL("worker %d: no answer to the release of %s", w->index, w->name);
		bool ok = json_is_true(json_object_get(resp, "ok")) &&
		          json_integer_value(json_object_get(resp, "count")) == 0;
		char *d = json_dumps(resp, JSON_COMPACT);
		json_decref(resp);
		if (!ok) {
			/* The lease was taken from us while we held it: recorded, the
			 * increment counts as uncertain, the session goes on. */
			if (!w->error[0])
				snprintf(w->error, sizeof(w->error),
				         "worker %d: release of %s (fence %lld) failed: %s; last event: %s",
				         w->index, w->name, (long long)fence, d ? d : "?", c.last_event);
			free(d);
			w->uncertain++;
			continue;
		}
		free(d);
		w->completed++;
	}
out:
	mc_close(&c);
	if (rc)
		redisFree(rc);
	return NULL;
}

static int cmp_grant(const void *a, const void *b)
{
	const grant_t *x = a, *y = b;

	if (x->at_ns != y->at_ns)
		return x->at_ns < y->at_ns ? -1 : 1;
	return x->fence < y->fence ? -1 : x->fence > y->fence;
}

/* Fences of one lock's grants, in grant order, strictly increase. */
static void expect_fences_increase(const worker_t *w, int lock, const char *name)
{
	int n = 0, bad = -1;
	grant_t *all;

	for (int k = 0; k < NWORKERS; k++)
		if (w[k].lock == lock)
			n += w[k].ngrants;
	all = malloc(sizeof(grant_t) * (size_t)(n ? n : 1));
	cr_assert_not_null(all);
	n = 0;
	for (int k = 0; k < NWORKERS; k++)
		for (int j = 0; w[k].lock == lock && j < w[k].ngrants; j++)
			all[n++] = w[k].grants[j];
	qsort(all, (size_t)n, sizeof(*all), cmp_grant);
	for (int j = 1; j < n && bad < 0; j++)
		if (all[j].fence <= all[j - 1].fence)
			bad = j;
	grant_t prev = bad > 0 ? all[bad - 1] : (grant_t){0};
	grant_t cur = bad > 0 ? all[bad] : (grant_t){0};
	free(all);
	cr_assert_lt(bad, 0, "%s: fence went backwards at grant %d: worker %d got %lld, then "
	                     "worker %d got %lld",
	             name, bad, prev.worker, (long long)prev.fence, cur.worker,
	             (long long)cur.fence);
}

CL_TEST(cluster_mutex, exclusion_on_every_master_with_two_brokers, 120)
{
	int m[CL_MASTERS];
	char name[NLOCKS][32];
	static worker_t w[NWORKERS];
	pthread_t th[NWORKERS];

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
	}
	/* worker k: lock k % 3, broker k % 2, so each lock has a worker on
	 * each broker */
	for (int k = 0; k < NWORKERS; k++) {
		memset(&w[k], 0, sizeof(w[k]));
		w[k].index = k;
		w[k].lock = k % NLOCKS;
		w[k].name = name[w[k].lock];
		w[k].port = lb_broker_port(br[k % 2]);
		w[k].unix_path = (k / 2) % 2 ? lb_broker_unix_path(br[k % 2]) : NULL;
		w[k].counter_sock = url + 7;
		w[k].end_ms = end;
		w[k].seed = 4242u + 7919u * (unsigned)k;
		cr_assert_eq(pthread_create(&th[k], NULL, worker, &w[k]), 0);
	}
	for (int k = 0; k < NWORKERS; k++)
		pthread_join(th[k], NULL);

	long completed[NLOCKS] = {0}, uncertain[NLOCKS] = {0};
	long aborts = 0, walkaways = 0, timeouts = 0;
	int ngrants = 0;
	for (int k = 0; k < NWORKERS; k++) {
		cr_expect_eq(w[k].error[0], '\0', "%s", w[k].error);
		completed[w[k].lock] += w[k].completed;
		uncertain[w[k].lock] += w[k].uncertain;
		aborts += w[k].aborts;
		walkaways += w[k].walkaways;
		timeouts += w[k].timeouts;
		ngrants += w[k].ngrants;
		cr_expect_gt(w[k].ngrants, 0, "worker %d was never granted %s", k, w[k].name);
	}
	fprintf(stderr, "cluster_mutex: %d grants; increments per lock %ld, %ld, %ld; %ld abrupt "
	                "disconnects while holding, %ld while waiting, %ld timeouts\n",
	        ngrants, completed[0], completed[1], completed[2], aborts, walkaways, timeouts);
	for (int k = 0; k < NWORKERS; k++)
		if (w[k].error[0] && !w[k].uncertain)
			cr_assert_fail("%s", w[k].error); /* the worker stopped */
	cr_assert_gt(ngrants, 50, "only %d grants in %d ms", ngrants, RUN_MS);
	cr_assert_gt(aborts, 0, "no worker disconnected while holding");

	for (int i = 0; i < NLOCKS; i++) {
		cr_expect_eq(uncertain[i], 0, "%s: %ld times a lease was released under its holder",
		             name[i], uncertain[i]);
		cr_expect_eq(atomic_load(&overlaps[i]), 0, "%s: %d times two holders were inside at "
		                                            "once",
		             name[i], atomic_load(&overlaps[i]));
		/* no increment lost */
		redisReply *rep = lb_redis_cmd(counters, "GET cl-counter:%d", i);
		cr_assert_eq(rep->type, REDIS_REPLY_STRING, "no counter of %s", name[i]);
		cr_expect(atol(rep->str) >= completed[i] && atol(rep->str) <= completed[i] + uncertain[i],
		          "%s (master %d): counter %s, want %ld increments (+ up to %ld uncertain)",
		          name[i], m[i], rep->str, completed[i], uncertain[i]);
		expect_fences_increase(w, i, name[i]);
	}

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
