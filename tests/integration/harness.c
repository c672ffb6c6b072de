/*
 * Integration-test harness (see harness.h for the contract).
 *
 * One global state per Criterion worker process (each test runs in its own
 * worker): the temp dir, every redis-server and lockbrokerd started, every
 * client, and a "keep" list of values handed to the test, all released by
 * lb_teardown(). Child processes are started with fork+exec, their output
 * goes to a log file in the temp dir, and they get PR_SET_PDEATHSIG so a
 * killed worker (Criterion timeout) takes them along.
 */
#include "tests/integration/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXTRA_ARGS 32

struct lb_redis {
    pid_t pid;
    bool tcp;
    int port;                 /* tcp only */
    char sock[PATH_MAX];      /* unix only */
    char url[PATH_MAX + 16];
    char log[PATH_MAX];
    char cluster_conf[PATH_MAX]; /* cluster mode's nodes file, else "" */
    redisContext *ctx;
};

struct lb_broker {
    pid_t pid;
    lb_redis *redis;          /* NULL when started with an explicit URL */
    char *url;                /* lb_broker_start_url's --redis; else NULL */
    bool redlock;             /* url goes to --redlock instead of --redis */
    int port;
    char unix_path[PATH_MAX];
    char log[PATH_MAX];
    char *extra[MAX_EXTRA_ARGS + 1];
    int nextra;
    char *secret; /* from --auth-file, for the readiness check */
    bool wait_redis;
    int64_t spawned_ms;
};

struct lb_client {
    int fd;
    char *buf;
    size_t len, cap;
    bool eof;
    json_t *queue; /* messages read but not yet taken */
    unsigned long seq;
};

typedef struct {
    void *p;
    void (*fn)(void *);
} keep_t;

static struct {
    bool active;
    char dir[128];
    lb_redis *redis[8];
    int nredis;
    lb_broker *brokers[16];
    int nbrokers;
    lb_client **clients;
    int nclients, capclients;
    keep_t *keep;
    size_t nkeep, capkeep;
    int seq; /* for file names */
    bool atexit_done;
} G;

/* Criterion 2.4.1's runner process sometimes leaks 48 bytes of its own
 * (calloc inside libcriterion, seen with --jobs 2), which makes LeakSanitizer
 * turn a green run into exit status 1. Not ours to fix; suppress it. This
 * covers only this test binary, never lockbrokerd, whose leaks the harness
 * catches through its exit status. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcriterion.so\n"; }

/* ---- small utilities ---------------------------------------------------------- */

int64_t lb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lb_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void keep(void *p, void (*fn)(void *))
{
    if (!p)
        return;
    if (G.nkeep == G.capkeep) {
        G.capkeep = G.capkeep ? G.capkeep * 2 : 64;
        G.keep = realloc(G.keep, G.capkeep * sizeof(*G.keep));
        if (!G.keep)
            abort();
    }
    G.keep[G.nkeep++] = (keep_t){p, fn};
}

static void json_decref_void(void *p) { json_decref(p); }
static void free_reply_void(void *p) { freeReplyObject(p); }

static json_t *keep_json(json_t *j)
{
    keep(j, json_decref_void);
    return j;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort();
    return d;
}

const char *lb_tmpdir(void) { return G.dir; }

/* Binds 127.0.0.1:port (0: any) and returns the port bound, or -errno. */
static int bind_probe(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        rc = -errno;
    close(fd);
    return rc < 0 ? rc : ntohs(a.sin_port);
}

int lb_try_free_tcp_port(int lo, int hi)
{
    if (lo <= 0 || hi <= lo) {
        int p = bind_probe(0);
        if (p < 0)
            errno = -p;
        return p < 0 ? -1 : p;
    }
    /* Random starting points, then a sweep: two binaries picking at once
     * rarely collide, and a busy range still yields a port. */
    static unsigned seed; /* kept: calls within one ms pick different ports */
    if (!seed)
        seed = ((unsigned)getpid() << 16) ^ (unsigned)lb_now_ms();
    for (int k = 0; k < 64; k++) {
        int p = lo + (int)(rand_r(&seed) % (unsigned)(hi - lo));
        if (bind_probe(p) == p)
            return p;
    }
    for (int p = lo; p < hi; p++)
        if (bind_probe(p) == p)
            return p;
    errno = EADDRINUSE;
    return -1;
}

const char *lb_run_cmd(const char *cmd, int *status)
{
    static char out[262144];
    FILE *p = popen(cmd, "r");
    size_t n;

    cr_assert_not_null(p, "popen %s", cmd);
    n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    *status = pclose(p);
    return out;
}

double lb_metric_sample(const char *text, const char *series)
{
    size_t len = strlen(series);

    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, len) == 0 && p[len] == ' ')
            return atof(p + len + 1);
    }
    return -1;
}

int lb_free_tcp_port(void)
{
    int p = lb_try_free_tcp_port(0, 0);
    cr_assert(p > 0, "no free TCP port on 127.0.0.1: %s", strerror(errno));
    return p;
}

static pid_t spawn(const char *const argv[], const char *logpath)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0)
            _exit(127);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        for (int i = 3; i < 1024; i++)
            close(i);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Wait for pid up to timeout_ms. Returns true and the status if it exited. */
static bool wait_timeout(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 && errno != EINTR) {
            *status = -1;
            return true;
        }
        if (lb_now_ms() >= deadline)
            return false;
        lb_sleep_ms(10);
    }
}

static void describe_status(int st, char *buf, size_t n)
{
    if (st == -1)
        snprintf(buf, n, "unknown (waitpid failed)");
    else if (WIFEXITED(st))
        snprintf(buf, n, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, n, "killed by signal %d", WTERMSIG(st));
    else
        snprintf(buf, n, "status 0x%x", st);
}

static void print_file_tail(const char *what, const char *path, long bytes)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "---- %s: cannot open %s\n", what, path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > bytes ? size - bytes : 0;
    fseek(f, from, SEEK_SET);
    fprintf(stderr, "---- tail of %s (%s, last %ld of %ld bytes) ----\n", what, path,
            size - from, size);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, stderr);
    fprintf(stderr, "---- end of %s ----\n", what);
    fclose(f);
}

/* ---- fixture ---------------------------------------------------------------------- */

static void kill_all_now(void)
{
    for (int i = 0; i < G.nbrokers; i++)
        if (G.brokers[i]->pid > 0) {
            kill(G.brokers[i]->pid, SIGKILL);
            waitpid(G.brokers[i]->pid, NULL, 0);
            G.brokers[i]->pid = 0;
        }
    for (int i = 0; i < G.nredis; i++)
        if (G.redis[i]->pid > 0) {
            kill(G.redis[i]->pid, SIGKILL);
            waitpid(G.redis[i]->pid, NULL, 0);
            G.redis[i]->pid = 0;
        }
}

