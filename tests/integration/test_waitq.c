/*
 * test_waitq.c - waiters at their edges: a try behind the session's own
 * pending acquire, a try among a burst held in the broker, detached waiters
 * whose token pointer must outlive a long wait or a Redis that lost it, and
 * the per-session waiter bound counting only acquires that still wait.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static json_t *acq(lb_client *c, const char *id, const char *lock, const char *owner, int wait_ms)
{
	char line[256];

	if (wait_ms >= 0)
		snprintf(line, sizeof(line),
		         "{\"id\":\"%s\",\"op\":\"acquire\",\"lock\":\"%s\",\"owner\":\"%s\",\"wait_ms\":%d}",
		         id, lock, owner, wait_ms);
	else
		snprintf(line, sizeof(line), "{\"id\":\"%s\",\"op\":\"acquire\",\"lock\":\"%s\",\"owner\":\"%s\"}",
		         id, lock, owner);
	cr_assert(lb_send_line(c, line));
	return json_string(id);
}

static json_t *answer(lb_client *c, json_t *id, int ms)
{
	json_t *resp = lb_wait_response(c, id, ms);

	json_decref(id);
	return resp;
}

/* A try (wait_ms 0) of a lock whose acquire by the same session and owner
 * waits in Redis answers at once: busy. (It waited behind that acquire
 * and was answered only when it ended: maybe never.) */
LB_TEST(waitq, a_try_behind_the_sessions_waiting_acquire_answers_now, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *s = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "tb", 30000);
	json_t *w = acq(s, "w", "tb", "", -1), *t;
	int64_t t0;

	lb_wait_waiters(h, "tb", 1, 5000);
	t0 = lb_now_ms();
	t = answer(s, acq(s, "t", "tb", "", 0), 2000);
	cr_assert_not_null(t, "the try was not answered");
	lb_expect_err(t, "timeout");
	cr_assert_lt(lb_now_ms() - t0, 1000);
	/* the waiting one goes on, and gets the lock */
	cr_assert_eq(lb_release(h, lease), 0);
	lb_expect_ok(answer(s, w, 5000));
	lb_end();
}

/* Sent in one write behind an acquire still on its way: the try waits for
 * that acquire's answer only. Granted: the try re-enters (count 2); busy:
 * the try is busy too, at once. */
LB_TEST(waitq, a_try_pipelined_behind_the_sessions_acquire_follows_its_answer, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *s = lb_connect(b, LB_TCP);
	json_t *w, *t;
	const char *lease;

	cr_assert(lb_send_line(s, "{\"id\":\"w\",\"op\":\"acquire\",\"lock\":\"pf\"}\n"
	                          "{\"id\":\"t\",\"op\":\"acquire\",\"lock\":\"pf\",\"wait_ms\":0}"));
	w = answer(s, json_string("w"), 3000);
	t = answer(s, json_string("t"), 3000);
	lb_expect_ok(w);
	lb_expect_ok(t);
	cr_assert_eq(lb_int(t, "count"), 2, "%s", lb_dump(t));
	cr_assert_str_eq(lb_str(t, "lease"), lb_str(w, "lease"));

	lease = lb_must_acquire(h, "pb", 30000);
	cr_assert(lb_send_line(s, "{\"id\":\"w2\",\"op\":\"acquire\",\"lock\":\"pb\"}\n"
	                          "{\"id\":\"t2\",\"op\":\"acquire\",\"lock\":\"pb\",\"wait_ms\":0}"));
	t = answer(s, json_string("t2"), 3000);
	cr_assert_not_null(t, "the try was not answered");
	lb_expect_err(t, "timeout");
	cr_assert_eq(lb_release(h, lease), 0);
	lb_expect_ok(answer(s, json_string("w2"), 5000));
	lb_end();
}

/* Index in the MONITOR stream of the first EVALSHA naming owner. */
static int seen_at(char seen[][32], int n, const char *owner)
{
	for (int k = 0; k < n; k++)
		if (strcmp(seen[k], owner) == 0)
			return k;
	return -1;
}

/* With 4 acquires of a lock on their way, a burst's later acquires wait in
 * the broker; a try does not wait behind them (it answers now and queues
 * nothing). MONITOR shows the order Redis ran them in. */
