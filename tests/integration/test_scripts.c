/*
 * test_scripts.c - the lock scripts called directly (no broker), for
 * states that brokers reach only through races: the scripts are assembled
 * as the build embeds them (deploy/embed-lua.sh --text), loaded into a
 * private Redis, and called by EVALSHA with the broker's key layout and
 * context, acting as several brokers at once (next to real brokers where
 * a test needs one). Run from the repository root (make test does).
 */
#include "tests/integration/harness.h"
#include "broker/store/lockscript.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SCRIPT LOAD of lua/NAME.lua as embedded; returns its sha (static). */
static const char *load(lb_redis *r, const char *name)
{
	static char shas[4][41];
	static int next;
	char cmd[256], *text = NULL;
	size_t len = 0, cap = 0, n;
	FILE *f;
	redisReply *rep;
	char *sha = shas[next++ % 4];

	snprintf(cmd, sizeof(cmd), "sh deploy/embed-lua.sh --text lua/lib/prelude.lua lua/%s.lua",
	         name);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	do {
		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			text = realloc(text, cap);
			cr_assert_not_null(text);
		}
		n = fread(text + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	cr_assert_eq(pclose(f), 0, "%s failed (run from the repository root)", cmd);
	rep = lb_redis_cmd(r, "SCRIPT LOAD %b", text, len);
	free(text);
	cr_assert_eq(rep->type, REDIS_REPLY_STRING, "SCRIPT LOAD %s: %s", name,
	             rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
	snprintf(sha, 41, "%s", rep->str);
	return sha;
}

/* EVALSHA sha with lock's 7 keys, the context of broker, then args. */
static redisReply *call(lb_redis *r, const char *sha, const char *lock, const char *broker,
                        int nargs, const char *const *args)
{
	static const char *const sfx[7] = {":h", ":i", "", ":q", ":w", ":d", ":s"};
	const char *argv[32];
	char keys[7][128];
	int argc = 0;
	redisReply *rep;

	cr_assert_leq(nargs, 16);
	argv[argc++] = "EVALSHA";
	argv[argc++] = sha;
	argv[argc++] = "7";
	for (int k = 0; k < 7; k++) {
		snprintf(keys[k], sizeof(keys[k]), "lb:{%s}%s", lock, sfx[k]);
		argv[argc++] = keys[k];
	}
	argv[argc++] = "60000"; /* retention */
	argv[argc++] = broker;
	argv[argc++] = "lb:";
	argv[argc++] = lock;
	argv[argc++] = "5000"; /* heartbeat */
	argv[argc++] = "0"; /* fence floor */
	for (int k = 0; k < nargs; k++)
		argv[argc++] = args[k];
	rep = redisCommandArgv(lb_redis_ctx(r), argc, argv, NULL);
	cr_assert_not_null(rep);
	cr_assert_neq(rep->type, REDIS_REPLY_ERROR, "script error: %s", rep->str);
	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
	return rep; /* the caller frees it */
}

/* acquire of mode (limit 0, fair, bounded by max_queue); returns the
 * reply's first integer. */
static long long acquire_as(lb_redis *r, const char *sha, const char *lock, const char *broker,
                            const char *id, const char *mode, const char *ttl, bool wait,
                            const char *max_queue, redisReply **out)
{
	const char *args[] = {id, mode, "0", ttl, "", "", "0", wait ? "1" : "0", "1", max_queue};
	redisReply *rep = call(r, sha, lock, broker, 10, args);
	long long v = rep->element[0]->integer;

	if (out)
		*out = rep;
	else
		freeReplyObject(rep);
	return v;
}

/* acquire: exclusive, ttl_ms, wait. */
static long long acquire(lb_redis *r, const char *sha, const char *lock, const char *broker,
                         const char *id, const char *ttl, bool wait, redisReply **out)
{
	return acquire_as(r, sha, lock, broker, id, "x", ttl, wait, "10000", out);
}

static long long pttl(lb_redis *r, const char *key)
{
	redisReply *rep = lb_redis_cmd(r, "PTTL %s", key);
	cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
	return rep->integer;
}

static bool hexists(lb_redis *r, const char *key, const char *field)
{
	redisReply *rep = lb_redis_cmd(r, "HEXISTS %s %s", key, field);
	cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
	return rep->integer == 1;
}

/* An acquire that empties the queue itself (its promote grants the last
 * waiter, whose holder had expired) and then queues its caller creates the
 * queue keys anew: they must get a lifetime, though :s survived with the
 * old 'qz'. */
LB_TEST(scripts, requeue_into_an_emptied_queue_sets_lifetimes, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	redisReply *rep;
	static const char *const sfx[] = {":q", ":w", ":d", ":s"};

	cr_assert_eq(acquire(r, acq, "qz", "b1", "A0000000000000000000000000000000", "300", false, NULL), 1);
	cr_assert_eq(acquire(r, acq, "qz", "b1", "W1000000000000000000000000000000", "30000", true, NULL), 0);
	lb_sleep_ms(400); /* A expires; nobody has run a script since */
	cr_assert_eq(acquire(r, acq, "qz", "b1", "B0000000000000000000000000000000", "30000", true, &rep), 0);
	cr_assert_eq(rep->elements, 2 + LOCK_GRANT_WIDTH, "B queued, W1 granted in the same script");
	cr_assert_str_eq(rep->element[2]->str, "W1000000000000000000000000000000");
	freeReplyObject(rep);
	for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
		char key[64];
		long long t;

		snprintf(key, sizeof(key), "lb:{qz}%s", sfx[k]);
		t = pttl(r, key);
		cr_assert(t > 0 && t <= 20000, "%s has PTTL %lld: it would never expire", key, t);
	}
	lb_end();
}

/* A broker is told once until it runs promote itself (:s 'wk:BROKER'). Its
 * waiter that was told may withdraw before its broker heartbeats: the
 * withdraw is that broker's script, so the next wake for it must go out
 * again. */
LB_TEST(scripts, a_withdraw_lets_the_next_wake_out, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *rel = load(r, "release");
	const char *wd = load(r, "withdraw");
	const char *hb = load(r, "heartbeat");
	const char *H = "H0000000000000000000000000000000", *W1 = "W1000000000000000000000000000000";
	const char *W2 = "W2000000000000000000000000000000", *W3 = "W3000000000000000000000000000000";
	redisReply *rep;

	cr_assert_eq(acquire(r, acq, "wk", "b1", H, "30000", false, NULL), 1);
	cr_assert_eq(acquire(r, acq, "wk", "bX", W1, "30000", true, NULL), 0);
	cr_assert_eq(acquire(r, acq, "wk", "bY", W2, "30000", true, NULL), 0);
	/* H leaves: W1 (of bX) is at the head and fits: bX is told. */
	freeReplyObject(call(r, rel, "wk", "b1", 2, (const char *[]){H, "0"}));
	cr_assert(hexists(r, "lb:{wk}:s", "wk:bX"), "bX was not woken");
	/* W1 gives up before bX heartbeats; W2 (of bY) is next. */
	freeReplyObject(call(r, wd, "wk", "bX", 1, (const char *[]){W1}));
	cr_assert_not(hexists(r, "lb:{wk}:s", "wk:bX"), "bX's withdraw left its wake mark");
	cr_assert(hexists(r, "lb:{wk}:s", "wk:bY"), "bY was not woken");
	cr_assert_eq(acquire(r, acq, "wk", "bX", W3, "30000", true, NULL), 0);
	rep = call(r, hb, "wk", "bY", 1, (const char *[]){W2});
	cr_assert_eq(rep->elements, 2 + LOCK_GRANT_WIDTH, "bY's heartbeat grants W2");
	freeReplyObject(rep);
	/* W2 leaves: W3 (of bX) is next, and bX must be told again. */
	freeReplyObject(call(r, rel, "wk", "bY", 2, (const char *[]){W2, "0"}));
	cr_assert(hexists(r, "lb:{wk}:s", "wk:bX"), "the wake for W3 did not go out");
	lb_end();
}

/* A queued exclusive waiter whose info went missing (evicted, edited) is
 * dropped without knowing its mode: the exclusive-waiter count is then
 * recounted from the waiters left, not left one too high (which would hold
 * back every non-fair shared request until the queue empties). */
LB_TEST(scripts, dropping_an_infoless_waiter_recounts_exclusive_waiters, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *rel = load(r, "release");
	const char *H = "H0000000000000000000000000000000", *X1 = "X1000000000000000000000000000000";
	const char *S1 = "S1000000000000000000000000000000";
	const char *sargs[] = {S1, "s", "0", "30000", "", "", "0", "1", "1", "10000"};
	redisReply *rep;

	cr_assert_eq(acquire(r, acq, "xw", "b1", H, "30000", false, NULL), 1);
	cr_assert_eq(acquire(r, acq, "xw", "b1", X1, "30000", true, NULL), 0);
	rep = call(r, acq, "xw", "b2", 10, sargs);
	cr_assert_eq(rep->element[0]->integer, 0, "S1 queued");
	freeReplyObject(rep);
	cr_assert_str_eq(lb_redis_cmd(r, "HGET lb:{xw}:s xw")->str, "1");
	lb_redis_cmd(r, "HDEL lb:{xw}:w %s", X1);
	freeReplyObject(call(r, rel, "xw", "b1", 2, (const char *[]){H, "0"}));
	cr_assert_eq(lb_redis_cmd(r, "ZSCORE lb:{xw}:q %s", X1)->type, REDIS_REPLY_NIL,
	             "the infoless waiter is dropped");
	rep = lb_redis_cmd(r, "HGET lb:{xw}:s xw");
	cr_assert(rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "0") == 0,
	          "xw is %s with no exclusive waiter left", rep->type == REDIS_REPLY_STRING ? rep->str : "nil");
	lb_end();
}

