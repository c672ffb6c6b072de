/*
 * Leader election on one Redis (issue 27, point 1): an exclusive lock
 * whose holder publishes a value (acquire's `value`), changes it without a
 * new term (`proclaim`), and `inspect` answers who leads in which term.
 * The value lives in Redis with the lease: a second broker sees it, a
 * campaign queued behind the leader brings its own, and a restart from an
 * older snapshot gets the answered value again from the broker's check.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *campaign(lb_client *c, const char *lock, const char *value, int wait_ms)
{
	return lb_call(c, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock, "value", value,
	               "wait_ms", wait_ms, "ttl_ms", 30000);
}

static json_t *proclaim(lb_client *c, const char *lease, const char *value)
{
	return lb_call(c, "{s:s, s:s, s:s}", "op", "proclaim", "lease", lease, "value", value);
}

/* The first holder of an inspect answer. */
static json_t *leader_of(lb_client *c, const char *lock)
{
	json_t *in = lb_inspect(c, lock);
	cr_assert_eq(lb_nholders(in), 1, "%s", lb_dump(in));
	cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
	return json_array_get(lb_get(in, "holders"), 0);
}

static void expect_value(lb_client *c, const char *lock, const char *value)
{
	json_t *h = leader_of(c, lock);
	json_t *v = json_object_get(h, "value");
	cr_assert(json_is_string(v), "no value shown: %s", lb_dump(h));
	cr_assert_str_eq(json_string_value(v), value, "%s", lb_dump(h));
}

LB_TEST(election, hello_lists_the_features, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *h = lb_call(c, "{s:s}", "op", "hello");
	json_t *f = lb_get(h, "features");
	bool value = false, proclaim_ = false;

	cr_assert(json_is_array(f), "%s", lb_dump(h));
	for (size_t k = 0; k < json_array_size(f); k++) {
		const char *s = json_string_value(json_array_get(f, k));
		cr_assert(s != NULL, "%s", lb_dump(h));
		value |= strcmp(s, "value") == 0;
		proclaim_ |= strcmp(s, "proclaim") == 0;
	}
	cr_assert(value && proclaim_, "%s", lb_dump(h));
	lb_end();
}

/* A leader's value on a second broker; a proclaim keeps the term; a
 * re-entry keeps the value; resigning leaves no value behind. */
LB_TEST(election, the_leader_publishes_a_value_and_proclaims_another_in_its_term, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b1, LB_TCP), *o = lb_connect(b2, LB_UNIX);
	json_t *g = campaign(a, "sched", "10.0.0.1:8080", 0), *p;
	const char *lease;
	int64_t term;

	lb_expect_ok(g);
	lease = lb_str(g, "lease");
	term = lb_int(g, "fence");
	expect_value(o, "sched", "10.0.0.1:8080");
	cr_assert_eq(lb_int(lb_inspect(o, "sched"), "fence"), term);

	p = proclaim(a, lease, "10.0.0.2:8080");
	lb_expect_ok(p);
	cr_assert_eq(lb_int(p, "fence"), term, "a proclaim made a new term: %s", lb_dump(p));
	expect_value(o, "sched", "10.0.0.2:8080");
	cr_assert_eq(lb_int(lb_inspect(o, "sched"), "fence"), term);

	/* A re-entry (same session, same owner) leaves the value alone. */
	json_t *again = campaign(a, "sched", "ignored", 0);
	lb_expect_ok(again);
	cr_assert_eq(lb_int(again, "count"), 2);
	cr_assert_str_eq(lb_str(again, "lease"), lease);
	expect_value(o, "sched", "10.0.0.2:8080");

	/* Proclaim from another session of the broker, by the token (a
	 * lease's right); a broker that does not hold it knows no such lease. */
	lb_client *a2 = lb_connect(b1, LB_UNIX);
	lb_expect_ok(proclaim(a2, lease, ""));
	expect_value(a, "sched", "");
	lb_expect_err(proclaim(o, lease, "elsewhere"), "not_held");
	expect_value(a, "sched", "");

	cr_assert_eq(lb_release(a, lease), 1);
	cr_assert_eq(lb_release(a, lease), 0);
	lb_expect_free(o, "sched");
	lb_expect_err(proclaim(a, lease, "late"), "not_held");

	/* A plain exclusive holder has no value: none is shown. */
	const char *plain = lb_must_acquire(o, "sched", 30000);
	json_t *h = leader_of(a, "sched");
	cr_assert_null(json_object_get(h, "value"), "%s", lb_dump(h));
	lb_expect_ok(proclaim(o, plain, "now"));
	expect_value(a, "sched", "now");
	lb_end();
}

