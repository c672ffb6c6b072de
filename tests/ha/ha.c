/*
 * ha: the tests' view of the HA topology (see ha.h for the contract).
 *
 * Runs in a Criterion test worker: the environment (set by the runner,
 * topo.h) says where things are, the pid files say which processes run,
 * and the sentinels say which node is master; all are read again on each
 * call, since a previous test may have changed anything. Processes are
 * started through the keeper (keeper.c), never as this worker's children,
 * so they outlive the test.
 *
 * Owned here, freed by ha_teardown: one cached connection per node or
 * sentinel (remade when its process changed) and a list of handed-out
 * replies and strings.
 */
#include "tests/ha/ha.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/kept.h"
#include "tests/common/rnode.h"
#include "tests/ha/topo.h"

#define NCONN (TOPO_NODES + TOPO_SENTINELS)

static struct {
    topo t;
    struct {
        int port;
        pid_t pid;
        redisContext *c;
    } conn[NCONN];
} H;

/* ---- small utilities ------------------------------------------------------------ */

static const topo *env(void)
{
    char err[512];
    cr_assert(topo_load(&H.t, err, sizeof(err)) == 0, "%s", err);
    return &H.t;
}

static void drop_conn(int port)
{
    for (int i = 0; i < NCONN; i++)
        if (H.conn[i].c && H.conn[i].port == port) {
            redisFree(H.conn[i].c);
            H.conn[i].c = NULL;
        }
}

static void drop_conns(void)
{
    for (int i = 0; i < NCONN; i++)
        if (H.conn[i].c) {
            redisFree(H.conn[i].c);
            H.conn[i].c = NULL;
        }
}

static int sentinel_index(const topo *t, int port)
{
    for (int i = 0; i < TOPO_SENTINELS; i++)
        if (t->sentinel[i] == port)
            return i;
    return -1;
}

/* The cached connection to port (a node or a sentinel of t). */
static redisContext *conn(const topo *t, int port)
{
    int si = sentinel_index(t, port);
    cr_assert(si >= 0 || topo_is_node(t, port), "port %d is no node or sentinel of the topology",
              port);
    pid_t pid = si >= 0 ? topo_sentinel_pid(t, si) : topo_node_pid(t, port);
    cr_assert(pid > 0, "the %s on port %d is not running", si >= 0 ? "sentinel" : "node", port);
    int slot = si >= 0 ? TOPO_NODES + si : (t->node[0] == port ? 0 : 1);
    /* An idle connection that is readable was closed by the server (a
     * sentinel's promotion kills the clients of the promoted replica):
     * found here, before a command is lost on it. */
    struct pollfd idle = {.fd = H.conn[slot].c ? H.conn[slot].c->fd : -1, .events = POLLIN};
    bool closed = H.conn[slot].c && poll(&idle, 1, 0) > 0;
    if (H.conn[slot].c && (closed || H.conn[slot].c->err || H.conn[slot].pid != pid)) {
        redisFree(H.conn[slot].c);
        H.conn[slot].c = NULL;
    }
    if (!H.conn[slot].c) {
        struct timeval tv = {.tv_sec = 2};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        cr_assert(c && !c->err, "cannot connect to 127.0.0.1:%d: %s", port,
                  c ? c->errstr : "out of memory");
        redisSetTimeout(c, (struct timeval){.tv_sec = 10});
        H.conn[slot].c = c;
        H.conn[slot].pid = pid;
        H.conn[slot].port = port;
    }
    return H.conn[slot].c;
}

static redisReply *vcmd(const topo *t, int port, const char *fmt, va_list ap)
{
    redisContext *c = conn(t, port);
    redisReply *r = redisvCommand(c, fmt, ap);
    cr_assert(r != NULL, "command '%s' to 127.0.0.1:%d failed: %s", fmt, port, c->errstr);
    kept_reply(r);
    return r;
}

/* ---- fixture ---------------------------------------------------------------------- */

void ha_setup(void)
{
    lb_setup();
    ha_ready();
}

void ha_teardown(void)
{
    drop_conns();
    kept_free_all();
    lb_teardown();
}

static void start_node_or_fail(const topo *t, int port, int master)
{
    char err[1024];
    cr_assert(topo_start_node(t, port, master, err, sizeof(err)) > 0, "%s", err);
}

static void start_sentinel_or_fail(const topo *t, int i)
{
    char err[1024];
    cr_assert(topo_start_sentinel(t, i, err, sizeof(err)) > 0, "%s", err);
}

