/*
 * internal.h - what the files of the C client share and do not export:
 * the JSON reader and writer (json.c), URLs and secrets (url.c), the
 * socket (sock.c), errors (status.c), and the client's state (client.c,
 * lease.c, ops.c).
 *
 * Every symbol that leaves a file starts with lbc_, so the library links
 * next to jansson, hiredis and the broker's own code (lockctl does).
 */
#ifndef LBC_INTERNAL_H
#define LBC_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lbclient.h"

#define LBC_NAME_MAX 512        /* lock names: 1..512 bytes */
#define LBC_OWNER_MAX 128       /* owner and client label */
#define LBC_TOKEN_MAX 128       /* lease tokens we keep */
#define LBC_MAX_ANSWER (16u << 20) /* longest line accepted from the broker */
#define LBC_DEFAULT_UNIX "/run/lockbroker/lockbroker.sock"
#define LBC_DEFAULT_TCP "tcp://127.0.0.1:7380"

/* ---- json.c: a strict reader into a flat tree, and a writer --------------- */

/* Node kinds. Integers are numbers written without '.', 'e' or 'E' that fit
 * int64; any other number is LBC_J_NUM (its value is not kept). */
enum { LBC_J_NULL, LBC_J_FALSE, LBC_J_TRUE, LBC_J_INT, LBC_J_NUM, LBC_J_STR, LBC_J_ARR, LBC_J_OBJ };

#define LBC_JNONE UINT32_MAX /* "no such node" */

/* One value. Nodes live in one array, in document order; a container's
 * children are linked by next (LBC_JNONE ends), its first child is first.
 * A member of an object carries its key. Strings (values and keys) are
 * decoded into the document's string pool, NUL-terminated (they may also
 * hold a NUL: use the length). */
typedef struct lbc_jnode {
	uint8_t type;
	uint32_t next;
	uint32_t key_off, key_len;
	union {
		int64_t i;
		struct {
			uint32_t off, len;
		} s;
		struct {
			uint32_t first, n;
		} c;
	} v;
} lbc_jnode_t;

typedef struct lbc_jdoc {
	lbc_jnode_t *nodes;
	uint32_t n, cap;
	char *pool;
	size_t plen, pcap;
} lbc_jdoc_t;

/* Parses exactly one JSON value (surrounding whitespace allowed) from
 * s[0..n): strict RFC 8259, valid UTF-8, no duplicate keys, depth <= 64.
 * Returns 0, or -1 with a message in errbuf. d is usable with
 * lbc_json_free either way. */
int lbc_json_parse(lbc_jdoc_t *d, const char *s, size_t n, char *errbuf, size_t errlen);
void lbc_json_free(lbc_jdoc_t *d);
/* The member key of object node obj, or LBC_JNONE. */
uint32_t lbc_json_get(const lbc_jdoc_t *d, uint32_t obj, const char *key);
int lbc_json_type(const lbc_jdoc_t *d, uint32_t node); /* -1 for LBC_JNONE */
/* A string member's value, or NULL (absent or not a string); *len if wanted. */
const char *lbc_json_str(const lbc_jdoc_t *d, uint32_t obj, const char *key, size_t *len);
/* An integer member: 0 with *out, -1 when absent or not an integer. */
int lbc_json_int(const lbc_jdoc_t *d, uint32_t obj, const char *key, int64_t *out);
/* true when the member is JSON true. */
bool lbc_json_true(const lbc_jdoc_t *d, uint32_t obj, const char *key);
/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
bool lbc_utf8_valid(const char *s, size_t n);

/* A growing buffer holding one request line. bad is set (sticky) when a
 * string was not valid UTF-8. */
typedef struct lbc_jw {
	char *buf;
	size_t len, cap;
	bool bad;
} lbc_jw_t;

