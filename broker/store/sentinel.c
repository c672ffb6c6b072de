/*
 * sentinel.c - finds and follows the master that Redis Sentinel names
 * (see sentinel.h).
 *
 * Two hiredis async connections to the sentinels, each a struct sconn:
 *   ask    one per question: AUTH when a sentinel password is set, then
 *          SENTINEL MASTER NAME (the master's address and its
 *          config-epoch). A round asks every sentinel in turn; one that
 *          cannot be reached, answers an error or takes longer than
 *          ASK_TIMEOUT_MS counts as no answer. The round then takes the
 *          newest view: the highest config-epoch (each failover raises it,
 *          so a sentinel that missed one shows an older epoch), and never
 *          one older than a view taken before, unless a majority of the
 *          sentinels agree on it (the sentinels were reset: SENTINEL
 *          MONITOR starts again at epoch 0). A round in which no view can
 *          be taken is tried again after a backoff (ROUND_MIN_MS doubling
 *          to ROUND_MAX_MS).
 *   watch  SUBSCRIBE +switch-master on one sentinel for as long as it
 *          lives; then the next sentinel, WATCH_RETRY_MS later. Each time
 *          it subscribes the sentinels are asked too: a switch may have
 *          been missed meanwhile. They are also asked every REASK_MS, for
 *          a watch that died without a word.
 *
 * An answer to a round that began before the last +switch-master is not
 * taken (it may name the master from before the switch, from a sentinel
 * that had not heard yet): the sentinels are asked again, the one that
 * announced the switch first.
 *
 * Each sconn is a nodeask (nodeask.h) plus the sentinel it is on: the
 * lookup, connect, AUTH, stale replies and context lifetimes are kept
 * there, as they are for cluster_topo.c's questions.
 */
#include "broker/store/sentinel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/nodeask.h"

#define ASK_TIMEOUT_MS 1000
#define ASK_GAP_MS 200
#define ROUND_MIN_MS 250
#define ROUND_MAX_MS 2000
#define WATCH_RETRY_MS 500
#define REASK_MS 5000 /* asked again this often: a watch may be dead silently */

/* A connection to one sentinel at a time (nodeask.h keeps its lifetimes);
 * idx: the sentinel, an index into the URL's list. */
struct sconn {
	nodeask_t na;
	int idx;
};

static struct {
	uv_loop_t *loop;
	const redis_addr_t *addr;
	sentinel_master_fn on_master;
	bool closing;
	struct sconn ask, watch;
	bool asking;  /* a round is on */
	/* The views the round's sentinels gave, and the newest taken so far
	 * (floor: an older one is taken only from a majority). */
	struct view {
		char host[URL_HOST_MAX + 1];
		int port;
		int64_t epoch;
	} views[URL_SENTINELS_MAX];
	int nviews;
	bool have_floor;
	int64_t floor;
	unsigned switches;  /* +switch-master messages taken */
	unsigned round_switches; /* switches when the round began */
	int ask_first;      /* 1 + the sentinel the next round asks first, or 0 */
	bool again;   /* asked for during the round: one more after it */
	int tried;    /* sentinels tried in this round */
	uint32_t round_ms;
	uint64_t last_round_at;
	timer_ent_t ask_timeout, ask_later, watch_later, reask;
} S;

static struct sconn *sconn_from(nodeask_t *na)
{
	return (struct sconn *)(void *)((char *)na - offsetof(struct sconn, na));
}

static const host_port_t *sentinel_of(const struct sconn *sc)
{
	return &S.addr->sentinels[sc->idx];
}

static void sconn_connect(struct sconn *sc, int idx)
{
	sc->idx = idx;
	nodeask_connect(&sc->na, sentinel_of(sc)->host, sentinel_of(sc)->port);
}

/* The sconn a reply callback is for, or NULL when stale. */
static struct sconn *sconn_of(const redisAsyncContext *ac, void *priv)
{
	nodeask_t *na = nodeask_of(ac, priv);

	return na ? sconn_from(na) : NULL;
}

/* ---- asking ------------------------------------------------------------------ */

