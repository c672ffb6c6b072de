/*
 * Mutual exclusion across a Sentinel failover (issue 16): workers on two
 * brokers loop on one lock and, while they hold it, write to a separate
 * Redis (the protected resource, not part of the Sentinel set): a plain
 * read-modify-write counter that loses updates when two holders overlap,
 * and a fenced INCR that the resource refuses for a fence below the highest
 * it has seen. The lock goes free (and the replica has that), replication
 * to the replica is cut, one holder on broker A is granted, the others
 * queue behind it, and the master is killed. Broker A is frozen (SIGSTOP)
 * through the switch until broker B has served on the new master: a broker
 * slow to hear of the switch.
 *
 * Without WAIT broker A answered that grant from the old master alone; the
 * new master never had it and B grants the lock again while the holder
 * still writes: the overlap lasts until A wakes, switches and tells the
 * holder `lost` (gone). The test asserts that the window exists and that
 * the fenced resource refused the stale holder, and reports the damage to
 * the plain counter. With --redis-wait-replicas 1 no grant is answered
 * while the replica cannot have it, so the new master has every grant the
 * clients heard of: no overlap, no lost update, no fenced write refused.
 *
 * Worker threads never assert: they record, and the main thread asserts.
 */
#include "tests/ha/ha.h"
#include "tests/integration/mclient.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NWORKERS 4
#define MAX_HOLDS 4096
#define LONG_HOLD_MS 10000
#define AFTER_SERVED_MS 2500
#define FROZEN_AFTER_B_MS 700
#define LOCK "fx"

/* KEYS: counter, highest fence; ARGV: fence. -1 when refused. */
static const char FENCED_INCR[] =
    "local top = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "local f = tonumber(ARGV[1]) "
    "if f < top then return -1 end "
    "if f > top then redis.call('SET', KEYS[2], ARGV[1]) end "
    "return redis.call('INCR', KEYS[1])";

typedef struct {
	int64_t from_ns, to_ns;
	json_int_t fence;
	int thread;
	bool lost; /* ended by a `lost` event */
} hold_t;

typedef struct {
	int index;
	int port;
	bool long_holder; /* acquires once the main thread says, holds long */
	const char *resource_sock;
	unsigned seed;
	hold_t holds[MAX_HOLDS];
	int nholds;
	long plain_done, fenced_ok, fenced_refused;
	long lost_events, release_not_held, unavailable;
	char error[1024];
} worker_t;

static atomic_bool stop, go_long, long_granted, quiet;
static atomic_int idle; /* workers kept from acquiring by quiet */
static atomic_int inside, overlaps;
static _Atomic int64_t last_grant_ns[2]; /* per broker, for the main thread */

#define FAIL(...)                                                              \
	do {                                                                       \
		snprintf(w->error, sizeof(w->error), __VA_ARGS__);                     \
		goto out;                                                              \
	} while (0)

/* One write of each kind to the resource. false: the resource failed. */
static bool write_resource(worker_t *w, redisContext *rc, json_int_t fence)
{
	redisReply *rep = redisCommand(rc, "GET fx-plain");
	if (!rep)
		return false;
	long v = rep->type == REDIS_REPLY_STRING ? atol(rep->str) : 0;
	freeReplyObject(rep);
	lb_sleep_ms(1);
	rep = redisCommand(rc, "SET fx-plain %ld", v + 1);
	if (!rep)
		return false;
	freeReplyObject(rep);
	w->plain_done++;
	rep = redisCommand(rc, "EVAL %s 2 fx-fenced fx-top %lld", FENCED_INCR, (long long)fence);
	if (!rep || rep->type != REDIS_REPLY_INTEGER) {
		if (rep)
			freeReplyObject(rep);
		return false;
	}
	if (rep->integer < 0)
		w->fenced_refused++;
	else
		w->fenced_ok++;
	freeReplyObject(rep);
	return true;
}

/* Holds lease until hold_ms pass, stop is set or a `lost` event for it
 * comes, writing the resource all along. true when it was lost. */
