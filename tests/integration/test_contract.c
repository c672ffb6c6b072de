/*
 * test_contract.c - the contract where real clients met it (issue 14):
 * requests of a session take effect in order, an id still pending cannot
 * be used again, a half-closed client gets every answer, a lost lease is
 * not_held without Redis, every reason the broker closes a connection is
 * announced, and hello and ping say what a client needs to know.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static json_t *wait_id(lb_client *c, const char *id, int ms)
{
	json_t *j = json_string(id), *resp = lb_wait_response(c, j, ms);

	json_decref(j);
	return resp;
}

static bool listed(lb_client *c, const json_t *leases_resp, const char *lease)
{
	size_t k;
	json_t *v;

	(void)c;
	json_array_foreach(lb_get(leases_resp, "leases"), k, v) {
		if (strcmp(lb_str(v, "lease"), lease) == 0)
			return true;
	}
	return false;
}

/* ---- order ------------------------------------------------------------------ */

/* acquire then leases in one write: leases shows the lease (it was
 * answered locally, before the acquire came back from Redis). Both for a
 * try and for an acquire that may wait but finds the lock free. */
LB_TEST(contract, acquire_then_leases_in_one_write_lists_the_lease, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *a, *l;

	for (int k = 0; k < 2; k++) {
		char buf[256];
		snprintf(buf, sizeof(buf),
		         "{\"id\":\"a%d\",\"op\":\"acquire\",\"lock\":\"al%d\"%s}\n"
		         "{\"id\":\"l%d\",\"op\":\"leases\"}\n",
		         k, k, k ? "" : ",\"wait_ms\":0", k);
		cr_assert(lb_send_raw(c, buf, strlen(buf)));
		a = wait_id(c, k ? "a1" : "a0", 5000);
		l = wait_id(c, k ? "l1" : "l0", 5000);
		lb_expect_ok(a);
		lb_expect_ok(l);
		cr_assert(listed(c, l, lb_str(a, "lease")), "leases sent after the acquire: %s", lb_dump(l));
	}
	lb_end();
}

/* release of a detached lease (its lock found through its token first)
 * then an acquire of that lock, in one write: the acquire comes after the
 * release. */
LB_TEST(contract, a_detached_release_is_not_passed_by_a_later_acquire, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *d = lb_call(c, "{s:s, s:s, s:i, s:b}", "op", "acquire", "lock", "dr", "wait_ms", 0, "detach", 1);
	char buf[256];

	lb_expect_ok(d);
	snprintf(buf, sizeof(buf),
	         "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":\"ac\",\"op\":\"acquire\",\"lock\":\"dr\",\"wait_ms\":0}\n",
	         lb_str(d, "lease"));
	cr_assert(lb_send_raw(c, buf, strlen(buf)));
	lb_expect_ok(wait_id(c, "rl", 5000));
	lb_expect_ok(wait_id(c, "ac", 5000));
	lb_end();
}

/* An id equal to that of a pending request of the session is refused, and
 * the message names it; the pending request is unharmed, and once it is
 * answered the id may be used again. Ids of other sessions do not count. */
LB_TEST(contract, a_pending_id_cannot_be_used_again, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "dup", 30000);
	json_t *e, *g, *x;

	cr_assert(lb_send_line(c, "{\"id\":7,\"op\":\"acquire\",\"lock\":\"dup\"}"));
	lb_wait_waiters(h, "dup", 1, 5000);
	cr_assert(lb_send_line(c, "{\"id\":7,\"op\":\"ping\"}"));
	e = lb_read_msg(c, 3000);
	cr_assert_not_null(e);
	lb_expect_err(e, "invalid_argument");
	cr_assert_eq(lb_int(e, "id"), 7);
	cr_assert_not_null(strstr(lb_str(e, "error.message"), "7"), "%s", lb_dump(e));
	/* a cancel of 7 still means the acquire */
	x = lb_call(c, "{s:s, s:i}", "op", "cancel", "target", 7);
	cr_assert(lb_bool(x, "cancelled"), "%s", lb_dump(x));
	g = lb_read_msg(c, 3000);
	cr_assert_not_null(g);
	cr_assert_eq(lb_int(g, "id"), 7);
	lb_expect_err(g, "cancelled");
	/* answered: 7 is free again, and was never another session's */
	cr_assert(lb_send_line(c, "{\"id\":7,\"op\":\"ping\"}"));
	lb_expect_ok(lb_read_msg(c, 3000));
	cr_assert(lb_send_line(h, "{\"id\":7,\"op\":\"ping\"}"));
	lb_expect_ok(lb_read_msg(h, 3000));
	cr_assert_eq(lb_release(h, lease), 0);
	lb_end();
}

