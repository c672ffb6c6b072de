/*
 * rpool.c - Redis connection pool (see rpool.h), part one: the connections.
 * The commands on them are rpool_cmd.c; what both share is rpool_int.h.
 *
 * Each connection moves DOWN -> (RESOLVING ->) CONNECTING -> READY and back
 * to DOWN when hiredis reports a failed connect or a disconnect; CLOSING is
 * final. A host name is resolved with uv_getaddrinfo first (hiredis would
 * block the loop in getaddrinfo). hiredis 0.14 frees a context itself after
 * a failed connect or a disconnect, and runs the disconnect callback only
 * for a context that had connected; so the event-loop glue tells us when a
 * context is freed (redis_uv's on_freed), whatever freed it, and that is
 * where our pointer is cleared. Nothing here frees a context hiredis owns.
 *
 * The handshake (AUTH, CLIENT SETNAME, SELECT, INFO server, SCRIPT LOAD of
 * every script) is pipelined right after connecting; the connection is
 * READY when its last reply came back without error. Commands are only
 * accepted on READY connections whose context hiredis is not tearing down.
 *
 * Timeouts: each connection has one timer entry (watch): the connect
 * deadline while connecting, then the moment its oldest unanswered command
 * is overdue. A connection that misses either is dropped with
 * redisAsyncFree (every pending callback then runs with NULL) and
 * reconnected.
 *
 * Data loss: the run_id of INFO server is compared on every (re)connect; a
 * new one means Redis restarted (or is another server), and on_data_loss
 * runs once for it.
 */
#include "broker/store/rpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/redis_uv.h"
#include "broker/store/rpool_int.h"

static void rconn_connect(rconn_t *c);

char rp_sha[SCRIPT__COUNT][41];

/* Where the pool's connections go, for the log ("host:port" or the
 * socket's path); valid until the next call. */
static const char *where(const rpool_t *pool)
{
	static char buf[URL_HOST_MAX + URL_PATH_MAX + 8];

	if (!pool->target.set)
		return "-";
	if (pool->target.kind == URL_UNIX)
		snprintf(buf, sizeof(buf), "%s", pool->target.path);
	else
		snprintf(buf, sizeof(buf), "%s:%d", pool->target.host, pool->target.port);
	return buf;
}

/* ---- connections ---------------------------------------------------------- */

bool rp_usable(const rconn_t *c)
{
	return c->state == RC_READY && c->ac &&
	       !(c->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING));
}

static uint32_t jitter(rpool_t *pool, uint32_t ms)
{
	/* xorshift32: spreads reconnects of many brokers; not for secrets. */
	uint32_t x = pool->rand_state;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	pool->rand_state = x;
	return ms - ms / 5 + x % (ms / 5 * 2 + 1); /* ms +- 20% */
}

static void on_retry(timer_ent_t *t)
{
	rconn_t *c = (rconn_t *)((char *)t - offsetof(rconn_t, retry));
	rconn_connect(c);
}

/* The commands a connection kept or held (see the header) did not run:
 * they go to another connection, or wait for one. */
static void rehome(rconn_t *c)
{
	rcmd_t *cmd;

	c->reloading = false;
	while ((cmd = rp_list_pop(&c->redo)) != NULL)
		rp_dispatch(cmd);
	while ((cmd = rp_list_pop(&c->outq)) != NULL)
		rp_dispatch(cmd); /* queued, never sent */
	while ((cmd = rp_list_pop(&c->held)) != NULL)
		rp_dispatch(cmd);
}

