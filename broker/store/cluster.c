/*
 * cluster.c - the store's backend (backend.h) over a Redis Cluster
 * (cluster://): one connection pool (rpool.c) per master, the slot map
 * followed by cluster_topo.c, each call routed to the master of its first
 * key's slot (every key of a lock shares the hash tag {NAME}, so a lock
 * script touches one slot), and the cluster's redirects handled here.
 *
 * A call (struct ccall) keeps a copy of its arguments until it is
 * answered, so that it can go out again elsewhere:
 *   MOVED     the map is old: the slot's owner is set to the node named at
 *             once, the map is asked for again (cluster_topo_refresh
 *             coalesces a burst into one or two questions), and the call
 *             goes to the node named;
 *   ASK       the slot is moving: the call goes once to the node named,
 *             with ASKING before it;
 *   TRYAGAIN, CLUSTERDOWN
 *             (keys of the slot half moved; no quorum) the call goes again
 *             after a backoff;
 *   LBSLOT    a batch (rpool batch_slots: the calls of one turn to one
 *             master, of any of its slots, in one lua/batch_slots.lua)
 *             found the call's slot not served there now and ran nothing
 *             of it: it goes again at once, alone for good (RP_ALONE), to
 *             hear which of the above it is;
 * all within the call's budget: the latest of its deadline (store.h: how
 * long the call is worth waiting for), its retry_until, and
 * REDIRECT_BUDGET_MS (each of these replies says the script did not run,
 * so a call that may not be repeated may still go again); the first
 * FAST_REDIRECTS redirects at once, the rest after a backoff; then its
 * caller hears the error (unavailable). No count of tries ends a call
 * before its budget: a release resent until its lease has ended waits
 * through a slot move of any length. Redis 7 runs no lock script on a
 * slot while it moves (a lock's keys never all exist: ASK or TRYAGAIN on
 * the source, TRYAGAIN on the target), so a move that outlasts a call's
 * budget fails it.
 * A call that must wait (a backoff, no master for its slot yet) waits in
 * one list, and a later call of the same lock waits behind it, so the
 * calls of a lock leave in their order; a lock's first call to a master
 * waits, too, while calls of the lock are on their way to another (see
 * flight).
 * A call whose pool was closed while its reply was unknown (its master
 * left the map: a failover) goes to the slot's new master while its
 * retry_until lasts, and its callback hears store_replayed().
 *
 * Pools: one per master of the map, made when a map or a redirect first
 * names its address. One made after the first map is a master that took
 * over (a replica promoted, a node added, a node a redirect named): its
 * first ready connection reports a failover (on_data_loss
 * STORE_LOSS_FAILOVER) and it serves nothing but the check of every lease
 * until store_loss_checked, as in Sentinel mode; wider than needed for a
 * node that got its slots by migration, never narrower. A pool whose
 * address is no master in a new map is closed (its pending calls come
 * back: see above) and freed once closed, at the next map or check. While
 * a master of the map is unreachable, the map is asked for every
 * DOWN_REFRESH_MS, so a failover is followed within about that. The map
 * read after a MOVED is taken even when it did not change, which undoes
 * the owner a MOVED set if the map does not say so.
 *
 * Data loss, per master: each pool compares the run_id on reconnect, and
 * each master has its canary (canary.c), on a key of this broker in a
 * slot that master serves, moved to another key when the slot moves.
 *
 * Wake-ups: each pool has an inbox connection, subscribed (classic
 * SUBSCRIBE) to this broker's one inbox channel on that master. A script
 * PUBLISHes a wake on the master that runs it; PUBLISH counts the
 * subscribers on that node only, which is this broker's subscription
 * there, so promote's deaf-broker rule (lua/lib/prelude.lua, "Waking")
 * holds per master unchanged. The cluster bus also carries the message to
 * every other node, and so to this broker's other subscriptions: a wake
 * is taken only from the pool that owns the lock's slot (or when nobody
 * does), so each wake is heard once. One subscription per master, none
 * per lock or waiter, no polling; a wake lost while the map is stale is
 * covered by the waiters' once-a-second heartbeat, as a lost one is in
 * single mode. Why not sharded pub/sub (SPUBLISH/SSUBSCRIBE): hiredis
 * 0.14 knows only SUBSCRIBE and PSUBSCRIBE; an "smessage" push on a
 * context it did not put in subscribed mode is an assert() in its reply
 * loop, and in subscribed mode it is looked up by channel in a table only
 * SUBSCRIBE fills. The price of the classic channel is that the bus
 * carries each wake to every node; wakes are sent only for waiters of
 * another broker, at most once per REWAKE_MS per broker and lock.
 */
