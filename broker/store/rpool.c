/*
 * rpool.c - Redis connection pool (see rpool.h).
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
 * Every command is an rcmd_t that owns its RESP text until its callback
 * ran. The handshake (AUTH, CLIENT SETNAME, SELECT, INFO server, SCRIPT LOAD
 * of every script) is pipelined right after connecting; the connection is
 * READY when its last reply came back without error. Commands are only
 * accepted on READY connections whose context hiredis is not tearing down.
 *
 * Order on a connection is the order of the requests: a command that gets
 * NOSCRIPT (SCRIPT FLUSH, or a Redis that lost its scripts behind a proxy)
 * did not run, and neither did the commands behind it that got NOSCRIPT
 * too; commands sent after it must not pass it. So the connection starts
 * reloading: what it sends from then on is held, the NOSCRIPT'd commands
 * are kept in order, and once every reply is in, every script is loaded
 * again and the kept commands go out first, then the held ones. (Another
 * client may load a script while replies are still coming: a command behind
 * the first NOSCRIPT then runs; nothing can undo that, and it is logged.)
 *
 * A lost reply (the connection dropped after the command was written)
 * leaves the command's fate unknown. A command sent with retry_until is
 * idempotent (every lock script takes a repeat as a repeat): it is sent
 * again, on whichever connection serves its route, until it is answered or
 * retry_until passes; only then does its callback see NULL. A command sent
 * again pins its route to the connection it went out on until it is
 * answered, so a later command of the route (the lock's next op) does not
 * pass it on the route's own connection once that one is back; on a
 * connection that was reloading, it keeps its place among the commands
 * kept there.
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

#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/counters.h"
#include "broker/store/redis_uv.h"
#include "broker/base/timers.h"

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
#define RUN_ID_LEN 40
#define MAX_ADDRS 8 /* addresses of a resolved host tried in turn */
#define MAX_PINS 64 /* routes pinned at once (more: not pinned) */

/* Handshake steps that are not a script's SCRIPT LOAD. */
#define STEP_PLAIN ((intptr_t)-1)
#define STEP_INFO ((intptr_t)-2)

typedef enum rconn_state {
	RC_DOWN,
	RC_RESOLVING,
	RC_CONNECTING,
	RC_READY,
	RC_CLOSING,
} rconn_state_t;

typedef struct rcmd rcmd_t;

/* Commands in order, oldest first. */
typedef struct cmdlist {
	rcmd_t *head, *tail;
} cmdlist_t;

typedef struct rconn {
	redisAsyncContext *ac; /* NULL once hiredis freed it */
	rconn_state_t state;
	int idx;
	int handshake_left; /* replies still expected before READY */
	bool handshake_failed;
	bool subscriber;      /* the inbox connection, not a command one */
	bool dropping;        /* inside our own redisAsyncFree (rconn_drop) */
	bool reloading;       /* NOSCRIPT seen: see the header */
	bool resolving;       /* gai is in flight */
	bool addr_ok;         /* addrs[addr_i] made a ready connection */
	int naddrs, addr_i;   /* the host's addresses; the one to try next */
	char addrs[MAX_ADDRS][64];
	cmdlist_t redo;       /* answered NOSCRIPT while reloading, in order */
	cmdlist_t held;       /* sent while reloading, in order */
	uint32_t backoff_ms;
	size_t pending;       /* commands sent, not yet answered */
	uint64_t progress_at; /* last reply, or when pending went from 0 to 1 */
	timer_ent_t retry;
	timer_ent_t watch;
	uv_getaddrinfo_t gai;
} rconn_t;

struct rcmd {
	rcmd_t *next;         /* in a cmdlist */
	timer_ent_t give_up;  /* retry_until, while waiting in P.waiting */
	uint64_t sent_ns;     /* uv_hrtime at the last send: round-trip metric */
	uint64_t retry_until; /* 0: a lost reply is reported at once */
	uint32_t route;
	script_id_t script;
	bool reloaded;        /* sent again after NOSCRIPT already */
	bool replayed;        /* sent again after a lost reply */
	bool pinned;          /* holds a pin on its route (see the header) */
	store_fn fn;
	void *priv;
	size_t len;
	char resp[]; /* EVALSHA sha nkeys args... in RESP, formatted once (the
	              * sha does not change when a script is loaded again),
	              * NUL-terminated */
};

