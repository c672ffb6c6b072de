/*
 * rpool_cmd.c - Redis connection pool, part two: the commands (see rpool.h;
 * the connections are rpool.c).
 *
 * Every command is an rcmd_t that owns its RESP text until its callback
 * ran.
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
 * retry_until passes; only then does its callback see NULL. Commands that
 * wait for a connection wait in the order of their requests (their seq),
 * whatever order their connections failed them in.
 *
 * Order across connections: a route's commands go on the connection the
 * route picks. One sent elsewhere (its own connection is down: a
 * fallback) or sent again pins its route to the connection it went out
 * on until it is answered (struct pin, rpool_int.h), so a later command
 * of the route (the lock's next op) does not pass it on the route's own
 * connection once that one is back; on a connection that was reloading,
 * it keeps its place among the commands kept there. A pin whose
 * connection is lost moves with its commands, which are sent again first.
 *
 * Batches (batch_max > 1): a connection queues what it is given (outq)
 * and rpool_flush, once the loop turn's callbacks ran, sends the queue:
 * one call alone as before; two or more as one EVALSHA of lua/batch.lua
 * (at most batch_max each), which runs them in order, each as its own
 * script would, and answers each. Nothing waits to fill a batch: a call
 * leaves in the turn it was made, as it did when written at once (hiredis
 * writes in the loop's next poll either way). Each call of a batch is
 * then handled as if its reply had come alone: an element of the reply is
 * its reply; a reply for the whole batch (lost, NOSCRIPT, READONLY, any
 * error) is each one's, so a lost batch resends the calls that may be
 * resent and fails the rest, and a NOSCRIPT keeps them all, in order, for
 * after the reload. A WAIT goes behind the batch when a call of it wants
 * one; those calls' replies wait for it. ASKING (Redis Cluster) goes
 * before a call alone, never a batch, and a call sent with RP_ALONE never
 * goes in one. batch_slots (a Redis Cluster master): lua/batch_slots.lua,
 * the calls' keys passed as args (see rpool.h).
 */
#include "broker/store/redis_uv.h"
#include "broker/store/rpool.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/counters.h"
#include "broker/base/shared.h"
#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/rpool_int.h"

/* The delivery under way, whichever pool: rpool_replayed, rpool_replicated. */
static struct {
	bool replayed;
	bool unacked;
} delivery;

static void on_reply(redisAsyncContext *ac, void *r, void *priv);
static void on_wait_reply(redisAsyncContext *ac, void *r, void *priv);
static void reload_when_quiet(rconn_t *c);
static void on_give_up(timer_ent_t *t);
static char *put_uint(char *p, size_t v);
static char *put_bulk(char *p, const char *s, size_t len);

/* Pools with queued calls (rpool_flush). */
static rpool_t *dirty_pools;

#define BAD_BATCH "ERR a batch was answered with something else than its calls' replies"
/* A reply for a batch that is not one: each call of it fails with it. */
static const redisReply bad_batch_reply = {
	.type = REDIS_REPLY_ERROR,
	.str = (char *)BAD_BATCH,
	.len = sizeof(BAD_BATCH) - 1,
};

/* The WAIT sent behind cmd answers nobody now: cmd goes another way. */
static void wait_detach(rcmd_t *cmd)
{
	if (cmd->wref) {
		cmd->wref->cmd = NULL;
		cmd->wref = NULL;
	}
}

/* ---- command lists ------------------------------------------------------- */

void rp_list_push(cmdlist_t *l, rcmd_t *cmd)
{
	cmd->next = NULL;
	if (l->tail)
		l->tail->next = cmd;
	else
		l->head = cmd;
	l->tail = cmd;
}

rcmd_t *rp_list_pop(cmdlist_t *l)
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

uint32_t rpool_route(const char *name, size_t len)
{
	return htab_hash(HTAB_HASH_INIT, name, len);
}

static bool pin_match(const htab_node_t *n, const void *key)
{
	return ((const struct pin *)(const void *)n)->route == *(const uint32_t *)key;
}

static struct pin *pin_find(rpool_t *pool, uint32_t route)
{
	return (struct pin *)(void *)htab_find(&pool->pins, route, pin_match, &route);
}

/* The connection a route picks when nothing pins it. */
static int own_conn(const rpool_t *pool, uint32_t route)
{
	return (int)(route % (uint32_t)pool->n);
}

