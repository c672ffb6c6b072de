/*
 * lbclient.h - the C client of lockbrokerd: distributed locks, read-write
 * locks and semaphores kept in Redis, served over the broker's line-based
 * JSON protocol (protocol/PROTOCOL.md). C11, libc, POSIX sockets and
 * pthreads only.
 *
 * The API is blocking: every call sends its request and waits for the
 * answer. One lbc_client_t holds one connection (one broker session) and is
 * safe to share between threads: requests of different threads are
 * pipelined on the connection and each thread gets its own answer; a
 * waiting acquire never holds up another thread's release. The calling
 * thread is an acquire's reentrancy owner unless an owner is given: a
 * thread that acquires a lock it holds re-enters it (a new handle on the
 * same lease, count + 1) and never waits for itself, while threads
 * sharing a client exclude each other exactly as two processes would.
 *
 * Glossary (as in the broker): a session is one connection and what the
 * broker keeps for it; a lease is one grant of a lock, named by its token;
 * its fence is the grant's fencing token, strictly increasing per lock
 * name; an owner is the reentrancy identity inside a session.
 *
 * Lost leases: when the broker reports a lease lost (expired, gone,
 * redis_unavailable, max_hold) or the connection drops (disconnected), the
 * lease handle is marked lost at once, by whichever thread reads the
 * connection. lbc_poll() reads what the broker sent and tells whether a
 * lease was lost; lbc_lease_lost() asks one lease; lbc_release() of a lost
 * lease returns LBC_LOST instead of pretending the release succeeded.
 *
 * Reconnects: a dropped connection ends the session; the broker releases
 * its leases, so every lease bound to it is lost ("disconnected"). The next
 * call opens a new session (with a backoff after failed attempts). An old
 * token is never sent on the new session, except a detached lease's, which
 * outlives its session by design.
 *
 * Liveness: while the session holds a lease, a thread of the client pings
 * the broker and ends the session when the broker stays silent for longer
 * than a third of the shortest TTL held (at most 5 s, or keepalive_ms),
 * so that a frozen broker's holder learns of its loss before Redis frees
 * the lock (see liveness_check in lbc_options_t). The thread exists from
 * the first acquire of a bound lease to lbc_close; in a child of fork()
 * only async-signal-safe calls may follow until exec, as in any threaded
 * program.
 *
 * Ownership: lbc_connect returns a client the caller ends with lbc_close.
 * lbc_acquire hands out an lbc_lease_t the caller ends with lbc_release (or
 * lbc_lease_free); other results with a _free function are the caller's.
 * Every lbc_error_t *err may be NULL.
 *
 * The issue (19) named the calls lb_connect, lb_acquire, ...; they are
 * lbc_* here because the broker's own test harness already defines
 * lb_connect and lb_close, and a program may link both.
 */
#ifndef LBCLIENT_H
#define LBCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LBC_VERSION "0.1.0"

/* ---- status codes ------------------------------------------------------- */

/* One status per protocol error code (the wire code in the second column),
 * then the client's own. X(NAME, "wire code", "default message"). */
#define LBC_STATUS_MAP(X)                                                                  \
	X(OK, "ok", "success")                                                                 \
	X(BAD_JSON, "bad_json", "the line is not valid JSON")                                  \
	X(BAD_REQUEST, "bad_request", "not an object, or op missing or not a string")          \
	X(LINE_TOO_LONG, "line_too_long", "the request is longer than the broker's max_line")   \
	X(UNKNOWN_OP, "unknown_op", "op is not an op of this protocol")                        \
	X(INVALID_ARGUMENT, "invalid_argument", "an argument is missing, wrong or out of range") \
	X(UNAUTHORIZED, "unauthorized", "the broker wants hello with a valid secret")          \
	X(TIMEOUT, "timeout", "the lock could not be granted within wait_ms")                 \
	X(CANCELLED, "cancelled", "the acquire was cancelled")                                 \
	X(NOT_HELD, "not_held", "the lease is unknown, released, expired or lost")             \
	X(CONFLICT, "conflict", "the name has holders or waiters of another kind")             \
	X(UPGRADE_UNSUPPORTED, "upgrade_unsupported", "a shared holder asked for exclusive")   \
	X(LIMIT_EXCEEDED, "limit_exceeded", "a per-session or per-broker limit was hit")       \
	X(UNAVAILABLE, "unavailable", "Redis cannot be reached; the request had no effect")    \
	X(SHUTTING_DOWN, "shutting_down", "the broker is stopping")                            \
	X(INTERNAL, "internal", "the broker reported a bug")                                   \
	X(LOST, "lost", "the lease was lost")                                                  \
	X(DISCONNECTED, "disconnected", "no session: the broker could not be reached or the connection dropped") \
	X(IO, "io", "a system call failed or the broker sent bad data")                        \
	X(UNKNOWN_CODE, "unknown_code", "the broker answered an error code this client does not know")

