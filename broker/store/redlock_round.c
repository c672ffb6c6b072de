/*
 * redlock_round.c - an acquire's Redlock round (redlock.c's overview has
 * the rules, redlock_vote.h the arithmetic): each master's vote, the fence
 * proposed and, when needed, written, the round won or lost and undone,
 * and the wake-ups per lock that tell a lost round whether to try again at
 * once. A round goes from PH_VOTE to PH_WON (through PH_FENCE unless
 * every grant issued the proposal) or to PH_LOST; it is answered once
 * (rl_deliver), and a grant that comes after it was lost is undone again
 * (rl_on_leg, redlock.c).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/redlock_int.h"
#include "broker/store/redlock_vote.h"
#include "broker/store/rpool.h"

/* ---- wake-ups per lock ------------------------------------------------------ */

uint64_t rl_name_tag(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char)s[k]) * 1099511628211ULL;
	return h | 1;
}

/* The lock's entry, taken over when another lock had it. */
rl_wake_t *rl_wake_of(uint64_t tag)
{
	rl_wake_t *w = &redlock.wakes[tag % RL_WAKE_SLOTS];

	if (w->tag != tag) {
		memset(w, 0, sizeof(*w));
		w->tag = tag;
	}
	return w;
}

/* ---- acquire: a round ----------------------------------------------------- */

/* Gives back whatever the round got: withdraw.lua on every master, behind
 * the acquire on the lock's connection there. */
void rl_undo(rl_call_t *c)
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
	rl_wake_t *w = rl_wake_of(c->tag);
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
	 * still on its way is undone if it grants (rl_on_leg). */
	if (taken)
		rl_undo(c);
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
			rl_deliver(c, NULL);
		else
			rl_deliver_error(c, "a majority of the Redlock masters did not answer");
	} else if (conflict >= c->quorum) {
		rl_deliver(c, rl_ints(&b, 2, -1, 0, 0, 0));
	} else if (full >= c->quorum) {
		rl_deliver(c, rl_ints(&b, 2, -2, 0, 0, 0));
	} else {
		/* When a quorum may be free: the quorum-th smallest wait;
		 * fresh (above); and whether it got a grant and still lost: the
		 * vote may have split with others, whose fresh grants look held
		 * for a whole TTL (waitq_round.c backs off when that repeats). */
		int64_t hint = rl_kth_largest(retry, nretry, c->n - c->quorum + 1);
		rl_deliver(c, rl_ints(&b, 4, 0, hint, fresh, taken));
	}
}

static void win(rl_call_t *c)
{
	int64_t hold[REDLOCK_MASTERS_MAX];
	int nh = 0;
	int_reply_t b;

	c->phase = PH_WON;
	rl_wake_of(c->tag)->lost_seq = 0;
	for (int i = 0; i < c->n; i++)
		if (c->vote.answer[i] == RL_GRANTED)
			hold[nh++] = c->hold[i];
	if (c->fence > server.fence_high)
		server.fence_high = c->fence;
	rl_deliver(c, rl_ints(&b, 4, 1, c->fence, (int64_t)(c->ends_at - c->t0),
	                rl_drifted(rl_quorum_hold(hold, nh, c->quorum))));
}

/* The round's fence F to master i, which granted it. */
void rl_send_fence(rl_call_t *c, int i)
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
	if (rpool_eval(redlock.pool[i], rpool_route(c->route, c->route_len), SCRIPT_FENCE, 3, 5, argv, len,
	               rl_on_leg, &c->fleg[i], c->ends_at, RP_NO_WAIT, -1) == 0) {
		c->legs++;
		c->fence_pending++;
	}
}

/* Won: F goes to every master that granted, before anyone hears of it
 * (and to one that grants later: rl_on_leg). */
static void write_fence(rl_call_t *c, int64_t validity)
{
	c->phase = PH_FENCE;
	/* Above every fence the granting masters issued (each at least the
	 * proposal, from the broker's clock) and every one this broker saw. */
	c->fence = redlock_vote_fence(&c->vote, 0, server.fence_high);
	c->ends_at = timers_now() + (uint64_t)validity;
	for (int i = 0; i < c->n; i++)
		if (c->vote.answer[i] == RL_GRANTED)
			rl_send_fence(c, i);
	rl_arm(c, c->ends_at);
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

void rl_acquire_step(rl_call_t *c, bool timed_out)
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
void rl_vote(rl_call_t *c, int i)
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

/* An acquire's fence floor (the argument at floor_arg of its copied argv)
 * is set to P - 1, P above this broker's clock in microseconds and every
 * fence it has seen: each master then issues max(its stored fence + 1,
 * P) (lua/acquire.lua, Redlock). When every granting master issued P, P
 * is on a quorum: any earlier grant's fence is stored on a quorum, which
 * shares a master with this one, whose stored fence P exceeds; so P is
 * above every fence given before, and the fence write is not needed. */
int64_t rl_propose(rl_call_t *c, int floor_arg)
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
