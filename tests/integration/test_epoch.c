/*
 * test_epoch.c - the broker never takes a view of the master older than
 * one it took before (issue 26, point 4, "Stale topology").
 *
 * Sentinel: a sentinel that missed a failover still names the deposed
 * master, with the config-epoch from before it. The fake sentinels here
 * (fakeresp.h) name one of two real redis-servers, A (deposed, still a
 * master that takes writes: the danger) or B (the master now), with the
 * epoch a test gives; the broker must follow the newest view (the highest
 * config-epoch), never an older one than it took unless a majority of the
 * sentinels agree on it (SENTINEL MONITOR made anew starts at epoch 0).
 * Where a broker serves is read from the servers themselves: the lock's
 * keys, the broker's named connections (CLIENT LIST), the EVALSHA calls
 * (INFO commandstats).
 *
 * Cluster: a master deposed behind a partition of the cluster bus (a
 * fake node here) still claims every slot, with its old config epoch,
 * while a real one-node cluster serves them with a newer one; the broker
 * must serve from the real node and never go to the deposed one.
 *
 * The broker asks the sentinels every 5 s, and the cluster's nodes every
 * 10 s; the tests wait for the fakes to be asked (they count what they
 * are sent) rather than for a time.
 */
#include "tests/integration/fakeresp.h"
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MASTER_NAME "epochmaster"
#define UP_WITHIN_MS 30000
#define ASKED_WITHIN_MS 30000

/* The brokers stop first (lb_teardown): they close their connections while
 * the fakes still answer. */
static void epoch_teardown(void)
{
	lb_teardown();
	fr_stop();
}

#define EPOCH_TEST(name, secs) \
	Test(epoch, name, .init = lb_setup, .fini = epoch_teardown, .timeout = (secs))

static int port_of(lb_redis *r)
{
	const char *url = lb_redis_url(r), *colon = strrchr(url, ':');

	cr_assert_not_null(colon, "%s", url);
	return atoi(colon + 1);
}

