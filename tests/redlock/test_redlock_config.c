/*
 * test_redlock_config.c - what --redlock (issue 18) refuses and what it
 * shows: shared locks and semaphores are invalid_argument; the flag is
 * refused at start-up (exit status 2, with a message) next to --redis,
 * with a number of masters other than 3, 5 or 7, with a master twice, or
 * with a URL that is not one Redis; stats and metrics name the mode and
 * every master.
 */
#include "tests/redlock/rl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* LB_AO(...) overrides its own defaults (harness.h). */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#else
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

RL_TEST(redlock_config, shared_and_limit_are_invalid_argument, 30)
{
	lb_redis *m[3];

	rl_masters_start(m, 3);
	lb_broker *b = lb_broker_start_redlock(m, 3, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	json_t *r = lb_acq_call(c, "rl-kind", LB_AO(.mode = "shared", .wait_ms = 0), 5000);
	lb_expect_err(r, "invalid_argument");
	cr_assert_not_null(strstr(lb_str(r, "error.message"), "edlock"), "%s", lb_dump(r));
	r = lb_acq_call(c, "rl-kind", LB_AO(.limit = 3, .wait_ms = 0), 5000);
	lb_expect_err(r, "invalid_argument");
	r = lb_acq_call(c, "rl-kind", LB_AO(.limit = 1, .wait_ms = 1000), 5000);
	lb_expect_err(r, "invalid_argument");
	/* Nothing was written for them, anywhere. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(lb_redis_count_lock_keys(m[i], "lb:", "rl-kind"), 0,
		             "keys of rl-kind on master %d", i);
	/* An exclusive lock of the same name is fine, also explicitly so. */
	r = lb_acq_call(c, "rl-kind", LB_AO(.mode = "exclusive", .wait_ms = 0), 5000);
	lb_expect_ok(r);
	cr_assert_eq(lb_release(c, lb_str(r, "lease")), 0);
	json_t *st = lb_stats(c);
	cr_assert_eq(lb_int(st, "leases"), 0, "%s", lb_dump(st));
	lb_end();
}

/* Runs the broker with the flags (shell words) and no Redis to talk to;
 * expects exit status 2 and msg in what it printed. timeout(1) keeps a
 * broker that wrongly starts from hanging the test. */
static void expect_refused(const char *flags, const char *msg)
{
	const char *bin = getenv("LB_BROKER_BIN");
	char cmd[3072];
	int status;

	if (!bin || !*bin)
		bin = "build/san/lockbrokerd";
	snprintf(cmd, sizeof(cmd),
	         "timeout -s KILL 10 %s %s --listen tcp://127.0.0.1:%d --log-level debug 2>&1", bin,
	         flags, lb_free_tcp_port());
	const char *out = lb_run_cmd(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2,
	          "%s: ended with %s, want exit 2; output:\n%s", flags, rl_status_text(status), out);
	cr_assert_not_null(strstr(out, msg), "%s: no \"%s\" in:\n%s", flags, msg, out);
}

RL_TEST(redlock_config, bad_flags_exit_with_status_2, 60)
{
	/* Ports where nothing listens: the broker must not get that far. */
	char three[256], two[256], four[512], seven[768], eight[1024], dup[256], sent[256];
	int p[8];

	for (int i = 0; i < 8; i++)
		p[i] = 1 + i; /* privileged, closed */
	snprintf(three, sizeof(three), "redis://127.0.0.1:%d,redis://127.0.0.1:%d,"
	                               "redis://127.0.0.1:%d", p[0], p[1], p[2]);
	snprintf(two, sizeof(two), "redis://127.0.0.1:%d,redis://127.0.0.1:%d", p[0], p[1]);
	snprintf(four, sizeof(four), "%s,redis://127.0.0.1:%d", three, p[3]);
	snprintf(seven, sizeof(seven), "%s,redis://127.0.0.1:%d,redis://127.0.0.1:%d,"
	                               "redis://127.0.0.1:%d", four, p[4], p[5], p[6]);
	snprintf(eight, sizeof(eight), "%s,redis://127.0.0.1:%d", seven, p[7]);
	/* one server twice (two of its dbs): one master with two votes */
	snprintf(dup, sizeof(dup), "redis://127.0.0.1:%d,redis://127.0.0.1:%d,redis://127.0.0.1:%d/2",
	         p[0], p[1], p[0]);
	snprintf(sent, sizeof(sent), "redis://127.0.0.1:%d,sentinel://127.0.0.1:26379/mymaster,"
	                             "redis://127.0.0.1:%d", p[0], p[1]);
	char flags[1536];

	snprintf(flags, sizeof(flags), "--redlock %s --redis redis://127.0.0.1:%d", three, p[3]);
	expect_refused(flags, "exclude each other");
	snprintf(flags, sizeof(flags), "--redis redis://127.0.0.1:%d --redlock %s", p[3], three);
	expect_refused(flags, "exclude each other");
	snprintf(flags, sizeof(flags), "--redlock %s", two);
	expect_refused(flags, "Redlock takes 3, 5 or 7");
	snprintf(flags, sizeof(flags), "--redlock %s", four);
	expect_refused(flags, "Redlock takes 3, 5 or 7");
	snprintf(flags, sizeof(flags), "--redlock %s", eight);
	expect_refused(flags, "more than 7 masters");
	snprintf(flags, sizeof(flags), "--redlock %s", dup);
	expect_refused(flags, "masters 1 and 3 are the same");
	snprintf(flags, sizeof(flags), "--redlock %s", sent);
	expect_refused(flags, "not a Sentinel set or a Cluster");
	snprintf(flags, sizeof(flags), "--redlock redis://127.0.0.1:%d,cluster://127.0.0.1:%d,"
	                               "redis://127.0.0.1:%d", p[0], p[1], p[2]);
	expect_refused(flags, "not a Sentinel set or a Cluster");
	snprintf(flags, sizeof(flags), "--redlock %s --redis-wait-replicas 1", three);
	expect_refused(flags, "--redis-wait-replicas");
	/* The same from a config file. */
	char path[256];
	snprintf(path, sizeof(path), "%s/redlock.json", lb_tmpdir());
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "{\"redlock\": \"%s\", \"redis\": \"redis://127.0.0.1:%d\"}\n", three, p[3]);
	fclose(f);
	snprintf(flags, sizeof(flags), "--config %s", path);
	expect_refused(flags, "exclude each other");
}

