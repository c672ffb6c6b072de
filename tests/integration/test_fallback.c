/*
 * test_fallback.c - the order of a lock's calls when its own Redis
 * connection is down (issue 26, point 7). The broker's pool sends the
 * calls of a lock on the connection its name picks; while that one is
 * down, another one serves. A call sent there must not be overtaken by a
 * later call of the same lock once the lock's own connection is back:
 * PROTOCOL.md says requests take effect in the order they were sent.
 *
 * The fallback connection is made slow with a proxy between broker and
 * Redis (rproxy.h) that keeps its bytes back; the lock's own connection
 * is cut, comes back after the broker's reconnect backoff, and only then
 * does the later call go out. Before the fix the later call took the
 * lock's own connection and ran first: a pipelined release-then-acquire
 * answered busy, and a release overtaken by a re-entry was taken for a
 * replay of itself (its op seq below the re-entry's): the level was never
 * dropped.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/htab.h"
#include "tests/integration/rproxy.h"

#ifdef __clang__
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

#define POOL 2

struct setup {
	lb_broker *b;
	lb_client *c, *o;
	char own[8], other[8]; /* ":N" of the lock's own connection, of the other */
};

static int port_of(const lb_redis *r)
{
	return atoi(strrchr(lb_redis_url(r), ':') + 1);
}

/* A broker with POOL connections through the proxy; which of them serves
 * lock (rpool.h: a hash of the name picks it). */
static void start(struct setup *s, const char *lock)
{
	lb_redis *r = lb_redis_start(true);
	char url[64], pool[8];
	uint32_t route = htab_hash(HTAB_HASH_INIT, lock, strlen(lock));

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", rproxy_start(port_of(r)));
	snprintf(pool, sizeof(pool), "%d", POOL);
	s->b = lb_broker_start_url(url, "--pool", pool, "--canary-interval-ms", "60000", NULL);
	s->c = lb_connect(s->b, LB_TCP);
	s->o = lb_connect(s->b, LB_UNIX);
	snprintf(s->own, sizeof(s->own), ":%u", route % POOL);
	snprintf(s->other, sizeof(s->other), ":%u", (route + 1) % POOL);
}

/* The other connection keeps what it gets; the lock's own is cut, and
 * comes back after the broker's reconnect backoff (100 ms +- 20%). */
static void stall_other_cut_own(struct setup *s)
{
	rproxy_hold(s->other);
	rproxy_cut(s->own);
	lb_sleep_ms(30); /* the broker has seen its connection go */
}

static void own_is_back(void)
{
	lb_sleep_ms(600); /* reconnected and its handshake done */
}

static json_t *send_release(lb_client *c, const char *lease)
{
	return lb_send_req(c, "{s:s, s:s}", "op", "release", "lease", lease);
}

LB_TEST(fallback, a_release_then_an_acquire_keep_their_order, 40)
{
	struct setup s;

	start(&s, "ord");
	const char *lease = lb_must_acquire(s.c, "ord", 30000);

	stall_other_cut_own(&s);
	json_t *rid = send_release(s.c, lease); /* goes on the other connection */
	own_is_back();
	json_t *aid = lb_acq_send(s.c, "ord", LB_AO(.wait_ms = 0, .ttl_ms = 30000));
	lb_sleep_ms(200);
	rproxy_release();
	json_t *rel = lb_wait_response(s.c, rid, 5000), *g = lb_wait_response(s.c, aid, 5000);
	lb_expect_ok(rel);
	cr_assert_eq(lb_int(rel, "count"), 0, "%s", lb_dump(rel));
	cr_assert(lb_is_ok(g), "the acquire sent after the release found the lock busy: %s",
	          lb_dump(g));
	cr_assert_eq(lb_int(g, "count"), 1);
	lb_release(s.c, lb_str(g, "lease"));
	lb_expect_free(s.o, "ord");
	lb_end();
	rproxy_stop();
}

LB_TEST(fallback, a_release_is_not_overtaken_by_a_reentry, 40)
{
	struct setup s;

	start(&s, "ord2");
	const char *lease = lb_must_acquire(s.c, "ord2", 30000);
	cr_assert_eq(lb_int(lb_try_acquire(s.c, "ord2", 30000), "count"), 2);

	stall_other_cut_own(&s);
	json_t *rid = send_release(s.c, lease); /* 2 -> 1, on the other connection */
	own_is_back();
	json_t *aid = lb_acq_send(s.c, "ord2", LB_AO(.wait_ms = 0, .ttl_ms = 30000)); /* 1 -> 2 */
	lb_sleep_ms(200);
	rproxy_release();
	json_t *rel = lb_wait_response(s.c, rid, 5000), *g = lb_wait_response(s.c, aid, 5000);
	lb_expect_ok(rel);
	lb_expect_ok(g);
	cr_assert_eq(lb_int(rel, "count"), 1, "the release did not drop its level: %s", lb_dump(rel));
	cr_assert_eq(lb_int(g, "count"), 2, "%s", lb_dump(g));
	cr_assert_eq(lb_release(s.c, lease), 1);
	cr_assert_eq(lb_release(s.c, lease), 0, "a level leaked");
	lb_expect_free(s.o, "ord2");
	lb_end();
	rproxy_stop();
}
