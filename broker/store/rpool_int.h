/*
 * rpool_int.h - what the two halves of the Redis pool share (rpool.c: the
 * connections; rpool_cmd.c: the commands on them). Nothing outside
 * broker/store/rpool*.c includes it. See rpool.c for the connection states
 * and rpool_cmd.c for the order and resend rules.
 */
#ifndef LB_RPOOL_INT_H
#define LB_RPOOL_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <uv.h>

#include "broker/base/htab.h"
#include "broker/base/timers.h"
#include "broker/base/url.h"
#include "broker/store/scripts.h"
#include "broker/store/store.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_CONNS 64
/* A connection that is not ready this long after connecting, or that has
 * commands pending and answered nothing this long, is dropped and
 * reconnected; its pending commands fail (hiredis 0.14 has no timeouts). */
#define CONNECT_TIMEOUT_MS 3000
#define COMMAND_TIMEOUT_MS 2000
/* How long a stopping broker waits for Redis to answer what is pending. */
#define CLOSE_TIMEOUT_MS 2000
#define RUN_ID_LEN 40
#define MAX_ADDRS 8 /* addresses of a resolved host tried in turn */

/* How long the pool stays closed for a data-loss check after a failover
 * when the check never says it is done (its calls time out before). */
#define CHECK_TIMEOUT_MS 5000

/* Handshake steps that are not a script's SCRIPT LOAD. */
#define STEP_PLAIN ((intptr_t)-1)
#define STEP_INFO ((intptr_t)-2)
#define STEP_ROLE ((intptr_t)-3)

typedef enum rconn_state {
	RC_DOWN,
	RC_RESOLVING,
	RC_CONNECTING,
	RC_READY,
	RC_CLOSING,
} rconn_state_t;

typedef struct rcmd rcmd_t;

/* A WAIT on its way behind the command it is for (NULL: detached, the
 * command went another way: its answer is dropped). */
struct waitref {
	rcmd_t *cmd;
};

/* Commands in order, oldest first. */
typedef struct cmdlist {
	rcmd_t *head, *tail;
} cmdlist_t;

typedef struct rconn {
	struct rpool_state *pool; /* the pool it belongs to */
	redisAsyncContext *ac; /* NULL once hiredis freed it */
	rconn_state_t state;
	int idx;
	int handshake_left; /* replies still expected before READY */
	bool handshake_failed;
	bool subscriber;      /* the inbox connection, not a command one */
	bool dropping;        /* inside our own redisAsyncFree (rconn_drop) */
	bool reloading;       /* NOSCRIPT seen: see the header */
	bool in_batch_reply;  /* a batch's calls are being handled: the reload
	                       * waits until all of them are (in order) */
	bool resolving;       /* gai is in flight */
	bool addr_ok;         /* addrs[addr_i] made a ready connection */
	int naddrs, addr_i;   /* the host's addresses; the one to try next */
	char addrs[MAX_ADDRS][64];
	cmdlist_t outq;       /* to send at rpool_flush, in order (batching) */
	cmdlist_t redo;       /* answered NOSCRIPT while reloading, in order */
	cmdlist_t held;       /* sent while reloading, in order */
	uint32_t backoff_ms;
	size_t pending;       /* commands sent, not yet answered */
	uint64_t progress_at; /* last reply, or when pending went from 0 to 1 */
	timer_ent_t retry;
	timer_ent_t watch;
	uv_getaddrinfo_t gai;
	unsigned gai_gen;     /* the target generation gai resolves for */
} rconn_t;

struct rcmd {
	struct rpool_state *pool;
	rcmd_t *next;         /* in a cmdlist */
	timer_ent_t give_up;  /* retry_until, while waiting in rpool.waiting */
	uint64_t sent_ns;     /* uv_hrtime at the last send: round-trip metric */
	uint64_t retry_until; /* 0: a lost reply is reported at once */
	uint32_t route;
	uint64_t seq;         /* the pool's count of commands when it was made:
	                       * the order of the requests (waiting list) */
	script_id_t script;
	bool reloaded;        /* sent again after NOSCRIPT already */
	bool replayed;        /* sent again after a lost reply */
	bool pinned;          /* holds a pin on its route (see the header) */
	bool wait;            /* followed by WAIT (rpool_eval's wait) */
	bool unacked;         /* RP_UNACKED with WAIT on: delivered as not acknowledged */
	bool check;           /* part of the check after a failover: passes the gate */
	bool asking;          /* ASKING goes before it (RP_ASKING) */
	bool alone;           /* never in a batch (RP_ALONE) */
	size_t floor_off;     /* the fence floor's digits in resp (FLOOR_DIGITS), or 0 */
	uint32_t keys_off;    /* where its key bulks start in resp */
	uint32_t args_off;    /* where its other args' bulks start in resp */
	uint16_t nkeys, nargs; /* its keys; its other args */
	/* A batch (lua/batch.lua): its calls, in order; NULL for a call. A
	 * batch is no call of its own: pool->pending counts its calls, its
	 * reply is theirs (each handled as if it came alone), and nheld of
	 * them wait for the WAIT behind it. */
	rcmd_t **sub;
	int nsub, nheld;
	struct waitref *wref; /* the WAIT sent behind it, not yet answered */
	redisReply *held;     /* its reply, kept until that WAIT answers */
	store_fn fn;
	void *priv;
	size_t len;
	char resp[]; /* EVALSHA sha nkeys args... in RESP, formatted once (the
	              * sha does not change when a script is loaded again),
	              * NUL-terminated */
};

