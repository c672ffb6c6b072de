/*
 * dispatch.c - the op table, the dispatch of one request line, and the
 * bookkeeping that keeps a session's requests in order.
 *
 * Check order (PROTOCOL.md): JSON, shape, id, op name (req_parse); an id
 * still pending in the session (invalid_argument); auth; fields
 * (req_unpack); Redis availability for ops that need it; then the handler.
 * Handlers answer through the session, now or when Redis answers; they
 * never keep the req_t (it is cleared on return) but may keep a new
 * reference to req->id.
 *
 * Order: requests of a session take effect in the order they were sent.
 * Redis-bound requests keep it by themselves (the commands of one lock go
 * out on one connection, in order), except behind a request still on a
 * step before its lock script (a detached lease's pointer: presteps). A
 * local op that shows what earlier requests did (`leases`) would overtake
 * a Redis-bound request still on its way. Such a request is parked, and so
 * is everything after it, until its turn: no prestep runs and, for
 * `leases`, no request is in flight (an acquire stops counting once its
 * first reply is in; a waiting one takes effect when granted). The other
 * local ops need no turn: `cancel` acts on its target whatever state it is
 * in, `hello`, `ping` and `stats` show nothing a request of the session
 * did. Parked requests run
 * from the session's flush pass, after the replies that let them run have
 * had all their effects. All checks but the pending id run when a request
 * runs.
 *
 * Pending ids: every request that is not answered at once registers its id
 * (one node in a table keyed by session and id, and in the session's list)
 * until its answer is sent (dispatch_answered); a request whose id is in
 * the table is refused, so `cancel` always means one request.
 */
#include "broker/net/dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/shared.h"
#include "broker/base/version.h"
#include "broker/base/htab.h"
#include "broker/locks/lease.h"
#include "broker/locks/lockops.h"
#include "broker/base/log.h"
#include "broker/store/store.h"
#include "broker/net/session.h"
#include "broker/locks/acquire_all.h"
#include "broker/locks/waitq.h"
#include "broker/locks/watch.h"
#include "protocol/resp.h"

enum {
	OPF_AUTH = 1 << 0,  /* needs a passed hello when a secret is set */
	OPF_REDIS = 1 << 1, /* needs a ready Redis connection */
	OPF_GRANTS = 1 << 2, /* may grant a lock: refused while shutting down */
	OPF_SEES = 1 << 3,   /* shows what the session's earlier requests did */
};

typedef void (*op_handler)(session_t *s, req_t *req);

static void op_hello(session_t *s, req_t *req);
static void op_ping(session_t *s, req_t *req);
static void op_cancel(session_t *s, req_t *req);
static void op_leases(session_t *s, req_t *req);
static void op_stats(session_t *s, req_t *req);

/* The lock ops act for the session as the locks layer sees it. */
static void op_acquire(session_t *s, req_t *req) { lockops_acquire(&s->lk, req); }
static void op_release(session_t *s, req_t *req) { lockops_release(&s->lk, req); }
static void op_extend(session_t *s, req_t *req) { lockops_extend(&s->lk, req); }
static void op_inspect(session_t *s, req_t *req) { lockops_inspect(&s->lk, req); }
static void op_proclaim(session_t *s, req_t *req) { lockops_proclaim(&s->lk, req); }
static void op_watch(session_t *s, req_t *req) { watch_start(&s->lk, req); }
static void op_unwatch(session_t *s, req_t *req) { watch_stop(&s->lk, req); }
static void op_acquire_all(session_t *s, req_t *req) { acquire_all_start(&s->lk, req); }

static const struct op_def {
	op_handler handler;
	unsigned flags;
} ops[OP__COUNT] = {
	[OP_HELLO] = {op_hello, 0},
	[OP_PING] = {op_ping, 0},
	[OP_ACQUIRE] = {op_acquire, OPF_AUTH | OPF_REDIS | OPF_GRANTS},
	[OP_RELEASE] = {op_release, OPF_AUTH | OPF_REDIS},
	[OP_EXTEND] = {op_extend, OPF_AUTH | OPF_REDIS},
	[OP_CANCEL] = {op_cancel, OPF_AUTH},
	[OP_INSPECT] = {op_inspect, OPF_AUTH | OPF_REDIS},
	[OP_LEASES] = {op_leases, OPF_AUTH | OPF_SEES},
	[OP_STATS] = {op_stats, OPF_AUTH},
	[OP_PROCLAIM] = {op_proclaim, OPF_AUTH | OPF_REDIS},
	[OP_WATCH] = {op_watch, OPF_AUTH | OPF_REDIS},
	[OP_UNWATCH] = {op_unwatch, OPF_AUTH},
	[OP_ACQUIRE_ALL] = {op_acquire_all, OPF_AUTH | OPF_REDIS | OPF_GRANTS},
};

/* What hello's "features" lists: the additions to protocol version 1
 * this broker serves (PROTOCOL.md, "Coordination beyond the mutex"). */
static const char *const features[] = {"value", "proclaim", "watch", "lock_delay", "acquire_all", NULL};

