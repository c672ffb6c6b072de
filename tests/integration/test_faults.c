/*
 * test_faults.c - fault injection (issue 5): Redis killed with SIGKILL and
 * restarted empty, Redis frozen (SIGSTOP) for longer than a lease's TTL,
 * FLUSHALL behind the brokers' back, a broker killed with SIGKILL, a broker
 * stopped with SIGTERM, a frozen client with keepalive, and a mutual
 * exclusion workload (non-atomic counter guarded by fencing tokens) that runs
 * through all of those faults one after another.
 *
 * What every test checks, in the words of PROTOCOL.md: requests fail with
 * `unavailable` while Redis is gone, a lease the broker can no longer vouch
 * for is reported `lost` in time (before Redis could grant it to anybody
 * else), a waiter is granted or times out at its wait_ms but never hangs and
 * is never granted while somebody else holds the lock, and the broker never
 * reports a lease as held that Redis does not hold.
 */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

static bool redis_up(lb_client *c)
{
	json_t *resp = lb_stats(c);
	return strcmp(lb_str(resp, "redis"), "up") == 0;
}

static int64_t wait_redis_up(lb_client *c, int timeout_ms)
{
	int64_t t0 = lb_now_ms();

	while (!redis_up(c)) {
		cr_assert_lt(lb_now_ms() - t0, timeout_ms, "redis still down after %d ms", timeout_ms);
		lb_sleep_ms(50);
	}
	return lb_now_ms() - t0;
}

/* Reads /proc/PID/stat: the state letter and the parent pid. */
static bool proc_stat(pid_t pid, char *state, pid_t *ppid)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	char *rp;
	int pp = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rp = strrchr(buf, ')'); /* the command name may hold spaces and parens */
	if (!rp || sscanf(rp + 1, " %c %d", state, &pp) != 2)
		return false;
	*ppid = (pid_t)pp;
	return true;
}

/* The pid of the lockbrokerd this test process started for b: our own child
 * whose command line holds b's Unix listen URL (the harness does not expose
 * the pid, and this test needs to signal the broker without waiting). */
static pid_t broker_pid(lb_broker *b)
{
	char want[PATH_MAX + 16];
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	cr_assert_not_null(d);
	snprintf(want, sizeof(want), "unix://%s", lb_broker_unix_path(b));
	while (!found && (e = readdir(d)) != NULL) {
		char state, path[64], cmd[8192];
		pid_t pid, ppid;
		FILE *f;
		size_t n;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid = (pid_t)atoi(e->d_name);
		if (!proc_stat(pid, &state, &ppid) || ppid != getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		cmd[n] = '\0';
		for (size_t k = 0; k < n; k += strlen(cmd + k) + 1)
			if (strcmp(cmd + k, want) == 0)
				found = pid;
	}
	closedir(d);
	cr_assert_gt(found, 0, "no child process runs the broker listening on %s", want);
	return found;
}

/* True once pid has exited (a zombie, not reaped: the harness reaps it). */
static bool wait_exited(pid_t pid, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		char state;
		pid_t ppid;

		if (!proc_stat(pid, &state, &ppid) || state == 'Z')
			return true;
		if (lb_now_ms() > deadline)
			return false;
		lb_sleep_ms(20);
	}
}

/* The next event called name; other events are skipped (and logged). */
static json_t *next_event_named(lb_client *c, const char *name, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		int64_t left = deadline - lb_now_ms();
		json_t *ev = lb_next_event(c, left > 0 ? (int)left : 0);

		if (!ev)
			return NULL;
		if (strcmp(lb_str(ev, "event"), name) == 0)
			return ev;
		cr_log_info("skipped event %s", lb_dump(ev));
	}
}

/* Sends req (a json_pack format) and repeats it while the broker answers
 * unavailable (it is reconnecting to Redis), for up to 8 s. */
static json_t *call_when_up(lb_client *c, json_t *req)
{
	int64_t deadline = lb_now_ms() + 8000;
	json_t *resp;

	for (;;) {
		resp = lb_call_json(c, json_deep_copy(req), LB_CALL_TIMEOUT_MS);
		if (!lb_is_err(resp, "unavailable") || lb_now_ms() > deadline)
			break;
		lb_sleep_ms(100);
	}
	json_decref(req);
	return resp;
}

static json_t *release_when_up(lb_client *c, const char *lease)
{
	return call_when_up(c, json_pack("{s:s, s:s}", "op", "release", "lease", lease));
}

static json_t *extend_when_up(lb_client *c, const char *lease, int ttl_ms)
{
	return call_when_up(c, json_pack("{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms",
	                                 ttl_ms));
}

static json_t *inspect_when_up(lb_client *c, const char *lock)
{
	json_t *r = call_when_up(c, json_pack("{s:s, s:s}", "op", "inspect", "lock", lock));
	lb_expect_ok(r);
	return r;
}

static size_t nholders(const json_t *inspect)
{
	return json_array_size(lb_get(inspect, "holders"));
}

/* Polls inspect until waiters == want; returns false on timeout. */
static bool wait_waiters(lb_client *c, const char *lock, json_int_t want, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		if (lb_int(lb_inspect(c, lock), "waiters") == want)
			return true;
		if (lb_now_ms() > deadline)
			return false;
		lb_sleep_ms(25);
	}
}

/* A message with this id from c, or NULL within timeout_ms (no assert).
 * Events read meanwhile are dropped (the callers' clients have no leases). */
static json_t *poll_response(lb_client *c, const json_t *id, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		int64_t left = deadline - lb_now_ms();
		json_t *m = lb_read_msg(c, left > 0 ? (int)left : 0);

		if (!m)
			return NULL;
		if (json_equal(json_object_get(m, "id"), (json_t *)id))
			return m;
		cr_log_info("unexpected message %s", lb_dump(m));
	}
}

/* Every lease the session lists is held in Redis: inspect shows a holder. */
static void assert_listed_leases_held(lb_client *c, lb_client *probe)
{
	json_t *ls = call_when_up(c, json_pack("{s:s}", "op", "leases"));
	json_t *arr, *l;
	size_t k;

	lb_expect_ok(ls);
	arr = lb_get(ls, "leases");
	cr_assert(json_is_array(arr), "%s", lb_dump(ls));
	json_array_foreach(arr, k, l) {
		json_t *in = inspect_when_up(probe, lb_str(l, "lock"));
		cr_assert_neq(strcmp(lb_str(in, "state"), "free"), 0,
		              "lease %s is listed as held but Redis has the lock free: %s",
		              lb_dump(l), lb_dump(in));
		cr_assert_geq(nholders(in), 1, "lease listed, no holder in Redis: %s / %s", lb_dump(l),
		              lb_dump(in));
	}
}

static bool leases_list(lb_client *c, const char *lease)
{
	json_t *ls = call_when_up(c, json_pack("{s:s}", "op", "leases"));
	json_t *arr, *l;
	size_t k;

	lb_expect_ok(ls);
	arr = lb_get(ls, "leases");
	json_array_foreach(arr, k, l)
		if (strcmp(lb_str(l, "lease"), lease) == 0)
			return true;
	return false;
}

/* ---- Redis killed with SIGKILL, restarted empty on the same port ---------------- */

#define K9_WAIT 12000

