/*
 * rl: what the Redlock tests (issue 18, `lockbrokerd --redlock`) share on
 * top of the integration harness (tests/integration/harness.h).
 *
 * Each test starts its own independent redis-servers on TCP (the masters,
 * rl_masters_start), its own brokers on them
 * (lb_broker_start_redlock(m, n, ..., NULL)) and its clients; the harness'
 * teardown stops them all. A test declares
 *
 *     RL_TEST(suite, name, 60)
 *
 * which is LB_TEST. The tests stop and restart masters, so the binary
 * runs with --jobs 1 (the machine has few cores; timings matter here).
 *
 * Ownership: as in the harness (replies and JSON values handed out belong
 * to the harness and are freed by its teardown).
 */
#ifndef LB_TESTS_REDLOCK_RL_H
#define LB_TESTS_REDLOCK_RL_H

#include <stdbool.h>
#include <stddef.h>

#include "tests/integration/harness.h"

#define RL_TEST(suite, name, secs) LB_TEST(suite, name, secs)

#define RL_MAX 7

/* n independent redis-servers on TCP ports of 127.0.0.1 into m[0..n). */
void rl_masters_start(lb_redis **m, int n);
/* "127.0.0.1:PORT": how stats and metrics name master r. */
const char *rl_addr(const lb_redis *r);

/* The entry of master r in stats' redis_masters; fails the test when it
 * is not there. */
json_t *rl_master_entry(json_t *stats, const lb_redis *r);
/* Polls stats on c until master r's "up" is up; fails after timeout_ms. */
void rl_wait_master(lb_client *c, const lb_redis *r, bool up, int timeout_ms);

/* HGET lb:{name} field on master r: a string owned by rl (until the next
 * call), or NULL for nil. */
const char *rl_header(lb_redis *r, const char *name, const char *field);
/* Polls until lb:{name} has no 'o' (no solo holder) on every master of
 * m[0..n) that runs; fails after timeout_ms saying where it is left. */
void rl_wait_no_holder(lb_redis **m, int n, const char *name, int timeout_ms);

/* Top-level commands a master ran between two markers (MONITOR, as
 * lb_monitor, calls made inside scripts left out), sorted by what they
 * are about. */
typedef struct {
	redisContext *mon;
	int port;
	const char *lock; /* counted as "on the lock": the lines naming {lock} */
	long long top;         /* every command */
	long long evalsha;     /* of them EVALSHA */
	long long lock_evalsha; /* EVALSHA with {lock} among its arguments */
	long long canary;      /* EVALSHA on a broker's canary key */
	char sample[1200];     /* the commands that are neither, each cut short */
} rl_monitor;

void rl_monitor_start(rl_monitor *m, lb_redis *r, const char *lock);
void rl_monitor_stop(rl_monitor *m);

/* INFO commandstats' cmdstat_evalsha calls on r. */
long long rl_evalsha_calls(lb_redis *r);

/* The wait status of a command (lb_run_cmd) as "exit N" / "signal N". */
const char *rl_status_text(int status);

#endif
