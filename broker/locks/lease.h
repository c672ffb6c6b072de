/*
 * lease.h - the leases held by this broker's sessions (client_t, client.h);
 * watchdog.h renews them and checks their expiry.
 *
 * A lease is found by its token (any session may release or extend it) and
 * by (session, lock, owner) for reentrancy. Each lease has one timer entry
 * that is either its next renewal (watchdog) or its expiry check, and one
 * for its max-hold deadline.
 *
 * expires_at is the broker's conservative view of the lease's end: the
 * local time at which the last successful acquire, renewal or extend was
 * *sent*, plus the lifetime Redis granted. Redis started counting later, so
 * the holder is always told it lost the lease before Redis can give the lock
 * to anyone else.
 *
 * Detached leases are not in this table: they live in Redis only.
 */
#ifndef LB_BROKER_LEASE_H
#define LB_BROKER_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "broker/base/htab.h"
#include "broker/base/timers.h"
#include "protocol/req.h"

#define LEASE_TOKEN_LEN 32 /* 128 random bits in lowercase hex */
#define LEASE_RETRY_MS 1000 /* renewal retry after a failure, at most */
/* How long a request whose reply was lost (it may or may not have run) is
 * sent again until Redis answers it: the longest a lease can live without
 * renewal, after which it has ended whatever happened. */
#define LB_RESOLVE_MS 86400000
/* A release of a lease is resent after a lost reply until this long after
 * the lease's local end: Redis counted its TTL from when it ran, later. */
#define LEASE_RELEASE_SLACK_MS 5000

struct client;

typedef struct lease {
	htab_node_t by_token;
	htab_node_t by_holder; /* (session, lock, owner); locks only, not permits */
	char token[LEASE_TOKEN_LEN + 1];
	char *lock; /* NUL-terminated copy; lock names hold no NUL */
	size_t lock_len;
	char *owner; /* may hold NUL bytes: use owner_len */
	size_t owner_len;
	lb_mode_t mode;
	int64_t fence;
	/* The holder's value as Redis keeps it ('=' V, lua/lib/prelude.lua),
	 * NULL for none; value_seq: the op seq of the proclaim that set it (0:
	 * the grant's). The data-loss check replays it with the count. */
	char *value;
	size_t value_len;
	int64_t value_seq;
	/* acquire's lock_delay_ms: when the lease ends without a release (its
	 * session ends, it is lost but by max_hold), nobody is granted the
	 * lock for this long (lua/release.lua's died) */
	int64_t lock_delay_ms;
	int64_t ttl_ms; /* lifetime the watchdog renews to */
	int64_t count;  /* reentrancy count */
	int64_t opseq;      /* the last op seq sent (release, reenter): see
	                     * lua/lib/prelude.lua */
	int64_t count_seq;  /* the op seq of the answer count comes from (0:
	                     * the grant's): the data-loss check replays
	                     * what Redis missed up to it (lua/verify.lua) */
	int64_t releasing;  /* releases on their way */
	int64_t reentering; /* re-entries on their way: count + reentering -
	                     * releasing is what the lease will be at */
	bool watchdog;
	bool renewing; /* a renewal is in flight */
	bool uncertain; /* a reply of its acquire was lost: a copy may still
	                 * run late, so its end is marked in Redis (the
	                 * prelude's tombstone) and the id never granted again */
	unsigned verify_pass; /* watchdog_verify_all's pass it awaits, or 0 */

	struct client *client;
	struct lease *s_prev, *s_next; /* the session's list */

	uint64_t expires_at;
	uint64_t confirmed_at; /* send time of the newest confirmation applied */
	/* Local time by which the max hold has ended it in Redis (0: none): a
	 * send time plus the hold Redis reported left, so never later than
	 * Redis's own deadline. */
	uint64_t max_hold_at;
	timer_ent_t tick;
	timer_ent_t max_hold;
} lease_t;

/* Creates a lease held by s; takes no ownership of the strings (copies
 * them). Its timers are the watchdog's to start (watchdog_start). */
lease_t *lease_new(struct client *s, const char *token, const char *lock, size_t lock_len,
                   const char *owner, size_t owner_len, lb_mode_t mode, int64_t fence,
                   int64_t ttl_ms, bool watchdog);

