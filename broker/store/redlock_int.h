/*
 * redlock_int.h - what the parts of the Redlock backend share: the call
 * and its legs, the wake-ups per lock, the module's state (redlock,
 * defined in redlock.c) and the functions one part calls in another.
 * Nothing outside broker/store/redlock*.c includes it. The parts:
 * redlock.c (the overview, the life of a call, the backend),
 * redlock_merge.c (the N replies merged into one), redlock_round.c (an
 * acquire's round). A call is freed in redlock.c alone, once no leg's
 * callback is still to come (legs == 0).
 */
#ifndef LB_REDLOCK_INT_H
#define LB_REDLOCK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/base/timers.h"
#include "broker/base/url.h"
#include "broker/store/canary.h"
#include "broker/store/redlock_vote.h"
#include "broker/store/rpool.h"
#include "broker/store/store.h"

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
	uint64_t seq;        /* redlock.seq when it went out */
	uint64_t tag;        /* the lock's wake entry (rl_wake_of) */
	int argc, nkeys;     /* the acquire's own arguments, for the undo */
	char **argv;
	size_t *argvlen;
	char *route;
	size_t route_len;
};

/* Wake-ups per lock, in a table by the name's hash: when each master last
 * published one (wake_seq, in redlock.seq), and the last lost round's
 * masters that did not grant (mask; lost_seq its redlock.seq, 0 after a
 * win). A wake from a master that granted that round tells nothing new
 * (its own undo, or a release that master alone saw) and is dropped;
 * one from a master that refused, received after a round went out, makes
 * that round's loss "fresh": try again at once. An entry shared by two
 * locks (tag) is taken over: that costs a round, never a wake. */
#define RL_WAKE_SLOTS 4096

typedef struct rl_wake {
	uint64_t tag; /* the name's hash, never 0; 0: unused */
	uint64_t wake_seq[REDLOCK_MASTERS_MAX];
	uint64_t lost_seq;
	unsigned mask;
} rl_wake_t;

/* An array reply of n integers, built on the stack of the caller. */
typedef struct int_reply {
	redisReply top;
	redisReply el[4];
	redisReply *ptr[4];
} int_reply_t;

struct redlock_state {
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
};

/* Defined in redlock.c. */
extern struct redlock_state redlock;

/* ---- redlock.c: the life of a call ---------------------------------------- */

int rl_send(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
            const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
            uint64_t retry_until, int floor_arg);
/* Each master's answer to a call (priv: its rl_leg_t). */
void rl_on_leg(const redisReply *r, void *priv);

/* ---- redlock_merge.c: the replies ----------------------------------------- */

char *rl_dup_bytes(const char *s, size_t n);
void rl_deliver(rl_call_t *c, const redisReply *r);
const redisReply *rl_ints(int_reply_t *b, int n, int64_t a0, int64_t a1, int64_t a2, int64_t a3);
void rl_deliver_error(rl_call_t *c, const char *msg);
void rl_record(rl_call_t *c, int i, const redisReply *r);
int rl_count_state(const rl_call_t *c, leg_state_t s);
int64_t rl_kth_largest(int64_t *v, int n, int k);
int64_t rl_quorum_hold(int64_t *h, int n, int q);
int64_t rl_drifted(int64_t hold);
void rl_arm(rl_call_t *c, uint64_t at);
void rl_merge_life(rl_call_t *c);
void rl_merge_count(rl_call_t *c, bool timed_out);
void rl_merge_inspect(rl_call_t *c, bool timed_out);
void rl_merge_index(rl_call_t *c, const redisReply *r, bool timed_out);

/* ---- redlock_round.c: an acquire's round ---------------------------------- */

uint64_t rl_name_tag(const char *s, size_t n);
rl_wake_t *rl_wake_of(uint64_t tag);
void rl_undo(rl_call_t *c);
void rl_send_fence(rl_call_t *c, int i);
void rl_acquire_step(rl_call_t *c, bool timed_out);
void rl_vote(rl_call_t *c, int i);
int64_t rl_propose(rl_call_t *c, int floor_arg);

#endif