static void at_exit_handler(void)
{
    if (G.active)
        kill_all_now();
}

void lb_setup(void)
{
    memset(&G, 0, sizeof(G));
    signal(SIGPIPE, SIG_IGN);
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    /* Unix socket paths are limited to 108 bytes: keep the dir short. */
    snprintf(G.dir, sizeof(G.dir), "%s/lbit-XXXXXX", base);
    if (strlen(G.dir) > 60)
        snprintf(G.dir, sizeof(G.dir), "/tmp/lbit-XXXXXX");
    cr_assert(mkdtemp(G.dir) != NULL, "mkdtemp: %s", strerror(errno));
    G.active = true;
    if (!G.atexit_done) {
        atexit(at_exit_handler);
        G.atexit_done = true;
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void client_free(lb_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    json_decref(c->queue);
    free(c);
}

static void broker_stop_quiet(lb_broker *b)
{
    if (b->pid <= 0)
        return;
    kill(b->pid, SIGTERM);
    int st = 0;
    if (!wait_timeout(b->pid, 5000, &st)) {
        kill(b->pid, SIGKILL);
        waitpid(b->pid, NULL, 0);
        fprintf(stderr, "lockbrokerd (pid %d) did not exit within 5 s of SIGTERM (teardown)\n",
                (int)b->pid);
        lb_broker_print_log_tail(b);
    } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        char d[64];
        describe_status(st, d, sizeof(d));
        fprintf(stderr, "lockbrokerd (pid %d) ended with %s (teardown)\n", (int)b->pid, d);
        lb_broker_print_log_tail(b);
    }
    b->pid = 0;
}

static void redis_stop_quiet(lb_redis *r)
{
    if (r->ctx) {
        redisFree(r->ctx);
        r->ctx = NULL;
    }
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGTERM);
    int st;
    if (!wait_timeout(r->pid, 5000, &st)) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
    }
    r->pid = 0;
}

void lb_teardown(void)
{
    if (!G.active)
        return;
    for (int i = 0; i < G.nclients; i++)
        client_free(G.clients[i]);
    free(G.clients);
    G.clients = NULL;
    G.nclients = 0;
    for (int i = 0; i < G.nbrokers; i++) {
        lb_broker *b = G.brokers[i];
        broker_stop_quiet(b);
        for (int k = 0; k < b->nextra; k++)
            free(b->extra[k]);
        free(b->secret);
        free(b->url);
        free(b);
    }
    G.nbrokers = 0;
    for (int i = 0; i < G.nredis; i++) {
        redis_stop_quiet(G.redis[i]);
        free(G.redis[i]);
    }
    G.nredis = 0;
    for (size_t i = G.nkeep; i > 0; i--)
        G.keep[i - 1].fn(G.keep[i - 1].p);
    free(G.keep);
    G.keep = NULL;
    G.nkeep = G.capkeep = 0;
    const char *k = getenv("LB_KEEP_TMP");
    if (k && *k && strcmp(k, "0") != 0)
        fprintf(stderr, "LB_KEEP_TMP: kept %s\n", G.dir);
    else
        nftw(G.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    G.active = false;
}

void lb_end(void)
{
    for (int i = 0; i < G.nclients; i++)
        lb_close(G.clients[i]);
    for (int i = 0; i < G.nbrokers; i++)
        lb_broker_stop(G.brokers[i]);
    for (int i = 0; i < G.nredis; i++)
        lb_redis_stop(G.redis[i]);
}

/* ---- redis-server ------------------------------------------------------------------ */

static void redis_spawn(lb_redis *r)
{
    const char *bin = getenv("LB_REDIS_BIN");
    if (!bin || !*bin)
        bin = "redis-server";
    char port[16];
    snprintf(port, sizeof(port), "%d", r->tcp ? r->port : 0);
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--port";
    argv[n++] = port;
    if (r->tcp) {
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
    } else {
        argv[n++] = "--unixsocket";
        argv[n++] = r->sock;
        argv[n++] = "--unixsocketperm";
        argv[n++] = "700";
    }
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--appendonly";
    argv[n++] = "no";
    argv[n++] = "--dir";
    argv[n++] = G.dir;
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--enable-debug-command"; /* DEBUG SLEEP in the lost-reply tests */
    argv[n++] = "yes";
    if (r->cluster_conf[0]) {
        argv[n++] = "--cluster-enabled";
        argv[n++] = "yes";
        argv[n++] = "--cluster-config-file";
        argv[n++] = r->cluster_conf;
    }
    argv[n] = NULL;
    r->pid = spawn(argv, r->log);

    /* Wait until it answers PING. */
    int64_t deadline = lb_now_ms() + 10000;
    for (;;) {
        int st;
        if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
            r->pid = 0;
            print_file_tail("redis-server log", r->log, 4000);
            cr_assert_fail("redis-server exited during start-up");
        }
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        redisContext *c = r->tcp ? redisConnectWithTimeout("127.0.0.1", r->port, tv)
                                 : redisConnectUnixWithTimeout(r->sock, tv);
        if (c && !c->err) {
            redisSetTimeout(c, (struct timeval){.tv_sec = 2});
            redisReply *rep = redisCommand(c, "PING");
            bool ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
            if (rep)
                freeReplyObject(rep);
            if (ok) {
                r->ctx = c;
                return;
            }
        }
        if (c)
            redisFree(c);
        if (lb_now_ms() > deadline) {
            print_file_tail("redis-server log", r->log, 4000);
            cr_assert_fail("redis-server did not answer PING within 10 s");
        }
        lb_sleep_ms(20);
    }
}

static lb_redis *redis_start(bool tcp, bool cluster);

lb_redis *lb_redis_start(bool tcp)
{
    return redis_start(tcp, false);
}

lb_redis *lb_redis_start_cluster_node(void)
{
    return redis_start(true, true);
}