LB_TEST(faults, redis_kill9_unavailable_lost_and_recovery, 90)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *b1 = lb_broker_start(r, NULL);
	lb_broker *b2 = lb_broker_start(r, NULL);
	lb_client *holder = lb_connect(b1, LB_TCP);
	lb_client *w[2] = {lb_connect(b1, LB_UNIX), lb_connect(b2, LB_TCP)};
	lb_client *other = lb_connect(b2, LB_UNIX);
	lb_client *other1 = lb_connect(b1, LB_TCP);
	json_t *wid[2], *a, *resp[2] = {NULL, NULL};
	int64_t wsent[2], tk, ta, t_wd = -1, t_nowd = -1, t_unavail = -1, tr;
	const char *wd, *nowd;
	json_int_t fence_wd;
	pid_t pid = lb_redis_pid(r);

	a = lb_try_acquire(holder, "k9a", 1500); /* watchdog: renewed every 500 ms */
	lb_expect_ok(a);
	wd = lb_str(a, "lease");
	fence_wd = lb_int(a, "fence");
	for (int k = 0; k < 2; k++) {
		wsent[k] = lb_now_ms();
		wid[k] = lb_send_req(w[k], "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "k9a",
		                     "ttl_ms", 5000, "wait_ms", K9_WAIT);
		cr_assert(wait_waiters(other, "k9a", k + 1, 2000), "waiter %d not queued", k);
	}
	ta = lb_now_ms();
	a = lb_call(holder, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "k9b", "ttl_ms",
	            1500, "wait_ms", 0, "watchdog", 0);
	lb_expect_ok(a);
	nowd = lb_str(a, "lease");
	lb_sleep_ms(300);

	cr_assert_eq(kill(pid, SIGKILL), 0);
	tk = lb_now_ms();
	/* A new request fails fast; both leases are reported lost in time. */
	json_t *oid = lb_send_req(other, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "k9c",
	                          "ttl_ms", 1500, "wait_ms", 0);
	while ((t_wd < 0 || t_nowd < 0 || t_unavail < 0) && lb_now_ms() - tk < 5000) {
		json_t *ev = lb_next_event(holder, 10);
		if (ev) {
			const char *lease = lb_str(ev, "lease");
			cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
			if (strcmp(lease, wd) == 0) {
				cr_assert_eq(t_wd, -1, "lost twice: %s", lb_dump(ev));
				t_wd = lb_now_ms();
				cr_expect_str_eq(lb_str(ev, "reason"), "redis_unavailable", "%s", lb_dump(ev));
			} else if (strcmp(lease, nowd) == 0) {
				cr_assert_eq(t_nowd, -1, "lost twice: %s", lb_dump(ev));
				t_nowd = lb_now_ms();
				cr_expect_str_eq(lb_str(ev, "reason"), "expired", "%s", lb_dump(ev));
			} else
				cr_assert_fail("lost event for an unknown lease: %s", lb_dump(ev));
		}
		json_t *m = t_unavail < 0 ? poll_response(other, oid, 10) : NULL;
		if (m) {
			/* Sent as Redis died: unavailable if the broker knew before
			 * it sent it, else its fate is unknown to the broker (Redis
			 * may have run it just before dying): a try that ran out of
			 * time. Either way, never a hang. */
			t_unavail = lb_now_ms();
			cr_assert(lb_is_err(m, "unavailable") || lb_is_err(m, "timeout"), "%s", lb_dump(m));
		}
	}
	cr_assert_geq(t_unavail, 0, "no answer to an acquire while Redis is dead");
	cr_assert_leq(t_unavail - tk, 2500, "unavailable after %lld ms", (long long)(t_unavail - tk));
	cr_assert_geq(t_wd, 0, "no lost event for the watchdog lease within 5 s of the kill");
	cr_assert_geq(t_nowd, 0, "no lost event for the watchdog:false lease within 5 s");
	/* ttl 1500 after the last renewal was sent (<= the kill), small tolerance */
	cr_assert_leq(t_wd - tk, 1500 + 400, "watchdog lease lost %lld ms after the kill, ttl 1500",
	              (long long)(t_wd - tk));
	cr_assert_leq(t_nowd - ta, 1500 + 400, "watchdog:false lease lost %lld ms after its grant",
	              (long long)(t_nowd - ta));
	cr_log_info("unavailable after %lld ms; lost after %lld ms (watchdog) and %lld ms after the "
	            "grant (no watchdog)",
	            (long long)(t_unavail - tk), (long long)(t_wd - tk), (long long)(t_nowd - ta));

	/* Still down: fail fast, stats says so, the lost leases are not_held
	 * without Redis, ops that need no Redis work. */
	int64_t t0 = lb_now_ms();
	lb_expect_err(lb_try_acquire(other1, "k9d", 1000), "unavailable");
	cr_assert_leq(lb_now_ms() - t0, 1000);
	cr_assert_not(redis_up(other1));
	lb_expect_ok(lb_call(holder, "{s:s}", "op", "ping"));
	json_t *ls = lb_call(holder, "{s:s}", "op", "leases");
	lb_expect_ok(ls);
	cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "lost leases still listed: %s",
	             lb_dump(ls));
	/* The waiters keep waiting (neither granted nor failed) while Redis is down. */
	for (int k = 0; k < 2; k++) {
		json_t *m = poll_response(w[k], wid[k], 0);
		cr_assert_null(m, "waiter %d answered while Redis is down: %s", k, lb_dump(m));
	}

	while (lb_now_ms() - tk < 2500)
		lb_sleep_ms(20);
	lb_redis_restart(r); /* same port, empty */
	tr = lb_now_ms();
	cr_log_info("redis back after %lld ms; brokers up %lld / %lld ms later",
	            (long long)(tr - tk), (long long)wait_redis_up(other1, 10000),
	            (long long)wait_redis_up(other, 10000));

	/* Each waiter is granted (one at a time) or times out at its wait_ms. */
	int64_t deadline = wsent[0] + K9_WAIT + 3000;
	int answered = 0, granted = 0;
	while (answered < 2 && lb_now_ms() < deadline) {
		for (int k = 0; k < 2; k++) {
			if (resp[k])
				continue;
			json_t *m = poll_response(w[k], wid[k], 20);
			if (!m)
				continue;
			resp[k] = m;
			answered++;
			if (!lb_is_ok(m)) {
				int64_t el = lb_now_ms() - wsent[k];
				lb_expect_err(m, "timeout");
				cr_assert(el >= K9_WAIT - 100 && el <= K9_WAIT + 2000,
				          "waiter %d timed out after %lld ms, wait_ms %d", k, (long long)el,
				          K9_WAIT);
				continue;
			}
			granted++;
			cr_log_info("waiter %d granted %lld ms after Redis came back", k,
			            (long long)(lb_now_ms() - tr));
			json_t *in = lb_inspect(other, "k9a");
			cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
			cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
			cr_assert_gt(lb_int(m, "fence"), fence_wd, "fence went back: %s", lb_dump(m));
			/* While it holds, the other waiter must not be granted. */
			int o = 1 - k;
			if (!resp[o]) {
				json_t *m2 = poll_response(w[o], wid[o], 300);
				if (m2) {
					resp[o] = m2;
					answered++;
					cr_assert_not(lb_is_ok(m2),
					              "waiter %d granted while waiter %d holds the lock: %s / %s",
					              o, k, lb_dump(m2), lb_dump(m));
					lb_expect_err(m2, "timeout");
				}
			}
			json_t *rl = lb_call(w[k], "{s:s, s:s}", "op", "release", "lease",
			                     lb_str(m, "lease"));
			lb_expect_ok(rl);
			cr_assert_eq(lb_int(rl, "count"), 0);
		}
	}
	cr_assert_eq(answered, 2, "a waiter hung: no answer %d ms after its wait_ms ran out", 3000);
	cr_expect_eq(granted, 2,
	             "the lock was free after Redis came back, yet only %d of 2 waiters with "
	             "wait_ms %d were granted: %s / %s",
	             granted, K9_WAIT, lb_dump(resp[0]), lb_dump(resp[1]));

	/* Full recovery: the lost leases are not_held, the lock works again. */
	lb_expect_err(release_when_up(holder, wd), "not_held");
	lb_expect_err(release_when_up(holder, nowd), "not_held");
	lb_expect_err(extend_when_up(holder, wd, 5000), "not_held");
	a = lb_acquire_within(holder, "k9a", 5000, 3000);
	lb_expect_ok(a);
	cr_assert_gt(lb_int(a, "fence"), fence_wd);
	assert_listed_leases_held(holder, other);
	lb_expect_ok(lb_call(holder, "{s:s, s:s}", "op", "release", "lease", lb_str(a, "lease")));
	lb_expect_free(other, "k9a");
	lb_expect_free(other, "k9b");
	lb_must_acquire(other, "k9c", 1000);
	lb_end();
}

