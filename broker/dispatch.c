/*
 * dispatch.c - the op table and the dispatch of one request line.
 *
 * Check order (PROTOCOL.md): JSON, shape, id, op name (req_parse); auth;
 * fields (req_unpack); Redis availability for ops that need it; then the
 * handler. Handlers answer through the session, now or when Redis answers;
 * they never keep the req_t (it is cleared on return) but may keep a new
 * reference to req->id.
 */
#include "broker/dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"
#include "broker/lease.h"
#include "broker/lockops.h"
#include "broker/log.h"
#include "broker/rpool.h"
#include "broker/session.h"
#include "broker/waitq.h"
#include "protocol/resp.h"

enum {
	OPF_AUTH = 1 << 0,  /* needs a passed hello when a secret is set */
	OPF_REDIS = 1 << 1, /* needs a ready Redis connection */
	OPF_GRANTS = 1 << 2, /* may grant a lock: refused while shutting down */
};

typedef void (*op_handler)(session_t *s, req_t *req);

static void op_hello(session_t *s, req_t *req);
static void op_ping(session_t *s, req_t *req);
static void op_cancel(session_t *s, req_t *req);
static void op_leases(session_t *s, req_t *req);
static void op_stats(session_t *s, req_t *req);

static const struct op_def {
	op_handler handler;
	unsigned flags;
} ops[OP__COUNT] = {
	[OP_HELLO] = {op_hello, 0},
	[OP_PING] = {op_ping, 0},
	[OP_ACQUIRE] = {lockops_acquire, OPF_AUTH | OPF_REDIS | OPF_GRANTS},
	[OP_RELEASE] = {lockops_release, OPF_AUTH | OPF_REDIS},
	[OP_EXTEND] = {lockops_extend, OPF_AUTH | OPF_REDIS},
	[OP_CANCEL] = {op_cancel, OPF_AUTH},
	[OP_INSPECT] = {lockops_inspect, OPF_AUTH | OPF_REDIS},
	[OP_LEASES] = {op_leases, OPF_AUTH},
	[OP_STATS] = {op_stats, OPF_AUTH},
};

void dispatch_line(session_t *s, const char *line, size_t len)
{
	req_t req = {0};
	req_error_t err;
	const struct op_def *def;

	if (req_parse(line, len, &req, &err) < 0) {
		session_send_error(s, req.id, err.code, err.message);
		goto out;
	}
	def = &ops[req.op];
	if ((def->flags & OPF_AUTH) && !s->authed) {
		session_send_error(s, req.id, LB_E_UNAUTHORIZED, NULL);
		goto out;
	}
	if (req_unpack(&req, &err) < 0) {
		session_send_error(s, req.id, err.code, err.message);
		goto out;
	}
	if ((def->flags & OPF_GRANTS) && server.state != BROKER_RUNNING) {
		session_send_error(s, req.id, LB_E_SHUTTING_DOWN, NULL);
		goto out;
	}
	if ((def->flags & OPF_REDIS) && !rpool_up()) {
		session_send_error(s, req.id, LB_E_UNAVAILABLE, "Redis is not reachable");
		goto out;
	}
	def->handler(s, &req);
out:
	req_clear(&req);
}

/* Compares in time independent of where the first difference is. */
static bool secret_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char diff = alen != blen;

	for (size_t k = 0; k < blen; k++)
		diff |= (unsigned char)(k < alen ? a[k] : 0) ^ (unsigned char)b[k];
	return diff == 0;
}

static void op_hello(session_t *s, req_t *req)
{
	const req_hello_t *h = &req->u.hello;
	const char *secret = server.cfg->auth_secret;

	if (secret) {
		if (!h->auth.ptr || !secret_equal(h->auth.ptr, h->auth.len, secret, strlen(secret))) {
			s->auth_failures++;
			LOG(LOG_WARN, "msg=\"authentication failed\" session=%s attempt=%d", s->name,
			    s->auth_failures);
			session_send_error(s, req->id, LB_E_UNAUTHORIZED, "wrong or missing auth");
			if (s->auth_failures >= SESSION_MAX_AUTH_FAILURES)
				session_close_after_flush(s, "too many failed auth attempts");
			return;
		}
		s->authed = true;
	}
	if (h->client.ptr) {
		free(s->client);
		s->client = xstrndup(h->client.ptr, h->client.len);
		s->client_len = h->client.len;
	}
	if (h->keepalive_ms > 0)
		session_set_keepalive(s, h->keepalive_ms);
	session_send(s, resp_hello(req->id, LOCKBROKER_NAME "/" LOCKBROKER_VERSION, LB_PROTO_VERSION, s->name));
}

static void op_ping(session_t *s, req_t *req)
{
	session_send(s, resp_ok(req->id));
}

static void op_cancel(session_t *s, req_t *req)
{
	session_send(s, resp_cancelled(req->id, waitq_cancel(s, req->u.cancel.target)));
}

static void op_leases(session_t *s, req_t *req)
{
	resp_lease_t *out = xcalloc(s->nleases, sizeof(*out));
	uint64_t now = timers_now();
	size_t n = 0;

	for (lease_t *l = s->leases; l; l = l->s_next, n++) {
		out[n] = (resp_lease_t){
			.lease = l->token,
			.lock = {l->lock, l->lock_len},
			.mode = l->mode,
			.ttl_ms = l->expires_at > now ? (int64_t)(l->expires_at - now) : 0,
			.count = l->count,
			.fence = l->fence,
		};
	}
	session_send(s, resp_leases(req->id, out, n));
	free(out);
}

static void op_stats(session_t *s, req_t *req)
{
	resp_stats_t st = {
		.uptime_s = (int64_t)((timers_now() - server.started_ms) / 1000),
		.connections = (int64_t)server.nconnections,
		.sessions = (int64_t)server.nsessions,
		.leases = (int64_t)server.nleases,
		.waiters = (int64_t)waitq_count(),
		.acquired_total = (int64_t)server.stats.acquired_total,
		.released_total = (int64_t)server.stats.released_total,
		.timeouts_total = (int64_t)server.stats.timeouts_total,
		.lost_total = (int64_t)server.stats.lost_total,
		.redis_up = rpool_up(),
	};

	session_send(s, resp_stats(req->id, &st));
}