/* ---- half-close ----------------------------------------------------------------- */

/* Reads every line until EOF; returns them as a JSON array. */
static json_t *read_to_eof(lb_client *c, int ms)
{
	json_t *all = json_array();
	int64_t end = lb_now_ms() + ms;

	while (lb_now_ms() < end) {
		json_t *m = lb_read_msg(c, 200);
		if (m)
			json_array_append(all, m);
		else if (lb_is_closed(c))
			return all;
	}
	cr_assert_fail("the broker did not close the half-closed connection; got %s", lb_dump(all));
	return all;
}

static void half_close(lb_client *c)
{
	int fd = lb_client_fd(c);

	cr_assert_eq(shutdown(fd, SHUT_WR), 0);
}

/* A half-closed client with a waiting acquire: told the broker saw it, the
 * acquire is granted when the holder releases, then the broker closes (and
 * releases the lease). */
LB_TEST(contract, half_close_gets_a_waiting_acquire_granted, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *c = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "hc", 30000);
	json_t *all, *m;

	cr_assert(lb_send_line(c, "{\"id\":1,\"op\":\"acquire\",\"lock\":\"hc\"}"));
	lb_wait_waiters(h, "hc", 1, 5000);
	half_close(c);
	m = lb_read_msg(c, 3000);
	cr_assert_not_null(m, "nothing after the half-close");
	cr_assert_str_eq(lb_str(m, "event"), "half_closed", "%s", lb_dump(m));
	cr_assert_eq(lb_int(m, "pending"), 1);
	lb_sleep_ms(1500); /* the half-closed session lives on meanwhile */
	cr_assert_eq(lb_inspect_waiters(h, "hc"), 1);
	cr_assert_eq(lb_release(h, lease), 0);
	all = read_to_eof(c, 5000);
	cr_assert_eq(json_array_size(all), 2, "%s", lb_dump(all));
	lb_expect_ok(json_array_get(all, 0));
	cr_assert_eq(lb_int(json_array_get(all, 0), "id"), 1);
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "event"), "closing");
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "reason"), "idle_half_closed");
	lb_expect_free(h, "hc"); /* released when the connection closed */
	lb_end();
}

/* The same with a wait that runs out: timeout, then closing. */
LB_TEST(contract, half_close_gets_a_timeout, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *c = lb_connect(b, LB_UNIX);
	json_t *all;

	lb_must_acquire(h, "ht", 30000);
	cr_assert(lb_send_line(c, "{\"id\":2,\"op\":\"acquire\",\"lock\":\"ht\",\"wait_ms\":700}"));
	lb_wait_waiters(h, "ht", 1, 5000);
	half_close(c);
	all = read_to_eof(c, 5000);
	cr_assert_eq(json_array_size(all), 3, "%s", lb_dump(all));
	cr_assert_str_eq(lb_str(json_array_get(all, 0), "event"), "half_closed");
	lb_expect_err(json_array_get(all, 1), "timeout");
	cr_assert_str_eq(lb_str(json_array_get(all, 2), "reason"), "idle_half_closed");
	lb_end();
}

/* Nothing pending: closing at once. A whole pipeline then EOF (a pipe into
 * socat): every request answered, in the order the effects took place. */
