/*
 * ui_state.c - see ui_state.h.
 *
 * A render walks this broker's leases and pending acquires twice. The
 * first walk groups them by lock (a temporary hash of small groups, at most
 * one per lease or waiter) and counts; the groups are ranked and the top
 * UI_STATE_LOCKS chosen; the second walk collects the holders and waiters
 * shown of those. Everything a render allocates is freed before it
 * returns, but the text, kept for reuse (UI_STATE_REUSE_MS) until the next
 * render or ui_state_stop.
 */
#include "broker/ui_state.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/base/version.h"
#include "broker/locks/client.h"
#include "broker/locks/lease.h"
#include "broker/locks/lockstat.h"
#include "broker/locks/waitq.h"
#include "broker/store/store.h"

static struct {
	char *text; /* the last render, or NULL */
	size_t len;
	uint64_t at; /* when it was made (uv_now ms) */
	uint64_t reuse_ms; /* how long it is reused (UI_STATE_LOOP_SHARE) */
} R;

void ui_state_start(uv_loop_t *loop)
{
	lockstat_start(loop);
}

void ui_state_stop(void)
{
	lockstat_stop();
	free(R.text);
	R.text = NULL;
}

/* ---- strings ------------------------------------------------------------- */

/* At most cap bytes of s as a JSON string, cut at a UTF-8 boundary (*cut
 * says whether it was cut). Input came through the protocol's JSON, so it
 * is UTF-8; should it not be, every byte above ASCII shows as '?'. */
static json_t *text(const char *s, size_t len, size_t cap, bool *cut)
{
	size_t n = len < cap ? len : cap;
	json_t *j;

	if (n < len)
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--; /* s[n] continues a character: cut before that character */
	if (cut)
		*cut = n < len;
	j = json_stringn(s, n);
	if (!j) {
		char *copy = xstrndup(s, n);
		for (size_t k = 0; k < n; k++)
			if ((unsigned char)copy[k] >= 0x80)
				copy[k] = '?';
		j = json_stringn(copy, n);
		free(copy);
		REQUIRE(j);
	}
	return j;
}

static json_t *lock_name(json_t *obj, const char *name, size_t len)
{
	bool cut;

	json_object_set_new(obj, "name", text(name, len, UI_STATE_NAME_BYTES, &cut));
	if (cut)
		json_object_set_new(obj, "name_cut", json_true());
	return obj;
}

/* The client's label (hello's "client"), or null. */
static json_t *label(const client_t *c)
{
	return c->label ? text(c->label, c->label_len, UI_STATE_LABEL_BYTES, NULL) : json_null();
}

/* ---- grouping by lock ---------------------------------------------------- */

typedef struct group {
	htab_node_t node;
	const char *name; /* the lease's or the wlock's copy: valid during a render */
	size_t len;
	size_t nholders, nwaiting;
	double rate;
	int shown; /* its place among the locks shown, -1: none */
} group_t;

typedef struct shown {
	const lease_t *holders[UI_STATE_SHOWN];
	size_t nholders;
	waitq_view_t waiters[UI_STATE_SHOWN];
	size_t nwaiters;
} shown_t;

typedef struct walk {
	htab_t index;
	group_t *g; /* cap groups */
	size_t n, cap;
	shown_t *shown; /* the second walk's, by group_t.shown */
} walk_t;

typedef struct key {
	const char *name;
	size_t len;
} gkey_t;

static bool group_match(const htab_node_t *n, const void *k)
{
	const group_t *g = (const group_t *)n;
	const gkey_t *key = k;

	return g->len == key->len && memcmp(g->name, key->name, key->len) == 0;
}

/* The group of name; made in the first walk (NULL when full, which the
 * bound on cap never lets happen), only found in the second. */
static group_t *group_of(walk_t *w, const char *name, size_t len)
{
	gkey_t key = {name, len};
	uint32_t h = htab_hash(HTAB_HASH_INIT, name, len);
	htab_node_t *n = htab_find(&w->index, h, group_match, &key);
	group_t *g;

	if (n || w->shown)
		return (group_t *)n;
	if (FAILS_ASSERT(w->n < w->cap))
		return NULL;
	g = &w->g[w->n++];
	*g = (group_t){.name = name, .len = len, .shown = -1};
	htab_insert(&w->index, &g->node, h);
	return g;
}

