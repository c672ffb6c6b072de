/*
 * redlock.c - the store's backend (backend.h) over N independent Redis
 * masters (--redlock, issue 18): every call of a lock goes to all of them
 * at once (one pool per master, rpool.c; the calls of one lock keep their
 * connection, so their order, on each master) and the N replies are
 * merged into the one reply the locks layer knows from a single Redis.
 *
 * An acquire is a Redlock round (redlock_vote.h has the arithmetic):
 *   - the acquire script runs on every master with the same token;
 *   - a quorum (N/2 + 1) of grants within the validity (ttl - elapsed -
 *     drift, on the quorum-th longest grant) wins it; then the round's
 *     fence F (above every fence the granting masters issued) is written
 *     on those masters (lua/fence.lua), and only when a quorum confirmed
 *     it, still within the validity, is the grant answered: {1, F, the
 *     validity from the round's start, max-hold left};
 *   - a round that cannot win any more (too many refusals or failures, or
 *     its validity spent, or the fence not confirmed) is undone at once
 *     on every master (withdraw.lua gives a grant back), and a grant that
 *     arrives after that is undone again. It answers busy {0, retry_ms}
 *     with retry_ms when a quorum may be free, {-1, 0} when a quorum saw
 *     another kind of lock, or an error when a majority did not answer.
 * Waiters never queue in Redis: a waiting acquire goes out with wait 'r'
 * (a try that marks the lock, see lua/acquire.lua), and the release that
 * frees a marked lock publishes its name on P "redlock:wake", which this
 * backend subscribes to on every master (the locks layer then runs a new
 * round; see waitq_wake.c). Fairness across brokers is best effort.
 *
 * Every other call is merged by what its reply means:
 *   extend, verify, reenter, proclaim: held when a quorum says so, for the
 *     quorum-th longest life left less the drift (so a lease ends here
 *     before a majority could free it); not held when more than N - quorum
 *     say not; unknown (NULL) when a quorum cannot answer (proclaim,
 *     held on a quorum: {1, the highest fence they show});
 *   release, withdraw: the count left where it is held (a release is
 *     safe on any master), answered when a quorum said so, when all
 *     answered, or RL_STRAGGLER_MS after a quorum did;
 *   inspect: the holder a quorum shows, with the highest fence any shows
 *     and the value a quorum of those showing it agree on;
 *   lease_index: a pointer found on any master; written on a quorum;
 *   heartbeat, orphans: the first answer (the locks layer sends none).
 * A call is freed once every master answered (or failed): a master that
 * is down fails a call at once unless it may be resent (retry_until:
 * then it waits for the master, RL_LEG_RETRY_MS at most; its effect ends
 * by the lease's TTL there anyway). A lease op that a quorum does not
 * answer fails (an error reply: unavailable), never "no reply", which
 * would say the lease ended.
 *
 * store_up: a quorum of masters is up. A master that may have lost data
 * (a new run_id, its canary) makes every lease be checked again
 * (on_data_loss): a lease held on fewer than a quorum is lost. Nothing
 * here changes lock state but through the scripts of lua/.
 */
#include "broker/store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/canary.h"
#include "broker/store/lockscript.h"
#include "broker/store/redis_uv.h"
#include "broker/store/redlock_vote.h"
#include "broker/store/rpool.h"

#define RL_STRAGGLER_MS 200  /* after a quorum answered: how long the rest may take */
#define RL_LEG_RETRY_MS 30000 /* a master's copy of a call is resent at most this long */
#define RL_ARGS_MAX 32
/* A lease op that a quorum did not answer: the op failed (unavailable),
 * the lease is as it was. (No reply at all would say the lease ended,
 * as it does after LB_RESOLVE_MS with one Redis.) */
#define RL_NO_QUORUM "a quorum of the Redlock masters did not answer"

typedef enum leg_state { LEG_PENDING, LEG_OK, LEG_FAILED } leg_state_t;

typedef enum phase {
	PH_VOTE,  /* acquire: the votes come in */
	PH_FENCE, /* acquire: won, the fence is being written */
	PH_WON,
	PH_LOST,
	PH_DONE,  /* any other call: answered */
} phase_t;

typedef struct rl_call rl_call_t;

typedef struct rl_leg {
	rl_call_t *c;
	int i;      /* the master */
	bool fence; /* a fence write (acquire, phase two) */
} rl_leg_t;

struct rl_call {
	script_id_t script;
	store_fn fn; /* NULL: nobody waits for the answer (an undo) */
	void *priv;
	int n, quorum;
	int legs;      /* callbacks still to come, fence writes included */
	bool answered; /* fn ran (or will not) */
	bool replayed; /* some master's copy went out more than once */
	phase_t phase;
	uint64_t t0;
	timer_ent_t timer;
	bool timer_on;
	rl_leg_t leg[REDLOCK_MASTERS_MAX], fleg[REDLOCK_MASTERS_MAX];
	leg_state_t st[REDLOCK_MASTERS_MAX];
	int64_t v[REDLOCK_MASTERS_MAX][4]; /* the reply's first integers */
	int nv[REDLOCK_MASTERS_MAX];       /* how many of them are integers */
	redisReply *copy[REDLOCK_MASTERS_MAX]; /* inspect: the replies */
	bool unknown[REDLOCK_MASTERS_MAX];     /* no reply: it may have run */
	bool index_get;                        /* lease_index 'get' */
	bool released, cleaned; /* release: answered 0; its leftovers given back */
	/* acquire */
	redlock_vote_t vote;
	int64_t hold[REDLOCK_MASTERS_MAX];
	int64_t proposal;    /* the fence every master is asked to issue */
	int64_t fence;       /* F, once won */
	uint64_t ends_at;    /* the validity's end, once won */
	int fence_ok, fence_pending;
	uint64_t seq;        /* R.seq when it went out */
	uint64_t tag;        /* the lock's wake entry (wake_of) */
	int argc, nkeys;     /* the acquire's own arguments, for the undo */
	char **argv;
	size_t *argvlen;
	char *route;
	size_t route_len;
};