static void schedule_retry(rconn_t *c)
{
	if (c->state == RC_CLOSING)
		return;
	/* A failed address gives way to the next; a connection that had
	 * worked resolves the name again (it may point elsewhere now). */
	c->addr_i = c->addr_ok ? c->naddrs : c->addr_i + 1;
	c->addr_ok = false;
	c->state = RC_DOWN;
	timer_cancel(&c->watch);
	rehome(c);
	timer_at(&c->retry, timers_now() + jitter(c->pool, c->backoff_ms));
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

static void close_timer_maybe_done(rpool_t *pool);

/* redis_uv: hiredis freed the context (any path). */
static void on_freed(void *priv)
{
	rconn_t *c = priv;

	c->ac = NULL;
	if (c->state == RC_CLOSING)
		close_timer_maybe_done(c->pool);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;
	rpool_t *pool = c->pool;

	if (status != REDIS_OK) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d addr=%s err=\"%s\"", c->idx,
		    where(c->pool), ac->errstr);
		schedule_retry(c); /* hiredis frees the context after this */
		if (!c->subscriber && pool->on_lost)
			pool->on_lost();
	}
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;
	rpool_t *pool = c->pool;
	bool was_ready = c->state == RC_READY;

	if (c->state == RC_CLOSING || c->dropping)
		return; /* closing, or rconn_drop schedules the retry */
	if (was_ready || status != REDIS_OK)
		LOG(LOG_WARN, "msg=\"redis connection lost\" conn=%d addr=%s err=\"%s\"", c->idx, where(pool),
		    status == REDIS_OK ? "closed" : ac->errstr);
	schedule_retry(c);
	if (!c->subscriber && pool->on_lost)
		pool->on_lost();
}

/* Sends what waits for a connection (lost replies to resend). */
static void flush_waiting(rpool_t *pool)
{
	cmdlist_t all = pool->waiting;
	rcmd_t *cmd;

	pool->waiting = (cmdlist_t){NULL, NULL};
	while ((cmd = rp_list_pop(&all)) != NULL) {
		timer_cancel(&cmd->give_up);
		rp_dispatch(cmd);
	}
}

/* While the pool is closed for the check after a failover: the check's own
 * commands that wait (their connection was lost) go out; the rest wait. */
static void flush_waiting_checks(rpool_t *pool)
{
	cmdlist_t all = pool->waiting, keep = {NULL, NULL};
	rcmd_t *cmd;

	pool->waiting = (cmdlist_t){NULL, NULL};
	while ((cmd = rp_list_pop(&all)) != NULL) {
		if (!cmd->check) {
			rp_list_push(&keep, cmd);
			continue;
		}
		timer_cancel(&cmd->give_up);
		rp_dispatch(cmd);
	}
	while ((cmd = rp_list_pop(&keep)) != NULL)
		rp_list_push(&pool->waiting, cmd);
}

/* One handshake reply came back; the last one makes the connection ready. */
static void handshake_step(rconn_t *c)
{
	rpool_t *pool = c->pool;
	bool was_up;

	if (--c->handshake_left > 0)
		return;
	if (c->handshake_failed) {
		redisAsyncDisconnect(c->ac); /* on_disconnect schedules the retry */
		return;
	}
	was_up = rpool_up(pool);
	c->state = RC_READY;
	c->addr_ok = true;
	c->backoff_ms = BACKOFF_MIN_MS;
	timer_cancel(&c->watch);
	LOG(LOG_INFO, "msg=\"redis connected\" conn=%d addr=%s%s", c->idx, where(pool),
	    c->subscriber ? " role=inbox" : "");
	if (c->subscriber) {
		if (pool->on_subscribed)
			pool->on_subscribed(pool->inbox_priv);
		return;
	}
	if (pool->loss && pool->loss_gates && pool->on_data_loss) {
		/* After a failover: the check of what the new master lost goes
		 * out first, alone; rpool_check_done opens the pool. */
		const char *why = pool->loss;
		pool->loss = NULL;
		pool->loss_gates = false;
		pool->checking = true;
		timer_at(&pool->check_timer, timers_now() + CHECK_TIMEOUT_MS);
		pool->in_check_cb = true;
		pool->on_data_loss(why);
		pool->in_check_cb = false;
		if (pool->checking)
			return;
	}
	if (pool->checking) {
		flush_waiting_checks(pool); /* a check resent after a lost connection */
		return;                 /* opens when the check is done */
	}
	flush_waiting(pool);
	if (!was_up && pool->on_up)
		pool->on_up();
	if (pool->loss && pool->on_data_loss) {
		const char *why = pool->loss;
		pool->loss = NULL;
		pool->on_data_loss(why);
	}
}

