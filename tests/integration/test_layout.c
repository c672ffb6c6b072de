/*
 * test_layout.c - the two Redis layouts of a lock (lua/lib/prelude.lua):
 * "solo", a lone holder kept in the header hash lb:{NAME}, and "model",
 * holders and waiters in lb:{NAME}:h :i :q :w :d :s with 'm' set in the
 * header. Checked through the broker and in Redis itself: what keys and
 * fields each layout leaves, the moves solo -> model -> solo (a waiter, a
 * second shared holder or permit, a conflict), that re-entry, extend,
 * inspect and release work in both, max_hold_ms and expiry of a solo
 * holder, a lost header that must not hide the model, fences across both
 * layouts, and that the fast paths cost only a few Redis calls.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Redis side ------------------------------------------------------------------ */

/* The key of lock with suffix sfx ("h", "q", ...), or its header for NULL. */
static const char *lkey(const char *lock, const char *sfx)
{
	static char buf[4][600];
	static int next;
	char *k = buf[next++ % 4];

	if (sfx)
		snprintf(k, sizeof(buf[0]), "lb:{%s}:%s", lock, sfx);
	else
		snprintf(k, sizeof(buf[0]), "lb:{%s}", lock);
	return k;
}

/* A header field, NULL when absent (the string belongs to the harness). */
static const char *hfield(lb_redis *r, const char *lock, const char *field)
{
	redisReply *rep = lb_redis_cmd(r, "HGET %s %s", lkey(lock, NULL), field);

	if (rep->type == REDIS_REPLY_NIL)
		return NULL;
	cr_assert_eq(rep->type, REDIS_REPLY_STRING, "HGET %s %s", lkey(lock, NULL), field);
	return rep->str;
}

static long long hfield_ll(lb_redis *r, const char *lock, const char *field)
{
	const char *v = hfield(r, lock, field);

	cr_assert_not_null(v, "header of %s has no field %s", lock, field);
	return atoll(v);
}

static long long redis_int(redisReply *rep)
{
	cr_assert_eq(rep->type, REDIS_REPLY_INTEGER, "want an integer reply, got type %d", rep->type);
	return rep->integer;
}

/* The header as "f=..,o=..", for messages. */
static const char *header_text(lb_redis *r, const char *lock)
{
	static char out[2048];
	redisReply *rep = lb_redis_cmd(r, "HGETALL %s", lkey(lock, NULL));
	size_t o = 0;

	out[0] = '\0';
	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
	for (size_t k = 0; k + 1 < rep->elements && o < sizeof(out); k += 2)
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s=%s", k ? "," : "",
		                      rep->element[k]->str, rep->element[k + 1]->str);
	return out;
}

/* The lock's keys as "k1 k2", for messages; *n is how many there are. */
static const char *keys_text(lb_redis *r, const char *lock, size_t *n)
{
	static char out[2048];
	redisReply *rep = lb_redis_cmd(r, "KEYS lb:{%s}*", lock);
	size_t o = 0;

	out[0] = '\0';
	cr_assert_eq(rep->type, REDIS_REPLY_ARRAY);
	for (size_t k = 0; k < rep->elements && o < sizeof(out); k++)
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s", k ? " " : "", rep->element[k]->str);
	*n = rep->elements;
	return out;
}

/* True when the lock's only key is its header, and the header has no 'm'. */
static bool is_solo_layout(lb_redis *r, const char *lock)
{
	size_t n;
	const char *keys = keys_text(r, lock, &n);

	return n == 1 && strcmp(keys, lkey(lock, NULL)) == 0 && hfield(r, lock, "m") == NULL;
}

/* Asserts (polling up to timeout_ms) that the lock's keys are exactly its
 * header and that the header has no 'm'. */
static void expect_solo_layout(lb_redis *r, const char *lock, int timeout_ms, const char *what)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	size_t n;

	while (!is_solo_layout(r, lock) && lb_now_ms() < deadline)
		lb_sleep_ms(20);
	if (!is_solo_layout(r, lock)) {
		const char *keys = keys_text(r, lock, &n);
		cr_assert_fail("%s: want only key %s without 'm'; keys [%s], header {%s}", what,
		               lkey(lock, NULL), keys, header_text(r, lock));
	}
}

/* Asserts the model layout: :h and :i exist, the header has m=1 and no solo
 * holder. */
static void expect_model_layout(lb_redis *r, const char *lock, const char *what)
{
	size_t n;
	const char *m = hfield(r, lock, "m");

	cr_assert(lb_redis_key_exists(r, lkey(lock, "h")) && lb_redis_key_exists(r, lkey(lock, "i")),
	          "%s: want holder keys; keys [%s]", what, keys_text(r, lock, &n));
	cr_assert(m && strcmp(m, "1") == 0, "%s: want m=1 in the header {%s}", what,
	          header_text(r, lock));
	cr_assert_null(hfield(r, lock, "o"), "%s: a solo holder next to the model {%s}", what,
	               header_text(r, lock));
}