/* The inbox channels (lb:inbox:ID) Redis has subscribers on. */
static size_t inboxes(lb_redis *r, char out[][64], size_t max)
{
	redisReply *rep = lb_redis_cmd(r, "PUBSUB CHANNELS lb:inbox:*");
	size_t n = 0;

	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
	for (size_t k = 0; k < rep->elements && n < max; k++)
		snprintf(out[n++], 64, "%s", rep->element[k]->str + strlen("lb:inbox:"));
	return n;
}

/* A waiter left in Redis by a broker that no longer knows it (its
 * acquire's reply was lost and the broker gave up on it) reaches the head
 * of the queue: that broker is woken, finds no waiter of its own there,
 * and drops the orphan, so the next waiter is granted at once, not when
 * the orphan's heartbeat deadline passes (5 s). */
LB_TEST(scripts, a_wake_for_an_unknown_waiter_drops_the_orphan, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *a = lb_broker_start(r, NULL);
	char before[4][64], after[4][64];
	size_t na = inboxes(r, before, 4), nb;
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *h = lb_connect(a, LB_TCP), *w = lb_connect(a, LB_UNIX);
	const char *bid = NULL, *acq, *lease;
	const char *orphan = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a";
	json_t *id, *m;
	int64_t t0;

	(void)b;
	for (int tries = 0; tries < 50 && (nb = inboxes(r, after, 4)) < na + 1; tries++)
		lb_sleep_ms(20);
	for (size_t k = 0; k < nb && !bid; k++) {
		bool old = false;
		for (size_t j = 0; j < na; j++)
			old = old || strcmp(after[k], before[j]) == 0;
		if (!old)
			bid = after[k];
	}
	cr_assert_not_null(bid, "broker b's inbox not found");
	acq = load(r, "acquire");

	lease = lb_must_acquire(h, "orph", 30000);
	/* The orphan: queued as broker b's, which has never heard of it. */
	cr_assert_eq(acquire(r, acq, "orph", bid, orphan, "30000", true, NULL), 0);
	id = lb_send_req(w, "{s:s, s:s}", "op", "acquire", "lock", "orph");
	lb_wait_waiters(h, "orph", 2, 2000);
	t0 = lb_now_ms();
	cr_assert_eq(lb_release(h, lease), 0);
	m = lb_wait_response(w, id, 8000);
	lb_expect_ok(m);
	cr_expect_lt(lb_now_ms() - t0, 2000, "granted after %lld ms: the orphan held the lock",
	             (long long)(lb_now_ms() - t0));
	cr_assert_eq(lb_redis_cmd(r, "ZSCORE lb:{orph}:q %s", orphan)->type, REDIS_REPLY_NIL);
	cr_assert_eq(lb_release(w, lb_str(m, "lease")), 0);
	lb_end();
}