void lbc_jw_init(lbc_jw_t *w);
void lbc_jw_free(lbc_jw_t *w);
void lbc_jw_raw(lbc_jw_t *w, const char *s, size_t n);
/* `"key":` preceded by a comma unless the object was just opened. */
void lbc_jw_key(lbc_jw_t *w, const char *key);
void lbc_jw_str(lbc_jw_t *w, const char *s, size_t n);
void lbc_jw_int(lbc_jw_t *w, int64_t v);
void lbc_jw_kstr(lbc_jw_t *w, const char *key, const char *s);
void lbc_jw_kint(lbc_jw_t *w, const char *key, int64_t v);
void lbc_jw_kbool(lbc_jw_t *w, const char *key, bool v);

/* ---- url.c ------------------------------------------------------------------ */

typedef struct lbc_addr {
	bool is_unix;
	char host[256]; /* tcp: without brackets */
	int port;
	char path[108]; /* unix */
} lbc_addr_t;

/* Parses tcp://HOST:PORT, tcp://[V6]:PORT or unix:///PATH. 0, or -1 with a
 * message. */
int lbc_url_parse(const char *url, lbc_addr_t *a, char *errbuf, size_t errlen);
/* Reads a secret file as the broker does (one trailing \n or \r\n dropped;
 * at most 64 KiB; UTF-8 without NUL). 0 with *out (malloc'd), or -1 with a
 * message. */
int lbc_url_read_secret(const char *path, char **out, char *errbuf, size_t errlen);

/* ---- sock.c ----------------------------------------------------------------- */

int64_t lbc_now_ms(void);
/* poll()'s timeout until deadline (lbc_now_ms based; < 0: none). */
int lbc_poll_ms(int64_t deadline);
/* How long one blocking recv() waits before the reader looks at its
 * deadline again (deadlines nearer than this use poll()). */
#define LBC_RECV_SLICE_MS 1000
/* A connected, close-on-exec, blocking socket with SO_RCVTIMEO set to
 * LBC_RECV_SLICE_MS (write with lbc_sock_write, wait with poll and
 * MSG_DONTWAIT, or block in recv), or -1 with *err_no
 * (ETIMEDOUT when the deadline passed) and a message. */
int lbc_sock_open(const lbc_addr_t *a, int64_t deadline, int *err_no, char *errbuf,
                  size_t errlen);
/* Writes all of buf before deadline. 0, or an errno value. */
int lbc_sock_write(int fd, const char *buf, size_t len, int64_t deadline);

/* ---- status.c --------------------------------------------------------------- */