static void on_lease(lease_t *l, void *arg)
{
	walk_t *w = arg;
	group_t *g = group_of(w, l->lock, l->lock_len);

	if (!g)
		return;
	if (!w->shown) {
		g->nholders++;
	} else if (g->shown >= 0) {
		shown_t *s = &w->shown[g->shown];
		if (s->nholders < UI_STATE_SHOWN)
			s->holders[s->nholders++] = l;
	}
}

static void on_waiter(const waitq_view_t *v, void *arg)
{
	walk_t *w = arg;
	group_t *g = group_of(w, v->lock, v->lock_len);

	if (!g)
		return;
	if (!w->shown) {
		g->nwaiting++;
	} else if (g->shown >= 0) {
		shown_t *s = &w->shown[g->shown];
		if (s->nwaiters < UI_STATE_SHOWN)
			s->waiters[s->nwaiters++] = *v;
	}
}

/* Busier first: holders plus waiters, then the grant rate, then the name. */
static int cmp_groups(const void *a, const void *b)
{
	const group_t *x = *(const group_t *const *)a, *y = *(const group_t *const *)b;
	size_t bx = x->nholders + x->nwaiting, by = y->nholders + y->nwaiting;
	int c;

	if (bx != by)
		return bx < by ? 1 : -1;
	if (x->rate != y->rate)
		return x->rate < y->rate ? 1 : -1;
	c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
	if (c)
		return c;
	return (x->len > y->len) - (x->len < y->len);
}

/* ---- the parts ------------------------------------------------------------- */

static json_t *holder_json(const lease_t *l, uint64_t now)
{
	return json_pack("{s:o, s:s, s:s, s:I, s:I, s:I, s:b}",
	                 "client", label(l->client),
	                 "session", l->client->name ? l->client->name : "",
	                 "mode", lb_mode_name(l->mode),
	                 "fence", (json_int_t)l->fence,
	                 "ttl_ms", (json_int_t)(l->expires_at > now ? l->expires_at - now : 0),
	                 "count", (json_int_t)l->count,
	                 "watchdog", l->watchdog);
}

static json_t *waiter_json(const waitq_view_t *v, uint64_t now)
{
	return json_pack("{s:o, s:s, s:s, s:I}",
	                 "client", label(v->client),
	                 "session", v->client->name ? v->client->name : "",
	                 "mode", lb_mode_name(v->mode),
	                 "waited_ms", (json_int_t)(now > v->since ? now - v->since : 0));
}

/* The locks shown, and in *total how many locks have holders or waiters
 * here. */
static json_t *locks_json(size_t *total)
{
	uint64_t now = timers_now();
	walk_t w = {.cap = lease_count() + waitq_count() + 1};
	group_t **order;
	size_t nshown;
	json_t *out = json_array();

	w.g = xcalloc(w.cap, sizeof(*w.g));
	lease_foreach(on_lease, &w);
	waitq_foreach_pending(on_waiter, &w);
	*total = w.n;

	order = xcalloc(w.n + 1, sizeof(*order));
	for (size_t k = 0; k < w.n; k++) {
		w.g[k].rate = lockstat_rate(w.g[k].name, w.g[k].len);
		order[k] = &w.g[k];
	}
	qsort(order, w.n, sizeof(*order), cmp_groups);
	nshown = w.n < UI_STATE_LOCKS ? w.n : UI_STATE_LOCKS;
	for (size_t k = 0; k < nshown; k++)
		order[k]->shown = (int)k;

	w.shown = xcalloc(nshown + 1, sizeof(*w.shown));
	lease_foreach(on_lease, &w);
	waitq_foreach_pending(on_waiter, &w);

	for (size_t k = 0; k < nshown; k++) {
		const group_t *g = order[k];
		const shown_t *s = &w.shown[k];
		json_t *lk = lock_name(json_object(), g->name, g->len);
		json_t *hs = json_array(), *ws = json_array();

		for (size_t i = 0; i < s->nholders; i++)
			json_array_append_new(hs, holder_json(s->holders[i], now));
		for (size_t i = 0; i < s->nwaiters; i++)
			json_array_append_new(ws, waiter_json(&s->waiters[i], now));
		json_object_set_new(lk, "holder_count", json_integer((json_int_t)g->nholders));
		json_object_set_new(lk, "queue_length", json_integer((json_int_t)g->nwaiting));
		json_object_set_new(lk, "grants_per_s", json_real(g->rate));
		json_object_set_new(lk, "holders", hs);
		json_object_set_new(lk, "waiters", ws);
		json_array_append_new(out, lk);
	}
	free(w.shown);
	free(order);
	free(w.g);
	htab_free(&w.index);
	return out;
}

