/*
 * workload.c - see workload.h. Everything here but the wl_mutex_expect_*
 * checks and wl_run runs on the workload's threads: no cr_assert.
 */
#include "tests/integration/workload.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wl_thread_init(wl_thread *t, int k, lb_broker *const br[2], int64_t end_ms, unsigned seed)
{
	memset(t, 0, sizeof(*t));
	t->index = k;
	t->port = lb_broker_port(br[k % 2]);
	t->unix_path = (k / 2) % 2 ? lb_broker_unix_path(br[k % 2]) : NULL;
	t->end_ms = end_ms;
	t->seed = seed + 7919u * (unsigned)k;
	t->c.fd = -1;
}

void wl_run(int n, void *(*body)(void *), void *threads, size_t size)
{
	pthread_t *th = calloc((size_t)n, sizeof(*th));

	cr_assert_not_null(th);
	for (int k = 0; k < n; k++)
		cr_assert_eq(pthread_create(&th[k], NULL, body, (char *)threads + (size_t)k * size), 0);
	for (int k = 0; k < n; k++)
		pthread_join(th[k], NULL);
	free(th);
}

void wl_fail(wl_thread *t, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(t->error, sizeof(t->error), "thread %d: ", t->index);

	va_start(ap, fmt);
	vsnprintf(t->error + n, sizeof(t->error) - (size_t)n, fmt, ap);
	va_end(ap);
}

wl_step wl_acquire(wl_thread *t, const char *lock, const char *fields, unsigned wait_min,
                   wl_grant *g)
{
	char line[512], waitf[64] = "";
	json_t *resp;

	if (t->c.fd < 0 && mc_connect(&t->c, t->port, t->unix_path) != 0) {
		wl_fail(t, "cannot connect to the broker: %s", strerror(errno));
		return WL_FAILED;
	}
	unsigned dice = mc_rand(&t->seed) % 20;
	bool short_wait = dice < 3;
	if (short_wait)
		snprintf(waitf, sizeof(waitf), ",\"wait_ms\":%u", wait_min + mc_rand(&t->seed) % 15);
	snprintf(line, sizeof(line),
	         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"%s\"%s,\"ttl_ms\":10000%s}\n",
	         (long long)++t->id, lock, fields, waitf);
	if (!mc_send(&t->c, line)) {
		wl_fail(t, "send failed");
		return WL_FAILED;
	}
	if (dice == 3) {
		/* gives up while waiting (or just granted): disconnects */
		mc_close(&t->c);
		t->walkaways++;
		return WL_AGAIN;
	}
	resp = mc_wait(&t->c, t->id, 20000);
	if (!resp) {
		wl_fail(t, "no answer to acquire %lld of %s within 20 s", (long long)t->id, lock);
		return WL_FAILED;
	}
	if (!json_is_true(json_object_get(resp, "ok"))) {
		if (short_wait && strcmp(mc_err_code(resp), "timeout") == 0) {
			json_decref(resp);
			t->timeouts++;
			return WL_AGAIN;
		}
		char *d = json_dumps(resp, JSON_COMPACT);
		wl_fail(t, "acquire of %s failed: %s", lock, d ? d : "?");
		free(d);
		json_decref(resp);
		return WL_FAILED;
	}
	g->lock = lock;
	g->fence = json_integer_value(json_object_get(resp, "fence"));
	g->count = json_integer_value(json_object_get(resp, "count"));
	snprintf(g->mode, sizeof(g->mode), "%s",
	         json_string_value(json_object_get(resp, "mode")) ?: "");
	snprintf(g->lease, sizeof(g->lease), "%s",
	         json_string_value(json_object_get(resp, "lease")) ?: "");
	json_decref(resp);
	return WL_OK;
}

wl_step wl_release(wl_thread *t, const wl_grant *g)
{
	char line[512];
	json_t *resp;

	if (mc_rand(&t->seed) % 12 == 0) {
		/* abrupt disconnect while holding: the session's end frees it */
		mc_close(&t->c);
		t->aborts++;
		return WL_AGAIN;
	}
	snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"release\",\"lease\":\"%s\"}\n",
	         (long long)++t->id, g->lease);
	if (!mc_send(&t->c, line)) {
		wl_fail(t, "send failed");
		return WL_FAILED;
	}
	resp = mc_wait(&t->c, t->id, 10000);
	if (!resp) {
		wl_fail(t, "no answer to the release of %s", g->lock);
		return WL_FAILED;
	}
	bool ok = json_is_true(json_object_get(resp, "ok")) &&
	          json_integer_value(json_object_get(resp, "count")) == 0;
	if (!ok && !t->error[0]) {
		char *d = json_dumps(resp, JSON_COMPACT);
		wl_fail(t, "release of %s (lease %s, fence %lld) failed: %s; last event: %s", g->lock,
		        g->lease, (long long)g->fence, d ? d : "?", t->c.last_event);
		free(d);
	}
	json_decref(resp);
	return ok ? WL_OK : WL_REFUSED;
}

/* ---- the mutex workload --------------------------------------------------------------- */

/* The critical section: a read-modify-write of key. false: Redis failed. */
static bool increment(redisContext *rc, const char *key)
{
	redisReply *rep = redisCommand(rc, "GET %s", key);

	if (!rep)
		return false;
	long v = rep->type == REDIS_REPLY_STRING ? atol(rep->str) : 0;
	freeReplyObject(rep);
	lb_sleep_ms(1);
	rep = redisCommand(rc, "SET %s %ld", key, v + 1);
	if (!rep)
		return false;
	freeReplyObject(rep);
	return true;
}