/* ---- Redis frozen for longer than a lease's TTL ----------------------------------- */

LB_TEST(faults, redis_sigstop_longer_than_ttl, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_broker *b2 = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	lb_client *probe = lb_connect(b, LB_UNIX);
	lb_client *late = lb_connect(b2, LB_TCP);
	pid_t pid = lb_redis_pid(r);
	json_t *a, *ev, *resp, *id, *in;
	const char *l1, *l2;
	json_int_t f1;
	int64_t ts, el;

	a = lb_try_acquire(c, "s1", 1000); /* watchdog, renewed every ~333 ms */
	lb_expect_ok(a);
	l1 = lb_str(a, "lease");
	f1 = lb_int(a, "fence");
	l2 = lb_must_acquire(c, "s2", 12000); /* outlives the freeze */
	lb_sleep_ms(150);

	cr_assert_eq(kill(pid, SIGSTOP), 0);
	ts = lb_now_ms();
	id = lb_send_req(probe, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "s3", "ttl_ms",
	                 1000, "wait_ms", 0);
	ev = next_event_named(c, "lost", 4000);
	el = lb_now_ms() - ts;
	if (!ev)
		kill(pid, SIGCONT);
	cr_assert_not_null(ev, "no lost event within 4 s of freezing Redis (ttl 1000)");
	cr_assert_str_eq(lb_str(ev, "lease"), l1, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "redis_unavailable", "%s", lb_dump(ev));
	cr_assert_leq(el, 1000 + 400, "lost %lld ms after the freeze, ttl 1000", (long long)el);
	resp = lb_wait_response(probe, id, 4000);
	lb_expect_err(resp, "timeout"); /* its fate unknown: see test_resilience.c */
	cr_assert_leq(lb_now_ms() - ts, 3000, "unavailable took %lld ms",
	              (long long)(lb_now_ms() - ts));
	cr_log_info("lost after %lld ms, unavailable after %lld ms", (long long)el,
	            (long long)(lb_now_ms() - ts));
	while (lb_now_ms() - ts < 2500)
		lb_sleep_ms(20);
	cr_assert_eq(kill(pid, SIGCONT), 0);
	wait_redis_up(probe, 10000);

	/* The broker's view and Redis agree. */
	lb_expect_err(release_when_up(c, l1), "not_held");
	lb_expect_err(extend_when_up(c, l1, 5000), "not_held");
	cr_assert_not(leases_list(c, l1), "the lost lease is still listed");
	cr_assert(leases_list(c, l2), "the 12 s lease was dropped by a 2.5 s freeze");
	assert_listed_leases_held(c, probe);
	int64_t deadline = lb_now_ms() + 2000;
	while (strcmp(lb_str((in = inspect_when_up(probe, "s1")), "state"), "free") != 0 &&
	       lb_now_ms() < deadline)
		lb_sleep_ms(50);
	cr_assert_str_eq(lb_str(in, "state"), "free", "Redis still holds the lost lease: %s",
	                 lb_dump(in));
	/* The lock is acquired again, by a client of the other broker. */
	a = lb_acquire_within(late, "s1", 5000, 3000);
	lb_expect_ok(a);
	cr_assert_gt(lb_int(a, "fence"), f1);
	in = lb_inspect(probe, "s1");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
	/* The old lease cannot touch the new holder's. */
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l1), "not_held");
	cr_assert_eq(nholders(lb_inspect(probe, "s1")), 1);
	cr_assert_not(leases_list(c, l1));
	lb_expect_err(lb_try_acquire(probe, "s2", 1000), "timeout"); /* still held */
	assert_listed_leases_held(c, probe);
	assert_listed_leases_held(late, probe);
	lb_expect_ok(lb_call(late, "{s:s, s:s}", "op", "release", "lease", lb_str(a, "lease")));
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", l2));
	lb_expect_free(probe, "s1");
	lb_expect_free(probe, "s2");
	lb_end();
}

/* ---- FLUSHALL behind the brokers' back -------------------------------------------- */

