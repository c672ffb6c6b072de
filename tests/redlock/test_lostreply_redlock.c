/*
 * test_lostreply_redlock.c - lost replies under --redlock (issue 26, point
 * 9): "`unavailable` must mean 'no effect', and no `not_held` without
 * `lost`."
 *
 * The technique of tests/integration/test_lostreply.c (tests/common/
 * cutreply.h) on the masters: they sleep (DEBUG SLEEP 0.6), the client's
 * request is written to them, and the broker's command connections to them
 * are killed by a connection that wrote CLIENT KILL after the broker wrote
 * the script: the script runs, its reply is lost. Cut on every master of
 * three (no master answers), and on a majority (two of three: the third
 * answers, which is no quorum). The broker has to find out what happened
 * and answer exactly that:
 *
 *   release (1 -> 0)   ok, count 0; the lock is free; a second release
 *                      not_held
 *   release of 1 of 2  ok, count 1; still held at count 1; one more frees it
 *   extend             ok; the lease lives past its old end
 *   re-entry           ok, count 2; two releases free it
 *   try (wait_ms 0)    ok and held, or timeout and the lock free at once
 *
 * and the holder never hears an event. The stall: every master is stopped
 * (SIGSTOP) for 3 s, past the broker's 2 s command timeout, with a release
 * in flight; the release answers ok, count 0, and the lock is free.
 */
#include "tests/common/cutreply.h"
#include "tests/redlock/rl.h"

#include <signal.h>

static lb_redis *masters[3];

static int port_of(const lb_redis *r)
{
	const char *colon = strrchr(rl_addr(r), ':');

	cr_assert_not_null(colon);
	return atoi(colon + 1);
}

/* Three masters, a broker on them, its two clients; the replies of the
 * first ncut masters are cut. */
static void rl_case(cut_case *k, const char *lock, int ncut)
{
	lb_broker *b;

	rl_masters_start(masters, 3);
	b = lb_broker_start_redlock(masters, 3, NULL);
	k->a = lb_connect(b, LB_TCP);
	k->o = lb_connect(b, LB_TCP);
	k->lock = lock;
	for (int i = 0; i < ncut; i++)
		k->ports[i] = port_of(masters[i]);
	k->nports = ncut;
	k->sleep_ms = 600;
	k->broker_pid = lb_broker_pid(b);
}

#define CUT_TEST(what, body, n, suffix)                                                \
	RL_TEST(lostreply_redlock, what##_##suffix, 60)                                    \
	{                                                                                  \
		cut_case k = {0};                                                              \
		rl_case(&k, "rl-" #what, n);                                                   \
		body(&k);                                                                      \
		lb_end();                                                                      \
	}

CUT_TEST(a_release_whose_reply_was_cut_answers_released, cut_case_release, 3, on_every_master)
CUT_TEST(a_release_of_one_level_whose_reply_was_cut_counts_once, cut_case_release_level, 3,
         on_every_master)
CUT_TEST(an_extend_whose_reply_was_cut_answers_extended, cut_case_extend, 3, on_every_master)
CUT_TEST(a_reentry_whose_reply_was_cut_counts_once, cut_case_reentry, 3, on_every_master)
CUT_TEST(a_try_whose_reply_was_cut_holds_or_leaves_free, cut_case_try, 3, on_every_master)

CUT_TEST(a_release_whose_reply_was_cut_answers_released, cut_case_release, 2, on_a_majority)
CUT_TEST(a_release_of_one_level_whose_reply_was_cut_counts_once, cut_case_release_level, 2,
         on_a_majority)
CUT_TEST(an_extend_whose_reply_was_cut_answers_extended, cut_case_extend, 2, on_a_majority)
CUT_TEST(a_reentry_whose_reply_was_cut_counts_once, cut_case_reentry, 2, on_a_majority)
CUT_TEST(a_try_whose_reply_was_cut_holds_or_leaves_free, cut_case_try, 2, on_a_majority)

/* ---- the stall ------------------------------------------------------------- */

static void freeze(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kill(lb_redis_pid(masters[i]), SIGSTOP), 0);
}

static void thaw(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kill(lb_redis_pid(masters[i]), SIGCONT), 0);
}