typedef enum lbc_status {
#define LBC_STATUS_ENUM(name, code, msg) LBC_##name,
	LBC_STATUS_MAP(LBC_STATUS_ENUM)
#undef LBC_STATUS_ENUM
	LBC_STATUS_COUNT
} lbc_status;

/* Why a lease was lost: the broker's reasons, then the client's. */
typedef enum lbc_lost_reason {
	LBC_LOST_NONE = 0,          /* not lost */
	LBC_LOST_EXPIRED,           /* its TTL ran out unrenewed */
	LBC_LOST_GONE,              /* Redis no longer holds it */
	LBC_LOST_REDIS_UNAVAILABLE, /* renewals failed for longer than the TTL */
	LBC_LOST_MAX_HOLD,          /* max_hold_ms ran out */
	LBC_LOST_DISCONNECTED,      /* the connection (the session) ended */
	LBC_LOST_CLOSED,            /* lbc_close() ended the session */
	LBC_LOST_NOT_HELD,          /* release/extend answered not_held */
	LBC_LOST_OTHER,             /* a reason this client does not know */
} lbc_lost_reason;

/* What went wrong, for every call that can fail. */
typedef struct lbc_error {
	lbc_status status;
	char code[32];           /* the wire code ("not_held"), or the client's ("lost") */
	char message[256];       /* the broker's message, or the client's (never a secret) */
	bool from_broker;        /* the broker sent this error */
	int sys_errno;           /* errno behind LBC_IO / LBC_DISCONNECTED, else 0 */
	lbc_lost_reason lost_reason; /* for LBC_LOST */
} lbc_error_t;

/* "ok", "not_held", ..., "lost", "disconnected", "io". */
const char *lbc_status_code(lbc_status st);
/* A default message for st. */
const char *lbc_strerror(lbc_status st);
/* The status of a wire code; LBC_UNKNOWN_CODE for one this client does not
 * know. */
lbc_status lbc_status_from_code(const char *code);
/* "expired", "gone", "redis_unavailable", "max_hold", "disconnected",
 * "closed", "not_held", "other"; "" for LBC_LOST_NONE. */
const char *lbc_lost_reason_name(lbc_lost_reason r);

/* ---- connecting ---------------------------------------------------------- */

/* Tri-state flags (connect and acquire options): the default, on, or off. */
#define LBC_DEFAULT 0
#define LBC_ON 1
#define LBC_OFF (-1)

/* The longest silence of the broker the liveness check tolerates while a
 * lease is held, when keepalive_ms is not given (see liveness_check). */
#define LBC_LIVENESS_DEFAULT_MS 5000

typedef struct lbc_client lbc_client_t;
typedef struct lbc_lease lbc_lease_t;
typedef struct lbc_lock_info lbc_lock_info_t;

/* An event from the broker, or the client's "disconnected". */
typedef enum lbc_event_type {
	LBC_EVENT_LOST,         /* lease, lock, reason */
	LBC_EVENT_SHUTDOWN,     /* grace_ms: the broker is stopping */
	LBC_EVENT_CLOSING,      /* reason: the broker closes the connection */
	LBC_EVENT_DISCONNECTED, /* the client's: the session ended (reason: why) */
	LBC_EVENT_CHANGED,      /* watch, lock, info: a watched lock's state (lbc_watch) */
	LBC_EVENT_OTHER,        /* name: an event this client does not know (or a
	                           "changed" of a watch sent with lbc_request) */
} lbc_event_type;

