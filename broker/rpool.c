/*
 * rpool.c - Redis connection pool (see rpool.h).
 *
 * Each connection moves DOWN -> CONNECTING -> READY and back to DOWN when
 * hiredis reports a failed connect or a disconnect; CLOSING is final. hiredis
 * 0.14 frees the context itself after a failed connect or a disconnect, so
 * the connect and disconnect callbacks clear our pointer, and nothing here
 * frees a context hiredis owns. Every command is an rcmd_t that owns copies
 * of its arguments until its callback ran.
 *
 * The handshake (AUTH, SELECT, SCRIPT LOAD of every script) is pipelined
 * right after connecting; the connection is READY when its last reply came
 * back without error. Commands are only accepted on READY connections whose
 * context hiredis is not tearing down.
 *
 * Timeouts: each connection has one timer entry (watch): the connect
 * deadline while connecting, then the moment its oldest unanswered command
 * is overdue. A connection that misses either is dropped with
 * redisAsyncFree (every pending callback then runs with NULL) and
 * reconnected.
 */
#include "broker/rpool.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/htab.h"
#include "broker/log.h"
#include "broker/metrics.h"
#include "broker/redis_uv.h"
#include "broker/timers.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_CONNS 64
/* A connection that is not ready this long after connecting, or that has
 * commands pending and answered nothing this long, is dropped and
 * reconnected; its pending commands fail (hiredis 0.14 has no timeouts). */
#define CONNECT_TIMEOUT_MS 3000
#define COMMAND_TIMEOUT_MS 2000
/* How long a stopping broker waits for Redis to answer what is pending. */
#define CLOSE_TIMEOUT_MS 2000

typedef enum rconn_state {
	RC_DOWN,
	RC_CONNECTING,
	RC_READY,
	RC_CLOSING,
} rconn_state_t;

typedef struct rconn {
	redisAsyncContext *ac; /* NULL when hiredis freed it */
	rconn_state_t state;
	int idx;
	int handshake_left; /* replies still expected before READY */
	bool handshake_failed;
	bool dropping;        /* inside our own redisAsyncFree */
	bool subscriber;      /* the inbox connection, not a command one */
	uint32_t backoff_ms;
	size_t pending;       /* commands sent, not yet answered */
	uint64_t progress_at; /* last reply, or when pending went from 0 to 1 */
	timer_ent_t retry;
	timer_ent_t watch;
} rconn_t;

typedef struct rcmd {
	uint64_t sent_ns; /* uv_hrtime at send: the round-trip histogram */
	script_id_t script;
	bool retried;
	rpool_fn fn;
	void *priv;
	size_t len;
	char resp[]; /* EVALSHA sha nkeys args... in RESP, formatted once (also
	              * sent again after NOSCRIPT: the sha does not change),
	              * NUL-terminated */
} rcmd_t;

static struct {
	uv_loop_t *loop;
	const redis_addr_t *addr;
	rconn_t conns[MAX_CONNS + 1]; /* commands, then the subscriber */
	int n;                        /* command connections */
	int nall;                     /* n, plus 1 with a subscriber */
	char *channel;                /* the inbox channel, or NULL */
	void (*on_message)(const char *msg, size_t len);
	void (*on_subscribed)(void);
	size_t pending;
	char sha[SCRIPT__COUNT][41];
	uint32_t rand_state;
	void (*on_up)(void);
	uv_timer_t close_timer; /* bounds rpool_close */
	bool closing;
} P;

static void rconn_connect(rconn_t *c);

static bool usable(const rconn_t *c)
{
	return c->state == RC_READY && c->ac &&
	       !(c->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING));
}


static uint32_t jitter(uint32_t ms)
{
	/* xorshift32: spreads reconnects of many brokers; not for secrets. */
	uint32_t x = P.rand_state;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	P.rand_state = x;
	return ms - ms / 5 + x % (ms / 5 * 2 + 1); /* ms +- 20% */
}

static void on_retry(timer_ent_t *t)
{
	rconn_t *c = (rconn_t *)((char *)t - offsetof(rconn_t, retry));
	rconn_connect(c);
}

