/*
 * Watching a lock on one Redis (issue 27, point 2): `watch` answers the
 * lock's state, then `changed` events follow its history: grants,
 * releases, re-entries, proclaims made through any broker, and expiries
 * in Redis when the holder's broker is dead; fences never go down; the
 * last event shows the current state; after Redis lost data each watch
 * gets one fresh event; `unwatch`, the session's end and the limit.
 */
#include "tests/integration/harness.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static json_t *watch(lb_client *c, const char *lock)
{
	json_t *w = lb_call(c, "{s:s, s:s}", "op", "watch", "lock", lock);

	lb_expect_ok(w);
	cr_assert(json_is_string(json_object_get(w, "watch")), "%s", lb_dump(w));
	return w;
}

/* The next `changed` event of watch id within timeout_ms (other events are
 * a failure); NULL when none came. */
static json_t *next_change(lb_client *c, const char *id, int timeout_ms)
{
	json_t *ev = lb_next_event(c, timeout_ms);

	if (!ev)
		return NULL;
	cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "watch"), id, "%s", lb_dump(ev));
	cr_assert_null(json_object_get(ev, "id"), "events have no id: %s", lb_dump(ev));
	return ev;
}

/* Events until one shows state (and, when holder_count > 0, that count
 * on its first holder); fails after timeout_ms. Fences never go down. */
static json_t *until_state(lb_client *c, const char *id, const char *state, int holder_count,
                           int timeout_ms, int64_t *fence)
{
	for (int64_t end = lb_now_ms() + timeout_ms;;) {
		int64_t left = end - lb_now_ms();
		json_t *ev = left > 0 ? next_change(c, id, (int)left) : NULL;
		cr_assert_not_null(ev, "no `changed` to %s within %d ms", state, timeout_ms);
		json_t *f = json_object_get(ev, "fence");
		if (json_is_integer(f)) {
			cr_assert_geq(json_integer_value(f), *fence, "the fence went down: %s", lb_dump(ev));
			*fence = json_integer_value(f);
		}
		if (strcmp(lb_str(ev, "state"), state) != 0)
			continue;
		if (holder_count > 0 &&
		    lb_int(json_array_get(lb_get(ev, "holders"), 0), "count") != holder_count)
			continue;
		return ev;
	}
}

LB_TEST(watch, the_answer_shows_the_state_and_hello_says_so, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP), *h = lb_connect(b, LB_UNIX);
	json_t *hello = lb_call(c, "{s:s}", "op", "hello");
	json_t *f = lb_get(hello, "features");
	bool listed = false;

	for (size_t k = 0; k < json_array_size(f); k++)
		listed |= strcmp(json_string_value(json_array_get(f, k)), "watch") == 0;
	cr_assert(listed, "%s", lb_dump(hello));
	cr_assert_eq(lb_int(hello, "limits.max_watches_per_session"), 1000, "%s", lb_dump(hello));

	json_t *w = watch(c, "free-one");
	cr_assert_str_eq(lb_str(w, "state"), "free");
	cr_assert_str_eq(lb_str(w, "lock"), "free-one");
	cr_assert_eq(json_array_size(lb_get(w, "holders")), 0);
	cr_assert(json_is_null(json_object_get(w, "fence")), "%s", lb_dump(w));

	json_t *g = lb_call(h, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", "held-one", "value", "me",
	                    "wait_ms", 0);
	lb_expect_ok(g);
	w = watch(c, "held-one");
	cr_assert_str_eq(lb_str(w, "state"), "exclusive");
	cr_assert_eq(lb_int(w, "fence"), lb_int(g, "fence"));
	cr_assert_str_eq(lb_str(json_array_get(lb_get(w, "holders"), 0), "value"), "me");
	lb_end();
}

/* Every kind of change made through another broker reaches the watcher,
 * each within a second (notified, not polled: each comes well before the
 * once-a-second safety net would have read it), in the order of the
 * lock's history. */