static void start_round(void)
{
	S.asking = true;
	S.again = false;
	S.tried = 0;
	S.nviews = 0;
	S.round_switches = S.switches;
	if (S.ask_first) {
		S.ask.idx = S.ask_first - 1;
		S.ask_first = 0;
	}
	S.last_round_at = timers_now();
	timer_at(&S.ask_timeout, timers_now() + ASK_TIMEOUT_MS);
	sconn_connect(&S.ask, S.ask.idx);
}

void sentinel_ask(void)
{
	uint64_t now = timers_now();

	if (S.closing || !S.addr)
		return;
	if (S.asking) {
		S.again = true;
		return;
	}
	if (timer_active(&S.ask_later))
		return; /* a round is due soon anyway */
	if (S.last_round_at && now < S.last_round_at + ASK_GAP_MS) {
		timer_at(&S.ask_later, S.last_round_at + ASK_GAP_MS);
		return;
	}
	start_round();
}

static void on_ask_later(timer_ent_t *t)
{
	(void)t;
	sentinel_ask();
}

static void round_end(void);

/* The sentinel asked answered (its view is recorded) or did not: the next
 * one, or, after a round of them, the round's end. */
static void ask_next(struct sconn *sc, bool in_cb)
{
	if (S.closing || !S.asking)
		return;
	nodeask_abandon(&sc->na, in_cb);
	sc->idx = (sc->idx + 1) % S.addr->nsentinels;
	if (++S.tried < S.addr->nsentinels) {
		timer_at(&S.ask_timeout, timers_now() + ASK_TIMEOUT_MS);
		sconn_connect(sc, sc->idx);
		return;
	}
	round_end();
}

static void ask_fail(nodeask_t *na, bool in_cb)
{
	ask_next(sconn_from(na), in_cb);
}

static bool same_view(const struct view *a, const struct view *b)
{
	return a->port == b->port && a->epoch == b->epoch && strcmp(a->host, b->host) == 0;
}

/* Every sentinel was asked: the newest view is taken (see the header). */
static void round_end(void)
{
	const struct view *best = NULL;
	int agree = 0, majority = S.addr->nsentinels / 2 + 1;
	bool taken;

	S.asking = false;
	timer_cancel(&S.ask_timeout);
	for (int k = 0; k < S.nviews; k++)
		if (!best || S.views[k].epoch > best->epoch)
			best = &S.views[k];
	for (int k = 0; best && k < S.nviews; k++)
		agree += same_view(best, &S.views[k]);
	taken = best && (!S.have_floor || best->epoch >= S.floor || agree >= majority);
	if (!taken) {
		S.again = false;
		if (best)
			LOG(LOG_WARN, "msg=\"the sentinels that answered name an older master than one "
			    "followed before; asking again later\" master=\"%s\" addr=%s:%d epoch=%lld "
			    "newest_seen=%lld answers=%d", S.addr->master_name, best->host, best->port,
			    (long long)best->epoch, (long long)S.floor, S.nviews);
		else
			LOG(LOG_WARN, "msg=\"no sentinel named the master; asking again later\" "
			    "master=\"%s\" in_ms=%u", S.addr->master_name, (unsigned)S.round_ms);
		timer_at(&S.ask_later, timers_now() + S.round_ms);
		S.round_ms = S.round_ms * 2 > ROUND_MAX_MS ? ROUND_MAX_MS : S.round_ms * 2;
		return;
	}
	S.round_ms = ROUND_MIN_MS;
	if (S.round_switches != S.switches) {
		/* Asked before a switch was announced: the answers may name the
		 * master from before it. Asked again (the announcer first). */
		S.again = false;
		sentinel_ask();
		return;
	}
	S.have_floor = true;
	S.floor = best->epoch; /* a majority's reset view may lower it */
	S.on_master(best->host, best->port, false);
	if (S.again) {
		S.again = false;
		sentinel_ask();
	}
}

static void on_ask_timeout(timer_ent_t *t)
{
	(void)t;
	if (!S.asking)
		return;
	LOG(LOG_WARN, "msg=\"sentinel did not answer in time\" sentinel=%s:%d", sentinel_of(&S.ask)->host,
	    sentinel_of(&S.ask)->port);
	nodeask_abandon(&S.ask.na, false); /* a lookup in flight is dropped when back */
	ask_next(&S.ask, false);
}

