/*
 * lockctl, the command-line client, end to end against a real broker and
 * Redis: run's exit statuses (the command's own, busy, timeout, lost,
 * signals), the command stopped when its lease is lost (a frozen broker
 * included: the liveness check), signals forwarded,
 * LOCKBROKER_FENCE, mutual exclusion of two runs, acquire --detach /
 * release / extend, the text and --json output of inspect, stats and ping,
 * --auth-file, usage errors and an unreachable broker.
 *
 * lockctl is the sanitizer build (LB_LOCKCTL_BIN, default
 * build/san/lockctl): a leak makes it exit with LeakSanitizer's status, so
 * every exact exit status asserted here also checks it freed everything.
 * Its stdout and stderr go to files in the test's temp dir.
 */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The statuses lockctl documents in --help. */
enum {
    EX_OK_ = 0,
    EX_USAGE_ = 64,
    EX_UNAVAILABLE_ = 69,
    EX_INTERNAL_ = 70,
    EX_BUSY_ = 73,
    EX_TIMEOUT_ = 74,
    EX_LOST_ = 75,
    EX_REFUSED_ = 76,
    EX_NOTFOUND_ = 127,
};

/* A status lc_wait returns when lockctl itself was killed by a signal. */
#define KILLED_BY(sig) (1000 + (sig))

#define MAX_ARGS 48

typedef struct lc_proc {
    pid_t pid;
    int n;             /* sequence number: out/err file names */
    char out[PATH_MAX];
    char err[PATH_MAX];
    int64_t started_ms;
} lc_proc;

static int proc_seq;

static const char *lockctl_bin(void)
{
    const char *b = getenv("LB_LOCKCTL_BIN");
    return b && *b ? b : "build/san/lockctl";
}

static const char *tmp_path(const char *name)
{
    static char bufs[8][PATH_MAX];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", lb_tmpdir(), name);
    return b;
}

static const char *tcp_url(lb_broker *b)
{
    static char buf[64];
    snprintf(buf, sizeof(buf), "tcp://127.0.0.1:%d", lb_broker_port(b));
    return buf;
}

static const char *unix_url(lb_broker *b)
{
    static char buf[PATH_MAX + 16];
    snprintf(buf, sizeof(buf), "unix://%s", lb_broker_unix_path(b));
    return buf;
}

/* Starts lockctl with the NULL-terminated arguments (after the binary).
 * env_url, when not NULL, is put in LOCKBROKER_URL; else it is unset. */
static lc_proc lc_start_env(const char *env_url, const char *const *args)
{
    lc_proc p = {.n = ++proc_seq};
    const char *argv[MAX_ARGS + 2];
    int k = 0;

    argv[k++] = lockctl_bin();
    for (int i = 0; args[i]; i++) {
        cr_assert(k < MAX_ARGS, "too many arguments");
        argv[k++] = args[i];
    }
    argv[k] = NULL;
    snprintf(p.out, sizeof(p.out), "%s/lc%d.out", lb_tmpdir(), p.n);
    snprintf(p.err, sizeof(p.err), "%s/lc%d.err", lb_tmpdir(), p.n);

    pid_t parent = getpid();
    fflush(NULL);
    p.started_ms = lb_now_ms();
    p.pid = fork();
    cr_assert(p.pid >= 0, "fork: %s", strerror(errno));
    if (p.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int o = open(p.out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(p.err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || nul < 0)
            _exit(127);
        dup2(nul, 0);
        dup2(o, 1);
        dup2(e, 2);
        for (int i = 3; i < 1024; i++)
            close(i);
        /* lockctl keeps signals it finds ignored ignored: start it clean */
        const int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            signal(sigs[i], SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (env_url)
            setenv("LOCKBROKER_URL", env_url, 1);
        else
            unsetenv("LOCKBROKER_URL");
        execv(argv[0], (char *const *)argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return p;
}

static lc_proc lc_startv(const char *first, va_list ap)
{
    const char *args[MAX_ARGS + 1];
    int k = 0;
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        cr_assert(k < MAX_ARGS);
        args[k++] = a;
    }
    args[k] = NULL;
    return lc_start_env(NULL, args);
}

static lc_proc lc_start(const char *first, ...) __attribute__((sentinel));
static lc_proc lc_start(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    lc_proc p = lc_startv(first, ap);
    va_end(ap);
    return p;
}

static char *slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return buf;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Waits for lockctl to end (SIGKILL and fail after timeout_ms). Returns its
 * exit status, or KILLED_BY(sig). Prints its stderr when the test fails
 * later, by keeping it in the assertion messages of the callers. */
static int lc_wait(lc_proc *p, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid)
            break;
        cr_assert(r == 0 || errno == EINTR, "waitpid: %s", strerror(errno));
        if (lb_now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            char e[2048];
            cr_assert_fail("lockctl #%d did not end within %d ms; stderr: %s", p->n, timeout_ms,
                           slurp(p->err, e, sizeof(e)));
        }
        lb_sleep_ms(5);
    }
    p->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : KILLED_BY(WTERMSIG(st));
}

/* Runs lockctl to its end and returns the status; stdout and stderr in out
 * and err (each 8 KiB). */
typedef struct lc_result {
    int status;
    int64_t elapsed_ms;
    char out[8192];
    char err[8192];
} lc_result;

static lc_result *lc_run_args(lc_result *r, const char *env_url, const char *const *args)
{
    lc_proc p = lc_start_env(env_url, args);
    r->status = lc_wait(&p, 20000);
    r->elapsed_ms = lb_now_ms() - p.started_ms;
    slurp(p.out, r->out, sizeof(r->out));
    slurp(p.err, r->err, sizeof(r->err));
    return r;
}

static lc_result *lc_do(lc_result *r, const char *first, ...) __attribute__((sentinel));
static lc_result *lc_do(lc_result *r, const char *first, ...)
{
    const char *args[MAX_ARGS + 1];
    int k = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        cr_assert(k < MAX_ARGS);
        args[k++] = a;
    }
    va_end(ap);
    args[k] = NULL;
    return lc_run_args(r, NULL, args);
}

#define EXPECT_STATUS(res, want)                                                           \
    cr_assert_eq((res)->status, (want), "lockctl exit %d, want %d; stdout: %s; stderr: %s", \
                 (res)->status, (want), (res)->out, (res)->err)

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static bool wait_file(const char *path, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    while (lb_now_ms() < deadline) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0)
            return true;
        lb_sleep_ms(10);
    }
    return false;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "fopen %s: %s", path, strerror(errno));
    fputs("x\n", f);
    fclose(f);
}

/* True once pid is gone or a zombie (an orphan may wait for its reaper). */
static bool proc_gone(pid_t pid, int timeout_ms)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return true;
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *rp = strrchr(buf, ')');
            if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
                return true;
        }
        if (lb_now_ms() > deadline)
            return false;
        lb_sleep_ms(10);
    }
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Parses lockctl's --json output (one line) with jansson; the value is
 * freed by the caller. */
static json_t *parse_json_out(const lc_result *r)
{
    json_error_t e;
    cr_assert_eq(count_lines(r->out), 1, "--json prints one line: %s", r->out);
    json_t *j = json_loads(r->out, JSON_REJECT_DUPLICATES, &e);
    cr_assert(j && json_is_object(j), "--json output is not a JSON object (%s): %s", e.text,
              r->out);
    return j;
}

static int64_t read_int_file(const char *path)
{
    char buf[128];
    slurp(path, buf, sizeof(buf));
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    cr_assert(end != buf && errno == 0, "%s holds no integer: '%s'", path, buf);
    return v;
}