/* Wake-ups per lock, in a table by the name's hash: when each master last
 * published one (wake_seq, in R.seq), and the last lost round's masters
 * that did not grant (mask; lost_seq its R.seq, 0 after a win). A wake
 * from a master that granted that round tells nothing new (its own
 * undo, or a release that master alone saw) and is dropped; one from a
 * master that refused, received after a round went out, makes that
 * round's loss "fresh": try again at once. An entry shared by two locks
 * (tag) is taken over: that costs a round, never a wake. */
#define RL_WAKE_SLOTS 4096

typedef struct rl_wake {
	uint64_t tag; /* the name's hash, never 0; 0: unused */
	uint64_t wake_seq[REDLOCK_MASTERS_MAX];
	uint64_t lost_seq;
	unsigned mask;
} rl_wake_t;

static struct {
	store_events_t E;
	uint64_t seq;  /* counts acquires sent and wakes received, in order */
	rl_wake_t *wakes;
	int n, quorum;
	rpool_t *pool[REDLOCK_MASTERS_MAX];
	canary_t *canary[REDLOCK_MASTERS_MAX];
	const redis_addr_t *addr[REDLOCK_MASTERS_MAX];
	bool delivering;     /* a merged reply is being delivered */
	bool inspecting;     /* an inspect's, with inspected[] */
	int inspected[REDLOCK_MASTERS_MAX]; /* 1 holder, 0 none, -1 no answer */
	bool delivering_replayed;
} R;

static int rl_send(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until, int floor_arg);
static void undo(rl_call_t *c);

/* ---- wake-ups per lock ------------------------------------------------------ */

static uint64_t name_tag(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char)s[k]) * 1099511628211ULL;
	return h | 1;
}

/* The lock's entry, taken over when another lock had it. */
static rl_wake_t *wake_of(uint64_t tag)
{
	rl_wake_t *w = &R.wakes[tag % RL_WAKE_SLOTS];

	if (w->tag != tag) {
		memset(w, 0, sizeof(*w));
		w->tag = tag;
	}
	return w;
}

/* ---- replies ------------------------------------------------------------ */

static char *dup_bytes(const char *s, size_t n)
{
	char *d = xmalloc(n + 1);

	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}


static void deliver(rl_call_t *c, const redisReply *r)
{
	if (c->answered)
		return;
	c->answered = true;
	if (!c->fn)
		return;
	R.delivering = true;
	R.delivering_replayed = c->replayed;
	c->fn(r, c->priv);
	R.delivering = false;
}

/* An array reply of n integers, built on the stack of the caller. */
typedef struct int_reply {
	redisReply top;
	redisReply el[4];
	redisReply *ptr[4];
} int_reply_t;

static const redisReply *ints(int_reply_t *b, int n, int64_t a0, int64_t a1, int64_t a2, int64_t a3)
{
	int64_t v[4] = {a0, a1, a2, a3};

	memset(b, 0, sizeof(*b));
	b->top.type = REDIS_REPLY_ARRAY;
	b->top.elements = (size_t)n;
	b->top.element = b->ptr;
	for (int k = 0; k < n; k++) {
		b->el[k].type = REDIS_REPLY_INTEGER;
		b->el[k].integer = v[k];
		b->ptr[k] = &b->el[k];
	}
	return &b->top;
}

static void deliver_error(rl_call_t *c, const char *msg)
{
	redisReply e = {.type = REDIS_REPLY_ERROR, .str = (char *)msg, .len = strlen(msg)};

	deliver(c, &e);
}

/* What master i answered, as far as the merges need it. */
static void record(rl_call_t *c, int i, const redisReply *r)
{
	c->nv[i] = 0;
	if (store_reply_failed(r)) {
		c->st[i] = LEG_FAILED;
		c->unknown[i] = r == NULL; /* an error reply: the script did not run */
		return;
	}
	c->st[i] = LEG_OK;
	if (r->type == REDIS_REPLY_INTEGER) {
		c->v[i][0] = r->integer;
		c->nv[i] = 1;
	} else if (r->type == REDIS_REPLY_ARRAY) {
		for (size_t k = 0; k < r->elements && k < 4; k++) {
			if (r->element[k]->type != REDIS_REPLY_INTEGER)
				break;
			c->v[i][k] = r->element[k]->integer;
			c->nv[i] = (int)k + 1;
		}
	}
}

static int count_state(const rl_call_t *c, leg_state_t s)
{
	int n = 0;

	for (int i = 0; i < c->n; i++)
		n += c->st[i] == s;
	return n;
}

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* The k-th largest (1-based) of v[0..n-1]; 0 when n < k. */
static int64_t kth_largest(int64_t *v, int n, int k)
{
	if (n < k || k < 1)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_desc);
	return v[k - 1];
}

/* A max-hold left where 0 means none: the quorum-th largest, with none
 * the largest of all. */
static int64_t quorum_hold(int64_t *h, int n, int q)
{
	for (int k = 0; k < n; k++)
		if (h[k] <= 0)
			h[k] = INT64_MAX;
	int64_t v = kth_largest(h, n, q);
	return v == INT64_MAX ? 0 : v;
}

/* A max-hold left (0: none) as a quorum's clocks may have it: less the
 * drift, as every life left here is, so the holder is told max_hold
 * before a master whose clock runs fast frees the lock; at least 1. */
static int64_t drifted(int64_t hold)
{
	if (hold <= 0)
		return 0;
	return hold - redlock_drift_ms(hold) > 0 ? hold - redlock_drift_ms(hold) : 1;
}

