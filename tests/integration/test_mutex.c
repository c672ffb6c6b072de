/*
 * test_mutex.c - mutual exclusion under contention (issue 3): many clients
 * on two brokers loop on one lock for a few seconds, each incrementing a
 * counter in Redis inside the critical section (GET, sleep, SET), some
 * giving up after a short wait_ms, some disconnecting abruptly while they
 * hold the lock. No increment is lost, two holders never overlap, and the
 * fencing tokens, taken in grant order, strictly increase.
 *
 * The threads, their rounds and the checks after the run are the mutex
 * workload of workload.h (shared with tests/cluster/test_cluster_mutex.c).
 */
#include "tests/integration/workload.h"

#include <stdatomic.h>
#include <string.h>

#define NTHREADS 12
#define RUN_MS 4000
#define LOCK "mx"
#define COUNTER "mx-counter"

static atomic_int inside;
static atomic_int overlaps;

LB_TEST(mutex, exclusion_under_contention_with_abrupt_disconnects, 90)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *br[2] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	const char *url = lb_redis_url(r);
	cr_assert(strncmp(url, "unix://", 7) == 0, "%s", url);
	static wl_mutex w[NTHREADS];
	int64_t end = lb_now_ms() + RUN_MS;

	atomic_store(&inside, 0);
	atomic_store(&overlaps, 0);
	for (int k = 0; k < NTHREADS; k++) {
		memset(&w[k], 0, sizeof(w[k]));
		wl_thread_init(&w[k].t, k, br, end, 12345u);
		w[k].lock = LOCK;
		w[k].counter = COUNTER;
		w[k].counter_sock = url + 7;
		w[k].inside = &inside;
		w[k].overlaps = &overlaps;
	}
	wl_run(NTHREADS, wl_mutex_thread, w, sizeof(w[0]));

	wl_mutex_sum sum = {0};
	wl_mutex_total(w, NTHREADS, NULL, &sum);
	cr_log_info("%d grants, %ld completed increments, %ld abrupt disconnects while holding, "
	            "%ld while waiting, %ld timeouts, %ld leases taken away while held",
	            sum.ngrants, sum.completed, sum.aborts, sum.walkaways, sum.timeouts, sum.uncertain);
	wl_mutex_expect_ran(w, NTHREADS);
	cr_assert_gt(sum.ngrants, 50, "only %d grants in %d ms", sum.ngrants, RUN_MS);
	cr_assert_gt(sum.aborts, 0, "no client disconnected while holding");
	cr_assert_gt(sum.walkaways, 0, "no client disconnected while waiting");
	/* no overlap, no increment lost, fences strictly increase in grant order */
	wl_mutex_expect_safe(w, NTHREADS, LOCK, r);

	/* everything ended: the lock is free and no queue entry is left */
	lb_client *c = lb_connect(br[0], LB_TCP);
	int64_t deadline = lb_now_ms() + 2000;
	while (strcmp(lb_str(lb_inspect(c, LOCK), "state"), "free") != 0 && lb_now_ms() < deadline)
		lb_sleep_ms(20);
	lb_expect_free(c, LOCK);
	json_t *in = lb_inspect(c, LOCK);
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	static const char *const sfx[] = {"q", "w", "d", "s"};
	for (size_t k = 0; k < 4; k++) {
		redisReply *ex = lb_redis_cmd(r, "EXISTS lb:{" LOCK "}:%s", sfx[k]);
		cr_assert_eq(ex->integer, 0, "queue key lb:{" LOCK "}:%s left", sfx[k]);
	}
	for (int k = 0; k < 2; k++) {
		lb_client *s = lb_connect(br[k], LB_UNIX);
		json_t *st = lb_stats(s);
		cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));
		cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
	}
	lb_end();
}