/* ---- a queue longer than the page the scripts read ----------------------- */

/* A waiting shared acquire of lock as broker by waiter number k (id from k). */
static long long acquire_shared(lb_redis *r, const char *sha, const char *lock, const char *broker,
                                int k, const char *max_queue, redisReply **out)
{
	char id[33];

	snprintf(id, sizeof(id), "R%031d", k);
	return acquire_as(r, sha, lock, broker, id, "s", "30000", true, max_queue, out);
}

static long long zcard(lb_redis *r, const char *key)
{
	redisReply *rep = lb_redis_cmd(r, "ZCARD %s", key);
	cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
	return rep->integer;
}

/* The scripts read the queue a page (32) at a time. A release in front of
 * 70 readers grants all of them, reading on page after page, and stops at
 * the writer behind them; the readers behind the writer keep waiting. */
LB_TEST(scripts, a_release_grants_readers_past_the_first_page, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *rel = load(r, "release");
	const char *H = "H0000000000000000000000000000000", *W = "W0000000000000000000000000000000";
	redisReply *rep;

	cr_assert_eq(acquire(r, acq, "pg", "b1", H, "30000", false, NULL), 1);
	for (int k = 0; k < 70; k++)
		cr_assert_eq(acquire_shared(r, acq, "pg", "b1", k, "10000", NULL), 0);
	cr_assert_eq(acquire(r, acq, "pg", "b1", W, "30000", true, NULL), 0);
	for (int k = 70; k < 75; k++)
		cr_assert_eq(acquire_shared(r, acq, "pg", "b1", k, "10000", NULL), 0);
	cr_assert_eq(zcard(r, "lb:{pg}:q"), 76);

	rep = call(r, rel, "pg", "b1", 2, (const char *[]){H, "0"});
	cr_assert_eq(rep->element[0]->integer, 0);
	cr_assert_eq(rep->elements, 1 + LOCK_GRANT_WIDTH * 70, "%zu elements: not every reader ahead of the writer",
	             rep->elements);
	for (int k = 0; k < 70; k++) {
		char id[33];
		snprintf(id, sizeof(id), "R%031d", k);
		cr_assert_str_eq(rep->element[1 + LOCK_GRANT_WIDTH * k]->str, id, "grant %d out of queue order", k);
	}
	freeReplyObject(rep);
	cr_assert_eq(zcard(r, "lb:{pg}:h"), 70);
	cr_assert_eq(zcard(r, "lb:{pg}:q"), 6, "the writer and the 5 readers behind it wait");
	rep = lb_redis_cmd(r, "ZRANGE lb:{pg}:q 0 0");
	cr_assert_str_eq(rep->element[0]->str, W);
	lb_end();
}