static void arm(rl_call_t *c, uint64_t at)
{
	c->timer_on = true;
	timer_at(&c->timer, at);
}

/* ---- extend, verify, reenter, proclaim: held on a quorum ----------------- */

/* Proclaim answers {1, fence} where a quorum holds the lease (the highest
 * fence they show), the others a life left. */
static void merge_life(rl_call_t *c)
{
	int64_t life[REDLOCK_MASTERS_MAX], hold[REDLOCK_MASTERS_MAX], count[REDLOCK_MASTERS_MAX];
	int ok = 0, gone = 0, pending = count_state(c, LEG_PENDING);
	bool reenter = c->script == SCRIPT_REENTER, proclaim = c->script == SCRIPT_PROCLAIM;

	for (int i = 0; i < c->n; i++) {
		if (c->st[i] != LEG_OK)
			continue;
		if (c->nv[i] < 2 || c->v[i][0] < 0) {
			gone++;
			continue;
		}
		life[ok] = reenter || proclaim ? c->v[i][1] : c->v[i][0];
		hold[ok] = reenter ? 0 : c->v[i][1];
		count[ok] = c->v[i][0];
		ok++;
	}
	if (ok >= c->quorum && proclaim) {
		int_reply_t b;
		deliver(c, ints(&b, 2, 1, kth_largest(life, ok, 1), 0, 0));
	} else if (ok >= c->quorum) {
		int_reply_t b;
		int64_t l = kth_largest(life, ok, c->quorum);
		int64_t h = quorum_hold(hold, ok, c->quorum);
		/* The levels a quorum holds: one a minority has on top (a
		 * re-entry that reached it alone) is not the lease's. */
		int64_t n = kth_largest(count, ok, c->quorum);

		l -= redlock_drift_ms(l);
		h = drifted(h);
		if (l <= 0)
			deliver(c, ints(&b, 2, -1, 0, 0, 0));
		else if (reenter)
			deliver(c, ints(&b, 2, n, l, 0, 0));
		else
			deliver(c, ints(&b, 2, l, h, 0, 0));
	} else if (gone > c->n - c->quorum) {
		int_reply_t b;
		deliver(c, ints(&b, 2, -1, 0, 0, 0));
	} else if (ok + pending < c->quorum) {
		deliver_error(c, RL_NO_QUORUM);
	}
}

/* ---- release, withdraw: the count left where it was held ----------------- */

/* Release: the count left is the one a quorum still holds (the
 * quorum-th largest, a master that holds nothing or did not answer
 * counting 0). At 0 the lease is released, and a master that still has
 * levels of it (it missed a release, or took a re-entry the others did
 * not) gives them all back: a lock is never held on a minority for
 * nobody. Withdraw: whether any master held it. */
static void merge_count(rl_call_t *c, bool timed_out)
{
	int ok = 0, gone = 0, answered, pending = count_state(c, LEG_PENDING);
	int64_t count[REDLOCK_MASTERS_MAX] = {0}, best = -1;
	int_reply_t b;

	for (int i = 0; i < c->n; i++) {
		if (c->st[i] != LEG_OK || c->nv[i] < 1)
			continue;
		if (c->v[i][0] >= 0) {
			ok++;
			count[i] = c->v[i][0];
			if (c->v[i][0] > best)
				best = c->v[i][0];
		} else {
			gone++;
		}
	}
	answered = ok + gone;
	if (ok >= c->quorum || (c->script == SCRIPT_RELEASE && gone >= c->quorum) || pending == 0 ||
	    timed_out) {
		int64_t left = kth_largest(count, c->n, c->quorum);

		if (answered == 0) {
			deliver_error(c, RL_NO_QUORUM);
		} else if (ok == 0) {
			deliver(c, ints(&b, 1, -1, 0, 0, 0));
		} else if (c->script != SCRIPT_RELEASE) {
			deliver(c, ints(&b, 1, best, 0, 0, 0));
		} else {
			c->released = left == 0;
			if (c->released && best > 0) {
				c->cleaned = true;
				undo(c);
			}
			deliver(c, ints(&b, 1, left, 0, 0, 0));
		}
	} else if (answered >= c->quorum && !c->timer_on) {
		arm(c, timers_now() + RL_STRAGGLER_MS);
	}
}

/* ---- inspect: the holder a quorum shows ---------------------------------- */

/* inspect.lua: {limit, fence (a string) or false, waiters, delay_ms, then
 * INSPECT_HOLDER_WIDTH per holder: H is where the first begins}. What each master showed is kept for store_inspect_masters. */
static int64_t inspect_fence(const redisReply *r)
{
	const redisReply *f = r->element[1];

	return f->type == REDIS_REPLY_STRING ? strtoll(f->str, NULL, 10) : -1;
}

#define H INSPECT_HEAD

static bool holder_shown(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ARRAY && r->elements >= H + INSPECT_HOLDER_WIDTH &&
	       (r->elements - H) % INSPECT_HOLDER_WIDTH == 0 &&
	       r->element[H + 1]->type == REDIS_REPLY_INTEGER &&
	       r->element[H + 3]->type == REDIS_REPLY_STRING && r->element[H + 4]->type == REDIS_REPLY_STRING;
}