/* A campaign queued behind the leader (on another broker) is granted with
 * its own value when the leader resigns, in a new term; the leader's
 * proclaim while someone waits (the holder then lives in the lock's full
 * model, not its fast path) shows too. */
LB_TEST(election, a_queued_campaign_leads_with_its_value_in_a_new_term, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b1, LB_TCP), *b = lb_connect(b2, LB_TCP), *o = lb_connect(b2, LB_TCP);
	json_t *g = campaign(a, "primary", "node-a", 0), *bid, *gb;
	const char *lease;

	lb_expect_ok(g);
	lease = lb_str(g, "lease");
	bid = lb_send_req(b, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", "primary", "value",
	                  "node-b", "ttl_ms", 30000);
	for (int k = 0; k < 100 && lb_int(lb_inspect(o, "primary"), "waiters") < 1; k++)
		lb_sleep_ms(20);
	cr_assert_eq(lb_int(lb_inspect(o, "primary"), "waiters"), 1);

	lb_expect_ok(proclaim(a, lease, "node-a/2"));
	expect_value(o, "primary", "node-a/2");

	cr_assert_eq(lb_release(a, lease), 0);
	gb = lb_wait_response(b, bid, 10000);
	lb_expect_ok(gb);
	cr_assert_gt(lb_int(gb, "fence"), lb_int(g, "fence"), "no new term: %s", lb_dump(gb));
	expect_value(o, "primary", "node-b");
	lb_expect_ok(proclaim(b, lb_str(gb, "lease"), "node-b/2"));
	expect_value(a, "primary", "node-b/2");
	lb_end();
}

/* The bounds and the errors PROTOCOL.md names. */
LB_TEST(election, bad_values_and_proclaims_get_the_named_errors, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	char *big = malloc(4098);
	json_t *g;

	memset(big, 'v', 4097);
	big[4097] = '\0';
	lb_expect_err(lb_call(c, "{s:s, s:s, s:s, s:s}", "op", "acquire", "lock", "e", "mode", "shared",
	                      "value", "x"),
	              "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:i, s:s}", "op", "acquire", "lock", "e", "limit", 2, "value",
	                      "x"),
	              "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "e", "value", 7),
	              "invalid_argument");
	lb_expect_err(campaign(c, "e", big, 0), "invalid_argument");
	big[4096] = '\0'; /* 4096 bytes: the bound itself */
	g = campaign(c, "e", big, 0);
	lb_expect_ok(g);
	expect_value(c, "e", big);
	/* null is the same as absent */
	lb_expect_ok(lb_call(c, "{s:s, s:s, s:n, s:i}", "op", "acquire", "lock", "e2", "value", "wait_ms",
	                     0));
	cr_assert_null(json_object_get(leader_of(c, "e2"), "value"));

	/* proclaim: fields, then the lease */
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "proclaim", "lease", lb_str(g, "lease")),
	              "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s}", "op", "proclaim", "value", "x"), "invalid_argument");
	lb_expect_err(lb_call(c, "{s:s, s:s, s:s, s:i}", "op", "proclaim", "lease", lb_str(g, "lease"),
	                      "value", "x", "ttl_ms", 100),
	              "invalid_argument");
	big[4096] = 'v';
	lb_expect_err(proclaim(c, lb_str(g, "lease"), big), "invalid_argument");
	big[4096] = '\0';
	expect_value(c, "e", big); /* unchanged */
	lb_expect_err(proclaim(c, "0123456789abcdef0123456789abcdef", "x"), "not_held");
	lb_expect_err(proclaim(c, "not-a-token", "x"), "not_held");

	/* Only an exclusive holder has a value. */
	json_t *sh = lb_call(c, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", "sh", "mode", "shared",
	                     "wait_ms", 0);
	lb_expect_ok(sh);
	lb_expect_err(proclaim(c, lb_str(sh, "lease"), "x"), "invalid_argument");
	json_t *pm = lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "sem", "limit", 2,
	                     "wait_ms", 0);
	lb_expect_ok(pm);
	lb_expect_err(proclaim(c, lb_str(pm, "lease"), "x"), "invalid_argument");

	/* A lost lease: not_held, saying it was lost. */
	json_t *lost = lb_call(c, "{s:s, s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "gone", "value",
	                       "v", "ttl_ms", 300, "wait_ms", 0);
	lb_expect_ok(lost);
	lb_redis_del_lock_keys(r, "lb:", "gone");
	json_t *ev = lb_next_event(c, 3000);
	cr_assert(ev && strcmp(lb_str(ev, "event"), "lost") == 0, "%s", ev ? lb_dump(ev) : "no event");
	json_t *nh = proclaim(c, lb_str(lost, "lease"), "x");
	lb_expect_err(nh, "not_held");
	cr_assert(strstr(lb_str(nh, "error.message"), "lost") != NULL, "%s", lb_dump(nh));
	free(big);
	lb_end();
}