static lb_redis *redis_start(bool tcp, bool cluster)
{
    cr_assert(G.active, "lb_setup was not run (use LB_TEST)");
    cr_assert(G.nredis < (int)(sizeof(G.redis) / sizeof(G.redis[0])));
    lb_redis *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    int n = ++G.seq;
    r->tcp = tcp;
    if (cluster) {
        /* The cluster bus listens on port + 10000: both must be free, and
         * below the kernel's ephemeral range. */
        for (int tries = 0; tries < 200 && !r->port; tries++) {
            int p = lb_try_free_tcp_port(20000, 22768);
            if (p > 0 && lb_try_free_tcp_port(p + 10000, p + 10001) == p + 10000)
                r->port = p;
        }
        cr_assert(r->port > 0, "no free port pair for a cluster node");
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    } else if (tcp) {
        r->port = lb_free_tcp_port();
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    } else {
        snprintf(r->sock, sizeof(r->sock), "%s/redis%d.sock", G.dir, n);
        snprintf(r->url, sizeof(r->url), "unix://%s", r->sock);
    }
    snprintf(r->log, sizeof(r->log), "%s/redis%d.log", G.dir, n);
    if (cluster)
        snprintf(r->cluster_conf, sizeof(r->cluster_conf), "%s/redis%d-nodes.conf", G.dir, n);
    G.redis[G.nredis++] = r;
    redis_spawn(r);
    return r;
}

void lb_redis_stop(lb_redis *r)
{
    bool was_running = r->pid > 0;

    redis_stop_quiet(r);
    /* redis removes its socket on SIGTERM; make sure a restart binds anew. */
    if (was_running && !r->tcp)
        unlink(r->sock);
}

void lb_redis_restart(lb_redis *r)
{
    lb_redis_stop(r);
    redis_spawn(r);
}

const char *lb_redis_url(const lb_redis *r) { return r->url; }

pid_t lb_redis_pid(const lb_redis *r) { return r->pid; }

redisContext *lb_redis_ctx(lb_redis *r)
{
    cr_assert(r->pid > 0, "redis-server is not running");
    if (r->ctx && r->ctx->err) {
        redisFree(r->ctx);
        r->ctx = NULL;
    }
    if (!r->ctx) {
        struct timeval tv = {.tv_sec = 2};
        r->ctx = r->tcp ? redisConnectWithTimeout("127.0.0.1", r->port, tv)
                        : redisConnectUnixWithTimeout(r->sock, tv);
        cr_assert(r->ctx && !r->ctx->err, "cannot connect to redis: %s",
                  r->ctx ? r->ctx->errstr : "out of memory");
        redisSetTimeout(r->ctx, (struct timeval){.tv_sec = 5});
    }
    return r->ctx;
}

static redisReply *redis_vcmd(lb_redis *r, const char *fmt, va_list ap)
{
    redisContext *c = lb_redis_ctx(r);
    redisReply *rep = redisvCommand(c, fmt, ap);
    cr_assert(rep != NULL, "redis command '%s' failed: %s", fmt, c->errstr);
    keep(rep, free_reply_void);
    return rep;
}

redisReply *lb_redis_cmd(lb_redis *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redis_vcmd(r, fmt, ap);
    va_end(ap);
    return rep;
}

redisContext *lb_redis_conn_new(lb_redis *r)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *c = r->tcp ? redisConnectWithTimeout("127.0.0.1", r->port, tv)
                             : redisConnectUnixWithTimeout(r->sock, tv);
    redisReply *rep;

    cr_assert(c && !c->err, "cannot connect to redis: %s", c ? c->errstr : "out of memory");
    redisSetTimeout(c, (struct timeval){.tv_sec = 10});
    rep = redisCommand(c, "PING"); /* accepted and known to Redis's loop */
    cr_assert_not_null(rep, "PING: %s", c->errstr);
    freeReplyObject(rep);
    return c;
}

/* Writes one command on c without reading its reply. */
static void vsend_only(redisContext *c, const char *fmt, va_list ap)
{
    int done = 0;

    cr_assert_eq(redisvAppendCommand(c, fmt, ap), REDIS_OK);
    while (!done)
        cr_assert_eq(redisBufferWrite(c, &done), REDIS_OK, "write to redis: %s", c->errstr);
}

redisContext *lb_redis_send_async(lb_redis *r, const char *fmt, ...)
{
    redisContext *c = lb_redis_conn_new(r);
    va_list ap;

    va_start(ap, fmt);
    vsend_only(c, fmt, ap);
    va_end(ap);
    return c;
}

void lb_redis_async_also(redisContext *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsend_only(c, fmt, ap);
    va_end(ap);
}

void lb_redis_async_wait(redisContext *c, int nreplies)
{
    for (int k = 0; k < nreplies; k++) {
        void *rep = NULL;
        if (redisGetReply(c, &rep) != REDIS_OK)
            break; /* killed itself (CLIENT KILL ... SKIPME no) or timed out */
        freeReplyObject(rep);
    }
    redisFree(c);
}