static bool same_str(const redisReply *a, const redisReply *b)
{
	return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* The first holder of two inspect replies: the same owner and client. */
static bool same_holder(const redisReply *a, const redisReply *b)
{
	return same_str(a->element[H + 3], b->element[H + 3]) && same_str(a->element[H + 4], b->element[H + 4]);
}

/* The holder's value (its first holder's, element 8) that a quorum of
 * the masters showing the holder agree on, into pick's reply: a proclaim
 * that reached a minority only (answered unavailable) shows nowhere. */
static void agreed_value(rl_call_t *c, int pick)
{
	const int v = H + INSPECT_HOLDER_WIDTH - 1;

	for (int i = 0; i < c->n; i++) {
		int same = 0;
		redisReply *mine;
		if (!holder_shown(c->copy[i]) || !same_holder(c->copy[i], c->copy[pick]) ||
		    c->copy[i]->element[v]->type != REDIS_REPLY_STRING)
			continue;
		for (int j = 0; j < c->n; j++)
			same += holder_shown(c->copy[j]) && same_holder(c->copy[j], c->copy[pick]) &&
			        c->copy[j]->element[v]->type == REDIS_REPLY_STRING &&
			        same_str(c->copy[j]->element[v], c->copy[i]->element[v]);
		if (same < c->quorum)
			continue;
		if (i == pick)
			return;
		mine = c->copy[pick]->element[v];
		free(mine->str);
		mine->str = dup_bytes(c->copy[i]->element[v]->str, c->copy[i]->element[v]->len);
		mine->len = c->copy[i]->element[v]->len;
		mine->type = REDIS_REPLY_STRING;
		return;
	}
}

static void merge_inspect(rl_call_t *c, bool timed_out)
{
	int answered = count_state(c, LEG_OK), pending = count_state(c, LEG_PENDING);
	int holding = 0, pick = -1, any = -1;
	int64_t fence = -1, held_fence[REDLOCK_MASTERS_MAX], waiters = 0;
	int64_t delay[REDLOCK_MASTERS_MAX] = {0};
	char fs[24];

	if (pending > 0 && !timed_out) {
		if (answered >= c->quorum && !c->timer_on)
			arm(c, timers_now() + RL_STRAGGLER_MS);
		return;
	}
	for (int i = 0; i < c->n; i++) {
		const redisReply *r = c->copy[i];
		R.inspected[i] = -1;
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < H ||
		    (r->elements - H) % INSPECT_HOLDER_WIDTH != 0)
			continue;
		if (r->element[3]->type == REDIS_REPLY_INTEGER)
			delay[i] = r->element[3]->integer;
		if (inspect_fence(r) > fence)
			fence = inspect_fence(r);
		/* Each broker counts its waiters on every master its rounds
		 * reach: the most any master counts (lua/inspect.lua). */
		if (r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer > waiters)
			waiters = r->element[2]->integer;
		any = any < 0 ? i : any;
		R.inspected[i] = r->elements >= H + INSPECT_HOLDER_WIDTH;
	}
	/* The holder (owner, client) the most masters show; the shortest
	 * life among them. Masters that show another (a lost round's grant
	 * not yet given back) do not count for it. */
	for (int i = 0; i < c->n; i++) {
		int same = 0;
		if (!holder_shown(c->copy[i]))
			continue;
		for (int j = 0; j < c->n; j++)
			same += holder_shown(c->copy[j]) && same_holder(c->copy[i], c->copy[j]);
		if (same > holding || (same == holding && pick >= 0 && same_holder(c->copy[i], c->copy[pick]) &&
		                       c->copy[i]->element[H + 1]->integer < c->copy[pick]->element[H + 1]->integer)) {
			holding = same;
			pick = i;
		}
	}
	for (int i = 0, k = 0; pick >= 0 && i < c->n; i++)
		if (holder_shown(c->copy[i]) && same_holder(c->copy[i], c->copy[pick]))
			held_fence[k++] = inspect_fence(c->copy[i]);
	if (any < 0) {
		deliver(c, NULL);
		return;
	}
	snprintf(fs, sizeof(fs), "%lld", (long long)fence);
	R.inspecting = true;
	if (holding < c->quorum) {
		/* Held nowhere, or on too few masters to count; held back by a
		 * lock delay as long as a quorum of masters holds it back. */
		int_reply_t b;
		redisReply f = {.type = REDIS_REPLY_NIL};
		const redisReply *out = ints(&b, H, 0, 0, waiters, kth_largest(delay, c->n, c->quorum));

		if (fence >= 0)
			f = (redisReply){.type = REDIS_REPLY_STRING, .str = fs, .len = strlen(fs)};
		b.ptr[1] = &f;
		deliver(c, out);
	} else {
		/* The shortest life a quorum's member shows, and the fence a
		 * quorum of them has: the holder's (lua/fence.lua wrote it
		 * before the grant was answered), else the highest. */
		redisReply *f = c->copy[pick]->element[1];

		for (int k = 0; k < holding; k++) {
			int same = 0;
			for (int j = 0; j < holding; j++)
				same += held_fence[j] == held_fence[k];
			if (same >= c->quorum) {
				snprintf(fs, sizeof(fs), "%lld", (long long)held_fence[k]);
				break;
			}
		}
		free(f->str);
		f->type = REDIS_REPLY_STRING;
		f->len = strlen(fs);
		f->str = dup_bytes(fs, f->len);
		if (c->copy[pick]->element[2]->type == REDIS_REPLY_INTEGER)
			c->copy[pick]->element[2]->integer = waiters;
		agreed_value(c, pick);
		deliver(c, c->copy[pick]);
	}
	R.inspecting = false;
}

#undef H

/* ---- lease_index and the rest -------------------------------------------- */

static void merge_index(rl_call_t *c, const redisReply *r, bool timed_out)
{
	int ok = count_state(c, LEG_OK), pending = count_state(c, LEG_PENDING);

	if (c->index_get) {
		if (r && r->type == REDIS_REPLY_STRING) {
			deliver(c, r);
		} else if (pending == 0 || timed_out) {
			redisReply nil = {.type = REDIS_REPLY_NIL};
			deliver(c, ok > 0 ? &nil : NULL);
		} else if (ok >= c->quorum && !c->timer_on) {
			arm(c, timers_now() + RL_STRAGGLER_MS);
		}
		return;
	}
	if (ok >= c->quorum && !store_reply_failed(r))
		deliver(c, r);
	else if (ok + pending < c->quorum)
		deliver_error(c, RL_NO_QUORUM);
}