/* cmd went out on c: off its route's own connection (a fallback), or sent
 * again, it pins the route to c until it is answered, so that a later
 * command of the route cannot pass it on another connection (the route's
 * own one, back meanwhile). A pin whose connection was lost moves to c:
 * its commands there are being sent again. */
static void pin(rcmd_t *cmd, const rconn_t *c)
{
	rpool_t *pool = cmd->pool;
	struct pin *p = pool->pins.count ? pin_find(pool, cmd->route) : NULL;

	if (!p && !cmd->replayed && c->idx == own_conn(pool, cmd->route))
		return; /* on its own connection, where later ones go too */
	if (!p) {
		p = xcalloc(1, sizeof(*p));
		p->route = cmd->route;
		htab_insert(&pool->pins, &p->node, cmd->route);
	}
	p->conn = c->idx;
	p->count++;
	cmd->pinned = true;
}

static void unpin(rcmd_t *cmd)
{
	rpool_t *pool = cmd->pool;
	struct pin *p = cmd->pinned ? pin_find(pool, cmd->route) : NULL;

	cmd->pinned = false;
	if (p && --p->count == 0) {
		htab_remove(&pool->pins, &p->node);
		free(p);
	}
}

/* check: a command of the check after a failover, which passes the gate. */
static rconn_t *pick(rpool_t *pool, uint32_t route, bool check)
{
	struct pin *p = pool->pins.count ? pin_find(pool, route) : NULL;

	if (pool->checking && !pool->in_check_cb && !check)
		return NULL; /* closed for the check after a failover */
	if (p && rp_usable(&pool->conns[p->conn]))
		return &pool->conns[p->conn];
	for (int k = 0; k < pool->n; k++) {
		rconn_t *c = &pool->conns[(route + (uint32_t)k) % (uint32_t)pool->n];
		if (rp_usable(c))
			return c;
	}
	return NULL;
}

/* Waiting commands (lost replies to send again) in the order of their
 * requests, whatever order their connections failed them in. */
static void wait_for_conn(rpool_t *pool, rcmd_t *cmd)
{
	cmdlist_t *l = &pool->waiting;
	rcmd_t *prev = NULL;

	if (!l->tail || l->tail->seq < cmd->seq) {
		rp_list_push(l, cmd); /* the usual case: the newest */
	} else {
		for (rcmd_t *k = l->head; k && k->seq < cmd->seq; k = k->next)
			prev = k;
		cmd->next = prev ? prev->next : l->head;
		if (prev)
			prev->next = cmd;
		else
			l->head = cmd;
	}
	timer_at(&cmd->give_up, cmd->retry_until);
}

/* ---- commands ------------------------------------------------------------- */

/* The callback runs, once; the command is done. */
void rp_deliver(rcmd_t *cmd, const redisReply *reply)
{
	redisReply *held = cmd->held;

	wait_detach(cmd);
	unpin(cmd);
	cmd->pool->pending--;
	if (reply)
		counters_redis_rtt(uv_hrtime() - cmd->sent_ns);
	delivery.replayed = cmd->replayed;
	if (cmd->unacked)
		delivery.unacked = true;
	cmd->fn(reply, cmd->priv);
	delivery.replayed = false;
	if (cmd->unacked)
		delivery.unacked = false;
	redis_reply_free(held);
	free(cmd);
}

bool rpool_replayed(void)
{
	return delivery.replayed;
}

bool rpool_replicated(void)
{
	return !delivery.unacked;
}

/* cmd ran, and its writes are on fewer replicas than asked for (or
 * nobody could tell): its callback hears so. */
static void deliver_unacked(rcmd_t *cmd, const redisReply *reply, const char *why)
{
	static uint64_t logged_at;
	uint64_t now = timers_now();

	if (!logged_at || now - logged_at >= 5000) {
		logged_at = now;
		LOG(LOG_WARN, "msg=\"a write was not acknowledged by enough replicas\" want=%d why=\"%s\"",
		    cmd->pool->wait_replicas, why);
	}
	cmd->pool->unacked_total++;
	delivery.unacked = true;
	rp_deliver(cmd, reply);
	delivery.unacked = false;
}

