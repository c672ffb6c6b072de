/*
 * sentinel.h - finds the master that Redis Sentinel names for a master
 * name, and follows it (sentinel:// URLs).
 *
 * Asking: SENTINEL MASTER, every sentinel in the URL's order; the round
 * takes the view with the highest config epoch, never one older than a
 * view taken before unless a majority of the sentinels agree on it (see
 * sentinel.c); after a round where no view could be taken, again after a
 * backoff. Watching: one sentinel at a time is subscribed to
 * +switch-master; when it goes, the next one is. Every address learnt
 * either way goes to on_master; the caller decides whether it is news.
 * Host names are resolved off the loop.
 *
 * Ownership: addr (the URL, with the sentinel password) must outlive the
 * module; the strings passed to on_master are valid during the call.
 */
#ifndef LB_BROKER_STORE_SENTINEL_H
#define LB_BROKER_STORE_SENTINEL_H

#include <stdbool.h>
#include <uv.h>

#include "broker/base/url.h"

/* announced: from a +switch-master message (the sentinels' own news);
 * else an answer to a question. */
typedef void (*sentinel_master_fn)(const char *host, int port, bool announced);

/* Starts watching and asks at once. */
void sentinel_start(uv_loop_t *loop, const redis_addr_t *addr, sentinel_master_fn on_master);
/* Asks the sentinels again now (the master may have moved): at most one
 * round at a time, and not more often than every SENTINEL_ASK_GAP_MS. */
void sentinel_ask(void);
/* Closes every connection to the sentinels; nothing is reported after. */
void sentinel_close(void);

#endif