size_t lb_redis_broker_conns(lb_redis *r, long long *ids, size_t max, bool with_inbox)
{
    redisReply *rep = lb_redis_cmd(r, "CLIENT LIST");
    size_t n = 0;
    char *save = NULL, *buf;

    cr_assert_eq(rep->type, REDIS_REPLY_STRING);
    buf = strdup(rep->str);
    cr_assert_not_null(buf);
    for (char *line = strtok_r(buf, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
        const char *name = strstr(line, " name=lockbroker-");
        long long id;
        if (!name || sscanf(line, "id=%lld", &id) != 1)
            continue;
        if (!with_inbox && strstr(name, ":inbox"))
            continue;
        ids[n++] = id;
    }
    free(buf);
    if (n == 0) {
        /* A broker that does not name its connections (an older build):
         * every other client but this harness's own. */
        redisReply *me = lb_redis_cmd(r, "CLIENT ID");
        rep = lb_redis_cmd(r, "CLIENT LIST");
        buf = strdup(rep->str);
        cr_assert_not_null(buf);
        for (char *line = strtok_r(buf, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
            long long id;
            if (sscanf(line, "id=%lld", &id) != 1 || id == me->integer)
                continue;
            if (!with_inbox && strstr(line, " flags=P"))
                continue;
            ids[n++] = id;
        }
        free(buf);
    }
    return n;
}

static void glob_escape(char *out, size_t n, const char *s)
{
    size_t o = 0;
    for (; *s && o + 2 < n; s++) {
        if (strchr("*?[]\\", *s))
            out[o++] = '\\';
        out[o++] = *s;
    }
    out[o] = '\0';
}

/* Calls fn(key, len, arg) for each key matching PREFIX{NAME}*. */
static size_t scan_lock_keys(lb_redis *r, const char *prefix, const char *name,
                             void (*fn)(lb_redis *, const char *, size_t, void *), void *arg)
{
    char ep[1200], en[2200], pat[3500];
    glob_escape(ep, sizeof(ep), prefix);
    glob_escape(en, sizeof(en), name);
    snprintf(pat, sizeof(pat), "%s{%s}*", ep, en);
    char cursor[64] = "0";
    size_t count = 0;
    do {
        redisReply *rep = lb_redis_cmd(r, "SCAN %s MATCH %s COUNT 1000", cursor, pat);
        cr_assert(rep->type == REDIS_REPLY_ARRAY && rep->elements == 2, "bad SCAN reply");
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            count++;
            if (fn)
                fn(r, keys->element[i]->str, keys->element[i]->len, arg);
        }
    } while (strcmp(cursor, "0") != 0);
    return count;
}

size_t lb_redis_count_lock_keys(lb_redis *r, const char *prefix, const char *name)
{
    return scan_lock_keys(r, prefix, name, NULL, NULL);
}

static void del_key(lb_redis *r, const char *key, size_t len, void *arg)
{
    (void)arg;
    redisReply *rep = lb_redis_cmd(r, "DEL %b", key, len);
    cr_assert(rep->type == REDIS_REPLY_INTEGER, "DEL failed");
}

size_t lb_redis_del_lock_keys(lb_redis *r, const char *prefix, const char *name)
{
    return scan_lock_keys(r, prefix, name, del_key, NULL);
}

static void check_expire(lb_redis *r, const char *key, size_t len, void *arg)
{
    (void)arg;
    redisReply *rep = lb_redis_cmd(r, "PTTL %b", key, len);
    cr_assert(rep->type == REDIS_REPLY_INTEGER);
    cr_expect(rep->integer != -1, "key %.*s has no TTL: it would be kept forever", (int)len,
              key);
}

void lb_redis_assert_lock_keys_expire(lb_redis *r, const char *prefix, const char *name)
{
    scan_lock_keys(r, prefix, name, check_expire, NULL);
}

void lb_redis_flushall(lb_redis *r)
{
    redisReply *rep = lb_redis_cmd(r, "FLUSHALL");
    cr_assert(rep->type == REDIS_REPLY_STATUS, "FLUSHALL failed");
}

long long lb_info_number(const redisReply *info, const char *field)
{
    cr_assert(info && info->type == REDIS_REPLY_STRING, "not an INFO reply");
    const char *p = strstr(info->str, field);
    return p ? atoll(p + strlen(field)) : 0;
}

static redisContext *monitor_conn(const lb_monitor *m)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *c = m->unix_path[0] ? redisConnectUnixWithTimeout(m->unix_path, tv)
                                      : redisConnectWithTimeout("127.0.0.1", m->port, tv);

    cr_assert(c && !c->err, "cannot connect to the redis to monitor (%s:%d): %s",
              m->unix_path[0] ? m->unix_path : "127.0.0.1", m->port,
              c ? c->errstr : "out of memory");
    redisSetTimeout(c, (struct timeval){.tv_sec = 10});
    return c;
}

/* ECHO marker on a connection of its own. */
static void monitor_mark(const lb_monitor *m, const char *marker)
{
    redisContext *c = monitor_conn(m);
    redisReply *rep = redisCommand(c, "ECHO %s", marker);

    cr_assert(rep && rep->type == REDIS_REPLY_STRING, "ECHO %s: %s", marker, c->errstr);
    freeReplyObject(rep);
    redisFree(c);
}

void lb_monitor_start(lb_monitor *m, const char *unix_path, int port)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->unix_path, sizeof(m->unix_path), "%s", unix_path ? unix_path : "");
    m->port = port;
    m->mon = monitor_conn(m);
    redisReply *rep = redisCommand(m->mon, "MONITOR");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MONITOR: %s", m->mon->errstr);
    freeReplyObject(rep);
    monitor_mark(m, "lb-mark-start");
}

void lb_monitor_stop(lb_monitor *m)
{
    bool counting = false;

    monitor_mark(m, "lb-mark-end");
    for (;;) {
        redisReply *rep = NULL;
        cr_assert_eq(redisGetReply(m->mon, (void **)&rep), REDIS_OK, "monitor: %s",
                     m->mon->errstr);
        cr_assert(rep->type == REDIS_REPLY_STATUS, "monitor reply type %d", rep->type);
        const char *line = rep->str;
        bool end = strstr(line, "\"lb-mark-end\"") != NULL;
        if (strstr(line, "\"lb-mark-start\"")) {
            counting = true;
        } else if (counting && !end && !strstr(line, " lua]")) {
            m->top++;
            if (strstr(line, "\"EVALSHA\"") || strstr(line, "\"evalsha\""))
                m->evalsha++;
            size_t used = strlen(m->sample);
            if (used + 100 < sizeof(m->sample))
                snprintf(m->sample + used, sizeof(m->sample) - used, "%.90s\n", line);
        }
        freeReplyObject(rep);
        if (end)
            break;
    }
    redisFree(m->mon);
    m->mon = NULL;
}

/* ---- lockbrokerd ------------------------------------------------------------------ */

static char *read_secret(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot read auth file %s", path);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
        buf[n - 2] = '\0';
    else if (n >= 1 && buf[n - 1] == '\n')
        buf[n - 1] = '\0';
    return xstrdup(buf);
}

static lb_client *client_new_fd(int fd)
{
    lb_client *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->fd = fd;
    c->queue = json_array();
    if (G.nclients == G.capclients) {
        G.capclients = G.capclients ? G.capclients * 2 : 16;
        G.clients = realloc(G.clients, G.capclients * sizeof(*G.clients));
        if (!G.clients)
            abort();
    }
    G.clients[G.nclients++] = c;
    return c;
}