LB_TEST(contract, half_close_with_a_pipeline_answers_all_of_it, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	static const char pipe[] = "{\"id\":1,\"op\":\"ping\"}\n"
	                           "{\"id\":2,\"op\":\"acquire\",\"lock\":\"hp\",\"wait_ms\":0}\n"
	                           "{\"id\":3,\"op\":\"leases\"}\n"
	                           "{\"id\":4,\"op\":\"inspect\",\"lock\":\"hp\"}\n";
	json_t *all;

	cr_assert(lb_send_raw(c, pipe, sizeof(pipe) - 1));
	half_close(c);
	all = read_to_eof(c, 5000);
	/* maybe a half_closed event, 4 answers, closing */
	cr_assert_geq(json_array_size(all), 5, "%s", lb_dump(all));
	cr_assert_str_eq(lb_str(json_array_get(all, json_array_size(all) - 1), "reason"),
	                 "idle_half_closed");
	for (int id = 1; id <= 4; id++) {
		bool found = false;
		size_t k;
		json_t *m;
		json_array_foreach(all, k, m) {
			json_t *v = json_object_get(m, "id");
			if (v && json_is_integer(v) && json_integer_value(v) == id) {
				lb_expect_ok(m);
				found = true;
				if (id == 3)
					cr_assert_eq(json_array_size(lb_get(m, "leases")), 1, "%s", lb_dump(m));
			}
		}
		cr_assert(found, "no answer to %d: %s", id, lb_dump(all));
	}
	lb_expect_free(o, "hp");

	c = lb_connect(b, LB_UNIX);
	half_close(c);
	all = read_to_eof(c, 3000);
	cr_assert_eq(json_array_size(all), 1, "%s", lb_dump(all));
	cr_assert_str_eq(lb_str(json_array_get(all, 0), "reason"), "idle_half_closed");
	lb_end();
}

/* A client that closed for good (exit, kill) while its acquire waits is
 * not a half-close: its acquire is withdrawn at once (Unix) or within the
 * check after the half_closed probe (TCP). */
LB_TEST(contract, a_client_gone_for_good_is_not_a_half_close, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "gg", 30000);

	for (int t = 0; t < 2; t++) {
		lb_client *c = lb_connect(b, t ? LB_TCP : LB_UNIX);
		int64_t t0;
		cr_assert(lb_send_line(c, "{\"id\":1,\"op\":\"acquire\",\"lock\":\"gg\"}"));
		lb_wait_waiters(h, "gg", 1, 5000);
		lb_close(c);
		t0 = lb_now_ms();
		while (lb_inspect_waiters(h, "gg") != 0 && lb_now_ms() - t0 < 3000)
			lb_sleep_ms(20);
		cr_assert_eq(lb_inspect_waiters(h, "gg"), 0, "%s: the closed client's acquire stays queued",
		             t ? "tcp" : "unix");
		cr_assert_lt(lb_now_ms() - t0, 1200);
	}
	cr_assert_eq(lb_release(h, lease), 0);
	lb_end();
}

/* ---- lost leases ---------------------------------------------------------------- */

/* After lost, release and extend answer not_held at once, also with Redis
 * down (they answered unavailable). */
LB_TEST(contract, a_lost_lease_is_not_held_without_redis, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *a = lb_call(c, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "ll", "ttl_ms", 300,
	                    "wait_ms", 0, "watchdog", 0);
	const char *lease;
	json_t *ev;

	lb_expect_ok(a);
	lease = lb_str(a, "lease");
	ev = lb_next_event(c, 3000);
	cr_assert_not_null(ev);
	cr_assert_str_eq(lb_str(ev, "event"), "lost");
	lb_redis_stop(r);
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease), "not_held");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 1000),
	              "not_held");
	/* a token of no lease of this broker still needs Redis to tell */
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", "00000000000000000000000000000000"),
	              "unavailable");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "release", "lease", "not-a-token"), "not_held");
	lb_end();
}

/* ---- why a connection ends ------------------------------------------------------- */