static json_t *hot_json(void)
{
	lockstat_lock_t hot[UI_STATE_HOT];
	size_t n = lockstat_hot(hot, UI_STATE_HOT);
	json_t *out = json_array();

	for (size_t k = 0; k < n; k++) {
		json_t *h = lock_name(json_object(), hot[k].name, hot[k].len);
		json_object_set_new(h, "grants_per_s", json_real(hot[k].rate));
		json_object_set_new(h, "grants", json_integer((json_int_t)hot[k].grants));
		json_array_append_new(out, h);
	}
	return out;
}

static void host_port(char *buf, size_t len, const char *host, int port)
{
	snprintf(buf, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* Where the locks are kept, as the settings name it: never a password. */
static json_t *target_json(void)
{
	const redis_addr_t *a = &server.cfg->redis;
	json_t *list = json_array();
	char buf[URL_HOST_MAX + 16];

	if (server.cfg->nredlock > 0) {
		for (int k = 0; k < server.cfg->nredlock; k++) {
			const redis_addr_t *m = &server.cfg->redlock[k];
			if (m->kind == URL_UNIX)
				json_array_append_new(list, text(m->path, strlen(m->path), 512, NULL));
			else {
				host_port(buf, sizeof(buf), m->host, m->port);
				json_array_append_new(list, text(buf, strlen(buf), 512, NULL));
			}
		}
		return json_pack("{s:o}", "redlock", list);
	}
	switch (a->kind) {
	case URL_SENTINEL:
		for (int k = 0; k < a->nsentinels; k++) {
			host_port(buf, sizeof(buf), a->sentinels[k].host, a->sentinels[k].port);
			json_array_append_new(list, text(buf, strlen(buf), 512, NULL));
		}
		return json_pack("{s:o, s:o}", "master_name",
		                 text(a->master_name, strlen(a->master_name), 512, NULL), "sentinels", list);
	case URL_CLUSTER:
		for (int k = 0; k < a->nseeds; k++) {
			host_port(buf, sizeof(buf), a->seeds[k].host, a->seeds[k].port);
			json_array_append_new(list, text(buf, strlen(buf), 512, NULL));
		}
		return json_pack("{s:o}", "seeds", list);
	case URL_UNIX:
		json_decref(list);
		return json_pack("{s:o, s:i}", "addr", text(a->path, strlen(a->path), 512, NULL), "db", a->db);
	case URL_TCP:
	default:
		json_decref(list);
		host_port(buf, sizeof(buf), a->host, a->port);
		return json_pack("{s:o, s:i}", "addr", text(buf, strlen(buf), 512, NULL), "db", a->db);
	}
}

static json_t *redis_json(void)
{
	store_master_t m[STORE_MASTERS_SHOWN];
	size_t n = store_masters(m, STORE_MASTERS_SHOWN);
	json_t *ms = json_array();

	if (n > STORE_MASTERS_SHOWN)
		n = STORE_MASTERS_SHOWN;
	for (size_t k = 0; k < n; k++)
		json_array_append_new(ms, json_pack("{s:o, s:b, s:i, s:I}", "addr",
		                                    text(m[k].addr, strnlen(m[k].addr, sizeof(m[k].addr)), 512, NULL),
		                                    "up", m[k].up, "slots", m[k].slots,
		                                    "pending", (json_int_t)m[k].pending));
	return json_pack("{s:b, s:s, s:o, s:o}", "up", store_up(), "mode", store_mode(), "target",
	                 target_json(), "masters", ms);
}

static json_t *series_json(void)
{
	static lockstat_sample_t s[LOCKSTAT_SECONDS];
	size_t n = lockstat_series(s, LOCKSTAT_SECONDS);
	json_t *grants = json_array(), *handoffs = json_array(), *mean = json_array(),
	       *p50 = json_array(), *p99 = json_array(), *max = json_array(), *leases = json_array(),
	       *waiters = json_array();

	for (size_t k = 0; k < n; k++) {
		json_array_append_new(grants, json_integer(s[k].grants));
		json_array_append_new(handoffs, json_integer(s[k].handoffs));
		json_array_append_new(mean, json_real(s[k].mean_ms));
		json_array_append_new(p50, json_real(s[k].p50_ms));
		json_array_append_new(p99, json_real(s[k].p99_ms));
		json_array_append_new(max, json_real(s[k].max_ms));
		json_array_append_new(leases, json_integer(s[k].leases));
		json_array_append_new(waiters, json_integer(s[k].waiters));
	}
	return json_pack("{s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
	                 "step_ms", 1000, "seconds", LOCKSTAT_SECONDS,
	                 "age_ms", (json_int_t)lockstat_since_tick(),
	                 "grants", grants, "handoffs", handoffs, "handoff_mean_ms", mean,
	                 "handoff_p50_ms", p50, "handoff_p99_ms", p99, "handoff_max_ms", max,
	                 "leases", leases, "waiters", waiters);
}

static const char *state_name(void)
{
	switch (server.state) {
	case BROKER_RUNNING:
		return "running";
	case BROKER_DRAINING:
		return "draining";
	case BROKER_STOPPING:
		return "stopping";
	}
	return "running";
}

static json_t *state_json(void)
{
	size_t total = 0;
	json_t *locks = locks_json(&total);

	return json_pack(
	    "{s:i, s:s, s:{s:s, s:s, s:I, s:s}, s:o, "
	    "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
	    "s:i, s:I, s:b, s:o, s:o, s:o}",
	    "version", 1, "scope", "this broker's sessions",
	    "broker", "id", server.id, "version", LOCKBROKER_VERSION, "uptime_s",
	    (json_int_t)((timers_now() - server.started_ms) / 1000), "state", state_name(),
	    "redis", redis_json(),
	    "totals", "connections", (json_int_t)server.nconnections, "sessions",
	    (json_int_t)server.nsessions, "leases", (json_int_t)server.nleases, "waiters",
	    (json_int_t)waitq_count(), "locks", (json_int_t)total, "grants_total",
	    (json_int_t)lockstat_grants_total(), "acquired_total",
	    (json_int_t)server.stats.acquired_total, "released_total",
	    (json_int_t)server.stats.released_total, "timeouts_total",
	    (json_int_t)server.stats.timeouts_total, "lost_total", (json_int_t)server.stats.lost_total,
	    "limit", UI_STATE_LOCKS, "locks_total", (json_int_t)total, "truncated",
	    total > UI_STATE_LOCKS, "locks", locks, "hot", hot_json(), "series", series_json());
}

#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(4))

const char *ui_state_render(size_t *len)
{
	uint64_t now = timers_now(), began = uv_hrtime(), took_ms;
	json_t *st, *locks;
	char *s;

	if (R.text && now - R.at < R.reuse_ms) {
		*len = R.len;
		return R.text;
	}
	st = state_json();
	REQUIRE(st);
	locks = json_object_get(st, "locks");
	for (;;) {
		size_t n = json_array_size(locks);
		s = json_dumps(st, DUMP_FLAGS);
		REQUIRE(s);
		if (strlen(s) <= UI_STATE_MAX_BYTES || n == 0)
			break;
		/* Too long (names and labels of control characters escape six
		 * times their size): the busiest locks stay. */
		free(s);
		for (size_t k = n, keep = n / 2; k > keep; k--)
			json_array_remove(locks, k - 1);
		json_object_set_new(st, "truncated", json_true());
	}
	json_decref(st);
	free(R.text);
	R.text = s;
	R.len = strlen(s);
	R.at = now;
	took_ms = (uv_hrtime() - began) / 1000000;
	R.reuse_ms = took_ms * UI_STATE_LOOP_SHARE > UI_STATE_REUSE_MS ? took_ms * UI_STATE_LOOP_SHARE
	                                                                 : UI_STATE_REUSE_MS;
	REQUIRE(R.len <= UI_STATE_MAX_BYTES);
	*len = R.len;
	return R.text;
}
