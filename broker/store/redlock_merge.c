/*
 * redlock_merge.c - the N masters' replies to one call merged into the one
 * reply the locks layer knows from a single Redis (redlock.c's overview
 * has the rules per script): what each master answered is recorded
 * (rl_record), and each merge runs again on every answer and on the
 * call's timer until it can tell. A call is answered at most once
 * (rl_deliver sets c->answered); nothing here frees a call (redlock.c
 * does, once every master answered).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"
#include "broker/store/lockscript.h"
#include "broker/store/redlock_int.h"
#include "broker/store/redlock_vote.h"

#define RL_STRAGGLER_MS 200  /* after a quorum answered: how long the rest may take */

/* ---- replies ------------------------------------------------------------ */

char *rl_dup_bytes(const char *s, size_t n)
{
	char *d = xmalloc(n + 1);

	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}


void rl_deliver(rl_call_t *c, const redisReply *r)
{
	if (c->answered)
		return;
	c->answered = true;
	if (!c->fn)
		return;
	redlock.delivering = true;
	redlock.delivering_replayed = c->replayed;
	c->fn(r, c->priv);
	redlock.delivering = false;
}


const redisReply *rl_ints(int_reply_t *b, int n, int64_t a0, int64_t a1, int64_t a2, int64_t a3)
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

void rl_deliver_error(rl_call_t *c, const char *msg)
{
	redisReply e = {.type = REDIS_REPLY_ERROR, .str = (char *)msg, .len = strlen(msg)};

	rl_deliver(c, &e);
}

/* What master i answered, as far as the merges need it. */
void rl_record(rl_call_t *c, int i, const redisReply *r)
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

int rl_count_state(const rl_call_t *c, leg_state_t s)
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
int64_t rl_kth_largest(int64_t *v, int n, int k)
{
	if (n < k || k < 1)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_desc);
	return v[k - 1];
}

/* A max-hold left where 0 means none: the quorum-th largest, with none
 * the largest of all. */
int64_t rl_quorum_hold(int64_t *h, int n, int q)
{
	for (int k = 0; k < n; k++)
		if (h[k] <= 0)
			h[k] = INT64_MAX;
	int64_t v = rl_kth_largest(h, n, q);
	return v == INT64_MAX ? 0 : v;
}

/* A max-hold left (0: none) as a quorum's clocks may have it: less the
 * drift, as every life left here is, so the holder is told max_hold
 * before a master whose clock runs fast frees the lock; at least 1. */
int64_t rl_drifted(int64_t hold)
{
	if (hold <= 0)
		return 0;
	return hold - redlock_drift_ms(hold) > 0 ? hold - redlock_drift_ms(hold) : 1;
}

void rl_arm(rl_call_t *c, uint64_t at)
{
	c->timer_on = true;
	timer_at(&c->timer, at);
}

/* ---- extend, verify, reenter, proclaim: held on a quorum ----------------- */

/* Proclaim answers {1, fence} where a quorum holds the lease (the highest
 * fence they show), the others a life left. */
void rl_merge_life(rl_call_t *c)
{
	int64_t life[REDLOCK_MASTERS_MAX], hold[REDLOCK_MASTERS_MAX], count[REDLOCK_MASTERS_MAX];
	int ok = 0, gone = 0, pending = rl_count_state(c, LEG_PENDING);
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
		rl_deliver(c, rl_ints(&b, 2, 1, rl_kth_largest(life, ok, 1), 0, 0));
	} else if (ok >= c->quorum) {
		int_reply_t b;
		int64_t l = rl_kth_largest(life, ok, c->quorum);
		int64_t h = rl_quorum_hold(hold, ok, c->quorum);
		/* The levels a quorum holds: one a minority has on top (a
		 * re-entry that reached it alone) is not the lease's. */
		int64_t n = rl_kth_largest(count, ok, c->quorum);

		l -= redlock_drift_ms(l);
		h = rl_drifted(h);
		if (l <= 0)
			rl_deliver(c, rl_ints(&b, 2, -1, 0, 0, 0));
		else if (reenter)
			rl_deliver(c, rl_ints(&b, 2, n, l, 0, 0));
		else
			rl_deliver(c, rl_ints(&b, 2, l, h, 0, 0));
	} else if (gone > c->n - c->quorum) {
		int_reply_t b;
		rl_deliver(c, rl_ints(&b, 2, -1, 0, 0, 0));
	} else if (ok + pending < c->quorum) {
		rl_deliver_error(c, RL_NO_QUORUM);
	}
}