#include "broker/store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/canary.h"
#include "broker/store/cluster_map.h"
#include "broker/store/cluster_topo.h"
#include "broker/store/rpool.h"
#include "broker/store/slot.h"

#define POOLS_MAX (CLUSTER_MASTERS_MAX * 2)
#define FAST_REDIRECTS 4 /* redirects followed at once; then with backoff */
#define REDIRECT_BUDGET_MS 2000
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 200
#define DOWN_REFRESH_MS 250
#define CANARY_TRIES 100000

struct cpool {
	redis_addr_t addr;  /* its address, for rpool (kind URL_TCP) */
	rpool_t *pool;
	canary_t *canary;
	uint16_t canary_slot;
	bool primed;        /* a canary of it was primed: it serves (canary.h) */
	bool master;        /* a master of the current map */
	int slots;          /* slots it serves in the current map */
	uint64_t redirects; /* MOVED and ASK replies it gave */
};

struct ccall {
	store_fn fn;
	void *priv;
	uint64_t retry_until;
	uint64_t budget_end;  /* redirects and retries stop here */
	script_id_t script;
	int nkeys, argc, wait, floor_arg;
	uint16_t slot;
	uint32_t route;
	int redirects;
	int ask;              /* pool to send to once with ASKING, or -1 */
	int sent_to;          /* pool it was last sent to */
	int flying;           /* pool it is on its way to now (a flight), or -1 */
	uint32_t backoff_ms;
	bool replayed;        /* a copy went out whose fate is unknown */
	bool in_later;        /* in C.later */
	bool parked;          /* there behind an earlier call of its route, no timer */
	bool alone;           /* a batch answered it LBSLOT: it goes alone (RP_ALONE) */
	struct ccall *prev, *next; /* in C.later, while waiting */
	timer_ent_t later;
	const char **argv;
	size_t *lens;
	char buf[];
};

static struct {
	store_events_t E;
	const lb_config_t *cfg;
	uv_loop_t *loop;
	struct cpool *pools[POOLS_MAX];
	int16_t owner[SLOT_COUNT]; /* index into pools, or -1 */
	bool have_map;
	bool closing;
	bool replayed;             /* the delivery under way (cluster_replayed) */
	bool retired_reply;        /* ... comes from a master that left the map */
	char name[64];             /* CLIENT SETNAME prefix */
	char channel[128];         /* this broker's inbox channel */
	struct ccall *later;       /* calls waiting to go (again), oldest first */
	size_t nlater;
	htab_t flights;            /* struct flight by route */
	timer_ent_t down_timer;    /* asks for the map while a master is down */
} C;

static int send_call(struct ccall *cc);
static void pools_reap(bool all);
static void release_parked(uint32_t route);

/* ---- calls on their way, per route -----------------------------------------
 *
 * A route's (a lock's) calls go to the master of its slot. While some are
 * on their way to one master, a call of the route sent for the first time
 * does not go to another (the map moved on meanwhile): it would pass them
 * there, since they come back with MOVED or ASK, or are sent again when
 * their pool closed, and go second. It waits, parked, until the route's
 * calls on their way all go where it goes (settled). A call sent again
 * (redirected, resent) goes at once: it is older than any call of its
 * route that waits. A route's calls are on at most two masters at a time
 * but for a burst of moves (other: the rest, counted together). */
struct flight {
	htab_node_t node;
	uint32_t route;
	int pool[2];
	unsigned n[2];
	unsigned other;
};

static bool flight_match(const htab_node_t *n, const void *key)
{
	return ((const struct flight *)(const void *)n)->route == *(const uint32_t *)key;
}

static struct flight *flight_find(uint32_t route)
{
	return C.flights.count ? (struct flight *)(void *)htab_find(&C.flights, route, flight_match, &route)
	                       : NULL;
}

static void flight_add(struct ccall *cc, int k)
{
	struct flight *f = flight_find(cc->route);

	if (!f) {
		f = xcalloc(1, sizeof(*f));
		f->route = cc->route;
		htab_insert(&C.flights, &f->node, cc->route);
	}
	for (int s = 0; s < 2; s++) {
		if (f->n[s] > 0 && f->pool[s] != k)
			continue;
		f->pool[s] = k;
		f->n[s]++;
		cc->flying = k;
		return;
	}
	f->other++;
	cc->flying = k;
}