static bool log_has(const lb_broker *b, const char *what)
{
	FILE *f = fopen(lb_broker_log(b), "r");
	char line[4096];
	bool found = false;

	cr_assert_not_null(f, "%s", lb_broker_log(b));
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* A broker on url, once its stats say "redis":"up". */
static lb_broker *broker_up(const char *url, lb_client **c)
{
	lb_broker *b = lb_broker_start_url_no_redis_wait(url, NULL);
	int64_t end = lb_now_ms() + UP_WITHIN_MS;

	*c = lb_connect(b, LB_TCP);
	while (strcmp(lb_str(lb_stats(*c), "redis"), "up") != 0) {
		if (lb_now_ms() > end) {
			lb_broker_print_log_tail(b);
			cr_assert_fail("the broker did not serve within %d ms", UP_WITHIN_MS);
		}
		lb_sleep_ms(50);
	}
	return b;
}

/* Waits until fake server id was sent at least n commands cmd. */
static void wait_count(int id, const char *cmd, int n, const char *who)
{
	int64_t end = lb_now_ms() + ASKED_WITHIN_MS;

	while (fr_count(id, cmd) < n) {
		cr_assert_lt(lb_now_ms(), end, "%s was sent %d %s within %d ms, not %d", who,
		             fr_count(id, cmd), cmd, ASKED_WITHIN_MS, n);
		lb_sleep_ms(20);
	}
}

/* An exclusive acquire that does not wait, its lease held for a minute. */
static json_t *acquire(lb_client *c, const char *lock)
{
	return lb_call_timeout(c, 20000, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock,
	                       "ttl_ms", 60000, "wait_ms", 0);
}

static size_t broker_conns(lb_redis *r)
{
	long long ids[64];

	return lb_redis_broker_conns(r, ids, 64, true);
}

static long long evalsha_calls(lb_redis *r)
{
	return lb_info_number(lb_redis_cmd(r, "INFO commandstats"), "cmdstat_evalsha:calls=");
}

/* ---- Sentinel ----------------------------------------------------------------- */

/* Two real masters, A (deposed) and B, and three fake sentinels; url names
 * the sentinels in the order s[0], s[1], s[2]. */
struct sfix {
	lb_redis *a, *b;
	int pa, pb;
	int s[3];
	char url[256];
};

static void sentinels_new(struct sfix *f)
{
	f->a = lb_redis_start(true);
	f->b = lb_redis_start(true);
	f->pa = port_of(f->a);
	f->pb = port_of(f->b);
	for (int k = 0; k < 3; k++)
		f->s[k] = fr_add(FR_SENTINEL);
	snprintf(f->url, sizeof(f->url), "sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
	         fr_port(f->s[0]), fr_port(f->s[1]), fr_port(f->s[2]), MASTER_NAME);
}

/* The broker serves lock from on, and has nothing on off: an acquire is
 * granted, the lock's keys are on `on` and none on `off`, where the
 * broker has no connection. never: off never ran a script either. */
static void serves_from(lb_client *c, lb_redis *on, lb_redis *off, const char *lock, bool never,
                        const char *what)
{
	json_t *g = acquire(c, lock);

	cr_assert(lb_is_ok(g), "%s: the acquire of %s failed: %s", what, lock, lb_dump(g));
	cr_assert_eq(lb_redis_count_lock_keys(off, "lb:", lock), 0,
	             "%s: %s was granted on the wrong master (port %d)", what, lock, port_of(off));
	cr_assert_geq(lb_redis_count_lock_keys(on, "lb:", lock), 1,
	              "%s: %s has no key on the master (port %d)", what, lock, port_of(on));
	cr_assert_eq(broker_conns(off), 0, "%s: the broker is connected to the wrong master (port %d)",
	             what, port_of(off));
	if (never)
		cr_assert_eq(evalsha_calls(off), 0, "%s: the wrong master (port %d) ran %lld scripts",
		             what, port_of(off), evalsha_calls(off));
}

/* The first sentinel of the URL missed the failover: it names A with
 * config-epoch 1, the two others name B with 2. The broker serves from B,
 * and still does after more rounds of asking, and after a restart (a
 * broker with no view of its own yet). */
EPOCH_TEST(sentinel_first_sentinel_stale_is_outvoted_by_a_newer_epoch, 120)
{
	struct sfix f;
	lb_client *c;
	char found[64];

	sentinels_new(&f);
	fr_sentinel_view(f.s[0], MASTER_NAME, f.pa, 1);
	fr_sentinel_view(f.s[1], MASTER_NAME, f.pb, 2);
	fr_sentinel_view(f.s[2], MASTER_NAME, f.pb, 2);
	fr_start();
	lb_broker *b = broker_up(f.url, &c);
	serves_from(c, f.b, f.a, "ep-first-1", true, "at start");

	/* Two more rounds of questions: the stale sentinel is asked first in
	 * some of them. */
	wait_count(f.s[0], "SENTINEL", fr_count(f.s[0], "SENTINEL") + 2, "the stale sentinel");
	wait_count(f.s[2], "SENTINEL", fr_count(f.s[2], "SENTINEL") + 1, "the last sentinel");
	lb_sleep_ms(500);
	serves_from(c, f.b, f.a, "ep-first-2", true, "after two rounds");

	lb_broker_restart(b);
	c = lb_connect(b, LB_TCP);
	serves_from(c, f.b, f.a, "ep-first-3", true, "after a restart");
	snprintf(found, sizeof(found), "addr=127.0.0.1:%d", f.pa);
	cr_assert_not(log_has(b, found), "the restarted broker logs the deposed master");
	lb_end();
}

/* The stale sentinel was down while the broker took B (epoch 2); then it
 * comes back, still naming A with epoch 1, while the two others are
 * down: the broker does not go to A (it stays on B) and says why. */
EPOCH_TEST(sentinel_stale_sentinel_alone_does_not_move_the_broker_back, 120)
{
	struct sfix f;
	lb_client *c;

	sentinels_new(&f);
	fr_sentinel_view(f.s[0], MASTER_NAME, f.pa, 1);
	fr_sentinel_view(f.s[1], MASTER_NAME, f.pb, 2);
	fr_sentinel_view(f.s[2], MASTER_NAME, f.pb, 2);
	fr_set_down(f.s[0], true);
	fr_start();
	lb_broker *b = broker_up(f.url, &c);
	serves_from(c, f.b, f.a, "ep-alone-1", true, "with the stale sentinel down");

	fr_set_down(f.s[1], true);
	fr_set_down(f.s[2], true);
	fr_set_down(f.s[0], false);
	/* Two rounds of questions answered by the stale sentinel alone, and
	 * time to act on them. */
	wait_count(f.s[0], "SENTINEL", fr_count(f.s[0], "SENTINEL") + 2, "the stale sentinel");
	lb_sleep_ms(1000);
	serves_from(c, f.b, f.a, "ep-alone-2", true, "with only the stale sentinel up");
	cr_assert(log_has(b, "name an older master than one followed before"),
	          "the log does not say why the stale sentinel's answer was not taken");
	lb_end();
}

/* The broker served from A (every sentinel: A, epoch 1); the first
 * sentinel was cut off while the two others failed A over to B (epoch 2),
 * and the broker followed. Then the stale sentinel comes back, still
 * naming A with epoch 1, and the two others go down: more than 30 s
 * after the failover (the old guard against going back) the broker still
 * does not go back to A. */
EPOCH_TEST(sentinel_stale_sentinel_after_a_failover_is_ignored_past_30_s, 150)
{
	struct sfix f;
	lb_client *c;
	char switched[128];

	sentinels_new(&f);
	for (int k = 0; k < 3; k++)
		fr_sentinel_view(f.s[k], MASTER_NAME, f.pa, 1);
	fr_start();
	lb_broker *b = broker_up(f.url, &c);
	serves_from(c, f.a, f.b, "ep-guard-1", true, "before the failover");

	fr_set_down(f.s[0], true);
	fr_sentinel_view(f.s[1], MASTER_NAME, f.pb, 2);
	fr_sentinel_view(f.s[2], MASTER_NAME, f.pb, 2);
	snprintf(switched, sizeof(switched), "from=127.0.0.1:%d to=127.0.0.1:%d", f.pa, f.pb);
	int64_t end = lb_now_ms() + ASKED_WITHIN_MS;
	while (!log_has(b, switched)) {
		if (lb_now_ms() > end) {
			lb_broker_print_log_tail(b);
			cr_assert_fail("the broker did not follow the failover to B within %d ms",
			               ASKED_WITHIN_MS);
		}
		lb_sleep_ms(50);
	}
	int64_t failover_at = lb_now_ms();
	json_t *g = lb_acquire_within(c, "ep-guard-2", 60000, 20000);
	cr_assert(lb_is_ok(g), "no acquire after the failover: %s", lb_dump(g));
	serves_from(c, f.b, f.a, "ep-guard-3", false, "after the failover");

	fr_set_down(f.s[1], true);
	fr_set_down(f.s[2], true);
	fr_set_down(f.s[0], false);
	if (lb_now_ms() < failover_at + 31000)
		lb_sleep_ms(failover_at + 31000 - lb_now_ms());
	/* Two rounds answered by the stale sentinel alone more than 30 s
	 * after the failover, and time to act on them. */
	wait_count(f.s[0], "SENTINEL", fr_count(f.s[0], "SENTINEL") + 2, "the stale sentinel");
	lb_sleep_ms(1000);
	serves_from(c, f.b, f.a, "ep-guard-4", false, "30 s after the failover");
	cr_assert(log_has(b, "name an older master than one followed before"),
	          "the log does not say why the stale sentinel's answer was not taken");
	lb_end();
}

/* The broker took B (epoch 2; the first sentinel stale, naming A with
 * 1); then an operator made the sentinels anew (SENTINEL MONITOR): all
 * three name A with epoch 0. A majority agrees on it: the broker goes to
 * A, a failover (every lease checked there). */
EPOCH_TEST(sentinel_reset_to_epoch_0_by_every_sentinel_is_followed, 120)
{
	struct sfix f;
	lb_client *c;
	char switched[128];

	sentinels_new(&f);
	fr_sentinel_view(f.s[0], MASTER_NAME, f.pa, 1);
	fr_sentinel_view(f.s[1], MASTER_NAME, f.pb, 2);
	fr_sentinel_view(f.s[2], MASTER_NAME, f.pb, 2);
	fr_start();
	lb_broker *b = broker_up(f.url, &c);
	serves_from(c, f.b, f.a, "ep-reset-1", true, "before the reset");

	for (int k = 0; k < 3; k++)
		fr_sentinel_view(f.s[k], MASTER_NAME, f.pa, 0);
	snprintf(switched, sizeof(switched), "from=127.0.0.1:%d to=127.0.0.1:%d", f.pb, f.pa);
	int64_t end = lb_now_ms() + ASKED_WITHIN_MS;
	while (!log_has(b, switched)) {
		if (lb_now_ms() > end) {
			lb_broker_print_log_tail(b);
			cr_assert_fail("the broker did not follow the sentinels' reset to A within %d ms",
			               ASKED_WITHIN_MS);
		}
		lb_sleep_ms(50);
	}
	json_t *g = lb_acquire_within(c, "ep-reset-2", 60000, 20000);
	cr_assert(lb_is_ok(g), "no acquire after the reset: %s", lb_dump(g));
	cr_assert_geq(lb_redis_count_lock_keys(f.a, "lb:", "ep-reset-2"), 1, "not granted on A");
	cr_assert_eq(lb_redis_count_lock_keys(f.b, "lb:", "ep-reset-2"), 0, "granted on B");
	end = lb_now_ms() + 10000;
	while (broker_conns(f.b) > 0) {
		cr_assert_lt(lb_now_ms(), end, "the broker kept connections to B after the reset");
		lb_sleep_ms(50);
	}
	lb_end();
}

/* ---- Cluster ------------------------------------------------------------------ */

/* A real one-node cluster serving every slot with config epoch `epoch`. */
static lb_redis *cluster_node_new(long long epoch)
{
	lb_redis *r = lb_redis_start_cluster_node();
	redisReply *rep = lb_redis_cmd(r, "CLUSTER SET-CONFIG-EPOCH %lld", epoch);
	char want[64];

	cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "SET-CONFIG-EPOCH: %s", rep->str);
	rep = lb_redis_cmd(r, "CLUSTER ADDSLOTSRANGE 0 16383");
	cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "ADDSLOTSRANGE: %s", rep->str);
	snprintf(want, sizeof(want), "cluster_current_epoch:%lld\r", epoch);
	int64_t end = lb_now_ms() + 20000;
	for (;;) {
		rep = lb_redis_cmd(r, "CLUSTER INFO");
		if (strstr(rep->str, "cluster_state:ok") && strstr(rep->str, want))
			break;
		cr_assert_lt(lb_now_ms(), end, "the one-node cluster is not ok: %s", rep->str);
		lb_sleep_ms(50);
	}
	return r;
}