static int connect_tcp_fd(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int connect_unix_fd(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

#define REDLOCK_ALL_UP_MS 3000

/* One readiness probe; true when the broker answered as wanted. */
static bool probe_ready(lb_broker *b)
{
    int fd = connect_tcp_fd(b->port);
    if (fd < 0)
        return false;
    lb_client *c = client_new_fd(fd);
    bool ready = false;
    if (b->secret) {
        json_t *r = lb_call_json(c, json_pack("{s:s, s:s}", "op", "hello", "auth", b->secret),
                                 -1000);
        if (!r || !lb_is_ok(r))
            goto out;
    }
    json_t *r = lb_call_json(c, json_pack("{s:s}", "op", "stats"), -1000);
    if (r && lb_is_ok(r)) {
        json_t *redis = json_object_get(r, "redis");
        ready = !b->wait_redis || (json_is_string(redis) && strcmp(json_string_value(redis), "up") == 0);
        /* Redlock: "up" is a quorum of masters; Redis Cluster: some
         * master. A test means all of them (each master's copy of the
         * first lock; the master of whichever slot it uses), so it waits
         * for the rest a while too; a master the test left down is
         * waited for REDLOCK_ALL_UP_MS, no more. */
        if (ready && b->wait_redis && lb_now_ms() - b->spawned_ms < REDLOCK_ALL_UP_MS) {
            json_t *ms = json_object_get(r, "redis_masters");
            size_t k;
            json_t *m;
            json_array_foreach(ms, k, m)
                if (!json_is_true(json_object_get(m, "up")))
                    ready = false;
        }
    }
out:
    lb_close(c);
    if (ready) {
        int ufd = connect_unix_fd(b->unix_path);
        if (ufd < 0)
            return false;
        close(ufd);
    }
    return ready;
}

static void broker_spawn(lb_broker *b)
{
    const char *bin = getenv("LB_BROKER_BIN");
    if (!bin || !*bin)
        bin = "build/san/lockbrokerd";
    int n = ++G.seq;
    b->port = lb_free_tcp_port();
    snprintf(b->unix_path, sizeof(b->unix_path), "%s/b%d.sock", G.dir, n);
    snprintf(b->log, sizeof(b->log), "%s/broker%d.log", G.dir, n);
    char tcp_url[64], unix_url[PATH_MAX + 16];
    snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", b->port);
    snprintf(unix_url, sizeof(unix_url), "unix://%s", b->unix_path);
    const char *argv[MAX_EXTRA_ARGS + 32];
    int k = 0;
    argv[k++] = bin;
    argv[k++] = b->redlock ? "--redlock" : "--redis";
    argv[k++] = b->redis ? b->redis->url : b->url;
    argv[k++] = "--listen";
    argv[k++] = tcp_url;
    argv[k++] = "--listen";
    argv[k++] = unix_url;
    argv[k++] = "--log-level";
    argv[k++] = "debug";
    argv[k++] = "--shutdown-grace-ms";
    argv[k++] = "200";
    for (int i = 0; i < b->nextra; i++)
        argv[k++] = b->extra[i];
    argv[k] = NULL;

    FILE *lf = fopen(b->log, "w");
    if (lf) {
        fprintf(lf, "# harness:");
        for (int i = 0; argv[i]; i++)
            fprintf(lf, " '%s'", argv[i]);
        fprintf(lf, "\n");
        fclose(lf);
    }
    b->pid = spawn(argv, b->log);
    b->spawned_ms = lb_now_ms();

    int64_t deadline = lb_now_ms() + 10000;
    for (;;) {
        int st;
        if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
            b->pid = 0;
            char d[64];
            describe_status(st, d, sizeof(d));
            lb_broker_print_log_tail(b);
            cr_assert_fail("lockbrokerd (%s) ended during start-up with %s", bin, d);
        }
        if (probe_ready(b))
            return;
        if (lb_now_ms() > deadline) {
            lb_broker_print_log_tail(b);
            cr_assert_fail("lockbrokerd was not ready (stats ok, redis up) within 10 s");
        }
        lb_sleep_ms(50);
    }
}

/* r, or else url (copied), is what --redis (with redlock: --redlock)
 * names. */
static lb_broker *broker_vstart(lb_redis *r, const char *url, bool redlock, bool wait_redis,
                                va_list ap)
{
    cr_assert(G.active, "lb_setup was not run (use LB_TEST)");
    cr_assert(G.nbrokers < (int)(sizeof(G.brokers) / sizeof(G.brokers[0])));
    cr_assert(r || url, "a broker needs a redis-server or a --redis URL");
    lb_broker *b = calloc(1, sizeof(*b));
    if (!b)
        abort();
    b->redis = r;
    b->url = r ? NULL : xstrdup(url);
    b->redlock = redlock;
    b->wait_redis = wait_redis;
    G.brokers[G.nbrokers++] = b;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        cr_assert(b->nextra < MAX_EXTRA_ARGS, "too many extra broker flags");
        b->extra[b->nextra++] = xstrdup(a);
    }
    for (int i = 0; i + 1 < b->nextra; i++)
        if (strcmp(b->extra[i], "--auth-file") == 0)
            b->secret = read_secret(b->extra[i + 1]);
    broker_spawn(b);
    return b;
}

lb_broker *lb_broker_start(lb_redis *r, ...)
{
    va_list ap;
    va_start(ap, r);
    lb_broker *b = broker_vstart(r, NULL, false, true, ap);
    va_end(ap);
    return b;
}

lb_broker *lb_broker_start_no_redis_wait(lb_redis *r, ...)
{
    va_list ap;
    va_start(ap, r);
    lb_broker *b = broker_vstart(r, NULL, false, false, ap);
    va_end(ap);
    return b;
}

lb_broker *lb_broker_start_url(const char *redis_url, ...)
{
    va_list ap;
    va_start(ap, redis_url);
    lb_broker *b = broker_vstart(NULL, redis_url, false, true, ap);
    va_end(ap);
    return b;
}

lb_broker *lb_broker_start_url_no_redis_wait(const char *redis_url, ...)
{
    va_list ap;
    va_start(ap, redis_url);
    lb_broker *b = broker_vstart(NULL, redis_url, false, false, ap);
    va_end(ap);
    return b;
}

lb_broker *lb_broker_start_redlock(lb_redis *const *masters, int n, ...)
{
    char url[1024];
    size_t len = 0;
    va_list ap;

    cr_assert(n > 0, "a Redlock broker needs masters");
    url[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(url + len, sizeof(url) - len, "%s%s", i ? "," : "", masters[i]->url);
        cr_assert(w > 0 && (size_t)w < sizeof(url) - len, "the --redlock URL list is too long");
        len += (size_t)w;
    }
    va_start(ap, n);
    lb_broker *b = broker_vstart(NULL, url, true, true, ap);
    va_end(ap);
    return b;
}

void lb_broker_signal(lb_broker *b, int sig)
{
    cr_assert_gt(b->pid, 0, "the broker is not running");
    cr_assert(kill(b->pid, sig) == 0, "kill: %s", strerror(errno));
}

void lb_broker_stop(lb_broker *b)
{
    if (b->pid <= 0)
        return;
    cr_assert(kill(b->pid, SIGTERM) == 0, "kill: %s", strerror(errno));
    lb_broker_wait_exit(b);
}

