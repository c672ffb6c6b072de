/*
 * waitq.h - pending acquires ("waiters") of this broker's sessions, and
 * their wake-ups.
 *
 * A waiter is one acquire request until it is answered. Its id is the
 * lease token it will hold. Waiters of one lock form a wlock, which runs
 * the lock's heartbeat: a call of lua/heartbeat.lua on a wake-up message
 * from Redis, at the holders' expiry, and as a slow safety net (at most
 * once a second per lock: never a short poll). Grants for this broker come
 * back in the replies of its own scripts (see lua/lib/prelude.lua), so a
 * lease's expiry is always bounded by a send time of this broker.
 *
 * A second acquire of a (session, lock, owner) whose first acquire is still
 * pending waits behind it here, without Redis: when the first is granted it
 * re-enters that lease (count + 1); when the first fails it goes on as an
 * acquire of its own.
 */
#ifndef LB_BROKER_WAITQ_H
#define LB_BROKER_WAITQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "protocol/req.h"

struct client;

/* Starts an acquire that is not a re-entry of a held lease. */
void waitq_acquire(struct client *s, const json_t *id, const req_acquire_t *a, int64_t ttl_ms);
/* Cancels s's pending acquire whose request id equals target; false when
 * none is pending under that id. */
bool waitq_cancel(struct client *s, const json_t *target);
/* s ended: withdraws all its waiters (no answers). */
void waitq_client_end(struct client *s);
/* The broker is stopping: every waiter of s answers shutting_down. */
void waitq_client_shutdown(struct client *s);

/* The inbox: a message names a lock that may have become free for us. */
void waitq_on_message(const char *name, size_t len);
/* The inbox was (re)subscribed: messages may have been lost meanwhile. */
void waitq_on_subscribed(void);

/* Grants for this broker's waiters in reply r of a script on lock that was
 * sent at sent_at: elements from index `from` on are grants of
 * LOCK_GRANT_WIDTH values each (lockscript.h). */
void waitq_take_grants(const char *lock, size_t lock_len, const redisReply *r, size_t from,
                       uint64_t sent_at);

/* Pending acquires on this broker: not yet answered, not ended. */
size_t waitq_count(void);

/* What the UI (/ui/state) shows of a pending acquire: its lock, its
 * session, its mode and when it came (uv_now ms). Never its id, which is
 * the token it will hold. */
typedef struct waitq_view {
	const char *lock;
	size_t lock_len;
	const struct client *client;
	lb_mode_t mode;
	uint64_t since;
} waitq_view_t;
/* Calls fn for every pending acquire, lock by lock, oldest first within
 * a lock; fn must not change the queues. */
void waitq_foreach_pending(void (*fn)(const waitq_view_t *v, void *arg), void *arg);
/* Frees the tables at exit; every waiter must be gone. */
void waitq_free(void);

#endif
