/*
 * lease.c - the lease table: lookup by token and by (session, lock, owner),
 * creation, and the ways a lease ends (see lease.h).
 *
 * Ownership: the table does not own leases; each lease is owned by its
 * session's list and freed by lease_free() after it left both indexes, the
 * session's list and the timer heap. Asynchronous operations never keep a
 * lease pointer: they keep the token and look the lease up again when the
 * reply comes, so a lease freed in between is simply not found.
 */
#include "broker/locks/lease.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/shared.h"
#include "broker/locks/holderkey.h"
#include "broker/store/lockscript.h"
#include "broker/base/log.h"
#include "broker/base/counters.h"
#include "broker/store/store.h"
#include "broker/locks/client.h"
#include "protocol/resp.h"

static htab_t by_token;
static htab_t by_holder;

/* A ring of tokens, newest last, with an index: what was true of a token
 * lately. */
typedef struct ring_token {
	htab_node_t node;
	bool used;
	uint64_t at;
	const char *why; /* lost: the reason reported (a static string) */
	char token[LEASE_TOKEN_LEN];
} ring_token_t;

typedef struct token_ring {
	ring_token_t *ring; /* cap entries, allocated on first use */
	size_t cap, next;
	htab_t index;
} token_ring_t;

/* The tokens of leases reported lost: a lost lease is not_held at once,
 * without Redis (which may be down). */
static token_ring_t lost = {.cap = LEASE_LOST_KEPT};
/* The tokens granted detached lately (in no table here): a heartbeat's
 * reply that reports such a grant again is no grant to give back. */
static token_ring_t detached = {.cap = LEASE_DETACHED_KEPT};


static uint32_t token_hash(const char *token, size_t len)
{
	return htab_hash(HTAB_HASH_INIT, token, len);
}


static bool token_match(const htab_node_t *n, const void *key)
{
	const lease_t *l = (const lease_t *)((const char *)n - offsetof(lease_t, by_token));
	const lb_str_t *t = key;

	return t->len == LEASE_TOKEN_LEN && memcmp(l->token, t->ptr, LEASE_TOKEN_LEN) == 0;
}

static bool holder_match(const htab_node_t *n, const void *key)
{
	const lease_t *l = (const lease_t *)((const char *)n - offsetof(lease_t, by_holder));
	const holder_key_t *k = key;

	return holder_key_equal(k, l->client, l->lock, l->lock_len, l->owner, l->owner_len);
}

lease_t *lease_new(struct client *s, const char *token, const char *lock, size_t lock_len,
                   const char *owner, size_t owner_len, lb_mode_t mode, int64_t fence,
                   int64_t ttl_ms, bool watchdog)
{
	lease_t *l = xcalloc(1, sizeof(*l));
	holder_key_t k;

	memcpy(l->token, token, LEASE_TOKEN_LEN);
	l->token[LEASE_TOKEN_LEN] = '\0';
	l->lock = xstrndup(lock, lock_len);
	l->lock_len = lock_len;
	l->owner = xstrndup(owner, owner_len);
	l->owner_len = owner_len;
	l->mode = mode;
	l->fence = fence;
	l->ttl_ms = ttl_ms;
	l->count = 1;
	l->watchdog = watchdog;
	l->client = s;
	/* Inactive until watchdog_start arms them: lease_free may cancel them
	 * whenever it runs. */
	timer_init(&l->tick, NULL);
	timer_init(&l->max_hold, NULL);

	htab_insert(&by_token, &l->by_token, token_hash(l->token, LEASE_TOKEN_LEN));
	if (mode != LB_MODE_PERMIT) {
		/* Only locks re-enter; each permit is a lease of its own. */
		k = (holder_key_t){s, l->lock, lock_len, l->owner, owner_len};
		htab_insert(&by_holder, &l->by_holder, holder_key_hash(&k));
	}

	l->s_next = s->leases;
	if (s->leases)
		s->leases->s_prev = l;
	s->leases = l;
	s->nleases++;
	server.nleases++;
	return l;
}