/* Past the first page, an acquire repeated by a waiter that is queued
 * already (its broker lost the reply) keeps its place, and the queue bound
 * counts the whole queue. */
LB_TEST(scripts, a_long_queue_keeps_repeats_and_its_bound, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *H = "H0000000000000000000000000000000";
	redisReply *rep;

	cr_assert_eq(acquire(r, acq, "lq", "b1", H, "30000", false, NULL), 1);
	for (int k = 0; k < 50; k++)
		cr_assert_eq(acquire_shared(r, acq, "lq", "b1", k, "50", NULL), 0);
	/* waiter 40 asks again: still 50 waiting, and 40 keeps its number */
	rep = lb_redis_cmd(r, "ZSCORE lb:{lq}:q R%031d", 40);
	cr_assert_eq(rep->type, REDIS_REPLY_STRING);
	char before[32];
	snprintf(before, sizeof(before), "%s", rep->str);
	cr_assert_eq(acquire_shared(r, acq, "lq", "b1", 40, "50", NULL), 0);
	cr_assert_eq(zcard(r, "lb:{lq}:q"), 50);
	rep = lb_redis_cmd(r, "ZSCORE lb:{lq}:q R%031d", 40);
	cr_assert_str_eq(rep->str, before, "a repeat moved waiter 40 to the back");
	/* a new one is over the bound of 50 */
	cr_assert_eq(acquire_shared(r, acq, "lq", "b1", 50, "50", &rep), -2);
	freeReplyObject(rep);
	cr_assert_eq(zcard(r, "lb:{lq}:q"), 50);
	lb_end();
}