/* The fence floor, STORE_FLOOR_DIGITS digits with leading zeros. */
static void put_floor(char *at, int64_t floor)
{
	uint64_t v = floor > 0 ? (uint64_t)floor : 0;

	for (int k = STORE_FLOOR_DIGITS - 1; k >= 0; k--) {
		at[k] = (char)('0' + v % 10);
		v /= 10;
	}
}

/* Writes cmd (a call or a batch) to c's hiredis context: 0, or -1 when
 * hiredis takes nothing more on it. */
static int conn_write(rconn_t *c, rcmd_t *cmd)
{
	rpool_t *pool = c->pool;

	cmd->sent_ns = uv_hrtime();
	for (int i = 0; i < cmd->nsub; i++)
		cmd->sub[i]->sent_ns = cmd->sent_ns;
	if (cmd->floor_off)
		put_floor(cmd->resp + cmd->floor_off, server.fence_high);
	if (cmd->asking) {
		/* Its reply (+OK) answers nobody; it opens the slot on this
		 * connection for the next command only. */
		static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
		if (redisAsyncFormattedCommand(c->ac, NULL, NULL, asking, sizeof(asking) - 1) != REDIS_OK)
			return -1;
	}
	if (redisAsyncFormattedCommand(c->ac, on_reply, cmd, cmd->resp, cmd->len) != REDIS_OK)
		return -1;
	if (c->pending++ == 0) {
		c->progress_at = timers_now();
		timer_at(&c->watch, c->progress_at + pool->cmd_timeout_ms);
	}
	if (cmd->wait && pool->wait_replicas > 0) {
		/* Right behind it on the same connection: WAIT counts the
		 * replicas that have this connection's writes so far. */
		struct waitref *w = xmalloc(sizeof(*w));
		w->cmd = cmd;
		if (redisAsyncFormattedCommand(c->ac, on_wait_reply, w, pool->wait_cmd,
		                               pool->wait_cmd_len) == REDIS_OK) {
			cmd->wref = w;
			c->pending++;
		} else {
			free(w); /* its reply is then delivered as not acknowledged */
		}
	}
	return 0;
}

static void mark_dirty(rpool_t *pool)
{
	if (pool->dirty)
		return;
	pool->dirty = true;
	pool->next_dirty = dirty_pools;
	dirty_pools = pool;
}

void rp_undirty(rpool_t *pool)
{
	for (rpool_t **pp = &dirty_pools; *pp; pp = &(*pp)->next_dirty) {
		if (*pp == pool) {
			*pp = pool->next_dirty;
			break;
		}
	}
	pool->dirty = false;
	pool->next_dirty = NULL;
}

/* cmd goes out on c: held while c reloads its scripts; queued for
 * rpool_flush when the pool batches; else written now. 0, or -1 when
 * hiredis took nothing. */
static int conn_send(rconn_t *c, rcmd_t *cmd)
{
	if (c->reloading) {
		rp_list_push(&c->held, cmd);
		return 0;
	}
	if (c->pool->batch_max < 2)
		return conn_write(c, cmd);
	rp_list_push(&c->outq, cmd);
	mark_dirty(c->pool);
	return 0;
}

/* cmd was queued on a connection that was lost before the flush: it did
 * not run, and goes to another connection (or waits, or fails) as a call
 * made now would. */
static void send_elsewhere(rcmd_t *cmd)
{
	unpin(cmd);
	rp_dispatch(cmd);
}

/* cmd has no connection to go on now: it waits for one when it may be
 * resent (retry_until), else it fails. */
static void wait_or_fail(rcmd_t *cmd)
{
	rpool_t *pool = cmd->pool;

	if (!pool->closing && cmd->retry_until > timers_now())
		wait_for_conn(pool, cmd);
	else
		rp_deliver(cmd, NULL);
}

/* hiredis refused cmd on a connection that still looks usable: it did not
 * run (sent elsewhere, it could be refused there again at once). */
static void send_failed(rcmd_t *cmd)
{
	unpin(cmd);
	wait_or_fail(cmd);
}

/* The batch of the n calls at the head of c's queue, in order: EVALSHA
 * of the pool's batch script; ARGV n, then 'k' (every call's keys are
 * KEYS, in order) or, batch_slots, 's' (no key declared: each call's keys
 * follow its counts); then per call its script's name, its number of
 * keys and of args, ('s': its keys,) its args (lua/batch.lua). */
