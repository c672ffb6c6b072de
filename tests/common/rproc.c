/*
 * rproc.c - the test topologies' processes (see rproc.h).
 */
#define _XOPEN_SOURCE 700
#include "tests/common/rproc.h"

#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/common/rnode.h"
#include "tests/integration/harness.h"

char rproc_state(pid_t pid, pid_t *ppid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command may contain spaces */
    char st = 0;
    int pp = 0;
    if (!p || sscanf(p + 1, " %c %d", &st, &pp) != 2)
        return 0;
    if (ppid)
        *ppid = (pid_t)pp;
    return st;
}

bool rproc_alive(pid_t pid)
{
    if (pid <= 0 || kill(pid, 0) != 0)
        return false;
    char st = rproc_state(pid, NULL);
    return st != 0 && st != 'Z' && st != 'X';
}

bool rproc_stopped(pid_t pid)
{
    char st = pid > 0 ? rproc_state(pid, NULL) : 0;
    return st == 'T' || st == 't';
}

bool rproc_serves_port(pid_t pid, int port)
{
    char path[64], buf[1024], want[16];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    snprintf(want, sizeof(want), ":%d", port);
    for (const char *p = strstr(buf, want); p; p = strstr(p + 1, want))
        if (p[strlen(want)] < '0' || p[strlen(want)] > '9')
            return true;
    return false;
}

bool rproc_stop(pid_t pid, int sig, int timeout_ms)
{
    if (!rproc_alive(pid))
        return true;
    kill(pid, SIGCONT); /* a frozen one cannot act on SIGTERM */
    kill(pid, sig);
    for (int64_t end = lb_now_ms() + timeout_ms; lb_now_ms() < end; lb_sleep_ms(10))
        if (!rproc_alive(pid))
            return true;
    kill(pid, SIGKILL);
    for (int64_t end = lb_now_ms() + 5000; lb_now_ms() < end && rproc_alive(pid);)
        lb_sleep_ms(10);
    return false;
}

int rproc_wait_ping(pid_t pid, int port, int timeout_ms, const char *log, char *err,
                    size_t errlen)
{
    int64_t deadline = lb_now_ms() + timeout_ms;
    for (;;) {
        if (!rproc_alive(pid)) {
            snprintf(err, errlen, "redis-server on port %d exited during start-up (log: %s)",
                     port, log);
            return -1;
        }
        redisReply *r = rnode_cmd(port, 500, "PING");
        bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
        if (ok)
            return 0;
        if (lb_now_ms() > deadline) {
            rproc_stop(pid, SIGKILL, 1000);
            snprintf(err, errlen, "redis-server on port %d did not answer PING within %d s "
                                  "(log: %s)", port, timeout_ms / 1000, log);
            return -1;
        }
        lb_sleep_ms(20);
    }
}

int rproc_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

void rproc_print_tail(const char *path, long max_bytes)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f), from = size > max_bytes ? size - max_bytes : 0;
    fseek(f, from, SEEK_SET);
    fprintf(stderr, "---- tail of %s ----\n", path);
    char chunk[2048];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, stderr);
    fclose(f);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void rproc_rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