/* An acquire of lock is granted by the real node r, and nothing but
 * questions of the topology reached the deposed master d. */
static void cluster_serves_from(lb_client *c, lb_redis *r, int d, const char *lock,
                                const char *what)
{
	json_t *g = acquire(c, lock);

	cr_assert_eq(fr_named_conns(d, "lockbroker-"), 0,
	             "%s: the broker made a pool on the deposed master (%d connections)", what,
	             fr_named_conns(d, "lockbroker-"));
	cr_assert_eq(fr_count(d, "EVALSHA"), 0, "%s: %d scripts went to the deposed master", what,
	             fr_count(d, "EVALSHA"));
	cr_assert(lb_is_ok(g), "%s: the acquire of %s failed: %s", what, lock, lb_dump(g));
	cr_assert_geq(lb_redis_count_lock_keys(r, "lb:", lock), 1, "%s: %s has no key on the real node",
	              what, lock);
}

/* The seeds: a master deposed behind a partition of the cluster bus (a
 * fake node: current epoch 1, every slot its own with config epoch 1,
 * and it takes writes) and a real node serving every slot with config
 * epoch 5, the deposed one first when deposed_first. The broker serves
 * from the real node, and still does after a round of questions that
 * asked the deposed one; nothing reaches the deposed one but those
 * questions. */