static struct {
	uv_loop_t *loop;
	const redis_addr_t *addr;
	rconn_t conns[MAX_CONNS + 1]; /* commands, then the subscriber */
	int n;                        /* command connections */
	int nall;                     /* n, plus 1 with a subscriber */
	char *channel;                /* the inbox channel, or NULL */
	char *name;                   /* CLIENT SETNAME prefix */
	void (*on_message)(const char *msg, size_t len);
	void (*on_subscribed)(void);
	void (*on_up)(void);
	void (*on_data_loss)(const char *why);
	size_t pending;     /* commands accepted whose callback has not run */
	cmdlist_t waiting;  /* lost replies waiting for a connection to resend */
	char sha[SCRIPT__COUNT][41];
	char run_id[RUN_ID_LEN + 1]; /* of the Redis last seen; "" before */
	const char *loss;            /* a data loss to report once a
	                              * connection is ready, or NULL */
	uint32_t rand_state;
	uv_timer_t close_timer; /* bounds rpool_close */
	bool closing;
	bool in_replay; /* rpool_replayed() */
	struct pin {
		uint32_t route;
		int conn;       /* index into conns */
		unsigned count; /* commands sent again on it, not yet answered */
	} pins[MAX_PINS];
	int npins;
} P;

static void rconn_connect(rconn_t *c);
static void on_reply(redisAsyncContext *ac, void *r, void *priv);
static void dispatch(rcmd_t *cmd);

/* ---- command lists ------------------------------------------------------- */

static void list_push(cmdlist_t *l, rcmd_t *cmd)
{
	cmd->next = NULL;
	if (l->tail)
		l->tail->next = cmd;
	else
		l->head = cmd;
	l->tail = cmd;
}

static rcmd_t *list_pop(cmdlist_t *l)
{
	rcmd_t *cmd = l->head;

	if (cmd) {
		l->head = cmd->next;
		if (!l->head)
			l->tail = NULL;
		cmd->next = NULL;
	}
	return cmd;
}

static void list_remove(cmdlist_t *l, rcmd_t *cmd)
{
	rcmd_t *prev = NULL;

	for (rcmd_t *k = l->head; k; prev = k, k = k->next) {
		if (k != cmd)
			continue;
		if (prev)
			prev->next = k->next;
		else
			l->head = k->next;
		if (l->tail == k)
			l->tail = prev;
		k->next = NULL;
		return;
	}
}

/* ---- connections ---------------------------------------------------------- */

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

/* The commands a connection kept or held (see the header) did not run:
 * they go to another connection, or wait for one. */
static void rehome(rconn_t *c)
{
	rcmd_t *cmd;

	c->reloading = false;
	while ((cmd = list_pop(&c->redo)) != NULL)
		dispatch(cmd);
	while ((cmd = list_pop(&c->held)) != NULL)
		dispatch(cmd);
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
	timer_at(&c->retry, timers_now() + jitter(c->backoff_ms));
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

static void close_timer_maybe_done(void);

/* redis_uv: hiredis freed the context (any path). */
static void on_freed(void *priv)
{
	rconn_t *c = priv;

	c->ac = NULL;
	if (c->state == RC_CLOSING)
		close_timer_maybe_done();
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;

	if (status != REDIS_OK) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d err=\"%s\"", c->idx, ac->errstr);
		schedule_retry(c); /* hiredis frees the context after this */
	}
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	rconn_t *c = ac->data;
	bool was_ready = c->state == RC_READY;

	if (c->state == RC_CLOSING || c->dropping)
		return; /* closing, or rconn_drop schedules the retry */
	if (was_ready || status != REDIS_OK)
		LOG(LOG_WARN, "msg=\"redis connection lost\" conn=%d err=\"%s\"", c->idx,
		    status == REDIS_OK ? "closed" : ac->errstr);
	schedule_retry(c);
}