/* "host" and "port" as a sentinel names them; 0 when they are not. */
static int parse_port(const char *s, size_t len)
{
	int port = 0;

	if (len == 0 || len > 5)
		return 0;
	for (size_t k = 0; k < len; k++) {
		if (s[k] < '0' || s[k] > '9')
			return 0;
		port = port * 10 + (s[k] - '0');
	}
	return port >= 1 && port <= 65535 ? port : 0;
}

/* The value of field in a flat field/value array reply (SENTINEL MASTER),
 * or NULL. */
static const redisReply *field_of(const redisReply *r, const char *field)
{
	for (size_t k = 0; k + 1 < r->elements; k += 2)
		if (r->element[k]->type == REDIS_REPLY_STRING && strcmp(r->element[k]->str, field) == 0)
			return r->element[k + 1];
	return NULL;
}

static void on_ask_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct sconn *sc = sconn_of(ac, priv);
	redisReply *reply = r;
	const redisReply *ip, *port_s, *epoch_s;
	struct view *v;
	int port;

	if (!sc || !reply)
		return; /* stale, or the disconnect callback reports it */
	ip = reply->type == REDIS_REPLY_ARRAY ? field_of(reply, "ip") : NULL;
	port_s = reply->type == REDIS_REPLY_ARRAY ? field_of(reply, "port") : NULL;
	epoch_s = reply->type == REDIS_REPLY_ARRAY ? field_of(reply, "config-epoch") : NULL;
	if (!ip || !port_s || ip->type != REDIS_REPLY_STRING || port_s->type != REDIS_REPLY_STRING ||
	    ip->len == 0 || ip->len > URL_HOST_MAX || !(port = parse_port(port_s->str, port_s->len))) {
		LOG(LOG_WARN, "msg=\"sentinel does not name the master\" sentinel=%s:%d master=\"%s\" "
		    "reply=\"%.60s\"", sentinel_of(sc)->host, sentinel_of(sc)->port, S.addr->master_name,
		    reply->type == REDIS_REPLY_ERROR ? reply->str : "malformed");
		ask_next(sc, true);
		return;
	}
	v = &S.views[S.nviews++];
	memcpy(v->host, ip->str, ip->len);
	v->host[ip->len] = '\0';
	v->port = port;
	/* A sentinel that does not say counts as the oldest view. */
	v->epoch = epoch_s && epoch_s->type == REDIS_REPLY_STRING ? strtoll(epoch_s->str, NULL, 10) : -1;
	ask_next(sc, true);
}

static void ask_open(nodeask_t *na)
{
	redisAsyncCommand(na->ac, on_ask_reply, nodeask_tag(na), "SENTINEL MASTER %s",
	                  S.addr->master_name);
}

/* ---- watching ---------------------------------------------------------------- */

static void watch_next(struct sconn *sc, bool in_cb)
{
	if (S.closing)
		return;
	nodeask_abandon(&sc->na, in_cb);
	sc->idx = (sc->idx + 1) % S.addr->nsentinels;
	timer_at(&S.watch_later, timers_now() + WATCH_RETRY_MS);
	sentinel_ask(); /* a switch may be missed while nobody watches */
}

static void on_watch_later(timer_ent_t *t)
{
	(void)t;
	if (!S.closing)
		sconn_connect(&S.watch, S.watch.idx);
}