/* Waits (up to 5 s) until inspect of name shows n waiters. */
static void wait_waiters(lb_client *c, const char *name, int64_t n)
{
    int64_t deadline = lb_now_ms() + 5000;

    for (;;) {
        json_t *in = lb_inspect(c, name);
        if (lb_int(in, "waiters") == n)
            return;
        cr_assert(lb_now_ms() < deadline, "%s: want %lld waiters: %s", name, (long long)n,
                  lb_dump(in));
        lb_sleep_ms(20);
    }
}

static void start_pair(lb_redis **r, lb_broker **b)
{
    *r = lb_redis_start(false);
    *b = lb_broker_start(*r, NULL);
}

/* ---- run: exit statuses ------------------------------------------------------ */

LB_TEST(lockctl, run_exit_statuses, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = tcp_url(b);
    lc_result res;

    /* success, and the command's output passes through */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "st", "--", "sh", "-c", "echo hello", NULL), 0);
    cr_assert_str_eq(res.out, "hello\n");
    cr_assert_str_eq(res.err, "", "nothing on stderr on success: %s", res.err);

    /* the command's own non-zero status, without "--" too */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "st", "sh", "-c", "exit 7", NULL), 7);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--ttl", "5s", "st", "false", NULL), 1);

    /* a command killed by a signal: 128 + signo, like shells */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "st", "--", "sh", "-c", "kill -KILL $$", NULL),
                  128 + SIGKILL);

    /* a command that does not exist: 127, with a message */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "st", "--", "/nonexistent/cmd", NULL),
                  EX_NOTFOUND_);
    cr_assert(strstr(res.err, "/nonexistent/cmd"), "%s", res.err);

    /* every run released its lease: the lock is free, nothing left in Redis */
    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_free(c, "st");
    lb_redis_assert_lock_keys_expire(r, "lb:", "st");
    lb_end();
}

LB_TEST(lockctl, run_busy_and_timeout, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = unix_url(b);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *lease = lb_must_acquire(c, "busy", 30000);
    const char *marker = tmp_path("ran");
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "touch %s", marker);
    lc_result res;

    /* --no-wait: busy */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--no-wait", "busy", "--", "sh", "-c", cmd,
                        NULL),
                  EX_BUSY_);
    cr_assert(strstr(res.err, "busy"), "%s", res.err);
    cr_assert_eq(count_lines(res.err), 1, "one line on stderr: %s", res.err);
    cr_assert(res.elapsed_ms < 3000, "--no-wait took %lld ms", (long long)res.elapsed_ms);

    /* --wait 300ms: timeout, a distinct status, after about 300 ms */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--wait", "300ms", "busy", "--", "sh", "-c",
                        cmd, NULL),
                  EX_TIMEOUT_);
    cr_assert(res.elapsed_ms >= 300 && res.elapsed_ms < 4000, "--wait 300ms took %lld ms",
              (long long)res.elapsed_ms);
    cr_assert(!file_exists(marker), "the command must not run without the lock");

    /* acquire --detach says the same */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "acquire", "--detach", "--no-wait", "busy", NULL),
                  EX_BUSY_);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "acquire", "busy", "--detach", "--wait=200ms", NULL),
                  EX_TIMEOUT_);
    cr_assert_str_eq(res.out, "");

    /* the timed-out waiters are gone; once released the run goes through */
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--no-wait", "busy", "--", "sh", "-c", cmd,
                        NULL),
                  0);
    cr_assert(file_exists(marker));
    lb_end();
}

/* ---- run: lease lost ------------------------------------------------------------ */

LB_TEST(lockctl, run_lost_lease_stops_command, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started"), *termed = tmp_path("termed");
    const char *grandchild = tmp_path("grandchild");
    char cmd[4 * PATH_MAX];
    /* the trap does not stop the background sleep: lockctl must, by
     * signalling the command's whole process group */
    snprintf(cmd, sizeof(cmd),
             "trap 'echo term >%s; exit 9' TERM; sleep 30 & echo $! >%s; echo $$ >%s; wait",
             termed, grandchild, started);

    lc_proc p = lc_start("--broker", tcp_url(b), "run", "--ttl", "600ms", "lost", "--", "sh",
                         "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    pid_t gc = (pid_t)read_int_file(grandchild);
    /* renewals every 200 ms keep it held well past its TTL */
    lb_sleep_ms(900);
    cr_assert(!file_exists(termed), "the command was stopped while its lease was held");
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *in = lb_inspect(c, "lost");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));

    /* the lock's keys vanish: the broker reports the lease lost */
    int64_t t0 = lb_now_ms();
    cr_assert(lb_redis_del_lock_keys(r, "lb:", "lost") > 0);
    int st = lc_wait(&p, 10000);
    int64_t took = lb_now_ms() - t0;
    char err[4096];
    slurp(p.err, err, sizeof(err));
    cr_assert_eq(st, EX_LOST_, "exit %d, want %d (lost); stderr: %s", st, EX_LOST_, err);
    cr_assert(took < 3000, "lost noticed after %lld ms", (long long)took);
    cr_assert(wait_file(termed, 1000), "the command got no SIGTERM");
    cr_assert(strstr(err, "lost"), "stderr says why: %s", err);
    cr_assert(proc_gone(gc, 2000), "the command's own child survived the lost lease");
    lb_end();
}

LB_TEST(lockctl, run_lost_lease_kill_after, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started");
    char cmd[2 * PATH_MAX];
    /* ignores SIGTERM: only SIGKILL ends it */
    snprintf(cmd, sizeof(cmd),
             "trap '' TERM; echo $$ >%s; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
             started);

    lc_proc p = lc_start("--broker", tcp_url(b), "run", "--ttl", "600ms", "--kill-after",
                         "700ms", "lostk", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    pid_t child = (pid_t)read_int_file(started);
    int64_t t0 = lb_now_ms();
    cr_assert(lb_redis_del_lock_keys(r, "lb:", "lostk") > 0);
    int st = lc_wait(&p, 10000);
    int64_t took = lb_now_ms() - t0;
    char err[4096];
    slurp(p.err, err, sizeof(err));
    cr_assert_eq(st, EX_LOST_, "exit %d; stderr: %s", st, err);
    cr_assert(took >= 700 && took < 4000, "SIGKILL after --kill-after: took %lld ms",
              (long long)took);
    cr_assert(kill(child, 0) < 0 && errno == ESRCH, "the command still runs");
    cr_assert(strstr(err, "SIGKILL"), "%s", err);
    lb_end();
}

LB_TEST(lockctl, run_broker_dies_counts_as_lost, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started"), *termed = tmp_path("termed");
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "trap 'echo term >%s; kill $! 2>/dev/null; exit 0' TERM; echo $$ >%s; "
             "sleep 30 & wait",
             termed, started);
    lc_proc p = lc_start("--broker", unix_url(b), "run", "bd", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    lb_broker_kill9(b);
    int st = lc_wait(&p, 10000);
    char err[4096];
    /* the command exited 0 on SIGTERM, still the run failed: lost */
    cr_assert_eq(st, EX_LOST_, "exit %d; stderr: %s", st, slurp(p.err, err, sizeof(err)));
    cr_assert(wait_file(termed, 1000), "the command got no SIGTERM");
    lb_end();
}

LB_TEST(lockctl, run_broker_shutdown_warns_then_lost, 40)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--shutdown-grace-ms", "800", NULL);
    const char *started = tmp_path("started");
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "echo $$ >%s; sleep 30", started);
    lc_proc p = lc_start("--broker", tcp_url(b), "run", "sd", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");

    /* a graceful stop: the shutdown event first (lockctl warns with the
     * grace), then the session ends and the lease with it */
    lb_broker_signal(b, SIGTERM);
    int st = lc_wait(&p, 10000);
    char err[4096];
    slurp(p.err, err, sizeof(err));
    cr_assert_eq(st, EX_LOST_, "exit %d; stderr: %s", st, err);
    cr_assert(strstr(err, "shutting down") && strstr(err, "800 ms"), "no warning: %s", err);
    cr_assert(strstr(err, "lost the lease"), "%s", err);
    lb_broker_wait_exit(b);
    lb_end();
}

