/*
 * lockstat.c - see lockstat.h.
 *
 * The lock table: LOCKSTAT_SLOTS static entries, indexed by a static hash
 * of chains (entry numbers, -1 ends a chain). An entry counts its grants
 * of the current second (`cur`) and of each of the last LOCKSTAT_WINDOW_S
 * seconds (a ring shifted by the sampler); when the table is full a new
 * name takes the entry of the coldest lock.
 *
 * The broker's ring: LOCKSTAT_SECONDS samples, closed by the sampler once
 * a second from what the hooks counted (grants, handoffs, up to
 * LOCKSTAT_LAT_KEPT latencies: a reservoir sample past that). A sampler
 * that fires late (a stalled loop) closes the seconds it missed as empty
 * ones, so sample k is always k seconds before the newest.
 */
#include "broker/locks/lockstat.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/htab.h"
#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/locks/waitq.h"
#include "protocol/req.h"

#define NBUCKETS 512 /* a power of two, twice the slots */
#define EVICT_LOOK 8  /* slots a miss on a full table compares */

_Static_assert((NBUCKETS & (NBUCKETS - 1)) == 0, "NBUCKETS is a power of two");
_Static_assert(LOCKSTAT_SLOTS < 32768, "entry numbers fit an int16_t");

typedef struct entry {
	bool used;
	int16_t next;  /* the chain of its bucket, -1: the end */
	uint32_t hash;
	uint16_t len;
	uint32_t cur;                       /* grants this second */
	uint32_t window[LOCKSTAT_WINDOW_S]; /* grants per second, by S.wpos */
	uint32_t wsum;                      /* the window's sum */
	uint64_t grants;
	uint64_t granted_at; /* the last grant, 0: none */
	uint64_t woken_at;   /* the last wake-up message, 0: none */
	char name[REQ_LOCK_MAX_BYTES];
} entry_t;

const double lockstat_handoff_bounds[COUNTERS_NBOUNDS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                          0.1,   0.25,   0.5,   1,    2.5,   10};

static struct {
	bool on;
	bool timer_open;    /* initialized, not closed */
	bool timer_closing; /* closed, its close callback still to run */
	uv_timer_t timer;
	uint64_t last_tick; /* uv_now ms of the newest sample */

	entry_t e[LOCKSTAT_SLOTS];
	int16_t buckets[NBUCKETS];
	size_t nused;
	int16_t hand;  /* where the next eviction looks first */
	unsigned wpos; /* the window slot the next tick fills */
	uint32_t rng;  /* xorshift32 state of the reservoir (not secret) */

	/* the current second */
	uint32_t grants, handoffs;
	double lat_sum, lat_max;
	uint32_t lat_n; /* latencies kept in lat */
	float lat[LOCKSTAT_LAT_KEPT];

	lockstat_sample_t ring[LOCKSTAT_SECONDS];
	size_t rnext, rcount;

	uint64_t grants_total;
	histogram_t handoff;
} S;

/* ---- the table -------------------------------------------------------------- */

static void buckets_init(void)
{
	static bool done;

	if (done)
		return;
	for (size_t b = 0; b < NBUCKETS; b++)
		S.buckets[b] = -1;
	done = true;
}

static entry_t *find(const char *name, size_t len, uint32_t h)
{
	for (int16_t k = S.buckets[h & (NBUCKETS - 1)]; k >= 0; k = S.e[k].next) {
		entry_t *e = &S.e[k];
		if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
			return e;
	}
	return NULL;
}

static void unlink_entry(int16_t k)
{
	int16_t *pp = &S.buckets[S.e[k].hash & (NBUCKETS - 1)];

	while (*pp != k)
		pp = &S.e[*pp].next;
	*pp = S.e[k].next;
	S.e[k].used = false;
	S.nused--;
}

/* Colder first: fewer grants in the window (the current second too), then
 * the older last grant. */
static bool colder(const entry_t *a, const entry_t *b)
{
	uint64_t sa = (uint64_t)a->wsum + a->cur, sb = (uint64_t)b->wsum + b->cur;

	return sa != sb ? sa < sb : a->granted_at < b->granted_at;
}

/* The entry of name, made (evicting the coldest) when absent; NULL for a
 * name the table does not keep. */