LB_TEST(faults, flushall_reports_gone_and_waiters_go_on, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL);
	lb_broker *b2 = lb_broker_start(r, NULL);
	lb_client *c1 = lb_connect(b1, LB_TCP);
	lb_client *c2 = lb_connect(b1, LB_UNIX);
	lb_client *w = lb_connect(b2, LB_TCP);
	lb_client *x = lb_connect(b2, LB_UNIX);
	enum { WAIT = 8000 };
	json_t *a, *ev, *wid, *wr = NULL;
	const char *l1, *l2;
	json_int_t f1;
	int64_t t0, el, wsent;

	a = lb_try_acquire(c1, "g1", 600); /* renewed every 200 ms */
	lb_expect_ok(a);
	l1 = lb_str(a, "lease");
	f1 = lb_int(a, "fence");
	l2 = lb_must_acquire(c2, "g2", 900);
	wsent = lb_now_ms();
	wid = lb_send_req(w, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "g2", "ttl_ms", 5000,
	                  "wait_ms", WAIT);
	cr_assert(wait_waiters(x, "g2", 1, 2000));
	lb_sleep_ms(100);

	lb_redis_flushall(r);
	t0 = lb_now_ms();
	ev = next_event_named(c1, "lost", 3000);
	el = lb_now_ms() - t0;
	cr_assert_not_null(ev, "no lost event within 3 s of FLUSHALL");
	cr_assert_str_eq(lb_str(ev, "lease"), l1, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "gone", "%s", lb_dump(ev));
	cr_assert_leq(el, 200 + 500, "lost(gone) %lld ms after FLUSHALL, renewals every 200 ms",
	              (long long)el);
	ev = next_event_named(c2, "lost", 3000);
	cr_assert_not_null(ev, "no lost event for the second lease");
	cr_assert_str_eq(lb_str(ev, "lease"), l2, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "gone", "%s", lb_dump(ev));
	cr_assert_leq(lb_now_ms() - t0, 300 + 600);
	cr_log_info("lost(gone) after %lld ms", (long long)el);
	lb_expect_err(lb_call(c1, "{s:s, s:s}", "op", "release", "lease", l1), "not_held");
	lb_expect_err(lb_call(c2, "{s:s, s:s, s:i}", "op", "extend", "lease", l2, "ttl_ms", 900),
	              "not_held");

	/* The lock is acquired and released again; the waiter must not be
	 * granted meanwhile, and is granted afterwards (or, at worst, times out
	 * at its wait_ms). */
	a = lb_try_acquire(x, "g2", 2000);
	if (lb_is_ok(a)) {
		json_t *m = poll_response(w, wid, 300);
		cr_assert(m == NULL || !lb_is_ok(m), "waiter granted while another holds the lock: %s",
		          lb_dump(m));
		wr = m;
		cr_assert_eq(nholders(lb_inspect(x, "g2")), 1);
		lb_expect_ok(lb_call(x, "{s:s, s:s}", "op", "release", "lease", lb_str(a, "lease")));
	} else {
		/* The waiter was queued again first: fair, so x has to wait. */
		lb_expect_err(a, "timeout");
		cr_log_info("the waiter was re-queued before the new acquire");
	}
	if (!wr)
		wr = poll_response(w, wid, (int)(wsent + WAIT + 1500 - lb_now_ms()));
	cr_assert_not_null(wr, "the waiter hung past its wait_ms after FLUSHALL");
	if (lb_is_ok(wr)) {
		cr_log_info("waiter granted %lld ms after FLUSHALL", (long long)(lb_now_ms() - t0));
		json_t *in = lb_inspect(x, "g2");
		cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
		lb_expect_ok(lb_call(w, "{s:s, s:s}", "op", "release", "lease", lb_str(wr, "lease")));
	} else {
		lb_expect_err(wr, "timeout");
		cr_expect_fail("the waiter was never granted after FLUSHALL though the lock was "
		               "free (timed out after %lld ms)",
		               (long long)(lb_now_ms() - wsent));
	}
	lb_expect_free(x, "g2");
	cr_assert_eq(lb_int(lb_inspect(x, "g2"), "waiters"), 0);
	/* A lost lock is granted again, with a larger fence. */
	a = lb_try_acquire(x, "g1", 2000);
	lb_expect_ok(a);
	cr_assert_gt(lb_int(a, "fence"), f1);
	assert_listed_leases_held(c1, x);
	assert_listed_leases_held(x, x);
	lb_end();
}

/* ---- a broker killed with SIGKILL --------------------------------------------------- */

LB_TEST(faults, broker_kill9_waiters_dropped_others_granted, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *A = lb_broker_start(r, NULL);
	lb_broker *B = lb_broker_start(r, NULL);
	lb_client *hA = lb_connect(A, LB_TCP);
	lb_client *wA = lb_connect(A, LB_UNIX);
	lb_client *wA2 = lb_connect(A, LB_TCP);
	lb_client *wB = lb_connect(B, LB_TCP);
	lb_client *wB2 = lb_connect(B, LB_UNIX);
	lb_client *wB3 = lb_connect(B, LB_TCP);
	lb_client *hB = lb_connect(B, LB_UNIX);
	json_t *idB, *idB2, *idB3, *gB = NULL, *gB3 = NULL, *in;
	int64_t t0, t_d3 = -1;
	redisReply *rep;

	/* d1: held on A (ttl 1500), queue: A's waiter, then B's two. */
	lb_must_acquire(hA, "d1", 1500);
	lb_send_req(wA, "{s:s, s:s, s:i}", "op", "acquire", "lock", "d1", "ttl_ms", 5000);
	cr_assert(wait_waiters(hB, "d1", 1, 2000));
	idB = lb_send_req(wB, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "d1", "ttl_ms", 5000,
	                  "wait_ms", 15000);
	cr_assert(wait_waiters(hB, "d1", 2, 2000));
	idB2 = lb_send_req(wB2, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "d1", "ttl_ms",
	                   5000, "wait_ms", 25000);
	cr_assert(wait_waiters(hB, "d1", 3, 2000));
	rep = lb_redis_cmd(r, "ZCARD lb:{d1}:q");
	cr_assert_eq(rep->integer, 3);
	/* d2: held on A, one waiter on B. */
	lb_must_acquire(hA, "d2", 1500);
	idB3 = lb_send_req(wB3, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "d2", "ttl_ms",
	                   5000, "wait_ms", 10000);
	cr_assert(wait_waiters(hB, "d2", 1, 2000));
	/* d3: held on B for long, one waiter on A. */
	lb_must_acquire(hB, "d3", 30000);
	lb_send_req(wA2, "{s:s, s:s, s:i}", "op", "acquire", "lock", "d3", "ttl_ms", 5000);
	cr_assert(wait_waiters(hB, "d3", 1, 2000));
	lb_sleep_ms(200);

	lb_broker_kill9(A);
	t0 = lb_now_ms();
	int64_t next_inspect = t0;
	while ((!gB || !gB3 || t_d3 < 0) && lb_now_ms() - t0 < 12000) {
		if (!gB3 && (gB3 = poll_response(wB3, idB3, 10)) != NULL) {
			lb_expect_ok(gB3);
			cr_log_info("d2 granted %lld ms after the kill", (long long)(lb_now_ms() - t0));
			cr_assert_leq(lb_now_ms() - t0, 1500 + 1500,
			              "d2 granted %lld ms after its holder's broker died (ttl 1500)",
			              (long long)(lb_now_ms() - t0));
		}
		if (!gB && (gB = poll_response(wB, idB, 10)) != NULL) {
			lb_expect_ok(gB);
			cr_log_info("d1 granted %lld ms after the kill", (long long)(lb_now_ms() - t0));
		}
		if (t_d3 < 0 && lb_now_ms() >= next_inspect) {
			if (lb_int(lb_inspect(hB, "d3"), "waiters") == 0)
				t_d3 = lb_now_ms();
			next_inspect = lb_now_ms() + 200;
		}
	}
	cr_assert_not_null(gB3, "d2: B's waiter never granted after A died");
	cr_assert_not_null(gB, "d1: B's waiter (behind A's dead one) not granted within 12 s");
	cr_assert_leq(lb_now_ms() - t0, 1500 + 6500, "granted too late");
	cr_assert_geq(t_d3, 0, "d3: the dead broker's waiter is still counted after 12 s");
	cr_assert_leq(t_d3 - t0, 7000, "the dead waiter was dropped after %lld ms",
	              (long long)(t_d3 - t0));
	cr_log_info("dead waiter on d3 dropped after %lld ms", (long long)(t_d3 - t0));

	/* d3: nothing left in the queue; its holder on B is unaffected. */
	rep = lb_redis_cmd(r, "ZCARD lb:{d3}:q");
	cr_assert_eq(rep->integer, 0);
	in = lb_inspect(hB, "d3");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	/* d1: held by wB; only wB2 waits, and only it is in the queue. */
	in = lb_inspect(hB, "d1");
	cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 1, "%s", lb_dump(in));
	rep = lb_redis_cmd(r, "ZRANGE lb:{d1}:q 0 -1");
	cr_assert_eq(rep->elements, 1, "the queue holds %zu entries, want only the live waiter",
	             rep->elements);
	char member[256];
	snprintf(member, sizeof(member), "%s", rep->element[0]->str);
	cr_assert_null(poll_response(wB2, idB2, 0), "wB2 answered while wB holds the lock");
	lb_expect_ok(lb_call(wB, "{s:s, s:s}", "op", "release", "lease", lb_str(gB, "lease")));
	json_t *g2 = poll_response(wB2, idB2, 2000);
	cr_assert_not_null(g2, "the last waiter not granted within 2 s of the release");
	lb_expect_ok(g2);
	/* A waiter keeps its queue id as its lease (lua/lib/prelude.lua). */
	cr_assert_str_eq(lb_str(g2, "lease"), member, "the queue entry was not the live waiter");
	lb_expect_ok(lb_call(wB2, "{s:s, s:s}", "op", "release", "lease", lb_str(g2, "lease")));
	lb_expect_free(hB, "d1");
	cr_assert_eq(lb_int(lb_inspect(hB, "d1"), "waiters"), 0);
	rep = lb_redis_cmd(r, "ZCARD lb:{d1}:q");
	cr_assert_eq(rep->integer, 0);
	assert_listed_leases_held(hB, hB);
	assert_listed_leases_held(wB3, hB);
	lb_end();
}