/* cc is answered (or came back to be sent again). */
static void flight_remove(struct ccall *cc)
{
	struct flight *f = cc->flying >= 0 ? flight_find(cc->route) : NULL;
	int k = cc->flying;

	cc->flying = -1;
	if (!f)
		return;
	if (f->n[0] > 0 && f->pool[0] == k)
		f->n[0]--;
	else if (f->n[1] > 0 && f->pool[1] == k)
		f->n[1]--;
	else if (f->other > 0)
		f->other--;
	if (f->n[0] + f->n[1] + f->other == 0) {
		htab_remove(&C.flights, &f->node);
		free(f);
	}
}

/* True when a first send of route to pool k would pass a call of the
 * route on its way elsewhere. */
static bool flight_elsewhere(uint32_t route, int k)
{
	const struct flight *f = flight_find(route);

	return f && (f->other > 0 || (f->n[0] > 0 && f->pool[0] != k) ||
	             (f->n[1] > 0 && f->pool[1] != k));
}

/* ---- pools --------------------------------------------------------------- */

static int pool_index(const char *host, int port)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (p && p->slots >= 0 && p->addr.port == port && strcmp(p->addr.host, host) == 0)
			return k;
	}
	return -1;
}

/* A master serves once it is up and its canary is primed. */
static bool serving(const struct cpool *p)
{
	return p->master && p->primed && rpool_up(p->pool);
}

static bool any_master_down(void)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (p && p->pool && p->master && !rpool_up(p->pool))
			return true;
	}
	return false;
}

static void on_down_timer(timer_ent_t *t)
{
	(void)t;
	pools_reap(false);
	if (C.closing || !any_master_down())
		return;
	cluster_topo_refresh();
	timer_at(&C.down_timer, timers_now() + DOWN_REFRESH_MS);
}

static void watch_down(void)
{
	if (!C.closing && !timer_active(&C.down_timer))
		timer_at(&C.down_timer, timers_now() + DOWN_REFRESH_MS);
}

static bool cluster_up(void);

/* A pool came up: a canary not primed yet is checked now (its master
 * serves once it is). */
static void on_pool_up(void)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (p && p->master && !p->primed && rpool_up(p->pool))
			canary_check_now(p->canary);
	}
	if (cluster_up())
		C.E.on_up();
}

static void on_canary_primed(void)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (p && p->canary && canary_primed(p->canary))
			p->primed = true;
	}
	if (cluster_up())
		C.E.on_up();
}

/* A master may have lost data (or took over): every lease is checked
 * again; a failover check under way on any pool now ends with that one
 * (watchdog_verify_all), so each pool's wait for it counts from now. */
static void on_pool_loss(const char *why)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		if (C.pools[k] && C.pools[k]->slots >= 0)
			rpool_check_extend(C.pools[k]->pool);
	}
	C.E.on_data_loss(why);
}

static void on_pool_lost(void)
{
	watch_down();
}

/* The lock name of a wake (or "\1" NAME: a watched lock changed, see
 * store_notice_channel), and the pool it came from: taken only from the
 * pool that owns the lock's slot (see the header). */
static void on_wake(const char *msg, size_t msg_len, void *priv)
{
	int from = (int)(intptr_t)priv;
	const char *prefix = C.cfg->prefix;
	size_t plen = strlen(prefix);
	bool notice = msg_len > 0 && msg[0] == '\1';
	const char *name = notice ? msg + 1 : msg;
	size_t len = notice ? msg_len - 1 : msg_len;
	char key[600];
	size_t n = 0;
	int owner;

	if (len == 0 || len > 512 || plen > 64) {
		C.E.on_wake(msg, msg_len); /* no lock's: waitq tells */
		return;
	}
	/* The lock's header key, as lockscript.c writes it. */
	memcpy(key, prefix, plen);
	n = plen;
	key[n++] = '{';
	if (name[0] == '}' || name[0] == '=')
		key[n++] = '=';
	memcpy(key + n, name, len);
	n += len;
	key[n++] = '}';
	owner = C.owner[slot_of_key(key, n)];
	if (owner < 0 || owner == from)
		C.E.on_wake(msg, msg_len);
}

