/*
 * client.c - lockctl on the C client library (clients/c/lbclient.h): one
 * connect with lockctl's options, the acquire options of the command line,
 * and the one mapping from lbc statuses to lockctl's exit statuses.
 *
 * Invariants: every error is one masked line on stderr; the secret of
 * --auth-file goes to lbc only (which never prints it); a failed call's
 * exit status comes from lc_status_exit, so --help's table holds for every
 * subcommand.
 */
#include "cmd/lockctl/lockctl.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/url.h"
#include "broker/base/version.h"

/* lbc's timeouts are ints; lockctl's durations go up to 2^53 ms. */
static int clamp_ms(int64_t ms)
{
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

int lc_status_exit(lbc_status st, int64_t wait_ms)
{
	switch (st) {
	case LBC_OK:
		return LC_EXIT_OK;
	case LBC_TIMEOUT:
		return wait_ms == 0 ? LC_EXIT_BUSY : LC_EXIT_TIMEOUT;
	case LBC_UNAVAILABLE:
	case LBC_SHUTTING_DOWN:
	case LBC_DISCONNECTED:
		return LC_EXIT_UNAVAILABLE;
	case LBC_LOST:
		return LC_EXIT_LOST;
	case LBC_IO:
		return LC_EXIT_INTERNAL;
	default:
		return LC_EXIT_REFUSED; /* the broker's (or lbc's) refusal */
	}
}

int lc_fail(const char *what, const lbc_error_t *err, int64_t wait_ms)
{
	char cb[LC_MASK_BUF], mb[LC_MASK_BUF];

	lc_err("%s: %s: %s", what, lc_masked(err->code, cb), lc_masked(err->message, mb));
	return lc_status_exit(err->status, wait_ms);
}

int lc_connect(const lc_global_t *g, void (*on_event)(void *, const lbc_event_t *), void *arg,
               lbc_client_t **out)
{
	lbc_options_t opts = {
		.auth = g->auth,
		.client_label = LC_NAME "/" LOCKBROKER_VERSION,
		.connect_timeout_ms = clamp_ms(g->timeout_ms),
		.request_timeout_ms = clamp_ms(g->timeout_ms),
		.on_event = on_event,
		.event_arg = arg,
		.liveness_check = g->no_liveness_check ? LBC_OFF : LBC_DEFAULT,
	};
	lbc_error_t err;
	listen_addr_t a;
	char msg[256], ub[LC_MASK_BUF];

	/* the broker's own parser first: its messages, and a usage error for
	 * every URL lbc would refuse (lbc takes what it takes) */
	*out = NULL;
	int parsed = url_parse_listen(g->url, &a, msg, sizeof(msg));
	if (parsed == 0 && a.kind == URL_TCP && a.port == 0) {
		parsed = -1;
		snprintf(msg, sizeof(msg), "port 0");
	}
	if (parsed < 0) {
		lc_err("bad broker URL %s: %s", lc_masked(g->url, ub), msg);
		return LC_EXIT_USAGE;
	}
	*out = lbc_connect(g->url, &opts, &err);
	if (*out != NULL)
		return 0;
	if (err.status == LBC_INVALID_ARGUMENT && !err.from_broker) {
		char mb[LC_MASK_BUF];
		lc_err("bad broker URL %s: %s", lc_masked(g->url, ub), lc_masked(err.message, mb));
		return LC_EXIT_USAGE;
	}
	return lc_fail("connect", &err, -1);
}

lbc_acquire_opts_t lc_acquire_opts(const lc_lock_opts_t *o)
{
	return (lbc_acquire_opts_t){
		.mode = o->shared ? LBC_SHARED : LBC_EXCLUSIVE,
		.limit = o->limit,
		.ttl_ms = o->ttl_ms < 0 ? 0 : o->ttl_ms,
		.wait_ms = o->wait_ms < 0 ? LBC_WAIT_FOREVER : o->wait_ms == 0 ? LBC_NO_WAIT : o->wait_ms,
		.detach = o->detach,
		.max_hold_ms = o->max_hold_ms < 0 ? 0 : o->max_hold_ms,
		.owner = "", /* the protocol's default owner: one acquire per session */
		.value = o->value,
		.lock_delay_ms = o->lock_delay_ms,
	};
}

char *lc_acquire_fields(const lc_lock_opts_t *o)
{
	json_t *f = json_pack("{s:s}", "lock", o->name);
	char *s;

	REQUIRE(f != NULL);
	if (o->shared)
		json_object_set_new(f, "mode", json_string("shared"));
	if (o->limit > 0)
		json_object_set_new(f, "limit", json_integer(o->limit));
	if (o->ttl_ms >= 0)
		json_object_set_new(f, "ttl_ms", json_integer(o->ttl_ms));
	if (o->wait_ms >= 0)
		json_object_set_new(f, "wait_ms", json_integer(o->wait_ms));
	if (o->max_hold_ms >= 0)
		json_object_set_new(f, "max_hold_ms", json_integer(o->max_hold_ms));
	if (o->detach)
		json_object_set_new(f, "detach", json_true());
	if (o->value)
		json_object_set_new(f, "value", json_string(o->value));
	if (o->lock_delay_ms > 0)
		json_object_set_new(f, "lock_delay_ms", json_integer(o->lock_delay_ms));
	s = json_dumps(f, JSON_COMPACT);
	REQUIRE(s != NULL);
	json_decref(f);
	return s;
}

int lc_acquire_fail(const lc_lock_opts_t *o, const lbc_error_t *err)
{
	char nb[LC_MASK_BUF];

	if (err->status == LBC_TIMEOUT && o->wait_ms == 0) {
		lc_err("lock \"%s\" is busy", lc_masked(o->name, nb));
		return LC_EXIT_BUSY;
	}
	if (err->status == LBC_TIMEOUT) {
		lc_err("timed out after %" PRId64 " ms waiting for lock \"%s\"", o->wait_ms,
		       lc_masked(o->name, nb));
		return LC_EXIT_TIMEOUT;
	}
	return lc_fail("acquire", err, o->wait_ms);
}