LB_TEST(lockctl, run_lease_lost_found_at_release, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started"), *go = tmp_path("go");
    char cmd[3 * PATH_MAX];
    /* the command waits for the go file, then exits 0 at once: the lease
     * (TTL 30 s, next renewal in 10 s) vanished meanwhile, and only the
     * release after the command finds it gone */
    snprintf(cmd, sizeof(cmd), "echo $$ >%s; while [ ! -f %s ]; do sleep 0.02; done", started,
             go);
    lc_proc p = lc_start("--broker", tcp_url(b), "run", "--ttl", "30s", "lr", "--", "sh", "-c",
                         cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    cr_assert(lb_redis_del_lock_keys(r, "lb:", "lr") > 0);
    FILE *f = fopen(go, "w");
    cr_assert(f);
    fclose(f);
    int st = lc_wait(&p, 10000);
    char err[4096];
    slurp(p.err, err, sizeof(err));
    /* exit 0 would tell a script its command ran under the lock */
    cr_assert_eq(st, EX_LOST_, "exit %d; stderr: %s", st, err);
    cr_assert(strstr(err, "lost"), "%s", err);
    lb_end();
}

/* A fake broker for one connection: accepts, answers hello, then answers
 * every read with a line that is not JSON. */
typedef struct garbage_broker {
    int lfd;
    int port;
    pthread_t thread;
} garbage_broker;

static void *garbage_main(void *arg)
{
    garbage_broker *g = arg;
    int fd = accept(g->lfd, NULL, NULL);
    char buf[4096];

    if (fd < 0)
        return NULL;
    /* hello (lbc's first id is 1) is answered; what follows gets junk */
    static const char hello[] = "{\"id\":1,\"ok\":true,\"server\":\"fake/0\",\"proto\":1}\n";
    if (read(fd, buf, sizeof(buf)) > 0 && write(fd, hello, sizeof(hello) - 1) > 0)
        while (read(fd, buf, sizeof(buf)) > 0)
            if (write(fd, "this is not json\n", 17) < 0)
                break;
    close(fd);
    return NULL;
}

static void garbage_start(garbage_broker *g)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    g->lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(g->lfd >= 0);
    cr_assert(bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    cr_assert(listen(g->lfd, 4) == 0);
    cr_assert(getsockname(g->lfd, (struct sockaddr *)&a, &len) == 0);
    g->port = ntohs(a.sin_port);
    cr_assert(pthread_create(&g->thread, NULL, garbage_main, g) == 0);
}

static void garbage_stop(garbage_broker *g)
{
    shutdown(g->lfd, SHUT_RDWR); /* ends a pending accept */
    close(g->lfd);
    pthread_join(g->thread, NULL);
}

LB_TEST(lockctl, bad_data_from_the_broker_is_internal, 30)
{
    garbage_broker g;
    lc_result res;
    char url[64];

    garbage_start(&g);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", g.port);
    EXPECT_STATUS(lc_do(&res, "--broker", url, "--timeout", "5s", "ping", NULL), EX_INTERNAL_);
    cr_assert(strstr(res.err, "not a JSON object"), "%s", res.err);
    cr_assert_eq(count_lines(res.err), 1, "%s", res.err);
    garbage_stop(&g);
    lb_end();
}

LB_TEST(lockctl, signal_while_waiting_on_a_frozen_broker_gives_up_at_once, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    lb_client *c = lb_connect(b, LB_TCP);
    const char *lease = lb_must_acquire(c, "frz", 30000);
    lc_proc w = lc_start("--broker", tcp_url(b), "--timeout", "10s", "run", "frz", "--", "true",
                         NULL);
    wait_waiters(c, "frz", 1);

    /* The broker frozen: a cancel would wait for its answer (up to
     * --timeout); ending the session does not wait for anything. */
    cr_assert_eq(kill(lb_broker_pid(b), SIGSTOP), 0);
    int64_t t0 = lb_now_ms();
    cr_assert_eq(kill(w.pid, SIGTERM), 0);
    int st = lc_wait(&w, 12000);
    int64_t took = lb_now_ms() - t0;
    kill(lb_broker_pid(b), SIGCONT);
    char err[4096];
    slurp(w.err, err, sizeof(err));
    cr_assert_eq(st, 128 + SIGTERM, "exit %d; stderr: %s", st, err);
    cr_assert_lt(took, 3000, "gave up after %lld ms (--timeout is 10 s)", (long long)took);
    cr_assert(strstr(err, "giving up"), "%s", err);

    /* the waiter went with the session (seen once the broker runs again) */
    wait_waiters(c, "frz", 0);
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_end();
}

/* ---- run: the liveness check ------------------------------------------------------- */

/* Issue 26's scenario: the holder (lockctl run, default options) on broker
 * 1, a waiter (another lockctl run) on broker 2, one Redis; broker 1 is
 * frozen (SIGSTOP). The holder must stop its command and exit 75 within
 * about TTL/3, before the waiter's command starts (the lease runs out in
 * Redis 2/3 of a TTL or more after the freeze): never two commands under
 * the lock. lockctl calls nothing into the client meanwhile (it waits in
 * poll()): the client's own thread must notice. */
LB_TEST(lockctl, run_frozen_broker_stops_the_command_before_a_waiter_is_granted, 60)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b1 = lb_broker_start(r, NULL);
    lb_broker *b2 = lb_broker_start(r, NULL);
    const char *started = tmp_path("started"), *termed = tmp_path("termed");
    const char *granted = tmp_path("granted");
    const int64_t ttl = 3000;
    char u1[64], u2[64], cmd[3 * PATH_MAX], wcmd[PATH_MAX + 32];

    snprintf(u1, sizeof(u1), "%s", tcp_url(b1));
    snprintf(u2, sizeof(u2), "%s", tcp_url(b2));
    snprintf(cmd, sizeof(cmd),
             "trap 'echo term >%s; kill $! 2>/dev/null; exit 0' TERM; echo $$ >%s; "
             "sleep 30 & wait",
             termed, started);
    snprintf(wcmd, sizeof(wcmd), "echo granted >%s", granted);
    lc_proc h = lc_start("--broker", u1, "run", "--ttl", "3s", "frz2", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    lc_proc w = lc_start("--broker", u2, "run", "--wait", "30s", "frz2", "--", "sh", "-c", wcmd,
                         NULL);
    lb_client *c2 = lb_connect(b2, LB_TCP);
    wait_waiters(c2, "frz2", 1);
    /* a live broker keeps the lease held, lockctl calling nothing */
    lb_sleep_ms((int)ttl / 2);
    cr_assert(!file_exists(termed), "the command was stopped while the broker ran");
    cr_assert_eq(waitpid(h.pid, NULL, WNOHANG), 0, "the holder ended while the broker ran");

    cr_assert_eq(kill(lb_broker_pid(b1), SIGSTOP), 0);
    int64_t t0 = lb_now_ms(), exit_at = -1, termed_at = -1, granted_at = -1;
    int hst = 0;
    while (lb_now_ms() - t0 < 20000 && (exit_at < 0 || termed_at < 0 || granted_at < 0)) {
        if (exit_at < 0 && waitpid(h.pid, &hst, WNOHANG) == h.pid)
            exit_at = lb_now_ms();
        if (termed_at < 0 && file_exists(termed))
            termed_at = lb_now_ms();
        if (granted_at < 0 && file_exists(granted))
            granted_at = lb_now_ms();
        lb_sleep_ms(5);
    }
    kill(lb_broker_pid(b1), SIGCONT);
    char err[4096];
    slurp(h.err, err, sizeof(err));
    cr_log_info("after SIGSTOP: command stopped %lld ms, holder exited %lld ms, waiter's "
                "command ran %lld ms (TTL %lld ms)",
                (long long)(termed_at - t0), (long long)(exit_at - t0),
                (long long)(granted_at - t0), (long long)ttl);
    cr_assert_geq(exit_at, 0, "the holder did not exit within 20 s; stderr: %s", err);
    cr_assert(WIFEXITED(hst) && WEXITSTATUS(hst) == EX_LOST_, "holder: status %#x, want exit %d; "
              "stderr: %s", hst, EX_LOST_, err);
    cr_assert_geq(termed_at, 0, "the command got no SIGTERM");
    cr_assert_geq(granted_at, 0, "the waiter was not granted within 20 s");
    cr_assert_lt(termed_at, granted_at,
                 "the waiter's command ran %lld ms after SIGSTOP, the holder's was stopped only "
                 "%lld ms after it: two commands under one lock",
                 (long long)(granted_at - t0), (long long)(termed_at - t0));
    cr_assert_lt(exit_at, granted_at, "the holder exited after the waiter was granted");
    cr_assert_leq(termed_at - t0, ttl / 3 + 1000, "stopped %lld ms after SIGSTOP, want about TTL/3",
                  (long long)(termed_at - t0));
    cr_assert(strstr(err, "lost the lease") && strstr(err, "frz2"), "%s", err);
    int st = lc_wait(&w, 10000);
    cr_assert_eq(st, 0, "waiter: exit %d; stderr: %s", st, slurp(w.err, err, sizeof(err)));
    lb_end();
}

/* A fake broker for lockctl runs, one connection after another: answers
 * hello, grants every acquire with the TTL asked, answers release and
 * ping, counts the pings; once `mute` is set it answers nothing. */
typedef struct rec_broker {
    int lfd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    int pings;
    bool mute_after_grant; /* stop answering once a lease was granted */
    bool muted;
    bool lost_on_ping;     /* answer a ping with a "lost" event for the lease first */
    long lease_id;         /* the last lease granted ("t<id>") */
} rec_broker;

static long rec_field(const char *line, const char *key)
{
    char k[40];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(line, k);
    return p ? strtol(p + strlen(k), NULL, 10) : -1;
}

static void *rec_main(void *arg)
{
    rec_broker *g = arg;
    int fd;

    while ((fd = accept(g->lfd, NULL, NULL)) >= 0) {
        char line[4096], out[512];
        size_t n = 0;
        char ch;
        while (recv(fd, &ch, 1, 0) == 1) {
            if (ch != '\n') {
                if (n + 1 < sizeof(line))
                    line[n++] = ch;
                continue;
            }
            line[n] = '\0';
            n = 0;
            long id = rec_field(line, "id");
            pthread_mutex_lock(&g->mu);
            bool muted = g->muted, lost = false;
            if (strstr(line, "\"op\":\"ping\"")) {
                g->pings++;
                lost = g->lost_on_ping && g->lease_id > 0;
            }
            if (strstr(line, "\"op\":\"acquire\"")) {
                g->lease_id = id;
                if (g->mute_after_grant)
                    g->muted = true;
            }
            pthread_mutex_unlock(&g->mu);
            if (muted)
                continue;
            if (lost) /* one write: whoever reads the ping's answer reads the loss */
                snprintf(out, sizeof(out),
                         "{\"event\":\"lost\",\"lease\":\"t%ld\",\"lock\":\"x\",\"reason\":"
                         "\"expired\"}\n{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n",
                         g->lease_id, id);
            else if (strstr(line, "\"op\":\"hello\""))
                snprintf(out, sizeof(out),
                         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/0\",\"proto\":1}\n", id);
            else if (strstr(line, "\"op\":\"acquire\""))
                snprintf(out, sizeof(out),
                         "{\"id\":%ld,\"ok\":true,\"lease\":\"t%ld\",\"lock\":\"x\",\"mode\":"
                         "\"exclusive\",\"fence\":%ld,\"ttl_ms\":%ld,\"count\":1}\n",
                         id, id, id, rec_field(line, "ttl_ms"));
            else if (strstr(line, "\"op\":\"release\""))
                snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"count\":0}\n", id);
            else
                snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n", id);
            if (write(fd, out, strlen(out)) < 0)
                break;
        }
        close(fd);
    }
    return NULL;
}