static rcmd_t *batch_make(rconn_t *c, int n)
{
	rpool_t *pool = c->pool;
	script_id_t script = rp_batch_script(pool);
	bool slots = pool->batch_slots;
	size_t total = 0, nkeys = 0, nbulks = 5;
	rcmd_t *b, *k;
	char *p, num[24];
	int i = 0;

	for (k = c->outq.head; i < n; k = k->next, i++) {
		total += k->len - k->keys_off + 3 * 25 + 16;
		nkeys += k->nkeys;
		nbulks += (size_t)k->nkeys + 3 + k->nargs;
	}
	total += 24 + 5 * 25 + 7 + 40 + 8 + 1;
	b = xcalloc(1, sizeof(*b) + total);
	b->pool = pool;
	b->script = script;
	timer_init(&b->give_up, on_give_up);
	b->sub = xmalloc((size_t)n * sizeof(*b->sub));
	b->nsub = n;
	for (i = 0; i < n; i++) {
		rcmd_t *cmd = rp_list_pop(&c->outq);
		b->sub[i] = cmd;
		if (cmd->floor_off)
			put_floor(cmd->resp + cmd->floor_off, server.fence_high);
		if (cmd->wait)
			b->wait = true;
	}
	p = b->resp;
	*p++ = '*';
	p = put_uint(p, nbulks);
	*p++ = '\r';
	*p++ = '\n';
	p = put_bulk(p, "EVALSHA", 7);
	p = put_bulk(p, rp_sha[script], 40);
	p = put_bulk(p, num, (size_t)(put_uint(num, slots ? 0 : nkeys) - num));
	for (i = 0; i < n && !slots; i++) {
		rcmd_t *cmd = b->sub[i];
		memcpy(p, cmd->resp + cmd->keys_off, cmd->args_off - cmd->keys_off);
		p += cmd->args_off - cmd->keys_off;
	}
	p = put_bulk(p, num, (size_t)(put_uint(num, (size_t)n) - num));
	p = put_bulk(p, slots ? "s" : "k", 1);
	for (i = 0; i < n; i++) {
		rcmd_t *cmd = b->sub[i];
		const char *name = script_get(cmd->script)->name;
		p = put_bulk(p, name, strlen(name));
		p = put_bulk(p, num, (size_t)(put_uint(num, cmd->nkeys) - num));
		p = put_bulk(p, num, (size_t)(put_uint(num, cmd->nargs) - num));
		if (slots) {
			memcpy(p, cmd->resp + cmd->keys_off, cmd->args_off - cmd->keys_off);
			p += cmd->args_off - cmd->keys_off;
		}
		memcpy(p, cmd->resp + cmd->args_off, cmd->len - cmd->args_off);
		p += cmd->len - cmd->args_off;
	}
	b->len = (size_t)(p - b->resp);
	*p = '\0';
	REQUIRE(b->len < total);
	return b;
}

static void batch_free(rcmd_t *b)
{
	free(b->sub);
	free(b);
}

/* The calls at the head of c's queue that may go in one batch (none
 * with ASKING, which must go right before its call alone, nor one sent
 * alone on purpose: RP_ALONE). */
static int batch_run(const rconn_t *c)
{
	int n = 0;

	if (!rp_sha[rp_batch_script(c->pool)][0])
		return 0;
	for (const rcmd_t *k = c->outq.head; k && n < c->pool->batch_max; k = k->next, n++) {
		if (k->asking || k->alone)
			break;
	}
	return n;
}

void rp_flush_conn(rconn_t *c)
{
	rcmd_t *cmd;

	while (c->outq.head) {
		int n;
		/* (Never reloading here: start_reloading moved the queue to
		 * held, and conn_send holds while it lasts.) */
		if (!rp_usable(c)) {
			cmdlist_t lost = c->outq;
			c->outq = (cmdlist_t){NULL, NULL};
			while ((cmd = rp_list_pop(&lost)) != NULL)
				send_elsewhere(cmd);
			return;
		}
		n = batch_run(c);
		counters_redis_batch(n < 2 ? 1 : (unsigned)n);
		if (n < 2) {
			cmd = rp_list_pop(&c->outq);
			if (conn_write(c, cmd) < 0)
				send_failed(cmd);
			continue;
		}
		cmd = batch_make(c, n);
		if (conn_write(c, cmd) < 0) {
			for (int i = 0; i < cmd->nsub; i++)
				send_failed(cmd->sub[i]);
			batch_free(cmd);
		}
	}
}