/* ---- a broker stopped with SIGTERM -------------------------------------------------- */

LB_TEST(faults, broker_sigterm_shutdown_events_and_handoff, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *A = lb_broker_start(r, "--shutdown-grace-ms", "500", NULL);
	lb_broker *B = lb_broker_start(r, NULL);
	lb_client *cA[4] = {lb_connect(A, LB_TCP), lb_connect(A, LB_UNIX), lb_connect(A, LB_TCP),
	                    lb_connect(A, LB_UNIX)};
	lb_client *cB = lb_connect(B, LB_TCP);
	lb_client *probe = lb_connect(B, LB_UNIX);
	json_t *pid4, *qid, *m;
	const char *l1, *l2;
	int64_t t0, el;
	pid_t pid = broker_pid(A);

	l1 = lb_must_acquire(cA[0], "t1", 30000);
	l2 = lb_must_acquire(cA[1], "t2", 30000);
	lb_expect_ok(lb_call(cA[2], "{s:s, s:s}", "op", "hello", "client", "idle"));
	pid4 = lb_send_req(cA[3], "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "t2", "ttl_ms",
	                   5000, "wait_ms", 20000);
	qid = lb_send_req(cB, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "t1", "ttl_ms", 5000,
	                  "wait_ms", 10000);
	cr_assert(wait_waiters(probe, "t1", 1, 2000));
	cr_assert(wait_waiters(probe, "t2", 1, 2000));

	cr_assert_eq(kill(pid, SIGTERM), 0);
	t0 = lb_now_ms();
	/* First what must happen inside the grace period: once the broker says
	 * it stops, a new acquire answers shutting_down and a release works. */
	json_t *ev0 = next_event_named(cA[0], "shutdown", 1000);
	cr_assert_not_null(ev0, "no shutdown event within 1 s of SIGTERM");
	cr_assert_eq(lb_int(ev0, "grace_ms"), 500, "%s", lb_dump(ev0));
	lb_expect_err(lb_call(cA[0], "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "t3",
	                      "ttl_ms", 5000, "wait_ms", 1000),
	              "shutting_down");
	json_t *rl = lb_call(cA[1], "{s:s, s:s}", "op", "release", "lease", l2);
	cr_assert_lt(lb_now_ms() - t0, 500, "the checks took %lld ms, longer than the grace",
	             (long long)(lb_now_ms() - t0));
	lb_expect_ok(rl);
	cr_assert_eq(lb_int(rl, "count"), 0);
	/* Every session heard of it; the pending acquire answers shutting_down. */
	for (int k = 1; k < 4; k++) {
		json_t *ev = next_event_named(cA[k], "shutdown", 1000);
		cr_assert_not_null(ev, "session %d got no shutdown event", k);
		cr_assert_eq(lb_int(ev, "grace_ms"), 500, "%s", lb_dump(ev));
	}
	lb_expect_err(lb_wait_response(cA[3], pid4, 1000), "shutting_down");
	/* t1 goes to B's waiter when the grace is over (the session stays open). */
	m = poll_response(cB, qid, 3000);
	el = lb_now_ms() - t0;
	cr_assert_not_null(m, "B's waiter not granted within 3 s of SIGTERM (grace 500 ms)");
	lb_expect_ok(m);
	cr_assert_leq(el, 500 + 1000, "granted %lld ms after SIGTERM, grace 500 ms", (long long)el);
	cr_expect_geq(el, 400, "the lease was taken %lld ms after SIGTERM, before the 500 ms grace",
	              (long long)el);
	cr_log_info("handed over %lld ms after SIGTERM", (long long)el);
	for (int k = 0; k < 4; k++)
		cr_assert(lb_wait_closed(cA[k], 3000), "session %d not closed after the grace", k);
	cr_assert(wait_exited(pid, 5000), "the broker has not exited 5 s after the grace");
	lb_broker_stop(A); /* reaps it; asserts exit status 0 */
	lb_expect_free(probe, "t2");
	/* A lease token works from any session: the stopped broker's is gone. */
	lb_expect_err(lb_call(probe, "{s:s, s:s}", "op", "release", "lease", l1), "not_held");
	json_t *in = lb_inspect(probe, "t1");
	cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	cr_assert_eq(lb_int(lb_inspect(probe, "t2"), "waiters"), 0);
	cr_assert_eq(lb_int(lb_inspect(probe, "t3"), "waiters"), 0);
	lb_expect_free(probe, "t3");
	lb_expect_ok(lb_call(cB, "{s:s, s:s}", "op", "release", "lease", lb_str(m, "lease")));
	lb_end();
}

/* ---- a frozen client with keepalive -------------------------------------------------- */

/* The child: hello with keepalive 500 ms, acquire, report, then stay silent. */
static void frozen_child(int port, int wfd)
{
	static const char req[] =
	    "{\"id\":1,\"op\":\"hello\",\"client\":\"frozen\",\"keepalive_ms\":500}\n"
	    "{\"id\":2,\"op\":\"acquire\",\"lock\":\"fz\",\"ttl_ms\":30000,\"wait_ms\":0}\n";
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	char buf[8192];
	size_t len = 0;
	char verdict = 'E';
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		goto report;
	if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1))
		goto report;
	for (;;) {
		char *nl;
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			goto report;
		len += (size_t)n;
		while ((nl = memchr(buf, '\n', len)) != NULL) {
			json_t *m;
			*nl = '\0';
			m = json_loads(buf, 0, NULL);
			if (m && json_integer_value(json_object_get(m, "id")) == 2) {
				verdict = json_is_true(json_object_get(m, "ok")) ? 'G' : 'E';
				json_decref(m);
				goto report;
			}
			json_decref(m);
			len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, len);
		}
		if (len >= sizeof(buf) - 1)
			goto report;
	}
