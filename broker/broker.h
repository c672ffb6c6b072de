/*
 * broker.h - the broker's one global state and its glossary.
 *
 * Glossary
 *   session  one client connection; requests on it are pipelined and may be
 *            answered out of order. Owns its non-detached leases.
 *   lease    the right to a lock granted to a session, named by an
 *            unguessable token. Knowing the token is the right to extend and
 *            release it. A detached lease belongs to no session and lives in
 *            Redis only.
 *   holder   Redis's view of a lease: an entry in the lock's holder set with
 *            its own expiry. The holder id is the lease token.
 *   waiter   a pending acquire queued on a lock (issue 3).
 *   fence    the fencing token: strictly increasing per lock name.
 *
 * Truth lives in Redis and changes only in lua/ scripts; this process keeps
 * only what is local: sessions, their leases, timers, and counters.
 */
#ifndef LB_BROKER_BROKER_H
#define LB_BROKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "broker/config.h"
#include "broker/timers.h"
#include "broker/version.h"

/* How long the fence key outlives the lock's other keys. */
#define LB_FENCE_RETENTION_MS 60000
#define LB_FENCE_RETENTION_STR "60000"
/* How long a detached lease's token -> name pointer outlives its TTL. */
#define LB_INDEX_MARGIN_MS 60000
/* A detached acquire granted this long after its pointer was stored
 * stores it again, for the lifetime granted, before it answers. */
#define LB_INDEX_REFRESH_MS 1000
/* How long a request whose reply was lost (it may or may not have run) is
 * sent again until Redis answers it: the longest a lease can live without
 * renewal, after which it has ended whatever happened. */
#define LB_RESOLVE_MS 86400000

struct session;
struct listener;

typedef enum broker_state {
	BROKER_RUNNING,
	BROKER_DRAINING, /* shutdown event sent; waiting for clients or grace */
	BROKER_STOPPING, /* releasing what is left, closing handles */
} broker_state_t;

typedef struct broker_stats {
	uint64_t acquired_total;
	uint64_t released_total;
	uint64_t timeouts_total;
	uint64_t lost_total;
} broker_stats_t;

struct broker {
	uv_loop_t *loop;
	lb_config_t *cfg;
	int argc;    /* the command line, to read the settings again on SIGHUP */
	char **argv;
	broker_state_t state;
	char id[17];           /* random, hex: names this broker in Redis */
	uint64_t started_ms;   /* uv_now at start */
	uint64_t next_session; /* session ids count up from 1 */

	struct listener *listeners; /* list */
	struct session *sessions;   /* list of open and closing sessions */
	size_t nsessions;           /* open sessions */
	size_t nconnections;        /* sessions whose handle is not yet closed */
	size_t nleases;             /* leases held by current sessions */

	broker_stats_t stats;
	timer_ent_t grace; /* the shutdown grace period */
	uv_signal_t sigterm, sigint, sighup;
	/* Output queued in a loop turn is written before the loop blocks again:
	 * prepare covers timer callbacks, check covers I/O callbacks. */
	uv_prepare_t flush_prepare;
	uv_check_t flush_check;
	int exit_code;
};

extern struct broker server;

/* Starts listening and connecting; returns 0 or -1 (logged). */
int broker_start(uv_loop_t *loop, lb_config_t *cfg, int argc, char **argv);
/* Begins a graceful shutdown (as on SIGTERM). */
void broker_shutdown(void);
/* Called whenever a session finished closing, to finish a shutdown. */
void broker_session_gone(void);

/* Frees what outlives the loop (call after uv_run returned). */
void broker_free(void);

/* Fills buf with 2*n lowercase hex characters of OS randomness (plus NUL). */
void broker_random_hex(char *buf, size_t n);

#endif