static void on_inbox_subscribed(void *priv)
{
	(void)priv;
	C.E.on_rewatch();
}

/* A pool for host:port; failover: it took over from a master that left. */
static int pool_new(const char *host, int port, bool failover)
{
	rpool_callbacks_t cb = {
		.on_up = on_pool_up,
		.on_data_loss = on_pool_loss,
		.on_lost = on_pool_lost,
		.wait_replicas = C.cfg->redis_wait_replicas,
		.wait_ms = C.cfg->redis_wait_ms,
		.batch_max = C.cfg->redis_batch_max,
		.batch_slots = true,
	};
	rpool_inbox_t inbox;
	struct cpool *p;
	int k;

	for (k = 0; k < POOLS_MAX && C.pools[k]; k++)
		;
	if (k == POOLS_MAX) {
		LOG(LOG_ERROR, "msg=\"too many redis cluster nodes at once\" max=%d", POOLS_MAX);
		return -1;
	}
	p = xcalloc(1, sizeof(*p));
	p->addr.kind = URL_TCP;
	snprintf(p->addr.host, sizeof(p->addr.host), "%s", host);
	p->addr.port = port;
	p->addr.password = C.cfg->redis.password; /* borrowed: cfg outlives the pools */
	inbox = (rpool_inbox_t){C.channel, on_wake, on_inbox_subscribed, (void *)(intptr_t)k};
	C.pools[k] = p;
	p->pool = rpool_new(C.loop, &p->addr, C.cfg->pool, C.name, &cb, &inbox);
	if (failover) {
		/* Counted as a switch: its leases are checked before it serves. */
		rpool_expect_failover(p->pool);
		server.stats.failovers_total++;
		LOG(LOG_WARN, "msg=\"a new redis cluster master: checking every lease on it\" addr=%s:%d",
		    host, port);
	} else {
		LOG(LOG_INFO, "msg=\"redis cluster master\" addr=%s:%d", host, port);
	}
	return k;
}

static void pool_retire(struct cpool *p)
{
	p->master = false;
	p->slots = -1; /* never found by pool_index again */
	canary_stop(p->canary);
	p->canary = NULL;
	rpool_close(p->pool);
}

/* Pools closed and done: freed. */
static void pools_reap(bool all)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (!p || (p->master && !all) || !(all || rpool_closed(p->pool)))
			continue;
		rpool_free(p->pool);
		free(p);
		C.pools[k] = NULL;
	}
}

/* The master's canary, on a key of a slot it serves (see the header). */
static void place_canary(int k)
{
	struct cpool *p = C.pools[k];
	char key[160];
	int n;

	if (p->canary && C.owner[p->canary_slot] == k)
		return;
	canary_stop(p->canary);
	p->canary = NULL;
	for (int i = 0; i < CANARY_TRIES; i++) {
		uint16_t slot;
		n = snprintf(key, sizeof(key), "%sbroker:{%s.%d}:canary", C.cfg->prefix, server.id, i);
		slot = slot_of_key(key, (size_t)n);
		if (C.owner[slot] == k) {
			p->canary = canary_start(key, (size_t)n, on_pool_loss);
			canary_on_primed(p->canary, on_canary_primed);
			p->canary_slot = slot;
			return;
		}
	}
	LOG(LOG_WARN, "msg=\"no canary key found for a redis cluster master\" addr=%s:%d slots=%d",
	    p->addr.host, p->addr.port, p->slots);
}

static bool in_map(const cluster_map_t *map, const struct cpool *p)
{
	for (int m = 0; m < map->nmasters; m++) {
		if (map->masters[m].port == p->addr.port && strcmp(map->masters[m].host, p->addr.host) == 0)
			return true;
	}
	return false;
}