typedef struct lbc_event {
	lbc_event_type type;
	const char *name;   /* the event's name ("lost", "half_closed", ...) */
	const char *lease;  /* LOST: the token */
	const char *lock;   /* LOST: the lock's name */
	const char *reason; /* LOST, CLOSING, DISCONNECTED */
	int64_t grace_ms;   /* SHUTDOWN */
	const char *line;   /* the broker's line as received (NULL for DISCONNECTED;
	                       for CHANGED after a reconnect: the watch's answer) */
	const char *watch;  /* CHANGED: the id lbc_watch gave */
	const lbc_lock_info_t *info; /* CHANGED: the lock's state (NULL if unreadable);
	                                lbc_leader_of reads the leader from it */
} lbc_event_t;

/* Options of lbc_connect; a zeroed struct (or NULL) means every default. */
typedef struct lbc_options {
	const char *auth;        /* the broker's secret, or NULL */
	const char *auth_file;   /* a file holding it, read at every connect (one
	                            trailing \n or \r\n is not part of it) */
	const char *client_label; /* shown by inspect; default "PROG[PID] lbclient/VERSION" */
	int keepalive_ms;        /* 0: off; 500..600000: the broker ends a session silent
	                            this long, the client pings every third of it and
	                            drops a connection whose ping is not answered in it
	                            (also while no lease is held); it also caps the
	                            liveness bound (instead of LBC_LIVENESS_DEFAULT_MS) */
	int connect_timeout_ms;  /* 0: 5000. lbc_connect makes one attempt (connect +
	                            hello) within it; a later call that finds no
	                            session retries within it, with backoff */
	int request_timeout_ms;  /* 0: 10000; < 0: none. How long an answer may take
	                            (a waiting acquire: wait_ms plus this; without
	                            wait_ms no limit). No answer in time drops the
	                            connection (the session's state is then unknown) */
	/* Called for every event, on the thread of the lbc_* call that read it
	 * (lbc_poll, any call waiting for its answer, or the client's liveness
	 * thread), after the lease it names is marked lost, with no lock held:
	 * it may call the client (but not lbc_close, which waits for that
	 * thread). One event at a time, in order. The strings live until it
	 * returns. */
	void (*on_event)(void *arg, const lbc_event_t *ev);
	void *event_arg;
	/* The client's own check that the broker is alive: LBC_DEFAULT or
	 * LBC_ON: on; LBC_OFF: off. While the session holds a lease bound to
	 * it (not detach), a broker silent for longer than the bound ends the
	 * session (every lease lost, "disconnected") before Redis can give a
	 * lock to another client: bound = a third of the shortest TTL held
	 * (the broker renews every TTL/3; Redis frees a lock a TTL after the
	 * last renewal), at most keepalive_ms or LBC_LIVENESS_DEFAULT_MS. It
	 * applies from the first grant on, shrinks with a shorter lease or an
	 * extend, relaxes when one ends. A thread of the client, started at
	 * the first acquire of such a lease and ended by lbc_close, pings when
	 * it heard nothing for a third of the bound, and reads the answer when
	 * no other thread reads: it works while the program does not call the
	 * library. A session without such a lease is not pinged (unless
	 * keepalive_ms). Off, no thread is started (unless keepalive_ms), and
	 * a frozen broker leaves the holder believing until it runs again. */
	int liveness_check;
} lbc_options_t;

/* The default broker URL, as lockctl: $LOCKBROKER_URL, else
 * unix:///run/lockbroker/lockbroker.sock if it exists, else
 * tcp://127.0.0.1:7380. The string is static or the environment's. */
const char *lbc_default_url(void);

/* Connects to url (tcp://HOST:PORT, tcp://[V6]:PORT or unix:///PATH; NULL
 * for lbc_default_url()) and says hello (label, auth, keepalive). Returns
 * the client, or NULL with err set: LBC_INVALID_ARGUMENT (bad URL or
 * option, unreadable auth_file), LBC_UNAUTHORIZED (wrong secret),
 * LBC_DISCONNECTED (cannot connect within connect_timeout_ms). Without a
 * secret, a broker that wants one still accepts the session: ping works and
 * the other ops answer LBC_UNAUTHORIZED (as lockctl). */
lbc_client_t *lbc_connect(const char *url, const lbc_options_t *opts, lbc_error_t *err);

