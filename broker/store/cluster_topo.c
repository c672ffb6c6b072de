/*
 * cluster_topo.c - follows a Redis Cluster's slot map (see cluster_topo.h).
 *
 * One hiredis async connection at a time: AUTH when a password is set,
 * then CLUSTER INFO (the node's cluster_current_epoch), CLUSTER SLOTS (the
 * map) and CLUSTER NODES (each master's config epoch). A round asks the
 * nodes in turn: the masters of the last map given, then the seeds (each
 * address once), starting one further along each round (so that no node
 * is always asked first), or at the node a redirect named (it serves the
 * slot now). A node that cannot be reached, answers an error or a reply
 * cluster_map cannot read, or takes longer than ASK_TIMEOUT_MS gives no
 * answer. The first round, with no map to compare with, asks every seed
 * and takes the map of the node with the newest current epoch. Later, the
 * first map that gives no slot to a master with an older config epoch
 * than the last map taken gives it ends the round: a node
 * that has not heard of a failover yet, or a master deposed behind a
 * partition of the cluster bus, still names the old master for those
 * slots, with its older epoch, and is not believed (the broker never goes
 * back to an older view). A round where every answer was older takes the
 * map of the node with the newest current epoch when most of the nodes
 * asked answered so (the cluster was made anew, its epochs started again);
 * otherwise, and when no node answered, it is tried again after a backoff
 * (ROUND_MIN_MS doubling to ROUND_MAX_MS). A map that differs from the
 * last one goes to on_map (a partial map too: it is what the cluster says,
 * and the backend answers unavailable for the slots nobody serves).
 *
 * The connection to the node asked is a nodeask (nodeask.h), as each of
 * sentinel.c's is: the lookup, connect, AUTH, stale replies and context
 * lifetimes are kept there. A lookup in flight when the round moves on is
 * left to finish, and the node the round asks then is asked.
 */
#include "broker/store/cluster_topo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/nodeask.h"

#define ASK_TIMEOUT_MS 1000
#define ROUND_MIN_MS 250
#define ROUND_MAX_MS 2000

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
	bool slots_ok;     /* the node asked gave a slot map (in next) */
	bool have_best;
	int64_t best_epoch;
	int answers, older;
	int start; /* where the next round starts among the candidates */
	bool have_hint;
	host_port_t hint; /* asked first by the next round (a redirect's target) */
	cluster_map_t best;
	uint32_t round_ms;
	/* The question out (nodeask.h keeps its connection). */
	nodeask_t na;
	char asked_host[URL_HOST_MAX + 1]; /* the address asked (empty hosts) */
	/* The last map given; have is false before the first. */
	bool have;
	cluster_map_t map, next;
	timer_ent_t ask_timeout, ask_later, periodic;
} T;

static void ask_node(void);

/* Drops the question out. in_cb: from one of its own callbacks. */
static void abandon(bool in_cb)
{
	nodeask_abandon(&T.na, in_cb);
}

static bool current(const redisAsyncContext *ac, void *priv)
{
	return nodeask_of(ac, priv) == &T.na;
}

/* The node asked now: the round's T.at-th, from where it started. */
static int cand_at(void)
{
	return T.ncand > 0 ? (T.start + T.at) % T.ncand : 0;
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
	/* T.at counts the nodes asked; cand_at() rotates the start, or starts
	 * at the node a redirect named (it serves the slot now: it knows). */
	T.start = T.ncand > 0 && T.have ? (T.start + 1) % T.ncand : 0;
	if (T.have_hint) {
		T.have_hint = false;
		add_candidate(&T.hint);
		for (int k = 0; k < T.ncand; k++)
			if (T.cand[k].port == T.hint.port && strcmp(T.cand[k].host, T.hint.host) == 0)
				T.start = k;
	}
	ask_node();
}

