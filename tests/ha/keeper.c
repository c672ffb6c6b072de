/*
 * keeper: one small process, alive for the whole ha_tests run, that starts
 * every redis-server and sentinel of the HA topology and reaps them.
 *
 * Why not start them from the runner or from a test: Criterion's runner
 * (boxfort's child pump) watches its children with waitid(P_ALL, WNOWAIT)
 * and loops forever on a child that is not one of its workers once it has
 * died or stopped, so a node that a test kills must not be the runner's
 * child. And a test worker's children die with it (PR_SET_PDEATHSIG), but a
 * node that one test restarts must live on for the next tests. So the runner
 * starts this keeper once (a child that only dies at the end, when the
 * runner reaps it itself), and every process of the topology, also those a
 * test restarts, is a child of the keeper: tests ask it over a Unix socket.
 *
 * The keeper is this same test binary, re-executed with LB_HA_KEEPER_SOCK in
 * its environment: a constructor sees it and runs keeper_main() instead of
 * Criterion's main. It has PR_SET_PDEATHSIG on the runner, its children have
 * it on the keeper: a killed runner takes the whole topology along.
 *
 * Wire format (one request per connection): NUL-terminated fields ending
 * with an empty one. "ping" answers "ok\n". "spawn", LOG, PIDFILE, ARGV...
 * starts ARGV, writes its pid to PIDFILE and answers "PID\n". Errors answer
 * "err MESSAGE\n".
 */
#include "tests/ha/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ENV_SOCK "LB_HA_KEEPER_SOCK"
#define ENV_PARENT "LB_HA_KEEPER_PARENT"
#define MAX_REQ 16384
#define MAX_ARGV 64

extern char **environ;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int unix_addr(struct sockaddr_un *a, const char *path)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(a->sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(a->sun_path, path);
    return 0;
}

/* ---- the keeper process ----------------------------------------------------- */

static void on_sigchld(int sig) { (void)sig; } /* only to interrupt poll() */

static void reap(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static int write_pidfile(const char *path, pid_t pid)
{
    char tmp[PATH_MAX], buf[32];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
    bool ok = write(fd, buf, (size_t)n) == n;
    ok = close(fd) == 0 && ok;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static void spawn_child(const char *log, const char *const *argv, pid_t keeper)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != keeper)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int nul = open("/dev/null", O_RDONLY);
    if (fd < 0 || nul < 0)
        _exit(127);
    dup2(nul, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    for (int i = 3; i < 1024; i++)
        close(i);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    execvp(argv[0], (char *const *)argv);
    dprintf(2, "keeper: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Reads one request from fd and acts on it; the answer goes into ans. */
static void handle(int fd, char *ans, size_t anslen)
{
    char buf[MAX_REQ];
    size_t len = 0;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (len < 2 || buf[len - 1] != '\0' || buf[len - 2] != '\0') {
        if (len == sizeof(buf)) {
            snprintf(ans, anslen, "err request too long\n");
            return;
        }
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(ans, anslen, "err incomplete request\n");
            return;
        }
        len += (size_t)n;
    }
    const char *field[MAX_ARGV + 4];
    int nf = 0;
    for (size_t off = 0; off < len && buf[off] != '\0'; off += strlen(buf + off) + 1) {
        if (nf == MAX_ARGV + 3) {
            snprintf(ans, anslen, "err too many fields\n");
            return;
        }
        field[nf++] = buf + off;
    }
    field[nf] = NULL;
    if (nf == 1 && strcmp(field[0], "ping") == 0) {
        snprintf(ans, anslen, "ok\n");
        return;
    }
    if (nf < 4 || strcmp(field[0], "spawn") != 0) {
        snprintf(ans, anslen, "err bad request\n");
        return;
    }
    pid_t keeper = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(ans, anslen, "err fork: %s\n", strerror(errno));
        return;
    }
    if (pid == 0)
        spawn_child(field[1], field + 3, keeper);
    if (write_pidfile(field[2], pid) != 0)
        snprintf(ans, anslen, "err pid file: %s\n", strerror(errno));
    else
        snprintf(ans, anslen, "%d\n", (int)pid);
}

static void serve(int fd)
{
    char ans[256];
    handle(fd, ans, sizeof(ans));
    (void)!write(fd, ans, strlen(ans));
}

static int keeper_main(const char *sock_path, pid_t parent)
{
    if (getppid() != parent)
        return 1; /* the runner is already gone */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_sigchld}; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);

    struct sockaddr_un a;
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || unix_addr(&a, sock_path) != 0) {
        perror("keeper: socket");
        return 1;
    }
    unlink(sock_path);
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 16) != 0) {
        perror("keeper: bind/listen");
        return 1;
    }
    for (;;) {
        reap();
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        serve(fd);
        close(fd);
    }
}