/* orphans.lua names the waiters it dropped, so a broker can queue again
 * one of its own that was no orphan; other brokers' waiters stay. */
LB_TEST(scripts, orphans_names_what_it_dropped, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *orp = load(r, "orphans");
	const char *H = "H0000000000000000000000000000000", *O1 = "O1000000000000000000000000000000";
	const char *O2 = "O2000000000000000000000000000000", *X = "X0000000000000000000000000000000";
	redisReply *rep;

	cr_assert_eq(acquire(r, acq, "on", "b0", H, "30000", false, NULL), 1);
	cr_assert_eq(acquire(r, acq, "on", "b1", O1, "30000", true, NULL), 0);
	cr_assert_eq(acquire(r, acq, "on", "b2", X, "30000", true, NULL), 0);
	cr_assert_eq(acquire(r, acq, "on", "b1", O2, "30000", true, NULL), 0);
	rep = call(r, orp, "on", "b1", 0, NULL);
	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
	cr_assert_eq(rep->elements, 3, "{n, ids}: %zu elements", rep->elements);
	cr_assert_eq(rep->element[0]->integer, 2);
	cr_assert_str_eq(rep->element[1]->str, O1);
	cr_assert_str_eq(rep->element[2]->str, O2);
	freeReplyObject(rep);
	cr_assert_eq(zcard(r, "lb:{on}:q"), 1, "the other broker's waiter stays");
	lb_end();
}

/* A broker woken while alive that dies before it answers: the next promote
 * 300 ms on wakes it again, finds nobody listening, marks it deaf, and
 * the one after the 900 ms grace drops its waiter and grants the next.
 * A deaf broker's own script clears the mark. */
LB_TEST(scripts, a_broker_that_dies_after_its_wake_is_dropped, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *rel = load(r, "release");
	const char *hb = load(r, "heartbeat");
	const char *H = "H0000000000000000000000000000000", *D = "D0000000000000000000000000000000";
	const char *W = "W0000000000000000000000000000000";
	redisContext *inbox = lb_redis_conn_new(r);
	redisReply *rep;

	rep = redisCommand(inbox, "SUBSCRIBE lb:inbox:bD"); /* bD is alive */
	cr_assert_not_null(rep);
	freeReplyObject(rep);
	cr_assert_eq(acquire(r, acq, "dw", "b0", H, "30000", false, NULL), 1);
	cr_assert_eq(acquire(r, acq, "dw", "bD", D, "30000", true, NULL), 0);
	cr_assert_eq(acquire(r, acq, "dw", "bW", W, "30000", true, NULL), 0);
	freeReplyObject(call(r, rel, "dw", "b0", 2, (const char *[]){H, "0"}));
	cr_assert(hexists(r, "lb:{dw}:s", "wk:bD"), "bD was not woken");
	cr_assert_not(hexists(r, "lb:{dw}:s", "dx:bD"), "a live broker marked deaf");
	redisFree(inbox); /* bD dies before it runs a script */
	lb_sleep_ms(350);
	rep = call(r, hb, "dw", "bW", 1, (const char *[]){W});
	cr_assert_eq(rep->elements, 2, "bW granted while bD's waiter reserves the lock");
	cr_assert(rep->element[0]->integer > 0 && rep->element[0]->integer <= 900,
	          "no hint to look again when bD's grace ends: %lld", rep->element[0]->integer);
	freeReplyObject(rep);
	cr_assert(hexists(r, "lb:{dw}:s", "dx:bD"), "the second wake found nobody: bD is deaf");
	lb_sleep_ms(950);
	rep = call(r, hb, "dw", "bW", 1, (const char *[]){W});
	cr_assert_eq(rep->elements, 2 + LOCK_GRANT_WIDTH, "bW not granted after bD's grace");
	cr_assert_str_eq(rep->element[2]->str, W);
	freeReplyObject(rep);
	cr_assert_eq(lb_redis_cmd(r, "ZSCORE lb:{dw}:q %s", D)->type, REDIS_REPLY_NIL,
	             "bD's waiter is still queued");
	lb_end();
}