void rpool_check_extend(rpool_t *pool)
{
	if (pool->checking)
		timer_at(&pool->check_timer, timers_now() + CHECK_TIMEOUT_MS);
}

void rpool_check_done(rpool_t *pool)
{
	if (!pool->checking)
		return;
	if (pool->in_check_cb) {
		/* Nothing to ask (no lease): done before the callback returned. */
		pool->checking = false;
		timer_cancel(&pool->check_timer);
		return;
	}
	pool->checking = false;
	timer_cancel(&pool->check_timer);
	if (!rpool_up(pool))
		return; /* lost meanwhile: the next ready connection opens it */
	flush_waiting(pool);
	if (pool->on_up)
		pool->on_up();
}

static void on_check_timeout(timer_ent_t *t)
{
	rpool_t *pool = (rpool_t *)((char *)t - offsetof(rpool_t, check_timer));

	LOG(LOG_WARN, "msg=\"the data-loss check after the failover did not finish; serving anyway\"");
	rpool_check_done(pool);
}

/* The subscriber's one callback: the subscribe confirmation (the last
 * handshake step), then every message on the inbox channel. */
static void on_inbox(redisAsyncContext *ac, void *r, void *priv)
{
	rconn_t *c = ac->data;
	rpool_t *pool = c->pool;
	redisReply *reply = r;

	(void)priv;
	if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING)
		return; /* gone (on_disconnect handles it) or not ours */
	if (strcmp(reply->element[0]->str, "subscribe") == 0) {
		if (c->state == RC_CONNECTING)
			handshake_step(c);
		return;
	}
	if (strcmp(reply->element[0]->str, "message") == 0 && c->state == RC_READY &&
	    reply->element[2]->type == REDIS_REPLY_STRING && pool->on_message)
		pool->on_message(reply->element[2]->str, reply->element[2]->len, pool->inbox_priv);
}

/* INFO server's run_id: a new one is a Redis that restarted (or another
 * server answering at the address). */
static void check_run_id(rpool_t *pool, const redisReply *reply)
{
	const char *p = reply->type == REDIS_REPLY_STRING ? strstr(reply->str, "run_id:") : NULL;
	char id[RUN_ID_LEN + 1];

	if (!p)
		return;
	p += 7;
	for (int k = 0; k < RUN_ID_LEN; k++) {
		if (!((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'a' && p[k] <= 'f')))
			return;
		id[k] = p[k];
	}
	id[RUN_ID_LEN] = '\0';
	if (strcmp(id, pool->run_id) == 0)
		return;
	if (pool->run_id[0]) {
		LOG(LOG_WARN, "msg=\"redis restarted: its data may be lost\" run_id=%.8s.. was=%.8s..", id,
		    pool->run_id);
		memcpy(pool->run_id, id, sizeof(id));
		/* Reported when the connection is ready, and checked before
		 * anything else goes out, as after a failover: what is resent
		 * there must not run before the check replays what the
		 * restarted Redis missed (lua/verify.lua). */
		pool->loss = STORE_LOSS_RESTART;
		pool->loss_gates = true;
		return;
	}
	memcpy(pool->run_id, id, sizeof(id));
}