/* Ends the session, ends (joins) the client's liveness thread and frees
 * the client; no event is delivered from then on. No other thread may be
 * inside a call on it. Leases still held become lost ("closed"); their
 * handles stay valid for lbc_lease_* and are freed by lbc_release (which
 * then returns LBC_LOST without touching the client) or lbc_lease_free.
 * Detached leases are not lost: they live on in the broker (keep their
 * token). Returns how many handles were marked lost. NULL is accepted. */
int lbc_close(lbc_client_t *c);

/* The connection's socket, for poll() next to other descriptors (readable:
 * call lbc_poll), or -1 while there is no session. It changes when the
 * client reconnects. Do not read or write it. The liveness thread may read
 * it too: a session it ends makes it readable (shut down), but a "lost"
 * event it happens to read is seen in lbc_lease_lost and on_event only;
 * so poll with a timeout, or wake yourself from on_event. */
int lbc_fd(lbc_client_t *c);

/* hello's answer on the current session. */
typedef struct lbc_server_info {
	char server[64];   /* "lockbroker/X.Y.Z" */
	int64_t proto;
	char session[64];
	char broker[64];
	int64_t max_line;  /* limits the client respects */
	int64_t ttl_ms_min, ttl_ms_max;
	int64_t max_leases_per_session, max_waiters_per_session, max_inflight;
	int64_t keepalive_ms_min, keepalive_ms_max;
	bool authorized;   /* false: hello said unauthorized (no secret given) */
} lbc_server_info_t;

/* Copies the current session's hello answer into out. LBC_DISCONNECTED
 * when there is no session (it does not connect). */
lbc_status lbc_server_info(lbc_client_t *c, lbc_server_info_t *out, lbc_error_t *err);

/* ---- locks ----------------------------------------------------------------- */

typedef enum lbc_mode { LBC_EXCLUSIVE = 0, LBC_SHARED = 1 } lbc_mode;

/* wait_ms: 0 waits until granted (the protocol's "absent"). */
#define LBC_WAIT_FOREVER 0
#define LBC_NO_WAIT (-1) /* try once: the protocol's wait_ms 0 */

/* A way to give up a waiting acquire from another thread or a signal
 * handler (lbc_cancel_fire is async-signal-safe). */
typedef struct lbc_cancel lbc_cancel_t;
lbc_cancel_t *lbc_cancel_new(void); /* NULL if out of descriptors */
void lbc_cancel_fire(lbc_cancel_t *t);
bool lbc_cancel_fired(const lbc_cancel_t *t);
void lbc_cancel_free(lbc_cancel_t *t);

/* Options of lbc_acquire; a zeroed struct (or NULL) means: exclusive, wait
 * until granted, the broker's TTL, watchdog on, not detached. */
typedef struct lbc_acquire_opts {
	lbc_mode mode;          /* exclusive or shared (shared holders coexist) */
	int64_t limit;          /* > 0: a semaphore with limit permits (mode must be exclusive) */
	int64_t ttl_ms;         /* 0: the broker's default (30000); 100..86400000 */
	int64_t wait_ms;        /* 0 (LBC_WAIT_FOREVER): until granted; LBC_NO_WAIT:
	                           try once; > 0: give up after that long (LBC_TIMEOUT) */
	int watchdog;           /* LBC_DEFAULT (on unless detach), LBC_ON, LBC_OFF */
	int fair;               /* LBC_DEFAULT (on), LBC_ON, LBC_OFF */
	bool detach;            /* the lease survives the session */
	int64_t max_hold_ms;    /* 0: no cap; else the lease ends this long after its grant */
	const char *owner;      /* NULL: the calling thread ("lbc#tN": its acquires
	                           re-enter each other); calls with the same owner
	                           re-enter, on any thread */
	lbc_cancel_t *cancel;   /* NULL, or a token that gives the wait up: the
	                           acquire answers LBC_CANCELLED (a grant that crossed
	                           the cancel is released) */
	const char *value;      /* NULL: none; an exclusive holder's value (an
	                           election's leader's address): inspect shows it */
	int64_t lock_delay_ms;  /* 0: none; ended without a release (session end,
	                           lost, TTL), the lock stays held back this long */
} lbc_acquire_opts_t;