lease_t *lease_find(const char *token, size_t len);
/* Redis answered the count-changing call that carried op seq seq (release,
 * reenter) with count: the lease's count, unless a later call's answer
 * came first. */
void lease_set_count(lease_t *l, int64_t count, int64_t seq);
/* The same for the value (in Redis's form, NULL for none; copied) that a
 * proclaim (or the grant: seq 0) set. */
void lease_set_value(lease_t *l, const char *value, size_t len, int64_t seq);
/* The op seq of the newest state (count and value) Redis answered. */
int64_t lease_state_seq(const lease_t *l);
lease_t *lease_find_held(const struct client *s, const char *lock, size_t lock_len,
                         const char *owner, size_t owner_len);


/* Reports the lease lost to its session ("expired", "gone",
 * "redis_unavailable", "max_hold"), releases it in Redis unless it is gone
 * there already, and frees it. */
void lease_lost(lease_t *l, const char *reason);
/* The lease ended normally (released); frees it. */
void lease_drop(lease_t *l);
/* Releases every reentrancy level in Redis without waiting for the answer,
 * then frees the lease (session end, shutdown): an end without a release
 * (a lock delay holds the lock back). */
void lease_release_now(lease_t *l);

/* Grants for this broker's waiters found in the reply of a quiet release
 * go to fn (waitq_take_grants, registered at start: waitq is above). */
typedef void (*lease_grants_fn)(const char *lock, size_t lock_len, const redisReply *r,
                                size_t from, uint64_t sent_at);
void lease_set_grants_sink(lease_grants_fn fn);

/* Frees every level of a holder in Redis; the answer is not awaited, and
 * not WAITed for (--redis-wait-replicas: see lease.c). A lost reply is
 * sent again until `until` (uv_now ms: when the holder has ended by its
 * TTL anyway); with Redis down until then it ends so. */
/* grave: the holder's acquire may still run late (a reply of it was
 * lost): its id is never granted again (lua/release.lua's 'G'). */
void lease_release_in_redis(const char *lock, size_t lock_len, const char *token, uint64_t until,
                            bool grave);
/* Remembers until `until` (uv_now ms: when the lease would have ended by
 * its TTL) that the token's holder was released (a release answered, or
 * sent by lease_release_in_redis). */
void lease_note_released(const char *lock, size_t lock_len, const char *token, uint64_t until);
/* Sends every release remembered (and not past its `until`) again, as
 * quiet releases without WAIT: after a failover, to a new master that may
 * have missed them. Returns how many. */
size_t lease_release_recent_again(void);
/* Takes back the re-entry of l that carried op seq reentry_seq, with the
 * next op seq: only if Redis ran it and nothing of l ran after it, and
 * never l's last level (a new master that missed the re-entry keeps the
 * lock held). The answer is not awaited; lost replies are resent until
 * `until`. */
void lease_undo_reentry_in_redis(lease_t *l, int64_t reentry_seq, uint64_t until);

/* True when this broker reported the lease of token lost (recently: the
 * last LEASE_LOST_KEPT tokens of the last LEASE_LOST_KEEP_MS). */
bool lease_was_lost(const char *token, size_t len);
/* The reason it was reported lost with ("expired", "gone", ...), or NULL. */
const char *lease_lost_reason(const char *token, size_t len);
/* The message of a not_held for a lease lost for that reason (a lost
 * event's reason, or a detached lease's end found in Redis), or NULL (for
 * NULL, or a reason it does not know). */
const char *lease_lost_message(const char *why);
/* A detached grant was answered (the lease is in no table here): a reply
 * that reports it granted again within LEASE_DETACHED_KEEP_MS is not given
 * back. */
void lease_note_detached_grant(const char *token);
bool lease_granted_detached_lately(const char *token, size_t len);
#define LEASE_DETACHED_KEPT 4096
#define LEASE_DETACHED_KEEP_MS 60000
#define LEASE_LOST_KEPT 16384
#define LEASE_LOST_KEEP_MS 3600000

/* Calls fn(l, arg) for every lease (fn must not end any). */
void lease_foreach(void (*fn)(lease_t *l, void *arg), void *arg);

/* The number of leases in the table. */
size_t lease_count(void);
/* Frees the table's memory at exit; every lease must be gone. */
void lease_table_free(void);

#endif