static void on_map(const cluster_map_t *map)
{
	int idx[CLUSTER_MASTERS_MAX];
	bool first = !C.have_map;

	if (C.closing)
		return;
	/* The nodes that are no master now go first (their calls come back
	 * and go where this map says), then the new masters get pools. */
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (!p || p->slots < 0 || in_map(map, p))
			continue;
		if (p->master)
			LOG(LOG_WARN, "msg=\"redis cluster node no longer a master\" addr=%s:%d",
			    p->addr.host, p->addr.port);
		pool_retire(p);
	}
	pools_reap(false);
	for (int m = 0; m < map->nmasters; m++) {
		const host_port_t *hp = &map->masters[m];
		idx[m] = pool_index(hp->host, hp->port);
		if (idx[m] < 0)
			idx[m] = pool_new(hp->host, hp->port, !first);
	}
	for (int k = 0; k < POOLS_MAX; k++) {
		if (C.pools[k] && C.pools[k]->slots >= 0) {
			C.pools[k]->master = false;
			C.pools[k]->slots = 0;
		}
	}
	for (int m = 0; m < map->nmasters; m++) {
		if (idx[m] >= 0)
			C.pools[idx[m]]->master = true;
	}
	for (int s = 0; s < SLOT_COUNT; s++) {
		int o = map->owner[s] >= 0 ? idx[map->owner[s]] : -1;
		C.owner[s] = (int16_t)o;
		if (o >= 0)
			C.pools[o]->slots++;
	}
	C.have_map = true;
	for (int k = 0; k < POOLS_MAX; k++) {
		if (C.pools[k] && C.pools[k]->master)
			place_canary(k);
	}
	if (any_master_down())
		watch_down();
}

/* ---- the waiting list ------------------------------------------------------
 *
 * Calls that wait to go (again) are kept in one list, oldest first. A call
 * waits either on its own backoff timer, or parked: behind an earlier call
 * of its route (its lock) that waits, so that the calls of one lock still
 * leave in their order when one of them has to wait. */

static bool later_has_route(uint32_t route)
{
	for (struct ccall *k = C.later; k; k = k->next)
		if (k->route == route)
			return true;
	return false;
}

static void later_append(struct ccall *cc)
{
	struct ccall *t = C.later;

	cc->next = NULL;
	cc->prev = NULL;
	while (t && t->next)
		t = t->next;
	if (t) {
		t->next = cc;
		cc->prev = t;
	} else {
		C.later = cc;
	}
	C.nlater++;
}

static void later_remove(struct ccall *cc)
{
	if (cc->prev)
		cc->prev->next = cc->next;
	else
		C.later = cc->next;
	if (cc->next)
		cc->next->prev = cc->prev;
	cc->prev = cc->next = NULL;
	C.nlater--;
}

/* cc gives up on the cluster's redirects: said in the log, at most every
 * 5 s (a slot whose move outlasts the budget fails every call on it). */
static void give_up(struct ccall *cc, const redisReply *reply)
{
	static uint64_t logged_at;
	uint64_t now = timers_now();

	if (!logged_at || now - logged_at >= 5000) {
		logged_at = now;
		LOG(LOG_WARN, "msg=\"a redis cluster call gave up after redirects and retries\" slot=%u "
		    "tries=%d err=\"%.100s\"", (unsigned)cc->slot, cc->redirects + 1,
		    reply ? reply->str : "no master for its slot");
	}
}

static void finish(struct ccall *cc, const redisReply *reply)
{
	bool was = C.replayed, was_retired = C.retired_reply;
	const struct cpool *from = cc->sent_to >= 0 ? C.pools[cc->sent_to] : NULL;

	C.replayed = cc->replayed || rpool_replayed();
	/* From a master that left the map (a failover demoted it) after the
	 * call went out: what it did there is not where the slot is served
	 * now. The locks layer takes it as unacknowledged (store_replicated):
	 * a grant is given back, a renewal is no renewal. */
	C.retired_reply = reply && from && from->slots < 0;
	cc->fn(reply, cc->priv);
	C.replayed = was;
	C.retired_reply = was_retired;
	free(cc);
}

/* Arms cc's backoff (in the list already, or appended), if its budget
 * allows another try; false if not. */
static bool arm(struct ccall *cc)
{
	uint64_t at = timers_now() + cc->backoff_ms;

	if (C.closing || at >= cc->budget_end)
		return false;
	cc->redirects++;
	cc->backoff_ms = cc->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : cc->backoff_ms * 2;
	if (!cc->in_later) {
		/* An earlier call of its lock waits already: it goes right
		 * behind that one, not on a backoff of its own (a shorter one
		 * would let it pass: an acquire overtaking the release it
		 * followed, both bounced by a slot move). */
		bool behind = C.nlater > 0 && later_has_route(cc->route);
		later_append(cc);
		cc->in_later = true;
		if (behind) {
			cc->parked = true;
			return true;
		}
	}
	cc->parked = false;
	timer_at(&cc->later, at);
	return true;
}