static void rec_start(rec_broker *g, char *url, size_t len)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t alen = sizeof(a);

    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(g->lfd >= 0);
    cr_assert(bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    cr_assert(listen(g->lfd, 4) == 0);
    cr_assert(getsockname(g->lfd, (struct sockaddr *)&a, &alen) == 0);
    g->port = ntohs(a.sin_port);
    snprintf(url, len, "tcp://127.0.0.1:%d", g->port);
    cr_assert(pthread_create(&g->thread, NULL, rec_main, g) == 0);
}

static int rec_pings(rec_broker *g)
{
    pthread_mutex_lock(&g->mu);
    int n = g->pings;
    pthread_mutex_unlock(&g->mu);
    return n;
}

static void rec_stop(rec_broker *g)
{
    shutdown(g->lfd, SHUT_RDWR); /* ends a pending accept */
    close(g->lfd);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
}

/* The check is on by default: a run of 1 s on a 300 ms lease pings (a
 * bound of 100 ms: every 33 ms); --no-liveness-check sends no ping at all;
 * a broker that goes silent after the grant is a lost lease at once; a
 * loss that the client's thread reads (with its ping's answer) while
 * lockctl waits in poll() stops the command too. */
LB_TEST(lockctl, run_liveness_check_pings_and_can_be_turned_off, 40)
{
    rec_broker g;
    char url[64];
    lc_result res;

    rec_start(&g, url, sizeof(url));
    EXPECT_STATUS(lc_do(&res, "--broker", url, "run", "--ttl", "300ms", "lv", "--", "sleep", "1",
                        NULL),
                  0);
    int on = rec_pings(&g);
    cr_assert_geq(on, 5, "%d pings in a 1 s run of a 300 ms lease", on);

    EXPECT_STATUS(lc_do(&res, "--broker", url, "--no-liveness-check", "run", "--ttl", "300ms",
                        "lv", "--", "sleep", "1", NULL),
                  0);
    cr_assert_eq(rec_pings(&g), on, "pings with --no-liveness-check");
    EXPECT_STATUS(lc_do(&res, "--no-liveness-check", "--broker", url, "run", "--ttl", "200ms",
                        "lv", "--", "sleep", "0.5", NULL),
                  0);
    cr_assert_eq(rec_pings(&g), on, "pings with --no-liveness-check");

    pthread_mutex_lock(&g.mu);
    g.mute_after_grant = true;
    pthread_mutex_unlock(&g.mu);
    EXPECT_STATUS(lc_do(&res, "--broker", url, "--timeout", "1s", "run", "--ttl", "600ms", "lv",
                        "--", "sleep", "10", NULL),
                  EX_LOST_);
    cr_assert(res.elapsed_ms < 3000, "a silent broker noticed after %lld ms (bound 200 ms)",
              (long long)res.elapsed_ms);
    cr_assert(strstr(res.err, "lost the lease"), "%s", res.err);

    pthread_mutex_lock(&g.mu);
    g.mute_after_grant = g.muted = false;
    g.lost_on_ping = true;
    pthread_mutex_unlock(&g.mu);
    /* who reads first, that thread or lockctl's own lbc_poll, is a race:
     * a few runs make the first case (lockctl's poll() then sees nothing
     * on the socket) all but certain */
    for (int i = 0; i < 4; i++) {
        EXPECT_STATUS(lc_do(&res, "--broker", url, "run", "--ttl", "3s", "lv", "--", "sleep",
                            "10", NULL),
                      EX_LOST_);
        cr_assert(res.elapsed_ms < 4000, "the loss stopped the command after %lld ms",
                  (long long)res.elapsed_ms);
        cr_assert(strstr(res.err, "expired"), "%s", res.err);
    }
    rec_stop(&g);
    lb_end();
}

