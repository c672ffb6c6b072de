/*
 * test_connect.c - connecting: TCP, the Unix socket, the default URL,
 * auth by value and by file, a wrong secret (LBC_UNAUTHORIZED), no secret
 * (the session opens, ops answer unauthorized), nothing listening, and
 * keepalive keeping an idle session alive.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(connect, tcp, .timeout = 10)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL);
	lbc_server_info_t info;
	lbc_error_t err;
	bool up = false;

	cr_assert_eq(lbc_ping(c, &up, &err), LBC_OK, "%s", err.message);
	cr_assert(up, "the suite's Redis is up");
	cr_assert_eq(lbc_server_info(c, &info, &err), LBC_OK);
	cr_assert_eq(info.proto, 1);
	cr_assert_eq(strncmp(info.server, "lockbroker/", 11), 0, "server %s", info.server);
	cr_assert_gt(info.max_line, 0);
	cr_assert(info.authorized);
	cr_assert_geq(lbc_fd(c), 0);
	cr_assert_eq(lbc_close(c), 0);
}

Test(connect, unix_socket, .timeout = 10)
{
	char name[96];
	lbc_client_t *c = must_connect(need_env("LOCKBROKER_UNIX_URL"), NULL);
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "unix"),
	                              &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	int64_t left = -1;

	cr_assert_gt(lbc_lease_fence(l), 0);
	cr_assert_eq(lbc_release(c, l, &left, NULL), LBC_OK);
	cr_assert_eq(left, 0);
	lbc_close(c);
}

Test(connect, default_url_is_lockbroker_url, .timeout = 10)
{
	NEED_BROKER();
	lbc_client_t *c = must_connect(NULL, NULL);
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
	lbc_close(c);
}

Test(connect, auth_by_value_and_by_file, .timeout = 10)
{
	const char *url = need_env("LOCKBROKER_AUTH_URL");
	char name[96];
	lbc_options_t by_value = {.auth = need_env("LOCKBROKER_AUTH_SECRET")};
	lbc_options_t by_file = {.auth_file = need_env("LOCKBROKER_AUTH_FILE")};
	const lbc_options_t *opts[] = {&by_value, &by_file};

	for (int i = 0; i < 2; i++) {
		lbc_client_t *c = must_connect(url, opts[i]);
		lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "auth"),
		                              &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
		cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
		lbc_close(c);
	}
}

Test(connect, wrong_secret_is_unauthorized, .timeout = 10)
{
	lbc_options_t o = {.auth = "not-the-secret"};
	lbc_error_t err;
	lbc_client_t *c = lbc_connect(need_env("LOCKBROKER_AUTH_URL"), &o, &err);

	cr_assert_null(c);
	cr_assert_eq(err.status, LBC_UNAUTHORIZED);
	cr_assert_str_eq(err.code, "unauthorized");
	cr_assert(err.from_broker);
	cr_assert_null(strstr(err.message, "not-the-secret"), "the secret is never in a message");
}

Test(connect, no_secret_opens_a_session_that_ops_refuse, .timeout = 10)
{
	lbc_client_t *c = must_connect(need_env("LOCKBROKER_AUTH_URL"), NULL);
	lbc_server_info_t info;
	lbc_lease_t *l = NULL;
	lbc_error_t err;

	cr_assert_eq(lbc_server_info(c, &info, NULL), LBC_OK);
	cr_assert_not(info.authorized);
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_OK, "ping needs no auth");
	cr_assert_eq(lbc_acquire(c, "c-noauth", NULL, &l, &err), LBC_UNAUTHORIZED);
	cr_assert(err.from_broker);
	cr_assert_null(l);
	lbc_close(c);
}

Test(connect, nothing_listening, .timeout = 10)
{
	char url[64];
	lbc_error_t err;
	int64_t t0 = now_ms();

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
	cr_assert_null(lbc_connect(url, NULL, &err));
	cr_assert_eq(err.status, LBC_DISCONNECTED);
	cr_assert_neq(err.sys_errno, 0);
	cr_assert_lt(now_ms() - t0, 2000, "the first connect is one attempt");
	cr_assert_null(lbc_connect("unix:///nonexistent/lb.sock", NULL, &err));
	cr_assert_eq(err.status, LBC_DISCONNECTED);
}

Test(connect, unreadable_auth_file, .timeout = 10)
{
	lbc_options_t o = {.auth_file = "/nonexistent/secret"};
	lbc_error_t err;

	cr_assert_null(lbc_connect(NEED_BROKER(), &o, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
	cr_assert_not(err.from_broker);
}

Test(connect, keepalive_keeps_an_idle_session, .timeout = 15)
{
	lbc_options_t o = {.keepalive_ms = 600};
	lbc_client_t *c = must_connect(NEED_BROKER(), &o);
	lbc_server_info_t a, b;
	char name[96];
	lbc_lease_t *l = must_acquire(c, unique_name(name, sizeof(name), "ka"),
	                              &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});

	cr_assert_eq(lbc_server_info(c, &a, NULL), LBC_OK);
	sleep_ms(2000); /* over three keepalive periods with no call of ours */
	cr_assert_eq(lbc_poll(c, 0, NULL), 0);
	cr_assert_not(lbc_lease_lost(l), "lost: %s", lbc_lost_reason_name(lbc_lease_lost_reason(l)));
	cr_assert_eq(lbc_server_info(c, &b, NULL), LBC_OK);
	cr_assert_str_eq(a.session, b.session, "the same session all along");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	lbc_close(c);
}