/* Acquires lock name. LBC_OK with *out (the caller's: lbc_release it), or
 * the broker's error (LBC_TIMEOUT, LBC_CONFLICT, ...) with its message in
 * err, or LBC_INVALID_ARGUMENT without asking the broker (NULL arguments, a
 * name that is empty, over 512 bytes, not UTF-8 or holds control
 * characters; an owner over 128 bytes; limit with shared), or
 * LBC_DISCONNECTED. A reentrant acquire returns a new handle on the same
 * token with count + 1; each handle releases one level. */
lbc_status lbc_acquire(lbc_client_t *c, const char *name, const lbc_acquire_opts_t *opts,
                       lbc_lease_t **out, lbc_error_t *err);

/* Releases one level of the lease and frees the handle, whatever the
 * outcome (but LBC_INVALID_ARGUMENT for NULL or another client's lease,
 * which frees nothing). LBC_OK (*count_left, if not NULL, the levels left:
 * 0 frees the lock), or LBC_LOST (err->lost_reason says why) when the lease
 * was lost before or is answered not_held, or another error (the level may
 * still be held: LBC_UNAVAILABLE means the release had no effect; the
 * session's end releases it, or lbc_release_token with a copy of the
 * token). After lbc_close the client is not touched: LBC_LOST, "closed"
 * (a detached lease: LBC_DISCONNECTED; release it by token). */
lbc_status lbc_release(lbc_client_t *c, lbc_lease_t *lease, int64_t *count_left,
                       lbc_error_t *err);

/* Sets the lease's remaining lifetime to ttl_ms (the way to keep a
 * watchdog-off lease alive). *new_ttl_ms (if not NULL): the lifetime it
 * now has (less where max_hold_ms ends it sooner). LBC_LOST as release. */
lbc_status lbc_extend(lbc_client_t *c, lbc_lease_t *lease, int64_t ttl_ms, int64_t *new_ttl_ms,
                      lbc_error_t *err);

/* An exclusive lease's new published value (an election's leader's)
 * without a new term: *fence (if not NULL) is the term. LBC_NOT_HELD /
 * LBC_LOST as lbc_extend; LBC_INVALID_ARGUMENT for a lease that is not
 * exclusive or a value over 4096 bytes. */
lbc_status lbc_proclaim(lbc_client_t *c, lbc_lease_t *lease, const char *value, int64_t *fence,
                        lbc_error_t *err);

/* Watches lock name (the broker's watch) until lbc_unwatch or lbc_close,
 * across sessions. *state (if not NULL; the caller's: lbc_lock_info_free)
 * is the lock's state now; *watch_id (if not NULL; the caller frees it)
 * names the watch. Each change then comes to opts.on_event as an
 * LBC_EVENT_CHANGED (ev->watch, ev->lock, ev->info: the state after it;
 * fences never go down), read by lbc_poll, which returns once one came.
 * A change right behind the watch's answer may reach on_event before
 * lbc_watch returns: *state is the state the watch began with, the
 * events are newer. When the session ends (a dropped connection, a
 * broker restart) the watch goes on: lbc_poll opens a new session (with the
 * reconnect backoff) and watches again, and the state read afresh comes as
 * one more LBC_EVENT_CHANGED (after LBC_EVENT_DISCONNECTED). Without
 * on_event the watch is kept but its changes are not seen. */
lbc_status lbc_watch(lbc_client_t *c, const char *name, lbc_lock_info_t **state,
                     char **watch_id, lbc_error_t *err);
/* Ends watch_id: LBC_OK, or LBC_NOT_HELD for an id this client does not
 * keep (unwatched already). No event of it is delivered after it returns
 * (but one that another thread's call is delivering at that moment). */
lbc_status lbc_unwatch(lbc_client_t *c, const char *watch_id, lbc_error_t *err);

/* ---- leader election ---------------------------------------------------------- */

/* An election is an exclusive lock whose holder publishes a value (its
 * address): the leader is the holder, the term is the lease's fence. */

/* Campaigns in election name, publishing value (NULL: none; at most 4096
 * bytes): waits until this caller leads, then LBC_OK with *term, the
 * leadership's lease (lbc_lease_fence: the term). opts as lbc_acquire's
 * (mode, limit and value are the campaign's own; wait_ms bounds the wait:
 * LBC_TIMEOUT; cancel: LBC_CANCELLED). A dropped connection, a broker
 * restart or Redis down while waiting do not end the campaign: the client
 * reconnects with its backoff and campaigns again (wait_ms LBC_NO_WAIT:
 * one try, which returns them). Leadership ends with lbc_resign, or with
 * the lease's loss (lbc_poll > 0, lbc_lease_lost(*term)): call
 * lbc_campaign again to stand again. */