static void deposed_master_in_the_seeds(bool deposed_first)
{
	lb_redis *r = cluster_node_new(5);
	int d = fr_add(FR_REDIS);
	char url[128];
	lb_client *c;

	fr_cluster_view(d, 1, fr_port(d), 1);
	fr_start();
	snprintf(url, sizeof(url), "cluster://127.0.0.1:%d,127.0.0.1:%d",
	         deposed_first ? fr_port(d) : port_of(r), deposed_first ? port_of(r) : fr_port(d));
	lb_broker *b = broker_up(url, &c);
	cluster_serves_from(c, r, d, "ep-cl-1", "at start");

	/* A round that asks the deposed master (one every 10 s, each starting
	 * one node further), and time to end it. */
	wait_count(d, "CLUSTER SLOTS", fr_count(d, "CLUSTER SLOTS") + 1, "the deposed master");
	lb_sleep_ms(1500);
	cluster_serves_from(c, r, d, "ep-cl-2", "after a round that asked the deposed master");
	cr_assert(log_has(b, "names masters older than the map taken before"),
	          "the log does not say why the deposed master's map was not taken");
	lb_end();
}

EPOCH_TEST(cluster_deposed_master_first_in_the_seeds_is_not_followed, 150)
{
	deposed_master_in_the_seeds(true);
}