LB_TEST(lockctl, run_release_without_answer_keeps_the_status, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started"), *go = tmp_path("go");
    char cmd[3 * PATH_MAX];
    /* the lease is held for the command's whole run; only the release gets
     * no answer (Redis frozen): not a loss, so the command's status (7) */
    snprintf(cmd, sizeof(cmd), "echo $$ >%s; while [ ! -f %s ]; do sleep 0.02; done; exit 7",
             started, go);
    lc_proc p = lc_start("--broker", tcp_url(b), "--timeout", "1s", "run", "--ttl", "30s", "rel",
                         "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    cr_assert_eq(kill(lb_redis_pid(r), SIGSTOP), 0);
    FILE *f = fopen(go, "w");
    cr_assert(f);
    fclose(f);
    int st = lc_wait(&p, 10000);
    kill(lb_redis_pid(r), SIGCONT);
    char err[4096];
    slurp(p.err, err, sizeof(err));
    cr_assert_eq(st, 7, "exit %d; stderr: %s", st, err);
    cr_assert(strstr(err, "release"), "a warning about the release: %s", err);
    lb_end();
}

LB_TEST(lockctl, shutdown_while_waiting_is_one_line, 40)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--shutdown-grace-ms", "500", NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    (void)lb_must_acquire(c, "sdw", 30000);
    lc_proc w = lc_start("--broker", tcp_url(b), "run", "sdw", "--", "true", NULL);
    wait_waiters(c, "sdw", 1);
    lb_broker_signal(b, SIGTERM);
    int st = lc_wait(&w, 10000);
    char err[4096];
    slurp(w.err, err, sizeof(err));
    cr_assert_eq(st, EX_UNAVAILABLE_, "exit %d; stderr: %s", st, err);
    cr_assert(strstr(err, "shutting_down"), "%s", err);
    cr_assert_eq(count_lines(err), 1, "no lease, no warning about one: %s", err);
    lb_broker_wait_exit(b);
    lb_end();
}

/* ---- run: signals ---------------------------------------------------------------- */

LB_TEST(lockctl, run_forwards_signals, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *started = tmp_path("started"), *got = tmp_path("got"), *usr = tmp_path("usr1");
    char cmd[4 * PATH_MAX];
    /* USR1 is noted and the command goes on; TERM ends it with status 3 */
    snprintf(cmd, sizeof(cmd),
             "trap 'echo usr1 >%s; kill $! 2>/dev/null' USR1; trap 'echo got >%s; kill $! 2>/dev/null; exit 3' TERM; "
             "echo $$ >%s; while :; do sleep 30 & wait; done",
             usr, got, started);

    lc_proc p = lc_start("--broker", tcp_url(b), "run", "sig", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started, 5000), "the command did not start");
    cr_assert_eq(kill(p.pid, SIGUSR1), 0);
    cr_assert(wait_file(usr, 3000), "SIGUSR1 was not forwarded");
    lb_sleep_ms(100);
    cr_assert_eq(waitpid(p.pid, NULL, WNOHANG), 0, "lockctl ended on SIGUSR1");
    cr_assert_eq(kill(p.pid, SIGTERM), 0);
    int st = lc_wait(&p, 5000);
    char buf[256], err[4096];
    /* defined: lockctl exits with the command's status (3), not 128+15 */
    cr_assert_eq(st, 3, "exit %d; stderr: %s", st, slurp(p.err, err, sizeof(err)));
    cr_assert_str_eq(slurp(got, buf, sizeof(buf)), "got\n");

    /* a command that does not catch the signal dies of it: 128 + 15 */
    const char *started2 = tmp_path("started2");
    snprintf(cmd, sizeof(cmd), "echo $$ >%s; exec sleep 30", started2);
    lc_proc q = lc_start("--broker", tcp_url(b), "run", "sig", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(started2, 5000), "the command did not start");
    lb_sleep_ms(50); /* let sh exec sleep */
    cr_assert_eq(kill(q.pid, SIGTERM), 0);
    st = lc_wait(&q, 5000);
    cr_assert_eq(st, 128 + SIGTERM, "exit %d; stderr: %s", st, slurp(q.err, err, sizeof(err)));

    lb_client *c = lb_connect(b, LB_TCP);
    lb_expect_free(c, "sig");

    /* a signal while waiting for the lock: lockctl gives up, 128 + signo,
     * and its pending acquire is withdrawn */
    const char *lease = lb_must_acquire(c, "sig", 30000);
    lc_proc w = lc_start("--broker", tcp_url(b), "run", "sig", "--", "true", NULL);
    wait_waiters(c, "sig", 1);
    cr_assert_eq(kill(w.pid, SIGINT), 0);
    st = lc_wait(&w, 5000);
    cr_assert_eq(st, 128 + SIGINT, "exit %d; stderr: %s", st, slurp(w.err, err, sizeof(err)));
    wait_waiters(c, "sig", 0);
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease));
    lb_end();
}

/* ---- run: fence, environment ------------------------------------------------------- */

LB_TEST(lockctl, run_sets_fence_env, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *fence = tmp_path("fence"), *envf = tmp_path("env"), *go = tmp_path("go");
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "env >%s; echo \"$LOCKBROKER_FENCE\" >%s; while [ ! -e %s ]; do sleep 0.05; done",
             envf, fence, go);
    lc_proc p = lc_start("--broker", tcp_url(b), "run", "fen", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(fence, 5000), "the command did not start");
    int64_t f = read_int_file(fence);

    /* inspect, as --json, parsed: the same fence; as text: held by lockctl */
    lc_result res;
    EXPECT_STATUS(lc_do(&res, "--broker", tcp_url(b), "--json", "inspect", "fen", NULL), 0);
    json_t *j = parse_json_out(&res);
    cr_assert(json_is_true(json_object_get(j, "ok")), "%s", res.out);
    cr_assert_eq(json_integer_value(json_object_get(j, "fence")), f,
                 "LOCKBROKER_FENCE %lld vs inspect %s", (long long)f, res.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "exclusive");
    json_decref(j);
    EXPECT_STATUS(lc_do(&res, "--broker", tcp_url(b), "inspect", "fen", NULL), 0);
    cr_assert(strstr(res.out, "exclusive"), "%s", res.out);
    cr_assert(strstr(res.out, "lockctl/"), "the holder's client label: %s", res.out);
    cr_assert(strstr(res.out, "owner \"\""), "the protocol's default owner: %s", res.out);

    /* only the fence is exposed, never the lease token */
    char env[16384];
    slurp(envf, env, sizeof(env));
    for (char *line = strtok(env, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "LOCKBROKER_", 11) == 0)
            cr_assert(strncmp(line, "LOCKBROKER_FENCE=", 17) == 0, "unexpected %s", line);

    touch(go);
    int st = lc_wait(&p, 5000);
    cr_assert_eq(st, 0);

    /* a later run gets a higher fence */
    remove(fence);
    remove(go);
    touch(go);
    EXPECT_STATUS(lc_do(&res, "--broker", tcp_url(b), "run", "fen", "--", "sh", "-c", cmd, NULL), 0);
    cr_assert(read_int_file(fence) > f, "fences increase");
    lb_end();
}

/* ---- run: mutual exclusion ----------------------------------------------------------- */

static void interval(const char *tag, int64_t *start, int64_t *end)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/%s.start", lb_tmpdir(), tag);
    *start = read_int_file(path);
    snprintf(path, sizeof(path), "%s/%s.end", lb_tmpdir(), tag);
    *end = read_int_file(path);
}

