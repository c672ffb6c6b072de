/*
 * test_redlock_election.c - leader election under --redlock (issue 27,
 * point 1): the leader's value is written with its grant on every master
 * that grants, a proclaim reaches a quorum and keeps the term, inspect
 * shows the value a quorum agrees on, and a master restarted empty gets
 * the lease back from the next renewal with its value.
 */
#include "tests/redlock/rl.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define TTL_MS 3000

static json_t *campaign(lb_client *c, const char *lock, const char *value)
{
	return lb_call(c, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock, "value", value,
	               "wait_ms", 0, "ttl_ms", TTL_MS);
}

static json_t *proclaim(lb_client *c, const char *lease, const char *value)
{
	return lb_call_timeout(c, 15000, "{s:s, s:s, s:s}", "op", "proclaim", "lease", lease, "value",
	                       value);
}

static const char *shown_value(lb_client *c, const char *lock)
{
	json_t *in = lb_inspect(c, lock);
	json_t *h = json_array_get(lb_get(in, "holders"), 0);
	json_t *v = h ? json_object_get(h, "value") : NULL;

	cr_assert(json_is_string(v), "no value shown: %s", lb_dump(in));
	return json_string_value(v);
}

/* Polls master r's header until its value field is want ('=' V). */
static bool master_shows(lb_redis *r, const char *name, const char *want, int timeout_ms)
{
	for (int64_t end = lb_now_ms() + timeout_ms; lb_now_ms() < end; lb_sleep_ms(50)) {
		const char *v = rl_header(r, name, "V");
		if (v && strcmp(v, want) == 0)
			return true;
	}
	return false;
}

