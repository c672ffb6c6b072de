/*
 * test_replicas.c - --redis-wait-replicas on one Redis (issue 26, point
 * 11): the releases the broker sends by itself (a grant given back, a
 * session's end, a lost lease) go without WAIT, so a missing replica
 * costs one WAIT per grant, not one more per give-back; and a grant that
 * such a release makes for a waiter of the same broker is confirmed by a
 * WAITed heartbeat before it is answered, so with the replica there the
 * waiter is granted (not answered unavailable).
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

static int port_of(const lb_redis *r)
{
	const char *url = lb_redis_url(r), *colon = strrchr(url, ':');

	cr_assert_not_null(colon, "%s", url);
	return atoi(colon + 1);
}

/* No replica: an acquire's grant is not acknowledged within WAIT's 300 ms
 * and is given back. One WAIT goes to Redis (the acquire's), not two:
 * the give-back goes without one. Before the fix the give-back waited
 * another 300 ms for a replica that was not there, holding the lock's
 * connection. */
LB_TEST(replicas, a_give_back_goes_without_wait, 40)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *b = lb_broker_start(r, "--redis-wait-replicas", "1", "--redis-wait-ms", "300",
	                               "--pool", "1", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	lb_monitor mon;

	lb_monitor_start(&mon, NULL, port_of(r));
	int64_t t0 = lb_now_ms();
	json_t *g = lb_try_acquire(c, "gb", 10000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_err(g, "unavailable");
	lb_sleep_ms(800); /* a WAIT behind the give-back would have run by now */
	lb_monitor_stop(&mon);
	fprintf(stderr, "replicas: a grant no replica acknowledged: unavailable after %lld ms; "
	                "%lld commands, %lld EVALSHA\n",
	        (long long)took, mon.top, mon.evalsha);
	cr_assert_geq(took, 250, "answered before WAIT could time out");
	/* the acquire, its give-back, and the canary's checks */
	cr_assert_geq(mon.evalsha, 2, "want the acquire and its give-back: %s", mon.sample);
	cr_assert_eq(mon.top - mon.evalsha, 1, "WAITs: want the acquire's only (first: %s)",
	             mon.sample);
	lb_expect_free(c, "gb");
	lb_end();
}

/* With the replica: a holder's session ends (its release goes without
 * WAIT) and a waiter of the same broker is granted by it; the grant is
 * confirmed by a WAITed heartbeat and answered, with the replica having
 * it. */
LB_TEST(replicas, a_grant_made_by_a_quiet_release_is_confirmed, 40)
{
	lb_redis *m = lb_redis_start(true), *rep = lb_redis_start(true);
	redisReply *ok = lb_redis_cmd(rep, "REPLICAOF 127.0.0.1 %d", port_of(m));

	cr_assert_eq(ok->type, REDIS_REPLY_STATUS, "REPLICAOF failed");
	for (int64_t end = lb_now_ms() + 10000;;) {
		redisReply *w = lb_redis_cmd(m, "WAIT 1 100");
		if (w->type == REDIS_REPLY_INTEGER && w->integer >= 1)
			break;
		cr_assert_lt(lb_now_ms(), end, "the replica never caught up");
	}
	lb_broker *b = lb_broker_start(m, "--redis-wait-replicas", "1", "--redis-wait-ms", "2000", NULL);
	lb_client *h = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_UNIX);

	lb_must_acquire(h, "qr", 30000);
	json_t *id = lb_acq_send(w, "qr", LB_AO(.wait_ms = 20000, .ttl_ms = 30000));
	lb_wait_waiters(w, "qr", 1, 5000);
	int64_t t0 = lb_now_ms();
	lb_close(h); /* the session's end releases its lease, without WAIT */
	json_t *g = lb_wait_response(w, id, 10000);
	fprintf(stderr, "replicas: granted %lld ms after the holder's session ended\n",
	        (long long)(lb_now_ms() - t0));
	lb_expect_ok(g);
	cr_assert_lt(lb_now_ms() - t0, 3000, "the grant came late");
	for (int64_t end = lb_now_ms() + 5000;;) {
		redisReply *o = lb_redis_cmd(rep, "ZSCORE lb:{qr}:h %s", lb_str(g, "lease"));
		if (o->type == REDIS_REPLY_STRING)
			break;
		cr_assert_lt(lb_now_ms(), end, "the replica does not have the grant");
		lb_sleep_ms(10);
	}
	cr_assert_eq(lb_release(w, lb_str(g, "lease")), 0);
	lb_end();
}