static void lease_free(lease_t *l)
{
	struct client *s = l->client;

	timer_cancel(&l->tick);
	timer_cancel(&l->max_hold);
	htab_remove(&by_token, &l->by_token);
	if (l->mode != LB_MODE_PERMIT)
		htab_remove(&by_holder, &l->by_holder);
	if (l->s_prev)
		l->s_prev->s_next = l->s_next;
	else
		s->leases = l->s_next;
	if (l->s_next)
		l->s_next->s_prev = l->s_prev;
	s->nleases--;
	server.nleases--;
	free(l->lock);
	free(l->owner);
	free(l->value);
	free(l);
}

lease_t *lease_find(const char *token, size_t len)
{
	lb_str_t key = {token, len};
	htab_node_t *n = htab_find(&by_token, token_hash(token, len), token_match, &key);

	return n ? (lease_t *)((char *)n - offsetof(lease_t, by_token)) : NULL;
}

void lease_set_count(lease_t *l, int64_t count, int64_t seq)
{
	if (seq < l->count_seq)
		return; /* an older call's answer: the newer one's count stands */
	l->count = count;
	l->count_seq = seq;
}

void lease_set_value(lease_t *l, const char *value, size_t len, int64_t seq)
{
	if (seq < l->value_seq)
		return; /* an older proclaim's answer: the newer value stands */
	free(l->value);
	l->value = value ? xstrndup(value, len) : NULL;
	l->value_len = value ? len : 0;
	l->value_seq = seq;
}

int64_t lease_state_seq(const lease_t *l)
{
	return l->count_seq > l->value_seq ? l->count_seq : l->value_seq;
}

lease_t *lease_find_held(const struct client *s, const char *lock, size_t lock_len,
                         const char *owner, size_t owner_len)
{
	holder_key_t k = {s, lock, lock_len, owner, owner_len};
	htab_node_t *n = htab_find(&by_holder, holder_key_hash(&k), holder_match, &k);

	return n ? (lease_t *)((char *)n - offsetof(lease_t, by_holder)) : NULL;
}

/* Where grants found in a reply go (waitq.c's, registered at start). */
static lease_grants_fn grants_sink;

void lease_set_grants_sink(lease_grants_fn fn)
{
	grants_sink = fn;
}

/* Releases, in a ring, kept until the released lease would have ended by
 * its TTL anyway: after a failover the new master may have missed them
 * (replication is asynchronous) and hold those leases again, for nobody,
 * until then. They are sent again there (lease_release_recent_again); a
 * release of a token nobody holds changes nothing. RECENT_RELEASES bounds
 * the memory: past that many releases within a TTL the oldest are
 * forgotten, and such a lease ends by its TTL as before. */
#define RECENT_RELEASES 4096
static struct recent_release {
	uint64_t until; /* 0: unused */
	char token[LEASE_TOKEN_LEN];
	size_t len;
	char *lock; /* malloc'd */
} recent[RECENT_RELEASES];
static size_t recent_next;

void lease_note_released(const char *lock, size_t lock_len, const char *token, uint64_t until)
{
	struct recent_release *e = &recent[recent_next];

	recent_next = (recent_next + 1) % RECENT_RELEASES;
	free(e->lock);
	e->lock = xmalloc(lock_len ? lock_len : 1);
	memcpy(e->lock, lock, lock_len);
	e->len = lock_len;
	memcpy(e->token, token, LEASE_TOKEN_LEN);
	e->until = until;
}

static void release_quietly(const char *lock, size_t lock_len, const char *token, const char *all,
                            int64_t seq, int64_t undo, uint64_t until, bool unwaited, bool died);

size_t lease_release_recent_again(void)
{
	uint64_t now = timers_now();
	size_t n = 0;

	for (size_t k = 0; k < RECENT_RELEASES; k++) {
		struct recent_release *e = &recent[k];
		if (e->until <= now)
			continue;
		/* Without WAIT: a burst of them must not hold a connection for
		 * WAIT each; a grant in a reply is then given back. */
		release_quietly(e->lock, e->len, e->token, "1", 0, 0, e->until, true, false);
		n++;
	}
	return n;
}

static void recent_free(void)
{
	for (size_t k = 0; k < RECENT_RELEASES; k++) {
		free(recent[k].lock);
		recent[k] = (struct recent_release){0};
	}
	recent_next = 0;
}