/* Redis time in ms. */
static long long redis_now_ms(lb_redis *r)
{
	redisReply *rep = lb_redis_cmd(r, "TIME");

	cr_assert(rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
	return atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
}

/* The expiry (score in :h) of holder id, -1 when it is not there. */
static long long model_expiry(lb_redis *r, const char *lock, const char *id)
{
	redisReply *rep = lb_redis_cmd(r, "ZSCORE %s %s", lkey(lock, "h"), id);

	if (rep->type == REDIS_REPLY_NIL)
		return -1;
	cr_assert_eq(rep->type, REDIS_REPLY_STRING);
	return atoll(rep->str);
}

/* ---- broker side ------------------------------------------------------------------ */

/* Options of an acquire; -1 / NULL leaves the field out. */
typedef struct {
	const char *mode;
	int limit;
	int ttl_ms;
	int wait_ms;
	int watchdog;
	int detach;
	int max_hold_ms;
	const char *owner;
} aopt;

#define AO(...)                                                                              \
	((aopt){.mode = NULL, .limit = -1, .ttl_ms = -1, .wait_ms = -1, .watchdog = -1,          \
	        .detach = -1, .max_hold_ms = -1, .owner = NULL, __VA_ARGS__})

#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

/* Sends an acquire without waiting; returns its request id. */
static json_t *acq_send(lb_client *c, const char *lock, aopt o)
{
	json_t *req = json_object();

	json_object_set_new(req, "op", json_string("acquire"));
	json_object_set_new(req, "lock", json_string(lock));
	if (o.mode)
		json_object_set_new(req, "mode", json_string(o.mode));
	if (o.limit >= 0)
		json_object_set_new(req, "limit", json_integer(o.limit));
	if (o.ttl_ms >= 0)
		json_object_set_new(req, "ttl_ms", json_integer(o.ttl_ms));
	if (o.wait_ms >= 0)
		json_object_set_new(req, "wait_ms", json_integer(o.wait_ms));
	if (o.watchdog >= 0)
		json_object_set_new(req, "watchdog", json_boolean(o.watchdog));
	if (o.detach >= 0)
		json_object_set_new(req, "detach", json_boolean(o.detach));
	if (o.max_hold_ms >= 0)
		json_object_set_new(req, "max_hold_ms", json_integer(o.max_hold_ms));
	if (o.owner)
		json_object_set_new(req, "owner", json_string(o.owner));
	return lb_send_req(c, "o", req);
}

static json_t *acq(lb_client *c, const char *lock, aopt o)
{
	return lb_wait_response(c, acq_send(c, lock, o), LB_CALL_TIMEOUT_MS);
}

/* An acquire that must be granted with count 1; returns the response. */
static json_t *acq_ok(lb_client *c, const char *lock, aopt o)
{
	json_t *a = acq(c, lock, o);

	lb_expect_ok(a);
	cr_assert(lb_is_lease_token(lb_str(a, "lease")), "%s", lb_dump(a));
	cr_assert_eq(lb_int(a, "count"), 1, "%s", lb_dump(a));
	return a;
}

static json_t *extend(lb_client *c, const char *lease, int ttl_ms)
{
	return lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", ttl_ms);
}

static json_t *release(lb_client *c, const char *lease)
{
	return lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
}

static json_t *holder(const json_t *in, size_t k)
{
	cr_assert_gt(lb_nholders(in), k, "%s", lb_dump(in));
	return json_array_get(lb_get(in, "holders"), k);
}

static lb_client *client(lb_broker *b, lb_transport t, const char *label)
{
	lb_client *c = lb_connect(b, t);

	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "client", label));
	return c;
}

/* ---- 1: the solo layout ------------------------------------------------------------- */

LB_TEST(layout, uncontended_acquire_is_one_header_key, 60)
{
	static const char lock[] = "lay-solo";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = client(b, LB_TCP, "layout/1");
	json_t *a = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0, .owner = "w1"));
	const char *lease = lb_str(a, "lease");
	json_int_t fence = lb_int(a, "fence");
	char fs[32];
	long long left;
	json_t *in, *a2;

	expect_solo_layout(r, lock, 0, "after an uncontended acquire");
	snprintf(fs, sizeof(fs), "%lld", (long long)fence);
	cr_assert_str_eq(hfield(r, lock, "f"), fs, "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "o"), lease, "the holder id is the lease: {%s}",
	                 header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "c"), "1", "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "k"), "x", "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "l"), "0", "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "e"), "0", "no max-hold deadline: {%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "w"), "w1", "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "n"), "layout/1", "{%s}", header_text(r, lock));
	left = hfield_ll(r, lock, "x") - redis_now_ms(r);
	cr_assert(left > 8000 && left <= 10000, "expiry %lld ms ahead, want ~10000 {%s}", left,
	          header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "r"), "0", "no op seq applied yet: {%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "V"), "", "no value: {%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "D"), "0", "no lock delay: {%s}", header_text(r, lock));
	cr_assert_eq(redis_int(lb_redis_cmd(r, "HLEN %s", lkey(lock, NULL))), 13,
	             "want f,o,x,c,k,l,e,w,n,r,z,V,D: {%s}", header_text(r, lock));
	/* z: the header lives at least that long, and that is past the
	 * holder's expiry plus the fence's retention (60 s). */
	cr_assert_geq(hfield_ll(r, lock, "z"), hfield_ll(r, lock, "x") + 60000, "{%s}",
	              header_text(r, lock));
	cr_assert_geq(redis_int(lb_redis_cmd(r, "PTTL %s", lkey(lock, NULL))) + redis_now_ms(r) + 50,
	              hfield_ll(r, lock, "z"), "the header lives until z {%s}", header_text(r, lock));

	in = lb_inspect(c, lock);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(holder(in, 0), "count"), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "owner"), "w1", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "layout/1", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), fence, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	cr_assert(json_is_null(lb_get(in, "limit")), "%s", lb_dump(in));

	cr_assert_eq(lb_release(c, lease), 0);
	expect_solo_layout(r, lock, 0, "after the release");
	/* Only 'o' says there is a solo holder (the other solo fields may stay
	 * behind, stale); the fence stays. */
	cr_assert_null(hfield(r, lock, "o"), "released holder still in the header {%s}",
	               header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "f"), fs, "{%s}", header_text(r, lock));
	cr_assert_gt(redis_int(lb_redis_cmd(r, "PTTL %s", lkey(lock, NULL))), 0);
	lb_redis_assert_lock_keys_expire(r, "lb:", lock);
	in = lb_inspect(c, lock);
	cr_assert_str_eq(lb_str(in, "state"), "free", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), fence, "the fence is kept: %s", lb_dump(in));

	a2 = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(a2, "fence"), fence, "%s after fence %lld", lb_dump(a2), (long long)fence);
	cr_assert_str_neq(lb_str(a2, "lease"), lease);
	expect_solo_layout(r, lock, 0, "after the second acquire");
	cr_assert_str_eq(hfield(r, lock, "o"), lb_str(a2, "lease"), "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(c, lb_str(a2, "lease")), 0);
	lb_redis_assert_lock_keys_expire(r, "lb:", lock);
	lb_end();
}

/* ---- 2: solo -> model -> solo ------------------------------------------------------- */