/* reenter.lua on id with op seq: 3 keys, no context. Returns the count. */
static long long reenter(lb_redis *r, const char *sha, const char *lock, const char *id,
                         const char *seq)
{
	redisReply *rep = lb_redis_cmd(r, "EVALSHA %s 3 lb:{%s}:h lb:{%s}:i lb:{%s} %s %s", sha, lock,
	                               lock, lock, id, seq);
	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY, "%s", rep->type == REDIS_REPLY_ERROR ? rep->str : "");
	return rep->element[0]->integer;
}

/* release 'u': take back the re-entry with op seq undo. Returns the count. */
static long long undo_reentry(lb_redis *r, const char *sha, const char *lock, const char *id,
                              const char *seq, const char *undo)
{
	redisReply *rep = call(r, sha, lock, "b1", 4, (const char *[]){id, "u", seq, undo});
	long long v = rep->element[0]->integer;
	freeReplyObject(rep);
	return v;
}

/* The take-back of a re-entry that too few replicas acknowledged (issue
 * 16) runs only if that re-entry did, and nothing of the holder after it;
 * it never frees the lock: a new master that missed the re-entry keeps the
 * holder's one level. Both layouts: a solo holder (the header) and the
 * holders model (two readers). */
LB_TEST(scripts, a_reentry_taken_back_only_if_it_ran_and_never_the_last_level, 30)
{
	lb_redis *r = lb_redis_start(false);
	const char *acq = load(r, "acquire");
	const char *rel = load(r, "release");
	const char *ren = load(r, "reenter");
	const char *A = "A0000000000000000000000000000000", *B = "B0000000000000000000000000000000";

	/* solo: the re-entry (seq 5) ran; its take-back (seq 6) drops it, once */
	cr_assert_eq(acquire(r, acq, "u1", "b1", A, "30000", false, NULL), 1);
	cr_assert(hexists(r, "lb:{u1}", "o"), "not the solo layout");
	cr_assert_eq(reenter(r, ren, "u1", A, "5"), 2);
	cr_assert_eq(undo_reentry(r, rel, "u1", A, "6", "5"), 1);
	cr_assert_eq(undo_reentry(r, rel, "u1", A, "6", "5"), 1, "a repeat changed something");
	cr_assert(hexists(r, "lb:{u1}", "o"), "the take-back freed the lock");
	/* solo: the re-entry never ran here (a new master that missed it) */
	cr_assert_eq(undo_reentry(r, rel, "u1", A, "8", "7"), 1);
	cr_assert(hexists(r, "lb:{u1}", "o"), "a take-back of a re-entry that never ran freed the lock");
	/* solo: something ran after the re-entry (seq 10 after 9): left alone */
	cr_assert_eq(reenter(r, ren, "u1", A, "9"), 2);
	cr_assert_eq(reenter(r, ren, "u1", A, "10"), 3);
	cr_assert_eq(undo_reentry(r, rel, "u1", A, "11", "9"), 3);
	/* 'u' without its seq changes nothing */
	redisReply *rep = call(r, rel, "u1", "b1", 3, (const char *[]){A, "u", "12"});
	cr_assert_eq(rep->element[0]->integer, 3);
	freeReplyObject(rep);

	/* the holders model: two readers */
	cr_assert_eq(acquire_as(r, acq, "u2", "b1", A, "s", "30000", false, "10000", NULL), 1);
	cr_assert_eq(acquire_as(r, acq, "u2", "b1", B, "s", "30000", false, "10000", NULL), 1);
	cr_assert_eq(zcard(r, "lb:{u2}:h"), 2, "not the holders model");
	cr_assert_eq(undo_reentry(r, rel, "u2", A, "4", "3"), 1, "a re-entry that never ran was undone");
	cr_assert_eq(zcard(r, "lb:{u2}:h"), 2, "the take-back freed a holder");
	cr_assert_eq(reenter(r, ren, "u2", A, "5"), 2);
	cr_assert_eq(undo_reentry(r, rel, "u2", A, "6", "5"), 1);
	cr_assert_eq(undo_reentry(r, rel, "u2", A, "6", "5"), 1, "a repeat changed something");
	cr_assert_eq(zcard(r, "lb:{u2}:h"), 2);
	lb_end();
}