struct rpool_state {
	uv_loop_t *loop;
	const redis_addr_t *addr;
	rconn_t conns[MAX_CONNS + 1]; /* commands, then the subscriber */
	int n;                        /* command connections */
	int nall;                     /* n, plus 1 with a subscriber */
	char *channel;                /* the inbox channel, or NULL */
	char *name;                   /* CLIENT SETNAME prefix */
	void (*on_message)(const char *msg, size_t len, void *priv);
	void (*on_subscribed)(void *priv);
	void *inbox_priv;
	void (*on_up)(void);
	void (*on_data_loss)(const char *why);
	void (*on_not_master)(void);
	void (*on_lost)(void);
	bool require_master; /* ROLE in the handshake; READONLY drops */
	/* Where the connections go: the URL's address, or the master that
	 * rpool_set_target named (none yet: set is false). */
	struct {
		bool set;
		url_kind_t kind;
		char host[URL_HOST_MAX + 1];
		int port;
		char path[URL_PATH_MAX + 1];
		unsigned gen; /* bumped by every change */
	} target;
	/* Closed for the data-loss check after a failover (rpool_check_done):
	 * only what on_data_loss sends goes out meanwhile. */
	bool checking;
	bool in_check_cb;
	bool loss_gates; /* the loss to report is a failover's: gate it */
	timer_ent_t check_timer;
	size_t pending;     /* commands accepted whose callback has not run */
	cmdlist_t waiting;  /* lost replies waiting for a connection to resend */
	char run_id[RUN_ID_LEN + 1]; /* of the Redis last seen; "" before */
	const char *loss;            /* a data loss to report once a
	                              * connection is ready, or NULL */
	uint32_t rand_state;
	uv_timer_t close_timer; /* bounds rpool_close */
	bool closing;
	bool closed;            /* rpool_close finished (rpool_closed) */
	uint64_t unacked_total; /* replies delivered as not acknowledged */
	int wait_replicas; /* WAIT behind each command sent with wait; 0: none */
	int64_t wait_ms;
	uint64_t cmd_timeout_ms; /* COMMAND_TIMEOUT_MS, plus wait_ms */
	char wait_cmd[64];       /* WAIT N T in RESP */
	size_t wait_cmd_len;
	/* Routes pinned to a connection other than their own (rpool_cmd.c),
	 * by route: struct pin, malloc'd, freed with its last command. */
	htab_t pins;
	uint64_t seqs; /* the last command seq handed out */
	int batch_max;          /* rpool_callbacks_t's; < 2: no batches */
	bool batch_slots;       /* rpool_callbacks_t's */
	bool dirty;             /* some connection's outq is not empty */
	struct rpool_state *next_dirty; /* in the list rpool_flush goes through */
};

/* A route whose commands are on a connection that is not the one the
 * route picks (a fallback, or one they were sent again on): later
 * commands of the route go there too until every one of them is
 * answered. */
struct pin {
	htab_node_t node;
	uint32_t route;
	int conn;       /* index into conns */
	unsigned count; /* its commands not yet answered */
};


/* The scripts' SHA1s, as SCRIPT LOAD answered them: the same on every
 * Redis (the digest of the text), so shared by every pool; a new pool (a
 * cluster master that took over) can take calls before its own
 * connections loaded the scripts. "" until the first answer. */
extern char rp_sha[SCRIPT__COUNT][41];

/* rpool.c: the connections. */
/* c takes commands: READY, and hiredis is not tearing its context down. */
bool rp_usable(const rconn_t *c);
void rp_send_script_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv, script_id_t id);
/* The batch script of pool's batches. */
static inline script_id_t rp_batch_script(const rpool_t *pool)
{
	return pool->batch_slots ? SCRIPT_BATCH_SLOTS : SCRIPT_BATCH;
}
/* Whether pool's connections load script id (lua/batch_slots.lua needs
 * Redis 7: only where it is used). */
static inline bool rp_pool_loads(const rpool_t *pool, int id)
{
	return id != SCRIPT_BATCH_SLOTS || pool->batch_slots;
}

/* rpool_cmd.c: the commands. */
void rp_list_push(cmdlist_t *l, rcmd_t *cmd);
rcmd_t *rp_list_pop(cmdlist_t *l);
/* cmd's callback runs, once, with reply (NULL: failed); cmd is freed. */
void rp_deliver(rcmd_t *cmd, const redisReply *reply);
/* Sends cmd on the connection that serves its route; with none up, it
 * waits (retry_until) or fails at once. */
void rp_dispatch(rcmd_t *cmd);
/* Sends what c queued (now: a connection lost or reloading, a pool
 * closing). */
void rp_flush_conn(rconn_t *c);
/* The pool leaves rpool_flush's list (it closes). */
void rp_undirty(struct rpool_state *pool);

#endif