static bool failover_running(const topo *t)
{
    bool yes = false;
    for (int i = 0; i < TOPO_SENTINELS && !yes; i++) {
        redisReply *m = rnode_cmd(t->sentinel[i], 1000, "SENTINEL master %s", t->name);
        const char *f = topo_field(m, "flags");
        yes = f && strstr(f, "failover_in_progress");
        if (m)
            freeReplyObject(m);
    }
    return yes;
}

/* One round of mending. 0 when nothing needed doing (the health check
 * decides the rest); -1 and what it waits for in why otherwise. */
static int mend(const topo *t, int64_t *master_dead_since, char *why, size_t whylen)
{
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        pid_t pid = topo_sentinel_pid(t, i);
        if (pid > 0)
            kill(pid, SIGCONT); /* a test may have frozen it */
        else
            start_sentinel_or_fail(t, i);
    }
    for (int i = 0; i < TOPO_NODES; i++) {
        pid_t pid = topo_node_pid(t, t->node[i]);
        if (pid > 0)
            kill(pid, SIGCONT);
    }
    int view[TOPO_SENTINELS];
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        view[i] = topo_sentinel_master(t, i);
        if (view[i] < 0 || view[i] != view[0] || !topo_is_node(t, view[i])) {
            snprintf(why, whylen, "the sentinels do not agree on a master: %d, %d, %d",
                     topo_sentinel_master(t, 0), topo_sentinel_master(t, 1),
                     topo_sentinel_master(t, 2));
            return -1;
        }
    }
    int m = view[0], r = topo_other_node(t, m);
    bool m_up = topo_node_pid(t, m) > 0, r_up = topo_node_pid(t, r) > 0;
    if (!m_up) {
        if (!r_up) {
            start_node_or_fail(t, m, 0);
            start_node_or_fail(t, r, m);
            snprintf(why, whylen, "both nodes were down: restarted, %d as master", m);
            return -1;
        }
        if (!*master_dead_since)
            *master_dead_since = lb_now_ms();
        if (lb_now_ms() - *master_dead_since > HA_READY_DEAD_MASTER_MS) {
            fprintf(stderr, "ha_ready: no failover from dead master %d within %d ms; "
                            "restarting it empty as the master\n",
                    m, HA_READY_DEAD_MASTER_MS);
            start_node_or_fail(t, m, 0);
            *master_dead_since = 0;
        }
        snprintf(why, whylen, "master %d is down: waiting for the sentinels' failover", m);
        return -1;
    }
    *master_dead_since = 0;
    for (int i = 0; i < TOPO_NODES; i++) {
        rnode_soft_cmd(t->node[i], "CLIENT UNPAUSE");
        rnode_clear_master_login(t->node[i]);
    }
    char role[32] = "", mport[32] = "";
    topo_info(m, "role", role, sizeof(role));
    if (strcmp(role, "master") != 0) {
        if (!failover_running(t))
            rnode_soft_cmd(m, "REPLICAOF NO ONE");
        snprintf(why, whylen, "the sentinels' master %d says role '%s'", m, role);
        return -1;
    }
    if (!r_up) {
        start_node_or_fail(t, r, m);
        snprintf(why, whylen, "restarted %d as a replica of %d", r, m);
        return -1;
    }
    role[0] = '\0';
    topo_info(r, "role", role, sizeof(role));
    topo_info(r, "master_port", mport, sizeof(mport));
    if ((strcmp(role, "slave") != 0 || atoi(mport) != m) && !failover_running(t)) {
        rnode_soft_cmd(r, "REPLICAOF 127.0.0.1 %d", m);
        snprintf(why, whylen, "node %d was role '%s' of '%s': made it a replica of %d", r, role,
                 mport, m);
        return -1;
    }
    return 0;
}