#define RL_STALL_TEST(name, body)                                                        \
	RL_TEST(lostreply_redlock, name, 60)                                               \
	{                                                                                  \
		cut_case k = {0};                                                              \
		rl_case(&k, "rl-" #name, 3);                                                   \
		k.freeze = freeze;                                                             \
		k.thaw = thaw;                                                                 \
		body(&k);                                                                      \
		lb_end();                                                                      \
	}

RL_STALL_TEST(a_release_through_a_stall_of_every_master_answers_released, cut_case_stall)
RL_STALL_TEST(a_release_of_one_level_through_a_stall_counts_once, cut_case_release_level)
RL_STALL_TEST(an_extend_through_a_stall_answers_extended, cut_case_extend)
RL_STALL_TEST(a_reentry_through_a_stall_counts_once, cut_case_reentry)
RL_STALL_TEST(a_try_through_a_stall_holds_or_leaves_free, cut_case_try)

/* ---- a detached lease ------------------------------------------------------ */

/* Its release looks the lock up by the token's pointer first (a pointer
 * found on any master answers). On a majority: the third master, not cut,
 * answers that lookup at once, then the release script goes out and the
 * replies of the first two are cut. On every master: the lookup is
 * answered (the broker stopped meanwhile, cut_second_replies), the release
 * script's replies are cut on all three. */
static bool any_token(const char *token)
{
	(void)token;
	return true;
}

static void detached_release_majority(const cut_case *k)
{
	cut_case_detached_release(k, any_token);
}

static void detached_release_all(const cut_case *k)
{
	cut_case_detached_release(k, NULL);
}

CUT_TEST(a_detached_release_whose_reply_was_cut_answers_released, detached_release_all, 3,
         on_every_master)
CUT_TEST(a_detached_release_whose_reply_was_cut_answers_released, detached_release_majority, 2,
         on_a_majority)

/* ---- a re-entry a quorum never answered ------------------------------------ */

static void freeze_two(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kill(lb_redis_pid(masters[i]), SIGSTOP), 0);
}

static void thaw_two(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kill(lb_redis_pid(masters[i]), SIGCONT), 0);
}

/* Two masters of three stopped for longer than a master's copy of a call
 * is resent (30 s) while a re-entry is on its way: the third answers count
 * 2, no quorum does, and the re-entry answers unavailable. On waking, the
 * two run the re-entry the broker wrote to them before it gave up (it sat
 * in their sockets): without more, the lock is held at count 2 on every
 * master while the holder holds one level, and its one release answers
 * count 1. unavailable means no effect: the broker takes the re-entry back
 * wherever it ran, so the one release answers 0 and frees the lock. */
RL_TEST(lostreply_redlock, a_reentry_no_quorum_answered_is_taken_back, 120)
{
	cut_case k = {0};
	const char *lease;
	char line[600];
	json_t *g, *rl;

	rl_case(&k, "rl-reentry-noquorum", 0);
	k.freeze = freeze_two;
	k.thaw = thaw_two;
	lease = lb_str(cut_grant(&k, 120000, false), "lease");
	freeze_two(NULL);
	snprintf(line, sizeof(line), "{\"id\":\"re\",\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0,"
	         "\"ttl_ms\":120000}", k.lock);
	cr_assert(lb_send_line(k.a, line));
	g = cut_wait_id(k.a, "re", 45000);
	thaw_two(NULL);
	cr_assert(lb_is_err(g, "unavailable"), "a re-entry no quorum answered: %s", lb_dump(g));
	/* The two woke and ran what sat in their sockets; the broker's
	 * connections to them come back. */
	rl_wait_master(k.o, masters[0], true, 20000);
	rl_wait_master(k.o, masters[1], true, 20000);
	lb_sleep_ms(500);
	cr_assert_eq(lb_int(json_array_get(lb_get(lb_inspect(k.o, k.lock), "holders"), 0), "count"), 1,
	             "after an unavailable re-entry: %s", lb_dump(lb_inspect(k.o, k.lock)));
	rl = cut_release(&k, lease);
	cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 0,
	          "the one level held, released after an unavailable re-entry: %s", lb_dump(rl));
	cut_expect_free(&k, 5000);
	cut_expect_not_held(&k, lease);
	lb_end();
}