lbc_status lbc_campaign(lbc_client_t *c, const char *name, const char *value,
                        const lbc_acquire_opts_t *opts, lbc_lease_t **term, lbc_error_t *err);
/* Ends the leadership (releases the term's lease and frees it): as
 * lbc_release (LBC_LOST when it was lost already). */
lbc_status lbc_resign(lbc_client_t *c, lbc_lease_t *term, lbc_error_t *err);

#define LBC_VALUE_MAX 4096

/* Who leads an election. */
typedef struct lbc_leader {
	bool leading;                    /* somebody leads (false: nobody) */
	int64_t term;                    /* the leader's fence */
	bool has_value;                  /* the leader published a value */
	char value[LBC_VALUE_MAX + 1];
	char client[257];                /* the leader's client label */
} lbc_leader_t;

/* Who leads election name now (out->leading false: nobody). */
lbc_status lbc_leader(lbc_client_t *c, const char *name, lbc_leader_t *out, lbc_error_t *err);
/* The leader a lock's state shows (an LBC_EVENT_CHANGED's info); returns
 * out->leading. */
bool lbc_leader_of(const lbc_lock_info_t *info, lbc_leader_t *out);
/* Observes election name: *now (if not NULL) is who leads now, and every
 * change (a new term, a proclaim, nobody leading) comes as an
 * LBC_EVENT_CHANGED whose info lbc_leader_of reads; it goes on across
 * sessions as lbc_watch (which it is). *watch_id as lbc_watch's. */
lbc_status lbc_observe(lbc_client_t *c, const char *name, lbc_leader_t *now, char **watch_id,
                       lbc_error_t *err);

/* ---- all or nothing ------------------------------------------------------------- */

/* One lock of lbc_lock_all: exclusive unless shared, a semaphore's permit
 * when limit > 0. */
typedef struct lbc_lock_spec {
	const char *name;
	lbc_mode mode;
	int64_t limit;
} lbc_lock_spec_t;

#define LBC_LOCK_ALL_MAX 64

/* Takes every lock of locks[0..n) or none (the broker's acquire_all):
 * LBC_OK with out[0..n) (the caller's; each an ordinary lease, released,
 * extended and lost one by one) in the order of locks. The broker takes
 * them in one total order, so callers asking overlapping sets in any
 * order never deadlock. opts as lbc_acquire's for all of them (ttl_ms,
 * wait_ms, watchdog, fair, detach, max_hold_ms, lock_delay_ms, owner,
 * cancel); mode, limit and value are not taken from opts (value:
 * LBC_INVALID_ARGUMENT). On a timeout, a cancel, an error or a dropped
 * connection the broker gives back what it took: nothing is held. n:
 * 1..LBC_LOCK_ALL_MAX, names distinct (else LBC_INVALID_ARGUMENT, from the
 * broker for a repeated name). */
lbc_status lbc_lock_all(lbc_client_t *c, const lbc_lock_spec_t *locks, size_t n,
                        const lbc_acquire_opts_t *opts, lbc_lease_t **out, lbc_error_t *err);

/* Drops a handle without releasing anything (a detached lease whose token
 * you keep; a lease the session's end will release). NULL is accepted. */
void lbc_lease_free(lbc_lease_t *lease);

/* The grant. These never block and may be called from any thread. */
int64_t lbc_lease_fence(const lbc_lease_t *l);
const char *lbc_lease_token(const lbc_lease_t *l);
const char *lbc_lease_name(const lbc_lease_t *l);
const char *lbc_lease_mode(const lbc_lease_t *l); /* "exclusive", "shared", "permit" */
int64_t lbc_lease_count(const lbc_lease_t *l);    /* the reentrancy count this acquire reached */
int64_t lbc_lease_ttl_ms(const lbc_lease_t *l);   /* as granted or last extended */
bool lbc_lease_detached(const lbc_lease_t *l);
/* Whether the lease was lost (as far as this client has read: call
 * lbc_poll to read what the broker sent), and why. */