LB_TEST(layout, waiter_moves_solo_holder_into_model_and_back, 60)
{
	static const char lock[] = "lay-move";
	static const char *const qkeys[] = {"q", "w", "d", "s"};
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "client-a");
	lb_client *cb = client(b, LB_UNIX, "client-b");
	json_t *a = acq_ok(ca, lock, AO(.ttl_ms = 10000, .wait_ms = 0, .owner = "own-a",
	                                .max_hold_ms = 30000));
	const char *la = lb_str(a, "lease");
	json_int_t fa = lb_int(a, "fence");
	json_t *idb, *e, *re, *in, *g, *a2;
	const char *lb_lease;
	long long left;
	char fs[32];

	expect_solo_layout(r, lock, 0, "A alone");

	/* B waits: A moves into the model. */
	idb = acq_send(cb, lock, AO(.ttl_ms = 20000));
	lb_wait_waiters(ca, lock, 1, 3000);
	expect_model_layout(r, lock, "B queued behind A");
	for (size_t k = 0; k < 4; k++) {
		size_t n;
		cr_assert(lb_redis_key_exists(r, lkey(lock, qkeys[k])), "queue key :%s missing; keys [%s]",
		          qkeys[k], keys_text(r, lock, &n));
	}
	cr_assert_eq(redis_int(lb_redis_cmd(r, "ZCARD %s", lkey(lock, "q"))), 1);
	cr_assert_eq(redis_int(lb_redis_cmd(r, "ZCARD %s", lkey(lock, "h"))), 1);
	cr_assert_gt(model_expiry(r, lock, la), 0, "A is not in :h");
	cr_assert_eq(redis_int(lb_redis_cmd(r, "HEXISTS %s %s", lkey(lock, "i"), la)), 1,
	             "A is not in :i");
	snprintf(fs, sizeof(fs), "%lld", (long long)fa);
	cr_assert_str_eq(hfield(r, lock, "f"), fs, "the fence stays in the header {%s}",
	                 header_text(r, lock));

	/* A's extend works on the model. */
	e = extend(ca, la, 15000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 15000, "%s", lb_dump(e));
	left = model_expiry(r, lock, la) - redis_now_ms(r);
	cr_assert(left > 13000 && left <= 15000, "A's expiry in :h is %lld ms ahead, want ~15000",
	          left);
	/* The max-hold deadline came along from the header: extend is capped. */
	e = extend(ca, la, 60000);
	lb_expect_ok(e);
	cr_assert(lb_int(e, "ttl_ms") <= 30000 && lb_int(e, "ttl_ms") > 25000,
	          "max_hold_ms 30000 must cap the extend after unsolo: %s", lb_dump(e));
	e = extend(ca, la, 15000);
	lb_expect_ok(e);

	/* A re-enters (same session, same owner) on the model. */
	re = acq(ca, lock, AO(.ttl_ms = 10000, .wait_ms = 0, .owner = "own-a"));
	lb_expect_ok(re);
	cr_assert_str_eq(lb_str(re, "lease"), la, "%s", lb_dump(re));
	cr_assert_eq(lb_int(re, "count"), 2, "%s", lb_dump(re));
	cr_assert_eq(lb_int(re, "fence"), fa, "%s", lb_dump(re));
	expect_model_layout(r, lock, "after A re-entered");

	in = lb_inspect(ca, lock);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(holder(in, 0), "count"), 2, "%s", lb_dump(in));
	left = lb_int(holder(in, 0), "ttl_ms");
	cr_assert(left > 10000 && left <= 15000, "A's ttl after extend 15000: %s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "mode"), "exclusive", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "owner"), "own-a", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "client-a", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), fa, "%s", lb_dump(in));
	cr_assert(json_is_null(lb_get(in, "limit")), "%s", lb_dump(in));

	/* Two releases; the second hands the lock to B. */
	cr_assert_eq(lb_release(ca, la), 1);
	lb_expect_silent(cb, 300, "B while A still holds at count 1");
	cr_assert_eq(lb_release(ca, la), 0);
	g = lb_wait_response(cb, idb, 3000);
	lb_expect_ok(g);
	cr_assert_eq(lb_int(g, "count"), 1, "%s", lb_dump(g));
	cr_assert_gt(lb_int(g, "fence"), fa, "%s after fence %lld", lb_dump(g), (long long)fa);
	lb_lease = lb_str(g, "lease");
	lb_expect_no_queue(r, ca, lock, 1000, false);
	expect_model_layout(r, lock, "B granted from the queue");
	cr_assert_gt(model_expiry(r, lock, lb_lease), 0, "B is not in :h");
	cr_assert_eq(model_expiry(r, lock, la), -1, "A is still in :h");
	in = lb_inspect(cb, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "client-b", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), lb_int(g, "fence"), "%s", lb_dump(in));
	lb_expect_err(release(ca, la), "not_held");

	/* B releases: the model empties, 'm' goes, only the header is left. */
	cr_assert_eq(lb_release(cb, lb_lease), 0);
	expect_solo_layout(r, lock, 500, "after the model emptied");
	snprintf(fs, sizeof(fs), "%lld", (long long)lb_int(g, "fence"));
	cr_assert_str_eq(hfield(r, lock, "f"), fs, "{%s}", header_text(r, lock));
	lb_redis_assert_lock_keys_expire(r, "lb:", lock);
	lb_expect_free(ca, lock);

	/* And the next acquire is solo again. */
	a2 = acq_ok(ca, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(a2, "fence"), lb_int(g, "fence"), "%s", lb_dump(a2));
	expect_solo_layout(r, lock, 0, "a new acquire after the model emptied");
	cr_assert_not(lb_redis_key_exists(r, lkey(lock, "h")));
	cr_assert_str_eq(hfield(r, lock, "o"), lb_str(a2, "lease"), "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(ca, lb_str(a2, "lease")), 0);
	lb_end();
}

/* ---- 3: shared holders and permits --------------------------------------------------- */

LB_TEST(layout, second_shared_holder_moves_into_model, 60)
{
	static const char lock[] = "lay-shared";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "sh-a");
	lb_client *cb = client(b, LB_TCP, "sh-b");
	lb_client *cc = client(b, LB_UNIX, "sh-c");
	json_t *a = acq_ok(ca, lock, AO(.mode = "shared", .ttl_ms = 10000, .wait_ms = 0));
	json_t *bb, *in, *x;

	cr_assert_str_eq(lb_str(a, "mode"), "shared", "%s", lb_dump(a));
	expect_solo_layout(r, lock, 0, "one shared holder");
	cr_assert_str_eq(hfield(r, lock, "k"), "s", "{%s}", header_text(r, lock));
	in = lb_inspect(cc, lock);
	cr_assert_str_eq(lb_str(in, "state"), "shared", "%s", lb_dump(in));

	bb = acq_ok(cb, lock, AO(.mode = "shared", .ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(bb, "fence"), lb_int(a, "fence"), "%s", lb_dump(bb));
	expect_model_layout(r, lock, "two shared holders");
	cr_assert_eq(redis_int(lb_redis_cmd(r, "ZCARD %s", lkey(lock, "h"))), 2);
	cr_assert_not(lb_redis_key_exists(r, lkey(lock, "q")), "nobody waits");

	in = lb_inspect(cc, lock);
	cr_assert_str_eq(lb_str(in, "state"), "shared", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 2, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "mode"), "shared", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 1), "mode"), "shared", "%s", lb_dump(in));
	cr_assert(strstr(lb_dump(in), "\"sh-a\"") && strstr(lb_dump(in), "\"sh-b\""),
	          "both clients shown: %s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), lb_int(bb, "fence"), "%s", lb_dump(in));

	/* An exclusive try fails against either layout's holders. */
	x = acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	lb_expect_err(x, "timeout");

	cr_assert_eq(lb_release(ca, lb_str(a, "lease")), 0);
	in = lb_inspect(cc, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "sh-b", "%s", lb_dump(in));
	expect_model_layout(r, lock, "one shared holder left in the model");
	lb_expect_err(acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0)), "timeout");

	cr_assert_eq(lb_release(cb, lb_str(bb, "lease")), 0);
	expect_solo_layout(r, lock, 500, "both shared holders gone");
	lb_expect_free(cc, lock);
	lb_redis_assert_lock_keys_expire(r, "lb:", lock);

	x = acq_ok(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(x, "fence"), lb_int(bb, "fence"), "%s", lb_dump(x));
	expect_solo_layout(r, lock, 0, "exclusive after the shared ones");
	cr_assert_str_eq(hfield(r, lock, "k"), "x", "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(cc, lb_str(x, "lease")), 0);
	lb_end();
}