static void on_handshake(redisAsyncContext *ac, void *r, void *priv)
{
	rconn_t *c = ac->data;
	rpool_t *pool = c->pool;
	redisReply *reply = r;
	intptr_t step = (intptr_t)priv; /* STEP_*, else a script id */

	if (!reply || c->state != RC_CONNECTING)
		return; /* gone, dropped or closing: nothing to make ready */
	c->progress_at = timers_now();
	if (reply->type == REDIS_REPLY_ERROR && step == SCRIPT_BATCH_SLOTS) {
		/* Redis 6 loads no script with a shebang (lua/batch_slots.lua):
		 * no batches there (batch_run), each call alone as before. */
		static bool said;
		if (!said)
			LOG(LOG_WARN, "msg=\"redis cannot load the cluster batch script (Redis 7 needed); "
			    "each call goes alone\" conn=%d err=\"%.200s\"", c->idx, reply->str);
		said = true;
	} else if (reply->type == REDIS_REPLY_ERROR) {
		if (!c->handshake_failed)
			LOG(LOG_ERROR, "msg=\"redis handshake failed\" conn=%d err=\"%.200s\"", c->idx, reply->str);
		c->handshake_failed = true;
	} else if (step == STEP_INFO) {
		check_run_id(pool, reply);
	} else if (step == STEP_ROLE) {
		if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
		    reply->element[0]->type != REDIS_REPLY_STRING ||
		    strcmp(reply->element[0]->str, "master") != 0) {
			LOG(LOG_WARN, "msg=\"redis is not a master; asking the sentinels again\" conn=%d "
			    "addr=%s:%d role=\"%.20s\"", c->idx, pool->target.host, pool->target.port,
			    reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
			            reply->element[0]->type == REDIS_REPLY_STRING
			        ? reply->element[0]->str
			        : "?");
			c->handshake_failed = true;
			if (pool->on_not_master)
				pool->on_not_master();
		}
	} else if (step >= 0 && reply->type == REDIS_REPLY_STRING && reply->len == 40) {
		memcpy(rp_sha[step], reply->str, 40);
		rp_sha[step][40] = '\0';
	}
	handshake_step(c);
}

/* Gives up on a connection that hangs: frees the context (its pending
 * callbacks run with NULL) and reconnects after the backoff. */
static void rconn_drop(rconn_t *c, const char *why)
{
	rpool_t *pool = c->pool;

	LOG(LOG_WARN, "msg=\"redis connection dropped\" conn=%d addr=%s why=\"%s\" pending=%zu", c->idx,
	    where(pool), why,
	    c->pending);
	c->state = RC_DOWN; /* no new commands while the callbacks run */
	if (c->ac) {
		c->dropping = true;
		redisAsyncFree(c->ac); /* on_freed clears c->ac */
		c->dropping = false;
	}
	c->pending = 0;
	schedule_retry(c);
	if (!c->subscriber && pool->on_lost)
		pool->on_lost();
}

static void on_watch(timer_ent_t *t)
{
	rconn_t *c = (rconn_t *)((char *)t - offsetof(rconn_t, watch));
	rpool_t *pool = c->pool;
	uint64_t now = timers_now();

	if (c->state == RC_CONNECTING) {
		rconn_drop(c, "connect timeout");
		return;
	}
	if (c->state != RC_READY || c->pending == 0)
		return;
	if (now - c->progress_at >= pool->cmd_timeout_ms) {
		rconn_drop(c, "command timeout");
		return;
	}
	timer_at(&c->watch, c->progress_at + pool->cmd_timeout_ms);
}

void rp_send_script_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv, script_id_t id)
{
	const struct script_src *src = script_get(id);
	const char *argv[3] = {"SCRIPT", "LOAD", src->text};
	size_t argvlen[3] = {6, 4, src->len};

	redisAsyncCommandArgv(ac, fn, priv, 3, argv, argvlen);
}

/* Opens the connection to host (a numeric address, or NULL for the Unix
 * socket) and pipelines the handshake. */
