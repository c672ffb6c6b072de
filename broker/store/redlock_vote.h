/*
 * redlock_vote.h - the arithmetic of one Redlock round (issue 18): the
 * quorum of N independent masters, the validity left after the round's
 * time and the clock drift, the tally of the masters' answers, and the
 * fence a won round writes. Pure: no I/O, no clock of its own (the caller
 * passes the times), so each rule is unit-tested (tests/unit/test_redlock.c).
 *
 * The rules (the algorithm of the Redis documentation's "Distributed locks
 * with Redis", as redlock-py and redsync apply it):
 *   - N masters (3, 5 or 7), quorum N / 2 + 1;
 *   - drift = ttl / 100 + 2 ms (clocks of the masters run at slightly
 *     different rates, and expiry is the masters' business);
 *   - a round that started at t0 is won when a quorum granted it and the
 *     validity left, ttl - (now - t0) - drift, is positive; the ttl is the
 *     one the quorum-th longest grant got (a master may grant less: a
 *     max_hold cap), since the lock holds on a majority until then;
 *   - a round is lost as soon as the grants still possible cannot reach
 *     the quorum, or its validity is spent: the caller then undoes the
 *     grants it got, on every master at once.
 * Fences: every master that grants reports the fence it issued (above the
 * one it had stored). A won round takes F = max(issued + 1 over the
 * grants, now_us, floor + 1) and writes F to a quorum before its holder
 * hears of it (redlock_round.c skips the write when every grant issued the
 * fence it proposed: that one is on a quorum already). Any
 * two quorums share a master, so the next won round sees F among its
 * answers and takes a larger one: fences increase per lock across every
 * grant, whichever majority made it.
 */
#ifndef LB_BROKER_STORE_REDLOCK_VOTE_H
#define LB_BROKER_STORE_REDLOCK_VOTE_H

#include <stdbool.h>
#include <stdint.h>

#define REDLOCK_MASTERS_MAX 7

typedef enum redlock_answer {
	RL_PENDING, /* no answer yet */
	RL_GRANTED, /* this master granted it */
	RL_REFUSED, /* held by another, or queued there */
	RL_FAILED,  /* no answer, an error, or unreachable */
} redlock_answer_t;

typedef enum redlock_outcome {
	RL_OPEN, /* not decided: more answers may win it */
	RL_WON,  /* a quorum granted it within its validity */
	RL_LOST, /* a quorum cannot be had, or the validity is spent */
} redlock_outcome_t;

typedef struct redlock_vote {
	int n;
	uint64_t started_ms; /* when the round's first call left */
	int64_t want_ttl_ms; /* the life asked for */
	redlock_answer_t answer[REDLOCK_MASTERS_MAX];
	int64_t ttl_ms[REDLOCK_MASTERS_MAX];  /* the life each grant got */
	int64_t fence[REDLOCK_MASTERS_MAX];   /* the fence each master had stored; -1: not told */
} redlock_vote_t;

/* n / 2 + 1. */
int redlock_quorum(int n);
/* ttl / 100 + 2. */
int64_t redlock_drift_ms(int64_t ttl_ms);
/* ttl - elapsed - drift(ttl); 0 when not positive. */
int64_t redlock_validity_ms(int64_t ttl_ms, int64_t elapsed_ms);

/* A round over n masters (1..REDLOCK_MASTERS_MAX) for a lease of ttl_ms
 * that starts now. */
void redlock_vote_begin(redlock_vote_t *v, int n, int64_t ttl_ms, uint64_t now_ms);
/* Master i answered: its answer, the life it granted (RL_GRANTED), and the
 * fence it had stored (-1 when it did not say). A second answer for the
 * same master is ignored. */
void redlock_vote_set(redlock_vote_t *v, int i, redlock_answer_t a, int64_t ttl_ms, int64_t fence);
/* The outcome at now; *validity_ms (may be NULL) gets the validity left
 * when RL_WON, else 0. */
redlock_outcome_t redlock_vote_outcome(const redlock_vote_t *v, uint64_t now_ms,
                                       int64_t *validity_ms);
/* The fence a won round writes: max(stored + 1 over every answer that told
 * one, now_us, floor + 1). */
int64_t redlock_vote_fence(const redlock_vote_t *v, int64_t now_us, int64_t floor);

#endif