static void expect_closing(lb_client *c, const char *reason, int ms)
{
	json_t *all = read_to_eof(c, ms);
	json_t *last = json_array_get(all, json_array_size(all) - 1);

	cr_assert_not_null(last, "closed without a closing event");
	cr_assert_str_eq(lb_str(last, "event"), "closing", "%s", lb_dump(all));
	cr_assert_str_eq(lb_str(last, "reason"), reason, "%s", lb_dump(all));
}

LB_TEST(contract, closing_keepalive, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	lb_expect_ok(lb_call(c, "{s:s, s:i}", "op", "hello", "keepalive_ms", 500));
	expect_closing(c, "keepalive", 4000);
	lb_end();
}

LB_TEST(contract, closing_line_too_long_states_the_limit, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-line", "100", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	char big[300];
	json_t *e, *all;

	memset(big, 'x', sizeof(big));
	cr_assert(lb_send_raw(c, big, sizeof(big)));
	all = read_to_eof(c, 3000);
	cr_assert_eq(json_array_size(all), 2, "%s", lb_dump(all));
	e = json_array_get(all, 0);
	lb_expect_err(e, "line_too_long");
	cr_assert_not_null(strstr(lb_str(e, "error.message"), "100"), "%s", lb_dump(e));
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "reason"), "line_too_long");
	lb_end();
}

LB_TEST(contract, closing_auth_failures, 30)
{
	lb_redis *r = lb_redis_start(false);
	char path[512];
	FILE *f;
	lb_broker *b;
	lb_client *c;

	snprintf(path, sizeof(path), "%s/secret", lb_tmpdir());
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("s3cret\n", f);
	fclose(f);
	b = lb_broker_start(r, "--auth-file", path, NULL);
	c = lb_connect(b, LB_TCP);
	for (int k = 0; k < 2; k++)
		lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "nope"), "unauthorized");
	cr_assert(lb_send_line(c, "{\"op\":\"hello\",\"auth\":\"nope\"}"));
	expect_closing(c, "auth_failures", 3000);
	lb_end();
}

LB_TEST(contract, closing_max_connections, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-connections", "2", NULL);
	lb_client *a, *a2, *c;
	json_t *all;

	lb_sleep_ms(300); /* the harness's readiness probes have closed */
	a = lb_connect(b, LB_TCP);
	a2 = lb_connect(b, LB_TCP);

	lb_expect_ok(lb_call(a, "{s:s}", "op", "ping"));
	lb_expect_ok(lb_call(a2, "{s:s}", "op", "ping"));
	c = lb_connect(b, LB_TCP);
	all = read_to_eof(c, 3000);
	cr_assert_eq(json_array_size(all), 2, "%s", lb_dump(all));
	lb_expect_err(json_array_get(all, 0), "limit_exceeded");
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "reason"), "max_connections");
	lb_end();
}

LB_TEST(contract, closing_shutdown, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--shutdown-grace-ms", "500", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *all;

	lb_must_acquire(c, "sd", 30000);
	lb_broker_signal(b, SIGTERM);
	all = read_to_eof(c, 5000);
	cr_assert_eq(json_array_size(all), 2, "%s", lb_dump(all));
	cr_assert_str_eq(lb_str(json_array_get(all, 0), "event"), "shutdown");
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "event"), "closing");
	cr_assert_str_eq(lb_str(json_array_get(all, 1), "reason"), "shutdown");
	lb_broker_wait_exit(b);
	lb_end();
}

/* ---- hello and ping -------------------------------------------------------------- */