void ha_ready(void)
{
    const topo *t = env();
    int64_t t0 = lb_now_ms(), dead_since = 0, stable_since = 0;
    char why[512] = "", moved[256] = "";
    topo_view v = {0}, held = {0};
    int moves = 0;

    drop_conns();
    for (;;) {
        bool healthy = mend(t, &dead_since, why, sizeof(why)) == 0 &&
                       topo_healthy(t, &v, why, sizeof(why)) == 0;
        if (healthy && stable_since && (v.master != held.master || v.epoch != held.epoch)) {
            /* Healthy before and now, but the master moved in between:
             * the sentinels failed over again. */
            moves++;
            snprintf(moved, sizeof(moved), "; the master moved from %d (config-epoch %lld) to "
                     "%d (config-epoch %lld) while it looked healthy", held.master, held.epoch,
                     v.master, v.epoch);
            fprintf(stderr, "ha_ready: the master moved from %d (config-epoch %lld) to %d "
                            "(config-epoch %lld) while it looked healthy\n",
                    held.master, held.epoch, v.master, v.epoch);
            stable_since = 0;
        }
        if (!healthy) {
            stable_since = 0;
        } else if (!stable_since) {
            stable_since = lb_now_ms();
            held = v;
        } else if (lb_now_ms() - stable_since >= HA_READY_QUIET_MS) {
            break;
        }
        if (lb_now_ms() - t0 > HA_READY_TIMEOUT_MS) {
            char state[4096];
            topo_describe(t, state, sizeof(state));
            if (stable_since)
                snprintf(why, sizeof(why), "healthy only for the last %lld ms",
                         (long long)(lb_now_ms() - stable_since));
            cr_assert_fail("ha_ready: the HA topology has no stable master after %d s (healthy, "
                           "the same master and config-epoch at every sentinel, for %d ms): "
                           "%s%s;%s",
                           HA_READY_TIMEOUT_MS / 1000, HA_READY_QUIET_MS, why, moved, state);
        }
        lb_sleep_ms(50);
    }
    if (lb_now_ms() - t0 > 500 + HA_READY_QUIET_MS)
        fprintf(stderr, "ha_ready: stable after %lld ms (last wait: %s%s)\n",
                (long long)(lb_now_ms() - t0), why, moves ? "; the master moved meanwhile" : "");
    int m = v.master;
    redisReply *r = ha_node_cmd(m, "FLUSHALL");
    cr_assert(r->type == REDIS_REPLY_STATUS, "FLUSHALL on %d: %s", m, r->str ? r->str : "?");
    r = ha_node_cmd(m, "WAIT 1 5000");
    cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer >= 1,
              "ha_ready: the replica did not acknowledge the FLUSHALL on %d within 5 s", m);
    /* The flush went to the master the sentinels name now. */
    cr_assert_eq(ha_master_port(), m, "ha_ready: the master moved from %d to %d while it was "
                 "flushed", m, ha_master_port());
}

/* ---- where things are --------------------------------------------------------------- */

int ha_master_port(void)
{
    const topo *t = env();
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        int p = topo_sentinel_master(t, i);
        if (p > 0)
            return p;
    }
    cr_assert_fail("no sentinel names a master for '%s'", t->name);
    return -1;
}

int ha_replica_port(void) { return topo_other_node(env(), ha_master_port()); }

int ha_node_port(int i)
{
    cr_assert(i >= 0 && i < TOPO_NODES, "no node %d", i);
    return env()->node[i];
}

int ha_sentinel_port(int i)
{
    cr_assert(i >= 0 && i < TOPO_SENTINELS, "no sentinel %d", i);
    return env()->sentinel[i];
}

const char *ha_master_name(void) { return kept_str(env()->name); }
const char *ha_dir(void) { return kept_str(env()->dir); }

const char *ha_sentinel_url(const char *master_name)
{
    const topo *t = env();
    char url[512];
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             t->sentinel[0], t->sentinel[1], t->sentinel[2], master_name ? master_name : t->name);
    return kept_str(url);
}

const char *ha_node_url(int port)
{
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    return kept_str(url);
}

pid_t ha_node_pid(int port) { return topo_node_pid(env(), port); }

pid_t ha_sentinel_pid(int i)
{
    cr_assert(i >= 0 && i < TOPO_SENTINELS, "no sentinel %d", i);
    return topo_sentinel_pid(env(), i);
}

/* ---- talking to them ------------------------------------------------------------------ */

redisContext *ha_node_ctx(int port)
{
    const topo *t = env();
    cr_assert(topo_is_node(t, port), "port %d is not a node", port);
    return conn(t, port);
}