/* Sends what waits for a connection (lost replies to resend). */
static void flush_waiting(void)
{
	cmdlist_t all = P.waiting;
	rcmd_t *cmd;

	P.waiting = (cmdlist_t){NULL, NULL};
	while ((cmd = list_pop(&all)) != NULL) {
		timer_cancel(&cmd->give_up);
		dispatch(cmd);
	}
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
	c->addr_ok = true;
	c->backoff_ms = BACKOFF_MIN_MS;
	timer_cancel(&c->watch);
	LOG(LOG_INFO, "msg=\"redis connected\" conn=%d%s", c->idx, c->subscriber ? " role=inbox" : "");
	if (c->subscriber) {
		if (P.on_subscribed)
			P.on_subscribed();
		return;
	}
	flush_waiting();
	if (!was_up && P.on_up)
		P.on_up();
	if (P.loss && P.on_data_loss) {
		const char *why = P.loss;
		P.loss = NULL;
		P.on_data_loss(why);
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

/* INFO server's run_id: a new one is a Redis that restarted (or another
 * server answering at the address). */
static void check_run_id(const redisReply *reply)
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
	if (strcmp(id, P.run_id) == 0)
		return;
	if (P.run_id[0]) {
		LOG(LOG_WARN, "msg=\"redis restarted: its data may be lost\" run_id=%.8s.. was=%.8s..", id,
		    P.run_id);
		memcpy(P.run_id, id, sizeof(id));
		P.loss = "redis restarted"; /* reported when the connection is ready */
		return;
	}
	memcpy(P.run_id, id, sizeof(id));
}

static void on_handshake(redisAsyncContext *ac, void *r, void *priv)
{
	rconn_t *c = ac->data;
	redisReply *reply = r;
	intptr_t step = (intptr_t)priv; /* STEP_*, else a script id */

	if (!reply || c->state != RC_CONNECTING)
		return; /* gone, dropped or closing: nothing to make ready */
	c->progress_at = timers_now();
	if (reply->type == REDIS_REPLY_ERROR) {
		if (!c->handshake_failed)
			LOG(LOG_ERROR, "msg=\"redis handshake failed\" conn=%d err=\"%.200s\"", c->idx, reply->str);
		c->handshake_failed = true;
	} else if (step == STEP_INFO) {
		check_run_id(reply);
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
	LOG(LOG_WARN, "msg=\"redis connection dropped\" conn=%d why=\"%s\" pending=%zu", c->idx, why,
	    c->pending);
	c->state = RC_DOWN; /* no new commands while the callbacks run */
	if (c->ac) {
		c->dropping = true;
		redisAsyncFree(c->ac); /* on_freed clears c->ac */
		c->dropping = false;
	}
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

/* Opens the connection to host (a numeric address, or NULL for the Unix
 * socket) and pipelines the handshake. */
static void rconn_open(rconn_t *c, const char *host)
{
	const redis_addr_t *a = P.addr;
	redisAsyncContext *ac;
	char cname[128];

	ac = host ? redisAsyncConnect(host, a->port) : redisAsyncConnectUnix(a->path);
	REQUIRE(ac != NULL);
	if (ac->err) {
		LOG(LOG_WARN, "msg=\"redis connect failed\" conn=%d err=\"%s\"", c->idx, ac->errstr);
		redisAsyncFree(ac);
		schedule_retry(c);
		return;
	}
	if (redis_uv_attach(ac, P.loop, on_freed, c) != REDIS_OK) {
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
		snprintf(cname, sizeof(cname), "%s:inbox", P.name);
	else
		snprintf(cname, sizeof(cname), "%s:%d", P.name, c->idx);
	c->handshake_left++;
	redisAsyncCommand(ac, on_handshake, (void *)STEP_PLAIN, "CLIENT SETNAME %s", cname);
	if (c->subscriber) {
		/* Channels ignore the db; the confirmation ends the handshake. */
		c->handshake_left++;
		redisAsyncCommand(ac, on_inbox, NULL, "SUBSCRIBE %s", P.channel);
		return;
	}
	if (a->db != 0) {
		c->handshake_left++;
		redisAsyncCommand(ac, on_handshake, (void *)STEP_PLAIN, "SELECT %d", a->db);
	}
	c->handshake_left++;
	redisAsyncCommand(ac, on_handshake, (void *)STEP_INFO, "INFO server");
	for (int id = 0; id < SCRIPT__COUNT; id++) {
		c->handshake_left++;
		send_script_load(ac, on_handshake, (void *)(intptr_t)id, id);
	}
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	rconn_t *c = (rconn_t *)((char *)req - offsetof(rconn_t, gai));

	c->resolving = false;
	c->naddrs = 0;
	c->addr_i = 0;
	for (struct addrinfo *ai = status == 0 ? res : NULL; ai && c->naddrs < MAX_ADDRS; ai = ai->ai_next) {
		char *ip = c->addrs[c->naddrs];
		if (ai->ai_family == AF_INET6)
			uv_ip6_name((const struct sockaddr_in6 *)ai->ai_addr, ip, sizeof(c->addrs[0]));
		else if (ai->ai_family == AF_INET)
			uv_ip4_name((const struct sockaddr_in *)ai->ai_addr, ip, sizeof(c->addrs[0]));
		else
			continue;
		c->naddrs++;
	}
	uv_freeaddrinfo(res);
	if (c->state != RC_RESOLVING) {
		close_timer_maybe_done(); /* closing: cancelled */
		return;
	}
	if (c->naddrs == 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the redis host\" conn=%d host=\"%s\" err=\"%s\"", c->idx,
		    P.addr->host, status ? uv_strerror(status) : "no address");
		schedule_retry(c);
		return;
	}
	rconn_open(c, c->addrs[0]);
}

static void rconn_connect(rconn_t *c)
{
	const redis_addr_t *a = P.addr;
	struct in6_addr a6;
	struct addrinfo hints;
	int rc;

	if (a->kind == URL_UNIX) {
		rconn_open(c, NULL);
		return;
	}
	if (uv_inet_pton(AF_INET, a->host, &a6) == 0 || uv_inet_pton(AF_INET6, a->host, &a6) == 0) {
		rconn_open(c, a->host);
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
	rc = uv_getaddrinfo(P.loop, &c->gai, on_resolved, a->host, NULL, &hints);
	if (rc != 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the redis host\" conn=%d host=\"%s\" err=\"%s\"", c->idx,
		    a->host, uv_strerror(rc));
		schedule_retry(c);
		return;
	}
	c->resolving = true;
}

void rpool_init(uv_loop_t *loop, const redis_addr_t *addr, int n, const char *name,
                const rpool_callbacks_t *cb, const rpool_inbox_t *inbox)
{
	REQUIRE(n >= 1 && n <= MAX_CONNS);
	memset(&P, 0, sizeof(P));
	P.name = xstrndup(name, strlen(name));
	P.loop = loop;
	P.addr = addr;
	P.n = n;
	P.nall = n;
	P.on_up = cb->on_up;
	P.on_data_loss = cb->on_data_loss;
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
		if (P.conns[k].ac || P.conns[k].resolving)
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
			redisAsyncFree(P.conns[k].ac); /* on_freed clears it */
	}
	close_timer_maybe_done();
}

static void deliver(rcmd_t *cmd, const redisReply *reply);

void rpool_close(void)
{
	rcmd_t *cmd;

	P.closing = true;
	while ((cmd = list_pop(&P.waiting)) != NULL) {
		timer_cancel(&cmd->give_up);
		deliver(cmd, NULL);
	}
	for (int k = 0; k < P.nall; k++) {
		rconn_t *c = &P.conns[k];
		c->state = RC_CLOSING;
		timer_cancel(&c->retry);
		timer_cancel(&c->watch);
		while ((cmd = list_pop(&c->redo)) != NULL)
			deliver(cmd, NULL);
		while ((cmd = list_pop(&c->held)) != NULL)
			deliver(cmd, NULL);
		if (c->resolving)
			uv_cancel((uv_req_t *)&c->gai);
		if (!c->ac)
			continue;
		if (c->ac->c.flags & REDIS_CONNECTED)
			redisAsyncDisconnect(c->ac); /* after the pending replies */
		else
			redisAsyncFree(c->ac); /* a connect in progress: nothing to wait for */
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

static struct pin *pin_find(uint32_t route)
{
	for (int k = 0; k < P.npins; k++)
		if (P.pins[k].route == route)
			return &P.pins[k];
	return NULL;
}

/* cmd, sent again on c, pins its route to c until it is answered. */
static void pin(rcmd_t *cmd, const rconn_t *c)
{
	struct pin *p = pin_find(cmd->route);

	if (!p && P.npins < MAX_PINS) {
		p = &P.pins[P.npins++];
		*p = (struct pin){cmd->route, c->idx, 0};
	}
	if (p && p->conn == c->idx) {
		p->count++;
		cmd->pinned = true;
	}
}

static void unpin(rcmd_t *cmd)
{
	struct pin *p = cmd->pinned ? pin_find(cmd->route) : NULL;

	cmd->pinned = false;
	if (p && --p->count == 0)
		*p = P.pins[--P.npins];
}

static rconn_t *pick(uint32_t route)
{
	struct pin *p = P.npins ? pin_find(route) : NULL;

	if (p && usable(&P.conns[p->conn]))
		return &P.conns[p->conn];
	for (int k = 0; k < P.n; k++) {
		rconn_t *c = &P.conns[(route + (uint32_t)k) % (uint32_t)P.n];
		if (usable(c))
			return c;
	}
	return NULL;
}

/* ---- commands ------------------------------------------------------------- */

/* The callback runs, once; the command is done. */
static void deliver(rcmd_t *cmd, const redisReply *reply)
{
	unpin(cmd);
	P.pending--;
	if (reply)
		counters_redis_rtt(uv_hrtime() - cmd->sent_ns);
	P.in_replay = cmd->replayed;
	cmd->fn(reply, cmd->priv);
	P.in_replay = false;
	free(cmd);
}

bool rpool_replayed(void)
{
	return P.in_replay;
}

static int conn_send(rconn_t *c, rcmd_t *cmd)
{
	if (c->reloading) {
		list_push(&c->held, cmd);
		return 0;
	}
	cmd->sent_ns = uv_hrtime();
	if (redisAsyncFormattedCommand(c->ac, on_reply, cmd, cmd->resp, cmd->len) != REDIS_OK)
		return -1;
	if (c->pending++ == 0) {
		c->progress_at = timers_now();
		timer_at(&c->watch, c->progress_at + COMMAND_TIMEOUT_MS);
	}
	return 0;
}

static void on_give_up(timer_ent_t *t)
{
	rcmd_t *cmd = (rcmd_t *)((char *)t - offsetof(rcmd_t, give_up));

	list_remove(&P.waiting, cmd);
	deliver(cmd, NULL);
}

/* Sends cmd (again) on a connection that serves its route. With none
 * ready, a command that may be resent waits for one; another fails. */
static void dispatch(rcmd_t *cmd)
{
	rconn_t *c = P.closing ? NULL : pick(cmd->route);

	unpin(cmd);
	if (c && conn_send(c, cmd) == 0) {
		pin(cmd, c);
		return;
	}
	if (!P.closing && cmd->retry_until > timers_now()) {
		list_push(&P.waiting, cmd);
		timer_at(&cmd->give_up, cmd->retry_until);
		return;
	}
	deliver(cmd, NULL);
}

/* Every reply of a reloading connection is in: load the scripts again,
 * then send what it kept and what it held, in that order. */
static void reload_when_quiet(rconn_t *c)
{
	rcmd_t *cmd;

	if (!c->reloading || c->pending > 0 || !usable(c))
		return;
	LOG(LOG_WARN, "msg=\"redis lost its scripts; loading them again\" conn=%d", c->idx);
	for (int id = 0; id < SCRIPT__COUNT; id++)
		send_script_load(c->ac, NULL, NULL, id);
	c->reloading = false;
	while ((cmd = list_pop(&c->redo)) != NULL)
		if (conn_send(c, cmd) < 0)
			dispatch(cmd);
	while ((cmd = list_pop(&c->held)) != NULL)
		if (conn_send(c, cmd) < 0)
			dispatch(cmd);
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
	if (reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 &&
	    !cmd->reloaded && c->state == RC_READY) {
		/* It did not run: kept, in order, until the scripts are back. */
		cmd->reloaded = true;
		c->reloading = true;
		list_push(&c->redo, cmd);
		reload_when_quiet(c);
		return;
	}
	if (reply && c->reloading && reply->type != REDIS_REPLY_ERROR)
		LOG(LOG_WARN, "msg=\"a command ran after an earlier one found no script\" conn=%d", c->idx);
	if (!reply && cmd->retry_until > timers_now() && !P.closing) {
		/* Its fate is unknown: sent again (it is idempotent); behind
		 * what this connection kept, when it was reloading. */
		cmd->replayed = true;
		if (c->reloading)
			list_push(&c->redo, cmd);
		else
			dispatch(cmd);
		return;
	}
	deliver(cmd, reply);
	if (reply)
		reload_when_quiet(c);
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
               store_fn fn, void *priv, uint64_t retry_until)
{
	rconn_t *c = P.closing ? NULL : pick(route);
	size_t total = 0;
	rcmd_t *cmd;
	char *p, nkeys_buf[24];

	if (!P.sha[script][0] || (!c && retry_until <= timers_now()) || P.closing)
		return -1;
	/* Each bulk costs at most 1 + 20 digits + 4 bytes of framing. */
	for (int k = 0; k < argc; k++)
		total += argvlen[k] + 25;
	total += 24 + 3 * 25 + 7 + 40 + sizeof(nkeys_buf) + 1;
	cmd = xmalloc(sizeof(*cmd) + total);
	cmd->next = NULL;
	timer_init(&cmd->give_up, on_give_up);
	cmd->retry_until = retry_until;
	cmd->route = route;
	cmd->script = script;
	cmd->reloaded = false;
	cmd->replayed = false;
	cmd->pinned = false;
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
	if (c && conn_send(c, cmd) == 0) {
		P.pending++;
		return 0;
	}
	if (retry_until > timers_now()) {
		P.pending++;
		list_push(&P.waiting, cmd);
		timer_at(&cmd->give_up, retry_until);
		return 0;
	}
	free(cmd);
	return -1;
}

void rpool_free(void)
{
	free(P.channel);
	P.channel = NULL;
	free(P.name);
	P.name = NULL;
}