/* Tries cc again after its backoff; false when its budget is spent. */
static bool retry_later(struct ccall *cc)
{
	return arm(cc);
}

/* The calls of route parked in the list (behind a call of the route that
 * left it, or behind its calls on their way elsewhere: see flight): they
 * go, in order, until one of them cannot (it then waits on its own
 * backoff, or stays parked while the route's calls are still on their way
 * elsewhere). */
static void release_parked(uint32_t route)
{
	struct ccall *k = C.later;

	while (k) {
		struct ccall *next = k->next;
		int rc;
		if (k->route != route) {
			k = next;
			continue;
		}
		if (!k->parked)
			return; /* waits on its own timer: the ones behind stay parked */
		rc = send_call(k);
		if (rc == -2)
			return; /* still behind its route's calls elsewhere */
		if (rc == 0) {
			later_remove(k);
			k->in_later = false;
		} else if (!arm(k)) {
			later_remove(k);
			k->in_later = false;
			give_up(k, NULL);
			finish(k, NULL);
		} else {
			return;
		}
		k = next;
	}
}

static void on_later(timer_ent_t *t)
{
	struct ccall *cc = (struct ccall *)((char *)t - offsetof(struct ccall, later));
	uint32_t route = cc->route;

	int rc = send_call(cc);

	if (rc == -2) {
		cc->parked = true; /* released when its route's calls are settled */
		return;
	}
	if (rc < 0 && arm(cc))
		return; /* still no master takes it: later again */
	/* Sent, or out of budget: it leaves the list, and what waited
	 * behind it may go. */
	later_remove(cc);
	cc->in_later = false;
	if (rc < 0) {
		give_up(cc, NULL);
		finish(cc, NULL);
	}
	release_parked(route);
}

static bool error_is(const redisReply *r, const char *code)
{
	size_t n = strlen(code);

	return r->type == REDIS_REPLY_ERROR && r->len >= n && strncmp(r->str, code, n) == 0 &&
	       (r->len == n || r->str[n] == ' ');
}

static void reply_to(struct ccall *cc, const redisReply *reply);

/* A reply of cc's: handled, then its route's calls parked behind its
 * flight may go (they come after whatever cc did: sent on, or answered). */
static void on_reply(const redisReply *reply, void *priv)
{
	struct ccall *cc = priv;
	uint32_t route = cc->route;

	flight_remove(cc);
	reply_to(cc, reply);
	if (!C.closing && C.nlater > 0)
		release_parked(route);
}

static void reply_to(struct ccall *cc, const redisReply *reply)
{
	struct cpool *from = cc->sent_to >= 0 ? C.pools[cc->sent_to] : NULL;
	cluster_redirect_t rd;

	if (rpool_replayed())
		cc->replayed = true; /* a copy may have run: it stays so wherever it goes next */
	if (C.closing) {
		finish(cc, reply);
		return;
	}
	if (reply && reply->type == REDIS_REPLY_ERROR && from &&
	    cluster_read_redirect(reply->str, reply->len, from->addr.host, &rd) == 0) {
		int to = pool_index(rd.to.host, rd.to.port);
		from->redirects++;
		if (to < 0)
			to = pool_new(rd.to.host, rd.to.port, C.have_map);
		if (rd.ask) {
			cc->ask = to;
		} else {
			if (to >= 0 && rd.slot == cc->slot)
				C.owner[rd.slot] = (int16_t)to; /* until the map says */
			cluster_topo_refresh_from(&rd.to);
		}
		if (to >= 0 && timers_now() < cc->budget_end) {
			/* At once, the first few times; then (nodes that send it
			 * back and forth, a node not connected yet) after a
			 * backoff. */
			if (cc->redirects < FAST_REDIRECTS) {
				cc->redirects++;
				if (send_call(cc) == 0)
					return;
			}
			if (retry_later(cc))
				return;
		}
		give_up(cc, reply);
		finish(cc, reply);
		return;
	}
	if (reply && error_is(reply, "LBSLOT") && !cc->alone) {
		/* Its batch found its slot not served here now, before it ran
		 * (lua/batch.lua): alone, it hears MOVED, ASK, TRYAGAIN or
		 * CLUSTERDOWN and follows it as above. At once: the first time
		 * it counts as no redirect. */
		cc->alone = true;
		if (send_call(cc) == 0 || retry_later(cc))
			return;
		give_up(cc, reply);
		finish(cc, reply);
		return;
	}
	if (reply && (error_is(reply, "TRYAGAIN") || error_is(reply, "CLUSTERDOWN"))) {
		if (error_is(reply, "CLUSTERDOWN"))
			cluster_topo_refresh();
		if (retry_later(cc))
			return;
		give_up(cc, reply);
		finish(cc, reply);
		return;
	}
	if (!reply && cc->retry_until > timers_now()) {
		/* Its pool closed with the reply unknown (its master left the
		 * map): the slot's master now, as a repeat. */
		cc->replayed = true;
		if (send_call(cc) == 0 || retry_later(cc))
			return;
	}
	finish(cc, reply);
}

