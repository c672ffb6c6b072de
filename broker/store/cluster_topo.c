/*
 * cluster_topo.c - follows a Redis Cluster's slot map (see cluster_topo.h).
 *
 * One hiredis async connection at a time: AUTH when a password is set,
 * then CLUSTER INFO (the node's cluster_current_epoch: the newest epoch it
 * has heard of) and CLUSTER SLOTS. A round asks each node in turn: the
 * masters of the last map given, then the seeds (each address once). A
 * node that cannot be reached, answers an error or a reply cluster_map
 * cannot read, or takes longer than ASK_TIMEOUT_MS gives no answer. At
 * the round's end the map of the node with the newest epoch is taken: a
 * node cut off from the others (a master deposed behind a partition of
 * the cluster bus) still names itself for its slots, with an older epoch.
 * A map older than one taken before is not taken, unless most of the
 * nodes that answered give an older epoch too (the cluster was made anew).
 * A round with no map to take is tried again after a backoff
 * (ROUND_MIN_MS doubling to ROUND_MAX_MS). A map that differs from the
 * last one goes to on_map (a partial map too: it is what the cluster says,
 * and the backend answers unavailable for the slots nobody serves).
 *
 * Lifetimes as in sentinel.c: every connection attempt bumps `attempt`;
 * callbacks carry the number they were made for and ignore themselves when
 * it is stale; hiredis frees a context itself after a failed connect or a
 * disconnect, and we free one only outside its callbacks; redis_uv's
 * on_freed tells us when a context is gone (struct cref), so `ac` never
 * dangles. A lookup in flight when the round moves on is left to finish
 * and then dropped (one uv_getaddrinfo_t; `resolving`).
 */
#include "broker/store/cluster_topo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/redis_uv.h"

#define ASK_TIMEOUT_MS 1000
#define ROUND_MIN_MS 250
#define ROUND_MAX_MS 2000

struct cref {
	redisAsyncContext *ac;
};

static struct {
	uv_loop_t *loop;
	cluster_topo_fn on_map;
	char *password;
	int nseeds;
	host_port_t seeds[CLUSTER_SEEDS_MAX];
	/* The round: the nodes it asks, in order. */
	host_port_t cand[CLUSTER_MASTERS_MAX + CLUSTER_SEEDS_MAX];
	int ncand, at;
	bool asking, again, closing;
	bool deliver; /* a refresh was asked for: the next map goes out, same or not */
	/* The round's answers: the newest so far (best), how many answered,
	 * how many of them were older than the floor (the newest epoch of a
	 * map taken before, once there is one). */
	int64_t epoch_now; /* the node asked: its current epoch, -1 unknown */
	bool have_best, have_floor;
	int64_t best_epoch, floor;
	int answers, older;
	cluster_map_t best;
	uint32_t round_ms;
	/* The question out. */
	redisAsyncContext *ac;
	uintptr_t attempt;
	uv_getaddrinfo_t gai;
	bool resolving;
	uintptr_t gai_attempt;
	char asked_host[URL_HOST_MAX + 1]; /* the address asked (empty hosts) */
	/* The last map given; have is false before the first. */
	bool have;
	cluster_map_t map, next;
	timer_ent_t ask_timeout, ask_later, periodic;
} T;

static void ask_node(void);

static void on_freed(void *priv)
{
	struct cref *ref = priv;

	if (T.ac == ref->ac)
		T.ac = NULL;
	free(ref);
}

/* Drops the question out. in_cb: from one of its own callbacks. */
static void abandon(bool in_cb)
{
	redisAsyncContext *ac = T.ac;

	T.attempt++;
	T.ac = NULL;
	if (!ac)
		return;
	if (in_cb)
		redisAsyncDisconnect(ac);
	else
		redisAsyncFree(ac); /* pending callbacks run, stale */
}

static bool current(const redisAsyncContext *ac, void *priv)
{
	return T.ac == ac && (uintptr_t)priv == T.attempt;
}

static void add_candidate(const host_port_t *hp)
{
	for (int k = 0; k < T.ncand; k++)
		if (T.cand[k].port == hp->port && strcmp(T.cand[k].host, hp->host) == 0)
			return;
	T.cand[T.ncand++] = *hp;
}

/* The rounds's nodes: the masters of the last map, then the seeds. */
static void make_candidates(void)
{
	T.ncand = 0;
	for (int k = 0; T.have && k < T.map.nmasters; k++)
		add_candidate(&T.map.masters[k]);
	for (int k = 0; k < T.nseeds; k++)
		add_candidate(&T.seeds[k]);
}

static void start_round(void)
{
	T.asking = true;
	T.again = false;
	T.at = 0;
	T.have_best = false;
	T.answers = 0;
	T.older = 0;
	make_candidates();
	ask_node();
}

void cluster_topo_refresh(void)
{
	if (T.closing || !T.loop)
		return;
	T.deliver = true;
	if (T.asking) {
		T.again = true;
		return;
	}
	timer_cancel(&T.ask_later);
	start_round();
}

