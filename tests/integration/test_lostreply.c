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
 * reach Redis and wait there); every command connection of the brokers is
 * killed when Redis wakes: right after Redis ran what they sent (their
 * replies are lost), or, with before, right before (what they sent is
 * lost unread). */
static void kill_around(lb_redis *r, int sleep_ms, bool before, void (*send)(void *), void *arg)
{
	long long ids[64];
	size_t n = lb_redis_broker_conns(r, ids, 64, false);
	/* Connected before the sleep: a connection accepted after it would be
	 * read one loop turn too late, after the replies went out. */
	redisContext *killer = lb_redis_conn_new(r), *sleeper;

	cr_assert_gt(n, 0, "no broker connection in CLIENT LIST");
	sleeper = lb_redis_send_async(r, "DEBUG SLEEP %.3f", sleep_ms / 1000.0);
	lb_sleep_ms(50);
	/* Redis reads the sockets in the order they became readable. */
	for (size_t k = 0; before && k < n; k++)
		lb_redis_async_also(killer, "CLIENT KILL ID %lld", ids[k]);
	if (before)
		lb_sleep_ms(50);
	send(arg);
	lb_sleep_ms(200); /* the broker wrote the request to Redis */
	for (size_t k = 0; !before && k < n; k++)
		lb_redis_async_also(killer, "CLIENT KILL ID %lld", ids[k]);
	lb_redis_async_wait(sleeper, 1);
	lb_redis_async_wait(killer, (int)n);
}

static void lose_replies(lb_redis *r, int sleep_ms, void (*send)(void *), void *arg)
{
	kill_around(r, sleep_ms, false, send, arg);
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

static json_t *wait_id(lb_client *c, const char *id)
{
	json_t *j = json_string(id), *resp = lb_wait_response(c, j, 15000);

	json_decref(j);
	return resp;
}

/* A release that ran but whose reply was lost answers what happened (it
 * was resent: count 0), not unavailable; the lock is free. */
LB_TEST(lostreply, a_release_whose_reply_was_lost_answers_released, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "rl", 30000);
	char line[256];
	struct send_req q = {a, line};
	json_t *rl;

	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	lose_replies(r, 1000, send_line, &q);
	rl = wait_id(a, "rl");
	lb_expect_ok(rl);
	cr_assert_eq(lb_int(rl, "count"), 0);
	cr_assert_null(lb_next_event(a, 300), "an event after a release");
	lb_expect_ok(lb_acquire_within(o, "rl", 5000, 5000));
	lb_end();
}

/* The same for one level of a lease held twice: it counts once. */
LB_TEST(lostreply, a_reentrant_release_whose_reply_was_lost_counts_once, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "rr", 30000);
	char line[256];
	struct send_req q = {a, line};
	json_t *rl;

	cr_assert_eq(lb_int(lb_try_acquire(a, "rr", 30000), "count"), 2);
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	lose_replies(r, 1000, send_line, &q);
	rl = wait_id(a, "rl");
	lb_expect_ok(rl);
	cr_assert_eq(lb_int(rl, "count"), 1, "released twice: %s", lb_dump(rl));
	lb_expect_err(lb_try_acquire(o, "rr", 1000), "timeout");
	cr_assert_eq(lb_release(a, lease), 0);
	lb_expect_ok(lb_try_acquire(o, "rr", 1000));
	lb_end();
}

/* A re-entry whose reply was lost counts once too. */
LB_TEST(lostreply, a_reentry_whose_reply_was_lost_counts_once, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "re", 30000);
	struct send_req q = {a, "{\"id\":\"re\",\"op\":\"acquire\",\"lock\":\"re\",\"wait_ms\":0}"};
	json_t *g;

	lose_replies(r, 1000, send_line, &q);
	g = wait_id(a, "re");
	lb_expect_ok(g);
	cr_assert_eq(lb_int(g, "count"), 2, "%s", lb_dump(g));
	cr_assert_eq(lb_release(a, lease), 1);
	lb_expect_err(lb_try_acquire(o, "re", 1000), "timeout");
	cr_assert_eq(lb_release(a, lease), 0);
	lb_expect_ok(lb_try_acquire(o, "re", 1000));
	lb_end();
}