LB_TEST(layout, semaphore_permits_and_conflict_on_solo, 60)
{
	static const char lock[] = "lay-sem";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "sem-a");
	lb_client *cb = client(b, LB_UNIX, "sem-b");
	lb_client *cc = client(b, LB_TCP, "sem-c");
	json_t *a = acq_ok(ca, lock, AO(.limit = 2, .ttl_ms = 10000, .wait_ms = 0));
	json_t *bb, *in, *x, *e;

	cr_assert_str_eq(lb_str(a, "mode"), "permit", "%s", lb_dump(a));
	expect_solo_layout(r, lock, 0, "one permit");
	cr_assert_str_eq(hfield(r, lock, "k"), "p", "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "l"), "2", "{%s}", header_text(r, lock));
	in = lb_inspect(cc, lock);
	cr_assert_str_eq(lb_str(in, "state"), "semaphore", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "limit"), 2, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "mode"), "permit", "%s", lb_dump(in));

	/* Another kind or limit conflicts with the solo permit, and leaves it. */
	lb_expect_err(acq(cc, lock, AO(.limit = 3, .ttl_ms = 10000, .wait_ms = 0)), "conflict");
	lb_expect_err(acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0)), "conflict");
	in = lb_inspect(cc, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "limit"), 2, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "sem-a", "%s", lb_dump(in));
	e = extend(ca, lb_str(a, "lease"), 12000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 12000, "%s", lb_dump(e));

	bb = acq_ok(cb, lock, AO(.limit = 2, .ttl_ms = 10000, .wait_ms = 0));
	cr_assert_str_neq(lb_str(bb, "lease"), lb_str(a, "lease"));
	cr_assert_gt(lb_int(bb, "fence"), lb_int(a, "fence"), "%s", lb_dump(bb));
	expect_model_layout(r, lock, "two permits");
	cr_assert_eq(redis_int(lb_redis_cmd(r, "ZCARD %s", lkey(lock, "h"))), 2);
	lb_expect_err(acq(cc, lock, AO(.limit = 2, .ttl_ms = 10000, .wait_ms = 0)), "timeout");
	lb_expect_err(acq(cc, lock, AO(.limit = 3, .ttl_ms = 10000, .wait_ms = 0)), "conflict");

	in = lb_inspect(cc, lock);
	cr_assert_str_eq(lb_str(in, "state"), "semaphore", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "limit"), 2, "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 2, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "mode"), "permit", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 1), "mode"), "permit", "%s", lb_dump(in));

	cr_assert_eq(lb_release(ca, lb_str(a, "lease")), 0);
	cr_assert_eq(lb_release(cb, lb_str(bb, "lease")), 0);
	expect_solo_layout(r, lock, 500, "both permits released");
	lb_expect_free(cc, lock);
	lb_redis_assert_lock_keys_expire(r, "lb:", lock);

	/* Free again: another kind is fine now, and solo. */
	x = acq_ok(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	expect_solo_layout(r, lock, 0, "a lock after the semaphore");
	cr_assert_str_eq(hfield(r, lock, "k"), "x", "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(cc, lb_str(x, "lease")), 0);
	lb_end();
}

/* ---- 4: re-entry of a solo holder ---------------------------------------------------- */

/* Acquires lock on c and re-enters it until count 3, checking the header's
 * count (solo) and inspect; returns the acquire's response. */
static json_t *enter_three_times(lb_redis *r, lb_client *c, const char *lock)
{
	json_t *a = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0));

	for (int k = 2; k <= 3; k++) {
		json_t *re = acq(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
		json_t *in;
		char cs[16];

		lb_expect_ok(re);
		cr_assert_str_eq(lb_str(re, "lease"), lb_str(a, "lease"), "%s", lb_dump(re));
		cr_assert_eq(lb_int(re, "count"), k, "%s", lb_dump(re));
		cr_assert_eq(lb_int(re, "fence"), lb_int(a, "fence"), "%s", lb_dump(re));
		snprintf(cs, sizeof(cs), "%d", k);
		cr_assert_str_eq(hfield(r, lock, "c"), cs, "{%s}", header_text(r, lock));
		in = lb_inspect(c, lock);
		cr_assert_eq(lb_int(holder(in, 0), "count"), k, "%s", lb_dump(in));
	}
	expect_solo_layout(r, lock, 0, "re-entry stays solo");
	return a;
}

/* Releases once, expecting count left; checks inspect (and the header's
 * count while solo). */
static void release_to(lb_redis *r, lb_client *c, const char *lock, const char *lease,
                       json_int_t left, bool solo)
{
	json_t *in;

	cr_assert_eq(lb_release(c, lease), left);
	in = lb_inspect(c, lock);
	if (left == 0) {
		cr_assert_str_eq(lb_str(in, "state"), "free", "%s", lb_dump(in));
		cr_assert_eq(lb_nholders(in), 0, "%s", lb_dump(in));
		expect_solo_layout(r, lock, 500, "after the last release");
		cr_assert_null(hfield(r, lock, "o"), "{%s}", header_text(r, lock));
		return;
	}
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_eq(lb_int(holder(in, 0), "count"), left, "%s", lb_dump(in));
	if (solo) {
		char cs[16];

		snprintf(cs, sizeof(cs), "%lld", (long long)left);
		cr_assert_str_eq(hfield(r, lock, "c"), cs, "{%s}", header_text(r, lock));
		expect_solo_layout(r, lock, 0, "a re-entered holder after a release");
	} else {
		expect_model_layout(r, lock, "a re-entered holder in the model");
	}
}

