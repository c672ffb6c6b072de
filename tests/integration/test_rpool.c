/*
 * test_rpool.c - the broker's Redis connections at their edges: a Redis
 * that lost its scripts in the middle of a session's pipeline, and a
 * broker stopped while its connects hang.
 */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* After SCRIPT FLUSH the broker loads what it needs again. An acquire of
 * another lock comes first (so the old code had loaded the acquire script
 * and nothing else); then one write carries a release of L and a try of
 * L by another owner of the session. The try runs after the release, so
 * it is granted: a release that found no script is not passed by what was
 * sent after it. */
LB_TEST(rpool, noscript_keeps_the_order_of_a_sessions_requests, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *a = lb_connect(b, LB_TCP), *x = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "L", 30000);
	json_t *rl, *ac, *id_rl = json_string("rl"), *id_ac = json_string("ac");
	char buf[512];
	int n;

	lb_redis_cmd(r, "SCRIPT FLUSH");
	lb_expect_ok(lb_try_acquire(x, "Z", 30000));
	n = snprintf(buf, sizeof(buf),
	             "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}\n"
	             "{\"id\":\"ac\",\"op\":\"acquire\",\"lock\":\"L\",\"owner\":\"o2\",\"wait_ms\":0}\n",
	             lease);
	cr_assert(lb_send_raw(a, buf, (size_t)n));
	rl = lb_wait_response(a, id_rl, 5000);
	ac = lb_wait_response(a, id_ac, 5000);
	json_decref(id_rl);
	json_decref(id_ac);
	lb_expect_ok(rl);
	cr_assert_eq(lb_int(rl, "count"), 0);
	cr_assert(lb_is_ok(ac), "the try ran before the release sent ahead of it: %s", lb_dump(ac));
	lb_end();
}

/* A listener whose accept queue is full: connects to it stay in SYN-SENT.
 * Returns its port; *fds gets the listener and the connections that fill
 * its queue (closed by the caller). */
static int hanging_listener(int fds[4])
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);

	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fds[0], 0);
	cr_assert_eq(bind(fds[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fds[0], 0), 0);
	cr_assert_eq(getsockname(fds[0], (struct sockaddr *)&sa, &len), 0);
	for (int k = 1; k < 4; k++) {
		fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		cr_assert_geq(fds[k], 0);
		connect(fds[k], (struct sockaddr *)&sa, sizeof(sa)); /* EINPROGRESS */
	}
	lb_sleep_ms(100);
	return ntohs(sa.sin_port);
}

/* SIGTERM while every connect to Redis is pending (Redis unreachable, a
 * common moment to restart brokers): the broker exits cleanly (it freed a
 * hiredis context twice: hiredis 0.14 runs no disconnect callback for a
 * context that never connected). */
LB_TEST(rpool, sigterm_while_connects_hang, 30)
{
	lb_redis *r = lb_redis_start(false);
	int fds[4], port = hanging_listener(fds);
	char url[64];
	lb_broker *b;
	lb_client *c;
	json_t *st;

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	b = lb_broker_start_no_redis_wait(r, "--redis", url, NULL);
	c = lb_connect(b, LB_TCP);
	st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "down");
	lb_expect_err(lb_try_acquire(c, "L", 1000), "unavailable");
	lb_sleep_ms(300);
	lb_broker_stop(b); /* asserts exit status 0 */
	for (int k = 0; k < 4; k++)
		close(fds[k]);
	lb_end();
}

/* The same after a connect timed out once (the context was dropped and a
 * new connect is pending). */
LB_TEST(rpool, sigterm_after_a_connect_timeout, 30)
{
	lb_redis *r = lb_redis_start(false);
	int fds[4], port = hanging_listener(fds);
	char url[64];
	lb_broker *b;

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	b = lb_broker_start_no_redis_wait(r, "--redis", url, NULL);
	lb_sleep_ms(3500); /* the 3 s connect timeout dropped every context */
	lb_broker_stop(b);
	for (int k = 0; k < 4; k++)
		close(fds[k]);
	lb_end();
}

/* A Redis named by a host name: resolved off the loop, then served. */
LB_TEST(rpool, a_redis_host_name_is_resolved, 30)
{
	lb_redis *r = lb_redis_start(true);
	char url[64];
	lb_broker *b;
	lb_client *c;

	snprintf(url, sizeof(url), "redis://localhost:%s", strrchr(lb_redis_url(r), ':') + 1);
	b = lb_broker_start(r, "--redis", url, NULL);
	c = lb_connect(b, LB_TCP);
	lb_release(c, lb_must_acquire(c, "dns", 5000));
	lb_end();
}

/* A name that does not resolve: Redis is down, the broker keeps serving
 * what needs no Redis, and stops cleanly. */
LB_TEST(rpool, an_unresolvable_redis_host_is_down, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start_no_redis_wait(r, "--redis", "redis://no-such-host.invalid:6379", NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	lb_sleep_ms(500);
	cr_assert_str_eq(lb_str(lb_stats(c), "redis"), "down");
	lb_expect_err(lb_try_acquire(c, "L", 1000), "unavailable");
	lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
	lb_end();
}
