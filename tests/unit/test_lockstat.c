/*
 * test_lockstat.c - the UI's per-lock grant table (broker/locks/lockstat.c)
 * when there are more lock names than slots: a hot lock stays while a
 * stream of one-off names passes through, a wake-up alone never takes a
 * slot, and a grant that misses a full table still counts.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "broker/base/timers.h"
#include "broker/locks/lockstat.h"

static uv_loop_t loop;

static void setup(void)
{
	cr_assert_eq(uv_loop_init(&loop), 0);
	timers_init(&loop);
	lockstat_start(&loop);
}

static void teardown(void)
{
	lockstat_stop();
	timers_close();
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
}

static void grant(const char *name)
{
	uint64_t now = timers_now();

	lockstat_grant(name, strlen(name), now, now, true);
}

TestSuite(lockstat, .init = setup, .fini = teardown);

Test(lockstat, a_hot_lock_stays_while_many_cold_names_pass)
{
	char name[32];

	for (int k = 0; k < 20; k++)
		grant("hot");
	lockstat_tick();
	/* Ten times the table's size of names, each granted once. */
	for (int k = 0; k < 10 * LOCKSTAT_SLOTS; k++) {
		snprintf(name, sizeof(name), "cold-%d", k);
		grant(name);
	}
	cr_assert_gt(lockstat_rate("hot", 3), 0, "the hot lock was evicted by one-off names");
	/* The newest one-off name is in the table: a miss still counts. */
	snprintf(name, sizeof(name), "cold-%d", 10 * LOCKSTAT_SLOTS - 1);
	lockstat_tick();
	cr_assert_gt(lockstat_rate(name, strlen(name)), 0);
}

Test(lockstat, a_wake_up_alone_takes_no_slot)
{
	lockstat_lock_t hot[LOCKSTAT_SLOTS];
	char name[32];
	size_t n;

	grant("granted");
	for (int k = 0; k < 4 * LOCKSTAT_SLOTS; k++) {
		snprintf(name, sizeof(name), "woken-%d", k);
		lockstat_wake(name, strlen(name));
	}
	lockstat_tick();
	n = lockstat_hot(hot, LOCKSTAT_SLOTS);
	cr_assert_eq(n, 1, "only the granted lock has a rate (%zu locks)", n);
	cr_assert_eq(hot[0].len, strlen("granted"));
	cr_assert_eq(memcmp(hot[0].name, "granted", hot[0].len), 0);
}