/* Sends cc to the master of its slot (or once, after ASK, to the node
 * named). 0: on its way; -1: no master of its slot takes it now; -2: it
 * waits for its route's calls on their way elsewhere (see flight). */
static int send_call(struct ccall *cc)
{
	int k, wait;

	if (cc->ask >= 0 && (!C.pools[cc->ask] || C.pools[cc->ask]->slots < 0))
		cc->ask = -1; /* the node it was sent to is gone: the map says */
	k = cc->ask >= 0 ? cc->ask : C.owner[cc->slot];
	wait = cc->wait | (cc->ask >= 0 ? RP_ASKING : 0) | (cc->alone ? RP_ALONE : 0);

	if (k < 0 || !C.pools[k] || C.pools[k]->slots < 0)
		return -1;
	/* Nothing but its canary goes to a master before the canary is
	 * primed (canary.h): a loss there could not be told from it. The
	 * check of every lease after a failover goes first (the pool lets
	 * nothing else out, the canary included, until it is done). */
	if (!C.pools[k]->primed && cc->script != SCRIPT_CANARY && cc->script != SCRIPT_VERIFY)
		return -1;
	if (cc->sent_to < 0 && flight_elsewhere(cc->route, k))
		return -2; /* behind its route's calls on their way elsewhere */
	if (rpool_eval(C.pools[k]->pool, cc->route, cc->script, cc->nkeys, cc->argc,
	               (const char *const *)cc->argv, cc->lens, on_reply, cc, cc->retry_until, wait,
	               cc->floor_arg) < 0)
		return -1; /* an ASK stays for the next try */
	cc->ask = -1;
	cc->sent_to = k;
	flight_add(cc, k);
	return 0;
}

static int cluster_eval(const char *route, size_t route_len, script_id_t script, int nkeys,
                        int argc, const char *const *argv, const size_t *argvlen, store_fn fn,
                        void *priv, uint64_t retry_until, uint64_t deadline, int wait,
                        int floor_arg)
{
	size_t bytes = 0;
	struct ccall *cc;
	char *p;
	uint64_t now = timers_now();
	int rc;

	if (C.closing || argc < 1 || nkeys < 1)
		return -1;
	for (int k = 0; k < argc; k++)
		bytes += argvlen[k];
	cc = xmalloc(sizeof(*cc) + (size_t)argc * (sizeof(char *) + sizeof(size_t)) + bytes);
	memset(cc, 0, sizeof(*cc));
	cc->argv = (const char **)(void *)cc->buf;
	cc->lens = (size_t *)(void *)(cc->buf + (size_t)argc * sizeof(char *));
	p = cc->buf + (size_t)argc * (sizeof(char *) + sizeof(size_t));
	for (int k = 0; k < argc; k++) {
		memcpy(p, argv[k], argvlen[k]);
		cc->argv[k] = p;
		cc->lens[k] = argvlen[k];
		p += argvlen[k];
	}
	cc->fn = fn;
	cc->priv = priv;
	cc->retry_until = retry_until;
	/* Its budget for redirects and retries: its own deadline, or as long
	 * as it may be resent, and at least REDIRECT_BUDGET_MS. */
	cc->budget_end = now + REDIRECT_BUDGET_MS;
	if (retry_until > cc->budget_end)
		cc->budget_end = retry_until;
	if (deadline > cc->budget_end)
		cc->budget_end = deadline;
	cc->script = script;
	cc->nkeys = nkeys;
	cc->argc = argc;
	cc->wait = wait;
	cc->floor_arg = floor_arg;
	cc->slot = slot_of_key(argv[0], argvlen[0]);
	cc->route = rpool_route(route, route_len);
	cc->ask = -1;
	cc->sent_to = -1;
	cc->flying = -1;
	cc->backoff_ms = BACKOFF_FIRST_MS;
	timer_init(&cc->later, on_later);
	if (C.nlater > 0 && later_has_route(cc->route)) {
		/* An earlier call of this lock waits: this one goes after it. */
		later_append(cc);
		cc->in_later = true;
		cc->parked = true;
		return 0;
	}
	rc = send_call(cc);
	if (rc == 0)
		return 0;
	if (rc == -2) {
		/* Its lock's calls on their way to a master the map no longer
		 * names for it go first (see flight). */
		later_append(cc);
		cc->in_later = true;
		cc->parked = true;
		return 0;
	}
	if (retry_until > now && retry_later(cc))
		return 0; /* no master for its slot yet: the map is coming */
	free(cc);
	return -1;
}

