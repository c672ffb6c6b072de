/*
 * Integration-test harness: real redis-server and lockbrokerd processes, and
 * a blocking line-protocol client, for Criterion tests.
 *
 * Each Criterion test runs in its own worker process. A test declares
 *
 *     Test(suite, name, .init = lb_setup, .fini = lb_teardown, .timeout = 30)
 *
 * (or LB_TEST(suite, name, timeout) which says the same), starts what it needs
 * with lb_redis_start() / lb_broker_start(), and ends with lb_end(), which
 * stops every broker and ASSERTS that each exited with status 0 (the broker is
 * built with LeakSanitizer, so a leak fails the test there).
 *
 * Ownership: everything the harness hands out (clients, brokers, redis
 * servers, JSON values returned by lb_call and friends, strings from lb_dump)
 * belongs to the harness and is freed by lb_teardown(); tests never free
 * them. lb_teardown() also kills whatever is still running (without asserts:
 * Criterion ignores assertion failures in .fini), closes every client and
 * removes the temp dir. Children get PR_SET_PDEATHSIG, so a test killed by
 * its timeout does not leave processes behind either.
 *
 * Environment: LB_BROKER_BIN (default build/san/lockbrokerd),
 * LB_REDIS_BIN (default redis-server), LB_KEEP_TMP=1 keeps the temp dir and
 * prints its path (logs of redis and every broker are there).
 */
#ifndef LB_TESTS_INTEGRATION_HARNESS_H
#define LB_TESTS_INTEGRATION_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#define LB_TEST(suite, name, secs) \
    Test(suite, name, .init = lb_setup, .fini = lb_teardown, .timeout = (secs))

/* Default time a call waits for its response. */
#define LB_CALL_TIMEOUT_MS 5000

/* ---- fixture ------------------------------------------------------------ */

void lb_setup(void);
void lb_teardown(void);
/* Stop every broker (asserting exit status 0) and every redis-server. */
void lb_end(void);
const char *lb_tmpdir(void);

/* ---- time ----------------------------------------------------------------- */

int64_t lb_now_ms(void);
void lb_sleep_ms(int64_t ms);

/* ---- ports ---------------------------------------------------------------- */

/* A TCP port of 127.0.0.1 that was free a moment ago (bind to port 0, then
 * close): may be taken again before it is used. Fails the test if none. */
int lb_free_tcp_port(void);
/* The same without asserting (usable outside a test, e.g. in a Criterion
 * report hook): lo/hi 0 pick as above; otherwise a free port in [lo, hi),
 * which lets a caller stay out of the kernel's ephemeral range (a process
 * restarted on the same port then never finds it taken by some outgoing
 * connection). Returns -1 (errno set) if none. */
int lb_try_free_tcp_port(int lo, int hi);

/* ---- redis-server --------------------------------------------------------- */

typedef struct lb_redis lb_redis;

/* Start a private redis-server: on a Unix socket in the temp dir, or on a free
 * TCP port of 127.0.0.1 when tcp is true. Waits until it answers PING. */
lb_redis *lb_redis_start(bool tcp);
/* The same on TCP with --cluster-enabled yes: one node, no slots assigned
 * (CLUSTER KEYSLOT answers; data commands do not). */
lb_redis *lb_redis_start_cluster_node(void);
/* SIGTERM, wait (5 s, then SIGKILL). */
void lb_redis_stop(lb_redis *r);
/* Start again on the same socket / port (empty: no persistence). */
void lb_redis_restart(lb_redis *r);
/* The URL to give the broker's --redis. */
const char *lb_redis_url(const lb_redis *r);
/* The redis-server's pid (to freeze it with SIGSTOP); 0 when stopped. */
pid_t lb_redis_pid(const lb_redis *r);
/* A sync hiredis connection (made on demand, remade after a restart). */
redisContext *lb_redis_ctx(lb_redis *r);
/* Run a command; returns the reply (owned by the harness) or fails. */
redisReply *lb_redis_cmd(lb_redis *r, const char *fmt, ...);
/* Number of keys matching PREFIX{NAME}* (name glob-escaped). */
size_t lb_redis_count_lock_keys(lb_redis *r, const char *prefix, const char *name);
/* Delete every key matching PREFIX{NAME}*; returns how many were deleted. */
size_t lb_redis_del_lock_keys(lb_redis *r, const char *prefix, const char *name);
/* Assert that every key matching PREFIX{NAME}* has a TTL (nothing kept
 * forever after the lock is free). */