RL_TEST(redlock_election, the_value_is_on_every_master_and_a_proclaim_keeps_the_term, 40)
{
	lb_redis *m[3];
	const char *name = "rl-lead";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(a, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *g = campaign(c, name, "10.1.0.1:9000"), *p;

	lb_expect_ok(g);
	for (int i = 0; i < 3; i++)
		cr_assert(master_shows(m[i], name, "=10.1.0.1:9000", 2000), "master %d has no value", i);
	cr_assert_str_eq(shown_value(o, name), "10.1.0.1:9000");

	p = proclaim(c, lb_str(g, "lease"), "10.1.0.2:9000");
	lb_expect_ok(p);
	cr_assert_eq(lb_int(p, "fence"), lb_int(g, "fence"), "%s", lb_dump(p));
	for (int i = 0; i < 3; i++)
		cr_assert(master_shows(m[i], name, "=10.1.0.2:9000", 2000), "master %d missed it", i);
	cr_assert_str_eq(shown_value(o, name), "10.1.0.2:9000");
	cr_assert_eq(lb_int(lb_inspect(o, name), "fence"), lb_int(g, "fence"));

	/* Not the holder: not_held. */
	cr_assert_eq(lb_release(c, lb_str(g, "lease")), 0);
	lb_expect_err(proclaim(c, lb_str(g, "lease"), "late"), "not_held");
	lb_end();
}

/* One master of three stalled: a proclaim is answered by the other two,
 * and inspect shows the value they agree on, not the stalled master's
 * old one. Then that master restarts empty: the next renewal holds the
 * lease there again, with the value it has now. */
RL_TEST(redlock_election, a_minority_down_proclaims_and_a_master_restarted_empty_gets_the_value_back,
        60)
{
	lb_redis *m[3];
	const char *name = "rl-lead2";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(a, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *g = campaign(c, name, "v1");

	lb_expect_ok(g);
	cr_assert(master_shows(m[2], name, "=v1", 2000));
	cr_assert_eq(kill(lb_redis_pid(m[2]), SIGSTOP), 0);
	lb_expect_ok(proclaim(c, lb_str(g, "lease"), "v2"));
	cr_assert_str_eq(shown_value(o, name), "v2");
	cr_assert_eq(kill(lb_redis_pid(m[2]), SIGCONT), 0);
	/* Its queued copy runs once it wakes: every master agrees again. */
	cr_assert(master_shows(m[2], name, "=v2", 5000), "the stalled master never got the value");

	lb_redis_restart(m[2]); /* empty */
	cr_assert(master_shows(m[2], name, "=v2", 3 * TTL_MS),
	          "the renewal did not hold the lease again with its value");
	cr_assert_not_null(rl_header(m[2], name, "f"), "the master restarted empty has no fence");
	lb_expect_silent(c, 200, "the leader");
	cr_assert_str_eq(shown_value(o, name), "v2");
	lb_end();
}

/* A watch under --redlock (issue 27, point 2): the changes reach it from
 * the masters (on the channel every Redlock broker hears), each within a
 * second; with one master of three down it still hears them. */
RL_TEST(redlock_election, a_watch_hears_grants_and_releases_with_a_master_down, 60)
{
	lb_redis *m[3];
	const char *name = "rl-watched";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(a, LB_TCP), *h = lb_connect(b, LB_TCP);
	json_t *w = lb_call(c, "{s:s, s:s}", "op", "watch", "lock", name);

	lb_expect_ok(w);
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			lb_redis_stop(m[2]);
		json_t *g = campaign(h, name, round ? "second" : "first");
		lb_expect_ok(g);
		json_t *ev;
		do {
			ev = lb_next_event(c, 1500);
			cr_assert_not_null(ev, "no `changed` for the grant (round %d)", round);
		} while (strcmp(lb_str(ev, "state"), "exclusive") != 0);
		cr_assert_eq(lb_int(ev, "fence"), lb_int(g, "fence"), "%s", lb_dump(ev));
		cr_assert_str_eq(lb_str(json_array_get(lb_get(ev, "holders"), 0), "value"),
		                 round ? "second" : "first");
		cr_assert_eq(lb_release(h, lb_str(g, "lease")), 0);
		do {
			ev = lb_next_event(c, 1500);
			cr_assert_not_null(ev, "no `changed` for the release (round %d)", round);
		} while (strcmp(lb_str(ev, "state"), "free") != 0);
	}
	lb_end();
}

/* Lock-delay under --redlock (issue 27, point 3): the holder's session
 * ends; every master holds the lock back, and a waiter on another broker
 * is granted when the delay ends there (its rounds look again then), not
 * before; inspect shows "delayed" meanwhile. */
RL_TEST(redlock_election, a_lock_delay_holds_on_the_masters, 40)
{
	lb_redis *m[3];
	const char *name = "rl-delayed";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *h = lb_connect(a, LB_TCP), *w = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	json_t *g = lb_call(h, "{s:s, s:s, s:i, s:i, s:i}", "op", "acquire", "lock", name, "ttl_ms", TTL_MS,
	                    "wait_ms", 0, "lock_delay_ms", 1500);

	lb_expect_ok(g);
	json_t *id = lb_send_req(w, "{s:s, s:s, s:i}", "op", "acquire", "lock", name, "ttl_ms", TTL_MS);
	lb_sleep_ms(200);
	int64_t t0 = lb_now_ms();
	lb_close(h);
	lb_sleep_ms(300);
	json_t *in = lb_inspect(o, name);
	cr_assert_str_eq(lb_str(in, "state"), "delayed", "%s", lb_dump(in));
	for (int i = 0; i < 3; i++)
		cr_assert_not_null(rl_header(m[i], name, "dl"), "master %d does not hold it back", i);
	json_t *gw = lb_wait_response(w, id, 8000);
	int64_t took = lb_now_ms() - t0;
	lb_expect_ok(gw);
	fprintf(stderr, "redlock_election: a waiter granted %lld ms after the holder's session ended "
	                "(lock_delay_ms 1500)\n", (long long)took);
	cr_assert_geq(took, 1400);
	cr_assert_lt(took, 1500 + 2000);
	cr_assert_gt(lb_int(gw, "fence"), lb_int(g, "fence"));
	lb_end();
}

/* acquire_all under --redlock (issue 27, point 4): each lock a Redlock
 * round; all or nothing; a busy one gives back the one taken. */
RL_TEST(redlock_election, acquire_all_takes_every_lock_or_none, 40)
{
	lb_redis *m[3];

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *x = lb_connect(a, LB_TCP), *y = lb_connect(b, LB_TCP);
	json_t *g = lb_call(x, "{s:s, s:[{s:s},{s:s}], s:i, s:i}", "op", "acquire_all", "locks", "lock",
	                    "rl-all-b", "lock", "rl-all-a", "wait_ms", 0, "ttl_ms", TTL_MS);

	lb_expect_ok(g);
	cr_assert_str_eq(lb_str(json_array_get(lb_get(g, "leases"), 0), "lock"), "rl-all-b");
	json_t *t = lb_call(y, "{s:s, s:[{s:s},{s:s}], s:i, s:i}", "op", "acquire_all", "locks", "lock",
	                    "rl-all-0", "lock", "rl-all-a", "wait_ms", 300, "ttl_ms", TTL_MS);
	lb_expect_err(t, "timeout");
	rl_wait_no_holder(m, 3, "rl-all-0", 2000);
	lb_expect_err(lb_call(y, "{s:s, s:[{s:s,s:s}]}", "op", "acquire_all", "locks", "lock", "rl-sh",
	                      "mode", "shared"),
	              "invalid_argument");
	lb_end();
}

/* A majority of the masters stalls under a leader (issue 27): the leader
 * hears `lost` (redis_unavailable) within its TTL, before a new leader
 * could be elected; once they are back a candidate on another broker
 * leads in a higher term, and the watcher (on a third session) ends up
 * shown the new leader. */
RL_TEST(redlock_election, a_majority_down_under_a_leader, 60)
{
	lb_redis *m[3];
	const char *name = "rl-majority";

	rl_masters_start(m, 3);
	lb_broker *a = lb_broker_start_redlock(m, 3, NULL), *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *l = lb_connect(a, LB_TCP), *c = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_TCP);
	json_t *g = lb_call(l, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", name, "value", "old",
	                    "wait_ms", 0, "ttl_ms", 2000);

	lb_expect_ok(g);
	json_t *wa = lb_call(w, "{s:s, s:s}", "op", "watch", "lock", name);
	lb_expect_ok(wa);
	int64_t t0 = lb_now_ms();
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kill(lb_redis_pid(m[i]), SIGSTOP), 0);
	json_t *ev = lb_next_event(l, 4000);
	int64_t took = lb_now_ms() - t0;
	cr_assert_not_null(ev, "the leader was not told with a majority down");
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "redis_unavailable", "%s", lb_dump(ev));
	cr_assert_leq(took, 2000, "told %lld ms after the stall, past the TTL", (long long)took);
	lb_expect_err(lb_call_timeout(l, 40000, "{s:s, s:s, s:s}", "op", "proclaim", "lease",
	                              lb_str(g, "lease"), "value", "x"),
	              "not_held");
	for (int i = 0; i < 2; i++)
		kill(lb_redis_pid(m[i]), SIGCONT);

	json_t *g2 = NULL;
	for (int64_t end = lb_now_ms() + 10000; !g2 || !lb_is_ok(g2); lb_sleep_ms(100)) {
		cr_assert_lt(lb_now_ms(), end, "no new leader: %s", g2 ? lb_dump(g2) : "-");
		g2 = campaign(c, name, "new");
	}
	cr_assert_gt(lb_int(g2, "fence"), lb_int(g, "fence"));
	bool shown = false;
	for (int64_t end = lb_now_ms() + 5000; !shown && lb_now_ms() < end;) {
		json_t *e = lb_next_event(w, 500);
		if (!e)
			continue;
		json_t *h = json_array_get(lb_get(e, "holders"), 0);
		shown = h && json_is_string(json_object_get(h, "value")) && strcmp(lb_str(h, "value"), "new") == 0 &&
		        lb_int(e, "fence") == lb_int(g2, "fence");
	}
	cr_assert(shown, "the watcher was not shown the new leader");
	lb_end();
}