/* ---- acquire: a round ----------------------------------------------------- */

/* Gives back whatever the round got: withdraw.lua on every master, behind
 * the acquire on the lock's connection there. */
static void undo(rl_call_t *c)
{
	int argc = c->nkeys + 7; /* the keys, the context, the token */

	if (c->argc < argc)
		return;
	rl_send(c->route, c->route_len, SCRIPT_WITHDRAW, c->nkeys, argc,
	        (const char *const *)c->argv, c->argvlen, NULL, NULL,
	        timers_now() + (uint64_t)c->vote.want_ttl_ms + 1000, -1);
}

/* The round is lost: undone, and answered busy (or why not). */
static void lose(rl_call_t *c)
{
	int failed = 0, conflict = 0, full = 0, nretry = 0;
	int64_t retry[REDLOCK_MASTERS_MAX];
	int_reply_t b;
	rl_wake_t *w = wake_of(c->tag);
	bool fresh = false, taken = false;

	c->phase = PH_LOST;
	w->lost_seq = c->seq;
	w->mask = 0;
	for (int i = 0; i < c->n; i++) {
		if (c->vote.answer[i] == RL_GRANTED || c->unknown[i])
			taken = true; /* it may hold a grant there */
		if (c->vote.answer[i] != RL_GRANTED) {
			w->mask |= 1u << i;
			fresh = fresh || w->wake_seq[i] > c->seq;
		}
	}
	/* A round that every master refused left nothing: no undo. One
	 * still on its way is undone if it grants (on_leg). */
	if (taken)
		undo(c);
	for (int i = 0; i < c->n; i++) {
		if (c->vote.answer[i] == RL_FAILED || c->vote.answer[i] == RL_PENDING) {
			failed += c->vote.answer[i] == RL_FAILED;
			retry[nretry++] = 0;
		} else if (c->vote.answer[i] == RL_GRANTED) {
			retry[nretry++] = 0;
		} else {
			conflict += c->v[i][0] == -1;
			full += c->v[i][0] == -2;
			retry[nretry++] = c->v[i][0] == 0 && c->nv[i] >= 2 ? c->v[i][1] : 0;
		}
	}
	if (failed > c->n - c->quorum) {
		/* No reply from a majority: an error when one of them said the
		 * script did not run; no reply at all when every one of them
		 * may have run it (a try then answers timeout, and what it may
		 * have taken is given back: waitq_send.c). */
		bool unknown = true;
		for (int i = 0; i < c->n; i++)
			if (c->vote.answer[i] == RL_FAILED && !c->unknown[i])
				unknown = false;
		if (unknown)
			deliver(c, NULL);
		else
			deliver_error(c, "a majority of the Redlock masters did not answer");
	} else if (conflict >= c->quorum) {
		deliver(c, ints(&b, 2, -1, 0, 0, 0));
	} else if (full >= c->quorum) {
		deliver(c, ints(&b, 2, -2, 0, 0, 0));
	} else {
		/* When a quorum may be free: the quorum-th smallest wait;
		 * fresh (above); and whether it got a grant and still lost: the
		 * vote may have split with others, whose fresh grants look held
		 * for a whole TTL (waitq_wake.c backs off when that repeats). */
		int64_t hint = kth_largest(retry, nretry, c->n - c->quorum + 1);
		deliver(c, ints(&b, 4, 0, hint, fresh, taken));
	}
}

static void win(rl_call_t *c)
{
	int64_t hold[REDLOCK_MASTERS_MAX];
	int nh = 0;
	int_reply_t b;

	c->phase = PH_WON;
	wake_of(c->tag)->lost_seq = 0;
	for (int i = 0; i < c->n; i++)
		if (c->vote.answer[i] == RL_GRANTED)
			hold[nh++] = c->hold[i];
	if (c->fence > server.fence_high)
		server.fence_high = c->fence;
	deliver(c, ints(&b, 4, 1, c->fence, (int64_t)(c->ends_at - c->t0),
	                drifted(quorum_hold(hold, nh, c->quorum))));
}

static void on_leg(const redisReply *r, void *priv);

/* The round's fence F to master i, which granted it. */
static void send_fence(rl_call_t *c, int i)
{
	char fence[24];
	const char *argv[5];
	size_t len[5];

	snprintf(fence, sizeof(fence), "%lld", (long long)c->fence);
	for (int k = 0; k < 3; k++) {
		argv[k] = c->argv[k];
		len[k] = c->argvlen[k];
	}
	argv[3] = c->argv[c->nkeys + 6]; /* the token */
	len[3] = c->argvlen[c->nkeys + 6];
	argv[4] = fence;
	len[4] = strlen(fence);
	c->fleg[i] = (rl_leg_t){c, i, true};
	if (rpool_eval(R.pool[i], rpool_route(c->route, c->route_len), SCRIPT_FENCE, 3, 5, argv, len,
	               on_leg, &c->fleg[i], c->ends_at, RP_NO_WAIT, -1) == 0) {
		c->legs++;
		c->fence_pending++;
	}
}

/* Won: F goes to every master that granted, before anyone hears of it
 * (and to one that grants later: on_leg). */
static void write_fence(rl_call_t *c, int64_t validity)
{
	c->phase = PH_FENCE;
	/* Above every fence the granting masters issued (each at least the
	 * proposal, from the broker's clock) and every one this broker saw. */
	c->fence = redlock_vote_fence(&c->vote, 0, server.fence_high);
	c->ends_at = timers_now() + (uint64_t)validity;
	for (int i = 0; i < c->n; i++)
		if (c->vote.answer[i] == RL_GRANTED)
			send_fence(c, i);
	arm(c, c->ends_at);
}