LB_TEST(contract, hello_tells_version_broker_and_limits, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-line", "4096", "--max-inflight", "77",
	                               "--max-waiters-per-session", "33", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *h = lb_call(c, "{s:s}", "op", "hello"), *l;
	char name[64];
	long long ids[8];

	lb_expect_ok(h);
	cr_assert_eq(strncmp(lb_str(h, "server"), "lockbroker/", 11), 0, "%s", lb_dump(h));
	cr_assert_eq(lb_int(h, "proto"), 1);
	cr_assert_eq(strlen(lb_str(h, "broker")), 16, "%s", lb_dump(h));
	/* the broker id is the one it names its Redis connections with */
	snprintf(name, sizeof(name), "name=lockbroker-%s:", lb_str(h, "broker"));
	cr_assert_not_null(strstr(lb_redis_cmd(r, "CLIENT LIST")->str, name));
	cr_assert_gt(lb_redis_broker_conns(r, ids, 8, true), 0);
	l = lb_get(h, "limits");
	cr_assert_eq(lb_int(l, "max_line"), 4096);
	cr_assert_eq(lb_int(l, "ttl_ms_min"), 100);
	cr_assert_eq(lb_int(l, "ttl_ms_max"), 86400000);
	cr_assert_eq(lb_int(l, "max_inflight"), 77);
	cr_assert_eq(lb_int(l, "max_waiters_per_session"), 33);
	cr_assert_eq(lb_int(l, "max_leases_per_session"), 10000);
	cr_assert_eq(lb_int(l, "keepalive_ms_min"), 500);
	cr_assert_eq(lb_int(l, "keepalive_ms_max"), 600000);
	lb_end();
}

LB_TEST(contract, ping_says_whether_redis_is_up, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	int64_t t0;

	cr_assert_str_eq(lb_str(lb_call(c, "{s:s}", "op", "ping"), "redis"), "up");
	lb_redis_stop(r);
	t0 = lb_now_ms();
	while (strcmp(lb_str(lb_call(c, "{s:s}", "op", "ping"), "redis"), "down") != 0) {
		cr_assert_lt(lb_now_ms() - t0, 5000, "ping still says up");
		lb_sleep_ms(50);
	}
	lb_redis_restart(r);
	t0 = lb_now_ms();
	while (strcmp(lb_str(lb_call(c, "{s:s}", "op", "ping"), "redis"), "up") != 0) {
		cr_assert_lt(lb_now_ms() - t0, 8000, "ping still says down");
		lb_sleep_ms(50);
	}
	lb_end();
}

/* A release of a token that is no lease, with Redis down: one answer,
 * not_held (it was answered twice). */
LB_TEST(contract, a_bad_token_release_with_redis_down_answers_once, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *again;

	lb_redis_stop(r);
	for (int k = 0; k < 50 && strcmp(lb_str(lb_call(c, "{s:s}", "op", "ping"), "redis"), "down") != 0; k++)
		lb_sleep_ms(100);
	cr_assert(lb_send_line(c, "{\"id\":7,\"op\":\"release\",\"lease\":\"nope\"}"));
	lb_expect_err(lb_read_msg(c, 2000), "not_held");
	again = lb_read_msg(c, 1000);
	cr_assert_null(again, "a second answer: %s", lb_dump(again));
	lb_end();
}

/* A request refused before it runs (an unknown op) with the id of a
 * pending request: refused as a duplicate, and the pending request keeps
 * its id. */
LB_TEST(contract, an_early_error_keeps_the_pending_id, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *c = lb_connect(b, LB_TCP);
	json_t *p;

	lb_must_acquire(h, "pi", 30000);
	cr_assert(lb_send_line(c, "{\"id\":5,\"op\":\"acquire\",\"lock\":\"pi\",\"wait_ms\":20000}"));
	lb_wait_waiters(h, "pi", 1, 5000);
	cr_assert(lb_send_line(c, "{\"id\":5,\"op\":\"nope\"}"));
	lb_expect_err(lb_read_msg(c, 2000), "invalid_argument");
	cr_assert(lb_send_line(c, "{\"id\":6,\"op\":\"nope\"}"));
	lb_expect_err(lb_read_msg(c, 2000), "unknown_op");
	cr_assert(lb_send_line(c, "{\"id\":5,\"op\":\"ping\"}"));
	p = lb_read_msg(c, 2000);
	cr_assert(lb_is_err(p, "invalid_argument"), "id 5 is pending, yet: %s", lb_dump(p));
	lb_end();
}

/* ---- every answer can be matched; errors that explain themselves ---------- */