/* Two runs at once of a command that notes its start and end (ns). */
static void two_runs(lb_broker *b, const char *mode, const char *lock, int64_t *s1, int64_t *e1,
                     int64_t *s2, int64_t *e2, int64_t *elapsed1, int64_t *elapsed2)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "date +%%s%%N >%s/$1.start; sleep 0.5; date +%%s%%N >%s/$1.end", lb_tmpdir(),
             lb_tmpdir());
    char t1[32], t2[32];
    snprintf(t1, sizeof(t1), "%s-1", lock);
    snprintf(t2, sizeof(t2), "%s-2", lock);
    const char *a1[] = {"--broker", tcp_url(b), "run", mode, lock, "--", "sh", "-c", cmd, "sh", t1, NULL};
    lc_proc p1 = lc_start_env(NULL, a1);
    const char *a2[] = {"--broker", tcp_url(b), "run", mode, lock, "--", "sh", "-c", cmd, "sh", t2, NULL};
    lc_proc p2 = lc_start_env(NULL, a2);
    char err[4096];
    int st1 = lc_wait(&p1, 10000);
    *elapsed1 = lb_now_ms() - p1.started_ms;
    cr_assert_eq(st1, 0, "exit %d; stderr: %s", st1, slurp(p1.err, err, sizeof(err)));
    int st2 = lc_wait(&p2, 10000);
    *elapsed2 = lb_now_ms() - p2.started_ms;
    cr_assert_eq(st2, 0, "exit %d; stderr: %s", st2, slurp(p2.err, err, sizeof(err)));
    interval(t1, s1, e1);
    interval(t2, s2, e2);
}

LB_TEST(lockctl, run_two_never_overlap, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    int64_t s1, e1, s2, e2, el1, el2;

    two_runs(b, "--wait=10s", "mx", &s1, &e1, &s2, &e2, &el1, &el2);
    bool one_first = e1 <= s2, two_first = e2 <= s1;
    cr_assert(one_first || two_first,
              "exclusive runs overlapped: [%lld, %lld] and [%lld, %lld] (ns)", (long long)s1,
              (long long)e1, (long long)s2, (long long)e2);
    /* the second one waited for the first: it took about two runs' time */
    int64_t later = one_first ? el2 : el1;
    cr_assert(later >= 900, "the second run did not wait: %lld ms", (long long)later);

    /* the same with --shared overlaps: the check above can fail */
    two_runs(b, "--shared", "sh", &s1, &e1, &s2, &e2, &el1, &el2);
    cr_assert(s1 < e2 && s2 < e1, "shared runs should overlap: [%lld, %lld] and [%lld, %lld]",
              (long long)s1, (long long)e1, (long long)s2, (long long)e2);
    lb_end();
}

/* ---- acquire --detach, release, extend ---------------------------------------------- */

static bool is_token(const char *s, size_t len)
{
    if (len < 32)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

LB_TEST(lockctl, acquire_detach_release, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = tcp_url(b);
    lc_result res;

    EXPECT_STATUS(lc_do(&res, "--broker", u, "acquire", "det", "--detach", "--ttl", "20s", NULL), 0);
    cr_assert_eq(count_lines(res.out), 1, "one line: %s", res.out);
    char token[256];
    snprintf(token, sizeof(token), "%.*s", (int)strcspn(res.out, "\n"), res.out);
    cr_assert(is_token(token, strlen(token)), "not a lease token: '%s'", token);

    /* the lease outlived lockctl */
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *in = lb_inspect(c, "det");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
    lb_expect_err(lb_try_acquire(c, "det", 5000), "timeout");

    EXPECT_STATUS(lc_do(&res, "--broker", u, "release", token, NULL), 0);
    cr_assert(strstr(res.out, "released"), "%s", res.out);
    lb_expect_free(c, "det");

    /* a second release: refused, the error status; the token is not echoed */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "release", token, NULL), EX_REFUSED_);
    cr_assert(strstr(res.err, "not_held"), "%s", res.err);
    cr_assert(!strstr(res.err, token), "stderr echoes the token: %s", res.err);
    cr_assert_eq(count_lines(res.err), 1, "%s", res.err);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "release", token, NULL), EX_REFUSED_);
    json_t *j = parse_json_out(&res);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                     "not_held", "%s", res.out);
    json_decref(j);

    /* --json acquire: the broker's answer; shared and semaphore modes */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "acquire", "--detach", "--shared",
                        "--max-hold", "30s", "det", NULL),
                  0);
    j = parse_json_out(&res);
    cr_assert(json_is_true(json_object_get(j, "ok")), "%s", res.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "mode")), "shared", "%s", res.out);
    cr_assert(json_is_integer(json_object_get(j, "fence")), "%s", res.out);
    snprintf(token, sizeof(token), "%s", json_string_value(json_object_get(j, "lease")));
    json_decref(j);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "release", token, NULL), 0);
    j = parse_json_out(&res);
    cr_assert_eq(json_integer_value(json_object_get(j, "count")), 0, "%s", res.out);
    json_decref(j);

    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "acquire", "--detach", "--limit", "2",
                        "sem", NULL),
                  0);
    j = parse_json_out(&res);
    cr_assert_str_eq(json_string_value(json_object_get(j, "mode")), "permit", "%s", res.out);
    snprintf(token, sizeof(token), "%s", json_string_value(json_object_get(j, "lease")));
    json_decref(j);
    /* the broker's own refusal: conflict (a lock on a semaphore's name) */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "acquire", "--detach", "--no-wait", "sem", NULL),
                  EX_REFUSED_);
    cr_assert(strstr(res.err, "conflict"), "%s", res.err);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "release", token, NULL), 0);
    lb_end();
}

LB_TEST(lockctl, extend, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = tcp_url(b);
    lc_result res;

    EXPECT_STATUS(lc_do(&res, "--broker", u, "acquire", "--detach", "--ttl", "1s", "ext", NULL), 0);
    char token[256];
    snprintf(token, sizeof(token), "%.*s", (int)strcspn(res.out, "\n"), res.out);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "extend", token, "--ttl", "20s", NULL), 0);
    cr_assert(strstr(res.out, "20000"), "%s", res.out);

    /* past the first TTL it is still held, with about 20 s left */
    lb_sleep_ms(1300);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *in = lb_inspect(c, "ext");
    cr_assert_str_eq(lb_str(in, "state"), "exclusive", "%s", lb_dump(in));
    json_int_t ttl = lb_int(json_array_get(lb_get(in, "holders"), 0), "ttl_ms");
    cr_assert(ttl > 15000 && ttl <= 20000, "ttl_ms %lld", (long long)ttl);

    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "extend", "--ttl=2m", token, NULL), 0);
    json_t *j = parse_json_out(&res);
    cr_assert_eq(json_integer_value(json_object_get(j, "ttl_ms")), 120000, "%s", res.out);
    json_decref(j);

    EXPECT_STATUS(lc_do(&res, "--broker", u, "extend", token, NULL), EX_USAGE_);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "release", token, NULL), 0);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "extend", token, "--ttl", "5s", NULL), EX_REFUSED_);
    cr_assert(strstr(res.err, "not_held"), "%s", res.err);
    lb_end();
}

/* ---- inspect, stats, ping ---------------------------------------------------------------- */