static bool same_map(const cluster_map_t *a, const cluster_map_t *b)
{
	if (a->nmasters != b->nmasters || memcmp(a->owner, b->owner, sizeof(a->owner)) != 0)
		return false;
	for (int k = 0; k < a->nmasters; k++) {
		if (a->masters[k].port != b->masters[k].port ||
		    strcmp(a->masters[k].host, b->masters[k].host) != 0)
			return false;
	}
	return true;
}

/* Every node was asked: the newest map is taken, or the round is tried
 * again after a pause (see the header). */
static void round_end(void)
{
	bool reset = T.answers > 0 && T.older * 2 > T.answers;

	T.asking = false;
	timer_cancel(&T.ask_timeout);
	if (!T.have_best || (T.have_floor && T.best_epoch < T.floor && !reset)) {
		if (T.have_best)
			LOG(LOG_WARN, "msg=\"the cluster nodes that answered give an older map than one "
			    "taken before; asking again later\" epoch=%lld newest_seen=%lld answers=%d",
			    (long long)T.best_epoch, (long long)T.floor, T.answers);
		else
			LOG(LOG_WARN, "msg=\"no cluster node gave its slot map; asking again later\" "
			    "in_ms=%u", (unsigned)T.round_ms);
		timer_at(&T.ask_later, timers_now() + T.round_ms);
		T.round_ms = T.round_ms * 2 > ROUND_MAX_MS ? ROUND_MAX_MS : T.round_ms * 2;
		return;
	}
	T.round_ms = ROUND_MIN_MS;
	T.have_floor = true;
	T.floor = T.best_epoch;
	if (!T.have || T.deliver || !same_map(&T.map, &T.best)) {
		T.map = T.best;
		T.have = true;
		T.on_map(&T.map);
	}
	T.deliver = T.again; /* a refresh during this round: its own answer goes out too */
	if (T.again && !T.closing)
		start_round();
}

/* The node asked answered (its map is counted) or did not: the next one,
 * or the round's end. */
static void next_node(bool in_cb)
{
	if (T.closing || !T.asking)
		return;
	abandon(in_cb);
	if (++T.at < T.ncand) {
		ask_node();
		return;
	}
	round_end();
}

/* CLUSTER INFO of the node asked: its cluster_current_epoch. */
static void on_info(redisAsyncContext *ac, void *r, void *priv)
{
	const redisReply *reply = r;
	const char *p;

	if (!current(ac, priv) || !reply || reply->type != REDIS_REPLY_STRING)
		return; /* stale, gone, or an error: the epoch stays unknown */
	p = strstr(reply->str, "cluster_current_epoch:");
	if (p)
		T.epoch_now = strtoll(p + strlen("cluster_current_epoch:"), NULL, 10);
}

static void on_slots(redisAsyncContext *ac, void *r, void *priv)
{
	const redisReply *reply = r;
	char err[160];
	int unserved;

	if (!current(ac, priv) || !reply)
		return; /* stale, or the disconnect reports it */
	unserved = reply->type == REDIS_REPLY_ERROR
	               ? (snprintf(err, sizeof(err), "%.150s", reply->str), -1)
	               : cluster_map_read_slots(&T.next, reply, T.asked_host, err, sizeof(err));
	if (unserved < 0 || T.next.nmasters == 0) {
		LOG(LOG_WARN, "msg=\"cluster node gave no slot map\" node=%s:%d err=\"%s\"",
		    T.cand[T.at].host, T.cand[T.at].port, unserved < 0 ? err : "no master serves a slot");
		next_node(true);
		return;
	}
	if (unserved > 0)
		LOG(LOG_WARN, "msg=\"cluster slots without a master\" node=%s:%d slots=%d",
		    T.cand[T.at].host, T.cand[T.at].port, unserved);
	T.answers++;
	if (T.have_floor && T.epoch_now < T.floor)
		T.older++;
	if (!T.have_best || T.epoch_now > T.best_epoch) {
		T.best = T.next;
		T.best_epoch = T.epoch_now;
		T.have_best = true;
	}
	next_node(true);
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv)
{
	const redisReply *reply = r;

	if (!current(ac, priv) || !reply || reply->type != REDIS_REPLY_ERROR)
		return;
	LOG(LOG_WARN, "msg=\"cluster node refused the password\" node=%s:%d", T.cand[T.at].host,
	    T.cand[T.at].port);
	next_node(true);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	if (status == REDIS_OK || T.ac != ac)
		return;
	LOG(LOG_WARN, "msg=\"cluster node unreachable\" node=%s:%d err=\"%s\"", T.cand[T.at].host,
	    T.cand[T.at].port, ac->errstr);
	T.attempt++;
	T.ac = NULL; /* hiredis frees it after this */
	next_node(false);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)status;
	if (T.ac != ac)
		return; /* abandoned already */
	T.attempt++;
	T.ac = NULL;
	next_node(false);
}

