/*
 * test_resilience.c - what the broker does when Redis or a client misbehave:
 * Redis down when the broker starts and for longer than the backoff cap,
 * Redis frozen (SIGSTOP) under commands and during shutdown, a client that
 * bursts thousands of requests, a half-deleted holder, extends racing the
 * watchdog, and lock names that would break the Redis hash tag.
 */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool redis_up(lb_client *c)
{
	json_t *resp = lb_stats(c);
	return strcmp(lb_str(resp, "redis"), "up") == 0;
}

/* Waits until the broker says Redis is up; returns the ms it took. */
static int64_t wait_redis_up(lb_client *c, int timeout_ms)
{
	int64_t t0 = lb_now_ms();

	while (!redis_up(c)) {
		cr_assert_lt(lb_now_ms() - t0, timeout_ms, "redis still down after %d ms", timeout_ms);
		lb_sleep_ms(50);
	}
	return lb_now_ms() - t0;
}

LB_TEST(resilience, broker_started_before_redis_connects_later, 60)
{
	/* TCP: there a refused connect is reported asynchronously, as a poll
	 * error, which hiredis's own libuv adapter used to swallow. */
	lb_redis *r = lb_redis_start(true);
	lb_broker *b;
	lb_client *c;

	lb_redis_stop(r);
	b = lb_broker_start_no_redis_wait(r, NULL);
	c = lb_connect(b, LB_TCP);
	lb_expect_err(lb_try_acquire(c, "late", 1000), "unavailable");
	lb_sleep_ms(3000); /* several refused connects, backoff growing */
	cr_assert_not(redis_up(c));
	lb_redis_restart(r);
	cr_log_info("up %lld ms after redis came back", (long long)wait_redis_up(c, 8000));
	lb_must_acquire(c, "late", 1000);
	lb_end();
}

LB_TEST(resilience, outage_longer_than_backoff_cap_recovers, 60)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_UNIX);

	lb_must_acquire(c, "before", 60000);
	lb_redis_stop(r);
	lb_sleep_ms(7000);
	lb_expect_err(lb_try_acquire(c, "during", 1000), "unavailable");
	lb_redis_restart(r);
	wait_redis_up(c, 8000);
	lb_must_acquire(c, "after", 1000);
	lb_end();
}

LB_TEST(resilience, frozen_redis_fails_commands_then_recovers, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	pid_t pid = lb_redis_pid(r);
	json_t *resp;
	int64_t t0;

	lb_must_acquire(c, "f0", 30000);
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	t0 = lb_now_ms();
	/* No reply: the command timeout ends it, not a hang. Whether it ran
	 * in Redis is unknown (it may run when Redis resumes), so it is no
	 * `unavailable` (which promises no effect) but a try that ran out of
	 * time, and what it may take is given back. */
	resp = lb_call_timeout(c, 10000, "{s:s, s:s, s:i}", "op", "acquire", "lock", "f1", "wait_ms", 0);
	lb_expect_err(resp, "timeout");
	cr_expect_lt(lb_now_ms() - t0, 5000, "took %lld ms", (long long)(lb_now_ms() - t0));
	cr_assert_eq(kill(pid, SIGCONT), 0);
	wait_redis_up(c, 10000);
	lb_must_acquire(c, "f2", 1000);
	lb_end();
}

LB_TEST(resilience, shutdown_with_frozen_redis_still_exits, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	pid_t pid = lb_redis_pid(r);

	lb_must_acquire(c, "held", 30000);
	lb_close(c);
	lb_sleep_ms(200);
	c = lb_connect(b, LB_TCP);
	lb_must_acquire(c, "held2", 30000);
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	lb_close(c); /* its release cannot be answered */
	/* lb_end stops the broker and asserts exit 0 within 10 s. */
	lb_broker_stop(b);
	kill(pid, SIGCONT);
	lb_end();
}