struct quiet_release {
	uint64_t sent_at;
	size_t len;
	char lock[]; /* the lock's name */
};

static void on_released_quietly(const redisReply *reply, void *priv)
{
	struct quiet_release *q = priv;

	if (store_reply_failed(reply))
		LOG(LOG_WARN, "msg=\"release failed; the lease ends by its TTL\" err=\"%.200s\"",
		    reply ? reply->str : "no reply");
	else if (grants_sink)
		grants_sink(q->lock, q->len, reply, 1, q->sent_at);
	free(q);
}

/* all: "1" every level, "0" one, "u" the re-entry with op seq undo; "G"
 * every level and the id never granted again (lua/release.lua).
 * unwaited: see lockscript_unwaited. */
/* died: an end without a release (the session or broker died, the lease
 * was lost): a lock delay holds the lock back (lua/release.lua). */
static void release_quietly(const char *lock, size_t lock_len, const char *token, const char *all,
                            int64_t seq, int64_t undo, uint64_t until, bool unwaited, bool died)
{
	struct quiet_release *q = xmalloc(sizeof(*q) + lock_len);
	lockscript_t ls;

	q->sent_at = timers_now();
	q->len = lock_len;
	memcpy(q->lock, lock, lock_len);
	lockscript_begin(&ls, lock, lock_len, LOCK_NKEYS, true);
	lockscript_arg(&ls, token, LEASE_TOKEN_LEN);
	lockscript_str(&ls, all);
	lockscript_int(&ls, seq);
	if (undo > 0 || died) {
		lockscript_int(&ls, undo);
		lockscript_str(&ls, died ? "1" : "0");
	}
	lockscript_retry_until(&ls, until);
	if (unwaited)
		lockscript_unwaited(&ls);
	if (lockscript_send(&ls, SCRIPT_RELEASE, on_released_quietly, q) < 0) {
		char tb[LOG_TOKEN_LEN];
		free(q);
		LOG(LOG_WARN, "msg=\"redis down: lease left to expire by its TTL\" lease=%s",
		    log_token(token, tb));
	}
}

/* Quiet releases go without WAIT (--redis-wait-replicas): what they do
 * needs no replica (a release a failover loses is sent again to the new
 * master: lease_release_recent_again), and a WAIT each would hold the
 * lock's connection for --redis-wait-ms per give-back when replicas lag.
 * A grant in their reply is confirmed by a WAITed heartbeat before it is
 * answered (waitq_take_grants). */
void lease_release_in_redis(const char *lock, size_t lock_len, const char *token, uint64_t until,
                            bool grave)
{
	lease_note_released(lock, lock_len, token, until);
	release_quietly(lock, lock_len, token, grave ? "G" : "1", 0, 0, until, true, false);
}

/* The lease ends without a release: with a lock delay, the lock is held
 * back (see lease.h). */
static void lease_end_in_redis(const lease_t *l)
{
	uint64_t until = l->expires_at + LEASE_RELEASE_SLACK_MS;

	lease_note_released(l->lock, l->lock_len, l->token, until);
	release_quietly(l->lock, l->lock_len, l->token, l->uncertain ? "G" : "1", 0, 0, until, true,
	                l->lock_delay_ms > 0);
}

void lease_undo_reentry_in_redis(lease_t *l, int64_t reentry_seq, uint64_t until)
{
	int64_t seq = ++l->opseq;

	/* The count as of the undo is the one held before the re-entry:
	 * what a check after a failover replays where the undo was lost. */
	lease_set_count(l, l->count, seq);
	release_quietly(l->lock, l->lock_len, l->token, "u", seq, reentry_seq, until, true, false);
}

static bool ring_match(const htab_node_t *n, const void *key)
{
	const ring_token_t *e = (const ring_token_t *)n;

	return memcmp(e->token, key, LEASE_TOKEN_LEN) == 0;
}

static void ring_add(token_ring_t *r, const char *token, const char *why)
{
	ring_token_t *e;

	if (!r->ring)
		r->ring = xcalloc(r->cap, sizeof(*r->ring));
	e = &r->ring[r->next];
	r->next = (r->next + 1) % r->cap;
	if (e->used)
		htab_remove(&r->index, &e->node);
	e->used = true;
	e->at = timers_now();
	e->why = why;
	memcpy(e->token, token, LEASE_TOKEN_LEN);
	htab_insert(&r->index, &e->node, token_hash(token, LEASE_TOKEN_LEN));
}