void lb_broker_wait_exit(lb_broker *b)
{
    if (b->pid <= 0)
        return;
    pid_t pid = b->pid;
    int st = 0;
    if (!wait_timeout(pid, 10000, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        b->pid = 0;
        lb_broker_print_log_tail(b);
        cr_assert_fail("lockbrokerd (pid %d) did not exit within 10 s of SIGTERM", (int)pid);
    }
    b->pid = 0;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        char d[64];
        describe_status(st, d, sizeof(d));
        lb_broker_print_log_tail(b);
        cr_assert_fail("lockbrokerd (pid %d) ended with %s after SIGTERM, want exit status 0 "
                       "(a sanitizer report, e.g. a leak, makes it non-zero); log: %s",
                       (int)pid, d, b->log);
    }
}

void lb_broker_kill9(lb_broker *b)
{
    if (b->pid <= 0)
        return;
    kill(b->pid, SIGKILL);
    waitpid(b->pid, NULL, 0);
    b->pid = 0;
}

void lb_broker_restart(lb_broker *b)
{
    lb_broker_stop(b);
    broker_spawn(b);
}

int lb_broker_port(const lb_broker *b) { return b->port; }
pid_t lb_broker_pid(const lb_broker *b) { return b->pid; }
const char *lb_broker_unix_path(const lb_broker *b) { return b->unix_path; }
const char *lb_broker_log(const lb_broker *b) { return b->log; }

bool lb_broker_log_wait(const lb_broker *b, const char *needle, int timeout_ms)
{
    int64_t end = lb_now_ms() + timeout_ms;

    for (;;) {
        FILE *f = fopen(b->log, "r");
        bool found = false;
        if (f) {
            char line[4096];
            while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
            fclose(f);
        }
        if (found)
            return true;
        if (lb_now_ms() >= end)
            return false;
        lb_sleep_ms(20);
    }
}

void lb_broker_print_log_tail(const lb_broker *b)
{
    print_file_tail("lockbrokerd log", b->log, 6000);
}

/* ---- client ----------------------------------------------------------------------- */

const char *lb_transport_name(lb_transport t) { return t == LB_TCP ? "tcp" : "unix"; }

lb_client *lb_connect(lb_broker *b, lb_transport t)
{
    cr_assert(b->pid > 0, "broker is not running");
    int fd = t == LB_TCP ? connect_tcp_fd(b->port) : connect_unix_fd(b->unix_path);
    cr_assert(fd >= 0, "cannot connect to the broker over %s: %s", lb_transport_name(t),
              strerror(errno));
    return client_new_fd(fd);
}

void lb_close(lb_client *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->eof = true;
}

bool lb_is_closed(const lb_client *c) { return c->eof; }
int lb_client_fd(const lb_client *c) { return c->fd; }

bool lb_send_raw(lb_client *c, const void *buf, size_t len)
{
    if (c->fd < 0)
        return false;
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

bool lb_send_line(lb_client *c, const char *line)
{
    size_t n = strlen(line);
    char *b = malloc(n + 1);
    if (!b)
        abort();
    memcpy(b, line, n);
    b[n] = '\n';
    bool ok = lb_send_raw(c, b, n + 1);
    free(b);
    return ok;
}

/* Takes a complete line out of the buffer if there is one. */
static char *take_line(lb_client *c)
{
    char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
    if (!nl)
        return NULL;
    size_t n = (size_t)(nl - c->buf);
    char *line = malloc(n + 1);
    if (!line)
        abort();
    memcpy(line, c->buf, n);
    line[n] = '\0';
    if (n > 0 && line[n - 1] == '\r')
        line[n - 1] = '\0';
    memmove(c->buf, nl + 1, c->len - n - 1);
    c->len -= n + 1;
    keep(line, free);
    return line;
}

const char *lb_read_line(lb_client *c, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        char *line = take_line(c);
        if (line)
            return line;
        if (c->eof || c->fd < 0)
            return NULL;
        int64_t left = deadline - lb_now_ms();
        if (left < 0)
            left = 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            return NULL;
        if (c->cap - c->len < 65536) {
            c->cap = c->cap ? c->cap * 2 : 131072;
            c->buf = realloc(c->buf, c->cap);
            if (!c->buf)
                abort();
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            c->eof = true; /* EOF or ECONNRESET: closed by the broker */
            continue;
        }
        c->len += (size_t)n;
    }
}

static json_t *parse_line(const char *line, bool must)
{
    json_error_t err;
    json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!j) {
        if (must)
            cr_assert_fail("broker sent a line that is not JSON (%s): %.300s", err.text, line);
        return NULL;
    }
    cr_assert(json_is_object(j), "broker sent JSON that is not an object: %.300s", line);
    return keep_json(j);
}

/* Read and parse one line (queue not consulted). NULL on timeout / EOF. */
static json_t *read_parsed(lb_client *c, int timeout_ms)
{
    const char *line;
    do {
        line = lb_read_line(c, timeout_ms);
        if (!line)
            return NULL;
    } while (line[0] == '\0'); /* the broker should not send empty lines; tolerate */
    return parse_line(line, true);
}

static json_t *queue_take(lb_client *c, size_t i)
{
    json_t *m = json_array_get(c->queue, i);
    json_incref(m);
    keep_json(m);
    json_array_remove(c->queue, i);
    return m;
}

json_t *lb_read_msg(lb_client *c, int timeout_ms)
{
    if (json_array_size(c->queue) > 0)
        return queue_take(c, 0);
    return read_parsed(c, timeout_ms);
}

static bool is_event(const json_t *m) { return json_object_get(m, "event") != NULL; }

static bool is_response_to(const json_t *m, const json_t *id)
{
    if (is_event(m))
        return false;
    json_t *mid = json_object_get(m, "id");
    if (!mid)
        return false;
    return json_equal(mid, (json_t *)id);
}

/* Like lb_wait_response but returns NULL on timeout / close (no assert).
 * A negative timeout means the same, with -timeout as the time. */
static json_t *wait_response_soft(lb_client *c, const json_t *id, int timeout_ms)
{
    for (size_t i = 0; i < json_array_size(c->queue); i++)
        if (is_response_to(json_array_get(c->queue, i), id))
            return queue_take(c, i);
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - lb_now_ms();
        if (left < 0)
            left = 0;
        json_t *m = read_parsed(c, (int)left);
        if (!m)
            return NULL;
        if (is_response_to(m, id))
            return m;
        json_array_append(c->queue, m);
    }
}

json_t *lb_poll_response(lb_client *c, json_t *id, int timeout_ms)
{
    return wait_response_soft(c, id, timeout_ms);
}

void lb_pipeline(lb_client *c, const char *lines, json_t **out, int n, int timeout_ms)
{
    cr_assert(lb_send_raw(c, lines, strlen(lines)));
    for (int k = 0; k < n; k++) {
        json_t *id = json_integer(k + 1);
        out[k] = lb_wait_response(c, id, timeout_ms);
        json_decref(id);
        cr_assert_not_null(out[k], "no answer to request %d", k + 1);
    }
}