static void open_node(const char *ip)
{
	redisAsyncContext *ac = redisAsyncConnect(ip, T.cand[T.at].port);
	struct cref *ref;

	REQUIRE(ac != NULL);
	if (ac->err) {
		LOG(LOG_WARN, "msg=\"cluster node unreachable\" node=%s:%d err=\"%s\"", T.cand[T.at].host,
		    T.cand[T.at].port, ac->errstr);
		redisAsyncFree(ac);
		next_node(false);
		return;
	}
	ref = xmalloc(sizeof(*ref));
	ref->ac = ac;
	if (redis_uv_attach(ac, T.loop, on_freed, ref) != REDIS_OK) {
		free(ref);
		redisAsyncFree(ac);
		next_node(false);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	T.ac = ac;
	snprintf(T.asked_host, sizeof(T.asked_host), "%s", T.cand[T.at].host);
	if (T.password) {
		const char *argv[2] = {"AUTH", T.password};
		size_t argvlen[2] = {4, strlen(T.password)};
		redisAsyncCommandArgv(ac, on_auth, (void *)T.attempt, 2, argv, argvlen);
	}
	T.epoch_now = -1;
	redisAsyncCommand(ac, on_info, (void *)T.attempt, "CLUSTER INFO");
	redisAsyncCommand(ac, on_slots, (void *)T.attempt, "CLUSTER SLOTS");
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	char ip[64] = "";

	(void)req;
	T.resolving = false;
	for (struct addrinfo *ai = status == 0 ? res : NULL; ai && !ip[0]; ai = ai->ai_next)
		redis_uv_addr_name(ai, ip, sizeof(ip));
	uv_freeaddrinfo(res);
	if (T.closing)
		return;
	if (T.gai_attempt != T.attempt) {
		/* The round moved on while it resolved: ask what it asks now. */
		if (T.asking)
			ask_node();
		return;
	}
	if (!ip[0]) {
		LOG(LOG_WARN, "msg=\"cannot resolve the cluster node\" node=%s:%d err=\"%s\"",
		    T.cand[T.at].host, T.cand[T.at].port, status ? uv_strerror(status) : "no address");
		next_node(false);
		return;
	}
	open_node(ip);
}

/* Asks T.cand[T.at], with the question's deadline. */
static void ask_node(void)
{
	const char *host = T.cand[T.at].host;
	struct in6_addr a6;
	struct addrinfo hints;
	int rc;

	abandon(false);
	timer_at(&T.ask_timeout, timers_now() + ASK_TIMEOUT_MS);
	if (T.resolving)
		return; /* on_resolved sees the new attempt and asks again */
	if (uv_inet_pton(AF_INET, host, &a6) == 0 || uv_inet_pton(AF_INET6, host, &a6) == 0) {
		open_node(host);
		return;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	T.gai_attempt = T.attempt;
	rc = uv_getaddrinfo(T.loop, &T.gai, on_resolved, host, NULL, &hints);
	if (rc != 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the cluster node\" node=%s:%d err=\"%s\"", host,
		    T.cand[T.at].port, uv_strerror(rc));
		next_node(false);
		return;
	}
	T.resolving = true;
}

static void on_ask_timeout(timer_ent_t *t)
{
	(void)t;
	if (!T.asking)
		return;
	LOG(LOG_WARN, "msg=\"cluster node did not answer in time\" node=%s:%d", T.cand[T.at].host,
	    T.cand[T.at].port);
	next_node(false);
}

static void on_ask_later(timer_ent_t *t)
{
	(void)t;
	cluster_topo_refresh();
}

static void on_periodic(timer_ent_t *t)
{
	timer_at(t, timers_now() + CLUSTER_REFRESH_MS);
	cluster_topo_refresh();
}

void cluster_topo_start(uv_loop_t *loop, const host_port_t *seeds, int nseeds,
                        const char *password, cluster_topo_fn on_map)
{
	REQUIRE(nseeds >= 1 && nseeds <= CLUSTER_SEEDS_MAX);
	memset(&T, 0, sizeof(T));
	T.loop = loop;
	T.on_map = on_map;
	T.password = password ? xstrndup(password, strlen(password)) : NULL;
	T.nseeds = nseeds;
	memcpy(T.seeds, seeds, (size_t)nseeds * sizeof(*seeds));
	T.round_ms = ROUND_MIN_MS;
	timer_init(&T.ask_timeout, on_ask_timeout);
	timer_init(&T.ask_later, on_ask_later);
	timer_init(&T.periodic, on_periodic);
	timer_at(&T.periodic, timers_now() + CLUSTER_REFRESH_MS);
	start_round();
}

void cluster_topo_close(void)
{
	if (!T.loop || T.closing)
		return;
	T.closing = true;
	T.asking = false;
	timer_cancel(&T.ask_timeout);
	timer_cancel(&T.ask_later);
	timer_cancel(&T.periodic);
	if (T.resolving)
		uv_cancel((uv_req_t *)&T.gai);
	abandon(false);
	free(T.password);
	T.password = NULL;
}