bool rpool_flush_pending(void)
{
	return dirty_pools != NULL;
}

void rpool_flush(void)
{
	while (dirty_pools) {
		rpool_t *pool = dirty_pools;
		dirty_pools = pool->next_dirty;
		pool->dirty = false;
		pool->next_dirty = NULL;
		for (int k = 0; k < pool->n; k++) {
			rconn_t *c = &pool->conns[k];
			if (!c->outq.head)
				continue;
			rp_flush_conn(c);
			/* Written now, not when the loop next polls: one epoll
			 * round less per call (hiredis keeps what the socket does
			 * not take, and writes it when the socket is writable). */
			if (rp_usable(c))
				redisAsyncHandleWrite(c->ac);
		}
	}
}

static void on_wait_reply(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	struct waitref *w = priv;
	rcmd_t *cmd = w->cmd;
	rconn_t *c = ac->data;

	free(w);
	if (c->pending > 0)
		c->pending--;
	if (reply)
		c->progress_at = timers_now();
	if (!cmd)
		return; /* its command went another way */
	cmd->wref = NULL;
	if (cmd->sub) {
		/* A batch: its calls that wanted the WAIT hear it now. */
		for (int i = 0; i < cmd->nsub; i++) {
			rcmd_t *k = cmd->sub[i];
			if (!k)
				continue;
			if (!k->wait || (reply && reply->type == REDIS_REPLY_INTEGER &&
			                 reply->integer >= c->pool->wait_replicas))
				rp_deliver(k, k->held);
			else
				deliver_unacked(k, k->held,
				                !reply ? "connection lost before WAIT answered"
				                : reply->type == REDIS_REPLY_INTEGER ? "too few replicas in time"
				                                                     : "WAIT failed");
		}
		batch_free(cmd);
		if (reply)
			reload_when_quiet(c);
		return;
	}
	if (!cmd->held)
		return; /* cannot be: the command's reply comes first */
	if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer >= c->pool->wait_replicas)
		rp_deliver(cmd, cmd->held);
	else
		deliver_unacked(cmd, cmd->held, !reply ? "connection lost before WAIT answered"
		                                : reply->type == REDIS_REPLY_INTEGER ? "too few replicas in time"
		                                                                     : "WAIT failed");
	if (reply)
		reload_when_quiet(c);
}

static void on_give_up(timer_ent_t *t)
{
	rcmd_t *cmd = (rcmd_t *)((char *)t - offsetof(rcmd_t, give_up));

	list_remove(&cmd->pool->waiting, cmd);
	rp_deliver(cmd, NULL);
}

/* Sends cmd (again) on a connection that serves its route. With none
 * ready, a command that may be resent waits for one; another fails. */
void rp_dispatch(rcmd_t *cmd)
{
	rpool_t *pool = cmd->pool;
	rconn_t *c = pool->closing ? NULL : pick(pool, cmd->route, cmd->check);

	unpin(cmd);
	if (c && conn_send(c, cmd) == 0) {
		pin(cmd, c);
		return;
	}
	wait_or_fail(cmd);
}

/* Every reply of a reloading connection is in: load the scripts again,
 * then send what it kept and what it held, in that order. */
static void reload_when_quiet(rconn_t *c)
{
	rcmd_t *cmd;

	if (!c->reloading || c->pending > 0 || c->in_batch_reply || !rp_usable(c))
		return;
	LOG(LOG_WARN, "msg=\"redis lost its scripts; loading them again\" conn=%d", c->idx);
	for (int id = 0; id < SCRIPT__COUNT; id++)
		if (rp_pool_loads(c->pool, id))
			rp_send_script_load(c->ac, NULL, NULL, id);
	c->reloading = false;
	while ((cmd = rp_list_pop(&c->redo)) != NULL)
		if (conn_send(c, cmd) < 0)
			rp_dispatch(cmd);
	while ((cmd = rp_list_pop(&c->held)) != NULL)
		if (conn_send(c, cmd) < 0)
			rp_dispatch(cmd);
}