/* An extend whose reply was lost is extended (and kept), not unavailable. */
LB_TEST(lostreply, an_extend_whose_reply_was_lost_answers_extended, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *g = lb_call(a, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", "ex", "ttl_ms", 2000,
	                    "wait_ms", 0, "watchdog", 0);
	char line[256];
	struct send_req q = {a, line};
	json_t *e;

	lb_expect_ok(g);
	snprintf(line, sizeof(line), "{\"id\":\"ex\",\"op\":\"extend\",\"lease\":\"%s\",\"ttl_ms\":8000}",
	         lb_str(g, "lease"));
	lose_replies(r, 1000, send_line, &q);
	e = wait_id(a, "ex");
	lb_expect_ok(e);
	cr_assert_gt(lb_int(e, "ttl_ms"), 5000, "%s", lb_dump(e));
	expect_kept(a, o, "ex", 3000);
	lb_end();
}

/* A try whose reply was lost answers what it got: the grant. */
LB_TEST(lostreply, a_try_whose_reply_was_lost_answers_granted, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	struct send_req q = {a, "{\"id\":\"tr\",\"op\":\"acquire\",\"lock\":\"tr\",\"wait_ms\":0,\"ttl_ms\":3000}"};
	json_t *g;

	lose_replies(r, 1000, send_line, &q);
	g = wait_id(a, "tr");
	cr_assert(lb_is_ok(g), "a try that took the lock answered %s", lb_dump(g));
	expect_kept(a, o, "tr", 4000);
	lb_release(a, lb_str(g, "lease"));
	lb_end();
}

/* A cancel whose withdraw never reached Redis (its connection was killed
 * before Redis read it): the withdraw is sent again, so the queue entry
 * does not wait for its heartbeat deadline, and nothing is granted to it. */
LB_TEST(lostreply, a_withdraw_that_never_ran_is_sent_again, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "wd", 30000);
	struct send_req q = {w, "{\"id\":\"cx\",\"op\":\"cancel\",\"target\":\"wa\"}"};
	json_t *c, *a;
	int64_t t0;

	lb_send_line(w, "{\"id\":\"wa\",\"op\":\"acquire\",\"lock\":\"wd\",\"wait_ms\":30000}");
	lb_wait_waiters(h, "wd", 1, 5000);
	kill_around(r, 600, true, send_line, &q);
	c = wait_id(w, "cx");
	cr_assert(lb_bool(c, "cancelled"));
	a = wait_id(w, "wa");
	lb_expect_err(a, "cancelled");
	t0 = lb_now_ms();
	for (;;) {
		json_t *in = lb_call(h, "{s:s, s:s}", "op", "inspect", "lock", "wd");
		if ((lb_is_ok(in) && lb_int(in, "waiters") == 0) || lb_now_ms() - t0 > 4000)
			break;
		lb_sleep_ms(50); /* waiting, or the broker is reconnecting */
	}
	cr_assert_eq(lb_inspect_waiters(h, "wd"), 0, "the queue entry outlived its withdraw");
	cr_assert_lt(lb_now_ms() - t0, 2500, "the entry stayed until its heartbeat deadline");
	cr_assert_eq(lb_release(h, lease), 0);
	lb_expect_free(h, "wd");
	lb_end();
}

/* A heartbeat that granted a waiter and whose reply was lost: the next
 * heartbeat finds the grant ("already") and the waiter gets the lock,
 * which nobody else gets meanwhile. Two brokers, so the grant is made by
 * the waiter's broker's heartbeat (the releaser's broker only wakes it). */
LB_TEST(lostreply, a_heartbeat_whose_reply_was_lost_grants_later, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b1, LB_TCP), *w = lb_connect(b2, LB_TCP), *o = lb_connect(b1, LB_TCP);
	const char *lease = lb_must_acquire(h, "hb", 30000);
	char line[256];
	struct send_req q = {h, line};
	json_t *g;

	lb_send_line(w, "{\"id\":\"wa\",\"op\":\"acquire\",\"lock\":\"hb\",\"ttl_ms\":3000}");
	lb_wait_waiters(h, "hb", 1, 5000);
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	/* The release and the waiter's safety-net heartbeat (every second)
	 * both wait in Redis, then both replies are lost. */
	lose_replies(r, 1600, send_line, &q);
	lb_expect_ok(wait_id(h, "rl"));
	g = wait_id(w, "wa");
	lb_expect_ok(g);
	expect_kept(w, o, "hb", 4000);
	lb_release(w, lb_str(g, "lease"));
	lb_end();
}

/* Redis stalls past the command timeout while a release is on its way:
 * the release runs when Redis resumes, and the answer says so. */