/* ---- the backend --------------------------------------------------------- */

static void cluster_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	memset(&C, 0, sizeof(C));
	C.E = *events;
	C.cfg = cfg;
	C.loop = loop;
	for (int s = 0; s < SLOT_COUNT; s++)
		C.owner[s] = -1;
	snprintf(C.channel, sizeof(C.channel), "%sinbox:%s", cfg->prefix, server.id);
	snprintf(C.name, sizeof(C.name), "lockbroker-%s", server.id);
	timer_init(&C.down_timer, on_down_timer);
	cluster_topo_start(loop, cfg->redis.seeds, cfg->redis.nseeds, cfg->redis.password, on_map);
}

static void cluster_close(void)
{
	C.closing = true;
	cluster_topo_close();
	timer_cancel(&C.down_timer);
	while (C.later) {
		struct ccall *cc = C.later;
		later_remove(cc);
		timer_cancel(&cc->later);
		finish(cc, NULL);
	}
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (!p || p->slots < 0)
			continue;
		canary_stop(p->canary);
		p->canary = NULL;
		p->master = false;
		p->slots = -1;
		rpool_close(p->pool);
	}
}

static void cluster_free(void)
{
	pools_reap(true);
	FAILS_ASSERT(C.flights.count == 0); /* each goes with its last call */
	htab_free(&C.flights);
}

static void cluster_loss_checked(void)
{
	/* Every live pool: one a redirect made is checked too. */
	for (int k = 0; k < POOLS_MAX; k++) {
		if (C.pools[k] && C.pools[k]->slots >= 0)
			rpool_check_done(C.pools[k]->pool);
	}
}

static bool cluster_up(void)
{
	for (int k = 0; k < POOLS_MAX; k++) {
		struct cpool *p = C.pools[k];
		if (p && serving(p))
			return true;
	}
	return false;
}

static size_t cluster_pending(void)
{
	size_t n = C.nlater;

	for (int k = 0; k < POOLS_MAX; k++) {
		if (C.pools[k])
			n += rpool_pending(C.pools[k]->pool);
	}
	return n;
}

static bool cluster_replayed(void)
{
	return C.replayed || rpool_replayed();
}

static bool cluster_replicated(void)
{
	return rpool_replicated() && !C.retired_reply;
}

static size_t cluster_masters(store_master_t *out, size_t max)
{
	bool seen[POOLS_MAX] = {false};
	size_t n = 0;

	for (int s = 0; s < SLOT_COUNT; s++) {
		int k = C.owner[s];
		struct cpool *p = k >= 0 ? C.pools[k] : NULL;
		if (!p || seen[k])
			continue;
		seen[k] = true;
		if (n < max) {
			store_master_t *m = &out[n];
			memset(m, 0, sizeof(*m));
			snprintf(m->addr, sizeof(m->addr), "%s:%d", p->addr.host, p->addr.port);
			m->up = rpool_up(p->pool);
			m->slots = p->slots;
			m->pending = rpool_pending(p->pool);
			m->redirects = p->redirects;
		}
		n++;
	}
	return n;
}

static const store_caps_t cluster_caps = {.wait = STORE_WAIT_QUEUED};

const store_backend_t store_cluster_backend = {
	.caps = &cluster_caps,
	.start = cluster_start,
	.close = cluster_close,
	.free = cluster_free,
	.loss_checked = cluster_loss_checked,
	.up = cluster_up,
	.pending = cluster_pending,
	.replayed = cluster_replayed,
	.replicated = cluster_replicated,
	.eval = cluster_eval,
	.masters = cluster_masters,
};