static const ring_token_t *ring_find(const token_ring_t *r, const char *token, size_t len,
                                     uint64_t keep_ms)
{
	const ring_token_t *e;

	if (len != LEASE_TOKEN_LEN || !r->ring)
		return NULL;
	e = (const ring_token_t *)htab_find(&r->index, token_hash(token, len), ring_match, token);
	return e && timers_now() - e->at < keep_ms ? e : NULL;
}

static void ring_free(token_ring_t *r)
{
	htab_free(&r->index);
	free(r->ring);
	r->ring = NULL;
	r->next = 0;
}

const char *lease_lost_reason(const char *token, size_t len)
{
	const ring_token_t *e = ring_find(&lost, token, len, LEASE_LOST_KEEP_MS);

	return e ? e->why : NULL;
}

bool lease_was_lost(const char *token, size_t len)
{
	return lease_lost_reason(token, len) != NULL;
}

void lease_note_detached_grant(const char *token)
{
	ring_add(&detached, token, "");
}

bool lease_granted_detached_lately(const char *token, size_t len)
{
	return ring_find(&detached, token, len, LEASE_DETACHED_KEEP_MS) != NULL;
}

const char *lease_lost_message(const char *why)
{
	if (!why)
		return NULL;
	if (strcmp(why, "expired") == 0)
		return "the lease was lost (reason: expired): its TTL ran out without renewal";
	if (strcmp(why, "max_hold") == 0)
		return "the lease was lost (reason: max_hold): its max_hold_ms ran out";
	if (strcmp(why, "gone") == 0)
		return "the lease was lost (reason: gone): Redis no longer holds it";
	if (strcmp(why, "redis_unavailable") == 0)
		return "the lease was lost (reason: redis_unavailable): it could not be renewed in time";
	return NULL;
}

/* The static string of a reason (the ring keeps a pointer). */
static const char *reason_const(const char *reason)
{
	static const char *const known[] = {"expired", "gone", "redis_unavailable", "max_hold"};

	for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
		if (strcmp(reason, known[k]) == 0)
			return known[k];
	return "gone";
}

void lease_lost(lease_t *l, const char *reason)
{
	struct client *s = l->client;
	char tb[LOG_TOKEN_LEN];

	LOG(LOG_INFO, "msg=\"lease lost\" session=%s lease=%s reason=%s", s->name,
	    log_token(l->token, tb), reason);
	server.stats.lost_total++;
	counters_lost(reason);
	client_send(s, resp_event_lost(l->token, (lb_str_t){l->lock, l->lock_len}, reason));
	ring_add(&lost, l->token, reason_const(reason));
	/* max_hold: the broker releases it itself (no lock delay); any other
	 * loss is an end without a release. */
	if (strcmp(reason, "max_hold") == 0)
		lease_release_in_redis(l->lock, l->lock_len, l->token,
		                       l->expires_at + LEASE_RELEASE_SLACK_MS, l->uncertain);
	else if (strcmp(reason, "gone") != 0)
		lease_end_in_redis(l);
	lease_free(l);
}

void lease_drop(lease_t *l)
{
	server.stats.released_total++;
	lease_free(l);
}

void lease_release_now(lease_t *l)
{
	lease_end_in_redis(l);
	lease_drop(l);
}

void lease_foreach(void (*fn)(lease_t *l, void *arg), void *arg)
{
	for (size_t b = 0; b < by_token.nbuckets; b++) {
		for (htab_node_t *e = by_token.buckets[b]; e; e = e->next)
			fn((lease_t *)((char *)e - offsetof(lease_t, by_token)), arg);
	}
}

size_t lease_count(void)
{
	return by_token.count;
}

void lease_table_free(void)
{
	FAILS_ASSERT(by_token.count == 0);
	htab_free(&by_token);
	htab_free(&by_holder);
	ring_free(&lost);
	ring_free(&detached);
	recent_free();
}