report:
	if (write(wfd, &verdict, 1) != 1)
		_exit(1);
	for (;;)
		pause(); /* frozen: never sends anything again */
}

LB_TEST(faults, frozen_client_with_keepalive_loses_its_lease, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_UNIX);
	int port = lb_broker_port(b);
	int pfd[2];
	char verdict = 0;
	pid_t child;
	int64_t t0, el;
	json_t *g, *in;

	cr_assert_eq(pipe(pfd), 0);
	fflush(NULL);
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(pfd[0]);
		frozen_child(port, pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	struct pollfd p = {.fd = pfd[0], .events = POLLIN};
	int pr = poll(&p, 1, 5000);
	if (pr == 1 && read(pfd[0], &verdict, 1) != 1)
		verdict = 0;
	close(pfd[0]);
	if (verdict != 'G') {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		cr_assert_fail("the child did not get the lock (verdict '%c')", verdict ? verdict : '?');
	}
	cr_assert_eq(kill(child, SIGSTOP), 0);
	t0 = lb_now_ms();
	in = lb_inspect(c, "fz");
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(json_array_get(lb_get(in, "holders"), 0), "client"), "frozen", "%s",
	                 lb_dump(in));
	g = lb_call_timeout(c, 8000, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "fz",
	                    "ttl_ms", 5000, "wait_ms", 5000);
	el = lb_now_ms() - t0;
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	lb_expect_ok(g);
	cr_assert_leq(el, 2500, "granted %lld ms after the client froze (keepalive 500 ms)",
	              (long long)el);
	cr_expect_geq(el, 300, "the session was ended %lld ms after it froze, keepalive 500 ms",
	              (long long)el);
	cr_log_info("granted %lld ms after the client froze", (long long)el);
	in = lb_inspect(c, "fz");
	cr_assert_eq(nholders(in), 1, "%s", lb_dump(in));
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(g, "lease")));
	lb_expect_free(c, "fz");
	lb_end();
}

/* ---- mutual exclusion through every fault --------------------------------------------
 *
 * WL_THREADS threads on two brokers loop on one lock: acquire (watchdog,
 * ttl 3 s, wait_ms 2 s), a non-atomic increment of an in-process "resource"
 * (read, sleep 1 ms, write), release. The resource is fenced: it remembers
 * the highest fence that touched it and refuses a read or a write that
 * carries a lower one (a real fenced store checks the token on every access;
 * checking reads too keeps a holder that lost its lease in the middle of an
 * increment from writing back a stale value). Meanwhile the main thread
 * freezes Redis for less than the TTL, kills it and restarts it empty, kills
 * one broker (its clients move to the other one) and flushes Redis.
 *
 * Checked: no increment lost (accepted writes == counter), accepted fences
 * never go back, a refused access happens only to a lease that was really
 * lost (a lost event named it or its release answered not_held), a thread
 * that is granted the lock while another thread still believes it holds it
 * only does so when the other lease was lost, no request ever hangs, and the
 * workload makes progress after every fault.
 *
 * Threads never call cr_assert: they record, the main thread asserts.
 */

#define WL_THREADS 8
#define WL_LOCK "fx"
#define WL_MAX_GRANTS 20000
#define WL_MAX_CONFLICTS 256

enum { OUT_NONE, OUT_RELEASED, OUT_NOT_HELD, OUT_CONN_DIED, OUT_UNRESOLVED };

typedef struct {
	char lease[80];
	json_int_t fence;
	int thread;
	atomic_int lost_event; /* a lost event named this lease */
	int outcome;           /* of the release, OUT_* */
	int rejected;          /* the resource refused its read or write */
	int aborted;           /* saw its lost event inside and did not write */
} wl_grant;

static wl_grant *wl_grants; /* WL_MAX_GRANTS, on the heap (kept reachable) */
static atomic_int wl_ngrants;
static atomic_int wl_holder; /* grant index + 1 of whoever believes it holds, or 0 */

static struct {
	pthread_mutex_t mu;
	long counter;
	json_int_t max_fence;
	long accepted, rejected, out_of_order;
	json_int_t last_accepted;
	int nconflicts;
	int conflicts[WL_MAX_CONFLICTS][2];
} res = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool res_read(json_int_t fence, long *v)
{
	bool ok;

	pthread_mutex_lock(&res.mu);
	ok = fence >= res.max_fence;
	if (ok) {
		res.max_fence = fence;
		*v = res.counter;
	} else
		res.rejected++;
	pthread_mutex_unlock(&res.mu);
	return ok;
}

static bool res_write(json_int_t fence, long v)
{
	bool ok;

	pthread_mutex_lock(&res.mu);
	ok = fence >= res.max_fence;
	if (ok) {
		if (fence < res.last_accepted)
			res.out_of_order++;
		res.max_fence = res.last_accepted = fence;
		res.counter = v;
		res.accepted++;
	} else
		res.rejected++;
	pthread_mutex_unlock(&res.mu);
	return ok;
}

static long res_accepted(void)
{
	long n;

	pthread_mutex_lock(&res.mu);
	n = res.accepted;
	pthread_mutex_unlock(&res.mu);
	return n;
}

typedef struct {
	int index;
	int ports[2]; /* preferred broker first */
	int64_t end_ms;
	int fd;
	bool eof;
	char buf[65536];
	size_t len;
	json_int_t id;
	int recent[16]; /* this thread's last grants, for lost events */
	int nrecent;
	unsigned ring;
	long grants, timeouts, unavailable, reconnects, aborted, conn_died, hangs, unexpected;
	char error[512];
} wl_worker;

#define WL_ERR(w, ...)                                                                \
	do {                                                                              \
		if (!(w)->error[0])                                                           \
			snprintf((w)->error, sizeof((w)->error), __VA_ARGS__);                    \
	} while (0)

static void wl_close(wl_worker *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	w->len = 0;
	w->eof = false;
}

static bool wl_connect(wl_worker *w)
{
	for (int k = 0; k < 2; k++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)w->ports[k])};
		int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (fd < 0)
			return false;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			w->fd = fd;
			w->len = 0;
			w->eof = false;
			return true;
		}
		close(fd);
	}
	return false;
}

static bool wl_send(wl_worker *w, const char *line)
{
	size_t n = strlen(line);

	while (n > 0) {
		ssize_t s = send(w->fd, line, n, MSG_NOSIGNAL);
		if (s < 0 && errno == EINTR)
			continue;
		if (s <= 0)
			return false;
		line += s;
		n -= (size_t)s;
	}
	return true;
}

/* Handles one line: events are applied, a response is returned (the caller
 * decrefs), anything else is NULL. */
static json_t *wl_line(wl_worker *w, const char *line)
{
	json_t *m = json_loads(line, 0, NULL);
	json_t *ev;

	if (!m) {
		WL_ERR(w, "thread %d: not JSON: %.200s", w->index, line);
		return NULL;
	}
	ev = json_object_get(m, "event");
	if (!ev)
		return m;
	if (json_is_string(ev) && strcmp(json_string_value(ev), "lost") == 0) {
		const char *lease = json_string_value(json_object_get(m, "lease"));
		for (int k = 0; lease && k < w->nrecent; k++)
			if (strcmp(wl_grants[w->recent[k]].lease, lease) == 0)
				atomic_store(&wl_grants[w->recent[k]].lost_event, 1);
	}
	json_decref(m);
	return NULL;
}

