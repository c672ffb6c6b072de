/*
 * watch.h - watched locks: the `watch` and `unwatch` ops and the `changed`
 * event (PROTOCOL.md, "Watching a lock").
 *
 * A lock a session watches is read (lua/inspect.lua with a watcher's
 * mark) when the watch starts, when Redis tells this broker the lock's
 * holders changed (a "\1" NAME message on its notice channel: the lock
 * scripts publish it while the mark lives, see 'W' in lua/lib/prelude.lua),
 * when its first holder's TTL runs out (an expiry publishes nothing), and
 * once a second (the safety net, which also renews the mark). Each read
 * that shows another state than the last goes to every watch of the lock
 * as a `changed` event; after Redis came back or lost data, every watch
 * gets one read afresh whatever it shows.
 *
 * Invariants: one read per lock on its way at a time (a notice during it
 * reads again after it), so a lock's events follow its history; a watch
 * is answered by the first read sent after it started; a watch never gets
 * a fence below one it was shown; a lock no session watches is forgotten
 * (its mark ends in Redis within WATCH_MARK_MS).
 */
#ifndef LB_BROKER_LOCKS_WATCH_H
#define LB_BROKER_LOCKS_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "protocol/req.h"

struct client;

/* How often a watched lock is read when nothing is heard (the safety
 * net), and how long a watcher's mark lives in Redis without renewal. */
#define WATCH_SAFETY_MS 1000
#define WATCH_MARK_MS 3000

void watch_start(struct client *s, req_t *req);
void watch_stop(struct client *s, req_t *req);
/* Ends every watch of s (its session ended). */
void watch_client_end(struct client *s);
/* Redis said lock (name, len) changed (a notice). */
void watch_noticed(const char *name, size_t len);
/* Reads every watched lock now: after a lost subscription (notices may
 * have been missed; fresh false), or after Redis came back or lost data
 * (fresh: every watch gets the state read, changed or not). */
void watch_read_all(bool fresh);
/* At exit. */
void watch_free(void);

#endif