LB_TEST(resilience, burst_of_requests_then_more_requests, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_UNIX);
	lb_client *other = lb_connect(b, LB_TCP);
	enum { N = 20000 };
	static const char line[] = "{\"op\":\"stats\"}\n";
	char *burst = malloc(N * (sizeof(line) - 1));
	int got = 0;

	for (int k = 0; k < N; k++)
		memcpy(burst + k * (sizeof(line) - 1), line, sizeof(line) - 1);
	lb_must_acquire(c, "burst", 1000);
	cr_assert(lb_send_raw(c, burst, N * (sizeof(line) - 1)));
	free(burst);
	while (got < N) {
		json_t *m = lb_read_msg(c, 5000);
		cr_assert_not_null(m, "only %d of %d answers", got, N);
		got++;
	}
	/* The session still reads after the burst was answered. */
	lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
	/* And its end is noticed: the lock is free right away. */
	lb_close(c);
	cr_assert(lb_is_ok(lb_acquire_within(other, "burst", 1000, 2000)));
	lb_end();
}

LB_TEST(resilience, answers_before_a_close_are_all_delivered, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-line", "1024", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	enum { N = 30000 };
	static const char line[] = "{\"op\":\"ping\"}\n";
	size_t len = N * (sizeof(line) - 1) + 2000;
	char *buf = malloc(len);
	int got = 0;
	json_t *m;

	for (int k = 0; k < N; k++)
		memcpy(buf + k * (sizeof(line) - 1), line, sizeof(line) - 1);
	memset(buf + N * (sizeof(line) - 1), 'x', 2000); /* then an overlong line */
	cr_assert(lb_send_raw(c, buf, len));
	free(buf);
	while ((m = lb_read_msg(c, 5000)) && lb_is_ok(m))
		got++;
	cr_expect_eq(got, N, "%d of %d pings answered before the error", got, N);
	cr_assert_not_null(m, "no line_too_long before the close");
	lb_expect_err(m, "line_too_long");
	lb_expect_closed(c, 3000);
	lb_end();
}

LB_TEST(resilience, extends_racing_the_watchdog_never_shorten_the_lease, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(c, "race", 300); /* renewed every 100 ms */
	json_t *ev;

	for (int k = 0; k < 200; k++) {
		json_t *id = lb_send_req(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms",
		                         (k % 2) ? 60000 : 300);
		if (k % 20 == 19)
			lb_expect_ok(lb_wait_response(c, id, 5000));
		lb_sleep_ms(5);
	}
	lb_expect_ok(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 1500));
	/* The last extend set 1500 ms; the watchdog keeps it alive past that. */
	ev = lb_next_event(c, 3500);
	cr_expect_null(ev, "lease lost: %s", ev ? lb_dump(ev) : "");
	cr_expect_str_eq(lb_str(lb_inspect(c, "race"), "state"), "exclusive");
	lb_end();
}

LB_TEST(resilience, names_that_would_break_the_hash_tag, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *names[] = {"}abc", "=}abc", "abc", "=abc", "a}b{c", "{x}", "}", "="};
	const char *leases[8];
	redisReply *keys;

	for (int k = 0; k < 8; k++)
		leases[k] = lb_must_acquire(c, names[k], 5000);
	/* Eight different locks: all held at once, none clobbered another. */
	for (int k = 0; k < 8; k++) {
		json_t *in = lb_inspect(c, names[k]);
		cr_expect_str_eq(lb_str(in, "state"), "exclusive", "%s", names[k]);
		cr_expect_eq(json_array_size(lb_get(in, "holders")), 1, "%s", names[k]);
	}
	/* No key has an empty hash tag ("{}"), which would split a lock's keys
	 * over several Cluster slots. */
	keys = lb_redis_cmd(r, "KEYS *");
	for (size_t k = 0; k < keys->elements; k++)
		cr_expect_null(strstr(keys->element[k]->str, "{}"), "key %s", keys->element[k]->str);
	for (int k = 0; k < 8; k++)
		lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", leases[k]));
	for (int k = 0; k < 8; k++)
		lb_expect_free(c, names[k]);
	lb_end();
}

