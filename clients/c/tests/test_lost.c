/*
 * test_lost.c - lost leases: Redis loses the lock behind the broker's back
 * while the holder "works" (lbc_poll reports it, lbc_release returns
 * LBC_LOST), a watchdog-off lease that expires, max_hold, and lbc_close
 * with leases held.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Polls until a loss is reported or timeout_ms passed; returns the sum. */
static int poll_for_loss(lbc_client_t *c, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;
	int n = 0;

	while (n == 0 && now_ms() < deadline)
		n = lbc_poll(c, 100, NULL); /* "work" in slices, looking in between */
	return n;
}

Test(lost, redis_loses_the_lock_while_working, .timeout = 15)
{
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec};
	lbc_client_t *c = must_connect(NEED_BROKER(), &o);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "lost"),
	                              &(lbc_acquire_opts_t){.ttl_ms = 600, .wait_ms = LBC_NO_WAIT});
	int64_t fence = lbc_lease_fence(l);
	char token[200];
	lbc_error_t err;

	snprintf(token, sizeof(token), "%s", lbc_lease_token(l));
	cr_assert_eq(lbc_poll(c, 0, NULL), 0, "nothing lost yet");
	cr_assert_geq(redis_delete_lock(name), 1);
	cr_assert_geq(poll_for_loss(c, 5000), 1, "lbc_poll reports the loss");
	cr_assert(lbc_lease_lost(l));
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_GONE, "reason %s",
	             lbc_lost_reason_name(lbc_lease_lost_reason(l)));
	cr_assert_eq(lbc_lease_check(l, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_GONE);
	cr_assert_eq(lbc_poll(c, 0, NULL), 0, "each loss is reported once");
	recorder_t r = recorder_get(&rec);
	cr_assert_eq(r.lost, 1);
	cr_assert_str_eq(r.last_lost_lease, token);
	cr_assert_str_eq(r.last_lost_reason, "gone");
	/* leaving the scope returns the loss, not a release that "worked" */
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.status, LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_GONE);
	cr_assert_str_eq(err.code, "lost");
	/* the lock is free again, with a greater fence */
	lbc_lease_t *again = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 2000});
	cr_assert_gt(lbc_lease_fence(again), fence);
	cr_assert_eq(lbc_release(c, again, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(lost, watchdog_off_lease_expires, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "expire"),
	                              &(lbc_acquire_opts_t){.ttl_ms = 300, .watchdog = LBC_OFF,
	                                                    .wait_ms = LBC_NO_WAIT});
	lbc_error_t err;

	cr_assert_eq(lbc_poll(c, 3000, NULL), 1, "lbc_poll returns at the loss");
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_EXPIRED);
	cr_assert_eq(lbc_extend(c, l, 1000, NULL, &err), LBC_LOST, "a lost token is not sent again");
	cr_assert_not(err.from_broker);
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_EXPIRED);
	lbc_close(c);
}

Test(lost, max_hold_ends_the_lease, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "maxhold"),
	                              &(lbc_acquire_opts_t){.max_hold_ms = 300, .wait_ms = LBC_NO_WAIT});

	cr_assert_leq(lbc_lease_ttl_ms(l), 300);
	cr_assert_eq(lbc_poll(c, 3000, NULL), 1);
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_MAX_HOLD);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	lbc_close(c);
}

Test(lost, a_loss_seen_by_another_call, .timeout = 10)
{
	/* the loss arrives while the thread is in another call (ping): the
	 * mark is made there, and the next lbc_poll still reports it */
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "seen"),
	                              &(lbc_acquire_opts_t){.max_hold_ms = 200, .wait_ms = LBC_NO_WAIT});
	int64_t deadline = now_ms() + 3000;

	while (!lbc_lease_lost(l) && now_ms() < deadline) {
		cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
		sleep_ms(50);
	}
	cr_assert(lbc_lease_lost(l));
	cr_assert_eq(lbc_poll(c, 0, NULL), 1);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	lbc_close(c);
}

Test(lost, close_with_leases_held, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	char a[96], b[96];
	lbc_acquire_opts_t o = {.wait_ms = LBC_NO_WAIT};
	lbc_lease_t *l1 = must_acquire(c, unique_name(a, sizeof(a), "close"), &o);
	lbc_lease_t *l2 = must_acquire(c, unique_name(b, sizeof(b), "close"), &o);
	lbc_error_t err;

	cr_assert_eq(lbc_close(c), 2);
	cr_assert_eq(lbc_lease_lost_reason(l1), LBC_LOST_CLOSED);
	/* the handle outlives the client: release reports the loss without it */
	cr_assert_eq(lbc_release(c, l1, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_CLOSED);
	lbc_lease_free(l2);

	/* the broker released them with the session */
	lbc_client_t *d = must_connect(NEED_BROKER(), NULL);
	lbc_lease_t *l3 = must_acquire(d, a, &(lbc_acquire_opts_t){.wait_ms = 2000});
	cr_assert_eq(lbc_release(d, l3, NULL, NULL), LBC_OK);
	lbc_close(d);
}