/* Fills err (if not NULL) and returns st. msg NULL: the default message. */
lbc_status lbc_set_error(lbc_error_t *err, lbc_status st, const char *msg);
lbc_status lbc_set_errorf(lbc_error_t *err, lbc_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fills err from a broker error answer {"ok":false,"error":{...}} (doc);
 * returns its status (LBC_IO if the answer has no usable error). */
lbc_status lbc_set_broker_error(lbc_error_t *err, const lbc_jdoc_t *doc);
lbc_lost_reason lbc_lost_reason_from(const char *s);
/* printable ASCII of s, at most 80 bytes, into buf (>= 84 bytes) */
const char *lbc_masked(const char *s, char *buf);

/* ---- client.c: sessions and requests ----------------------------------------- */

/* One request waiting for its answer; lives on the caller's stack, linked
 * in the client's list while registered. */
typedef struct lbc_pending {
	int64_t id;               /* 0: an lbc_poll waiter, never answered */
	uint64_t gen;             /* the session it was sent on */
	bool done;                /* answered, or failed (status) */
	bool waiting;             /* its thread sleeps on cv */
	bool is_acquire;          /* the reader makes the lease handle */
	bool no_connect;          /* fail rather than open a session */
	bool cancel_sent;         /* the wait was given up (lbc_call sent cancel) */
	lbc_status status;        /* LBC_OK when answered, else why not */
	char message[160];        /* for status != LBC_OK */
	lbc_jdoc_t doc;           /* the answer, parsed (the caller's once done) */
	char *line;               /* the raw answer, when want_line */
	bool want_line;
	lbc_lease_t *lease;       /* is_acquire and granted: the new handle */
	bool lease_detached;      /* the acquire asked detach */
	bool is_acquire_all;      /* the reader makes the handles of leases[] */
	lbc_lease_t **all;        /* is_acquire_all and granted: nall handles */
	size_t nall;
	struct lbc_cwatch *watch; /* a watch request: the reader records its id */
	bool rewatch;             /* ... and queues the answer as a change */
	uint64_t only_gen;        /* not 0: sent on this session or not at all */
	pthread_cond_t cv;
	struct lbc_pending *next;
} lbc_pending_t;

struct lbc_lease {
	char token[LBC_TOKEN_MAX + 1];
	char *name;
	char mode[12];
	int64_t fence;
	int64_t count;
	_Atomic int64_t ttl_ms;
	bool detached;
	uint64_t gen;             /* the session that granted it */
	_Atomic int lost;         /* lbc_lost_reason */
	lbc_client_t *client;     /* NULL once the client is closed */
	struct lbc_lease *prev, *next; /* the client's list (under its mu) */
};

/* A watch the client keeps across sessions (lbc_watch): id is the
 * caller's, fixed; bid is the broker's, valid on session gen only. A
 * watch whose gen is not the current session's is watched again by
 * lbc_poll (lbc_watches_resume). refs: the client's list holds one, a
 * watch request in flight another; freed at 0 (lbc_cwatch_put). */
typedef struct lbc_cwatch {
	char id[24];
	char *name;
	char *bid;         /* NULL until a watch answer named it */
	uint64_t gen;      /* the session bid belongs to; 0: none */
	bool linked;       /* in the client's list (false once unwatched) */
	bool inflight;     /* a (re)watch request is out */
	bool ending;       /* lbc_unwatch runs: its events are dropped */
	int64_t retry_at;  /* a re-watch the broker refused: not before this */
	int refs;
	struct lbc_cwatch *next;
} lbc_cwatch_t;

/* A request line built for op with id (the writer holds `{"id":N,"op":"OP"`
 * and the caller adds fields, then lbc_req_finish). */
void lbc_req_begin(lbc_jw_t *w, int64_t id, const char *op);
void lbc_req_finish(lbc_jw_t *w);

/* Takes a fresh request id. */
int64_t lbc_next_id(lbc_client_t *c);
/* The calling thread's owner ("lbc#tN"): the default owner of an acquire. */
void lbc_thread_owner(char *buf, size_t len);

/* Sends w (built with id p->id) and waits up to timeout_ms (< 0: no
 * limit) for its answer, connecting first when there is no session (unless
 * p->no_connect). Giving up at the deadline drops the session. cancel (only
 * for acquires): when it fires, cancel is sent and the acquire's answer
 * taken as it comes (p->cancel_sent set). On LBC_OK p->doc holds the answer
 * (ok or not). The caller calls lbc_call_done(p) after, in every case. */
lbc_status lbc_call(lbc_client_t *c, lbc_pending_t *p, lbc_jw_t *w, int64_t timeout_ms,
                    lbc_cancel_t *cancel, lbc_error_t *err);
void lbc_pending_init(lbc_pending_t *p, int64_t id);
void lbc_call_done(lbc_pending_t *p);
/* request_timeout_ms, -1 for none. */
int64_t lbc_request_timeout(const lbc_client_t *c);
/* The read end of a cancel token's pipe (lease.c). */
int lbc_cancel_rfd(const lbc_cancel_t *t);

/* The client's lock, for lease.c (lease lists, lost marks). */
void lbc_lock(lbc_client_t *c);
void lbc_unlock(lbc_client_t *c);
/* Under the lock: marks every handle of token lost (reason), once each;
 * returns how many it marked. */
int lbc_mark_lost_locked(lbc_client_t *c, const char *token, lbc_lost_reason r);
/* Under the lock: links l into c's list. */
void lbc_link_lease_locked(lbc_client_t *c, lbc_lease_t *l);
/* Under the lock: unlinks l from its client. */
void lbc_unlink_lease_locked(lbc_lease_t *l);
/* Runs queued event callbacks (no lock held). */
void lbc_deliver_events(lbc_client_t *c);
/* Starts the liveness thread unless it runs or the client has neither the
 * liveness check nor keepalive_ms (lbc_acquire of a bound lease,
 * lbc_connect with keepalive_ms). LBC_OK, or LBC_IO when it cannot. */
lbc_status lbc_liveness_start(lbc_client_t *c, lbc_error_t *err);
/* A held lease's TTL changed to ttl_ms (extend): the liveness bound
 * follows. */
void lbc_bound_changed(lbc_client_t *c, int64_t ttl_ms);

/* Watches (see lbc_cwatch_t), under the client's lock: a new one for
 * name, linked and with one reference for the caller's request. */
lbc_cwatch_t *lbc_cwatch_new_locked(lbc_client_t *c, const char *name);
/* The watch the caller calls id, or NULL. */
lbc_cwatch_t *lbc_cwatch_find_locked(lbc_client_t *c, const char *id);
/* Unlinks w (it stays alive while a request holds it). */
void lbc_cwatch_unlink_locked(lbc_client_t *c, lbc_cwatch_t *w);
/* Drops one reference. */
void lbc_cwatch_put_locked(lbc_cwatch_t *w);
/* The next linked watch not watched on the current session, with a
 * reference taken and inflight set, or NULL. */
lbc_cwatch_t *lbc_cwatch_stale_locked(lbc_client_t *c);
/* Whether the client keeps any watch. */
bool lbc_has_watches_locked(const lbc_client_t *c);
/* The current session's number, 0 while there is none. */
uint64_t lbc_session_gen_locked(const lbc_client_t *c);
/* Queues a "changed" event for w from a line of the broker (an event, or
 * the answer of a re-watch: the state read afresh). */
void lbc_queue_changed_locked(lbc_client_t *c, const lbc_cwatch_t *w, const char *line,
                              size_t len);
/* Waits until the session is up, connecting (one attempt each time the
 * reconnect backoff allows) until deadline (< 0: none). Lock held. */
bool lbc_session_wait_locked(lbc_client_t *c, int64_t deadline);

/* ---- lease.c ------------------------------------------------------------------ */

/* Under the client's lock (the reader): a handle for the grant in object
 * node obj of doc (an acquire's answer: 0; an acquire_all's: an entry of
 * leases), linked into c's list; NULL if it lacks lease or fence. */
lbc_lease_t *lbc_lease_from_answer(lbc_client_t *c, const lbc_jdoc_t *d, uint32_t obj,
                                   uint64_t gen, bool detached);
/* The lbc_acquire_opts_t checks both acquires share: NULL c, mode, limit,
 * TTLs, tri-states, owner (copied into owner, or a fresh one), a fired
 * cancel. LBC_OK, or the error. */
lbc_status lbc_acquire_opts_check(lbc_client_t *c, const lbc_acquire_opts_t *o, char *owner,
                                  size_t owner_len, lbc_error_t *err);
/* Writes the options every acquire carries (ttl, wait, watchdog, fair,
 * detach, max_hold, lock_delay, owner). */
void lbc_acquire_opts_write(lbc_jw_t *w, const lbc_acquire_opts_t *o, const char *owner);
/* The answer timeout of an acquire that may wait wait_ms. */
int64_t lbc_acquire_timeout(lbc_client_t *c, int64_t wait_ms);

/* ---- coord.c ------------------------------------------------------------------ */

/* lbc_poll's part: with watches kept, the session is opened again (with
 * the backoff) and every watch not watched on it is watched again, each
 * answer queued as a "changed" event. Lock not held. */
void lbc_watches_resume(lbc_client_t *c, int64_t deadline);

/* ---- ops.c -------------------------------------------------------------------- */

/* A lock's state from object node obj of d (inspect's answer, a watch
 * answer, a changed event); the caller's (lbc_lock_info_free). */
lbc_lock_info_t *lbc_lock_info_from(const lbc_jdoc_t *d, uint32_t obj);

/* Checks a lock name as the broker would: 1..512 bytes of UTF-8 without
 * C0 controls or DEL. */
bool lbc_name_valid(const char *name);

#endif