LB_TEST(lostreply, a_release_through_a_stall_answers_released, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "st", 30000);
	json_t *id, *rl;

	cr_assert_eq(kill(lb_redis_pid(r), SIGSTOP), 0);
	id = lb_send_req(a, "{s:s, s:s}", "op", "release", "lease", lease);
	lb_sleep_ms(2500);
	cr_assert_eq(kill(lb_redis_pid(r), SIGCONT), 0);
	rl = lb_wait_response(a, id, 15000);
	cr_assert(lb_is_ok(rl), "the release ran but answered %s", lb_dump(rl));
	cr_assert_eq(lb_int(rl, "count"), 0);
	lb_expect_ok(lb_acquire_within(o, "st", 5000, 5000));
	lb_end();
}

/* A cancel whose withdraw ran but whose reply was lost: answered
 * cancelled, the entry gone, nothing granted to it when the lock frees. */
LB_TEST(lostreply, a_withdraw_whose_reply_was_lost_answers_cancelled, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "wl", 30000);
	struct send_req q = {w, "{\"id\":\"cx\",\"op\":\"cancel\",\"target\":\"wa\"}"};

	lb_send_line(w, "{\"id\":\"wa\",\"op\":\"acquire\",\"lock\":\"wl\",\"wait_ms\":30000}");
	lb_wait_waiters(h, "wl", 1, 5000);
	lose_replies(r, 600, send_line, &q);
	cr_assert(lb_bool(wait_id(w, "cx"), "cancelled"));
	lb_expect_err(wait_id(w, "wa"), "cancelled");
	for (int64_t t0 = lb_now_ms();;) {
		json_t *in = lb_call(h, "{s:s, s:s}", "op", "inspect", "lock", "wl");
		if (lb_is_ok(in)) {
			cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
			break;
		}
		cr_assert_lt(lb_now_ms() - t0, 4000, "%s", lb_dump(in));
		lb_sleep_ms(50);
	}
	cr_assert_eq(lb_release(h, lease), 0);
	lb_expect_free(h, "wl");
	lb_end();
}

/* A detached waiting acquire whose reply (queued) is lost: the test
 * connection x is unblocked by the ZADD that queues the waiter (BZPOPMIN
 * takes the entry), kills the broker's one command connection before the
 * acquire's reply is written, and puts the entry back. */
static void lose_queued_acquire(lb_redis *r, lb_client *d, const char *lock)
{
	long long ids[4];
	size_t n = lb_redis_broker_conns(r, ids, 4, false);
	redisContext *x;
	redisReply *pop = NULL, *rep;
	char line[256];

	cr_assert_eq(n, 1);
	x = lb_redis_conn_new(r);
	lb_redis_async_also(x, "BZPOPMIN lb:{%s}:q 0", lock);
	lb_redis_async_also(x, "CLIENT KILL ID %lld", ids[0]);
	lb_sleep_ms(100);
	snprintf(line, sizeof(line), "{\"id\":\"d\",\"op\":\"acquire\",\"lock\":\"%s\",\"detach\":true,"
	         "\"ttl_ms\":20000,\"wait_ms\":30000}", lock);
	cr_assert(lb_send_line(d, line));
	cr_assert_eq(redisGetReply(x, (void **)&pop), REDIS_OK);
	cr_assert_eq(pop->type, REDIS_REPLY_ARRAY);
	rep = lb_redis_cmd(r, "ZADD lb:{%s}:q %s %s", lock, pop->element[2]->str, pop->element[1]->str);
	cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
	freeReplyObject(pop);
	lb_redis_async_wait(x, 1);
}

/* Then the heartbeat sends it again, its pointer first; a release (sent
 * behind that pointer while Redis sleeps) grants it while its acquire is
 * on its way, and that acquire's "granted already" must not give the
 * detached grant back (it is in no lease table). */
LB_TEST(lostreply, a_detached_grant_is_not_given_back_by_its_resent_acquire, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *h = lb_connect(b, LB_TCP), *d = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "dp", 30000);
	redisContext *sleeper;
	char line[256];
	json_t *t;

	lose_queued_acquire(r, d, "dp");
	lb_sleep_ms(400);
	sleeper = lb_redis_send_async(r, "DEBUG SLEEP 1.2");
	lb_sleep_ms(900); /* the heartbeat (~1 s after the loss) sent the pointer */
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	cr_assert(lb_send_line(h, line));
	lb_redis_async_wait(sleeper, 1);
	lb_expect_ok(wait_id(d, "d"));
	lb_sleep_ms(500);
	t = lb_try_acquire(o, "dp", 1000);
	cr_assert(lb_is_err(t, "timeout"), "detached lease given away while held: %s", lb_dump(t));
	lb_end();
}