void lb_redis_assert_lock_keys_expire(lb_redis *r, const char *prefix, const char *name);
void lb_redis_flushall(lb_redis *r);
/* The number after field in an INFO reply (e.g. "cmdstat_evalsha:calls="
 * in INFO commandstats); 0 when field is not there. Asserts info is the
 * text of an INFO. */
long long lb_info_number(const redisReply *info, const char *field);
/* Runs a shell command; returns its stdout (a static buffer, until the
 * next call) and its exit status (pclose's). */
const char *lb_run_cmd(const char *cmd, int *status);
/* In Prometheus text: the value of the sample whose line starts with
 * `series ` (name with its labels); -1 when absent. */
double lb_metric_sample(const char *text, const char *series);

/* Counts, with MONITOR, the commands clients send a Redis between two
 * markers (an ECHO on a connection of its own), calls made inside scripts
 * not included (INFO's total_commands_processed counts those too). */
typedef struct {
    redisContext *mon;
    char unix_path[108]; /* "": TCP */
    int port;
    long long top;     /* commands between the markers */
    long long evalsha; /* of them EVALSHA */
    char sample[600];  /* the first of them, each cut short */
} lb_monitor;

/* Starts MONITOR on the Redis at the Unix socket unix_path, or on
 * 127.0.0.1:port when it is NULL, then sends the start marker. */
void lb_monitor_start(lb_monitor *m, const char *unix_path, int port);
/* Sends the end marker, counts what came between the two and closes. */
void lb_monitor_stop(lb_monitor *m);
/* A new connection with the command written but its reply not read (e.g.
 * DEBUG SLEEP, which blocks Redis meanwhile); lb_redis_async_also writes one
 * more on it; lb_redis_async_wait reads n replies (stopping at an error)
 * and frees the connection. */
redisContext *lb_redis_send_async(lb_redis *r, const char *fmt, ...);
/* A new connection that Redis has accepted (it answered PING). */
redisContext *lb_redis_conn_new(lb_redis *r);
void lb_redis_async_also(redisContext *c, const char *fmt, ...);
void lb_redis_async_wait(redisContext *c, int nreplies);
/* The CLIENT LIST ids of the brokers' connections (named lockbroker-*),
 * the inboxes only when with_inbox; returns how many (at most max). */
size_t lb_redis_broker_conns(lb_redis *r, long long *ids, size_t max, bool with_inbox);

/* ---- lockbrokerd ---------------------------------------------------------- */

typedef struct lb_broker lb_broker;

/* Start lockbrokerd on r with the standard flags plus the NULL-terminated
 * extra flags (e.g. "--prefix", "x:", NULL). Waits (10 s) until a stats
 * request answers ok with "redis":"up". If the extra flags contain
 * --auth-file, the readiness check says hello with the file's secret first. */
lb_broker *lb_broker_start(lb_redis *r, ...) __attribute__((sentinel));
/* Like lb_broker_start with an explicit --redis URL (e.g. a sentinel://
 * one) instead of a harness redis-server; same readiness (stats ok with
 * "redis":"up"), same stop, restart and teardown. */
lb_broker *lb_broker_start_url(const char *redis_url, ...) __attribute__((sentinel));
/* The same, waiting only until the broker answers stats (any "redis"
 * value): for a broker that cannot reach its master yet. */
lb_broker *lb_broker_start_url_no_redis_wait(const char *redis_url, ...) __attribute__((sentinel));
/* Like lb_broker_start_url with --redlock URL,URL,... (the n masters'
 * URLs, in this order) instead of --redis (issue 18); same readiness
 * (stats ok with "redis":"up", which needs a quorum of masters up), same
 * stop, restart and teardown. */
lb_broker *lb_broker_start_redlock(lb_redis *const *masters, int n, ...) __attribute__((sentinel));
/* Start, but only wait until the broker answers stats (any "redis" value). */
lb_broker *lb_broker_start_no_redis_wait(lb_redis *r, ...) __attribute__((sentinel));
/* SIGTERM, wait 10 s (then SIGKILL and fail); assert exit status 0. */
void lb_broker_stop(lb_broker *b);
/* Sends sig and returns at once (a SIGTERM's drain can be watched; then
 * lb_broker_wait_exit, not lb_broker_stop: a second SIGTERM exits at once). */