LB_TEST(watch, changes_through_another_broker_arrive_in_order, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b1, LB_TCP), *h = lb_connect(b2, LB_TCP), *k = lb_connect(b2, LB_TCP);
	json_t *w = watch(c, "hist");
	const char *id = lb_str(w, "watch");
	int64_t fence = 0, t0, slowest = 0;
	json_t *ev, *g;

	lb_sleep_ms(300);
	t0 = lb_now_ms();
	g = lb_call(h, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", "hist", "value", "a", "wait_ms", 0);
	lb_expect_ok(g);
	ev = until_state(c, id, "exclusive", 1, 1000, &fence);
	slowest = lb_now_ms() - t0;
	cr_assert_eq(lb_int(ev, "fence"), lb_int(g, "fence"));

	lb_sleep_ms(300);
	t0 = lb_now_ms();
	cr_assert_eq(lb_int(lb_call(h, "{s:s, s:s, s:i}", "op", "acquire", "lock", "hist", "wait_ms", 0),
	                    "count"),
	             2);
	until_state(c, id, "exclusive", 2, 1000, &fence);
	slowest = lb_now_ms() - t0 > slowest ? lb_now_ms() - t0 : slowest;

	lb_sleep_ms(300);
	t0 = lb_now_ms();
	lb_expect_ok(lb_call(h, "{s:s, s:s, s:s}", "op", "proclaim", "lease", lb_str(g, "lease"), "value",
	                     "b"));
	for (;;) {
		ev = next_change(c, id, 1000);
		cr_assert_not_null(ev, "no `changed` after the proclaim");
		if (strcmp(lb_str(json_array_get(lb_get(ev, "holders"), 0), "value"), "b") == 0)
			break;
	}
	slowest = lb_now_ms() - t0 > slowest ? lb_now_ms() - t0 : slowest;
	cr_assert_eq(lb_int(ev, "fence"), lb_int(g, "fence"), "a proclaim is no new term");

	/* Released while another waits: its grant is a new term. */
	json_t *kid = lb_send_req(k, "{s:s, s:s, s:i}", "op", "acquire", "lock", "hist", "ttl_ms", 30000);
	lb_sleep_ms(300);
	t0 = lb_now_ms();
	lb_release(h, lb_str(g, "lease"));
	lb_release(h, lb_str(g, "lease"));
	json_t *gk = lb_wait_response(k, kid, 5000);
	lb_expect_ok(gk);
	do /* the first release (count 2 -> 1) may come as an event of its own */
		ev = until_state(c, id, "exclusive", 1, 1000, &fence);
	while (lb_int(ev, "fence") != lb_int(gk, "fence"));
	slowest = lb_now_ms() - t0 > slowest ? lb_now_ms() - t0 : slowest;
	cr_assert_eq(lb_int(ev, "waiters"), 0, "%s", lb_dump(ev));
	cr_assert_gt(lb_int(gk, "fence"), lb_int(g, "fence"));

	lb_sleep_ms(300);
	t0 = lb_now_ms();
	lb_release(k, lb_str(gk, "lease"));
	until_state(c, id, "free", 0, 1000, &fence);
	slowest = lb_now_ms() - t0 > slowest ? lb_now_ms() - t0 : slowest;
	fprintf(stderr, "watch: 5 changes through another broker, the slowest seen %lld ms after it\n",
	        (long long)slowest);
	cr_assert_lt(slowest, 800, "a change took %lld ms: polled, not notified?", (long long)slowest);
	/* Nothing more happens: nothing more is said. */
	cr_assert_null(lb_next_event(c, 1500), "an event for no change");
	lb_end();
}

/* The holder's broker dies (SIGKILL): nobody runs a script when its lease
 * runs out in Redis, yet the watcher hears of it within a second. */