static entry_t *get(const char *name, size_t len)
{
	uint32_t h;
	entry_t *e;
	int16_t k;

	if (len == 0 || len > REQ_LOCK_MAX_BYTES)
		return NULL;
	buckets_init();
	h = htab_hash(HTAB_HASH_INIT, name, len);
	e = find(name, len, h);
	if (e)
		return e;
	if (S.nused < LOCKSTAT_SLOTS) {
		for (k = 0; S.e[k].used; k++)
			;
	} else {
		/* The coldest of the next EVICT_LOOK slots past a moving hand:
		 * a grant that misses a full table costs EVICT_LOOK looks, not
		 * LOCKSTAT_SLOTS (a workload of many more names than slots
		 * misses on almost every grant). */
		int16_t cold = S.hand;
		for (int i = 1; i < EVICT_LOOK; i++) {
			k = (int16_t)((S.hand + i) % LOCKSTAT_SLOTS);
			if (colder(&S.e[k], &S.e[cold]))
				cold = k;
		}
		S.hand = (int16_t)((S.hand + EVICT_LOOK) % LOCKSTAT_SLOTS);
		k = cold;
		unlink_entry(k);
	}
	e = &S.e[k];
	memset(e, 0, offsetof(entry_t, name));
	e->used = true;
	e->hash = h;
	e->len = (uint16_t)len;
	memcpy(e->name, name, len);
	e->next = S.buckets[h & (NBUCKETS - 1)];
	S.buckets[h & (NBUCKETS - 1)] = k;
	S.nused++;
	return e;
}

/* ---- hooks -------------------------------------------------------------------- */

static void observe(histogram_t *h, double v)
{
	for (int k = 0; k < COUNTERS_NBOUNDS; k++) {
		if (v <= lockstat_handoff_bounds[k]) {
			h->buckets[k]++;
			break;
		}
	}
	h->count++;
	h->sum += v;
}

static void handoff(uint64_t ms)
{
	float v = (float)ms;

	S.handoffs++;
	S.lat_sum += v;
	if (v > S.lat_max)
		S.lat_max = v;
	if (S.lat_n < LOCKSTAT_LAT_KEPT) {
		S.lat[S.lat_n++] = v;
	} else {
		/* Reservoir: each of this second's handoffs is kept alike. */
		uint32_t r;
		if (S.rng == 0)
			S.rng = 0x9e3779b9u;
		S.rng ^= S.rng << 13;
		S.rng ^= S.rng >> 17;
		S.rng ^= S.rng << 5;
		r = S.rng % S.handoffs;
		if (r < LOCKSTAT_LAT_KEPT)
			S.lat[r] = v;
	}
	observe(&S.handoff, (double)ms / 1000.0);
}

void lockstat_grant(const char *lock, size_t len, uint64_t created_at, uint64_t sent_at, bool own)
{
	uint64_t now = timers_now(), from = sent_at;
	bool waited = !own; /* freed by the script that carried the grant */
	entry_t *e;

	if (!S.on)
		return;
	S.grants++;
	S.grants_total++;
	e = get(lock, len);
	/* A wake-up since the acquire came and before the granting script
	 * went out: the lock was free from then on, as this broker knows. */
	if (e && e->woken_at && e->woken_at >= created_at && e->woken_at <= sent_at) {
		from = e->woken_at;
		waited = true;
	}
	if (waited)
		handoff(now > from ? now - from : 0);
	if (e) {
		e->cur++;
		e->grants++;
		e->granted_at = now;
	}
}

void lockstat_wake(const char *lock, size_t len)
{
	entry_t *e;

	if (!S.on || len == 0 || len > REQ_LOCK_MAX_BYTES)
		return;
	/* Only a lock the table keeps (one granted lately): wake-ups alone
	 * would push out the entries whose grants are to come. */
	buckets_init();
	e = find(lock, len, htab_hash(HTAB_HASH_INIT, lock, len));
	if (e)
		e->woken_at = timers_now();
}