void lb_broker_signal(lb_broker *b, int sig);
/* Waits 10 s for the broker to exit (then SIGKILL and fail); asserts exit
 * status 0. */
void lb_broker_wait_exit(lb_broker *b);
/* SIGKILL and reap. */
void lb_broker_kill9(lb_broker *b);
/* Stop (asserting a clean exit) and start again with the same flags, on a new
 * TCP port and Unix socket path. Waits for readiness. */
void lb_broker_restart(lb_broker *b);
int lb_broker_port(const lb_broker *b);
/* The broker's pid (to freeze it with SIGSTOP); 0 when stopped. */
pid_t lb_broker_pid(const lb_broker *b);
const char *lb_broker_unix_path(const lb_broker *b);
const char *lb_broker_log(const lb_broker *b);
/* Whether the broker's log holds needle within timeout_ms. */
bool lb_broker_log_wait(const lb_broker *b, const char *needle, int timeout_ms);
/* Print the last bytes of the broker's log to stderr. */
void lb_broker_print_log_tail(const lb_broker *b);

/* ---- client --------------------------------------------------------------- */

typedef enum { LB_TCP, LB_UNIX } lb_transport;
typedef struct lb_client lb_client;

lb_client *lb_connect(lb_broker *b, lb_transport t);
/* Close the socket (the client object stays valid until teardown). */
void lb_close(lb_client *c);
bool lb_is_closed(const lb_client *c);
/* The client's socket (e.g. to shut down its sending side). */
int lb_client_fd(const lb_client *c);
const char *lb_transport_name(lb_transport t);

/* Write raw bytes (all of them). Returns false if the write failed. */
bool lb_send_raw(lb_client *c, const void *buf, size_t len);
bool lb_send_line(lb_client *c, const char *line); /* appends "\n" */
/* Read one line (without its "\n"); NULL on timeout or EOF. Owned by the
 * harness. Does not look at the queues. */
const char *lb_read_line(lb_client *c, int timeout_ms);
/* Next message: queued ones first (responses and events in arrival order),
 * else read one line and parse it (fails the test if it is not JSON). NULL
 * on timeout or EOF. */
json_t *lb_read_msg(lb_client *c, int timeout_ms);

/* Build a request with json_pack (fmt must make an object); when it has no
 * "id", a unique string id is added. Sends it, reads until the response with
 * that id arrives (events and other responses seen meanwhile are queued) and
 * returns it; fails the test on timeout or close. */
json_t *lb_call(lb_client *c, const char *fmt, ...);
json_t *lb_call_timeout(lb_client *c, int timeout_ms, const char *fmt, ...);
/* Same with a request object (takes ownership of req). */
json_t *lb_call_json(lb_client *c, json_t *req, int timeout_ms);
/* Send a request without waiting; returns the id it got (owned by harness:
 * a json string or the caller's id). */
json_t *lb_send_req(lb_client *c, const char *fmt, ...);
/* Wait for the response whose id equals id (json_equal). */
json_t *lb_wait_response(lb_client *c, json_t *id, int timeout_ms);
/* The same, but NULL (no failure) when none came within timeout_ms: for
 * "not answered yet". */
json_t *lb_poll_response(lb_client *c, json_t *id, int timeout_ms);
/* Writes lines (n requests with ids 1..n) in one write and waits up to
 * timeout_ms for each answer, in out[0..n-1]. */
void lb_pipeline(lb_client *c, const char *lines, json_t **out, int n, int timeout_ms);
/* Next event ({"event":...}), queued or read; NULL on timeout. Responses
 * read meanwhile are queued. */
json_t *lb_next_event(lb_client *c, int timeout_ms);
/* True if the broker closes the connection within timeout_ms. Messages read
 * meanwhile are queued. */
bool lb_wait_closed(lb_client *c, int timeout_ms);
/* Assert the broker closes the connection within timeout_ms. */
void lb_expect_closed(lb_client *c, int timeout_ms);