LB_TEST(watch, an_expiry_with_the_holders_broker_dead_arrives_within_a_second, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b1, LB_TCP), *h = lb_connect(b2, LB_TCP);
	json_t *g = lb_call(h, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "doomed", "ttl_ms", 1500,
	                    "wait_ms", 0);
	int64_t fence = 0;

	lb_expect_ok(g);
	json_t *w = watch(c, "doomed");
	cr_assert_str_eq(lb_str(w, "state"), "exclusive");
	int64_t t0 = lb_now_ms();
	lb_broker_kill9(b2);
	json_t *ev = until_state(c, lb_str(w, "watch"), "free", 0, 1500 + 1000 + 500, &fence);
	int64_t took = lb_now_ms() - t0;
	fprintf(stderr, "watch: a dead holder's lease (ttl 1500 ms) seen free %lld ms after the kill\n",
	        (long long)took);
	cr_assert_eq(json_array_size(lb_get(ev, "holders")), 0);
	cr_assert_eq(lb_int(ev, "fence"), lb_int(g, "fence"), "the last fence is still shown");
	lb_end();
}

/* After Redis lost data (a restart, empty), each watch gets one `changed`
 * read afresh, even when the lock looks the same. */
LB_TEST(watch, a_data_loss_gives_each_watch_one_fresh_event, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *w1 = watch(c, "calm-1"), *w2 = watch(c, "calm-2");
	const char *id1 = lb_str(w1, "watch"), *id2 = lb_str(w2, "watch");
	bool got1 = false, got2 = false;

	cr_assert_str_neq(id1, id2);
	lb_redis_flushall(r);
	for (int k = 0; k < 2; k++) {
		json_t *ev = lb_next_event(c, 3000);
		cr_assert_not_null(ev, "no fresh event after the flush");
		cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
		cr_assert_str_eq(lb_str(ev, "state"), "free", "%s", lb_dump(ev));
		got1 |= strcmp(lb_str(ev, "watch"), id1) == 0;
		got2 |= strcmp(lb_str(ev, "watch"), id2) == 0;
	}
	cr_assert(got1 && got2, "each watch gets one");
	cr_assert_null(lb_next_event(c, 1500), "more than one fresh event");
	lb_end();
}

/* unwatch, the errors, the session's end, the limit. */
LB_TEST(watch, unwatch_limits_and_bad_input, 40)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-watches-per-session", "2", NULL);
	lb_client *c = lb_connect(b, LB_TCP), *h = lb_connect(b, LB_TCP);
	json_t *w = watch(c, "u1");
	redisReply *mark;

	watch(c, "u2");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "watch", "lock", "u3"), "limit_exceeded");
	lb_expect_err(lb_call(c, "{s:s}", "op", "watch"), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "watch", "lock", ""), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:i}", "op", "watch", "lock", 5), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s}", "op", "unwatch"), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "unwatch", "watch", "w-unknown"), "not_held");
	/* Another session's watch is not this one's. */
	lb_expect_err(lb_call(h, "{s:s, s:s}", "op", "unwatch", "watch", lb_str(w, "watch")), "not_held");

	mark = lb_redis_cmd(r, "HGET lb:{u1} W");
	cr_assert_eq(mark->type, REDIS_REPLY_STRING, "no watcher's mark in Redis");
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "unwatch", "watch", lb_str(w, "watch")));
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "unwatch", "watch", lb_str(w, "watch")), "not_held");
	/* Its mark goes; the lock's fast path is back (a solo holder). */
	for (int64_t end = lb_now_ms() + 3000; lb_now_ms() < end; lb_sleep_ms(50)) {
		mark = lb_redis_cmd(r, "HGET lb:{u1} W");
		if (mark->type == REDIS_REPLY_NIL)
			break;
	}
	cr_assert_eq(mark->type, REDIS_REPLY_NIL, "the mark stayed after unwatch");
	const char *lease = lb_must_acquire(h, "u1", 30000);
	mark = lb_redis_cmd(r, "HGET lb:{u1} o");
	cr_assert(mark->type == REDIS_REPLY_STRING && strcmp(mark->str, lease) == 0,
	          "an unwatched lock has its solo holder again");
	cr_assert_null(lb_next_event(c, 500), "an event after unwatch");
	watch(c, "u3"); /* room again */

	/* The session ends: its watches with it (the broker stops reading). */
	lb_close(c);
	for (int64_t end = lb_now_ms() + 5000; lb_now_ms() < end; lb_sleep_ms(100)) {
		mark = lb_redis_cmd(r, "HGET lb:{u2} W");
		if (mark->type == REDIS_REPLY_NIL)
			break;
	}
	cr_assert_eq(mark->type, REDIS_REPLY_NIL, "a closed session's watch still marks the lock");
	lb_end();
}

