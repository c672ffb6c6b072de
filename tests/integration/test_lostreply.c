/*
 * test_lostreply.c - a script that ran in Redis whose reply never reached
 * the broker, and a Redis that stalls past the broker's command timeout.
 *
 * The lost reply: Redis is blocked with DEBUG SLEEP, the client's request
 * reaches the broker and is written to Redis, then the broker's command
 * connections are killed with CLIENT KILL from another connection that
 * wrote its command after the broker did. When Redis wakes it runs the
 * broker's script first (its socket became readable first) and then the
 * kill, before it writes any reply: the script's effect stays, its reply is
 * lost, and the broker has to find out what happened.
 *
 * The stall: redis-server gets SIGSTOP for longer than the broker's 2 s
 * command timeout; the broker drops its connections, but the commands they
 * carried still run when Redis resumes.
 *
 * In both cases the broker must never report as held what Redis may give
 * away, and must never answer `unavailable` for a request that took effect.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <string.h>

/* Redis sleeps sleep_ms; send(arg) runs meanwhile (the client's requests
 * reach Redis and wait there); then every command connection of the
 * brokers is killed, right after Redis ran what they sent. */
static void lose_replies(lb_redis *r, int sleep_ms, void (*send)(void *), void *arg)
{
	long long ids[64];
	size_t n = lb_redis_broker_conns(r, ids, 64, false);
	/* Connected before the sleep: a connection accepted after it would be
	 * read one loop turn too late, after the replies went out. */
	redisContext *killer = lb_redis_conn_new(r), *sleeper;

	cr_assert_gt(n, 0, "no broker connection in CLIENT LIST");
	sleeper = lb_redis_send_async(r, "DEBUG SLEEP %.3f", sleep_ms / 1000.0);
	lb_sleep_ms(50);
	send(arg);
	lb_sleep_ms(200); /* the broker wrote the request to Redis */
	for (size_t k = 0; k < n; k++)
		lb_redis_async_also(killer, "CLIENT KILL ID %lld", ids[k]);
	lb_redis_async_wait(sleeper, 1);
	lb_redis_async_wait(killer, (int)n);
}

struct send_req {
	lb_client *c;
	const char *line;
};

static void send_line(void *arg)
{
	struct send_req *q = arg;

	cr_assert(lb_send_line(q->c, q->line));
}

/* The holder of lock keeps it: a try from `other` fails, inspect lists one
 * holder, and `holder` hears no event, for ms. */
static void expect_kept(lb_client *holder, lb_client *other, const char *lock, int ms)
{
	int64_t end = lb_now_ms() + ms;

	while (lb_now_ms() < end) {
		json_t *t = lb_try_acquire(other, lock, 1000);
		json_t *ev;
		if (lb_is_err(t, "unavailable")) {
			lb_sleep_ms(100); /* the broker is reconnecting */
			continue;
		}
		cr_assert(lb_is_err(t, "timeout"), "the lock was given away while held: %s", lb_dump(t));
		cr_assert_eq(lb_nholders(lb_inspect(other, lock)), 1);
		ev = lb_next_event(holder, 300);
		cr_assert_null(ev, "unexpected event: %s", lb_dump(ev));
	}
}

static json_t *find_lease(lb_client *c, const char *token)
{
	json_t *ls = lb_call(c, "{s:s}", "op", "leases");
	json_t *arr = lb_get(ls, "leases");
	size_t k;
	json_t *v;

	json_array_foreach(arr, k, v) {
		if (strcmp(lb_str(v, "lease"), token) == 0)
			return v;
	}
	return NULL;
}

/* A grant that Redis replays after a lost reply is shorter than ttl_ms;
 * with max_hold_ms it must still be renewed (it was taken for the max-hold
 * cap, never renewed, and given to another session after its TTL). */
LB_TEST(lostreply, a_replayed_grant_with_max_hold_is_renewed, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	struct send_req q = {a, "{\"id\":1,\"op\":\"acquire\",\"lock\":\"mh\",\"ttl_ms\":3000,"
	                        "\"max_hold_ms\":60000}"};
	json_t *g, *id = json_integer(1);
	const char *lease;

	lose_replies(r, 1000, send_line, &q);
	g = lb_wait_response(a, id, 10000);
	json_decref(id);
	lb_expect_ok(g);
	cr_assert_lt(lb_int(g, "ttl_ms"), 3000, "not a replayed grant (the reply was not lost): %s",
	             lb_dump(g));
	lease = lb_str(g, "lease");
	expect_kept(a, o, "mh", 6000);
	cr_assert_not_null(find_lease(a, lease), "leases no longer lists the lease");
	lb_release(a, lease);
	lb_end();
}

/* The same after a stall past the command timeout, no connection killed. */
LB_TEST(lostreply, a_grant_after_a_stall_with_max_hold_is_renewed, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *id, *g;
	const char *lease;

	cr_assert_eq(kill(lb_redis_pid(r), SIGSTOP), 0);
	id = lb_send_req(a, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "mh", "ttl_ms", 3000,
	                 "max_hold_ms", 60000);
	lb_sleep_ms(2500);
	cr_assert_eq(kill(lb_redis_pid(r), SIGCONT), 0);
	g = lb_wait_response(a, id, 10000);
	lb_expect_ok(g);
	lease = lb_str(g, "lease");
	expect_kept(a, o, "mh", 6000);
	cr_assert_not_null(find_lease(a, lease), "leases no longer lists the lease");
	lb_release(a, lease);
	lb_end();
}

/* An extend that overlaps a renewal (both in flight while Redis is
 * stopped, answered in order): the lease is still renewed afterwards. */
LB_TEST(lostreply, an_extend_overlapping_a_renewal_keeps_the_renewals, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *g, *id, *e;
	const char *lease;

	g = lb_call(a, "{s:s, s:s, s:i, s:i, s:i}", "op", "acquire", "lock", "ov", "ttl_ms", 1500,
	            "max_hold_ms", 60000, "wait_ms", 0);
	lb_expect_ok(g);
	lease = lb_str(g, "lease");
	lb_sleep_ms(400);
	cr_assert_eq(kill(lb_redis_pid(r), SIGSTOP), 0);
	lb_sleep_ms(300); /* the renewal due at 500 ms is on its way */
	id = lb_send_req(a, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 3000);
	lb_sleep_ms(600);
	cr_assert_eq(kill(lb_redis_pid(r), SIGCONT), 0);
	e = lb_wait_response(a, id, 10000);
	lb_expect_ok(e);
	cr_assert_leq(lb_int(e, "ttl_ms"), 3000);
	expect_kept(a, o, "ov", 5000);
	lb_release(a, lease);
	lb_end();
}