static void rconn_open(rconn_t *c, const char *host)
{
	rpool_t *pool = c->pool;
	const redis_addr_t *a = pool->addr;
	redisAsyncContext *ac;
	char cname[128];

	ac = host ? redisAsyncConnect(host, pool->target.port) : redisAsyncConnectUnix(pool->target.path);
	REQUIRE(ac != NULL);
	if (ac->err) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d addr=%s err=\"%s\"", c->idx,
		    where(c->pool), ac->errstr);
		redisAsyncFree(ac);
		schedule_retry(c);
		return;
	}
	if (redis_uv_attach(ac, pool->loop, on_freed, c) != REDIS_OK) {
		LOG(LOG_ERROR, "msg=\"cannot attach redis connection to the loop\" conn=%d", c->idx);
		redisAsyncFree(ac);
		schedule_retry(c);
		return;
	}
	ac->data = c;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	c->ac = ac;
	c->state = RC_CONNECTING;
	c->handshake_failed = false;
	c->handshake_left = 0;
	c->pending = 0;
	timer_at(&c->watch, timers_now() + CONNECT_TIMEOUT_MS);

	/* hiredis buffers these until the socket is connected. */
	if (a->password) {
		const char *argv[2] = {"AUTH", a->password};
		size_t argvlen[2] = {4, strlen(a->password)};
		c->handshake_left++;
		redisAsyncCommandArgv(ac, on_handshake, (void *)STEP_PLAIN, 2, argv, argvlen);
	}
	if (c->subscriber)
		snprintf(cname, sizeof(cname), "%s:inbox", pool->name);
	else
		snprintf(cname, sizeof(cname), "%s:%d", pool->name, c->idx);
	c->handshake_left++;
	redisAsyncCommand(ac, on_handshake, (void *)STEP_PLAIN, "CLIENT SETNAME %s", cname);
	if (pool->require_master) {
		/* Never serve from a replica: a demoted master still answers. */
		c->handshake_left++;
		redisAsyncCommand(ac, on_handshake, (void *)STEP_ROLE, "ROLE");
	}
	if (c->subscriber) {
		/* Channels ignore the db; the confirmation ends the handshake. */
		c->handshake_left++;
		redisAsyncCommand(ac, on_inbox, NULL, "SUBSCRIBE %s", pool->channel);
		return;
	}
	if (a->db != 0) {
		c->handshake_left++;
		redisAsyncCommand(ac, on_handshake, (void *)STEP_PLAIN, "SELECT %d", a->db);
	}
	c->handshake_left++;
	redisAsyncCommand(ac, on_handshake, (void *)STEP_INFO, "INFO server");
	for (int id = 0; id < SCRIPT__COUNT; id++) {
		if (!rp_pool_loads(pool, id))
			continue;
		c->handshake_left++;
		rp_send_script_load(ac, on_handshake, (void *)(intptr_t)id, id);
	}
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	rconn_t *c = (rconn_t *)((char *)req - offsetof(rconn_t, gai));
	rpool_t *pool = c->pool;

	c->resolving = false;
	c->naddrs = 0;
	c->addr_i = 0;
	for (struct addrinfo *ai = status == 0 ? res : NULL; ai && c->naddrs < MAX_ADDRS; ai = ai->ai_next) {
		if (redis_uv_addr_name(ai, c->addrs[c->naddrs], sizeof(c->addrs[0])))
			c->naddrs++;
	}
	uv_freeaddrinfo(res);
	if (c->state != RC_RESOLVING) {
		close_timer_maybe_done(pool); /* closing: cancelled */
		return;
	}
	if (c->gai_gen != pool->target.gen) {
		/* Resolved for the target before rpool_set_target. */
		c->naddrs = 0;
		c->addr_i = 0;
		rconn_connect(c);
		return;
	}
	if (c->naddrs == 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the redis host\" conn=%d host=\"%s\" err=\"%s\"", c->idx,
		    pool->target.host, status ? uv_strerror(status) : "no address");
		schedule_retry(c);
		return;
	}
	rconn_open(c, c->addrs[0]);
}

static void rconn_connect(rconn_t *c)
{
	rpool_t *pool = c->pool;
	const char *host = pool->target.host;
	struct in6_addr a6;
	struct addrinfo hints;
	int rc;

	if (!pool->target.set) {
		c->state = RC_DOWN; /* rpool_set_target connects it */
		return;
	}
	if (pool->target.kind == URL_UNIX) {
		rconn_open(c, NULL);
		return;
	}
	if (uv_inet_pton(AF_INET, host, &a6) == 0 || uv_inet_pton(AF_INET6, host, &a6) == 0) {
		rconn_open(c, host);
		return;
	}
	if (c->addr_i < c->naddrs) {
		rconn_open(c, c->addrs[c->addr_i]);
		return;
	}
	/* A name: resolved off the loop (getaddrinfo in hiredis blocks). */
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	c->state = RC_RESOLVING;
	c->gai_gen = pool->target.gen;
	rc = uv_getaddrinfo(pool->loop, &c->gai, on_resolved, host, NULL, &hints);
	if (rc != 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the redis host\" conn=%d host=\"%s\" err=\"%s\"", c->idx,
		    host, uv_strerror(rc));
		schedule_retry(c);
		return;
	}
	c->resolving = true;
}