/* A watched lock's ops take the full path, which tells the watchers: the
 * holders' keys, not the header alone; mutual exclusion holds. */
LB_TEST(watch, a_watched_lock_still_serves_its_holders, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP), *h = lb_connect(b, LB_TCP), *o = lb_connect(b, LB_TCP);
	const char *lease = lb_must_acquire(h, "ws", 30000);
	int64_t fence = 0;

	json_t *w = watch(c, "ws");
	redisReply *solo = lb_redis_cmd(r, "HGET lb:{ws} o");
	cr_assert_eq(solo->type, REDIS_REPLY_NIL, "a watched lock kept a solo holder");
	lb_expect_err(lb_try_acquire(o, "ws", 30000), "timeout");
	cr_assert_eq(lb_release(h, lease), 0);
	until_state(c, lb_str(w, "watch"), "free", 0, 1000, &fence);
	json_t *g = lb_try_acquire(o, "ws", 30000);
	lb_expect_ok(g);
	solo = lb_redis_cmd(r, "HGET lb:{ws} o");
	cr_assert_eq(solo->type, REDIS_REPLY_NIL, "a grant on a watched lock took the fast path");
	until_state(c, lb_str(w, "watch"), "exclusive", 1, 1000, &fence);
	cr_assert_eq(fence, lb_int(g, "fence"));
	lb_end();
}

/* The watcher fuzz (issue 27): random grants, releases, re-entries,
 * proclaims, expiries (short TTLs left to run out) and data losses
 * (FLUSHALL) made through three brokers on two locks, while a watcher on
 * each broker watches both: every watcher's fences never go down, and its
 * last event shows the lock's state as inspect reads it once things
 * settle. */
static json_t *settled(const json_t *st)
{
	json_t *o = json_pack("{s:O, s:O}", "state", json_object_get(st, "state"), "fence",
	                      json_object_get(st, "fence"));
	json_t *hs = json_array();
	size_t k;
	json_t *h;

	json_array_foreach(json_object_get(st, "holders"), k, h) {
		json_t *c = json_deep_copy(h);
		json_object_del(c, "ttl_ms");
		json_array_append_new(hs, c);
	}
	json_object_set_new(o, "holders", hs);
	return o;
}