/* op must wait until nothing of the session is in flight. */
static bool waits_for_inflight(req_op_t op)
{
	return ops[op].flags & OPF_SEES;
}

/* ---- pending ids ----------------------------------------------------------- */

typedef struct pending_id {
	htab_node_t node;
	struct pending_id *prev, *next; /* the session's list */
	session_t *s;
	json_t *id; /* own reference */
} pending_id_t;

static htab_t pending;

static uint32_t id_hash(const session_t *s, const json_t *id)
{
	uint32_t h = htab_hash(HTAB_HASH_INIT, &s, sizeof(s));

	if (json_is_string(id))
		return htab_hash(h, json_string_value(id), json_string_length(id));
	{
		json_int_t v = json_integer_value(id);
		return htab_hash(h ^ 0x9e3779b9u, &v, sizeof(v));
	}
}

struct id_key {
	const session_t *s;
	const json_t *id;
};

static bool id_match(const htab_node_t *n, const void *key)
{
	const pending_id_t *p = (const pending_id_t *)n;
	const struct id_key *k = key;

	return p->s == k->s && json_equal(p->id, (json_t *)k->id);
}

static pending_id_t *id_find(const session_t *s, const json_t *id)
{
	struct id_key k = {s, id};

	return (pending_id_t *)htab_find(&pending, id_hash(s, id), id_match, &k);
}

static void id_add(session_t *s, const json_t *id)
{
	pending_id_t *p = xcalloc(1, sizeof(*p));

	p->s = s;
	p->id = json_incref((json_t *)id);
	p->next = s->ids;
	if (s->ids)
		s->ids->prev = p;
	s->ids = p;
	htab_insert(&pending, &p->node, id_hash(s, id));
}

static void id_remove(pending_id_t *p)
{
	session_t *s = p->s;

	htab_remove(&pending, &p->node);
	if (p->prev)
		p->prev->next = p->next;
	else
		s->ids = p->next;
	if (p->next)
		p->next->prev = p->prev;
	json_decref(p->id);
	free(p);
}

void dispatch_answered(session_t *s, const json_t *id)
{
	pending_id_t *p = id ? id_find(s, id) : NULL;

	s->answers++;
	if (s->unanswered > 0)
		s->unanswered--;
	if (p)
		id_remove(p);
	if (s->eof && s->unanswered == 0)
		session_wake(s); /* a half-closed session may end now */
}

/* ---- running a request ------------------------------------------------------ */

typedef struct parked {
	struct parked *next;
	req_t req; /* owns its document */
} parked_t;

/* Runs a parsed request: the checks after the op name, then its handler.
 * Registers its id when the handler left it unanswered (registered: it
 * was, when it was parked). */
static void run(session_t *s, req_t *req, bool registered)
{
	const struct op_def *def = &ops[req->op];
	uint64_t answers = s->answers;
	req_error_t err;

	if ((def->flags & OPF_AUTH) && !s->authed) {
		session_send_error(s, req->id, LB_E_UNAUTHORIZED, NULL);
		return;
	}
	if (req_unpack(req, &err) < 0) {
		session_send_error(s, req->id, err.code, err.message);
		return;
	}
	if ((def->flags & OPF_GRANTS) && server.state != BROKER_RUNNING) {
		session_send_error(s, req->id, LB_E_SHUTTING_DOWN, NULL);
		return;
	}
	if ((def->flags & OPF_REDIS) && !store_up()) {
		if (!lockops_answer_locally(&s->lk, req))
			session_send_error(s, req->id, LB_E_UNAVAILABLE, "Redis is not reachable");
		return;
	}
	def->handler(s, req);
	if (s->answers == answers && req->id && !registered)
		id_add(s, req->id);
}

static bool must_park(const session_t *s, const req_t *req)
{
	return s->parked || s->presteps > 0 || (waits_for_inflight(req->op) && s->inflight > 0);
}

/* Answers a request that is refused before it runs. Its id may be that of
 * a pending request, whose registration must stay: the answer does not
 * go through dispatch_answered. */
static void refuse(session_t *s, const json_t *id, lb_err_t code, const char *message)
{
	session_send(s, resp_error(id, code, message));
	s->answers++;
	s->unanswered--;
}

void dispatch_line(session_t *s, const char *line, size_t len)
{
	req_t req = {0};
	req_error_t err;
	int rc;

	s->unanswered++;
	rc = req_parse(line, len, &req, &err);
	/* The id check comes before the op name's (a bad shape comes first). */
	if (req.id && id_find(s, req.id) && (rc == 0 || err.code == LB_E_UNKNOWN_OP)) {
		char msg[REQ_ID_MAX_BYTES + 96], *dump = json_dumps(req.id, JSON_ENCODE_ANY);
		snprintf(msg, sizeof(msg), "id %s is the id of a pending request of this session",
		         dump ? dump : "?");
		free(dump);
		refuse(s, req.id, LB_E_INVALID_ARGUMENT, msg);
		goto out;
	}
	if (rc < 0) {
		refuse(s, req.id, err.code, err.message);
		goto out;
	}
	if (must_park(s, &req)) {
		parked_t *p = xmalloc(sizeof(*p));
		p->next = NULL;
		p->req = req; /* takes the document */
		if (s->parked_tail)
			s->parked_tail->next = p;
		else
			s->parked = p;
		s->parked_tail = p;
		s->nparked++;
		if (req.id)
			id_add(s, req.id);
		return;
	}
	run(s, &req, false);
out:
	req_clear(&req);
}