/* Runs before Criterion's main in every process of this binary; only the
 * keeper has ENV_SOCK set, and it never returns to main. */
__attribute__((constructor)) static void keeper_run_if_asked(void)
{
    const char *sock = getenv(ENV_SOCK);
    const char *parent = getenv(ENV_PARENT);
    if (!sock || !parent)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", sock);
    pid_t ppid = (pid_t)atoi(parent);
    unsetenv(ENV_SOCK); /* not for the servers it starts */
    unsetenv(ENV_PARENT);
    _exit(keeper_main(path, ppid)); /* _exit: no leak report of a killed helper */
}

/* ---- client side -------------------------------------------------------------- */

/* Sends one request (fields, then the empty one) and reads the answer line
 * into ans. Returns 0 or -1 (err set). */
static int request(const char *sock_path, const char *const *fields, char *ans, size_t anslen,
                   char *err, size_t errlen)
{
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || unix_addr(&a, sock_path) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        snprintf(err, errlen, "cannot reach the keeper at %s: %s", sock_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    bool ok = true;
    for (int i = 0; ok; i++) {
        const char *f = fields[i] ? fields[i] : "";
        size_t n = strlen(f) + 1;
        ok = send(fd, f, n, MSG_NOSIGNAL) == (ssize_t)n;
        if (!fields[i])
            break;
    }
    size_t len = 0;
    while (ok && len + 1 < anslen) {
        ssize_t n = read(fd, ans + len, anslen - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (ans[len - 1] == '\n')
            break;
    }
    close(fd);
    ans[len] = '\0';
    if (!ok || len == 0 || ans[len - 1] != '\n') {
        snprintf(err, errlen, "no answer from the keeper at %s", sock_path);
        return -1;
    }
    ans[len - 1] = '\0';
    if (strncmp(ans, "err ", 4) == 0) {
        snprintf(err, errlen, "keeper: %s", ans + 4);
        return -1;
    }
    return 0;
}

pid_t keeper_spawn(const char *sock_path, const char *log_path, const char *pid_path,
                   const char *const argv[], char *err, size_t errlen)
{
    const char *fields[MAX_ARGV + 4];
    int n = 0;
    fields[n++] = "spawn";
    fields[n++] = log_path;
    fields[n++] = pid_path;
    for (int i = 0; argv[i]; i++) {
        if (n == MAX_ARGV + 3) {
            snprintf(err, errlen, "too many arguments for the keeper");
            return -1;
        }
        fields[n++] = argv[i];
    }
    fields[n] = NULL;
    char ans[128];
    if (request(sock_path, fields, ans, sizeof(ans), err, errlen) != 0)
        return -1;
    int pid = atoi(ans);
    if (pid <= 0) {
        snprintf(err, errlen, "keeper answered '%s'", ans);
        return -1;
    }
    return (pid_t)pid;
}

pid_t keeper_start(const char *sock_path, char *err, size_t errlen)
{
    char log[PATH_MAX], envsock[PATH_MAX + 32], envparent[64];
    const char *slash = strrchr(sock_path, '/');
    snprintf(log, sizeof(log), "%.*s/keeper.log", slash ? (int)(slash - sock_path) : 1,
             slash ? sock_path : ".");
    snprintf(envsock, sizeof(envsock), "%s=%s", ENV_SOCK, sock_path);
    snprintf(envparent, sizeof(envparent), "%s=%d", ENV_PARENT, (int)getpid());

    /* The environment is built before fork: the child only execs. */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char **envp = calloc(nenv + 3, sizeof(*envp));
    if (!envp)
        abort();
    memcpy(envp, environ, nenv * sizeof(*envp));
    envp[nenv] = envsock;
    envp[nenv + 1] = envparent;
    char *const argv[] = {(char *)"lb-ha-keeper", NULL};

    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        free(envp);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0)
            _exit(127);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        for (int i = 3; i < 1024; i++)
            close(i);
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    free(envp);

    const char *ping[] = {"ping", NULL};
    char ans[32];
    int64_t deadline = now_ms() + 10000;
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            snprintf(err, errlen, "the keeper exited at start-up (status 0x%x; see %s)", st, log);
            return -1;
        }
        if (request(sock_path, ping, ans, sizeof(ans), err, errlen) == 0)
            return pid;
        if (now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            snprintf(err, errlen, "the keeper did not answer within 10 s (see %s)", log);
            return -1;
        }
        sleep_ms(20);
    }
}