LB_TEST(waitq, a_try_is_not_held_behind_a_burst, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *s = lb_connect(b, LB_TCP), *t = lb_connect(b, LB_UNIX);
	const char *lease = lb_must_acquire(h, "cap", 30000);
	redisContext *m = lb_redis_conn_new(r);
	redisReply *rep = redisCommand(m, "MONITOR");
	static const char *const owners[] = {"w0", "w1", "w2", "w3", "w4", "w5", "tt"};
	char seen[64][32];
	int n = 0;
	json_t *ids[6], *tid;

	cr_assert_not_null(rep);
	freeReplyObject(rep);
	cr_assert_eq(kill(lb_redis_pid(r), SIGSTOP), 0);
	for (int k = 0; k < 6; k++) {
		char id[16];
		snprintf(id, sizeof(id), "a%d", k);
		ids[k] = acq(s, id, "cap", owners[k], -1);
		lb_sleep_ms(20);
	}
	tid = acq(t, "tt", "cap", "tt", 0);
	lb_sleep_ms(200);
	cr_assert_eq(kill(lb_redis_pid(r), SIGCONT), 0);
	while (n < 64 && (seen_at(seen, n, "tt") < 0 || seen_at(seen, n, "w4") < 0)) {
		void *v = NULL;
		cr_assert_eq(redisGetReply(m, &v), REDIS_OK, "MONITOR: %s", m->errstr);
		rep = v;
		for (size_t k = 0; k < sizeof(owners) / sizeof(owners[0]); k++) {
			char quoted[16];
			snprintf(quoted, sizeof(quoted), "\"%s\"", owners[k]);
			if (rep->type == REDIS_REPLY_STATUS && strstr(rep->str, "\"EVALSHA\"") &&
			    strstr(rep->str, quoted) && seen_at(seen, n, owners[k]) < 0)
				snprintf(seen[n++], sizeof(seen[0]), "%s", owners[k]);
		}
		freeReplyObject(rep);
	}
	redisFree(m);
	cr_assert_lt(seen_at(seen, n, "tt"), seen_at(seen, n, "w4"),
	             "the try ran after the held acquires (at %d, w4 at %d)", seen_at(seen, n, "tt"),
	             seen_at(seen, n, "w4"));
	lb_expect_err(answer(t, tid, 3000), "timeout");
	cr_assert_eq(lb_release(h, lease), 0);
	for (int k = 0; k < 6; k++) {
		json_t *g = lb_wait_response(s, ids[k], 5000);
		lb_expect_ok(g);
		lb_release(s, lb_str(g, "lease"));
		json_decref(ids[k]);
	}
	lb_end();
}

/* A detached acquire granted after a wait stores its token pointer again,
 * for what Redis granted plus the margin: its lease stays releasable by
 * token for its whole life, however long the wait was. */
LB_TEST(waitq, a_detached_grant_after_a_wait_stores_its_pointer_again, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b, LB_TCP), *s = lb_connect(b, LB_TCP), *o = lb_connect(b2, LB_TCP);
	const char *lease = lb_must_acquire(h, "dp", 30000);
	json_t *id, *g;
	char key[128];
	long long pttl;

	id = lb_send_req(s, "{s:s, s:s, s:b, s:i}", "op", "acquire", "lock", "dp", "detach", 1, "ttl_ms",
	                 20000);
	lb_wait_waiters(h, "dp", 1, 5000);
	lb_sleep_ms(2500);
	cr_assert_eq(lb_release(h, lease), 0);
	g = lb_wait_response(s, id, 5000);
	lb_expect_ok(g);
	snprintf(key, sizeof(key), "lb:lease:{%s}", lb_str(g, "lease"));
	pttl = lb_redis_cmd(r, "PTTL %s", key)->integer;
	cr_assert_gt(pttl, 20000 + 60000 - 1500,
	             "the pointer was not stored again at the grant: %lld ms left", pttl);
	/* released by token from another broker */
	cr_assert_eq(lb_release(o, lb_str(g, "lease")), 0);
	lb_expect_free(o, "dp");
	lb_end();
}

/* Redis loses everything (FLUSHALL) while a detached acquire waits: the
 * waiter is queued again with its pointer, so once granted its token
 * works on any broker. */
LB_TEST(waitq, a_detached_waiter_queued_again_stores_its_pointer_again, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(b2, LB_TCP), *s = lb_connect(b, LB_TCP), *o = lb_connect(b2, LB_UNIX);
	json_t *id, *g;

	lb_must_acquire(h, "dq", 30000);
	id = lb_send_req(s, "{s:s, s:s, s:b, s:i}", "op", "acquire", "lock", "dq", "detach", 1, "ttl_ms",
	                 20000);
	lb_wait_waiters(h, "dq", 1, 5000);
	lb_redis_flushall(r);
	g = lb_wait_response(s, id, 8000);
	lb_expect_ok(g);
	cr_assert_eq(lb_release(o, lb_str(g, "lease")), 0, "the token has no pointer after the flush");
	lb_end();
}

/* The bound on pending acquires per session counts acquires that still
 * wait: one cancelled, whose withdraw is still on its way, no longer
 * does. */
LB_TEST(waitq, the_session_waiter_bound_counts_what_still_waits, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-waiters-per-session", "1", NULL);
	lb_client *h = lb_connect(b, LB_TCP), *s = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "nb", 30000);
	json_t *w = acq(s, "w", "nb", "", -1), *c, *t;
	redisContext *sleeper;

	lb_wait_waiters(h, "nb", 1, 5000);
	lb_expect_err(answer(s, acq(s, "x", "nx", "", -1), 2000), "limit_exceeded");
	sleeper = lb_redis_send_async(r, "DEBUG SLEEP 1");
	lb_sleep_ms(50);
	c = lb_call(s, "{s:s, s:s}", "op", "cancel", "target", "w");
	cr_assert(lb_bool(c, "cancelled"));
	t = answer(s, acq(s, "t", "nt", "", 0), 3000);
	lb_redis_async_wait(sleeper, 1);
	lb_expect_ok(t);
	lb_expect_err(answer(s, w, 3000), "cancelled");
	cr_assert_eq(lb_release(h, lease), 0);
	lb_end();
}