void dispatch_resume(session_t *s)
{
	while (s->parked && session_open(s)) {
		parked_t *p = s->parked;

		if (s->presteps > 0 || (waits_for_inflight(p->req.op) && s->inflight > 0))
			return;
		s->parked = p->next;
		if (!s->parked)
			s->parked_tail = NULL;
		s->nparked--;
		run(s, &p->req, p->req.id != NULL);
		req_clear(&p->req);
		free(p);
	}
}

void dispatch_session_end(session_t *s)
{
	while (s->parked) {
		parked_t *p = s->parked;
		s->parked = p->next;
		req_clear(&p->req);
		free(p);
	}
	s->parked_tail = NULL;
	s->nparked = 0;
	while (s->ids)
		id_remove(s->ids);
}

void dispatch_free(void)
{
	FAILS_ASSERT(pending.count == 0);
	htab_free(&pending);
}

/* ---- the local ops ------------------------------------------------------------ */

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
	const lb_config_t *cfg = server.cfg;
	resp_hello_t ans = {
		.server = LOCKBROKER_NAME "/" LOCKBROKER_VERSION,
		.proto = LB_PROTO_VERSION,
		.session = s->name,
		.broker = server.id,
		.limits = {
			.max_line = (int64_t)cfg->max_line,
			.ttl_ms_min = REQ_TTL_MIN_MS,
			.ttl_ms_max = REQ_TTL_MAX_MS,
			.max_leases_per_session = cfg->max_leases_per_session,
			.max_waiters_per_session = cfg->max_waiters_per_session,
			.max_inflight = cfg->max_inflight,
			.keepalive_ms_min = REQ_KEEPALIVE_MIN_MS,
			.keepalive_ms_max = REQ_KEEPALIVE_MAX_MS,
			.max_watches_per_session = cfg->max_watches_per_session,
		},
		.features = features,
	};

	if (secret) {
		if (!h->auth.ptr || !secret_equal(h->auth.ptr, h->auth.len, secret, strlen(secret))) {
			s->auth_failures++;
			LOG(LOG_WARN, "msg=\"authentication failed\" session=%s attempt=%d", s->name,
			    s->auth_failures);
			session_send_error(s, req->id, LB_E_UNAUTHORIZED, "wrong or missing auth");
			if (s->auth_failures >= SESSION_MAX_AUTH_FAILURES)
				session_end_with(s, "auth_failures");
			return;
		}
		s->authed = true;
	}
	if (h->client.ptr) {
		free(s->lk.label);
		s->lk.label = xstrndup(h->client.ptr, h->client.len);
		s->lk.label_len = h->client.len;
	}
	if (h->keepalive_ms > 0)
		session_set_keepalive(s, h->keepalive_ms);
	session_answer(s, req->id, resp_hello(req->id, &ans));
}

static void op_ping(session_t *s, req_t *req)
{
	session_answer(s, req->id, resp_ping(req->id, store_up()));
}

static void op_cancel(session_t *s, req_t *req)
{
	const json_t *target = req->u.cancel.target;
	bool cancelled = acquire_all_cancel(&s->lk, target) || waitq_cancel(&s->lk, target);

	session_answer(s, req->id, resp_cancelled(req->id, cancelled));
}

static void op_leases(session_t *s, req_t *req)
{
	resp_lease_t *out = xcalloc(s->lk.nleases, sizeof(*out));
	uint64_t now = timers_now();
	size_t n = 0;

	for (lease_t *l = s->lk.leases; l; l = l->s_next, n++) {
		out[n] = (resp_lease_t){
			.lease = l->token,
			.lock = {l->lock, l->lock_len},
			.mode = l->mode,
			.ttl_ms = l->expires_at > now ? (int64_t)(l->expires_at - now) : 0,
			.count = l->count,
			.fence = l->fence,
		};
	}
	session_answer(s, req->id, resp_leases(req->id, out, n));
	free(out);
}

static void op_stats(session_t *s, req_t *req)
{
	store_master_t m[STORE_MASTERS_SHOWN];
	resp_master_t rm[STORE_MASTERS_SHOWN];
	size_t nm = store_masters(m, STORE_MASTERS_SHOWN);
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
		.failovers_total = (int64_t)server.stats.failovers_total,
		.failover_lost_total = (int64_t)server.stats.failover_lost_total,
		.redis_up = store_up(),
		.redis_mode = store_mode(),
		.masters = rm,
	};

	if (nm > STORE_MASTERS_SHOWN)
		nm = STORE_MASTERS_SHOWN;
	for (size_t k = 0; k < nm; k++)
		rm[k] = (resp_master_t){m[k].addr, m[k].up, m[k].slots, (int64_t)m[k].pending,
		                        (int64_t)m[k].redirects};
	st.nmasters = nm;
	session_answer(s, req->id, resp_stats(req->id, &st));
}