/* A value is bytes as JSON carries them: a NUL, non-ASCII, and the empty
 * string (present, unlike no value). */
LB_TEST(election, values_keep_every_byte, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	json_t *g, *in, *v;

	lb_send_line(c, "{\"id\":1,\"op\":\"acquire\",\"lock\":\"nul\",\"wait_ms\":0,"
	                "\"value\":\"a\\u0000b\\u00e9\"}");
	g = lb_read_msg(c, 5000);
	lb_expect_ok(g);
	in = lb_inspect(c, "nul");
	v = json_object_get(json_array_get(lb_get(in, "holders"), 0), "value");
	cr_assert(json_is_string(v), "%s", lb_dump(in));
	cr_assert_eq(json_string_length(v), 5, "%s", lb_dump(in));
	cr_assert(memcmp(json_string_value(v), "a\0b\xc3\xa9", 5) == 0, "%s", lb_dump(in));
	lb_expect_ok(proclaim(c, lb_str(g, "lease"), ""));
	expect_value(c, "nul", "");
	lb_end();
}

/* A detached leader: its value, and a proclaim from any session that knows
 * the token (through the token's pointer). */
LB_TEST(election, a_detached_leader_proclaims_from_another_session, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b1 = lb_broker_start(r, NULL), *b2 = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(b1, LB_TCP), *o = lb_connect(b2, LB_TCP);
	json_t *g = lb_call(a, "{s:s, s:s, s:s, s:b, s:i, s:i}", "op", "acquire", "lock", "det", "value",
	                    "first", "detach", 1, "ttl_ms", 30000, "wait_ms", 0);

	lb_expect_ok(g);
	lb_close(a);
	expect_value(o, "det", "first");
	json_t *p = proclaim(o, lb_str(g, "lease"), "second");
	lb_expect_ok(p);
	cr_assert_eq(lb_int(p, "fence"), lb_int(g, "fence"));
	expect_value(o, "det", "second");
	cr_assert_eq(lb_release(o, lb_str(g, "lease")), 0);
	lb_expect_err(proclaim(o, lb_str(g, "lease"), "third"), "not_held");
	lb_end();
}

/* redis-server restarted from a snapshot older than an answered proclaim:
 * the broker's check after the restart writes the value again (with the
 * op seq, as it replays a count), before anything else runs there. */
LB_TEST(election, a_proclaim_the_snapshot_missed_is_replayed, 40)
{
	lb_redis *r = lb_redis_start(true);
	lb_broker *ba = lb_broker_start(r, NULL), *bb = lb_broker_start(r, NULL);
	lb_client *a = lb_connect(ba, LB_TCP), *b = lb_connect(bb, LB_TCP);
	json_t *g = campaign(a, "snapv", "before", 0);

	lb_expect_ok(g);
	redisReply *saved = lb_redis_cmd(r, "SAVE");
	cr_assert_eq(saved->type, REDIS_REPLY_STATUS, "SAVE failed");
	lb_expect_ok(proclaim(a, lb_str(g, "lease"), "after"));
	lb_redis_restart(r);
	redisReply *v = lb_redis_cmd(r, "HGET lb:{snapv} V");
	cr_assert(v->type == REDIS_REPLY_STRING && strcmp(v->str, "=before") == 0,
	          "the snapshot is not older than the proclaim");

	json_t *probe = lb_acquire_within(a, "snapv-probe", 30000, 10000);
	lb_expect_ok(probe);
	lb_release(a, lb_str(probe, "lease"));
	expect_value(b, "snapv", "after");
	cr_assert_null(lb_next_event(a, 200), "the leader was told something");
	lb_end();
}