/* Every master that granted issued the proposal: it is stored there, on
 * a quorum, already. */
static bool proposal_taken(const rl_call_t *c)
{
	for (int i = 0; i < c->n; i++)
		if (c->vote.answer[i] == RL_GRANTED && c->vote.fence[i] != c->proposal)
			return false;
	return true;
}

static void acquire_step(rl_call_t *c, bool timed_out)
{
	uint64_t now = timers_now();
	int64_t validity = 0;

	if (c->phase == PH_VOTE) {
		redlock_outcome_t o = redlock_vote_outcome(&c->vote, now, &validity);
		if (o == RL_WON && proposal_taken(c)) {
			c->fence = c->proposal;
			c->ends_at = now + (uint64_t)validity;
			win(c);
			return;
		}
		if (o == RL_WON)
			write_fence(c, validity);
		else if (o == RL_LOST || timed_out)
			lose(c);
		if (c->phase != PH_FENCE)
			return;
	}
	if (c->phase == PH_FENCE) {
		if (now >= c->ends_at || timed_out || c->fence_ok + c->fence_pending < c->quorum)
			lose(c);
		else if (c->fence_ok >= c->quorum)
			win(c);
	}
}

/* Master i answered the round's acquire. */
static void vote(rl_call_t *c, int i)
{
	if (c->st[i] != LEG_OK || c->nv[i] < 2) {
		redlock_vote_set(&c->vote, i, RL_FAILED, 0, -1);
	} else if (c->v[i][0] == 1 && c->nv[i] >= 4) {
		c->hold[i] = c->v[i][3];
		redlock_vote_set(&c->vote, i, RL_GRANTED, c->v[i][2], c->v[i][1]);
	} else if (c->v[i][0] <= 0) {
		redlock_vote_set(&c->vote, i, RL_REFUSED, 0, -1);
	} else {
		redlock_vote_set(&c->vote, i, RL_FAILED, 0, -1);
	}
}

/* ---- the life of a call --------------------------------------------------- */

static void call_free(rl_call_t *c)
{
	if (c->timer_on)
		timer_cancel(&c->timer);
	for (int i = 0; i < c->n; i++)
		redis_reply_free(c->copy[i]);
	for (int k = 0; k < c->argc; k++)
		free(c->argv[k]);
	free(c->argv);
	free(c->argvlen);
	free(c->route);
	free(c);
}

static void step(rl_call_t *c, const redisReply *r, bool timed_out)
{
	if (c->answered && c->phase != PH_FENCE)
		return;
	switch (c->script) {
	case SCRIPT_ACQUIRE:
		acquire_step(c, timed_out);
		break;
	case SCRIPT_EXTEND:
	case SCRIPT_VERIFY:
	case SCRIPT_REENTER:
	case SCRIPT_PROCLAIM:
		merge_life(c);
		if (timed_out)
			deliver_error(c, RL_NO_QUORUM);
		break;
	case SCRIPT_RELEASE:
	case SCRIPT_WITHDRAW:
		merge_count(c, timed_out);
		break;

	case SCRIPT_INSPECT:
		merge_inspect(c, timed_out);
		break;
	case SCRIPT_LEASE_INDEX:
		merge_index(c, r, timed_out);
		break;
	default:
		if (!store_reply_failed(r))
			deliver(c, r);
		else if (count_state(c, LEG_PENDING) == 0 || timed_out)
			deliver(c, NULL);
		break;
	}
}

static void on_timer(timer_ent_t *t)
{
	rl_call_t *c = (rl_call_t *)((char *)t - offsetof(rl_call_t, timer));

	c->timer_on = false;
	step(c, NULL, true);
	if (c->legs == 0)
		call_free(c);
}