/* The release goes before the heartbeat's pointer: the grant comes while
 * the pointer is on its way, and the acquire is answered once. */
LB_TEST(lostreply, a_detached_waiter_granted_during_its_pointer_answers_once, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *h = lb_connect(b, LB_TCP), *d = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "dq", 30000);
	redisContext *sleeper;
	char line[256];
	json_t *again;

	lose_queued_acquire(r, d, "dq");
	lb_sleep_ms(400);
	sleeper = lb_redis_send_async(r, "DEBUG SLEEP 1.2");
	lb_sleep_ms(100);
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	cr_assert(lb_send_line(h, line));
	lb_redis_async_wait(sleeper, 1);
	lb_expect_ok(wait_id(d, "d"));
	again = lb_read_msg(d, 1500);
	cr_assert_null(again, "a second answer to the same acquire: %s", lb_dump(again));
	lb_end();
}

/* A release to count 0 and a fresh acquire of the same lock by the same
 * session, in one write, on a connection killed before Redis read them:
 * the release is sent again, so the acquire is not left waiting behind the
 * session's own lease (the release answered unavailable, its lease stayed
 * in Redis and the acquire queued behind it until its TTL). */
LB_TEST(lostreply, a_release_lost_unread_does_not_strand_the_next_acquire, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *a = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(a, "ra", 30000);
	char line[512];
	struct send_req q = {a, line};
	json_t *rl, *ac;

	snprintf(line, sizeof(line),
	         "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":\"ac\",\"op\":\"acquire\",\"lock\":\"ra\",\"wait_ms\":8000}", lease);
	kill_around(r, 600, true, send_line, &q);
	rl = wait_id(a, "rl");
	lb_expect_ok(rl);
	cr_assert_eq(lb_int(rl, "count"), 0);
	ac = wait_id(a, "ac");
	cr_assert(lb_is_ok(ac), "the fresh acquire: %s", lb_dump(ac));
	cr_assert_str_neq(lb_str(ac, "lease"), lease);
	lb_release(a, lb_str(ac, "lease"));
	lb_end();
}

/* Two releases and a try in one write go as one batch (--pool 1: one
 * connection; lua/batch.lua), and the batch's reply is lost after it ran:
 * each call is handled as its own lost reply would be (issue 29). The
 * releases may be sent again: each answers released, count 0, as alone;
 * the try may not: it holds the lock or leaves it free, never held for
 * nobody. */
LB_TEST(lostreply, a_batch_whose_reply_was_lost_answers_each_call_as_alone, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *a = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *l1 = lb_must_acquire(a, "bl1", 30000), *l2 = lb_must_acquire(a, "bl2", 30000);
	char line[512];
	struct send_req q = {a, line};
	json_t *ans[3];

	snprintf(line, sizeof(line),
	         "{\"id\":1,\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":2,\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":3,\"op\":\"acquire\",\"lock\":\"bl3\",\"wait_ms\":0}",
	         l1, l2);
	lose_replies(r, 1000, send_line, &q);
	for (int k = 0; k < 3; k++) {
		json_t *id = json_integer(k + 1);
		ans[k] = lb_wait_response(a, id, 15000);
		json_decref(id);
		cr_assert_not_null(ans[k], "no answer to request %d", k + 1);
	}
	for (int k = 0; k < 2; k++) {
		cr_assert(lb_is_ok(ans[k]), "a release that ran answered %s", lb_dump(ans[k]));
		cr_assert_eq(lb_int(ans[k], "count"), 0, "%s", lb_dump(ans[k]));
	}
	cr_assert_eq(lb_nholders(lb_inspect(o, "bl1")), 0);
	cr_assert_eq(lb_nholders(lb_inspect(o, "bl2")), 0);
	cr_assert(lb_is_err(lb_call(a, "{s:s, s:s}", "op", "release", "lease", l1), "not_held"));
	if (lb_is_ok(ans[2])) {
		cr_assert_eq(lb_nholders(lb_inspect(o, "bl3")), 1, "a try that answered ok holds it");
		cr_assert_eq(lb_release(a, lb_str(ans[2], "lease")), 0);
	} else {
		int64_t end = lb_now_ms() + 5000;
		while (lb_nholders(lb_inspect(o, "bl3")) != 0 && lb_now_ms() < end)
			lb_sleep_ms(50);
		cr_assert_eq(lb_nholders(lb_inspect(o, "bl3")), 0,
		             "a try that answered %s left the lock held", lb_dump(ans[2]));
	}
	cr_assert_null(lb_next_event(a, 300), "no event was due");
	lb_end();
}