/* ---- release, withdraw: the count left where it was held ----------------- */

/* Release: the count left is the one a quorum still holds (the
 * quorum-th largest, a master that holds nothing or did not answer
 * counting 0). At 0 the lease is released, and a master that still has
 * levels of it (it missed a release, or took a re-entry the others did
 * not) gives them all back: a lock is never held on a minority for
 * nobody. Withdraw: whether any master held it. */
void rl_merge_count(rl_call_t *c, bool timed_out)
{
	int ok = 0, gone = 0, answered, pending = rl_count_state(c, LEG_PENDING);
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
		int64_t left = rl_kth_largest(count, c->n, c->quorum);

		if (answered == 0) {
			rl_deliver_error(c, RL_NO_QUORUM);
		} else if (ok == 0) {
			rl_deliver(c, rl_ints(&b, 1, -1, 0, 0, 0));
		} else if (c->script != SCRIPT_RELEASE) {
			rl_deliver(c, rl_ints(&b, 1, best, 0, 0, 0));
		} else {
			c->released = left == 0;
			if (c->released && best > 0) {
				c->cleaned = true;
				rl_undo(c);
			}
			rl_deliver(c, rl_ints(&b, 1, left, 0, 0, 0));
		}
	} else if (answered >= c->quorum && !c->timer_on) {
		rl_arm(c, timers_now() + RL_STRAGGLER_MS);
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
		mine->str = rl_dup_bytes(c->copy[i]->element[v]->str, c->copy[i]->element[v]->len);
		mine->len = c->copy[i]->element[v]->len;
		mine->type = REDIS_REPLY_STRING;
		return;
	}
}

void rl_merge_inspect(rl_call_t *c, bool timed_out)
{
	int answered = rl_count_state(c, LEG_OK), pending = rl_count_state(c, LEG_PENDING);
	int holding = 0, pick = -1, any = -1;
	int64_t fence = -1, held_fence[REDLOCK_MASTERS_MAX], waiters = 0;
	int64_t delay[REDLOCK_MASTERS_MAX] = {0};
	char fs[24];

	if (pending > 0 && !timed_out) {
		if (answered >= c->quorum && !c->timer_on)
			rl_arm(c, timers_now() + RL_STRAGGLER_MS);
		return;
	}
	for (int i = 0; i < c->n; i++) {
		const redisReply *r = c->copy[i];
		redlock.inspected[i] = -1;
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
		redlock.inspected[i] = r->elements >= H + INSPECT_HOLDER_WIDTH;
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
		rl_deliver(c, NULL);
		return;
	}
	snprintf(fs, sizeof(fs), "%lld", (long long)fence);
	redlock.inspecting = true;
	if (holding < c->quorum) {
		/* Held nowhere, or on too few masters to count; held back by a
		 * lock delay as long as a quorum of masters holds it back. */
		int_reply_t b;
		redisReply f = {.type = REDIS_REPLY_NIL};
		const redisReply *out = rl_ints(&b, H, 0, 0, waiters, rl_kth_largest(delay, c->n, c->quorum));

		if (fence >= 0)
			f = (redisReply){.type = REDIS_REPLY_STRING, .str = fs, .len = strlen(fs)};
		b.ptr[1] = &f;
		rl_deliver(c, out);
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
		f->str = rl_dup_bytes(fs, f->len);
		if (c->copy[pick]->element[2]->type == REDIS_REPLY_INTEGER)
			c->copy[pick]->element[2]->integer = waiters;
		agreed_value(c, pick);
		rl_deliver(c, c->copy[pick]);
	}
	redlock.inspecting = false;
}

#undef H

/* ---- lease_index and the rest -------------------------------------------- */

void rl_merge_index(rl_call_t *c, const redisReply *r, bool timed_out)
{
	int ok = rl_count_state(c, LEG_OK), pending = rl_count_state(c, LEG_PENDING);

	if (c->index_get) {
		if (r && r->type == REDIS_REPLY_STRING) {
			rl_deliver(c, r);
		} else if (pending == 0 || timed_out) {
			redisReply nil = {.type = REDIS_REPLY_NIL};
			rl_deliver(c, ok > 0 ? &nil : NULL);
		} else if (ok >= c->quorum && !c->timer_on) {
			rl_arm(c, timers_now() + RL_STRAGGLER_MS);
		}
		return;
	}
	if (ok >= c->quorum && !store_reply_failed(r))
		rl_deliver(c, r);
	else if (ok + pending < c->quorum)
		rl_deliver_error(c, RL_NO_QUORUM);
}