/* c begins to keep what it sends until its scripts are loaded again:
 * what it queued and has not sent yet goes first among what it holds. */
static void start_reloading(rconn_t *c)
{
	rcmd_t *cmd;

	if (c->reloading)
		return;
	c->reloading = true;
	while ((cmd = rp_list_pop(&c->outq)) != NULL)
		rp_list_push(&c->held, cmd);
}

static bool call_reply(rconn_t *c, rcmd_t *cmd, const redisReply *reply);

/* A replica's refusal: Redis 7 answers READONLY; Redis 6 wraps it in a
 * script error. */
static bool is_readonly(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR &&
	       (strncmp(r->str, "READONLY", 8) == 0 || strstr(r->str, "-READONLY ") != NULL);
}

static void batch_reply(rconn_t *c, rcmd_t *b, const redisReply *reply);

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
	if (cmd->sub)
		batch_reply(c, cmd, reply);
	else if (!call_reply(c, cmd, reply))
		return;
	if (reply)
		reload_when_quiet(c);
}

/* A batch's reply: each call's own (an element), or the whole reply
 * taken as each call's (see the header). */
static void batch_reply(rconn_t *c, rcmd_t *b, const redisReply *reply)
{
	bool whole = !reply || reply->type != REDIS_REPLY_ARRAY;

	if (!whole && reply->elements != (size_t)b->nsub)
		reply = &bad_batch_reply, whole = true;
	if (whole)
		wait_detach(b); /* each call goes its own way */
	/* A NOSCRIPT for the whole batch keeps every call, in order, before
	 * the scripts are loaded again (once, by on_reply). */
	c->in_batch_reply = true;
	for (int i = 0; i < b->nsub; i++) {
		rcmd_t *cmd = b->sub[i];
		const redisReply *r = whole ? reply : reply->element[i];
		if (!whole && b->wref && (cmd->wait || b->nheld > 0) && !is_readonly(r)) {
			/* Its answer waits for the WAIT behind the batch (a call
			 * after one that waits, too: alone, its reply would have
			 * come after that WAIT's). */
			cmd->held = redis_reply_copy(r);
			b->nheld++;
			continue;
		}
		b->sub[i] = NULL;
		call_reply(c, cmd, r);
	}
	c->in_batch_reply = false;
	if (b->nheld == 0) {
		wait_detach(b); /* a WAIT behind it answers nobody now */
		batch_free(b);  /* else on_wait_reply frees it */
	}
}

/* One call's reply (NULL: lost), as the call's alone: kept for a reload,
 * sent again, held for its WAIT or delivered. False when nothing more is
 * to be done on c for it (the caller skips the reload check). */
