/*
 * test_disconnect.c - the broker dies with a lease held: lbc_poll reports
 * it lost ("disconnected"), release says so, calls fail while nothing
 * listens, and once a broker listens again the next call opens a new
 * session (new acquires work, the old token is never sent).
 */
#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(disconnect, broker_dies_then_comes_back, .timeout = 30, .fini = brokers_stop_all)
{
	broker_t b;
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec, .connect_timeout_ms = 500};
	lbc_client_t *c;
	lbc_lease_t *l, *l2 = NULL;
	lbc_server_info_t before, after;
	char name[96], other[96], token[200];
	lbc_error_t err;

	NEED_BROKER();
	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	c = must_connect(b.url, &o);
	cr_assert_eq(lbc_server_info(c, &before, NULL), LBC_OK);
	l = must_acquire(c, unique_name(name, sizeof(name), "disc"),
	                 &(lbc_acquire_opts_t){.ttl_ms = 1000, .wait_ms = LBC_NO_WAIT});
	snprintf(token, sizeof(token), "%s", lbc_lease_token(l));

	broker_kill(&b, SIGKILL);
	cr_assert_eq(lbc_poll(c, 3000, NULL), 1, "the drop is a loss");
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	cr_assert_eq(lbc_fd(c), -1, "no session");
	cr_assert_geq(recorder_get(&rec).disconnected, 1);
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_DISCONNECTED);

	/* nothing listens: a call fails within connect_timeout_ms */
	int64_t t0 = now_ms();
	cr_assert_eq(lbc_acquire(c, unique_name(other, sizeof(other), "disc"),
	                         &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l2, &err),
	             LBC_DISCONNECTED);
	cr_assert_lt(now_ms() - t0, 2000);
	cr_assert_null(l2);

	/* the broker is back on the same port: the next call reconnects */
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not restart");
	l2 = must_acquire(c, other, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	cr_assert_eq(lbc_server_info(c, &after, NULL), LBC_OK);
	cr_assert_str_neq(before.broker, after.broker, "a new session, on the restarted broker");
	cr_assert_eq(lbc_release(c, l2, NULL, NULL), LBC_OK);
	/* the first lock ends by its TTL (its broker died) and is granted again */
	lbc_lease_t *l3 = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = 5000});
	cr_assert_str_neq(lbc_lease_token(l3), token);
	cr_assert_eq(lbc_release(c, l3, NULL, NULL), LBC_OK);
	lbc_close(c);
	broker_free(&b);
}

Test(disconnect, the_broker_closes_the_connection, .timeout = 20, .fini = brokers_stop_all)
{
	/* a graceful stop: shutdown event, then the session ends; every lease
	 * of it is lost, and a waiting acquire answers shutting_down */
	static const char *const extra[] = {"--shutdown-grace-ms", "300", NULL};
	broker_t b;
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec, .connect_timeout_ms = 300};
	lbc_client_t *c;
	char name[96];
	lbc_lease_t *l;

	NEED_BROKER();
	broker_init(&b, 0, NULL, extra);
	cr_assert_eq(broker_start(&b, true), 0);
	c = must_connect(b.url, &o);
	l = must_acquire(c, unique_name(name, sizeof(name), "stop"), &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	broker_kill(&b, SIGTERM);
	cr_assert_eq(lbc_poll(c, 5000, NULL), 1);
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED);
	recorder_t r = recorder_get(&rec);
	cr_assert_eq(r.shutdown, 1);
	cr_assert_eq(r.grace_ms, 300);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	cr_assert_eq(broker_wait(&b, 5000), 0, "the broker exits");
	lbc_close(c);
	broker_free(&b);
}