LB_TEST(layout, solo_reentrancy_counts, 60)
{
	static const char lock[] = "lay-re";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = client(b, LB_TCP, "re");
	lb_client *other = client(b, LB_UNIX, "other");
	json_t *a = enter_three_times(r, c, lock);
	const char *lease = lb_str(a, "lease");
	json_t *in;

	/* All solo: 2, 1, 0, then not_held. */
	release_to(r, c, lock, lease, 2, true);
	release_to(r, c, lock, lease, 1, true);
	release_to(r, c, lock, lease, 0, true);
	lb_expect_err(release(c, lease), "not_held");
	lb_expect_err(extend(c, lease, 5000), "not_held");

	/* Again, but a waiter (queued, then timed out) moves the holder into
	 * the model at count 3: the count comes along and counts down there. */
	a = enter_three_times(r, c, lock);
	lease = lb_str(a, "lease");
	lb_expect_err(acq(other, lock, AO(.ttl_ms = 10000, .wait_ms = 50)), "timeout");
	expect_model_layout(r, lock, "after a waiter came and went");
	in = lb_inspect(c, lock);
	cr_assert_eq(lb_int(holder(in, 0), "count"), 3, "count lost moving into the model: %s",
	             lb_dump(in));
	release_to(r, c, lock, lease, 2, false);
	release_to(r, c, lock, lease, 1, false);
	lb_expect_err(acq(other, lock, AO(.ttl_ms = 10000, .wait_ms = 0)), "timeout");
	release_to(r, c, lock, lease, 0, false);
	lb_expect_err(release(c, lease), "not_held");

	/* The lock is really free: another session takes it at once, solo. */
	a = acq_ok(other, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	expect_solo_layout(r, lock, 0, "the other session's acquire");
	cr_assert_eq(lb_release(other, lb_str(a, "lease")), 0);
	lb_end();
}

/* ---- 5: extend of a solo holder ------------------------------------------------------ */

LB_TEST(layout, solo_extend_sets_ttl, 60)
{
	static const char lock[] = "lay-ext";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = client(b, LB_TCP, "ext");
	lb_client *other = client(b, LB_UNIX, "other");
	json_t *a = acq_ok(c, lock, AO(.ttl_ms = 3000, .wait_ms = 0, .watchdog = 0));
	const char *lease = lb_str(a, "lease");
	json_t *e, *in;
	long long left;

	e = extend(c, lease, 20000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 20000, "%s", lb_dump(e));
	in = lb_inspect(c, lock);
	left = lb_int(holder(in, 0), "ttl_ms");
	cr_assert(left > 15000 && left <= 20000, "after extend 20000: %s", lb_dump(in));
	left = hfield_ll(r, lock, "x") - redis_now_ms(r);
	cr_assert(left > 15000 && left <= 20000, "header x is %lld ms ahead {%s}", left,
	          header_text(r, lock));
	cr_assert_gt(redis_int(lb_redis_cmd(r, "PTTL %s", lkey(lock, NULL))), 20000,
	             "the header must outlive the extended holder");
	expect_solo_layout(r, lock, 0, "extend stays solo");

	/* extend sets, it does not add */
	e = extend(c, lease, 1000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 1000, "%s", lb_dump(e));
	in = lb_inspect(c, lock);
	left = lb_int(holder(in, 0), "ttl_ms");
	cr_assert(left > 0 && left <= 1000, "after extend 1000: %s", lb_dump(in));
	lb_expect_ok(extend(c, lease, 10000));

	/* Unknown tokens, from the holder's session and another one. */
	lb_expect_err(extend(c, "0123456789abcdef0123456789abcdef", 5000), "not_held");
	lb_expect_err(extend(other, "fedcba9876543210fedcba9876543210", 5000), "not_held");
	cr_assert_str_eq(hfield(r, lock, "o"), lease, "{%s}", header_text(r, lock));
	/* The token works from another session of the same broker. */
	e = extend(other, lease, 9000);
	lb_expect_ok(e);
	cr_assert_eq(lb_int(e, "ttl_ms"), 9000, "%s", lb_dump(e));

	cr_assert_eq(lb_release(c, lease), 0);
	lb_expect_err(extend(c, lease, 5000), "not_held");
	expect_solo_layout(r, lock, 0, "released");
	lb_end();
}

LB_TEST(layout, solo_max_hold_caps_extend, 60)
{
	static const char lock[] = "lay-cap";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = client(b, LB_TCP, "cap");
	int64_t t0 = lb_now_ms();
	json_t *a = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0, .max_hold_ms = 1500));
	const char *lease = lb_str(a, "lease");
	long long deadline, x;
	json_t *e, *in, *ev;

	cr_assert(lb_int(a, "ttl_ms") <= 1500 && lb_int(a, "ttl_ms") > 1000,
	          "ttl_ms capped by max_hold_ms: %s", lb_dump(a));
	expect_solo_layout(r, lock, 0, "a capped holder");
	deadline = hfield_ll(r, lock, "e");
	x = hfield_ll(r, lock, "x");
	cr_assert(deadline > 0 && x <= deadline, "expiry past the deadline {%s}", header_text(r, lock));

	e = extend(c, lease, 20000);
	lb_expect_ok(e);
	cr_assert(lb_int(e, "ttl_ms") <= 1500 && lb_int(e, "ttl_ms") > 0,
	          "extend must not pass max_hold_ms: %s", lb_dump(e));
	cr_assert_leq(hfield_ll(r, lock, "x"), deadline, "{%s}", header_text(r, lock));
	in = lb_inspect(c, lock);
	cr_assert_leq(lb_int(holder(in, 0), "ttl_ms"), 1500, "%s", lb_dump(in));

	ev = lb_next_event(c, 4000);
	cr_assert_not_null(ev, "no lost event within %lld ms", (long long)(lb_now_ms() - t0));
	cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s", lb_dump(ev));
	cr_assert_str_eq(lb_str(ev, "reason"), "max_hold", "%s", lb_dump(ev));
	cr_assert_geq(lb_now_ms() - t0, 1200, "lost after %lld ms", (long long)(lb_now_ms() - t0));
	lb_expect_err(release(c, lease), "not_held");
	lb_expect_err(extend(c, lease, 5000), "not_held");
	lb_expect_free(c, lock);
	a = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	expect_solo_layout(r, lock, 0, "a new holder after max_hold");
	cr_assert_str_eq(hfield(r, lock, "e"), "0", "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(c, lb_str(a, "lease")), 0);
	lb_end();
}

/* A detached token whose solo lease expired names a lock another lease now
 * holds solo: extend and release of it reach the fast paths with a foreign
 * id, and must leave the holder alone. */
