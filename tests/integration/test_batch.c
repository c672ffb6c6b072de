/*
 * test_batch.c - lock calls that leave on one Redis connection in one loop
 * turn go as one script call (lua/batch.lua; broker/store/rpool_cmd.c),
 * and each behaves as it did alone (issue 29): the answers a pipeline
 * gets are the same with batches (--redis-batch-max 64, the default) and
 * without (0), one call's error fails that call only, and a batch whose
 * reply is lost is handled as each of its calls' lost replies.
 *
 * "--pool 1" puts every call of a broker on one connection, so the calls
 * of one pipelined write meet in one batch.
 */
#include "tests/integration/harness.h"

#include <stdio.h>
#include <string.h>

static long long evalsha_calls(lb_redis *r)
{
	return lb_info_number(lb_redis_cmd(r, "INFO commandstats"), "cmdstat_evalsha:calls=");
}

/* Eight acquires of eight locks, then their eight releases, each in one
 * write: every one answered as alone, in two script calls or so with
 * batches, sixteen without. */
static long long run_eight(lb_redis *r, lb_broker *b, const char *tag)
{
	lb_client *c = lb_connect(b, LB_TCP);
	char lines[4096], rel[4096];
	json_t *ans[8];
	size_t n = 0, m = 0;
	long long before;

	for (int k = 0; k < 8; k++)
		n += (size_t)snprintf(lines + n, sizeof(lines) - n,
		                      "{\"id\":%d,\"op\":\"acquire\",\"lock\":\"%s-%d\",\"wait_ms\":0}\n",
		                      k + 1, tag, k);
	before = evalsha_calls(r);
	lb_pipeline(c, lines, ans, 8, 10000);
	for (int k = 0; k < 8; k++) {
		cr_assert(lb_is_ok(ans[k]), "acquire %d: %s", k, lb_dump(ans[k]));
		cr_assert_eq(lb_int(ans[k], "count"), 1);
		m += (size_t)snprintf(rel + m, sizeof(rel) - m,
		                      "{\"id\":%d,\"op\":\"release\",\"lease\":\"%s\"}\n", k + 1,
		                      lb_str(ans[k], "lease"));
	}
	lb_pipeline(c, rel, ans, 8, 10000);
	for (int k = 0; k < 8; k++) {
		cr_assert(lb_is_ok(ans[k]), "release %d: %s", k, lb_dump(ans[k]));
		cr_assert_eq(lb_int(ans[k], "count"), 0);
	}
	return evalsha_calls(r) - before;
}

LB_TEST(batch, calls_of_one_turn_go_as_one_script_call, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *on = lb_broker_start(r, "--pool", "1", NULL);
	lb_broker *off = lb_broker_start(r, "--pool", "1", "--redis-batch-max", "0", NULL);
	long long with = run_eight(r, on, "on"), without = run_eight(r, off, "off");

	fprintf(stderr, "batch: 8 acquires + 8 releases in two writes: %lld script calls with "
	        "batches, %lld without\n", with, without);
	cr_assert_geq(without, 16, "each call alone: %lld", without);
	cr_assert_leq(with, 8, "no batch was made: %lld script calls for 16 lock calls", with);
	lb_end();
}

/* A lock whose header is a string (WRONGTYPE for its script) between two
 * good ones in one write: the good ones are granted, the bad one gets the
 * error it gets alone, and the locks after it are not touched by it. */
static long long expect_bad_in_the_middle(lb_redis *r, lb_broker *b, const char *tag, char *code,
                                          size_t code_len)
{
	lb_client *c = lb_connect(b, LB_TCP);
	char lines[1024];
	json_t *ans[3];
	long long before, calls;
	redisReply *v;

	lb_redis_cmd(r, "SET lb:{%s-bad} junk", tag);
	snprintf(lines, sizeof(lines),
	         "{\"id\":1,\"op\":\"acquire\",\"lock\":\"%s-a\",\"wait_ms\":0}\n"
	         "{\"id\":2,\"op\":\"acquire\",\"lock\":\"%s-bad\",\"wait_ms\":0}\n"
	         "{\"id\":3,\"op\":\"acquire\",\"lock\":\"%s-c\",\"wait_ms\":0}\n",
	         tag, tag, tag);
	before = evalsha_calls(r);
	lb_pipeline(c, lines, ans, 3, 10000);
	calls = evalsha_calls(r) - before;
	cr_assert(lb_is_ok(ans[0]), "the call before the bad one: %s", lb_dump(ans[0]));
	cr_assert(lb_is_ok(ans[2]), "the call after the bad one: %s", lb_dump(ans[2]));
	cr_assert(!lb_is_ok(ans[1]), "a lock whose key is a string was granted: %s", lb_dump(ans[1]));
	snprintf(code, code_len, "%s", lb_str(lb_get(ans[1], "error"), "code"));
	v = lb_redis_cmd(r, "GET lb:{%s-bad}", tag);
	cr_assert(v->type == REDIS_REPLY_STRING && strcmp(v->str, "junk") == 0, "the bad key changed");
	cr_assert_eq(lb_release(c, lb_str(ans[0], "lease")), 0);
	cr_assert_eq(lb_release(c, lb_str(ans[2], "lease")), 0);
	return calls;
}