/* A deposed master second in the seeds: a starting broker, with no map
 * taken before to compare with, asks every seed and takes the map of the
 * node with the newest current epoch, never the deposed master's. (The
 * broker of 4743c34 always asked the first seed first and never went to
 * it in this order, but took a deposed master first in the seeds: the
 * test before this one.) */
Test(epoch, cluster_deposed_master_second_in_the_seeds_is_not_followed, .init = lb_setup,
     .fini = epoch_teardown, .timeout = 150)
{
	deposed_master_in_the_seeds(false);
}

/* The broker took the real node's map (epoch 5); then the real node
 * cannot be reached (here stopped: the same, to the broker, as a
 * partition that leaves it with the deposed master on one side). A round
 * then hears only the deposed master, older than the map taken. One
 * node's answer is no majority of the nodes asked: the broker does not
 * take it for a cluster made anew, and stays off the deposed master. */
Test(epoch, cluster_deposed_master_alone_is_not_taken_for_a_cluster_made_anew, .init = lb_setup,
     .fini = epoch_teardown, .timeout = 150)
{
	lb_redis *r = cluster_node_new(5);
	int d = fr_add(FR_REDIS);
	char url[128];
	lb_client *c;

	fr_cluster_view(d, 1, fr_port(d), 1);
	fr_start();
	snprintf(url, sizeof(url), "cluster://127.0.0.1:%d,127.0.0.1:%d", fr_port(d), port_of(r));
	broker_up(url, &c);
	cluster_serves_from(c, r, d, "ep-alone-cl-1", "at start");

	lb_redis_stop(r);
	/* A round that asks the deposed master, and more of them (every
	 * DOWN_REFRESH_MS, 250 ms, of cluster.c while a master of the map is
	 * unreachable). */
	wait_count(d, "CLUSTER SLOTS", fr_count(d, "CLUSTER SLOTS") + 1, "the deposed master");
	lb_sleep_ms(3000);
	cr_assert_eq(fr_named_conns(d, "lockbroker-"), 0,
	             "with the real node down the broker made a pool on the deposed master");
	cr_assert_eq(fr_count(d, "EVALSHA"), 0, "with the real node down scripts went to the "
	                                        "deposed master");

	lb_redis_restart(r);
	json_t *g = lb_acquire_within(c, "ep-alone-cl-2", 60000, 20000);
	cr_assert(lb_is_ok(g), "no acquire once the real node is back: %s", lb_dump(g));
	cluster_serves_from(c, r, d, "ep-alone-cl-3", "once the real node is back");
	lb_end();
}