static const char *must_share(lb_client *c, const char *lock)
{
	json_t *r = lb_call(c, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock, "mode",
	                    "shared", "ttl_ms", 30000, "wait_ms", 0);

	lb_expect_ok(r);
	return lb_str(r, "lease");
}

LB_TEST(resilience, half_deleted_holder_is_not_held, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	lb_client *other = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(c, "half", 30000);
	const char *shared[2];
	json_t *ev;

	/* A lone holder lives in the lock's header: losing that key (as under
	 * an eviction policy) loses the lease. */
	lb_redis_cmd(r, "DEL %s", "lb:{half}");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 5000),
	              "not_held");
	ev = lb_next_event(c, 2000);
	cr_assert_not_null(ev);
	cr_expect_str_eq(lb_str(ev, "reason"), "gone");
	lb_must_acquire(other, "half", 1000);

	/* Two shared holders live in the holder keys. Only the expiry set
	 * disappears: neither is held any more. */
	shared[0] = must_share(c, "half2");
	shared[1] = must_share(other, "half2");
	lb_redis_cmd(r, "DEL %s", "lb:{half2}:h");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", shared[0], "ttl_ms", 5000),
	              "not_held");
	lb_expect_free(c, "half2");
	/* And the other half: only the info hash disappears. */
	shared[0] = must_share(c, "half3");
	shared[1] = must_share(other, "half3");
	lb_redis_cmd(r, "DEL %s", "lb:{half3}:i");
	lb_expect_err(lb_call(other, "{s:s, s:s}", "op", "release", "lease", shared[1]), "not_held");
	lb_expect_free(other, "half3");
	lb_end();
}

LB_TEST(resilience, redis_restart_with_data_keeps_leases, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(c, "kept", 3000); /* renewed every 1 s */
	json_t *ev, *in;

	/* Redis comes back with its data (the RDB it saved) but no scripts. */
	lb_redis_cmd(r, "SAVE");
	lb_redis_restart(r);
	ev = lb_next_event(c, 5000);
	cr_expect_null(ev, "the lease was lost across a restart with data: %s", ev ? lb_dump(ev) : "");
	in = lb_inspect(c, "kept");
	cr_expect_str_eq(lb_str(in, "state"), "exclusive");
	cr_expect_eq(json_array_size(lb_get(in, "holders")), 1);
	/* Renewals go on (NOSCRIPT reloaded the scripts), and it is still ours. */
	lb_expect_ok(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 3000));
	cr_expect_null(lb_next_event(c, 3500), "lost after the restart");
	cr_expect_eq(lb_int(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "count"), 0);
	lb_expect_free(c, "kept");
	lb_end();
}

LB_TEST(resilience, half_a_line_then_silence, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-line", "4096", NULL);
	lb_client *stall = lb_connect(b, LB_TCP);
	lb_client *other = lb_connect(b, LB_UNIX);
	char big[4000];
	json_t *m;

	/* Half a request, then nothing: others are served meanwhile. */
	cr_assert(lb_send_raw(stall, "{\"id\":1,\"op\":\"pi", 16));
	for (int k = 0; k < 20; k++)
		lb_expect_ok(lb_call_timeout(other, 1000, "{s:s}", "op", "ping"));
	cr_assert_null(lb_read_msg(stall, 300), "answered half a line");
	/* The rest arrives much later: it is one request after all. */
	cr_assert(lb_send_raw(stall, "ng\"}\n", 5));
	m = lb_read_msg(stall, 2000);
	cr_assert_not_null(m);
	lb_expect_ok(m);
	/* Just under max-line, in pieces, with pauses: still fine. */
	memset(big, ' ', sizeof(big));
	for (size_t off = 0; off < sizeof(big); off += 1000) {
		cr_assert(lb_send_raw(stall, big + off, 1000));
		lb_sleep_ms(50);
	}
	cr_assert(lb_send_raw(stall, "{\"id\":2,\"op\":\"ping\"}\n", 21));
	m = lb_read_msg(stall, 2000);
	cr_assert_not_null(m);
	lb_expect_ok(m);
	lb_end();
}