LB_TEST(layout, foreign_token_on_solo_holder_is_not_held, 60)
{
	static const char lock[] = "lay-foreign";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *d = client(b, LB_TCP, "det");
	lb_client *c = client(b, LB_UNIX, "holder");
	json_t *a = acq_ok(d, lock, AO(.ttl_ms = 300, .wait_ms = 0, .detach = 1));
	const char *ld = lb_str(a, "lease");
	const char *lc;
	json_t *g, *in;
	char x[32];

	lb_sleep_ms(700);
	g = acq_ok(c, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	lc = lb_str(g, "lease");
	cr_assert_gt(lb_int(g, "fence"), lb_int(a, "fence"), "%s", lb_dump(g));
	expect_solo_layout(r, lock, 0, "the new holder");
	cr_assert_str_eq(hfield(r, lock, "o"), lc, "{%s}", header_text(r, lock));
	snprintf(x, sizeof(x), "%s", hfield(r, lock, "x"));

	lb_expect_err(extend(d, ld, 60000), "not_held");
	lb_expect_err(release(d, ld), "not_held");
	lb_expect_err(extend(c, ld, 60000), "not_held");
	cr_assert_str_eq(hfield(r, lock, "o"), lc, "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "x"), x, "a foreign extend moved the expiry {%s}",
	                 header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "c"), "1", "{%s}", header_text(r, lock));
	in = lb_inspect(d, lock);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "holder", "%s", lb_dump(in));
	cr_assert_eq(lb_release(c, lc), 0);
	lb_end();
}

/* A detached solo lease that expired with nobody after it: its own token's
 * release and extend find the stale header fields and answer not_held. */
LB_TEST(layout, expired_detached_solo_token_is_not_held, 60)
{
	static const char lock[] = "lay-stale";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *d = client(b, LB_TCP, "det");
	json_t *a = acq_ok(d, lock, AO(.ttl_ms = 300, .wait_ms = 0, .detach = 1));
	const char *ld = lb_str(a, "lease");
	json_t *g;

	lb_sleep_ms(700);
	lb_expect_err(extend(d, ld, 60000), "not_held");
	lb_expect_err(release(d, ld), "not_held");
	lb_expect_free(d, lock);
	expect_solo_layout(r, lock, 500, "after the stale token's release");
	g = acq_ok(d, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(g, "fence"), lb_int(a, "fence"), "%s", lb_dump(g));
	expect_solo_layout(r, lock, 0, "the next holder");
	cr_assert_str_eq(hfield(r, lock, "o"), lb_str(g, "lease"), "{%s}", header_text(r, lock));
	cr_assert_eq(lb_release(d, lb_str(g, "lease")), 0);
	lb_end();
}

/* ---- 6: an expired solo holder -------------------------------------------------------- */

LB_TEST(layout, expired_solo_holder_is_replaced_at_once, 60)
{
	static const char lock[] = "lay-exp";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "old");
	lb_client *cb = client(b, LB_UNIX, "new");
	int64_t t0 = lb_now_ms();
	json_t *a = acq_ok(ca, lock, AO(.ttl_ms = 300, .wait_ms = 0, .watchdog = 0));
	const char *la = lb_str(a, "lease");
	json_t *g, *in;
	int64_t t1;

	cr_assert_eq(lb_int(a, "ttl_ms"), 300, "%s", lb_dump(a));
	expect_solo_layout(r, lock, 0, "the short lease");
	lb_expect_lost(ca, la, t0, 2000, "a watchdog:false solo lease");
	while (lb_now_ms() - t0 < 500)
		lb_sleep_ms(20);
	in = lb_inspect(cb, lock);
	cr_assert_str_eq(lb_str(in, "state"), "free", "expired holder shown: %s", lb_dump(in));
	cr_assert_eq(lb_int(in, "fence"), lb_int(a, "fence"), "%s", lb_dump(in));

	t1 = lb_now_ms();
	g = acq_ok(cb, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_lt(lb_now_ms() - t1, 1000, "a wait_ms 0 acquire took %lld ms",
	             (long long)(lb_now_ms() - t1));
	cr_assert_gt(lb_int(g, "fence"), lb_int(a, "fence"), "%s", lb_dump(g));
	expect_solo_layout(r, lock, 0, "the new holder over the expired one");
	cr_assert_str_eq(hfield(r, lock, "o"), lb_str(g, "lease"), "{%s}", header_text(r, lock));
	cr_assert_str_eq(hfield(r, lock, "c"), "1", "{%s}", header_text(r, lock));

	lb_expect_err(release(ca, la), "not_held");
	lb_expect_err(extend(ca, la, 5000), "not_held");
	in = lb_inspect(ca, lock);
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "new", "%s", lb_dump(in));
	cr_assert_str_eq(hfield(r, lock, "o"), lb_str(g, "lease"), "{%s}", header_text(r, lock));
	/* The old session does not re-enter the new holder's lease. */
	lb_expect_err(acq(ca, lock, AO(.ttl_ms = 10000, .wait_ms = 0)), "timeout");
	cr_assert_eq(lb_release(cb, lb_str(g, "lease")), 0);
	lb_expect_free(ca, lock);
	lb_end();
}

/* ---- 7: a header lost while the model holds ------------------------------------------- */

LB_TEST(layout, lost_header_does_not_hide_model_holders, 60)
{
	static const char lock[] = "lay-lost";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "a");
	lb_client *cb = client(b, LB_TCP, "b");
	lb_client *cc = client(b, LB_UNIX, "c");
	json_t *a = acq_ok(ca, lock, AO(.mode = "shared", .ttl_ms = 20000, .wait_ms = 0));
	json_t *bb = acq_ok(cb, lock, AO(.mode = "shared", .ttl_ms = 20000, .wait_ms = 0));
	json_t *x, *in;

	expect_model_layout(r, lock, "two shared holders");
	cr_assert_eq(redis_int(lb_redis_cmd(r, "DEL %s", lkey(lock, NULL))), 1);
	cr_assert_not(lb_redis_key_exists(r, lkey(lock, NULL)));

	x = acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert(!lb_is_ok(x), "granted exclusive next to two shared holders whose header was "
	          "lost: %s", lb_dump(x));
	lb_expect_err(x, "timeout");
	x = acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	lb_expect_err(x, "timeout");
	in = lb_inspect(cc, lock);
	cr_assert_str_eq(lb_str(in, "state"), "shared", "%s", lb_dump(in));
	cr_assert_eq(lb_nholders(in), 2, "%s", lb_dump(in));
	cr_assert_null(hfield(r, lock, "o"), "a solo holder over the model {%s}", header_text(r, lock));

	cr_assert_eq(lb_release(ca, lb_str(a, "lease")), 0);
	lb_expect_err(acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0)), "timeout");
	cr_assert_eq(lb_release(cb, lb_str(bb, "lease")), 0);
	lb_expect_free(cc, lock);
	/* The fence went with the deleted header: nothing is left to keep. */
	{
		int64_t deadline = lb_now_ms() + 500;
		size_t n;

		while (lb_redis_count_lock_keys(r, "lb:", lock) > 0 && lb_now_ms() < deadline)
			lb_sleep_ms(20);
		cr_assert_eq(lb_redis_count_lock_keys(r, "lb:", lock), 0,
		             "both released: keys [%s] header {%s}", keys_text(r, lock, &n),
		             header_text(r, lock));
	}

	x = acq_ok(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert_gt(lb_int(x, "fence"), lb_int(bb, "fence"), "fence after a lost header: %s",
	             lb_dump(x));
	expect_solo_layout(r, lock, 0, "solo after the model emptied");
	cr_assert_eq(lb_release(cc, lb_str(x, "lease")), 0);
	lb_end();
}