LB_TEST(lockctl, inspect_stats_ping_output, 40)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = unix_url(b);
    lc_result res;

    /* ping */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "ping", NULL), 0);
    cr_assert(strncmp(res.out, "ok: lockbroker/", 15) == 0, "%s", res.out);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "ping", NULL), 0);
    json_t *j = parse_json_out(&res);
    cr_assert(json_is_true(json_object_get(j, "ok")), "%s", res.out);
    json_decref(j);

    /* stats: LOCKBROKER_URL instead of --broker; --json after the command */
    const char *sargs[] = {"stats", NULL};
    EXPECT_STATUS(lc_run_args(&res, u, sargs), 0);
    cr_assert(strstr(res.out, "redis: up\n"), "%s", res.out);
    cr_assert(strstr(res.out, "uptime_s: "), "%s", res.out);
    const char *jargs[] = {"stats", "--json", NULL};
    EXPECT_STATUS(lc_run_args(&res, u, jargs), 0);
    j = parse_json_out(&res);
    cr_assert_str_eq(json_string_value(json_object_get(j, "redis")), "up", "%s", res.out);
    cr_assert(json_is_integer(json_object_get(j, "acquired_total")), "%s", res.out);
    json_decref(j);

    /* inspect: a free lock, then one held by a session */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "inspect", "ins", NULL), 0);
    cr_assert(strstr(res.out, "state:   free\n"), "%s", res.out);
    cr_assert(strstr(res.out, "holders: 0\n"), "%s", res.out);
    lb_client *c = lb_connect(b, LB_UNIX);
    lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "client", "itest-holder"));
    json_t *a = lb_call(c, "{s:s, s:s, s:s, s:i, s:i, s:s}", "op", "acquire", "lock", "ins",
                        "mode", "shared", "ttl_ms", 30000, "wait_ms", 0, "owner", "w1");
    lb_expect_ok(a);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "inspect", "ins", NULL), 0);
    cr_assert(strstr(res.out, "state:   shared\n"), "%s", res.out);
    cr_assert(strstr(res.out, "holders: 1\n"), "%s", res.out);
    cr_assert(strstr(res.out, "owner \"w1\""), "%s", res.out);
    cr_assert(strstr(res.out, "client \"itest-holder\""), "%s", res.out);
    cr_assert(!strstr(res.out, lb_str(a, "lease")), "inspect shows no token");
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "inspect", "ins", NULL), 0);
    j = parse_json_out(&res);
    json_t *h = json_array_get(json_object_get(j, "holders"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(h, "owner")), "w1", "%s", res.out);
    cr_assert_eq(json_integer_value(json_object_get(j, "fence")), lb_int(a, "fence"));
    json_decref(j);

    /* stats counts what happened */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "stats", NULL), 0);
    j = parse_json_out(&res);
    cr_assert(json_integer_value(json_object_get(j, "acquired_total")) >= 1, "%s", res.out);
    cr_assert(json_integer_value(json_object_get(j, "leases")) >= 1, "%s", res.out);
    json_decref(j);

    /* an invalid name is the broker's invalid_argument: refused */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "inspect", "bad\tname", NULL), EX_REFUSED_);
    cr_assert(strstr(res.err, "invalid_argument"), "%s", res.err);
    lb_end();
}

/* ---- auth --------------------------------------------------------------------------------- */

static const char *write_file(const char *name, const char *content)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs(content, f);
    fclose(f);
    return path;
}

LB_TEST(lockctl, auth_file, 40)
{
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, "--auth-file", write_file("srv-auth", "t0ps3cret\n"), NULL);
    const char *u = tcp_url(b);
    const char *good = write_file("good", "t0ps3cret\r\n");
    const char *bad = write_file("bad", "wr0ngsecret\n");
    lc_result res;

    EXPECT_STATUS(lc_do(&res, "--broker", u, "--auth-file", good, "stats", NULL), 0);
    cr_assert(strstr(res.out, "redis: up"), "%s", res.out);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--auth-file", good, "run", "au", "--", "true", NULL),
                  0);

    /* a wrong secret: refused; the secrets are never printed */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--auth-file", bad, "stats", NULL), EX_REFUSED_);
    cr_assert(strstr(res.err, "unauthorized"), "%s", res.err);
    cr_assert(!strstr(res.err, "wr0ng") && !strstr(res.err, "t0ps3"), "%s", res.err);
    cr_assert_str_eq(res.out, "");
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--auth-file", bad, "run", "au", "--", "true", NULL),
                  EX_REFUSED_);

    /* no secret: ping needs none, the rest is unauthorized */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "ping", NULL), 0);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "inspect", "au", NULL), EX_REFUSED_);
    cr_assert(strstr(res.err, "unauthorized"), "%s", res.err);

    /* an unreadable auth file is a usage error */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--auth-file", tmp_path("nope"), "ping", NULL),
                  EX_USAGE_);
    lb_end();
}

/* ---- usage, durations, unreachable broker ---------------------------------------------------- */

LB_TEST(lockctl, usage_errors, 40)
{
    lc_result res;
    /* a broker that would refuse connections: usage is checked first */
    const char *u = "tcp://127.0.0.1:1";

    EXPECT_STATUS(lc_do(&res, "--help", NULL), 0);
    cr_assert(strstr(res.out, "Exit status"), "%s", res.out);
    cr_assert(strstr(res.out, "73") && strstr(res.out, "74") && strstr(res.out, "75"), "%s",
              res.out);
    EXPECT_STATUS(lc_do(&res, "--version", NULL), 0);
    cr_assert(strncmp(res.out, "lockctl ", 8) == 0, "%s", res.out);

    const char *const cases[][10] = {
        {NULL},
        {"frobnicate", NULL},
        {"--bogus", "ping", NULL},
        {"--broker", NULL},
        {"--broker", u, "stats", "extra", NULL},
        {"--broker", u, "ping", "--wat", NULL},
        {"--broker", u, "acquire", "x", NULL}, /* no --detach */
        {"--broker", u, "acquire", "--detach", NULL},
        {"--broker", u, "acquire", "--detach", "--shared", "--limit", "2", "x", NULL},
        {"--broker", u, "acquire", "--detach", "--limit", "0", "x", NULL},
        {"--broker", u, "run", "x", NULL}, /* no command */
        {"--broker", u, "run", NULL},
        {"--broker", u, "run", "--detach", "x", "--", "true", NULL},
        {"--broker", u, "release", NULL},
        {"--broker", u, "extend", "tok", NULL},
        {"--broker", u, "inspect", "", "x", NULL},
        {"--broker", u, "run", "", "--", "true", NULL},
        {"--broker", "http://x", "ping", NULL},
        {"--broker", "unix://rel/sock", "ping", NULL},
        {"--broker", "tcp://a b:1", "ping", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        EXPECT_STATUS(lc_run_args(&res, NULL, cases[i]), EX_USAGE_);
        cr_assert_eq(count_lines(res.err), 1, "case %zu: one line on stderr: %s", i, res.err);
    }
    /* a client URL is not called a listen URL */
    EXPECT_STATUS(lc_do(&res, "--broker", "http://x", "ping", NULL), EX_USAGE_);
    cr_assert(strstr(res.err, "bad broker URL") && !strstr(res.err, "listen"), "%s", res.err);

    /* durations: junk, no unit, negative, overflow, sub-millisecond, range */
    const char *bad[] = {"5",   "-1s", "1x",  "",     "s",    "1.5ms", "1e3ms", " 1s", "1s ",
                         "1.s", ".5s", "+1s", "1sec", "0x10s",
                         "99999999999999999999999h", "9007199254740992ms"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--wait", bad[i], "x", "--", "true", NULL),
                      EX_USAGE_);
        cr_assert(strstr(res.err, "--wait"), "%s", res.err);
    }
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--ttl", "50ms", "x", "true", NULL), EX_USAGE_);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--ttl", "25h", "x", "true", NULL), EX_USAGE_);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--max-hold", "1", "x", "true", NULL),
                  EX_USAGE_);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--timeout", "0", "ping", NULL), EX_USAGE_);
    /* good durations pass parsing and fail only on the connection */
    const char *good[] = {"0", "500ms", "1.5s", "30s", "5m", "1h", "0.25h"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--wait", good[i], "x", "--", "true", NULL),
                      EX_UNAVAILABLE_);
    lb_end();
}