/* ---- JSON helpers ---------------------------------------------------------- */

/* Compact dump, owned by the harness. */
const char *lb_dump(const json_t *j);
/* Get a member; path may be "error.code" (dots walk objects). */
json_t *lb_get(const json_t *j, const char *path);
/* Asserting getters. */
const char *lb_str(const json_t *j, const char *path);
json_int_t lb_int(const json_t *j, const char *path);
bool lb_bool(const json_t *j, const char *path);
/* Assert "ok": true. */
void lb_expect_ok(const json_t *resp);
/* Assert "ok": false and error.code == code (and a string message). */
void lb_expect_err(const json_t *resp, const char *code);
/* True iff resp is an error with this code. */
bool lb_is_err(const json_t *resp, const char *code);
bool lb_is_ok(const json_t *resp);
/* Lowercase hex of at least 32 chars. */
bool lb_is_lease_token(const char *s);

/* ---- protocol shortcuts ----------------------------------------------------- */

/* Options of an acquire; -1 / NULL leaves the field out. Build them with
 * LB_AO(.mode = "shared", .wait_ms = 0): a file that does silences
 * -Woverride-init (clang: -Winitializer-overrides), since the fields given
 * override the macro's defaults. */
typedef struct {
    int wait_ms;
    int ttl_ms;
    int limit;
    const char *mode;
    int fair;
    const char *owner;
    int watchdog;
    int detach;
} lb_aopt;

#define LB_AO(...)                                                                         \
    ((lb_aopt){.wait_ms = -1, .ttl_ms = -1, .limit = -1, .mode = NULL, .fair = -1,         \
               .owner = NULL, .watchdog = -1, .detach = -1, __VA_ARGS__})

/* Sends an acquire of lock with the options o without waiting; returns
 * its id (owned by the harness). */
json_t *lb_acq_send(lb_client *c, const char *lock, lb_aopt o);
/* The same, waiting timeout_ms for the answer. */
json_t *lb_acq_call(lb_client *c, const char *lock, lb_aopt o, int timeout_ms);

/* acquire exclusive with wait_ms 0 and ttl_ms; returns the response. */
json_t *lb_try_acquire(lb_client *c, const char *lock, int ttl_ms);
/* Same, asserting success; returns the lease token. */
const char *lb_must_acquire(lb_client *c, const char *lock, int ttl_ms);
json_t *lb_inspect(lb_client *c, const char *lock);
/* Assert inspect says the lock is free with no holders. */
void lb_expect_free(lb_client *c, const char *lock);
json_t *lb_stats(lb_client *c);
/* Retry a wait_ms 0 acquire every 20 ms until it succeeds or timeout_ms
 * passes; returns the last response. */
json_t *lb_acquire_within(lb_client *c, const char *lock, int ttl_ms, int timeout_ms);

/* ---- shared checks of the waiting tests ------------------------------------ */

/* Release asserting success; returns the count left. */
json_int_t lb_release(lb_client *c, const char *lease);
/* Asserts that nothing (no response, no event) arrives on c within ms. */
void lb_expect_silent(lb_client *c, int ms, const char *what);
/* inspect's "waiters" of lock. */
json_int_t lb_inspect_waiters(lb_client *c, const char *lock);
/* Waits (polling inspect) until lock has want waiters; asserts it does. */
void lb_wait_waiters(lb_client *c, const char *lock, json_int_t want, int timeout_ms);
/* inspect's number of holders. */
size_t lb_nholders(const json_t *in);
/* Asserts the next event is lost(expired) of lease within max_ms of t0. */
void lb_expect_lost(lb_client *c, const char *lease, int64_t t0, int max_ms, const char *what);
bool lb_redis_key_exists(lb_redis *r, const char *key);
/* Asserts within timeout_ms that the queue keys of lock (prefix lb:) are
 * gone and inspect shows no waiter; with and_free, that the lock is free
 * too. */
void lb_expect_no_queue(lb_redis *r, lb_client *c, const char *lock, int timeout_ms, bool and_free);
/* Waits until one of the n clients c[k] with pending[k] gets a message;
 * returns that k and the message in *out. Fails the test after
 * timeout_ms. */
int lb_read_any(lb_client **c, const bool *pending, int n, int timeout_ms, json_t **out);

#endif