bool lbc_lease_lost(const lbc_lease_t *l);
lbc_lost_reason lbc_lease_lost_reason(const lbc_lease_t *l);
/* LBC_OK while not lost, else LBC_LOST with the reason in err. */
lbc_status lbc_lease_check(const lbc_lease_t *l, lbc_error_t *err);

/* Reads what the broker sent (events, answers for other threads) for up to
 * timeout_ms (0: only what has arrived; < 0: until a lease is lost). Returns
 * the number of lease handles found lost since the previous lbc_poll (by
 * this call or any other), so > 0 means "stop using the resource of the
 * leases lbc_lease_lost() names"; -1 with err for bad arguments. It also
 * returns once a change of a watched lock came (delivered by it, or by
 * another call). Without a session it returns at once, unless the client
 * keeps a watch (lbc_watch): then it opens one (an attempt when the
 * reconnect backoff allows, within timeout_ms or 100 ms at least) and
 * watches again. */
int lbc_poll(lbc_client_t *c, int timeout_ms, lbc_error_t *err);

/* ---- by token (detached leases, lockctl's release/extend TOKEN) ----------- */

lbc_status lbc_release_token(lbc_client_t *c, const char *token, int64_t *count_left,
                             lbc_error_t *err);
lbc_status lbc_extend_token(lbc_client_t *c, const char *token, int64_t ttl_ms,
                            int64_t *new_ttl_ms, lbc_error_t *err);

/* ---- inspect, leases, stats, ping ------------------------------------------ */

typedef struct lbc_holder {
	char mode[16];  /* "exclusive", "shared", "permit" */
	int64_t ttl_ms;
	int64_t count;
	char *owner;
	char *client;
	char *value; /* an exclusive holder's value, NULL for none */
} lbc_holder_t;

struct lbc_lock_info {
	char *lock;
	char state[16];     /* "free", "exclusive", "shared", "semaphore" */
	int64_t limit;      /* 0: not a semaphore (null) */
	lbc_holder_t *holders;
	size_t n_holders;
	int64_t waiters;
	bool has_fence;     /* false: Redis keeps no fence for the name (null) */
	int64_t fence;
	int64_t delay_ms;   /* state "delayed": the lock delay left */
};

/* A lock's state (never tokens). *out is the caller's: lbc_lock_info_free. */
lbc_status lbc_inspect(lbc_client_t *c, const char *name, lbc_lock_info_t **out,
                       lbc_error_t *err);
void lbc_lock_info_free(lbc_lock_info_t *info);

typedef struct lbc_lease_info {
	char token[129];
	char *lock;
	char mode[16];
	int64_t ttl_ms;
	int64_t count;
	int64_t fence;
} lbc_lease_info_t;

/* This session's leases. *out (n entries) is the caller's: lbc_leases_free. */
lbc_status lbc_leases(lbc_client_t *c, lbc_lease_info_t **out, size_t *n, lbc_error_t *err);
void lbc_leases_free(lbc_lease_info_t *leases, size_t n);

/* The broker's counters that every broker has (-1 for one missing). */
typedef struct lbc_stats {
	int64_t uptime_s, connections, sessions, leases, waiters;
	int64_t acquired_total, released_total, timeouts_total, lost_total;
	bool redis_up;
	char redis_mode[16]; /* "single", "sentinel", "cluster", "redlock", or "" */
} lbc_stats_t;

lbc_status lbc_stats(lbc_client_t *c, lbc_stats_t *out, lbc_error_t *err);

/* ping; *redis_up (if not NULL): the broker's Redis is up. */
lbc_status lbc_ping(lbc_client_t *c, bool *redis_up, lbc_error_t *err);

/* Any op, for what this library does not wrap (or a caller that wants the
 * broker's JSON, as lockctl --json). fields_json: NULL, or the text of a
 * JSON object whose members are added to {"id":N,"op":OP}; it may not hold
 * "id" (nor "op" unless op is NULL). *answer (if not NULL; the caller
 * frees it): the broker's answer line, also for an error answer. The
 * status is the answer's (LBC_OK when ok is true). A lease this call
 * acquires is not tracked by the client. */
lbc_status lbc_request(lbc_client_t *c, const char *op, const char *fields_json, char **answer,
                       lbc_error_t *err);

#ifdef __cplusplus
}
#endif

#endif