void *wl_mutex_thread(void *arg)
{
	wl_mutex *w = arg;
	wl_thread *t = &w->t;
	redisContext *rc = redisConnectUnix(w->counter_sock);
	wl_grant g;

	if (!rc || rc->err) {
		wl_fail(t, "cannot connect to the redis of %s", w->counter);
		goto out;
	}
	while (lb_now_ms() < t->end_ms) {
		wl_step s = wl_acquire(t, w->lock, "", 1, &g);
		if (s == WL_AGAIN)
			continue;
		if (s != WL_OK)
			break;
		int64_t at = mc_now_ns();
		if (g.count != 1) {
			wl_fail(t, "count %lld on a fresh acquire of %s", (long long)g.count, w->lock);
			break;
		}
		if (atomic_exchange(w->inside, 1) != 0)
			atomic_fetch_add(w->overlaps, 1);
		if (!increment(rc, w->counter)) {
			wl_fail(t, "GET or SET of %s failed", w->counter);
			break;
		}
		if (w->ngrants < WL_MAX_GRANTS)
			w->grants[w->ngrants++] = (wl_fence_at){at, g.fence, t->index};
		atomic_store(w->inside, 0);

		s = wl_release(t, &g);
		if (s == WL_OK || s == WL_AGAIN) /* released, or the session's end frees it */
			w->completed++;
		else if (s == WL_REFUSED) /* recorded; the session goes on */
			w->uncertain++;
		else
			break;
	}
out:
	mc_close(&t->c);
	if (rc)
		redisFree(rc);
	return NULL;
}

static bool on(const wl_mutex *w, const char *lock)
{
	return !lock || strcmp(w->lock, lock) == 0;
}

void wl_mutex_total(const wl_mutex *w, int n, const char *lock, wl_mutex_sum *s)
{
	for (int k = 0; k < n; k++) {
		if (!on(&w[k], lock))
			continue;
		s->completed += w[k].completed;
		s->uncertain += w[k].uncertain;
		s->aborts += w[k].t.aborts;
		s->walkaways += w[k].t.walkaways;
		s->timeouts += w[k].t.timeouts;
		s->ngrants += w[k].ngrants;
	}
}

void wl_mutex_expect_ran(const wl_mutex *w, int n)
{
	for (int k = 0; k < n; k++) {
		cr_expect_eq(w[k].t.error[0], '\0', "%s", w[k].t.error);
		cr_expect_gt(w[k].ngrants, 0, "thread %d was never granted %s", k, w[k].lock);
	}
	for (int k = 0; k < n; k++)
		if (w[k].t.error[0] && !w[k].uncertain)
			cr_assert_fail("%s", w[k].t.error); /* the thread stopped */
}

static int cmp_grant(const void *a, const void *b)
{
	const wl_fence_at *x = a, *y = b;

	if (x->at_ns != y->at_ns)
		return x->at_ns < y->at_ns ? -1 : 1;
	return x->fence < y->fence ? -1 : x->fence > y->fence;
}

/* Fences of lock's grants, in grant order, strictly increase. */
static void expect_fences_increase(const wl_mutex *w, int n, const char *lock)
{
	int all_n = 0, bad = -1;
	wl_fence_at *all;

	for (int k = 0; k < n; k++)
		if (on(&w[k], lock))
			all_n += w[k].ngrants;
	all = malloc(sizeof(*all) * (size_t)(all_n ? all_n : 1));
	cr_assert_not_null(all);
	all_n = 0;
	for (int k = 0; k < n; k++)
		for (int j = 0; on(&w[k], lock) && j < w[k].ngrants; j++)
			all[all_n++] = w[k].grants[j];
	qsort(all, (size_t)all_n, sizeof(*all), cmp_grant);
	for (int j = 1; j < all_n && bad < 0; j++)
		if (all[j].fence <= all[j - 1].fence)
			bad = j;
	wl_fence_at prev = bad > 0 ? all[bad - 1] : (wl_fence_at){0};
	wl_fence_at cur = bad > 0 ? all[bad] : (wl_fence_at){0};
	free(all);
	cr_assert_lt(bad, 0, "%s: fence went backwards at grant %d: thread %d got %lld, then "
	                     "thread %d got %lld",
	             lock, bad, prev.thread, (long long)prev.fence, cur.thread, (long long)cur.fence);
}

void wl_mutex_expect_safe(const wl_mutex *w, int n, const char *lock, lb_redis *counters)
{
	const wl_mutex *first = NULL;
	wl_mutex_sum s = {0};

	for (int k = 0; k < n && !first; k++)
		if (on(&w[k], lock))
			first = &w[k];
	cr_assert_not_null(first, "no thread on %s", lock);
	wl_mutex_total(w, n, lock, &s);
	cr_expect_eq(s.uncertain, 0, "%s: %ld times a lease was released under its holder", lock,
	             s.uncertain);
	cr_expect_eq(atomic_load(first->overlaps), 0, "%s: %d times two holders were inside at once",
	             lock, atomic_load(first->overlaps));
	/* no increment lost */
	redisReply *rep = lb_redis_cmd(counters, "GET %s", first->counter);
	cr_assert_eq(rep->type, REDIS_REPLY_STRING, "no counter %s of %s", first->counter, lock);
	cr_expect(atol(rep->str) >= s.completed && atol(rep->str) <= s.completed + s.uncertain,
	          "%s: counter %s, want %ld completed increments (+ up to %ld uncertain)", lock,
	          rep->str, s.completed, s.uncertain);
	expect_fences_increase(w, n, lock);
}