static void schedule_retry(rconn_t *c)
{
	if (c->state == RC_CLOSING)
		return;
	c->state = RC_DOWN;
	timer_cancel(&c->watch);
	timer_at(&c->retry, timers_now() + jitter(c->backoff_ms));
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;

	if (status != REDIS_OK) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d err=\"%s\"", c->idx, ac->errstr);
		c->ac = NULL; /* hiredis frees it after this callback */
		schedule_retry(c);
	}
}

static void close_timer_maybe_done(void);

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;
	bool was_ready = c->state == RC_READY;

	c->ac = NULL;
	if (c->dropping)
		return; /* rconn_drop schedules the retry */
	if (c->state == RC_CLOSING) {
		close_timer_maybe_done();
		return;
	}
	if (was_ready || status != REDIS_OK)
		LOG(LOG_WARN, "msg=\"redis connection lost\" conn=%d err=\"%s\"", c->idx,
		    status == REDIS_OK ? "closed" : ac->errstr);
	schedule_retry(c);
}

/* One handshake reply came back; the last one makes the connection ready. */
static void handshake_step(rconn_t *c)
{
	bool was_up;

	if (--c->handshake_left > 0)
		return;
	if (c->handshake_failed) {
		redisAsyncDisconnect(c->ac); /* on_disconnect schedules the retry */
		return;
	}
	was_up = rpool_up();
	c->state = RC_READY;
	c->backoff_ms = BACKOFF_MIN_MS;
	timer_cancel(&c->watch);
	LOG(LOG_INFO, "msg=\"redis connected\" conn=%d%s", c->idx, c->subscriber ? " role=inbox" : "");
	if (c->subscriber) {
		if (P.on_subscribed)
			P.on_subscribed();
	} else if (!was_up && P.on_up) {
		P.on_up();
	}
}

/* The subscriber's one callback: the subscribe confirmation (the last
 * handshake step), then every message on the inbox channel. */
static void on_inbox(redisAsyncContext *ac, void *r, void *priv)
{
	rconn_t *c = ac->data;
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
	    reply->element[2]->type == REDIS_REPLY_STRING && P.on_message)
		P.on_message(reply->element[2]->str, reply->element[2]->len);
}

static void on_handshake(redisAsyncContext *ac, void *r, void *priv)
{
	rconn_t *c = ac->data;
	redisReply *reply = r;
	intptr_t step = (intptr_t)priv; /* -1 AUTH/SELECT, else a script id */

	if (!reply || c->state != RC_CONNECTING)
		return; /* gone, dropped or closing: nothing to make ready */
	c->progress_at = timers_now();
	if (reply->type == REDIS_REPLY_ERROR) {
		if (!c->handshake_failed)
			LOG(LOG_ERROR, "msg=\"redis handshake failed\" conn=%d err=\"%.200s\"", c->idx, reply->str);
		c->handshake_failed = true;
	} else if (step >= 0 && reply->type == REDIS_REPLY_STRING && reply->len == 40) {
		memcpy(P.sha[step], reply->str, 40);
		P.sha[step][40] = '\0';
	}
	handshake_step(c);
}

/* Gives up on a connection that hangs: frees the context (its pending
 * callbacks run with NULL) and reconnects after the backoff. */
static void rconn_drop(rconn_t *c, const char *why)
{
	redisAsyncContext *ac = c->ac;

	LOG(LOG_WARN, "msg=\"redis connection dropped\" conn=%d why=\"%s\" pending=%zu", c->idx, why,
	    c->pending);
	c->state = RC_DOWN; /* no new commands while the callbacks run */
	if (ac) {
		c->dropping = true;
		redisAsyncFree(ac);
		c->dropping = false;
	}
	c->ac = NULL;
	c->pending = 0;
	schedule_retry(c);
}

static void on_watch(timer_ent_t *t)
{
	rconn_t *c = (rconn_t *)((char *)t - offsetof(rconn_t, watch));
	uint64_t now = timers_now();

	if (c->state == RC_CONNECTING) {
		rconn_drop(c, "connect timeout");
		return;
	}
	if (c->state != RC_READY || c->pending == 0)
		return;
	if (now - c->progress_at >= COMMAND_TIMEOUT_MS) {
		rconn_drop(c, "command timeout");
		return;
	}
	timer_at(&c->watch, c->progress_at + COMMAND_TIMEOUT_MS);
}