redisReply *ha_node_cmd(int port, const char *fmt, ...)
{
    const topo *t = env();
    cr_assert(topo_is_node(t, port), "port %d is not a node", port);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(t, port, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *ha_sentinel_cmd(int i, const char *fmt, ...)
{
    const topo *t = env();
    cr_assert(i >= 0 && i < TOPO_SENTINELS, "no sentinel %d", i);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(t, t->sentinel[i], fmt, ap);
    va_end(ap);
    return r;
}

const char *ha_node_role(int port)
{
    char role[32];
    cr_assert(topo_info(port, "role", role, sizeof(role)) == 0, "no INFO role from node %d",
              port);
    return kept_str(role);
}

bool ha_node_has_key(int port, const char *key)
{
    redisReply *r = ha_node_cmd(port, "EXISTS %s", key);
    cr_assert(r->type == REDIS_REPLY_INTEGER, "EXISTS %s on %d", key, port);
    return r->integer != 0;
}

/* ---- breaking them ------------------------------------------------------------------- */

void ha_kill_node(int port)
{
    const topo *t = env();
    pid_t pid = topo_node_pid(t, port);
    cr_assert(pid > 0, "ha_kill_node: node %d is not running", port);
    drop_conn(port);
    kill(pid, SIGKILL);
    for (int64_t end = lb_now_ms() + 5000; rproc_alive(pid); lb_sleep_ms(5))
        cr_assert(lb_now_ms() < end, "node %d (pid %d) still alive 5 s after SIGKILL", port,
                  (int)pid);
}

void ha_start_node(int port)
{
    const topo *t = env();
    cr_assert(topo_is_node(t, port), "port %d is not a node", port);
    cr_assert(topo_node_pid(t, port) == 0, "ha_start_node: node %d is running", port);
    int m = ha_master_port();
    start_node_or_fail(t, port, m == port ? 0 : m);
}

void ha_stop_sentinel(int i)
{
    const topo *t = env();
    cr_assert(i >= 0 && i < TOPO_SENTINELS, "no sentinel %d", i);
    drop_conn(t->sentinel[i]);
    rproc_stop(topo_sentinel_pid(t, i), SIGTERM, 5000);
}

void ha_start_sentinel(int i)
{
    const topo *t = env();
    cr_assert(i >= 0 && i < TOPO_SENTINELS, "no sentinel %d", i);
    if (topo_sentinel_pid(t, i) == 0)
        start_sentinel_or_fail(t, i);
}

/* The new master every running sentinel names, once it says role:master;
 * else -1. */
static int new_master(const topo *t, int old)
{
    int m = -1;
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        if (topo_sentinel_pid(t, i) == 0)
            continue;
        int p = topo_sentinel_master(t, i);
        if (p < 0 || p == old || (m > 0 && p != m))
            return -1;
        m = p;
    }
    char role[32] = "";
    if (m < 0 || topo_info(m, "role", role, sizeof(role)) != 0 || strcmp(role, "master") != 0)
        return -1;
    return m;
}

int64_t ha_try_wait_failover(int old_master_port, int timeout_ms)
{
    const topo *t = env();
    int64_t t0 = lb_now_ms();
    for (;;) {
        if (new_master(t, old_master_port) > 0)
            return lb_now_ms() - t0;
        if (lb_now_ms() - t0 > timeout_ms)
            return -1;
        lb_sleep_ms(20);
    }
}

int64_t ha_wait_failover(int old_master_port, int timeout_ms)
{
    int64_t ms = ha_try_wait_failover(old_master_port, timeout_ms);
    if (ms < 0) {
        char state[4096];
        topo_describe(env(), state, sizeof(state));
        cr_assert_fail("no failover away from %d within %d ms:%s", old_master_port, timeout_ms,
                       state);
    }
    return ms;
}

int ha_switch_master_quietly(void)
{
    const topo *t = env();
    int m = ha_master_port(), r = topo_other_node(t, m);
    redisReply *x = ha_node_cmd(r, "REPLICAOF NO ONE");
    cr_assert_eq(x->type, REDIS_REPLY_STATUS, "REPLICAOF NO ONE on %d: %s", r, x->str);
    x = ha_node_cmd(m, "REPLICAOF 127.0.0.1 %d", r);
    cr_assert_eq(x->type, REDIS_REPLY_STATUS, "REPLICAOF on %d: %s", m, x->str);
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        x = ha_sentinel_cmd(i, "SENTINEL REMOVE %s", t->name);
        cr_assert_eq(x->type, REDIS_REPLY_STATUS, "sentinel %d: REMOVE: %s", i, x->str);
        x = ha_sentinel_cmd(i, "SENTINEL MONITOR %s 127.0.0.1 %d %d", t->name, r, TOPO_QUORUM);
        cr_assert_eq(x->type, REDIS_REPLY_STATUS, "sentinel %d: MONITOR: %s", i, x->str);
        x = ha_sentinel_cmd(i, "SENTINEL SET %s down-after-milliseconds %d failover-timeout %d "
                               "parallel-syncs 1",
                            t->name, TOPO_DOWN_AFTER_MS, TOPO_FAILOVER_TIMEOUT_MS);
        cr_assert_eq(x->type, REDIS_REPLY_STATUS, "sentinel %d: SET: %s", i, x->str);
    }
    return r;
}

void ha_pause_replication(int replica_port)
{
    rnode_pause_replication(replica_port);
}

void ha_resume_replication(int replica_port)
{
    redisReply *r = ha_node_cmd(replica_port, "CONFIG SET masteruser %s masterauth %s", "", "");
    cr_assert(r->type == REDIS_REPLY_STATUS, "CONFIG SET masteruser: %s", r->str ? r->str : "?");
    rnode_wait_link(replica_port, "up", 10000);
}