LB_TEST(resilience, release_then_acquire_pipelined, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	for (int k = 0; k < 20; k++) {
		const char *lease = lb_must_acquire(c, "pipe", 5000);
		char line[256];
		json_t *rel, *acq, *rid, *aid;
		/* Both in one write: the acquire must not re-enter the lease that
		 * the release before it frees. */
		snprintf(line, sizeof(line),
		         "{\"id\":\"r%d\",\"op\":\"release\",\"lease\":\"%s\"}\n"
		         "{\"id\":\"a%d\",\"op\":\"acquire\",\"lock\":\"pipe\",\"wait_ms\":2000}\n",
		         k, lease, k);
		cr_assert(lb_send_raw(c, line, strlen(line)));
		rid = json_sprintf("r%d", k);
		aid = json_sprintf("a%d", k);
		rel = lb_wait_response(c, rid, 5000);
		acq = lb_wait_response(c, aid, 5000);
		lb_expect_ok(rel);
		cr_expect_eq(lb_int(rel, "count"), 0);
		lb_expect_ok(acq);
		cr_expect_eq(lb_int(acq, "count"), 1);
		cr_expect_str_neq(lb_str(acq, "lease"), lease, "re-entered the released lease");
		lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lb_str(acq, "lease")));
		json_decref(rid);
		json_decref(aid);
	}
	lb_expect_free(c, "pipe");
	lb_end();
}

LB_TEST(resilience, reentry_release_reentry_pipelined, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(c, "rr", 5000);
	char line[512];
	json_t *a1, *rel, *a2, *id;

	/* count 1 -> re-enter (2) -> release (1) -> re-enter (2), in one write:
	 * the last acquire must see the re-entry still on its way. */
	snprintf(line, sizeof(line),
	         "{\"id\":\"a1\",\"op\":\"acquire\",\"lock\":\"rr\",\"wait_ms\":1000}\n"
	         "{\"id\":\"r1\",\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":\"a2\",\"op\":\"acquire\",\"lock\":\"rr\",\"wait_ms\":1000}\n",
	         lease);
	cr_assert(lb_send_raw(c, line, strlen(line)));
	id = json_string("a1");
	a1 = lb_wait_response(c, id, 5000);
	json_decref(id);
	id = json_string("r1");
	rel = lb_wait_response(c, id, 5000);
	json_decref(id);
	id = json_string("a2");
	a2 = lb_wait_response(c, id, 5000);
	json_decref(id);
	lb_expect_ok(a1);
	lb_expect_ok(rel);
	lb_expect_ok(a2);
	cr_expect_str_eq(lb_str(a2, "lease"), lease, "the last acquire did not re-enter");
	cr_expect_eq(lb_int(a2, "count"), 2);
	cr_expect_eq(lb_int(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "count"), 1);
	cr_expect_eq(lb_int(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "count"), 0);
	lb_expect_free(c, "rr");
	lb_end();
}

LB_TEST(resilience, hundreds_of_waiters_of_one_broker_keep_their_places, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	lb_client *c = lb_connect(b, LB_UNIX);
	enum { N = 300 };
	json_t *in;

	lb_must_acquire(h, "many", 30000);
	for (int k = 0; k < N; k++) {
		char owner[16];
		snprintf(owner, sizeof(owner), "o%d", k); /* distinct: no re-entry */
		lb_send_req(c, "{s:s, s:s, s:s}", "op", "acquire", "lock", "many", "owner", owner);
	}
	lb_sleep_ms(500);
	cr_assert_eq(lb_int(lb_inspect(h, "many"), "waiters"), N);
	/* Past the 5 s heartbeat deadline: every one is still queued. */
	lb_sleep_ms(7000);
	in = lb_inspect(h, "many");
	cr_expect_eq(lb_int(in, "waiters"), N, "waiters dropped from the queue: %lld left",
	             (long long)lb_int(in, "waiters"));
	lb_end();
}