static void send_script_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv, script_id_t id)
{
	const struct script_src *src = script_get(id);
	const char *argv[3] = {"SCRIPT", "LOAD", src->text};
	size_t argvlen[3] = {6, 4, src->len};

	redisAsyncCommandArgv(ac, fn, priv, 3, argv, argvlen);
}

static void rconn_connect(rconn_t *c)
{
	const redis_addr_t *a = P.addr;
	redisAsyncContext *ac;

	ac = a->kind == URL_UNIX ? redisAsyncConnectUnix(a->path)
	                         : redisAsyncConnect(a->host, a->port);
	REQUIRE(ac != NULL);
	if (ac->err) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d err=\"%s\"", c->idx, ac->errstr);
		redisAsyncFree(ac);
		schedule_retry(c);
		return;
	}
	if (redis_uv_attach(ac, P.loop) != REDIS_OK) {
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
	c->handshake_left = c->subscriber ? 1 : SCRIPT__COUNT;
	c->pending = 0;
	timer_at(&c->watch, timers_now() + CONNECT_TIMEOUT_MS);

	/* hiredis buffers these until the socket is connected. */
	if (a->password) {
		const char *argv[2] = {"AUTH", a->password};
		size_t argvlen[2] = {4, strlen(a->password)};
		c->handshake_left++;
		redisAsyncCommandArgv(ac, on_handshake, (void *)(intptr_t)-1, 2, argv, argvlen);
	}
	if (c->subscriber) {
		/* Channels ignore the db; the confirmation ends the handshake. */
		redisAsyncCommand(ac, on_inbox, NULL, "SUBSCRIBE %s", P.channel);
		return;
	}
	if (a->db != 0) {
		c->handshake_left++;
		redisAsyncCommand(ac, on_handshake, (void *)(intptr_t)-1, "SELECT %d", a->db);
	}
	for (int id = 0; id < SCRIPT__COUNT; id++)
		send_script_load(ac, on_handshake, (void *)(intptr_t)id, id);
}

void rpool_init(uv_loop_t *loop, const redis_addr_t *addr, int n, void (*on_up)(void),
                const rpool_inbox_t *inbox)
{
	REQUIRE(n >= 1 && n <= MAX_CONNS);
	memset(&P, 0, sizeof(P));
	P.loop = loop;
	P.addr = addr;
	P.n = n;
	P.nall = n;
	P.on_up = on_up;
	if (inbox) {
		P.channel = xstrndup(inbox->channel, strlen(inbox->channel));
		P.on_message = inbox->on_message;
		P.on_subscribed = inbox->on_subscribed;
		P.conns[n].subscriber = true;
		P.nall = n + 1;
	}
	P.rand_state = (uint32_t)uv_hrtime() | 1u;
	uv_timer_init(loop, &P.close_timer);
	for (int k = 0; k < P.nall; k++) {
		rconn_t *c = &P.conns[k];
		c->idx = k;
		c->state = RC_DOWN;
		c->backoff_ms = BACKOFF_MIN_MS;
		timer_init(&c->retry, on_retry);
		timer_init(&c->watch, on_watch);
		rconn_connect(c);
	}
}

static void close_timer_maybe_done(void)
{
	for (int k = 0; k < P.nall; k++) {
		if (P.conns[k].ac)
			return;
	}
	if (P.closing && !uv_is_closing((uv_handle_t *)&P.close_timer))
		uv_close((uv_handle_t *)&P.close_timer, NULL);
}

static void on_close_timeout(uv_timer_t *h)
{
	(void)h;
	LOG(LOG_WARN, "msg=\"redis did not answer in time; closing anyway\"");
	for (int k = 0; k < P.nall; k++) {
		if (P.conns[k].ac)
			redisAsyncFree(P.conns[k].ac); /* on_disconnect clears it */
	}
	close_timer_maybe_done();
}

void rpool_close(void)
{
	P.closing = true;
	for (int k = 0; k < P.nall; k++) {
		rconn_t *c = &P.conns[k];
		c->state = RC_CLOSING;
		timer_cancel(&c->retry);
		timer_cancel(&c->watch);
		if (c->ac)
			redisAsyncDisconnect(c->ac);
	}
	uv_timer_start(&P.close_timer, on_close_timeout, CLOSE_TIMEOUT_MS, 0);
	close_timer_maybe_done();
}

