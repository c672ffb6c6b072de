/*
 * redlock_vote.c - the arithmetic of one Redlock round (see redlock_vote.h).
 */
#include "broker/store/redlock_vote.h"

#include <string.h>

int redlock_quorum(int n)
{
	return n / 2 + 1;
}

int64_t redlock_drift_ms(int64_t ttl_ms)
{
	return (ttl_ms > 0 ? ttl_ms / 100 : 0) + 2;
}

int64_t redlock_validity_ms(int64_t ttl_ms, int64_t elapsed_ms)
{
	int64_t left = ttl_ms - elapsed_ms - redlock_drift_ms(ttl_ms);

	return left > 0 ? left : 0;
}

void redlock_vote_begin(redlock_vote_t *v, int n, int64_t ttl_ms, uint64_t now_ms)
{
	memset(v, 0, sizeof(*v));
	v->want_ttl_ms = ttl_ms;
	v->n = n < 1 ? 1 : n > REDLOCK_MASTERS_MAX ? REDLOCK_MASTERS_MAX : n;
	v->started_ms = now_ms;
	for (int i = 0; i < REDLOCK_MASTERS_MAX; i++) {
		v->answer[i] = RL_PENDING;
		v->fence[i] = -1;
	}
}

void redlock_vote_set(redlock_vote_t *v, int i, redlock_answer_t a, int64_t ttl_ms, int64_t fence)
{
	if (i < 0 || i >= v->n || v->answer[i] != RL_PENDING || a == RL_PENDING)
		return;
	v->answer[i] = a;
	v->ttl_ms[i] = a == RL_GRANTED ? ttl_ms : 0;
	v->fence[i] = fence;
}

/* The quorum-th longest life among the grants (q of them at least). */
static int64_t quorum_ttl(const redlock_vote_t *v, int q)
{
	int64_t ttl[REDLOCK_MASTERS_MAX];
	int k = 0;

	for (int i = 0; i < v->n; i++)
		if (v->answer[i] == RL_GRANTED)
			ttl[k++] = v->ttl_ms[i];
	/* Descending, by insertion: at most 7. */
	for (int i = 1; i < k; i++) {
		int64_t t = ttl[i];
		int j = i;
		for (; j > 0 && ttl[j - 1] < t; j--)
			ttl[j] = ttl[j - 1];
		ttl[j] = t;
	}
	return ttl[q - 1];
}

redlock_outcome_t redlock_vote_outcome(const redlock_vote_t *v, uint64_t now_ms,
                                       int64_t *validity_ms)
{
	int q = redlock_quorum(v->n), granted = 0, pending = 0;
	int64_t elapsed = now_ms > v->started_ms ? (int64_t)(now_ms - v->started_ms) : 0;

	if (validity_ms)
		*validity_ms = 0;
	for (int i = 0; i < v->n; i++) {
		granted += v->answer[i] == RL_GRANTED;
		pending += v->answer[i] == RL_PENDING;
	}
	if (granted >= q) {
		int64_t left = redlock_validity_ms(quorum_ttl(v, q), elapsed);
		if (left <= 0)
			return RL_LOST;
		if (validity_ms)
			*validity_ms = left;
		return RL_WON;
	}
	/* Open only while a quorum can still come, in time for some validity. */
	if (granted + pending < q || redlock_validity_ms(v->want_ttl_ms, elapsed) <= 0)
		return RL_LOST;
	return RL_OPEN;
}

int64_t redlock_vote_fence(const redlock_vote_t *v, int64_t now_us, int64_t floor)
{
	int64_t f = now_us;

	if (floor + 1 > f)
		f = floor + 1;
	for (int i = 0; i < v->n; i++)
		if (v->answer[i] != RL_PENDING && v->fence[i] >= 0 && v->fence[i] + 1 > f)
			f = v->fence[i] + 1;
	return f;
}