/* ---- the sampler -------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/* The q-quantile of the n sorted values (nearest rank). */
static float quantile(const float *v, uint32_t n, double q)
{
	uint32_t k = (uint32_t)(q * n + 0.999999);

	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static void push(const lockstat_sample_t *s)
{
	S.ring[S.rnext] = *s;
	S.rnext = (S.rnext + 1) % LOCKSTAT_SECONDS;
	if (S.rcount < LOCKSTAT_SECONDS)
		S.rcount++;
}

/* The window moves a second on: the current second's grants go into it,
 * or none (empty: a second a late sampler missed; its grants stay in cur
 * for the newest second). */
static void roll_window(bool empty)
{
	for (size_t k = 0; k < LOCKSTAT_SLOTS; k++) {
		entry_t *e = &S.e[k];
		uint32_t v = empty ? 0 : e->cur;
		if (!e->used)
			continue;
		e->wsum -= e->window[S.wpos];
		e->window[S.wpos] = v;
		e->wsum += v;
		if (!empty)
			e->cur = 0;
	}
	S.wpos = (S.wpos + 1) % LOCKSTAT_WINDOW_S;
}

void lockstat_tick(void)
{
	uint64_t now = timers_now();
	/* whole seconds since the newest sample, rounded: 1 on time */
	uint64_t elapsed = now > S.last_tick ? (now - S.last_tick + 500) / 1000 : 1;
	lockstat_sample_t s = {
		.grants = S.grants,
		.handoffs = S.handoffs,
		.leases = (uint32_t)server.nleases,
		.waiters = (uint32_t)waitq_count(),
	};

	if (S.handoffs > 0) {
		qsort(S.lat, S.lat_n, sizeof(S.lat[0]), cmp_float);
		s.mean_ms = (float)(S.lat_sum / S.handoffs);
		s.p50_ms = quantile(S.lat, S.lat_n, 0.5);
		s.p99_ms = quantile(S.lat, S.lat_n, 0.99);
		s.max_ms = (float)S.lat_max;
	}
	/* The seconds a late sampler missed, empty (their grants are in s). */
	if (elapsed > LOCKSTAT_SECONDS)
		elapsed = LOCKSTAT_SECONDS;
	for (uint64_t k = 1; k < elapsed; k++) {
		lockstat_sample_t gap = {.leases = s.leases, .waiters = s.waiters};
		push(&gap);
		roll_window(true);
	}
	push(&s);
	roll_window(false);
	S.grants = S.handoffs = 0;
	S.lat_sum = S.lat_max = 0;
	S.lat_n = 0;
	S.last_tick = now;
}

static void on_timer(uv_timer_t *t)
{
	(void)t;
	lockstat_tick();
}

static void on_timer_closed(uv_handle_t *h)
{
	(void)h;
	S.timer_closing = false;
}

void lockstat_start(uv_loop_t *loop)
{
	if (S.on)
		return;
	buckets_init();
	S.on = true;
	S.last_tick = timers_now();
	/* Started again before its stop's close completed: no samples (the
	 * handle cannot be reused until then). */
	if (FAILS_ASSERT(!S.timer_closing))
		return;
	if (!S.timer_open) {
		uv_timer_init(loop, &S.timer);
		S.timer_open = true;
	}
	uv_timer_start(&S.timer, on_timer, 1000, 1000);
	uv_unref((uv_handle_t *)&S.timer);
}

void lockstat_stop(void)
{
	S.on = false;
	if (!S.timer_open)
		return;
	S.timer_open = false;
	S.timer_closing = true;
	uv_close((uv_handle_t *)&S.timer, on_timer_closed); /* static: nothing to free */
}

/* ---- reading -------------------------------------------------------------------- */

double lockstat_rate(const char *lock, size_t len)
{
	const entry_t *e;

	if (len == 0 || len > REQ_LOCK_MAX_BYTES || S.nused == 0)
		return 0;
	e = find(lock, len, htab_hash(HTAB_HASH_INIT, lock, len));
	return e ? (double)e->wsum / LOCKSTAT_WINDOW_S : 0;
}

static int cmp_hot(const void *a, const void *b)
{
	const lockstat_lock_t *x = a, *y = b;

	if (x->rate != y->rate)
		return x->rate < y->rate ? 1 : -1;
	if (x->grants != y->grants)
		return x->grants < y->grants ? 1 : -1;
	return 0;
}

size_t lockstat_hot(lockstat_lock_t *out, size_t max)
{
	lockstat_lock_t all[LOCKSTAT_SLOTS];
	size_t n = 0;

	for (size_t k = 0; k < LOCKSTAT_SLOTS; k++) {
		const entry_t *e = &S.e[k];
		if (e->used && e->wsum > 0)
			all[n++] = (lockstat_lock_t){e->name, e->len, (double)e->wsum / LOCKSTAT_WINDOW_S,
			                             e->grants};
	}
	qsort(all, n, sizeof(all[0]), cmp_hot);
	if (n > max)
		n = max;
	memcpy(out, all, n * sizeof(all[0]));
	return n;
}

size_t lockstat_series(lockstat_sample_t *out, size_t n)
{
	size_t first;

	if (n > S.rcount)
		n = S.rcount;
	first = (S.rnext + LOCKSTAT_SECONDS - n) % LOCKSTAT_SECONDS;
	for (size_t k = 0; k < n; k++)
		out[k] = S.ring[(first + k) % LOCKSTAT_SECONDS];
	return n;
}

uint64_t lockstat_since_tick(void)
{
	uint64_t now = timers_now();

	return now > S.last_tick ? now - S.last_tick : 0;
}

uint64_t lockstat_grants_total(void)
{
	return S.grants_total;
}

const histogram_t *lockstat_handoffs(void)
{
	return &S.handoff;
}