static void on_leg(const redisReply *r, void *priv)
{
	rl_leg_t *leg = priv;
	rl_call_t *c = leg->c;
	int i = leg->i;

	c->legs--;
	if (rpool_replayed())
		c->replayed = true;
	if (leg->fence) {
		c->fence_pending--;
		if (!store_reply_failed(r) && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
			c->fence_ok++;
	} else {
		record(c, i, r);
		if (c->script == SCRIPT_INSPECT && c->st[i] == LEG_OK)
			c->copy[i] = redis_reply_copy(r);
		/* A master that answers after the release was answered 0 and
		 * still has levels gives them back (see merge_count). */
		if (c->script == SCRIPT_RELEASE && c->released && !c->cleaned && c->st[i] == LEG_OK &&
		    c->nv[i] >= 1 && c->v[i][0] > 0) {
			c->cleaned = true;
			undo(c);
		}
		if (c->script == SCRIPT_ACQUIRE) {
			vote(c, i);
			/* A grant after the round was given up: given back again
			 * (this master may have run the acquire after the undo). */
			if (c->phase == PH_LOST &&
			    (c->vote.answer[i] == RL_GRANTED || c->unknown[i]))
				undo(c);
			/* One after the round was won holds the holder's F too. */
			else if ((c->phase == PH_FENCE || c->phase == PH_WON) &&
			         c->vote.answer[i] == RL_GRANTED && c->vote.fence[i] != c->fence)
				send_fence(c, i);
		}
	}
	step(c, r, false);
	if (c->legs == 0) {
		if (!c->answered)
			step(c, NULL, true);
		call_free(c);
	}
}

/* An acquire's fence floor (the argument at floor_arg of its copied argv)
 * is set to P - 1, P above this broker's clock in microseconds and every
 * fence it has seen: each master then issues max(its stored fence + 1,
 * P) (lua/acquire.lua, Redlock). When every granting master issued P, P
 * is on a quorum: any earlier grant's fence is stored on a quorum, which
 * shares a master with this one, whose stored fence P exceeds; so P is
 * above every fence given before, and the fence write is not needed. */
static int64_t propose(rl_call_t *c, int floor_arg)
{
	struct timespec ts;
	int64_t p;
	char digits[STORE_FLOOR_DIGITS + 1];

	clock_gettime(CLOCK_REALTIME, &ts);
	p = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	if (p <= server.fence_high)
		p = server.fence_high + 1;
	if (floor_arg < 0 || floor_arg >= c->argc || c->argvlen[floor_arg] != STORE_FLOOR_DIGITS)
		return -1; /* no floor to write: the fence write always runs */
	snprintf(digits, sizeof(digits), "%0*lld", STORE_FLOOR_DIGITS, (long long)(p - 1));
	memcpy(c->argv[floor_arg], digits, STORE_FLOOR_DIGITS);
	return p;
}

/* The call on every master; fn (may be NULL) gets the merged reply. */
static int rl_send(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until, int floor_arg)
{
	rl_call_t *c = xcalloc(1, sizeof(*c));
	uint64_t now = timers_now();
	uint32_t rt = rpool_route(route, route_len);
	int accepted = 0;

	c->script = script;
	c->fn = fn;
	c->priv = priv;
	c->n = R.n;
	c->quorum = R.quorum;
	c->t0 = now;
	c->phase = script == SCRIPT_ACQUIRE ? PH_VOTE : PH_DONE;
	timer_init(&c->timer, on_timer);
	if (retry_until > now + RL_LEG_RETRY_MS)
		retry_until = now + RL_LEG_RETRY_MS;
	/* lease_index.lua's reads (its op follows its keys): the first answer
	 * found on any master. */
	if (script == SCRIPT_LEASE_INDEX && argc > nkeys)
		c->index_get = (argvlen[nkeys] == 3 && memcmp(argv[nkeys], "get", 3) == 0) ||
		               (argvlen[nkeys] == 3 && memcmp(argv[nkeys], "why", 3) == 0);
	if ((script == SCRIPT_ACQUIRE && argc < nkeys + 10) || argc > RL_ARGS_MAX) {
		free(c);
		return -1;
	}
	if (script == SCRIPT_ACQUIRE || script == SCRIPT_RELEASE) {
		/* Kept for the undo (withdraw.lua: the keys, the context, the
		 * token, as both have them first) and the fence write. */
		c->argc = argc;
		c->nkeys = nkeys;
		c->argv = xcalloc((size_t)argc, sizeof(*c->argv));
		c->argvlen = xcalloc((size_t)argc, sizeof(*c->argvlen));
		for (int k = 0; k < argc; k++) {
			c->argv[k] = dup_bytes(argv[k], argvlen[k]);
			c->argvlen[k] = argvlen[k];
		}
		c->route = dup_bytes(route, route_len);
		c->route_len = route_len;
	}
	if (script == SCRIPT_ACQUIRE) {
		int64_t ttl = strtoll(argv[nkeys + 9], NULL, 10);

		c->proposal = propose(c, floor_arg);
		argv = (const char *const *)c->argv;
		floor_arg = -1; /* written here, the same for every master */
		c->seq = ++R.seq;
		c->tag = name_tag(route, route_len);
		redlock_vote_begin(&c->vote, c->n, ttl > 0 ? ttl : 1, now);
	}
	for (int i = 0; i < c->n; i++) {
		c->leg[i] = (rl_leg_t){c, i, false};
		c->st[i] = LEG_PENDING;
		/* A master whose canary is not primed serves nothing yet. */
		if (canary_primed(R.canary[i]) && rpool_eval(R.pool[i], rt, script, nkeys, argc, argv, argvlen, on_leg, &c->leg[i],
		               retry_until, RP_NO_WAIT, floor_arg) == 0) {
			accepted++;
			c->legs++;
		} else {
			c->st[i] = LEG_FAILED;
			if (script == SCRIPT_ACQUIRE)
				redlock_vote_set(&c->vote, i, RL_FAILED, 0, -1);
		}
	}
	if (accepted < c->quorum && script != SCRIPT_RELEASE && script != SCRIPT_WITHDRAW &&
	    !(script == SCRIPT_LEASE_INDEX && c->index_get)) {
		/* Cannot be had: refused now, fn will not run. What went out
		 * still runs; an acquire's grants are given back. */
		c->answered = true;
		if (script == SCRIPT_ACQUIRE && accepted > 0) {
			c->phase = PH_LOST;
			undo(c);
		}
		if (c->legs == 0) {
			call_free(c);
		}
		return -1;
	}
	if (accepted == 0) {
		call_free(c);
		return -1;
	}
	if (script == SCRIPT_ACQUIRE)
		arm(c, now + (uint64_t)(c->vote.want_ttl_ms - redlock_drift_ms(c->vote.want_ttl_ms)));
	return 0;
}

/* ---- the backend ------------------------------------------------------------ */

/* A release freed lock msg on master (int)priv (lua/release.lua), or a
 * watched lock changed ("\1" NAME: store_notice_channel): the locks layer
 * hears it from each master, and reads the lock once. */
static void on_wake_message(const char *msg, size_t len, void *priv)
{
	int i = (int)(intptr_t)priv;
	rl_wake_t *w;

	if (len > 0 && msg[0] == '\1') {
		R.E.on_wake(msg, len);
		return;
	}
	w = wake_of(name_tag(msg, len));

	w->wake_seq[i] = ++R.seq;
	if (w->lost_seq && !(w->mask & (1u << i)))
		return; /* nothing new for the last round: see rl_wake_t */
	R.E.on_wake(msg, len);
}

static void on_wake_subscribed(void *priv)
{
	(void)priv;
	R.E.on_rewatch();
}

/* Master i serves: up, and its canary primed (canary.h). */
static bool master_serves(int i)
{
	return R.pool[i] && rpool_up(R.pool[i]) && canary_primed(R.canary[i]);
}

static int masters_up(void)
{
	int up = 0;

	for (int i = 0; i < R.n; i++)
		up += master_serves(i);
	return up;
}

/* A master came up (or its canary was primed): when that makes a quorum,
 * the store is up. A canary not primed yet is checked now. */
static void on_pool_up(void)
{
	for (int i = 0; i < R.n; i++)
		if (R.pool[i] && rpool_up(R.pool[i]) && !canary_primed(R.canary[i]))
			canary_check_now(R.canary[i]);
	if (masters_up() == R.quorum)
		R.E.on_up();
}

static void on_pool_loss(const char *why)
{
	R.E.on_data_loss(why);
}

static void redlock_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	char channel[128], name[64], key[160];
	rpool_inbox_t inbox;
	rpool_callbacks_t cb;

	memset(&R, 0, sizeof(R));
	R.E = *events;
	R.n = cfg->nredlock;
	R.quorum = redlock_quorum(R.n);
	/* The channel lua/acquire.lua's 'v' mark makes a release publish on. */
	snprintf(channel, sizeof(channel), "%sredlock:wake", cfg->prefix);
	snprintf(name, sizeof(name), "lockbroker-%s", server.id);
	R.wakes = xcalloc(RL_WAKE_SLOTS, sizeof(*R.wakes));
	cb = (rpool_callbacks_t){
		.on_up = on_pool_up,
		.on_data_loss = on_pool_loss,
		.batch_max = cfg->redis_batch_max,
	};
	for (int i = 0; i < R.n; i++) {
		int n;
		R.addr[i] = &cfg->redlock[i];
		inbox = (rpool_inbox_t){channel, on_wake_message, on_wake_subscribed,
		                        (void *)(intptr_t)i};
		R.pool[i] = rpool_new(loop, &cfg->redlock[i], cfg->pool, name, &cb, &inbox);
		n = snprintf(key, sizeof(key), "%sbroker:{%s}:canary", cfg->prefix, server.id);
		R.canary[i] = canary_start_on(i, key, (size_t)n, on_pool_loss);
		canary_on_primed(R.canary[i], on_pool_up);
	}
	LOG(LOG_INFO, "msg=\"redlock: %d masters, a quorum of %d\"", R.n, R.quorum);
}