LB_TEST(batch, an_error_fails_its_call_alone, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *on = lb_broker_start(r, "--pool", "1", NULL);
	lb_broker *off = lb_broker_start(r, "--pool", "1", "--redis-batch-max", "0", NULL);
	char with[64], without[64];
	/* (a canary check of either broker may fall in the count too) */
	long long calls_on = expect_bad_in_the_middle(r, on, "on", with, sizeof(with));
	long long calls_off = expect_bad_in_the_middle(r, off, "off", without, sizeof(without));

	fprintf(stderr, "batch: a bad lock between two good ones: %s (%lld script calls); without "
	        "batches %s (%lld)\n", with, calls_on, without, calls_off);
	cr_assert_leq(calls_on, 2, "the three acquires were not batched: %lld calls", calls_on);
	cr_assert_geq(calls_off, 3);
	cr_assert_str_eq(with, without, "the bad call's answer differs with batches");
	lb_end();
}

/* Batches by the thousand from many sessions at once, each session's
 * calls on its own locks: every answer as alone, nothing left held. */
LB_TEST(batch, many_sessions_pipelining, 60)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "2", NULL);
	lb_client *c[16];

	for (int i = 0; i < 16; i++)
		c[i] = lb_connect(b, LB_TCP);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 16; i++) {
			char lines[2048];
			size_t n = 0;
			for (int k = 0; k < 4; k++)
				n += (size_t)snprintf(lines + n, sizeof(lines) - n,
				                      "{\"id\":%d,\"op\":\"acquire\",\"lock\":\"m-%d-%d\","
				                      "\"wait_ms\":0}\n",
				                      k + 1, i, k);
			cr_assert(lb_send_raw(c[i], lines, n));
		}
		for (int i = 0; i < 16; i++) {
			json_t *ans[4];
			char rel[2048];
			size_t n = 0;
			for (int k = 0; k < 4; k++) {
				json_t *id = json_integer(k + 1);
				ans[k] = lb_wait_response(c[i], id, 10000);
				json_decref(id);
				cr_assert(lb_is_ok(ans[k]), "round %d session %d lock %d: %s", round, i, k,
				          lb_dump(ans[k]));
				cr_assert_eq(lb_int(ans[k], "count"), 1, "%s", lb_dump(ans[k]));
				n += (size_t)snprintf(rel + n, sizeof(rel) - n,
				                      "{\"id\":%d,\"op\":\"release\",\"lease\":\"%s\"}\n", k + 11,
				                      lb_str(ans[k], "lease"));
			}
			cr_assert(lb_send_raw(c[i], rel, n));
			for (int k = 0; k < 4; k++) {
				json_t *id = json_integer(k + 11), *a = lb_wait_response(c[i], id, 10000);
				json_decref(id);
				cr_assert(lb_is_ok(a) && lb_int(a, "count") == 0, "release: %s", lb_dump(a));
			}
		}
	}
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 4; k++) {
			char name[32];
			snprintf(name, sizeof(name), "m-%d-%d", i, k);
			cr_assert_eq(lb_nholders(lb_inspect(c[0], name)), 0, "%s is still held", name);
		}
	lb_end();
}

/* Redis lost its scripts (SCRIPT FLUSH) and a batch of a release of L, an
 * acquire of L by another owner and a release of M answers NOSCRIPT as a
 * whole: the scripts are loaded once and the three run again in their
 * order, so the acquire finds L free. */
LB_TEST(batch, a_batch_that_found_no_script_runs_again_in_order, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *a = lb_connect(b, LB_TCP);
	const char *l = lb_must_acquire(a, "nsL", 30000), *m = lb_must_acquire(a, "nsM", 30000);
	char lines[1024];
	json_t *ans[3];

	lb_redis_cmd(r, "SCRIPT FLUSH");
	snprintf(lines, sizeof(lines),
	         "{\"id\":1,\"op\":\"release\",\"lease\":\"%s\"}\n"
	         "{\"id\":2,\"op\":\"acquire\",\"lock\":\"nsL\",\"owner\":\"o2\",\"wait_ms\":0}\n"
	         "{\"id\":3,\"op\":\"release\",\"lease\":\"%s\"}\n",
	         l, m);
	lb_pipeline(a, lines, ans, 3, 10000);
	cr_assert(lb_is_ok(ans[0]) && lb_int(ans[0], "count") == 0, "release: %s", lb_dump(ans[0]));
	cr_assert(lb_is_ok(ans[1]), "the acquire behind the release: %s", lb_dump(ans[1]));
	cr_assert(lb_is_ok(ans[2]) && lb_int(ans[2], "count") == 0, "release: %s", lb_dump(ans[2]));
	cr_assert_eq(lb_nholders(lb_inspect(a, "nsM")), 0);
	cr_assert_eq(lb_release(a, lb_str(ans[1], "lease")), 0);
	lb_end();
}