LB_TEST(lockctl, unreachable_broker, 30)
{
    lc_result res;
    const char *marker = tmp_path("ran");
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "touch %s", marker);

    /* a free port nobody listens on */
    lb_redis *r = lb_redis_start(false);
    lb_broker *b = lb_broker_start(r, NULL);
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", lb_broker_port(b));
    char sock[PATH_MAX + 16];
    snprintf(sock, sizeof(sock), "unix://%s", lb_broker_unix_path(b));
    lb_broker_stop(b);

    EXPECT_STATUS(lc_do(&res, "--broker", url, "ping", NULL), EX_UNAVAILABLE_);
    cr_assert_eq(count_lines(res.err), 1, "%s", res.err);
    EXPECT_STATUS(lc_do(&res, "--broker", sock, "stats", NULL), EX_UNAVAILABLE_);
    EXPECT_STATUS(lc_do(&res, "--broker", url, "run", "x", "--", "sh", "-c", cmd, NULL),
                  EX_UNAVAILABLE_);
    cr_assert(!file_exists(marker), "the command ran without a lock");
    const char *eargs[] = {"acquire", "--detach", "x", NULL};
    EXPECT_STATUS(lc_run_args(&res, url, eargs), EX_UNAVAILABLE_);

    /* a listener that never answers: --timeout */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    cr_assert(listen(fd, 4) == 0);
    socklen_t len = sizeof(a);
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    EXPECT_STATUS(lc_do(&res, "--broker", url, "--timeout", "400ms", "ping", NULL),
                  EX_UNAVAILABLE_);
    cr_assert(res.elapsed_ms >= 400 && res.elapsed_ms < 5000, "took %lld ms",
              (long long)res.elapsed_ms);
    close(fd);
    lb_end();
}

/* elect, leader and watch (issue 27, point 7): `elect` runs its command
 * while this process leads, with the term in LOCKBROKER_FENCE, and a
 * second candidate takes over (a new term) when the first one's command
 * ends; `leader` says who leads (exit 3 when nobody does); `watch` prints
 * one JSON line per change. */
LB_TEST(lockctl, elect_leader_and_watch, 60)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = tcp_url(b);
    const char *fence1 = tmp_path("term1"), *go1 = tmp_path("go1");
    const char *fence2 = tmp_path("term2"), *go2 = tmp_path("go2");
    char cmd1[4 * PATH_MAX], cmd2[4 * PATH_MAX];
    lc_result res;

    EXPECT_STATUS(lc_do(&res, "--broker", u, "leader", "sched", NULL), 3);
    cr_assert(strstr(res.err, "nobody leads"), "%s", res.err);
    lc_proc w = lc_start("--broker", u, "watch", "sched", NULL);
    char wo[65536] = "";
    for (int64_t end = lb_now_ms() + 5000; !strchr(slurp(w.out, wo, sizeof(wo)), '\n'); lb_sleep_ms(20))
        cr_assert_lt(lb_now_ms(), end, "watch printed nothing");

    snprintf(cmd1, sizeof(cmd1), "echo \"$LOCKBROKER_FENCE\" >%s; while [ ! -e %s ]; do sleep 0.05; done",
             fence1, go1);
    snprintf(cmd2, sizeof(cmd2), "echo \"$LOCKBROKER_FENCE\" >%s; while [ ! -e %s ]; do sleep 0.05; done",
             fence2, go2);
    lc_proc p1 = lc_start("--broker", u, "elect", "--value", "10.0.0.1:80", "sched", "--", "sh", "-c",
                          cmd1, NULL);
    cr_assert(wait_file(fence1, 5000), "the first candidate does not lead");
    lc_proc p2 = lc_start("--broker", u, "elect", "--value", "10.0.0.2:80", "sched", "--", "sh", "-c",
                          cmd2, NULL);
    lb_sleep_ms(300);
    cr_assert(!file_exists(fence2), "two leaders");

    EXPECT_STATUS(lc_do(&res, "--broker", u, "leader", "sched", NULL), 0);
    cr_assert(strstr(res.out, "leader: 10.0.0.1:80\n"), "%s", res.out);
    char term[64];
    snprintf(term, sizeof(term), "term:   %lld\n", (long long)read_int_file(fence1));
    cr_assert(strstr(res.out, term), "%s (want %s)", res.out, term);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "inspect", "sched", NULL), 0);
    cr_assert(strstr(res.out, "value \"10.0.0.1:80\""), "%s", res.out);

    touch(go1); /* the first leader's work ends: it resigns */
    cr_assert_eq(lc_wait(&p1, 5000), 0);
    cr_assert(wait_file(fence2, 5000), "the second candidate was not elected");
    cr_assert_gt(read_int_file(fence2), read_int_file(fence1), "the term did not grow");
    EXPECT_STATUS(lc_do(&res, "--broker", u, "--json", "leader", "sched", NULL), 0);
    json_t *j = parse_json_out(&res);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "holders"), 0),
                                                       "value")),
                     "10.0.0.2:80", "%s", res.out);
    json_decref(j);
    touch(go2);
    cr_assert_eq(lc_wait(&p2, 5000), 0);
    lb_sleep_ms(300);

    /* the watcher saw: free, the first leader, the second, free again */
    kill(w.pid, SIGTERM);
    lc_wait(&w, 5000);
    char out[65536];
    slurp(w.out, out, sizeof(out));
    const char *want[] = {"\"free\"", "10.0.0.1:80", "10.0.0.2:80", "\"free\""};
    const char *at = out;
    for (size_t k = 0; k < 4; k++) {
        const char *f = strstr(at, want[k]);
        cr_assert(f, "watch output lacks %s after the earlier ones:\n%s\n(stderr: %s)", want[k], out,
                  slurp(w.err, wo, sizeof(wo)));
        at = f + 1;
    }
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *e = json_loads(line, 0, NULL);
        cr_assert(e, "not a JSON line: %s", line);
        json_decref(e);
    }

    /* usage */
    EXPECT_STATUS(lc_do(&res, "--broker", u, "elect", "sched", "--", "true", NULL), 64);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "elect", "--value", "v", "--shared", "sched", "--", "true",
                        NULL),
                  64);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "leader", NULL), 64);
    EXPECT_STATUS(lc_do(&res, "--broker", u, "run", "--lock-delay", "11m", "x", "--", "true", NULL), 64);
    lb_end();
}

/* Whether process pid is gone (no such process, or a zombie: it runs no
 * more). */
static bool process_gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* kill -9 of lockctl run (issue 28): what the command started dies with
 * it, before the broker gives the lock to the next holder (the guard
 * holds the session until the command's group is gone). */
LB_TEST(lockctl, a_killed_lockctl_stops_its_command_before_the_lock_moves, 60)
{
    lb_redis *r;
    lb_broker *b;
    start_pair(&r, &b);
    const char *u = tcp_url(b);
    const char *pidf = tmp_path("grandchild.pid");
    char cmd[2 * PATH_MAX];

    /* the shell starts a grandchild: PR_SET_PDEATHSIG alone misses it */
    snprintf(cmd, sizeof(cmd), "sleep 30 & echo $! >%s.tmp; mv %s.tmp %s; wait", pidf, pidf, pidf);
    lc_proc p = lc_start("--broker", u, "run", "guarded", "--", "sh", "-c", cmd, NULL);
    cr_assert(wait_file(pidf, 5000), "the command never started");
    pid_t grandchild = (pid_t)read_int_file(pidf);
    cr_assert_gt(grandchild, 1);
    cr_assert_not(process_gone(grandchild));

    lb_client *c = lb_connect(b, LB_TCP);
    json_t *id = lb_send_req(c, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", "guarded", "wait_ms",
                             10000, "ttl_ms", 10000);
    lb_wait_waiters(c, "guarded", 1, 5000);
    cr_assert_eq(kill(p.pid, SIGKILL), 0);
    json_t *g = lb_wait_response(c, id, 8000);
    /* granted: at this moment the old command's group must be gone */
    bool gone = process_gone(grandchild);
    cr_assert(lb_is_ok(g), "the next holder was not granted: %s", lb_dump(g));
    cr_assert(gone, "the command's child %d still ran when the lock moved", (int)grandchild);
    lc_wait(&p, 5000);
    lb_end();
}