static void redlock_close(void)
{
	for (int i = 0; i < R.n; i++) {
		canary_stop(R.canary[i]);
		R.canary[i] = NULL;
		rpool_close(R.pool[i]);
	}
}

static void redlock_free(void)
{
	for (int i = 0; i < R.n; i++) {
		rpool_free(R.pool[i]);
		R.pool[i] = NULL;
	}
	free(R.wakes);
	R.wakes = NULL;
}

static void redlock_loss_checked(void)
{
	/* A master that restarted is closed for the check (rpool.c): open. */
	for (int i = 0; i < R.n; i++)
		rpool_check_done(R.pool[i]);
}

static bool redlock_up(void)
{
	return masters_up() >= R.quorum;
}

static size_t redlock_pending(void)
{
	size_t n = 0;

	for (int i = 0; i < R.n; i++)
		n += R.pool[i] ? rpool_pending(R.pool[i]) : 0;
	return n;
}

static bool redlock_replayed(void)
{
	return R.delivering ? R.delivering_replayed : rpool_replayed();
}

static int redlock_eval(const char *route, size_t route_len, script_id_t script, int nkeys,
                        int argc, const char *const *argv, const size_t *argvlen, store_fn fn,
                        void *priv, uint64_t retry_until, uint64_t deadline, int wait,
                        int floor_arg)
{
	(void)wait; /* --redis-wait-replicas is refused with --redlock */
	(void)deadline; /* no redirects to wait through */
	return rl_send(route, route_len, script, nkeys, argc, argv, argvlen, fn, priv, retry_until,
	               floor_arg);
}

size_t redlock_inspected(int *holds, size_t max)
{
	if (!R.inspecting)
		return 0;
	for (int i = 0; i < R.n && (size_t)i < max; i++)
		holds[i] = R.inspected[i];
	return (size_t)R.n;
}

static int redlock_eval_master(int master, const char *route, size_t route_len,
                               script_id_t script, int nkeys, int argc, const char *const *argv,
                               const size_t *argvlen, store_fn fn, void *priv)
{
	if (master < 0 || master >= R.n)
		return -1;
	return rpool_eval(R.pool[master], rpool_route(route, route_len), script, nkeys, argc, argv,
	                  argvlen, fn, priv, 0, RP_NO_WAIT, -1);
}

static size_t redlock_masters(store_master_t *out, size_t max)
{
	for (int i = 0; i < R.n && (size_t)i < max; i++) {
		const redis_addr_t *a = R.addr[i];
		store_master_t *m = &out[i];

		memset(m, 0, sizeof(*m));
		if (a->kind == URL_UNIX)
			snprintf(m->addr, sizeof(m->addr), "%s", a->path);
		else
			snprintf(m->addr, sizeof(m->addr), "%s:%d", a->host, a->port);
		m->up = master_serves(i);
		m->pending = R.pool[i] ? rpool_pending(R.pool[i]) : 0;
	}
	return (size_t)R.n;
}

const store_backend_t store_redlock_backend = {
	.start = redlock_start,
	.close = redlock_close,
	.free = redlock_free,
	.loss_checked = redlock_loss_checked,
	.up = redlock_up,
	.pending = redlock_pending,
	.replayed = redlock_replayed,
	.eval = redlock_eval,
	.eval_master = redlock_eval_master,
	.masters = redlock_masters,
};