static json_t *raw_answer(lb_client *c, const void *line, size_t len)
{
	cr_assert(lb_send_raw(c, line, len));
	return lb_read_msg(c, 3000);
}

static json_t *line_answer(lb_client *c, const char *line)
{
	return raw_answer(c, line, strlen(line));
}

LB_TEST(contract, every_error_carries_a_valid_id, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	static const char nul_line[] =
		"{\"id\":8,\"op\":\"acquire\",\"lock\":\"r2\",\"wait_ms\":0\0,\"detach\":true\0,\"watchdog\":false}\n";
	static const char nul_key[] = "{\"id\":9,\"op\":\"ping\",\"\\u0000\":1}\n";
	json_t *m;

	/* a missing op: bad_request, with the id */
	m = line_answer(c, "{\"id\":5}\n");
	lb_expect_err(m, "bad_request");
	cr_assert_eq(lb_int(m, "id"), 5, "%s", lb_dump(m));
	m = line_answer(c, "{\"id\":\"x\",\"op\":7}\n");
	lb_expect_err(m, "bad_request");
	cr_assert_str_eq(lb_str(m, "id"), "x");
	/* a raw NUL byte: bad_json, nothing granted */
	m = raw_answer(c, nul_line, sizeof(nul_line) - 1);
	lb_expect_err(m, "bad_json");
	lb_expect_free(c, "r2");
	/* \u0000 in a key is valid JSON: an unknown field, with the id */
	m = raw_answer(c, nul_key, sizeof(nul_key) - 1);
	lb_expect_err(m, "invalid_argument");
	cr_assert_eq(lb_int(m, "id"), 9);
	/* an integer too big for 64 bits elsewhere changes nothing of the id */
	m = line_answer(c, "{\"id\":9007199254740993,\"op\":\"ping\",\"x\":99999999999999999999}\n");
	lb_expect_err(m, "invalid_argument");
	cr_assert(json_is_null(json_object_get(m, "id")), "an out-of-range id echoed: %s", lb_dump(m));
	m = line_answer(c, "{\"id\":1.0,\"op\":\"nope\",\"x\":99999999999999999999}\n");
	lb_expect_err(m, "invalid_argument");
	cr_assert(json_is_null(json_object_get(m, "id")), "%s", lb_dump(m));
	m = line_answer(c, "{\"id\":1.0,\"op\":\"nope\"}\n");
	lb_expect_err(m, "invalid_argument");
	m = line_answer(c, "{\"id\":12,\"op\":\"ping\",\"x\":99999999999999999999}\n");
	lb_expect_err(m, "invalid_argument");
	cr_assert_eq(lb_int(m, "id"), 12);
	lb_end();
}

LB_TEST(contract, errors_explain_themselves, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *m;

	/* blank lines get no answer */
	cr_assert(lb_send_raw(c, "   \t \r\n\n\t\n", strlen("   \t \r\n\n\t\n")));
	lb_expect_silent(c, 300, "blank lines");
	m = line_answer(c, "{\"id\":3,\"op\":\"acquire\",\"lock\":\"x\",}\n");
	lb_expect_err(m, "bad_json");
	cr_assert_not_null(strstr(lb_str(m, "error.message"), "at byte 34"), "%s", lb_dump(m));
	m = lb_call(c, "{s:s, s:s}", "op", "release", "lock", "x");
	lb_expect_err(m, "invalid_argument");
	cr_assert_str_eq(lb_str(m, "error.message"), "unknown field 'lock' (release takes 'lease')");
	m = lb_call(c, "{s:s, s:s}", "op", "acquire", "lease", "x");
	lb_expect_err(m, "invalid_argument");
	cr_assert_not_null(strstr(lb_str(m, "error.message"), "unknown field 'lease' (acquire takes"),
	                   "%s", lb_dump(m));
	m = lb_call(c, "{s:s, s:s}", "op", "acquire", "lcok", "x");
	cr_assert_str_eq(lb_str(m, "error.message"), "unknown field 'lcok'");
	lb_end();
}