void cluster_topo_refresh_from(const host_port_t *first)
{
	if (T.closing || !T.loop)
		return;
	T.hint = *first;
	T.have_hint = true;
	cluster_topo_refresh();
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

/* The round takes map. */
static void take(const cluster_map_t *map)
{
	T.asking = false;
	timer_cancel(&T.ask_timeout);
	T.round_ms = ROUND_MIN_MS;
	if (!T.have || T.deliver || !same_map(&T.map, map)) {
		T.map = *map;
		T.have = true;
		T.on_map(&T.map);
	}
	T.deliver = T.again; /* a refresh during this round: its own answer goes out too */
	if (T.again && !T.closing)
		start_round();
}

/* Every node was asked and none gave a map to take (each was older than
 * the last map somewhere): when most of the nodes asked answered so, the
 * cluster was made anew, and the map of the node with the newest current
 * epoch is taken; else again after a pause. The first round takes the
 * newest of its answers here. */
static void round_end(void)
{
	if (!T.have && T.have_best) {
		take(&T.best); /* the first map: the newest of every answer */
		return;
	}
	/* Made anew: most of the nodes asked (not only of those that
	 * answered: a deposed master heard alone is no majority) say older. */
	if (T.have_best && T.older * 2 > T.ncand) {
		LOG(LOG_WARN, "msg=\"the cluster nodes give older config epochs than before: the "
		    "cluster was made anew; taking its map\" current_epoch=%lld answers=%d",
		    (long long)T.best_epoch, T.answers);
		take(&T.best);
		return;
	}
	T.asking = false;
	timer_cancel(&T.ask_timeout);
	if (T.have_best)
		LOG(LOG_WARN, "msg=\"the cluster nodes that answered give an older map than one taken "
		    "before; asking again later\" answers=%d older=%d", T.answers, T.older);
	else
		LOG(LOG_WARN, "msg=\"no cluster node gave its slot map; asking again later\" in_ms=%u",
		    (unsigned)T.round_ms);
	timer_at(&T.ask_later, timers_now() + T.round_ms);
	T.round_ms = T.round_ms * 2 > ROUND_MAX_MS ? ROUND_MAX_MS : T.round_ms * 2;
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
	T.slots_ok = false;
	unserved = reply->type == REDIS_REPLY_ERROR
	               ? (snprintf(err, sizeof(err), "%.150s", reply->str), -1)
	               : cluster_map_read_slots(&T.next, reply, T.asked_host, err, sizeof(err));
	if (unserved < 0 || T.next.nmasters == 0) {
		LOG(LOG_WARN, "msg=\"cluster node gave no slot map\" node=%s:%d err=\"%s\"",
		    T.cand[cand_at()].host, T.cand[cand_at()].port,
		    unserved < 0 ? err : "no master serves a slot");
		next_node(true);
		return;
	}
	if (unserved > 0)
		LOG(LOG_WARN, "msg=\"cluster slots without a master\" node=%s:%d slots=%d",
		    T.cand[cand_at()].host, T.cand[cand_at()].port, unserved);
	T.slots_ok = true; /* the node's CLUSTER NODES, next, decides */
}

/* CLUSTER NODES of the node asked: the config epoch of each master of
 * its map; a map that gives some slot to an older master than the last
 * map taken is not taken (see the header). */
static void on_nodes(redisAsyncContext *ac, void *r, void *priv)
{
	const redisReply *reply = r;
	int older;

	if (!current(ac, priv) || !reply)
		return;
	if (!T.slots_ok)
		return; /* on_slots moved on */
	if (reply->type == REDIS_REPLY_STRING)
		cluster_map_read_epochs(&T.next, reply->str, reply->len, T.asked_host);
	T.answers++;
	if (!T.have) {
		/* The first map: nothing to compare it with yet, so every node
		 * is asked, and the newest current epoch's map is taken at the
		 * round's end (a deposed master among the seeds has an older
		 * one). */
		if (!T.have_best || T.epoch_now > T.best_epoch) {
			T.best = T.next;
			T.best_epoch = T.epoch_now;
			T.have_best = true;
		}
		next_node(true);
		return;
	}
	older = cluster_map_older_slots(&T.next, &T.map);
	if (older == 0) {
		abandon(true);
		take(&T.next);
		return;
	}
	LOG(LOG_INFO, "msg=\"a cluster node names masters older than the map taken before; asking "
	    "the next\" node=%s:%d slots=%d", T.cand[cand_at()].host, T.cand[cand_at()].port, older);
	T.older++;
	if (!T.have_best || T.epoch_now > T.best_epoch) {
		T.best = T.next;
		T.best_epoch = T.epoch_now;
		T.have_best = true;
	}
	next_node(true);
}

/* The node's connection failed, or it refused the password. */
static void node_fail(nodeask_t *na, bool in_cb)
{
	(void)na;
	next_node(in_cb);
}

/* Connected to the node asked: the three questions. */
static void node_open(nodeask_t *na)
{
	snprintf(T.asked_host, sizeof(T.asked_host), "%s", T.cand[cand_at()].host);
	T.epoch_now = -1;
	T.slots_ok = false;
	redisAsyncCommand(na->ac, on_info, nodeask_tag(na), "CLUSTER INFO");
	redisAsyncCommand(na->ac, on_slots, nodeask_tag(na), "CLUSTER SLOTS");
	redisAsyncCommand(na->ac, on_nodes, nodeask_tag(na), "CLUSTER NODES");
}

/* Asks the round's node now (cand_at), with the question's deadline. */
static void ask_node(void)
{
	timer_at(&T.ask_timeout, timers_now() + ASK_TIMEOUT_MS);
	nodeask_connect(&T.na, T.cand[cand_at()].host, T.cand[cand_at()].port);
}

static void on_ask_timeout(timer_ent_t *t)
{
	(void)t;
	if (!T.asking)
		return;
	LOG(LOG_WARN, "msg=\"cluster node did not answer in time\" node=%s:%d", T.cand[cand_at()].host,
	    T.cand[cand_at()].port);
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
	T.na = (nodeask_t){.loop = loop, .what = "cluster node", .key = "node", .password = T.password,
	                   .open = node_open, .fail = node_fail};
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
	nodeask_close(&T.na);
	free(T.password);
	T.password = NULL;
}