/* The header and the holder keys are lost while a waiter is queued: a try
 * must not pass the queue (the fast path sees :q), and the waiter gets the
 * lock. */
LB_TEST(layout, lost_header_does_not_hide_the_queue, 60)
{
	static const char lock[] = "lay-lostq";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "a");
	lb_client *cb = client(b, LB_UNIX, "b");
	lb_client *cc = client(b, LB_TCP, "c");
	json_t *a = acq_ok(ca, lock, AO(.ttl_ms = 30000, .wait_ms = 0));
	json_t *idb, *x, *g, *in;

	idb = acq_send(cb, lock, AO(.ttl_ms = 20000));
	lb_wait_waiters(ca, lock, 1, 3000);
	expect_model_layout(r, lock, "A holds, B waits");
	cr_assert_eq(redis_int(lb_redis_cmd(r, "DEL %s %s %s", lkey(lock, NULL), lkey(lock, "h"),
	                                    lkey(lock, "i"))),
	             3);
	cr_assert(lb_redis_key_exists(r, lkey(lock, "q")));

	x = acq(cc, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
	cr_assert(!lb_is_ok(x), "a try passed the queued waiter after the header was lost: %s",
	          lb_dump(x));
	lb_expect_err(x, "timeout");
	g = lb_wait_response(cb, idb, 3000);
	lb_expect_ok(g);
	cr_assert_gt(lb_int(g, "fence"), lb_int(a, "fence"), "%s", lb_dump(g));
	in = lb_inspect(cc, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(holder(in, 0), "client"), "b", "%s", lb_dump(in));
	cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
	/* A's lease is gone from Redis. */
	lb_expect_err(extend(ca, lb_str(a, "lease"), 30000), "not_held");
	cr_assert_eq(lb_release(cb, lb_str(g, "lease")), 0);
	expect_solo_layout(r, lock, 500, "B released");
	lb_end();
}

/* ---- 8: fences across both layouts ---------------------------------------------------- */

LB_TEST(layout, fence_increases_across_solo_and_model_grants, 90)
{
	static const char lock[] = "lay-fence";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *cl[2] = {client(b, LB_TCP, "x"), client(b, LB_UNIX, "y")};
	json_int_t prev = 0;
	int grants = 0;

	for (int k = 0; k < 10; k++) {
		lb_client *first = cl[k % 2], *second = cl[(k + 1) % 2];
		json_t *a = acq_ok(first, lock, AO(.ttl_ms = 10000, .wait_ms = 0));
		json_t *id, *g;
		char fs[32];

		cr_assert_gt(lb_int(a, "fence"), prev, "round %d solo grant: %s after %lld", k,
		             lb_dump(a), (long long)prev);
		expect_solo_layout(r, lock, 0, "the solo grant");
		cr_assert_str_eq(hfield(r, lock, "o"), lb_str(a, "lease"), "round %d {%s}", k,
		                 header_text(r, lock));
		prev = lb_int(a, "fence");
		grants++;

		id = acq_send(second, lock, AO(.ttl_ms = 10000, .wait_ms = 10000));
		lb_wait_waiters(first, lock, 1, 3000);
		cr_assert_eq(lb_release(first, lb_str(a, "lease")), 0);
		g = lb_wait_response(second, id, 3000);
		lb_expect_ok(g);
		cr_assert_gt(lb_int(g, "fence"), prev, "round %d queued grant: %s after %lld", k,
		             lb_dump(g), (long long)prev);
		expect_model_layout(r, lock, "the queued grant");
		snprintf(fs, sizeof(fs), "%lld", (long long)lb_int(g, "fence"));
		cr_assert_str_eq(hfield(r, lock, "f"), fs, "round %d {%s}", k, header_text(r, lock));
		cr_assert_eq(lb_int(lb_inspect(first, lock), "fence"), lb_int(g, "fence"));
		prev = lb_int(g, "fence");
		grants++;

		cr_assert_eq(lb_release(second, lb_str(g, "lease")), 0);
		expect_solo_layout(r, lock, 500, "after the queued holder released");
	}
	cr_assert_eq(grants, 20);
	lb_end();
}

/* ---- 9: the fast paths' Redis calls ------------------------------------------------------ */

/* Commands a fast path may run (inside its script). */
static bool fast_cmd(const char *name)
{
	static const char *const ok[] = {"hmget", "hset", "hdel", "hincrby", "pexpire", "time",
	                                 "exists"};

	for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++)
		if (strcmp(name, ok[k]) == 0)
			return true;
	return false;
}

/* Reads INFO commandstats: the EVALSHA calls, the calls of fast-path data
 * commands, and asserts no other data command ran (the model was not
 * touched). */
static void count_calls(lb_redis *r, long long *evalsha, long long *data, const char *what)
{
	redisReply *rep = lb_redis_cmd(r, "INFO commandstats");
	const char *p;

	cr_assert_eq(rep->type, REDIS_REPLY_STRING);
	*evalsha = 0;
	*data = 0;
	for (p = strstr(rep->str, "cmdstat_"); p; p = strstr(p, "cmdstat_")) {
		char name[64];
		long long calls;

		p += strlen("cmdstat_");
		if (sscanf(p, "%63[^:]:calls=%lld", name, &calls) != 2)
			cr_assert_fail("cannot parse commandstats near '%.60s'", p);
		if (strcmp(name, "evalsha") == 0)
			*evalsha += calls;
		else if (fast_cmd(name))
			*data += calls;
		else if (strcmp(name, "info") != 0 && strncmp(name, "config", 6) != 0)
			cr_assert_fail("%s: command %s ran %lld times (not a fast path):\n%s", what, name,
			               calls, rep->str);
	}
}

static void reset_stats(lb_redis *r)
{
	redisReply *rep = lb_redis_cmd(r, "CONFIG RESETSTAT");

	cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "CONFIG RESETSTAT failed");
}