bool rpool_up(void)
{
	for (int k = 0; k < P.n; k++) {
		if (usable(&P.conns[k]))
			return true;
	}
	return false;
}

size_t rpool_pending(void)
{
	return P.pending;
}

uint32_t rpool_route(const char *name, size_t len)
{
	return htab_hash(HTAB_HASH_INIT, name, len);
}

static rconn_t *pick(uint32_t route)
{
	for (int k = 0; k < P.n; k++) {
		rconn_t *c = &P.conns[(route + (uint32_t)k) % (uint32_t)P.n];
		if (usable(c))
			return c;
	}
	return NULL;
}

static void rcmd_free(rcmd_t *cmd)
{
	free(cmd);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv);

static int rcmd_send(rconn_t *c, rcmd_t *cmd)
{
	if (redisAsyncFormattedCommand(c->ac, on_reply, cmd, cmd->resp, cmd->len) != REDIS_OK)
		return -1;
	if (c->pending++ == 0) {
		c->progress_at = timers_now();
		timer_at(&c->watch, c->progress_at + COMMAND_TIMEOUT_MS);
	}
	return 0;
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	rcmd_t *cmd = priv;
	rconn_t *c = ac->data;

	if (c->pending > 0)
		c->pending--;
	if (reply) {
		c->progress_at = timers_now();
	} else if (c->state == RC_READY) {
		c->state = RC_DOWN; /* hiredis is failing this context */
	}
	if (reply && reply->type == REDIS_REPLY_ERROR && !cmd->retried &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0 && c->state == RC_READY) {
		/* Redis lost its scripts (restart, SCRIPT FLUSH): load and retry
		 * once, pipelined on this same connection so the order holds. */
		cmd->retried = true;
		send_script_load(ac, NULL, NULL, cmd->script);
		if (rcmd_send(c, cmd) == 0)
			return;
		reply = NULL;
	}
	P.pending--;
	if (reply)
		metrics_redis_rtt(uv_hrtime() - cmd->sent_ns);
	cmd->fn(reply, cmd->priv);
	rcmd_free(cmd);
}

/* Decimal digits of v, written at p; returns the end. */
static char *put_uint(char *p, size_t v)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

/* One RESP bulk string: "$" len CRLF bytes CRLF. */
static char *put_bulk(char *p, const char *s, size_t len)
{
	*p++ = '$';
	p = put_uint(p, len);
	*p++ = '\r';
	*p++ = '\n';
	memcpy(p, s, len);
	p += len;
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

int rpool_eval(uint32_t route, script_id_t script, int nkeys, int argc,
               const char *const *argv, const size_t *argvlen,
               rpool_fn fn, void *priv)
{
	rconn_t *c = pick(route);
	size_t total = 0;
	rcmd_t *cmd;
	char *p, nkeys_buf[24];

	if (!c || !P.sha[script][0])
		return -1;
	/* Each bulk costs at most 1 + 20 digits + 4 bytes of framing. */
	for (int k = 0; k < argc; k++)
		total += argvlen[k] + 25;
	total += 24 + 3 * 25 + 7 + 40 + sizeof(nkeys_buf) + 1;
	cmd = xmalloc(sizeof(*cmd) + total);
	cmd->sent_ns = uv_hrtime();
	cmd->script = script;
	cmd->retried = false;
	cmd->fn = fn;
	cmd->priv = priv;
	p = cmd->resp;
	*p++ = '*';
	p = put_uint(p, (size_t)argc + 3);
	*p++ = '\r';
	*p++ = '\n';
	p = put_bulk(p, "EVALSHA", 7);
	p = put_bulk(p, P.sha[script], 40);
	p = put_bulk(p, nkeys_buf, (size_t)(put_uint(nkeys_buf, (size_t)nkeys) - nkeys_buf));
	for (int k = 0; k < argc; k++)
		p = put_bulk(p, argv[k], argvlen[k]);
	cmd->len = (size_t)(p - cmd->resp);
	*p = '\0'; /* hiredis looks for the command name with strchr */
	if (rcmd_send(c, cmd) < 0) {
		rcmd_free(cmd);
		return -1;
	}
	P.pending++;
	return 0;
}

void rpool_free(void)
{
	free(P.channel);
	P.channel = NULL;
}