json_t *lb_wait_response(lb_client *c, json_t *id, int timeout_ms)
{
    json_t *m = wait_response_soft(c, id, timeout_ms);
    cr_assert(m != NULL, "no response to id %s within %d ms (%s)", lb_dump(id), timeout_ms,
              c->eof ? "connection closed by the broker" : "timeout");
    return m;
}

static json_t *send_request(lb_client *c, json_t *req)
{
    cr_assert(json_is_object(req), "request is not an object");
    json_t *id = json_object_get(req, "id");
    if (!id) {
        char buf[64];
        snprintf(buf, sizeof(buf), "h%lu", ++c->seq);
        json_object_set_new(req, "id", json_string(buf));
        id = json_object_get(req, "id");
    }
    json_incref(id);
    keep_json(id);
    char *s = json_dumps(req, JSON_COMPACT);
    cr_assert(s != NULL);
    keep(s, free);
    json_decref(req);
    cr_assert(lb_send_line(c, s), "cannot send request %s: %s", s, strerror(errno));
    return id;
}

/* timeout_ms < 0: soft (returns NULL on timeout; for the readiness probe). */
json_t *lb_call_json(lb_client *c, json_t *req, int timeout_ms)
{
    bool soft = timeout_ms < 0;
    if (soft) {
        if (c->fd < 0) {
            json_decref(req);
            return NULL;
        }
        json_t *id = json_object_get(req, "id");
        if (!id) {
            char buf[64];
            snprintf(buf, sizeof(buf), "h%lu", ++c->seq);
            json_object_set_new(req, "id", json_string(buf));
            id = json_object_get(req, "id");
        }
        json_incref(id);
        keep_json(id);
        char *s = json_dumps(req, JSON_COMPACT);
        keep(s, free);
        json_decref(req);
        if (!s || !lb_send_line(c, s))
            return NULL;
        return wait_response_soft(c, id, -timeout_ms);
    }
    json_t *id = send_request(c, req);
    return lb_wait_response(c, id, timeout_ms);
}

static json_t *vpack(const char *fmt, va_list ap)
{
    json_error_t err;
    json_t *req = json_vpack_ex(&err, 0, fmt, ap);
    cr_assert(req != NULL, "json_pack('%s'): %s", fmt, err.text);
    return req;
}

json_t *lb_call(lb_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *req = vpack(fmt, ap);
    va_end(ap);
    return lb_call_json(c, req, LB_CALL_TIMEOUT_MS);
}

json_t *lb_call_timeout(lb_client *c, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *req = vpack(fmt, ap);
    va_end(ap);
    return lb_call_json(c, req, timeout_ms);
}

json_t *lb_send_req(lb_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *req = vpack(fmt, ap);
    va_end(ap);
    return send_request(c, req);
}

json_t *lb_next_event(lb_client *c, int timeout_ms)
{
    for (size_t i = 0; i < json_array_size(c->queue); i++)
        if (is_event(json_array_get(c->queue, i)))
            return queue_take(c, i);
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - lb_now_ms();
        if (left < 0)
            left = 0;
        json_t *m = read_parsed(c, (int)left);
        if (!m)
            return NULL;
        if (is_event(m))
            return m;
        json_array_append(c->queue, m);
    }
}

bool lb_wait_closed(lb_client *c, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - lb_now_ms();
        if (left < 0)
            left = 0;
        const char *line = lb_read_line(c, (int)left);
        if (line) {
            json_t *m = parse_line(line, false);
            if (m)
                json_array_append(c->queue, m);
            continue;
        }
        return c->eof;
    }
}

void lb_expect_closed(lb_client *c, int timeout_ms)
{
    cr_assert(lb_wait_closed(c, timeout_ms), "the broker did not close the connection within %d ms",
              timeout_ms);
}

/* ---- JSON helpers ----------------------------------------------------------------- */

const char *lb_dump(const json_t *j)
{
    if (!j)
        return "(null pointer)";
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return "(undumpable)";
    keep(s, free);
    return s;
}

json_t *lb_get(const json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *cur = (json_t *)j;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save))
        cur = json_is_object(cur) ? json_object_get(cur, tok) : NULL;
    return cur;
}

const char *lb_str(const json_t *j, const char *path)
{
    json_t *v = lb_get(j, path);
    cr_assert(json_is_string(v), "want a string at '%s' in %s", path, lb_dump(j));
    return json_string_value(v);
}

json_int_t lb_int(const json_t *j, const char *path)
{
    json_t *v = lb_get(j, path);
    cr_assert(json_is_integer(v), "want an integer at '%s' in %s", path, lb_dump(j));
    return json_integer_value(v);
}

bool lb_bool(const json_t *j, const char *path)
{
    json_t *v = lb_get(j, path);
    cr_assert(json_is_boolean(v), "want a boolean at '%s' in %s", path, lb_dump(j));
    return json_is_true(v);
}

bool lb_is_ok(const json_t *resp) { return resp && json_is_true(json_object_get(resp, "ok")); }

bool lb_is_err(const json_t *resp, const char *code)
{
    if (!resp || !json_is_false(json_object_get(resp, "ok")))
        return false;
    json_t *c = lb_get(resp, "error.code");
    return json_is_string(c) && strcmp(json_string_value(c), code) == 0;
}

void lb_expect_ok(const json_t *resp)
{
    cr_assert(lb_is_ok(resp), "want ok:true, got %s", lb_dump(resp));
    cr_assert(json_object_get(resp, "error") == NULL, "ok response with an error: %s",
              lb_dump(resp));
}

void lb_expect_err(const json_t *resp, const char *code)
{
    cr_assert(lb_is_err(resp, code), "want error %s, got %s", code, lb_dump(resp));
    cr_assert(json_is_string(lb_get(resp, "error.message")),
              "error without a string message: %s", lb_dump(resp));
}

bool lb_is_lease_token(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return false;
    return n >= 32;
}

/* ---- protocol shortcuts ------------------------------------------------------------ */