static bool hold(worker_t *w, mclient *c, redisContext *rc, const char *lease, json_int_t fence,
                 int hold_ms, bool *resource_ok)
{
	int64_t end = lb_now_ms() + hold_ms;
	*resource_ok = true;

	while (lb_now_ms() < end && !atomic_load(&stop)) {
		if (!write_resource(w, rc, fence)) {
			*resource_ok = false;
			return false;
		}
		json_t *ev = mc_event(c, 3);
		if (!ev)
			continue;
		bool mine = strcmp(json_string_value(json_object_get(ev, "event")) ?: "", "lost") == 0 &&
		            strcmp(json_string_value(json_object_get(ev, "lease")) ?: "", lease) == 0;
		json_decref(ev);
		if (mine) {
			w->lost_events++;
			return true;
		}
	}
	return false;
}

static void *worker(void *arg)
{
	worker_t *w = arg;
	mclient c = {.fd = -1};
	json_int_t id = 0;
	char line[512], lease[256];
	redisContext *rc = redisConnectUnix(w->resource_sock);

	if (!rc || rc->err)
		FAIL("thread %d: cannot connect to the resource", w->index);
	if (mc_connect(&c, w->port, NULL) != 0)
		FAIL("thread %d: cannot connect to the broker", w->index);
	while (w->long_holder && !atomic_load(&go_long) && !atomic_load(&stop))
		lb_sleep_ms(5);
	while (!atomic_load(&stop)) {
		if (!w->long_holder && atomic_load(&quiet)) {
			atomic_fetch_add(&idle, 1);
			while (atomic_load(&quiet) && !atomic_load(&stop))
				lb_sleep_ms(2);
			atomic_fetch_sub(&idle, 1);
			continue;
		}
		snprintf(line, sizeof(line),
		         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"" LOCK
		         "\",\"ttl_ms\":%d,\"wait_ms\":30000}\n",
		         (long long)++id, w->long_holder ? 30000 : 3000);
		if (!mc_send(&c, line))
			FAIL("thread %d: send failed", w->index);
		json_t *resp = mc_wait(&c, id, 40000);
		if (!resp)
			FAIL("thread %d: no answer to acquire %lld within 40 s", w->index, (long long)id);
		if (!json_is_true(json_object_get(resp, "ok"))) {
			bool unavailable = strcmp(mc_err_code(resp), "unavailable") == 0;
			char *d = json_dumps(resp, JSON_COMPACT);
			json_decref(resp);
			if (!unavailable) {
				snprintf(w->error, sizeof(w->error), "thread %d: acquire: %s", w->index,
				         d ? d : "?");
				free(d);
				goto out;
			}
			free(d);
			w->unavailable++;
			lb_sleep_ms(50);
			continue;
		}
		json_int_t fence = json_integer_value(json_object_get(resp, "fence"));
		snprintf(lease, sizeof(lease), "%s",
		         json_string_value(json_object_get(resp, "lease")) ?: "");
		json_decref(resp);

		hold_t *h = w->nholds < MAX_HOLDS ? &w->holds[w->nholds++] : NULL;
		int64_t from = mc_now_ns();
		if (atomic_fetch_add(&inside, 1) > 0)
			atomic_fetch_add(&overlaps, 1);
		if (w->long_holder)
			atomic_store(&long_granted, true);
		atomic_store(&last_grant_ns[w->index % 2], from);
		bool resource_ok;
		bool lost = hold(w, &c, rc, lease, fence,
		                 w->long_holder ? LONG_HOLD_MS : 10 + (int)(mc_rand(&w->seed) % 60),
		                 &resource_ok);
		w->long_holder = false; /* once */
		atomic_fetch_sub(&inside, 1);
		if (h)
			*h = (hold_t){from, mc_now_ns(), fence, w->index, lost};
		if (!resource_ok)
			FAIL("thread %d: the resource failed: %s", w->index, rc->errstr);
		if (lost)
			continue;
		snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"release\",\"lease\":\"%s\"}\n",
		         (long long)++id, lease);
		if (!mc_send(&c, line))
			FAIL("thread %d: send failed", w->index);
		resp = mc_wait(&c, id, 40000);
		if (!resp)
			FAIL("thread %d: no answer to release within 40 s", w->index);
		if (!json_is_true(json_object_get(resp, "ok"))) {
			if (strcmp(mc_err_code(resp), "not_held") == 0)
				w->release_not_held++; /* lost, and told only now */
			else if (strcmp(mc_err_code(resp), "unavailable") == 0)
				w->unavailable++;
			else {
				char *d = json_dumps(resp, JSON_COMPACT);
				snprintf(w->error, sizeof(w->error), "thread %d: release: %s", w->index,
				         d ? d : "?");
				free(d);
				json_decref(resp);
				goto out;
			}
		}
		json_decref(resp);
	}