rpool_t *rpool_new(uv_loop_t *loop, const redis_addr_t *addr, int n, const char *name,
                   const rpool_callbacks_t *cb, const rpool_inbox_t *inbox)
{
	rpool_t *pool;

	REQUIRE(n >= 1 && n <= MAX_CONNS);
	pool = xcalloc(1, sizeof(*pool));
	pool->name = xstrndup(name, strlen(name));
	pool->loop = loop;
	pool->addr = addr;
	pool->n = n;
	pool->nall = n;
	pool->on_up = cb->on_up;
	pool->on_data_loss = cb->on_data_loss;
	pool->on_not_master = cb->on_not_master;
	pool->on_lost = cb->on_lost;
	pool->require_master = cb->require_master;
	pool->cmd_timeout_ms = COMMAND_TIMEOUT_MS;
	pool->batch_max = cb->batch_max;
	pool->batch_slots = cb->batch_slots;
	if (cb->wait_replicas > 0) {
		char n[16], t[24];
		int nl = snprintf(n, sizeof(n), "%d", cb->wait_replicas);
		int tl = snprintf(t, sizeof(t), "%lld", (long long)cb->wait_ms);
		pool->wait_replicas = cb->wait_replicas;
		pool->wait_ms = cb->wait_ms;
		pool->cmd_timeout_ms += (uint64_t)cb->wait_ms;
		pool->wait_cmd_len = (size_t)snprintf(pool->wait_cmd, sizeof(pool->wait_cmd),
		                                      "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", nl, n,
		                                      tl, t);
	}
	timer_init(&pool->check_timer, on_check_timeout);
	if (addr->kind != URL_SENTINEL) {
		pool->target.set = true;
		pool->target.kind = addr->kind;
		memcpy(pool->target.host, addr->host, sizeof(pool->target.host));
		pool->target.port = addr->port;
		memcpy(pool->target.path, addr->path, sizeof(pool->target.path));
	}
	if (inbox) {
		pool->channel = xstrndup(inbox->channel, strlen(inbox->channel));
		pool->on_message = inbox->on_message;
		pool->on_subscribed = inbox->on_subscribed;
		pool->inbox_priv = inbox->priv;
		pool->conns[n].subscriber = true;
		pool->nall = n + 1;
	}
	pool->rand_state = (uint32_t)uv_hrtime() | 1u;
	uv_timer_init(loop, &pool->close_timer);
	pool->close_timer.data = pool;
	for (int k = 0; k < pool->nall; k++) {
		rconn_t *c = &pool->conns[k];
		c->pool = pool;
		c->idx = k;
		c->state = RC_DOWN;
		c->backoff_ms = BACKOFF_MIN_MS;
		timer_init(&c->retry, on_retry);
		timer_init(&c->watch, on_watch);
		rconn_connect(c);
	}
	return pool;
}

static void on_close_timer_closed(uv_handle_t *h)
{
	rpool_t *pool = h->data;

	pool->closed = true;
}

static void close_timer_maybe_done(rpool_t *pool)
{
	for (int k = 0; k < pool->nall; k++) {
		if (pool->conns[k].ac || pool->conns[k].resolving)
			return;
	}
	if (pool->closing && !uv_is_closing((uv_handle_t *)&pool->close_timer))
		uv_close((uv_handle_t *)&pool->close_timer, on_close_timer_closed);
}

static void on_close_timeout(uv_timer_t *h)
{
	rpool_t *pool = h->data;

	LOG(LOG_WARN, "msg=\"redis did not answer in time; closing anyway\"");
	for (int k = 0; k < pool->nall; k++) {
		if (pool->conns[k].ac)
			redisAsyncFree(pool->conns[k].ac); /* on_freed clears it */
	}
	close_timer_maybe_done(pool);
}