/* "+switch-master" payload: NAME OLDIP OLDPORT NEWIP NEWPORT. */
static void on_switch(const char *msg, size_t len)
{
	const char *f[5];
	size_t flen[5];
	size_t k = 0, n = 0;
	char host[URL_HOST_MAX + 1];
	int port;

	while (n < 5 && k < len) {
		f[n] = msg + k;
		while (k < len && msg[k] != ' ')
			k++;
		flen[n] = (size_t)(msg + k - f[n]);
		n++;
		k++;
	}
	if (n != 5 || flen[0] != strlen(S.addr->master_name) ||
	    memcmp(f[0], S.addr->master_name, flen[0]) != 0)
		return; /* another master's switch, or not one */
	if (flen[3] == 0 || flen[3] > URL_HOST_MAX || !(port = parse_port(f[4], flen[4])))
		return;
	memcpy(host, f[3], flen[3]);
	host[flen[3]] = '\0';
	LOG(LOG_WARN, "msg=\"sentinel announced a new master\" master=\"%s\" addr=%s:%d",
	    S.addr->master_name, host, port);
	/* An ask under way, or answered late, may name the old master; the
	 * sentinel that announced the switch is asked first from now on. */
	S.switches++;
	S.ask_first = S.watch.idx + 1;
	if (S.have_floor)
		S.floor++; /* the switch's epoch is newer than any taken before */
	S.on_master(host, port, true);
}

static void on_watch_msg(redisAsyncContext *ac, void *r, void *priv)
{
	struct sconn *sc = sconn_of(ac, priv);
	redisReply *reply = r;

	if (!sc || !reply)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		LOG(LOG_WARN, "msg=\"sentinel refused the subscription\" sentinel=%s:%d err=\"%.100s\"",
		    sentinel_of(sc)->host, sentinel_of(sc)->port, reply->str);
		watch_next(sc, true);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(reply->element[0]->str, "subscribe") == 0) {
		LOG(LOG_INFO, "msg=\"watching sentinel for master switches\" sentinel=%s:%d",
		    sentinel_of(sc)->host, sentinel_of(sc)->port);
		sentinel_ask();
		return;
	}
	if (strcmp(reply->element[0]->str, "message") == 0 &&
	    reply->element[2]->type == REDIS_REPLY_STRING)
		on_switch(reply->element[2]->str, reply->element[2]->len);
}

static void watch_fail(nodeask_t *na, bool in_cb)
{
	watch_next(sconn_from(na), in_cb);
}

static void watch_open(nodeask_t *na)
{
	redisAsyncCommand(na->ac, on_watch_msg, nodeask_tag(na), "SUBSCRIBE +switch-master");
}

/* A watch connection that died without a word (a half-open socket, a
 * sentinel cut off) would hide a switch: the sentinels are asked again
 * every REASK_MS whatever the watch says. */
static void on_reask(timer_ent_t *t)
{
	(void)t;
	if (S.closing)
		return;
	sentinel_ask();
	timer_at(&S.reask, timers_now() + REASK_MS);
}

/* ---- life ---------------------------------------------------------------------- */

void sentinel_start(uv_loop_t *loop, const redis_addr_t *addr, sentinel_master_fn on_master)
{
	memset(&S, 0, sizeof(S));
	S.loop = loop;
	S.addr = addr;
	S.on_master = on_master;
	S.round_ms = ROUND_MIN_MS;
	S.ask.na = (nodeask_t){.loop = loop, .what = "sentinel", .key = "sentinel", .role = "ask",
	                       .password = addr->sentinel_password, .log_lost = true,
	                       .open = ask_open, .fail = ask_fail};
	S.watch.na = (nodeask_t){.loop = loop, .what = "sentinel", .key = "sentinel", .role = "watch",
	                         .password = addr->sentinel_password, .log_lost = true,
	                         .open = watch_open, .fail = watch_fail};
	timer_init(&S.ask_timeout, on_ask_timeout);
	timer_init(&S.ask_later, on_ask_later);
	timer_init(&S.watch_later, on_watch_later);
	timer_init(&S.reask, on_reask);
	timer_at(&S.reask, timers_now() + REASK_MS);
	sconn_connect(&S.watch, 0);
	sentinel_ask();
}

void sentinel_close(void)
{
	struct sconn *all[2] = {&S.ask, &S.watch};

	if (!S.addr || S.closing)
		return;
	S.closing = true;
	timer_cancel(&S.ask_timeout);
	timer_cancel(&S.ask_later);
	timer_cancel(&S.reask);
	timer_cancel(&S.watch_later);
	for (int k = 0; k < 2; k++)
		nodeask_close(&all[k]->na);
}