static bool call_reply(rconn_t *c, rcmd_t *cmd, const redisReply *reply)
{
	rpool_t *pool = c->pool;

	if (reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 &&
	    !cmd->reloaded && c->state == RC_READY) {
		/* It did not run: kept, in order, until the scripts are back. */
		wait_detach(cmd);
		cmd->reloaded = true;
		start_reloading(c);
		rp_list_push(&c->redo, cmd);
		reload_when_quiet(c);
		return false;
	}
	if (c->pool->require_master && is_readonly(reply)) {
		/* A replica where the master was: the script did not run. The
		 * connection goes (it reconnects, and ROLE holds it back until
		 * the sentinels name the master); a repeatable command waits. */
		wait_detach(cmd);
		if (c->state == RC_READY) {
			LOG(LOG_WARN, "msg=\"redis answered READONLY: a replica; asking the sentinels again\" "
			    "conn=%d", c->idx);
			c->state = RC_DOWN;
			redisAsyncDisconnect(c->ac); /* on_disconnect schedules the retry */
			if (pool->on_not_master)
				pool->on_not_master();
		}
		if (cmd->retry_until > timers_now() && !pool->closing) {
			unpin(cmd);
			wait_for_conn(pool, cmd);
			return false;
		}
		rp_deliver(cmd, reply);
		return false;
	}
	if (reply && c->reloading && reply->type != REDIS_REPLY_ERROR)
		LOG(LOG_WARN, "msg=\"a command ran after an earlier one found no script\" conn=%d", c->idx);
	if (!reply && cmd->retry_until > timers_now() && !pool->closing) {
		/* Its fate is unknown: sent again (it is idempotent); behind
		 * what this connection kept, when it was reloading. */
		wait_detach(cmd);
		cmd->replayed = true;
		if (c->reloading)
			rp_list_push(&c->redo, cmd);
		else
			rp_dispatch(cmd);
		return false;
	}
	if (reply && cmd->wref) {
		/* Answered once the WAIT behind it is. */
		cmd->held = redis_reply_copy(reply);
		return false;
	}
	if (reply && cmd->wait && pool->wait_replicas > 0)
		deliver_unacked(cmd, reply, "WAIT could not be sent");
	else
		rp_deliver(cmd, reply);
	return true;
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

int rpool_eval(rpool_t *pool, uint32_t route, script_id_t script, int nkeys, int argc,
               const char *const *argv, const size_t *argvlen,
               store_fn fn, void *priv, uint64_t retry_until, int wait, int floor_arg)
{
	/* Made inside the failover check's callback, or a verify (a read):
	 * part of the check, it passes the gate. */
	bool check = pool->checking && (pool->in_check_cb || script == SCRIPT_VERIFY);
	rconn_t *c = pool->closing ? NULL : pick(pool, route, check);
	size_t total = 0;
	rcmd_t *cmd;
	char *p, nkeys_buf[24];

	if (!rp_sha[script][0] || (!c && retry_until <= timers_now()) || pool->closing)
		return -1;
	/* Each bulk costs at most 1 + 20 digits + 4 bytes of framing. */
	for (int k = 0; k < argc; k++)
		total += argvlen[k] + 25;
	total += 24 + 3 * 25 + 7 + 40 + sizeof(nkeys_buf) + 1;
	cmd = xmalloc(sizeof(*cmd) + total);
	cmd->pool = pool;
	cmd->next = NULL;
	cmd->seq = ++pool->seqs;
	timer_init(&cmd->give_up, on_give_up);
	cmd->retry_until = retry_until;
	cmd->route = route;
	cmd->script = script;
	cmd->reloaded = false;
	cmd->replayed = false;
	cmd->pinned = false;
	cmd->asking = (wait & RP_ASKING) != 0;
	cmd->alone = (wait & RP_ALONE) != 0;
	wait &= ~(RP_ASKING | RP_ALONE);
	cmd->wait = wait == RP_WAIT;
	cmd->unacked = wait == RP_UNACKED && pool->wait_replicas > 0;
	cmd->check = check;
	cmd->floor_off = 0;
	cmd->wref = NULL;
	cmd->held = NULL;
	cmd->fn = fn;
	cmd->priv = priv;
	p = cmd->resp;
	*p++ = '*';
	p = put_uint(p, (size_t)argc + 3);
	*p++ = '\r';
	*p++ = '\n';
	p = put_bulk(p, "EVALSHA", 7);
	p = put_bulk(p, rp_sha[script], 40);
	p = put_bulk(p, nkeys_buf, (size_t)(put_uint(nkeys_buf, (size_t)nkeys) - nkeys_buf));
	cmd->keys_off = (uint32_t)(p - cmd->resp);
	cmd->args_off = cmd->keys_off;
	cmd->nkeys = (uint16_t)nkeys;
	cmd->nargs = (uint16_t)(argc - nkeys);
	cmd->sub = NULL;
	cmd->nsub = cmd->nheld = 0;
	for (int k = 0; k < argc; k++) {
		if (k == nkeys)
			cmd->args_off = (uint32_t)(p - cmd->resp);
		p = put_bulk(p, argv[k], argvlen[k]);
		if (k == floor_arg && argvlen[k] == STORE_FLOOR_DIGITS)
			cmd->floor_off = (size_t)(p - cmd->resp) - 2 - STORE_FLOOR_DIGITS;
	}
	cmd->len = (size_t)(p - cmd->resp);
	if (nkeys >= argc)
		cmd->args_off = (uint32_t)cmd->len;
	*p = '\0'; /* hiredis looks for the command name with strchr */
	if (c && conn_send(c, cmd) == 0) {
		pool->pending++;
		pin(cmd, c); /* on a fallback connection: see pin */
		return 0;
	}
	if (retry_until > timers_now()) {
		pool->pending++;
		wait_for_conn(pool, cmd);
		return 0;
	}
	free(cmd);
	return -1;
}