static const char *scrape(int port)
{
	char cmd[160];
	const char *text;
	int status;

	snprintf(cmd, sizeof(cmd), "curl -sS --max-time 5 http://127.0.0.1:%d/metrics", port);
	text = lb_run_cmd(cmd, &status);
	cr_assert_eq(status, 0, "curl failed: %s", text);
	return text;
}

static double master_up(const char *text, const lb_redis *r)
{
	char s[160];

	snprintf(s, sizeof(s), "lockbroker_redis_master_up{addr=\"%s\"}", rl_addr(r));
	return lb_metric_sample(text, s);
}

RL_TEST(redlock_config, stats_and_metrics_show_the_mode_and_every_master, 40)
{
	lb_redis *m[5];
	int mport = lb_free_tcp_port();
	char url[64];
	const char *text = NULL;

	rl_masters_start(m, 5);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", mport);
	lb_broker *b = lb_broker_start_redlock(m, 5, "--metrics", url, NULL);
	lb_client *c = lb_connect(b, LB_TCP);

	/* Ready with a quorum; the others serve once their canaries are
	 * primed, a round trip later. */
	for (int i = 0; i < 5; i++)
		rl_wait_master(c, m[i], true, 5000);
	json_t *st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
	cr_assert_str_eq(lb_str(st, "redis_mode"), "redlock", "%s", lb_dump(st));
	json_t *ms = lb_get(st, "redis_masters");
	cr_assert(json_is_array(ms) && json_array_size(ms) == 5, "%s", lb_dump(st));
	for (int i = 0; i < 5; i++) {
		/* in the order --redlock gave them */
		json_t *e = json_array_get(ms, (size_t)i);
		cr_assert_str_eq(lb_str(e, "addr"), rl_addr(m[i]), "%s", lb_dump(st));
		cr_assert(lb_bool(e, "up"), "%s", lb_dump(st));
	}

	text = scrape(mport);
	cr_assert_eq(lb_metric_sample(text, "lockbroker_redis_mode{mode=\"redlock\"}"), 1,
	             "no redlock mode in:\n%s", text);
	cr_assert_lt(lb_metric_sample(text, "lockbroker_redis_mode{mode=\"single\"}"), 0, "%s", text);
	cr_assert_eq(lb_metric_sample(text, "lockbroker_redis_up"), 1, "%s", text);
	cr_assert_not_null(strstr(text, "# TYPE lockbroker_redis_master_up gauge"), "%s", text);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(master_up(text, m[i]), 1, "master %d not up:\n%s", i, text);

	/* Two masters go: shown down, the store still up (3 of 5). */
	lb_redis_stop(m[1]);
	lb_redis_stop(m[4]);
	rl_wait_master(c, m[1], false, 3000);
	rl_wait_master(c, m[4], false, 3000);
	for (int t = 0; t < 60; t++) {
		text = scrape(mport);
		if (master_up(text, m[1]) == 0 && master_up(text, m[4]) == 0)
			break;
		lb_sleep_ms(50);
	}
	cr_assert_eq(master_up(text, m[1]), 0, "%s", text);
	cr_assert_eq(master_up(text, m[4]), 0, "%s", text);
	cr_assert_eq(master_up(text, m[0]), 1, "%s", text);
	cr_assert_eq(lb_metric_sample(text, "lockbroker_redis_up"), 1, "%s", text);
	st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
	/* A third: no quorum, the store is down. */
	lb_redis_stop(m[2]);
	rl_wait_master(c, m[2], false, 3000);
	st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "down", "3 of 5 down: %s", lb_dump(st));
	text = scrape(mport);
	cr_assert_eq(lb_metric_sample(text, "lockbroker_redis_up"), 0, "%s", text);
	json_t *p = lb_call(c, "{s:s}", "op", "ping");
	cr_assert_str_eq(lb_str(p, "redis"), "down", "%s", lb_dump(p));
	lb_redis_restart(m[2]);
	rl_wait_master(c, m[2], true, 5000);
	st = lb_stats(c);
	cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
	lb_end();
}