void rpool_close(rpool_t *pool)
{
	rcmd_t *cmd;

	/* What this turn queued goes before the goodbye (Redis answers it
	 * before the connection closes); closing first, so that the
	 * callbacks of calls that fail meanwhile can queue nothing new. */
	pool->closing = true;
	for (int k = 0; k < pool->n; k++)
		if (pool->conns[k].outq.head)
			rp_flush_conn(&pool->conns[k]);
	rp_undirty(pool);
	pool->checking = false;
	timer_cancel(&pool->check_timer);
	while ((cmd = rp_list_pop(&pool->waiting)) != NULL) {
		timer_cancel(&cmd->give_up);
		rp_deliver(cmd, NULL);
	}
	for (int k = 0; k < pool->nall; k++) {
		rconn_t *c = &pool->conns[k];
		c->state = RC_CLOSING;
		timer_cancel(&c->retry);
		timer_cancel(&c->watch);
		while ((cmd = rp_list_pop(&c->redo)) != NULL)
			rp_deliver(cmd, NULL);
		while ((cmd = rp_list_pop(&c->held)) != NULL)
			rp_deliver(cmd, NULL);
		if (c->resolving)
			uv_cancel((uv_req_t *)&c->gai);
		if (!c->ac)
			continue;
		if (c->ac->c.flags & REDIS_CONNECTED)
			redisAsyncDisconnect(c->ac); /* after the pending replies */
		else
			redisAsyncFree(c->ac); /* a connect in progress: nothing to wait for */
	}
	uv_timer_start(&pool->close_timer, on_close_timeout, CLOSE_TIMEOUT_MS, 0);
	close_timer_maybe_done(pool);
}

bool rpool_closed(const rpool_t *pool)
{
	return pool->closed;
}

void rpool_expect_failover(rpool_t *pool)
{
	pool->loss = STORE_LOSS_FAILOVER;
	pool->loss_gates = true;
}

bool rpool_up(const rpool_t *pool)
{
	if (pool->checking)
		return false;
	for (int k = 0; k < pool->n; k++) {
		if (rp_usable(&pool->conns[k]))
			return true;
	}
	return false;
}

bool rpool_set_target(rpool_t *pool, const char *host, int port, bool failover)
{
	if (pool->closing)
		return false;
	if (pool->target.set && pool->target.port == port && strcmp(pool->target.host, host) == 0)
		return false;
	pool->target.set = true;
	pool->target.kind = URL_TCP;
	snprintf(pool->target.host, sizeof(pool->target.host), "%s", host);
	pool->target.port = port;
	pool->target.gen++;
	pool->run_id[0] = '\0'; /* another server: its run_id is no news */
	if (failover) {
		pool->loss = STORE_LOSS_FAILOVER;
		pool->loss_gates = true;
	}
	if (pool->checking) {
		pool->checking = false; /* a check of the old target: moot */
		timer_cancel(&pool->check_timer);
	}
	/* Nothing more goes to the old target from here on. */
	for (int k = 0; k < pool->nall; k++) {
		if (pool->conns[k].state != RC_RESOLVING)
			pool->conns[k].state = RC_DOWN;
	}
	for (int k = 0; k < pool->nall; k++) {
		rconn_t *c = &pool->conns[k];
		timer_cancel(&c->retry);
		timer_cancel(&c->watch);
		if (c->ac) {
			c->dropping = true;
			redisAsyncFree(c->ac); /* lost replies: resent or failed */
			c->dropping = false;
		}
		c->pending = 0;
		rehome(c);
		c->naddrs = 0;
		c->addr_i = 0;
		c->addr_ok = false;
		c->backoff_ms = BACKOFF_MIN_MS;
		if (!c->resolving)
			rconn_connect(c); /* a resolving one sees the new generation */
	}
	return true;
}

size_t rpool_pending(const rpool_t *pool)
{
	return pool->pending;
}

void rpool_free(rpool_t *pool)
{
	if (!pool)
		return;
	FAILS_ASSERT(pool->pins.count == 0); /* each goes with its last command */
	rp_undirty(pool);
	htab_free(&pool->pins);
	free(pool->channel);
	free(pool->name);
	free(pool);
}