static json_t *acq_req(const char *lock, lb_aopt o)
{
    json_t *req = json_object();

    json_object_set_new(req, "op", json_string("acquire"));
    json_object_set_new(req, "lock", json_string(lock));
    if (o.wait_ms >= 0)
        json_object_set_new(req, "wait_ms", json_integer(o.wait_ms));
    if (o.ttl_ms >= 0)
        json_object_set_new(req, "ttl_ms", json_integer(o.ttl_ms));
    if (o.limit >= 0)
        json_object_set_new(req, "limit", json_integer(o.limit));
    if (o.mode)
        json_object_set_new(req, "mode", json_string(o.mode));
    if (o.fair >= 0)
        json_object_set_new(req, "fair", json_boolean(o.fair));
    if (o.owner)
        json_object_set_new(req, "owner", json_string(o.owner));
    if (o.watchdog >= 0)
        json_object_set_new(req, "watchdog", json_boolean(o.watchdog));
    if (o.detach >= 0)
        json_object_set_new(req, "detach", json_boolean(o.detach));
    return req;
}

json_t *lb_acq_send(lb_client *c, const char *lock, lb_aopt o)
{
    return lb_send_req(c, "o", acq_req(lock, o));
}

json_t *lb_acq_call(lb_client *c, const char *lock, lb_aopt o, int timeout_ms)
{
    return lb_call_json(c, acq_req(lock, o), timeout_ms);
}

json_t *lb_try_acquire(lb_client *c, const char *lock, int ttl_ms)
{
    if (ttl_ms > 0)
        return lb_call(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock, "ttl_ms",
                       ttl_ms, "wait_ms", 0);
    return lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", lock, "wait_ms", 0);
}

const char *lb_must_acquire(lb_client *c, const char *lock, int ttl_ms)
{
    json_t *r = lb_try_acquire(c, lock, ttl_ms);
    lb_expect_ok(r);
    const char *lease = lb_str(r, "lease");
    cr_assert(lb_is_lease_token(lease), "bad lease token in %s", lb_dump(r));
    return lease;
}

json_t *lb_inspect(lb_client *c, const char *lock)
{
    json_t *r = lb_call(c, "{s:s, s:s}", "op", "inspect", "lock", lock);
    lb_expect_ok(r);
    return r;
}

void lb_expect_free(lb_client *c, const char *lock)
{
    json_t *r = lb_inspect(c, lock);
    cr_assert_str_eq(lb_str(r, "state"), "free", "want state free: %s", lb_dump(r));
    json_t *h = lb_get(r, "holders");
    cr_assert(json_is_array(h) && json_array_size(h) == 0, "want holders []: %s", lb_dump(r));
}

json_t *lb_stats(lb_client *c)
{
    json_t *r = lb_call(c, "{s:s}", "op", "stats");
    lb_expect_ok(r);
    return r;
}

json_t *lb_acquire_within(lb_client *c, const char *lock, int ttl_ms, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        json_t *r = lb_try_acquire(c, lock, ttl_ms);
        if (lb_is_ok(r) || lb_now_ms() >= deadline)
            return r;
        lb_sleep_ms(20);
    }
}

/* ---- shared checks of the waiting tests ------------------------------------ */

json_int_t lb_release(lb_client *c, const char *lease)
{
    json_t *r = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
    cr_assert(lb_is_ok(r), "release %s: %s", lease, lb_dump(r));
    return lb_int(r, "count");
}

void lb_expect_silent(lb_client *c, int ms, const char *what)
{
    json_t *m = lb_read_msg(c, ms);
    cr_assert_null(m, "%s: want no message within %d ms, got %s", what, ms, lb_dump(m));
}

json_int_t lb_inspect_waiters(lb_client *c, const char *lock)
{
    return lb_int(lb_inspect(c, lock), "waiters");
}

void lb_wait_waiters(lb_client *c, const char *lock, json_int_t want, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    json_int_t got;
    while ((got = lb_inspect_waiters(c, lock)) != want && lb_now_ms() < deadline)
        lb_sleep_ms(10);
    cr_assert_eq(got, want, "inspect %s: want waiters %lld, got %lld", lock, (long long)want,
                 (long long)got);
}

size_t lb_nholders(const json_t *in)
{
    json_t *h = lb_get(in, "holders");
    cr_assert(json_is_array(h), "%s", lb_dump(in));
    return json_array_size(h);
}

void lb_expect_lost(lb_client *c, const char *lease, int64_t t0, int max_ms, const char *what)
{
    json_t *ev = lb_next_event(c, max_ms + 1000);
    int64_t dt = lb_now_ms() - t0;
    cr_assert_not_null(ev, "%s: no lost event", what);
    cr_assert_str_eq(lb_str(ev, "event"), "lost", "%s: %s", what, lb_dump(ev));
    cr_assert_str_eq(lb_str(ev, "lease"), lease, "%s: %s", what, lb_dump(ev));
    cr_assert_str_eq(lb_str(ev, "reason"), "expired", "%s: %s", what, lb_dump(ev));
    cr_assert_leq(dt, max_ms, "%s: lost after %lld ms", what, (long long)dt);
}

bool lb_redis_key_exists(lb_redis *r, const char *key)
{
    redisReply *rep = lb_redis_cmd(r, "EXISTS %s", key);
    cr_assert_eq(rep->type, REDIS_REPLY_INTEGER);
    return rep->integer != 0;
}

void lb_expect_no_queue(lb_redis *r, lb_client *c, const char *lock, int timeout_ms, bool and_free)
{
    static const char *const sfx[] = {"q", "w", "d", "s"};
    int64_t deadline = lb_now_ms() + timeout_ms;
    char key[600];

    if (and_free) {
        while (strcmp(lb_str(lb_inspect(c, lock), "state"), "free") != 0 && lb_now_ms() < deadline)
            lb_sleep_ms(20);
        lb_expect_free(c, lock);
    }
    for (size_t k = 0; k < 4; k++) {
        snprintf(key, sizeof(key), "lb:{%s}:%s", lock, sfx[k]);
        while (lb_redis_key_exists(r, key) && lb_now_ms() < deadline)
            lb_sleep_ms(20);
        cr_assert_not(lb_redis_key_exists(r, key), "queue key %s still exists", key);
    }
    {
        json_t *in = lb_inspect(c, lock);
        cr_assert_eq(lb_int(in, "waiters"), 0, "%s", lb_dump(in));
    }
}

int lb_read_any(lb_client **c, const bool *pending, int n, int timeout_ms, json_t **out)
{
    int64_t deadline = lb_now_ms() + timeout_ms;

    for (;;) {
        for (int k = 0; k < n; k++) {
            if (!pending[k])
                continue;
            json_t *m = lb_read_msg(c[k], 0);
            if (m) {
                *out = m;
                return k;
            }
        }
        cr_assert_lt(lb_now_ms(), deadline, "no client was granted within %d ms", timeout_ms);
        lb_sleep_ms(1);
    }
}