LB_TEST(layout, fast_paths_cost_few_redis_calls, 60)
{
	static const char lock[] = "lay-calls";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = client(b, LB_TCP, "calls");
	long long evalsha, data;
	json_t *a, *re, *e;

	/* Connected and idle: whatever the broker ran at start is done. */
	lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
	lb_sleep_ms(300);

	reset_stats(r);
	a = acq_ok(c, lock, AO(.ttl_ms = 60000, .wait_ms = 0));
	cr_assert_eq(lb_release(c, lb_str(a, "lease")), 0);
	count_calls(r, &evalsha, &data, "acquire + release of a new name");
	cr_assert_eq(evalsha, 2, "want 2 EVALSHA, got %lld", evalsha);
	cr_assert_leq(data, 10, "want at most 10 data commands, got %lld", data);
	cr_assert_geq(data, 2, "the scripts ran no data command? %lld", data);

	/* Once the name has a fence: acquire, two re-entries, extend, three
	 * releases, all fast. */
	reset_stats(r);
	a = acq_ok(c, lock, AO(.ttl_ms = 60000, .wait_ms = 0));
	re = acq(c, lock, AO(.ttl_ms = 60000, .wait_ms = 0));
	lb_expect_ok(re);
	cr_assert_eq(lb_int(re, "count"), 2, "%s", lb_dump(re));
	re = acq(c, lock, AO(.ttl_ms = 60000, .wait_ms = 0));
	lb_expect_ok(re);
	cr_assert_eq(lb_int(re, "count"), 3, "%s", lb_dump(re));
	e = extend(c, lb_str(a, "lease"), 50000);
	lb_expect_ok(e);
	cr_assert_eq(lb_release(c, lb_str(a, "lease")), 2);
	cr_assert_eq(lb_release(c, lb_str(a, "lease")), 1);
	cr_assert_eq(lb_release(c, lb_str(a, "lease")), 0);
	count_calls(r, &evalsha, &data, "acquire, re-entries, extend and releases");
	cr_assert_eq(evalsha, 7, "want 7 EVALSHA, got %lld", evalsha);
	cr_assert_leq(data, 7 * 4, "want at most 4 data commands per script, got %lld", data);
	expect_solo_layout(r, lock, 0, "after the fast ops");
	lb_end();
}

/* ---- the header's lifetime across layouts --------------------------------------------- */

/* 'z' promises the header lives at least until then, so a fast grant may
 * skip its PEXPIRE. A model script that sets a shorter lifetime must drop
 * it, or the next long solo lease would outlive its own header (and the
 * lock would look free while held). */
LB_TEST(layout, header_outlives_a_long_lease_after_the_model, 60)
{
	static const char lock[] = "lay-z";
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "z-a");
	lb_client *cb = client(b, LB_UNIX, "z-b");
	json_t *a = acq_ok(ca, lock, AO(.ttl_ms = 600000, .wait_ms = 0));
	long long pttl;

	expect_solo_layout(r, lock, 0, "a long solo lease");
	cr_assert_geq(hfield_ll(r, lock, "z"), hfield_ll(r, lock, "x") + 60000, "{%s}",
	              header_text(r, lock));
	/* A waiter takes the slow path: the holder moves into the model and
	 * 'z' goes. */
	lb_expect_err(acq(cb, lock, AO(.ttl_ms = 1000, .wait_ms = 50)), "timeout");
	expect_model_layout(r, lock, "after a waiter came and went");
	cr_assert_null(hfield(r, lock, "z"), "{%s}", header_text(r, lock));
	/* The model's last release leaves the header for the retention only. */
	cr_assert_eq(lb_release(ca, lb_str(a, "lease")), 0);
	pttl = redis_int(lb_redis_cmd(r, "PTTL %s", lkey(lock, NULL)));
	cr_assert(pttl > 0 && pttl <= 60000, "header PTTL %lld after the model emptied", pttl);
	/* So the next long solo lease must make the header live longer. */
	acq_ok(cb, lock, AO(.ttl_ms = 600000, .wait_ms = 0));
	expect_solo_layout(r, lock, 0, "a new long solo lease");
	pttl = redis_int(lb_redis_cmd(r, "PTTL %s", lkey(lock, NULL)));
	cr_assert_geq(pttl, 600000 + 60000 - 5000, "the header (PTTL %lld) must outlive the lease",
	              pttl);
	lb_end();
}

/* A try (wait_ms 0) against a solo holder it cannot join is answered by
 * the fast path and leaves the holder solo (so its renewals and release
 * stay fast); one that can join (a second shared holder, a second permit)
 * moves it into the model as before. */
LB_TEST(layout, failed_try_keeps_the_holder_solo, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *ca = client(b, LB_TCP, "try-a");
	lb_client *cb = client(b, LB_UNIX, "try-b");
	json_t *a = acq_ok(ca, "lay-try", AO(.ttl_ms = 10000, .wait_ms = 0));
	json_t *e, *s1, *p1;

	for (int k = 0; k < 3; k++) {
		e = acq(cb, "lay-try", AO(.ttl_ms = 10000, .wait_ms = 0));
		lb_expect_err(e, "timeout");
		lb_expect_err(acq(cb, "lay-try", AO(.mode = "shared", .ttl_ms = 10000, .wait_ms = 0)),
		              "timeout");
		lb_expect_err(acq(cb, "lay-try", AO(.limit = 2, .ttl_ms = 10000, .wait_ms = 0)),
		              "conflict");
	}
	expect_solo_layout(r, "lay-try", 0, "after failed tries");
	cr_assert_eq(lb_int(extend(ca, lb_str(a, "lease"), 20000), "ttl_ms"), 20000);
	cr_assert_eq(lb_release(ca, lb_str(a, "lease")), 0);
	lb_expect_free(cb, "lay-try");

	/* Shared: a second shared holder joins (model); an exclusive try fails. */
	s1 = acq_ok(ca, "lay-try-s", AO(.mode = "shared", .ttl_ms = 10000, .wait_ms = 0));
	lb_expect_err(acq(cb, "lay-try-s", AO(.ttl_ms = 10000, .wait_ms = 0)), "timeout");
	expect_solo_layout(r, "lay-try-s", 0, "a shared holder after an exclusive try");
	acq_ok(cb, "lay-try-s", AO(.mode = "shared", .ttl_ms = 10000, .wait_ms = 0));
	expect_model_layout(r, "lay-try-s", "two shared holders");
	(void)s1;

	/* Permits: limit 1 is full with one; limit 3 takes a second. */
	p1 = acq_ok(ca, "lay-try-p1", AO(.limit = 1, .ttl_ms = 10000, .wait_ms = 0));
	lb_expect_err(acq(cb, "lay-try-p1", AO(.limit = 1, .ttl_ms = 10000, .wait_ms = 0)), "timeout");
	expect_solo_layout(r, "lay-try-p1", 0, "a full semaphore of 1 after a try");
	acq_ok(ca, "lay-try-p3", AO(.limit = 3, .ttl_ms = 10000, .wait_ms = 0));
	acq_ok(cb, "lay-try-p3", AO(.limit = 3, .ttl_ms = 10000, .wait_ms = 0));
	expect_model_layout(r, "lay-try-p3", "two permits of 3");
	(void)p1;
	lb_end();
}