out:
	mc_close(&c);
	if (rc)
		redisFree(rc);
	return NULL;
}

typedef struct {
	int holds, lost, overlapping_pairs;
	double overlap_ms;
	long plain_done, plain_lost, fenced_ok, fenced_refused, lost_events, release_not_held;
	json_int_t fence_before_kill; /* highest fence granted before the kill */
	json_int_t lowest_fence_after; /* lowest fence granted after the kill */
	long failover_lost;            /* the brokers' failover_lost_total */
	bool monotonic;                /* fences rise in grant order */
	double told_lost_ms;           /* kill -> the holder the new master lost heard it; -1 */
	double first_grant_ms[2];      /* kill -> first grant after it, per broker */
} outcome;

static void print_master_lines(const lb_broker *b)
{
	FILE *f = fopen(lb_broker_log(b), "r");
	char line[1024];

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "master") || strstr(line, "sentinel"))
			fprintf(stderr, "  %s", line);
	if (f)
		fclose(f);
}

static int by_start(const void *a, const void *b)
{
	const hold_t *x = a, *y = b;
	return x->from_ns < y->from_ns ? -1 : x->from_ns > y->from_ns;
}

static void run(const char *const *wait_flags, outcome *o, int64_t *long_granted_ms)
{
	lb_redis *res = lb_redis_start(false);
	const char *url = ha_sentinel_url(NULL);
	lb_broker *br[2];
	for (int k = 0; k < 2; k++)
		br[k] = wait_flags[0] ? lb_broker_start_url(url, wait_flags[0], wait_flags[1],
		                                            wait_flags[2], wait_flags[3], NULL)
		                      : lb_broker_start_url(url, NULL);
	int m = ha_master_port(), r = ha_replica_port();
	static worker_t w[NWORKERS + 1];
	pthread_t th[NWORKERS + 1];

	atomic_store(&stop, false);
	atomic_store(&quiet, false);
	atomic_store(&idle, 0);
	atomic_store(&go_long, false);
	atomic_store(&long_granted, false);
	atomic_store(&inside, 0);
	atomic_store(&overlaps, 0);
	atomic_store(&last_grant_ns[0], 0);
	atomic_store(&last_grant_ns[1], 0);
	for (int k = 0; k <= NWORKERS; k++) {
		memset(&w[k], 0, sizeof(w[k]));
		w[k].index = k;
		w[k].port = lb_broker_port(br[k % 2]);
		w[k].long_holder = k == NWORKERS; /* on broker A */
		w[k].resource_sock = lb_redis_url(res) + strlen("unix://");
		w[k].seed = 4242u + 7919u * (unsigned)k;
		cr_assert_eq(pthread_create(&th[k], NULL, worker, &w[k]), 0);
	}

	lb_sleep_ms(1000); /* contention on the healthy pair */
	/* The lock goes free, and the replica has that: the new master will
	 * have it free, not held by a lease released after the cut. */
	atomic_store(&quiet, true);
	int64_t end = lb_now_ms() + 10000;
	while (atomic_load(&idle) < NWORKERS && lb_now_ms() < end)
		lb_sleep_ms(5);
	cr_assert_eq(atomic_load(&idle), NWORKERS, "the workers did not stop acquiring");
	redisReply *acked = ha_node_cmd(m, "WAIT 1 2000");
	cr_assert_eq(acked->integer, 1, "the replica did not catch up before the cut");
	ha_pause_replication(r);
	int64_t asked = lb_now_ms();
	atomic_store(&go_long, true);
	while (!atomic_load(&long_granted) && lb_now_ms() - asked < 2500)
		lb_sleep_ms(5);
	*long_granted_ms = atomic_load(&long_granted) ? lb_now_ms() - asked : -1;
	atomic_store(&quiet, false);
	lb_sleep_ms(300); /* the others queue behind the long holder */
	int64_t kill_ns = mc_now_ns();
	ha_kill_node(m);
	/* Broker A, the long holder's, is frozen through the switch (a broker
	 * slow to hear of it: CPU starved, cut off from the sentinels) until
	 * broker B has served on the new master for a while. */
	lb_sleep_ms(500);
	cr_assert_eq(kill(lb_broker_pid(br[0]), SIGSTOP), 0);
	int64_t failover_ms = ha_try_wait_failover(m, 30000);
	if (failover_ms >= 0)
		ha_start_node(m); /* a replica again, for WAIT */
	int64_t b_end = lb_now_ms() + 30000;
	while (failover_ms >= 0 && atomic_load(&last_grant_ns[1]) < kill_ns && lb_now_ms() < b_end)
		lb_sleep_ms(10);
	if (atomic_load(&last_grant_ns[1]) > kill_ns)
		lb_sleep_ms(FROZEN_AFTER_B_MS);
	kill(lb_broker_pid(br[0]), SIGCONT);
	cr_assert_geq(failover_ms, 0, "no failover within 30 s");
	cr_assert_gt(atomic_load(&last_grant_ns[1]), kill_ns, "broker B never granted after the kill");
	/* Runs on until both brokers have granted on the new master for a while. */
	int64_t served_ns = 0;
	end = lb_now_ms() + 30000;
	while (!served_ns && lb_now_ms() < end) {
		if (atomic_load(&last_grant_ns[0]) > kill_ns && atomic_load(&last_grant_ns[1]) > kill_ns)
			served_ns = mc_now_ns();
		else
			lb_sleep_ms(20);
	}
	lb_sleep_ms(AFTER_SERVED_MS);
	atomic_store(&stop, true);
	for (int k = 0; k <= NWORKERS; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k <= NWORKERS; k++)
		cr_assert_eq(w[k].error[0], '\0', "%s", w[k].error);
	cr_assert_neq(served_ns, 0, "the two brokers did not both grant on the new master in 30 s");

	memset(o, 0, sizeof(*o));
	hold_t *all = malloc(sizeof(hold_t) * (NWORKERS + 1) * MAX_HOLDS);
	cr_assert_not_null(all);
	for (int k = 0; k <= NWORKERS; k++) {
		memcpy(all + o->holds, w[k].holds, sizeof(hold_t) * (size_t)w[k].nholds);
		o->holds += w[k].nholds;
		o->plain_done += w[k].plain_done;
		o->fenced_ok += w[k].fenced_ok;
		o->fenced_refused += w[k].fenced_refused;
		o->lost_events += w[k].lost_events;
		o->release_not_held += w[k].release_not_held;
	}
	qsort(all, (size_t)o->holds, sizeof(*all), by_start);
	o->monotonic = true;
	o->lowest_fence_after = INT64_MAX;
	o->told_lost_ms = o->first_grant_ms[0] = o->first_grant_ms[1] = -1;
	for (int i = 0; i < o->holds; i++) {
		o->lost += all[i].lost;
		if (all[i].lost && o->told_lost_ms < 0)
			o->told_lost_ms = (double)(all[i].to_ns - kill_ns) / 1e6;
		double after_kill = (double)(all[i].from_ns - kill_ns) / 1e6;
		double *first = &o->first_grant_ms[all[i].thread % 2];
		if (after_kill > 0 && *first < 0)
			*first = after_kill;
		if (i > 0 && all[i].fence <= all[i - 1].fence)
			o->monotonic = false;
		if (all[i].from_ns < kill_ns && all[i].fence > o->fence_before_kill)
			o->fence_before_kill = all[i].fence;
		if (all[i].from_ns > kill_ns && all[i].fence < o->lowest_fence_after)
			o->lowest_fence_after = all[i].fence;
		for (int j = i + 1; j < o->holds && all[j].from_ns < all[i].to_ns; j++) {
			o->overlapping_pairs++;
			int64_t to = all[j].to_ns < all[i].to_ns ? all[j].to_ns : all[i].to_ns;
			o->overlap_ms += (double)(to - all[j].from_ns) / 1e6;
		}
	}
	free(all);
	redisReply *rep = lb_redis_cmd(res, "GET fx-plain");
	cr_assert_eq(rep->type, REDIS_REPLY_STRING);
	o->plain_lost = o->plain_done - atol(rep->str);
	rep = lb_redis_cmd(res, "GET fx-fenced");
	cr_assert_eq(rep->type, REDIS_REPLY_STRING);
	cr_assert_eq(atol(rep->str), o->fenced_ok, "the fenced counter and the writes it took differ");
	cr_assert_eq(o->overlapping_pairs > 0, atomic_load(&overlaps) > 0,
	             "%d overlapping pairs, %d overlaps seen live", o->overlapping_pairs,
	             atomic_load(&overlaps));
	cr_assert_gt(o->holds, 20, "only %d grants", o->holds);

	long failovers = 0;
	for (int k = 0; k < 2; k++) {
		lb_client *s = lb_connect(br[k], LB_TCP);
		json_t *st = lb_stats(s);
		/* One failover, or two: the sentinels now and then fail over a
		 * second time, back to the restarted old master (announced with
		 * +switch-master; seen about once in 15 runs). */
		if (lb_int(st, "failovers_total") != 1)
			print_master_lines(br[k]);
		cr_assert(lb_int(st, "failovers_total") >= 1 && lb_int(st, "failovers_total") <= 2,
		          "broker %d: %s", k, lb_dump(st));
		failovers += lb_int(st, "failovers_total");
		o->failover_lost += lb_int(st, "failover_lost_total");
	}
	cr_assert_geq(failovers, 2);
}