/* Reads what is there (timeout_ms 0) or waits for the response to want
 * (want > 0). Returns that response or NULL (timeout, EOF: w->eof). */
static json_t *wl_read(wl_worker *w, json_int_t want, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		char *nl;
		while ((nl = memchr(w->buf, '\n', w->len)) != NULL) {
			size_t used = (size_t)(nl - w->buf) + 1;
			json_t *m;
			*nl = '\0';
			m = wl_line(w, w->buf);
			memmove(w->buf, w->buf + used, w->len - used);
			w->len -= used;
			if (m) {
				json_t *id = json_object_get(m, "id");
				if (want > 0 && json_is_integer(id) && json_integer_value(id) == want)
					return m;
				json_decref(m); /* an older answer */
			}
		}
		if (w->eof || w->fd < 0)
			return NULL;
		int64_t left = deadline - lb_now_ms();
		if (left < 0)
			left = 0;
		struct pollfd p = {.fd = w->fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return NULL;
		if (w->len == sizeof(w->buf)) {
			WL_ERR(w, "thread %d: line too long", w->index);
			w->eof = true;
			return NULL;
		}
		ssize_t n = recv(w->fd, w->buf + w->len, sizeof(w->buf) - w->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			w->eof = true;
			continue;
		}
		w->len += (size_t)n;
	}
}

static const char *err_code(json_t *resp)
{
	json_t *c = json_object_get(json_object_get(resp, "error"), "code");
	return json_is_string(c) ? json_string_value(c) : "?";
}

/* Releases grant g; returns OUT_*. Retries while Redis is unavailable. */
static int wl_release(wl_worker *w, int g)
{
	int64_t deadline = lb_now_ms() + 10000;
	char line[256];

	for (;;) {
		json_t *resp;
		const char *code;

		snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"release\",\"lease\":\"%s\"}\n",
		         (long long)++w->id, wl_grants[g].lease);
		if (!wl_send(w, line)) {
			wl_close(w);
			return OUT_CONN_DIED;
		}
		resp = wl_read(w, w->id, 8000);
		if (!resp) {
			if (w->eof) {
				wl_close(w);
				return OUT_CONN_DIED;
			}
			w->hangs++;
			WL_ERR(w, "thread %d: no answer to a release within 8 s", w->index);
			wl_close(w);
			return OUT_UNRESOLVED;
		}
		if (json_is_true(json_object_get(resp, "ok"))) {
			json_int_t count = json_integer_value(json_object_get(resp, "count"));
			json_decref(resp);
			if (count != 0)
				WL_ERR(w, "thread %d: release answered count %lld", w->index, (long long)count);
			return OUT_RELEASED;
		}
		code = err_code(resp);
		if (strcmp(code, "not_held") == 0) {
			json_decref(resp);
			return OUT_NOT_HELD;
		}
		if (strcmp(code, "unavailable") != 0) {
			w->unexpected++;
			WL_ERR(w, "thread %d: release answered %s", w->index, code);
			json_decref(resp);
			return OUT_UNRESOLVED;
		}
		json_decref(resp);
		if (lb_now_ms() > deadline)
			return OUT_UNRESOLVED;
		lb_sleep_ms(100);
	}
}

static void *wl_thread(void *arg)
{
	wl_worker *w = arg;
	char line[256];

	w->fd = -1;
	while (lb_now_ms() < w->end_ms) {
		json_t *resp;

		if (w->fd < 0) {
			if (!wl_connect(w)) {
				lb_sleep_ms(50);
				continue;
			}
			w->reconnects++;
		}
		snprintf(line, sizeof(line),
		         "{\"id\":%lld,\"op\":\"acquire\",\"lock\":\"" WL_LOCK
		         "\",\"ttl_ms\":3000,\"wait_ms\":2000}\n",
		         (long long)++w->id);
		if (!wl_send(w, line)) {
			wl_close(w);
			continue;
		}
		resp = wl_read(w, w->id, 2000 + 6000);
		if (!resp) {
			if (!w->eof) {
				w->hangs++;
				WL_ERR(w, "thread %d: no answer to an acquire with wait_ms 2000 within 8 s",
				       w->index);
			}
			wl_close(w);
			continue;
		}
		if (!json_is_true(json_object_get(resp, "ok"))) {
			const char *code = err_code(resp);
			if (strcmp(code, "timeout") == 0)
				w->timeouts++;
			else if (strcmp(code, "unavailable") == 0)
				w->unavailable++;
			else {
				w->unexpected++;
				WL_ERR(w, "thread %d: acquire answered %s", w->index, code);
			}
			json_decref(resp);
			lb_sleep_ms(10 + w->index * 3);
			continue;
		}
		int g = atomic_fetch_add(&wl_ngrants, 1);
		if (g >= WL_MAX_GRANTS) {
			json_decref(resp);
			WL_ERR(w, "thread %d: too many grants", w->index);
			break;
		}
		wl_grant *gr = &wl_grants[g];
		snprintf(gr->lease, sizeof(gr->lease), "%s",
		         json_string_value(json_object_get(resp, "lease")) ?: "");
		gr->fence = json_integer_value(json_object_get(resp, "fence"));
		gr->thread = w->index;
		json_decref(resp);
		w->recent[w->ring++ % 16] = g;
		if (w->nrecent < 16)
			w->nrecent++;
		w->grants++;
		int prev = atomic_exchange(&wl_holder, g + 1);
		if (prev) {
			pthread_mutex_lock(&res.mu);
			if (res.nconflicts < WL_MAX_CONFLICTS) {
				res.conflicts[res.nconflicts][0] = prev - 1;
				res.conflicts[res.nconflicts][1] = g;
			}
			res.nconflicts++;
			pthread_mutex_unlock(&res.mu);
		}

		/* the critical section: stop at once on a lost event */
		long v;
		wl_read(w, 0, 0);
		if (atomic_load(&gr->lost_event))
			gr->aborted = 1;
		else if (!res_read(gr->fence, &v))
			gr->rejected = 1;
		else {
			lb_sleep_ms(1);
			wl_read(w, 0, 0);
			if (atomic_load(&gr->lost_event))
				gr->aborted = 1;
			else if (!res_write(gr->fence, v + 1))
				gr->rejected = 1;
		}
		if (gr->aborted)
			w->aborted++;
		int mine = g + 1;
		atomic_compare_exchange_strong(&wl_holder, &mine, 0);

		gr->outcome = wl_release(w, g);
		if (gr->outcome == OUT_CONN_DIED)
			w->conn_died++;
	}
	wl_close(w);
	return NULL;
}

static bool wl_lost(const wl_grant *g)
{
	return atomic_load(&g->lost_event) || g->outcome == OUT_NOT_HELD;
}

static const char *const wl_outcome_name[] = {"none", "released", "not_held", "connection died",
                                              "unresolved"};

static void sleep_until(int64_t t)
{
	while (lb_now_ms() < t)
		lb_sleep_ms(10);
}