LB_TEST(watch, a_fuzz_of_changes_through_three_brokers_keeps_every_watcher_true, 90)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b[3] = {lb_broker_start(r, NULL), lb_broker_start(r, NULL), lb_broker_start(r, NULL)};
	lb_client *w[3], *c[6];
	const char *locks[2] = {"wf-a", "wf-b"};
	json_t *last[3][2], *held[6] = {0};
	const char *wid[3][2];
	int64_t fence[3][2] = {{0}};
	unsigned seed = 7;
	long ops = 0, events = 0, flushes = 0;

	for (int i = 0; i < 3; i++) {
		w[i] = lb_connect(b[i], LB_TCP);
		for (int l = 0; l < 2; l++) {
			json_t *a = lb_call(w[i], "{s:s, s:s}", "op", "watch", "lock", locks[l]);
			lb_expect_ok(a);
			wid[i][l] = lb_str(a, "watch");
			last[i][l] = a;
		}
	}
	for (int k = 0; k < 6; k++)
		c[k] = lb_connect(b[k % 3], LB_TCP);
	for (int64_t end = lb_now_ms() + 10000; lb_now_ms() < end;) {
		int k = (int)(rand_r(&seed) % 6), l = (int)(rand_r(&seed) % 2), op = (int)(rand_r(&seed) % 100);
		ops++;
		if (op < 2) {
			lb_redis_flushall(r);
			flushes++;
			for (int j = 0; j < 6; j++)
				held[j] = NULL; /* lost (gone) soon: forget them */
		} else if (!held[k] && op < 60) {
			json_t *g = lb_call(c[k], "{s:s, s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", locks[l],
			                    "value", op % 2 ? "odd" : "even", "wait_ms", 0, "ttl_ms",
			                    op < 20 ? 300 : 30000, "watchdog", op >= 20);
			if (lb_is_ok(g))
				held[k] = g;
		} else if (held[k] && op < 70) {
			lb_call(c[k], "{s:s, s:s, s:s}", "op", "proclaim", "lease", lb_str(held[k], "lease"),
			        "value", op % 2 ? "p-odd" : "p-even");
		} else if (held[k] && op < 78) {
			lb_call(c[k], "{s:s, s:s, s:i}", "op", "acquire", "lock", lb_str(held[k], "lock"), "wait_ms",
			        0);
		} else if (held[k]) {
			json_t *rl = lb_call(c[k], "{s:s, s:s}", "op", "release", "lease", lb_str(held[k], "lease"));
			if (!lb_is_ok(rl) || lb_int(rl, "count") == 0)
				held[k] = NULL;
		}
		lb_sleep_ms(rand_r(&seed) % 15);
		/* read what arrived, checking each stream's fences */
		for (int i = 0; i < 3; i++) {
			json_t *ev;
			while ((ev = lb_next_event(w[i], 0)) != NULL) {
				if (strcmp(lb_str(ev, "event"), "lost") == 0)
					continue;
				cr_assert_str_eq(lb_str(ev, "event"), "changed", "%s", lb_dump(ev));
				int l2 = strcmp(lb_str(ev, "watch"), wid[i][0]) == 0 ? 0 : 1;
				json_t *f = json_object_get(ev, "fence");
				if (json_is_integer(f)) {
					cr_assert_geq(json_integer_value(f), fence[i][l2], "watcher %d: the fence went down: %s", i,
					              lb_dump(ev));
					fence[i][l2] = json_integer_value(f);
				}
				last[i][l2] = ev;
				events++;
			}
		}
	}
	/* settle: every lease still held stays; expiries and losses land */
	lb_sleep_ms(2500);
	for (int i = 0; i < 3; i++) {
		json_t *ev;
		while ((ev = lb_next_event(w[i], 500)) != NULL) {
			if (strcmp(lb_str(ev, "event"), "changed") != 0)
				continue;
			int l2 = strcmp(lb_str(ev, "watch"), wid[i][0]) == 0 ? 0 : 1;
			last[i][l2] = ev;
			events++;
		}
	}
	lb_client *o = lb_connect(b[0], LB_UNIX);
	for (int l = 0; l < 2; l++) {
		json_t *truth = settled(lb_inspect(o, locks[l]));
		for (int i = 0; i < 3; i++) {
			json_t *seen = settled(last[i][l]);
			cr_assert(json_equal(seen, truth), "watcher %d on %s ends on\n%s\nbut the lock is\n%s", i,
			          locks[l], lb_dump(seen), lb_dump(truth));
			json_decref(seen);
		}
		json_decref(truth);
	}
	fprintf(stderr, "watch: fuzz of %ld ops (%ld flushes) through 3 brokers: %ld events, every "
	                "watcher monotone and ending true\n", ops, flushes, events);
	lb_end();
}