static void report(const char *mode, const outcome *o, int64_t long_granted_ms)
{
	fprintf(stderr,
	        "ha: mutex across a failover, %s: %d grants, %d ended by lost, %ld releases "
	        "not_held; %d overlapping pairs (%.1f ms together); plain counter lost %ld of %ld "
	        "updates; fenced writes refused %ld of %ld; leases lost to the failover %ld; holder asked "
	        "during the cut: %s; after the kill: lost told at %.0f ms, first grant on broker A "
	        "%.0f ms, B %.0f ms\n",
	        mode, o->holds, o->lost, o->release_not_held, o->overlapping_pairs, o->overlap_ms,
	        o->plain_lost, o->plain_done, o->fenced_refused, o->fenced_refused + o->fenced_ok,
	        o->failover_lost, long_granted_ms >= 0 ? "granted" : "not granted", o->told_lost_ms,
	        o->first_grant_ms[0], o->first_grant_ms[1]);
}

HA_TEST(failover_mutex, without_wait_a_grant_the_new_master_lost_is_reported_and_fenced, 150)
{
	static const char *const none[] = {NULL};
	outcome o;
	int64_t long_granted_ms;

	run(none, &o, &long_granted_ms);
	report("no WAIT", &o, long_granted_ms);
	/* The holder granted while replication was cut: the new master never
	 * had it, so it was told `lost`. */
	cr_assert_geq(long_granted_ms, 0, "the holder was not granted while replication was cut");
	cr_assert_geq(o.lost + o.release_not_held, 1, "no holder heard that its grant was lost");
	cr_assert_geq(o.failover_lost, 1, "the brokers counted no lease lost to the failover");
	/* Fences after the switch pass every fence before it. */
	cr_assert_gt(o.lowest_fence_after, o.fence_before_kill,
	             "a fence after the failover (%lld) is not above one before it (%lld)",
	             (long long)o.lowest_fence_after, (long long)o.fence_before_kill);
	/* The asynchronous replication window: broker B granted on the new
	 * master while A, frozen, had not told its holder. The fenced resource
	 * refuses the older holder's writes once the newer one wrote; the plain
	 * counter has no such guard (its losses are reported, not asserted:
	 * they depend on how the writes interleave). */
	cr_assert_gt(o.overlapping_pairs, 0, "no overlap: the window this test shows is gone "
	                                     "(update the README and PROTOCOL.md)");
	cr_assert_gt(o.fenced_refused, 0, "the fenced resource refused none of the stale writes");
}

HA_TEST(failover_mutex, with_wait_no_two_holders_ever_overlap, 150)
{
	static const char *const wait1[] = {"--redis-wait-replicas", "1", "--redis-wait-ms", "300"};
	outcome o;
	int64_t long_granted_ms;

	run(wait1, &o, &long_granted_ms);
	report("WAIT 1", &o, long_granted_ms);
	cr_assert_lt(long_granted_ms, 0, "a grant was answered while no replica could have it");
	cr_assert_eq(o.overlapping_pairs, 0, "%d overlapping holds (%.1f ms)", o.overlapping_pairs,
	             o.overlap_ms);
	cr_assert_eq(o.plain_lost, 0, "%ld updates lost", o.plain_lost);
	cr_assert_eq(o.fenced_refused, 0, "%ld fenced writes refused", o.fenced_refused);
	cr_assert_eq(o.lost, 0, "%d grants lost with WAIT", o.lost);
	cr_assert_eq(o.failover_lost, 0, "%ld leases lost to the failover with WAIT", o.failover_lost);
	cr_assert(o.monotonic, "fences did not rise in grant order");
	cr_assert_gt(o.lowest_fence_after, o.fence_before_kill);
}