LB_TEST(faults, mutual_exclusion_through_every_fault, 120)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *A = lb_broker_start(r, NULL);
	lb_broker *B = lb_broker_start(r, NULL);
	pid_t rpid = lb_redis_pid(r);
	static wl_worker *w;
	pthread_t th[WL_THREADS];
	long snap[6];
	int64_t T = lb_now_ms();

	wl_grants = calloc(WL_MAX_GRANTS, sizeof(*wl_grants));
	w = calloc(WL_THREADS, sizeof(*w));
	cr_assert(wl_grants && w);
	atomic_store(&wl_ngrants, 0);
	atomic_store(&wl_holder, 0);
	for (int k = 0; k < WL_THREADS; k++) {
		w[k].index = k;
		w[k].ports[0] = lb_broker_port(k % 2 ? B : A);
		w[k].ports[1] = lb_broker_port(k % 2 ? A : B);
		w[k].end_ms = T + 19000;
		cr_assert_eq(pthread_create(&th[k], NULL, wl_thread, &w[k]), 0);
	}

	sleep_until(T + 1500);
	snap[0] = res_accepted();
	cr_log_info("faults: Redis frozen for 1.5 s (ttl 3 s)");
	cr_assert_eq(kill(rpid, SIGSTOP), 0);
	sleep_until(T + 3000);
	cr_assert_eq(kill(rpid, SIGCONT), 0);
	snap[1] = res_accepted();
	sleep_until(T + 5000);
	snap[2] = res_accepted();
	cr_log_info("faults: Redis killed (SIGKILL) and restarted empty");
	cr_assert_eq(kill(rpid, SIGKILL), 0);
	lb_redis_restart(r);
	sleep_until(T + 8500);
	snap[3] = res_accepted();
	cr_log_info("faults: broker B killed (SIGKILL)");
	lb_broker_kill9(B);
	sleep_until(T + 16000);
	snap[4] = res_accepted();
	cr_log_info("faults: FLUSHALL");
	lb_redis_flushall(r);
	for (int k = 0; k < WL_THREADS; k++)
		pthread_join(th[k], NULL);
	snap[5] = res_accepted();

	long grants = 0, timeouts = 0, unavailable = 0, reconnects = 0, aborted = 0, died = 0;
	long hangs = 0, unexpected = 0;
	for (int k = 0; k < WL_THREADS; k++) {
		grants += w[k].grants;
		timeouts += w[k].timeouts;
		unavailable += w[k].unavailable;
		reconnects += w[k].reconnects;
		aborted += w[k].aborted;
		died += w[k].conn_died;
		hangs += w[k].hangs;
		unexpected += w[k].unexpected;
	}
	int ng = atomic_load(&wl_ngrants);
	if (ng > WL_MAX_GRANTS)
		ng = WL_MAX_GRANTS;
	int lost_grants = 0, bad_rejects = 0, bad_conflicts = 0;
	char why[1024] = "";
	for (int g = 0; g < ng; g++) {
		if (wl_lost(&wl_grants[g]))
			lost_grants++;
		if (wl_grants[g].rejected && !wl_lost(&wl_grants[g])) {
			if (!bad_rejects++)
				snprintf(why, sizeof(why),
				         "thread %d (fence %lld, lease %.12s...) was refused by the resource "
				         "but its lease was never lost (release: %s)",
				         wl_grants[g].thread, (long long)wl_grants[g].fence,
				         wl_grants[g].lease, wl_outcome_name[wl_grants[g].outcome]);
		}
	}
	int nconf = res.nconflicts < WL_MAX_CONFLICTS ? res.nconflicts : WL_MAX_CONFLICTS;
	for (int k = 0; k < nconf; k++) {
		const wl_grant *p = &wl_grants[res.conflicts[k][0]], *n = &wl_grants[res.conflicts[k][1]];
		if (!wl_lost(p) && !bad_conflicts++)
			cr_log_error("thread %d was granted (fence %lld) while thread %d still held "
			             "(fence %lld, release: %s, lost event: %d)",
			             n->thread, (long long)n->fence, p->thread, (long long)p->fence,
			             wl_outcome_name[p->outcome], atomic_load(&p->lost_event));
	}
	cr_log_info("%d grants, %ld accepted increments, counter %ld, %ld refused accesses, %d "
	            "leases lost, %ld critical sections stopped by a lost event, %d grants while "
	            "another thread held, %ld timeouts, %ld unavailable, %ld connects, %ld "
	            "connections died under a release",
	            ng, res.accepted, res.counter, res.rejected, lost_grants, aborted,
	            res.nconflicts, timeouts, unavailable, reconnects, died);
	cr_log_info("accepted increments per phase: before %ld, Redis frozen %ld, after it %ld, "
	            "after the Redis restart %ld, after the broker kill %ld, after FLUSHALL %ld",
	            snap[0], snap[1] - snap[0], snap[2] - snap[1], snap[3] - snap[2],
	            snap[4] - snap[3], snap[5] - snap[4]);
	cr_assert_eq(grants, ng);
	for (int k = 0; k < WL_THREADS; k++)
		cr_expect_eq(w[k].error[0], '\0', "%s", w[k].error);
	cr_assert_eq(hangs, 0, "%ld requests hung", hangs);
	cr_assert_eq(unexpected, 0, "%ld unexpected answers", unexpected);
	cr_assert_eq(res.accepted, res.counter, "increments lost: %ld accepted, counter %ld",
	             res.accepted, res.counter);
	cr_assert_eq(res.out_of_order, 0, "%ld fences accepted out of order", res.out_of_order);
	cr_assert_eq(bad_rejects, 0, "%d refused accesses without a lost lease; first: %s",
	             bad_rejects, why);
	cr_assert_eq(bad_conflicts, 0,
	             "%d times a thread was granted the lock while another held a lease that was "
	             "never lost",
	             bad_conflicts);
	cr_assert_gt(snap[0], 20, "only %ld increments before the first fault", snap[0]);
	cr_assert_gt(snap[2] - snap[1], 0, "no progress after Redis was thawed");
	cr_assert_gt(snap[3] - snap[2], 0, "no progress after Redis was restarted");
	cr_assert_gt(snap[4] - snap[3], 0, "no progress after broker B was killed");
	cr_assert_gt(snap[5] - snap[4], 0, "no progress after FLUSHALL");
	for (int k = 0; k < WL_THREADS; k++)
		cr_expect_gt(w[k].grants, 0, "thread %d was never granted the lock", k);

	/* Everything ended: the lock is free and nobody waits. */
	lb_client *c = lb_connect(A, LB_TCP);
	int64_t deadline = lb_now_ms() + 3000;
	json_t *in;
	while ((strcmp(lb_str((in = inspect_when_up(c, WL_LOCK)), "state"), "free") != 0 ||
	        lb_int(in, "waiters") != 0) &&
	       lb_now_ms() < deadline)
		lb_sleep_ms(50);
	lb_expect_free(c, WL_LOCK);
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	json_t *st = lb_stats(c);
	cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
	cr_assert_eq(lb_int(st, "waiters"), 0, "%s", lb_dump(st));
	free(w);
	free(wl_grants);
	w = NULL;
	wl_grants = NULL;
	lb_end();
}
