/*
 * cl: the tests' view of the Redis Cluster (see cl.h for the contract).
 *
 * Runs in a Criterion test worker: the environment (set by the runner,
 * ctopo.h) says where the nodes are, the pid files say which run, and the
 * nodes say who is master of what; all are read again on each call, since
 * a previous test (or the cluster itself: failovers) may have changed
 * anything. Nodes are started through the keeper (tests/ha/keeper.c), never
 * as this worker's children, so they outlive the test.
 *
 * Owned here, freed by cl_teardown: one cached connection per node (remade
 * when its process changed), a list of handed-out replies and strings, and
 * the state of the one slot move in progress.
 */
#include "tests/cluster/cl.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cluster/ctopo.h"
#include "tests/common/kept.h"
#include "tests/common/rnode.h"

#define IMBALANCE_GRACE_MS 3000
#define MOVE_AGREE_MS 10000
#define MEMBER_AGREE_MS 20000
#define MIGRATE_BATCH 100
#define MIGRATE_TIMEOUT_MS 5000

static struct {
    ctopo t;
    struct {
        pid_t pid;
        redisContext *c;
    } conn[CTOPO_NODES];
    struct {
        bool open;
        int slot, src, dst;
        char src_id[CTOPO_ID_LEN + 1], dst_id[CTOPO_ID_LEN + 1];
    } move;
} H;

/* ---- small utilities ------------------------------------------------------------ */

static const ctopo *env(void)
{
    char err[512];
    cr_assert(ctopo_load(&H.t, err, sizeof(err)) == 0, "%s", err);
    return &H.t;
}

static uint16_t *new_map(void)
{
    uint16_t *m = malloc(SLOT_COUNT * sizeof(*m));
    if (!m)
        abort();
    kept_add(m, free);
    return m;
}

static void drop_conns(void)
{
    for (int i = 0; i < CTOPO_NODES; i++)
        if (H.conn[i].c) {
            redisFree(H.conn[i].c);
            H.conn[i].c = NULL;
        }
}

/* Running and not frozen. */
static bool live(const ctopo *t, int port)
{
    pid_t pid = ctopo_node_pid(t, port);
    return pid > 0 && !rproc_stopped(pid);
}

static const char *describe(const ctopo *t)
{
    char state[4096];
    ctopo_describe(t, state, sizeof(state));
    return kept_str(state);
}

/* The cached connection to the node on port. */
static redisContext *conn(const ctopo *t, int port)
{
    int i = ctopo_index(t, port);
    cr_assert(i >= 0, "port %d is not a node of the cluster", port);
    pid_t pid = ctopo_node_pid(t, port);
    cr_assert(pid > 0, "the node on port %d is not running", port);
    /* An idle connection that is readable was closed by the server: found
     * here, before a command is lost on it. */
    struct pollfd idle = {.fd = H.conn[i].c ? H.conn[i].c->fd : -1, .events = POLLIN};
    bool closed = H.conn[i].c && poll(&idle, 1, 0) > 0;
    if (H.conn[i].c && (closed || H.conn[i].c->err || H.conn[i].pid != pid)) {
        redisFree(H.conn[i].c);
        H.conn[i].c = NULL;
    }
    if (!H.conn[i].c) {
        struct timeval tv = {.tv_sec = 2};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        cr_assert(c && !c->err, "cannot connect to 127.0.0.1:%d: %s", port,
                  c ? c->errstr : "out of memory");
        redisSetTimeout(c, (struct timeval){.tv_sec = 10});
        H.conn[i].c = c;
        H.conn[i].pid = pid;
    }
    return H.conn[i].c;
}

static void drop_conn(const ctopo *t, int port)
{
    int i = ctopo_index(t, port);
    if (i >= 0 && H.conn[i].c) {
        redisFree(H.conn[i].c);
        H.conn[i].c = NULL;
    }
}

/* CLUSTER NODES of the first live node that answers (skipping skip);
 * returns its port, or -1. */
static int any_view(const ctopo *t, int skip, ctopo_view *v)
{
    for (int i = 0; i < CTOPO_NODES; i++)
        if (t->port[i] != skip && live(t, t->port[i]) && ctopo_view_of(t->port[i], v) == 0)
            return t->port[i];
    return -1;
}

/* The slot map of the first live node that answers; fails the test if
 * none does. */
static const uint16_t *any_map(const ctopo *t)
{
    uint16_t *owner = new_map();
    for (int i = 0; i < CTOPO_NODES; i++)
        if (live(t, t->port[i]) && ctopo_slot_map(t->port[i], owner) == 0)
            return owner;
    cr_assert_fail("no node answers CLUSTER SLOTS:%s", describe(t));
    return NULL;
}

/* The id of the node on port as it says itself. */
static void node_id(int port, char out[CTOPO_ID_LEN + 1])
{
    ctopo_view v;
    const ctopo_node *me = ctopo_view_of(port, &v) == 0 ? ctopo_view_myself(&v) : NULL;
    cr_assert(me, "node %d does not answer CLUSTER NODES", port);
    snprintf(out, CTOPO_ID_LEN + 1, "%s", me->id);
}

/* ---- fixture ---------------------------------------------------------------------- */

void cl_setup(void)
{
    lb_setup();
    cl_ready();
}

void cl_teardown(void)
{
    drop_conns();
    kept_free_all();
    memset(&H.move, 0, sizeof(H.move));
    lb_teardown();
}

static void start_node_or_fail(const ctopo *t, int port)
{
    char err[1024];
    cr_assert(ctopo_start_node(t, port, err, sizeof(err)) > 0, "%s", err);
}

/* Between mending rounds: since when each dead master has waited for its
 * failover, since when a master has had no replica. */
typedef struct {
    int64_t dead_since[CTOPO_NODES];
    int64_t mute_since[CTOPO_NODES];
    int64_t orphan_since;
} mend_state;

/* Running nodes that do not answer PING (CLIENT PAUSE ALL, which Redis 7.0
 * lets no client lift; DEBUG SLEEP; a busy script) are killed once that
 * has lasted CL_READY_MUTE_MS: mend_dead then restarts them (a master
 * after its failover). -1 if any node is mute. */
static int mend_mute(const ctopo *t, mend_state *st, char *why, size_t whylen)
{
    int rc = 0;
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        pid_t pid = ctopo_node_pid(t, p);
        redisReply *r = pid > 0 ? rnode_cmd(p, 1000, "PING") : NULL;
        bool pong = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
        if (pid == 0 || pong) {
            st->mute_since[i] = 0;
            continue;
        }
        rc = -1;
        if (!st->mute_since[i])
            st->mute_since[i] = lb_now_ms();
        if (lb_now_ms() - st->mute_since[i] < CL_READY_MUTE_MS) {
            snprintf(why, whylen, "node %d does not answer PING", p);
            continue;
        }
        fprintf(stderr, "cl_ready: node %d has not answered PING for %d ms (CLIENT PAUSE ALL? "
                        "DEBUG SLEEP?): killing it\n", p, CL_READY_MUTE_MS);
        rproc_stop(pid, SIGKILL, 5000);
        st->mute_since[i] = 0;
        snprintf(why, whylen, "node %d did not answer PING: killed it", p);
    }
    return rc;
}

/* Dead nodes: restarted, but a master with slots and a live replica only
 * after CL_READY_DEAD_MASTER_MS of waiting for the failover. -1 (and what
 * it did or waits for in why) if any was dead. */
static int mend_dead(const ctopo *t, mend_state *st, const ctopo_view *v, bool have_view,
                     char *why, size_t whylen)
{
    int rc = 0;
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        if (ctopo_node_pid(t, p) > 0) {
            st->dead_since[i] = 0;
            continue;
        }
        rc = -1;
        const ctopo_node *n = have_view ? ctopo_view_port(v, p) : NULL;
        int replica = -1;
        for (int k = 0; n && n->master && n->nslots > 0 && k < v->n; k++)
            if (strcmp(v->node[k].master_id, n->id) == 0 && !v->node[k].fail &&
                ctopo_node_pid(t, v->node[k].port) > 0)
                replica = v->node[k].port;
        if (replica > 0) {
            if (!st->dead_since[i])
                st->dead_since[i] = lb_now_ms();
            if (lb_now_ms() - st->dead_since[i] <= CL_READY_DEAD_MASTER_MS) {
                snprintf(why, whylen, "master %d is down: waiting for its replica %d to take "
                                      "over", p, replica);
                continue;
            }
            fprintf(stderr, "cl_ready: no failover from dead master %d to %d within %d ms; "
                            "restarting it\n", p, replica, CL_READY_DEAD_MASTER_MS);
        }
        start_node_or_fail(t, p);
        st->dead_since[i] = 0;
        snprintf(why, whylen, "node %d was down: restarted", p);
    }
    return rc;
}

/* A master with slots and no replica gets one: a master without slots, or
 * the second replica of another master. Only once it has lasted
 * IMBALANCE_GRACE_MS: a restarted node turns into a replica by itself. */
static int mend_orphan(const ctopo *t, mend_state *st, const ctopo_view *v, char *why,
                       size_t whylen)
{
    const ctopo_node *orphan = NULL, *spare = NULL;
    for (int i = 0; i < v->n; i++) {
        const ctopo_node *m = &v->node[i];
        if (!m->master || m->fail || m->pfail)
            continue;
        if (m->nslots == 0) {
            spare = spare ? spare : m;
            continue;
        }
        int nrep = 0;
        const ctopo_node *last = NULL;
        for (int k = 0; k < v->n; k++)
            if (strcmp(v->node[k].master_id, m->id) == 0 && !v->node[k].fail &&
                live(t, v->node[k].port)) {
                nrep++;
                last = &v->node[k];
            }
        if (nrep == 0)
            orphan = m;
        if (nrep > 1 && !spare)
            spare = last;
    }
    if (!orphan || !spare) {
        st->orphan_since = 0;
        return 0;
    }
    if (!st->orphan_since)
        st->orphan_since = lb_now_ms();
    if (lb_now_ms() - st->orphan_since < IMBALANCE_GRACE_MS) {
        snprintf(why, whylen, "master %d has no replica (%d could be one)", orphan->port,
                 spare->port);
        return -1;
    }
    fprintf(stderr, "cl_ready: master %d has had no replica for %d ms: CLUSTER REPLICATE on "
                    "%d\n", orphan->port, IMBALANCE_GRACE_MS, spare->port);
    rnode_soft_cmd(spare->port, "CLUSTER REPLICATE %s", orphan->id);
    st->orphan_since = 0;
    snprintf(why, whylen, "made %d a replica of %d", spare->port, orphan->port);
    return -1;
}

/* Nodes that do not know each other (cl_add_as_new_master left half
 * done): an id that a node knows and that is no node's own (left behind
 * by CLUSTER RESET HARD) is forgotten there, and a node that does not
 * know another's id meets it (a meeting bypasses the 60 s ban of a
 * forgotten id). Only when every node answers CLUSTER NODES; handshakes
 * are left to finish. -1 (and what it did in why) if it did anything. */
static int mend_members(const ctopo *t, char *why, size_t whylen)
{
    ctopo_view v[CTOPO_NODES];
    const ctopo_node *me[CTOPO_NODES];
    int rc = 0;
    for (int i = 0; i < CTOPO_NODES; i++)
        if (!live(t, t->port[i]) || ctopo_view_of(t->port[i], &v[i]) != 0 ||
            !(me[i] = ctopo_view_myself(&v[i])))
            return 0;
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        for (int k = 0; k < v[i].n; k++) {
            const ctopo_node *n = &v[i].node[k];
            bool ours = n->handshake;
            for (int j = 0; j < CTOPO_NODES; j++)
                ours = ours || strcmp(n->id, me[j]->id) == 0;
            if (ours)
                continue;
            fprintf(stderr, "cl_ready: node %d knows %s (port %d), no node's id: CLUSTER "
                            "FORGET\n", p, n->id, n->port);
            rnode_soft_cmd(p, "CLUSTER FORGET %s", n->id);
            snprintf(why, whylen, "node %d knew an old id of %d: forgot it", p, n->port);
            rc = -1;
        }
        for (int j = 0; j < CTOPO_NODES; j++) {
            bool known = j == i || ctopo_view_id(&v[i], me[j]->id);
            for (int k = 0; !known && k < v[i].n; k++)
                known = v[i].node[k].handshake && v[i].node[k].port == t->port[j];
            if (known)
                continue;
            fprintf(stderr, "cl_ready: node %d does not know %d: CLUSTER MEET\n", p, t->port[j]);
            rnode_soft_cmd(p, "CLUSTER MEET 127.0.0.1 %d %d", t->port[j], t->bus[j]);
            snprintf(why, whylen, "node %d did not know %d: met it", p, t->port[j]);
            rc = -1;
        }
    }
    return rc;
}

static void restore_home(const ctopo *t);
static int masters_of(const uint16_t *owner, int out[CTOPO_NODES]);

/* One round of mending. 0 when nothing needed doing (the health check
 * decides the rest); -1 and what it did or waits for in why otherwise. */
static int mend(const ctopo *t, mend_state *st, char *why, size_t whylen)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        pid_t pid = ctopo_node_pid(t, t->port[i]);
        if (pid > 0)
            kill(pid, SIGCONT); /* a test may have frozen it */
    }
    if (mend_mute(t, st, why, whylen) != 0)
        return -1;
    ctopo_view v;
    bool have_view = any_view(t, 0, &v) > 0;
    if (mend_dead(t, st, &v, have_view, why, whylen) != 0 ||
        mend_members(t, why, whylen) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        rnode_soft_cmd(p, "CLIENT UNPAUSE");
        rnode_clear_master_login(p);
        ctopo_view own;
        const ctopo_node *me = ctopo_view_of(p, &own) == 0 ? ctopo_view_myself(&own) : NULL;
        for (int k = 0; me && k < me->nopen && k < (int)(sizeof(me->open) / sizeof(me->open[0]));
             k++) {
            rnode_soft_cmd(p, "CLUSTER SETSLOT %d STABLE", me->open[k]);
            snprintf(why, whylen, "node %d had slot %d open: set it STABLE", p, me->open[k]);
            rc = -1;
        }
    }
    if (rc != 0)
        return rc;
    int m[CTOPO_NODES];
    if (have_view && masters_of(any_map(t), m) > CTOPO_MASTERS) {
        /* A node added as a master kept slots: they go home, and it is
         * then a spare for mend_orphan. */
        restore_home(t);
        snprintf(why, whylen, "more than %d masters with slots: moved slots home",
                 CTOPO_MASTERS);
        return -1;
    }
    return have_view ? mend_orphan(t, st, &v, why, whylen) : 0;
}

/* Slots that a test moved out of their home range go back to the master
 * of most of that range. */
static void restore_home(const ctopo *t)
{
    const uint16_t *owner = any_map(t);
    for (int h = 0; h < CTOPO_MASTERS; h++) {
        int cand[CTOPO_NODES] = {0}, count[CTOPO_NODES] = {0}, best = 0;
        for (int s = t->home[h][0]; s <= t->home[h][1]; s++) {
            int k = 0;
            while (k < CTOPO_NODES && cand[k] && cand[k] != owner[s])
                k++;
            if (k == CTOPO_NODES)
                continue;
            cand[k] = owner[s];
            count[k]++;
            if (count[k] > count[best])
                best = k;
        }
        for (int s = t->home[h][0]; s <= t->home[h][1]; s++)
            if (owner[s] != cand[best]) {
                fprintf(stderr, "cl_ready: slot %d is on %d: moving it home to %d\n", s,
                        owner[s], cand[best]);
                cl_move_slot(s, cand[best]);
            }
    }
}

void cl_ready(void)
{
    const ctopo *t = env();
    int64_t t0 = lb_now_ms(), flushed = 0;
    mend_state st = {{0}, {0}, 0};
    char why[512] = "";

    drop_conns();
    memset(&H.move, 0, sizeof(H.move));
    for (;;) {
        if (mend(t, &st, why, sizeof(why)) == 0 && ctopo_healthy(t, why, sizeof(why)) == 0)
            break;
        if (lb_now_ms() - flushed > 500) { /* see ctopo_flush */
            ctopo_flush(t);
            flushed = lb_now_ms();
        }
        if (lb_now_ms() - t0 > CL_READY_TIMEOUT_MS)
            cr_assert_fail("cl_ready: the cluster is not healthy after %d s: %s;%s",
                           CL_READY_TIMEOUT_MS / 1000, why, describe(t));
        lb_sleep_ms(50);
    }
    if (lb_now_ms() - t0 > 500)
        fprintf(stderr, "cl_ready: healthy after %lld ms (last wait: %s)\n",
                (long long)(lb_now_ms() - t0), why);
    int m[CL_MASTERS];
    cl_masters(m);
    for (int i = 0; i < CL_MASTERS; i++) {
        redisReply *r = cl_node_cmd(m[i], "FLUSHALL");
        cr_assert(r->type == REDIS_REPLY_STATUS, "FLUSHALL on %d: %s", m[i],
                  r->str ? r->str : "?");
    }
    restore_home(t);
    for (int i = 0; i < CL_MASTERS; i++) {
        redisReply *r = cl_node_cmd(m[i], "WAIT 1 5000");
        cr_assert(r->type == REDIS_REPLY_INTEGER && r->integer >= 1,
                  "cl_ready: the replica of %d did not acknowledge the FLUSHALL within 5 s;%s",
                  m[i], describe(t));
    }
}

/* ---- where things are --------------------------------------------------------------- */

const char *cl_seed_url(void)
{
    const ctopo *t = env();
    char url[128];
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", t->port[0],
             t->port[1], t->port[2]);
    return kept_str(url);
}

const char *cl_node_url(int port)
{
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    return kept_str(url);
}

int cl_node_port(int i)
{
    cr_assert(i >= 0 && i < CTOPO_NODES, "no node %d", i);
    return env()->port[i];
}

const char *cl_dir(void) { return kept_str(env()->dir); }
pid_t cl_node_pid(int port) { return ctopo_node_pid(env(), port); }
const char *cl_describe(void) { return describe(env()); }

/* Masters of the map ordered by their lowest slot; how many. */
static int masters_of(const uint16_t *owner, int out[CTOPO_NODES])
{
    int n = 0;
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (!owner[s])
            continue;
        bool seen = false;
        for (int k = 0; k < n; k++)
            seen = seen || out[k] == owner[s];
        if (!seen && n < CTOPO_NODES)
            out[n++] = owner[s];
    }
    return n;
}

void cl_masters(int out[CL_MASTERS])
{
    const ctopo *t = env();
    int m[CTOPO_NODES];
    int n = masters_of(any_map(t), m);
    cr_assert_eq(n, CL_MASTERS, "the slot map has %d masters, want %d:%s", n, CL_MASTERS,
                 describe(t));
    memcpy(out, m, CL_MASTERS * sizeof(int));
}

int cl_master_of_slot(int slot)
{
    cr_assert(slot >= 0 && slot < SLOT_COUNT, "no slot %d", slot);
    const ctopo *t = env();
    int p = any_map(t)[slot];
    cr_assert_gt(p, 0, "slot %d is not served:%s", slot, describe(t));
    return p;
}

int cl_replica_of(int master_port)
{
    const ctopo *t = env();
    ctopo_view v;
    int from = live(t, master_port) && ctopo_view_of(master_port, &v) == 0
                   ? master_port
                   : any_view(t, 0, &v);
    cr_assert_gt(from, 0, "no node answers CLUSTER NODES:%s", describe(t));
    const ctopo_node *m = ctopo_view_port(&v, master_port);
    cr_assert(m && m->master, "node %d is not a master (as %d sees it):%s", master_port, from,
              describe(t));
    for (int k = 0; k < v.n; k++)
        if (strcmp(v.node[k].master_id, m->id) == 0 && !v.node[k].fail &&
            ctopo_node_pid(t, v.node[k].port) > 0)
            return v.node[k].port;
    cr_assert_fail("master %d has no live replica (as %d sees it):%s", master_port, from,
                   describe(t));
    return -1;
}

int cl_slot_of(const char *name) { return slot_of_key(name, strlen(name)); }

void cl_names_in_slot(int slot, const char *prefix, int n, char out[][32])
{
    int found = 0;
    for (long k = 0; found < n && k < 100000000; k++) {
        char name[32];
        snprintf(name, sizeof(name), "%s%ld", prefix, k);
        if (cl_slot_of(name) == slot)
            snprintf(out[found++], 32, "%s", name);
    }
    cr_assert_eq(found, n, "no %d names in slot %d", n, slot);
}

int cl_lock_name(int master_index, int k, char *out, size_t len)
{
    cr_assert(master_index >= 0 && master_index < CL_MASTERS, "no master %d", master_index);
    cr_assert(k >= 0, "k %d", k);
    const ctopo *t = env();
    const uint16_t *owner = any_map(t);
    int m[CTOPO_NODES];
    cr_assert_eq(masters_of(owner, m), CL_MASTERS, "the slot map has not %d masters:%s",
                 CL_MASTERS, describe(t));
    for (long n = 0, found = 0; n < 10000000; n++) {
        char name[32];
        snprintf(name, sizeof(name), "clk-%ld", n);
        int slot = cl_slot_of(name);
        if (owner[slot] != m[master_index] || found++ < k)
            continue;
        cr_assert_lt(strlen(name), len, "cl_lock_name: no room for %s", name);
        snprintf(out, len, "%s", name);
        return slot;
    }
    cr_assert_fail("cl_lock_name: no name for master %d", m[master_index]);
    return -1;
}

/* ---- talking to them ------------------------------------------------------------------ */

redisReply *cl_node_cmd(int port, const char *fmt, ...)
{
    const ctopo *t = env();
    redisContext *c = conn(t, port);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    cr_assert(r != NULL, "command '%s' to 127.0.0.1:%d failed: %s", fmt, port, c->errstr);
    kept_reply(r);
    return r;
}

redisReply *cl_node_cmd_argv(int port, int argc, const char **argv)
{
    const ctopo *t = env();
    redisContext *c = conn(t, port);
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    cr_assert(r != NULL, "command '%s' to 127.0.0.1:%d failed: %s", argc ? argv[0] : "", port,
              c->errstr);
    kept_reply(r);
    return r;
}

redisReply *cl_node_try_cmd(int port, int timeout_ms, const char *fmt, ...)
{
    cr_assert(ctopo_index(env(), port) >= 0, "port %d is not a node of the cluster", port);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK) {
        va_list ap;
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (c)
        redisFree(c);
    if (r)
        kept_reply(r);
    return r;
}

long long cl_lock_exists(int port, const char *name)
{
    redisReply *r = cl_node_cmd(port, "EXISTS lb:{%s}", name);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "EXISTS lb:{%s} on %d: %s", name, port,
                 r->str ? r->str : "?");
    return r->integer;
}

const char *cl_node_role(int port)
{
    char role[32];
    cr_assert(rnode_info(port, "replication", "role", role, sizeof(role)) == 0,
              "no INFO role from node %d", port);
    return kept_str(role);
}

const char *cl_node_state(int port)
{
    char state[32];
    cr_assert(rnode_info(port, "cluster", "cluster_state", state, sizeof(state)) == 0,
              "no cluster_state from node %d", port);
    return kept_str(state);
}

/* ---- breaking them ------------------------------------------------------------------- */

void cl_kill_node(int port)
{
    const ctopo *t = env();
    pid_t pid = ctopo_node_pid(t, port);
    cr_assert(pid > 0, "cl_kill_node: node %d is not running", port);
    drop_conn(t, port);
    kill(pid, SIGKILL);
    for (int64_t end = lb_now_ms() + 5000; rproc_alive(pid); lb_sleep_ms(5))
        cr_assert(lb_now_ms() < end, "node %d (pid %d) still alive 5 s after SIGKILL", port,
                  (int)pid);
}

void cl_freeze_node(int port)
{
    const ctopo *t = env();
    pid_t pid = ctopo_node_pid(t, port);
    cr_assert(pid > 0, "cl_freeze_node: node %d is not running", port);
    drop_conn(t, port);
    cr_assert_eq(kill(pid, SIGSTOP), 0, "SIGSTOP to node %d (pid %d)", port, (int)pid);
}

void cl_thaw_node(int port)
{
    pid_t pid = ctopo_node_pid(env(), port);
    cr_assert(pid > 0, "cl_thaw_node: node %d is not running", port);
    cr_assert_eq(kill(pid, SIGCONT), 0, "SIGCONT to node %d (pid %d)", port, (int)pid);
}

void cl_start_node(int port)
{
    const ctopo *t = env();
    cr_assert(ctopo_index(t, port) >= 0, "port %d is not a node", port);
    cr_assert(ctopo_node_pid(t, port) == 0, "cl_start_node: node %d is running", port);
    start_node_or_fail(t, port);
}

void cl_pause_replication(int replica_port)
{
    rnode_pause_replication(replica_port);
}

/* 0 when the failover is over as cl_wait_failover says; lowest < 0: the
 * old master served nothing at the call. */
static bool failed_over(const ctopo *t, int old, int lowest, const int *reps, int nrep,
                        uint16_t *owner)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        if (!live(t, p))
            continue;
        char state[16] = "";
        if (rnode_info(p, "cluster", "cluster_state", state, sizeof(state)) != 0 ||
            strcmp(state, "ok") != 0 || ctopo_slot_map(p, owner) != 0)
            return false;
        for (int s = 0; s < SLOT_COUNT; s++)
            if (owner[s] == old)
                return false;
        bool taken = lowest < 0;
        for (int k = 0; k < nrep; k++)
            taken = taken || owner[lowest] == reps[k];
        if (!taken)
            return false;
    }
    return true;
}

int64_t cl_try_wait_failover(int old_master_port, int timeout_ms)
{
    const ctopo *t = env();
    int64_t t0 = lb_now_ms();
    ctopo_view v;
    cr_assert_gt(any_view(t, old_master_port, &v), 0, "no live node answers CLUSTER NODES:%s",
                 describe(t));
    const ctopo_node *old = ctopo_view_port(&v, old_master_port);
    cr_assert(old, "no node knows %d", old_master_port);
    int lowest = old->master && old->nslots > 0 ? old->lowest : -1, reps[CTOPO_NODES], nrep = 0;
    for (int k = 0; k < v.n && nrep < CTOPO_NODES; k++)
        if (strcmp(v.node[k].master_id, old->id) == 0)
            reps[nrep++] = v.node[k].port;
    if (lowest >= 0 && nrep == 0)
        return -1;
    uint16_t *owner = new_map();
    for (;;) {
        if (failed_over(t, old_master_port, lowest, reps, nrep, owner))
            return lb_now_ms() - t0;
        if (lb_now_ms() - t0 > timeout_ms)
            return -1;
        lb_sleep_ms(20);
    }
}

int64_t cl_wait_failover(int old_master_port, int timeout_ms)
{
    int64_t ms = cl_try_wait_failover(old_master_port, timeout_ms);
    if (ms < 0)
        cr_assert_fail("no failover away from %d within %d ms (or it has no replica):%s",
                       old_master_port, timeout_ms, cl_describe());
    return ms;
}

int cl_move_slot_begin(int slot, int to_master_port)
{
    const ctopo *t = env();
    cr_assert(slot >= 0 && slot < SLOT_COUNT, "no slot %d", slot);
    cr_assert_not(H.move.open, "cl_move_slot_begin: slot %d is being moved already",
                  H.move.slot);
    cr_assert(live(t, to_master_port), "cl_move_slot: target %d is not running", to_master_port);
    uint16_t *owner = new_map();
    cr_assert(ctopo_slot_map(to_master_port, owner) == 0, "no CLUSTER SLOTS from %d",
              to_master_port);
    int src = owner[slot];
    cr_assert_gt(src, 0, "slot %d is not served (as %d sees it)", slot, to_master_port);
    cr_assert_neq(src, to_master_port, "cl_move_slot_begin: slot %d is on %d already", slot,
                  src);
    H.move.slot = slot;
    H.move.src = src;
    H.move.dst = to_master_port;
    node_id(src, H.move.src_id);
    node_id(to_master_port, H.move.dst_id);
    redisReply *r = cl_node_cmd(to_master_port, "CLUSTER SETSLOT %d IMPORTING %s", slot,
                                H.move.src_id);
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER SETSLOT %d IMPORTING on %d: %s", slot,
              to_master_port, r->str ? r->str : "?");
    r = cl_node_cmd(src, "CLUSTER SETSLOT %d MIGRATING %s", slot, H.move.dst_id);
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER SETSLOT %d MIGRATING on %d: %s", slot, src,
              r->str ? r->str : "?");
    H.move.open = true;
    return src;
}

int cl_move_slot_keys(int slot, int max_keys)
{
    cr_assert(H.move.open && H.move.slot == slot, "cl_move_slot_keys: slot %d is not being "
                                                  "moved (cl_move_slot_begin)", slot);
    char sport[16], stimeout[16];
    snprintf(sport, sizeof(sport), "%d", H.move.dst);
    snprintf(stimeout, sizeof(stimeout), "%d", MIGRATE_TIMEOUT_MS);
    int moved = 0;
    while (max_keys < 0 || moved < max_keys) {
        int want = max_keys < 0 || max_keys - moved > MIGRATE_BATCH ? MIGRATE_BATCH
                                                                    : max_keys - moved;
        redisReply *keys = cl_node_cmd(H.move.src, "CLUSTER GETKEYSINSLOT %d %d", slot, want);
        cr_assert(keys->type == REDIS_REPLY_ARRAY, "CLUSTER GETKEYSINSLOT %d on %d: %s", slot,
                  H.move.src, keys->str ? keys->str : "?");
        if (keys->elements == 0)
            break;
        const char *argv[MIGRATE_BATCH + 8];
        size_t argl[MIGRATE_BATCH + 8];
        int n = 0;
        const char *head[] = {"MIGRATE", "127.0.0.1", sport, "", "0", stimeout, "KEYS"};
        for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++) {
            argl[n] = strlen(head[i]);
            argv[n++] = head[i];
        }
        for (size_t i = 0; i < keys->elements; i++) {
            argl[n] = keys->element[i]->len;
            argv[n++] = keys->element[i]->str;
        }
        redisReply *r = redisCommandArgv(conn(env(), H.move.src), n, argv, argl);
        cr_assert(r != NULL, "MIGRATE from %d: no reply", H.move.src);
        kept_reply(r);
        cr_assert(r->type == REDIS_REPLY_STATUS, "MIGRATE of %zu keys of slot %d from %d to %d: "
                                                 "%s", keys->elements, slot, H.move.src,
                  H.move.dst, r->str ? r->str : "?");
        moved += (int)keys->elements;
    }
    return moved;
}

/* Every live node names dst for slot, and none has it open. */
static bool move_agreed(const ctopo *t, int slot, int dst, uint16_t *owner, char *why,
                        size_t whylen)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        if (!live(t, p))
            continue;
        ctopo_view v;
        const ctopo_node *me = ctopo_view_of(p, &v) == 0 ? ctopo_view_myself(&v) : NULL;
        if (ctopo_slot_map(p, owner) != 0 || !me) {
            snprintf(why, whylen, "node %d does not answer", p);
            return false;
        }
        if (owner[slot] != dst) {
            snprintf(why, whylen, "node %d names %d", p, owner[slot]);
            return false;
        }
        for (int k = 0; k < me->nopen && k < (int)(sizeof(me->open) / sizeof(me->open[0])); k++)
            if (me->open[k] == slot) {
                snprintf(why, whylen, "node %d has it open", p);
                return false;
            }
    }
    return true;
}

void cl_move_slot_end(int slot)
{
    const ctopo *t = env();
    cr_assert(H.move.open && H.move.slot == slot, "cl_move_slot_end: slot %d is not being "
                                                  "moved (cl_move_slot_begin)", slot);
    int src = H.move.src, dst = H.move.dst;
    /* The target first (then the slot is its own even if the source went
     * on), then the source, which refuses while it holds keys of the slot:
     * a key written between GETKEYSINSLOT and now goes over too. */
    cl_move_slot_keys(slot, -1);
    redisReply *r = cl_node_cmd(dst, "CLUSTER SETSLOT %d NODE %s", slot, H.move.dst_id);
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER SETSLOT %d NODE on the target %d: %s",
              slot, dst, r->str ? r->str : "?");
    for (int attempt = 0;; attempt++) {
        r = cl_node_cmd(src, "CLUSTER SETSLOT %d NODE %s", slot, H.move.dst_id);
        if (r->type == REDIS_REPLY_STATUS)
            break;
        if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "only with masters") &&
            strcmp(cl_node_role(src), "slave") == 0) {
            fprintf(stderr, "cl_move_slot: %d gave its last slot %d and is a replica now\n",
                    src, slot);
            break; /* it lost its last slot by gossip first (see cl.h) */
        }
        cr_assert_lt(attempt, 3, "CLUSTER SETSLOT %d NODE on the source %d: %s", slot, src,
                     r->str ? r->str : "?");
        cl_move_slot_keys(slot, -1);
    }
    H.move.open = false;
    int m[CTOPO_NODES], n = masters_of(any_map(t), m);
    for (int i = 0; i < n; i++)
        if (m[i] != src && m[i] != dst) {
            r = cl_node_cmd(m[i], "CLUSTER SETSLOT %d NODE %s", slot, H.move.dst_id);
            cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER SETSLOT %d NODE on %d: %s", slot,
                      m[i], r->str ? r->str : "?");
        }
    uint16_t *owner = new_map();
    char why[256] = "";
    for (int64_t end = lb_now_ms() + MOVE_AGREE_MS;
         !move_agreed(t, slot, dst, owner, why, sizeof(why)); lb_sleep_ms(20))
        if (lb_now_ms() > end)
            cr_assert_fail("slot %d moved from %d to %d, but after %d ms %s:%s", slot, src, dst,
                           MOVE_AGREE_MS, why, describe(t));
}

int64_t cl_move_slot(int slot, int to_master_port)
{
    int64_t t0 = lb_now_ms();
    if (cl_master_of_slot(slot) == to_master_port)
        return 0;
    cl_move_slot_begin(slot, to_master_port);
    cl_move_slot_end(slot);
    return lb_now_ms() - t0;
}

/* ---- adding and removing a node ------------------------------------------------------ */

/* Every node knows the node id on port, and only one node on that port,
 * connected, neither failing nor in handshake, as a master without slots
 * (master_id NULL) or as master_id's replica; and says cluster_state:ok.
 * Else false and the first thing found wrong in why. */
static bool member_as(const ctopo *t, int port, const char *id, const char *master_id,
                      char *why, size_t whylen)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i], same_port = 0;
        ctopo_view v;
        char state[16] = "";
        if (ctopo_view_of(p, &v) != 0 ||
            rnode_info(p, "cluster", "cluster_state", state, sizeof(state)) != 0) {
            snprintf(why, whylen, "node %d does not answer", p);
            return false;
        }
        for (int k = 0; k < v.n; k++)
            same_port += v.node[k].port == port;
        const ctopo_node *n = ctopo_view_id(&v, id);
        if (!n || n->port != port || same_port != 1 || n->handshake || n->fail || n->pfail ||
            n->noaddr || !n->connected) {
            snprintf(why, whylen, "node %d sees %d as %s (%d entries on its port)", p, port,
                     n ? n->flags : "unknown", same_port);
            return false;
        }
        if (master_id ? strcmp(n->master_id, master_id) != 0 : !n->master || n->nslots != 0) {
            snprintf(why, whylen, "node %d sees %d as %s of %s with %d slots", p, port,
                     n->flags, n->master_id, n->nslots);
            return false;
        }
        if (strcmp(state, "ok") != 0) {
            snprintf(why, whylen, "node %d says cluster_state:%s", p, state);
            return false;
        }
    }
    return true;
}

int64_t cl_add_as_new_master(int port)
{
    const ctopo *t = env();
    int64_t t0 = lb_now_ms();
    ctopo_view v;
    const ctopo_node *me = live(t, port) && ctopo_view_of(port, &v) == 0 ? ctopo_view_myself(&v)
                                                                          : NULL;
    cr_assert(me, "cl_add_as_new_master: node %d does not answer CLUSTER NODES", port);
    cr_assert(!me->master || me->nslots == 0, "cl_add_as_new_master: %d is a master of %d slots",
              port, me->nslots);
    char old[CTOPO_ID_LEN + 1], id[CTOPO_ID_LEN + 1];
    snprintf(old, sizeof(old), "%s", me->id);
    for (int i = 0; i < CTOPO_NODES; i++) {
        if (t->port[i] == port)
            continue;
        redisReply *r = cl_node_cmd(t->port[i], "CLUSTER FORGET %s", old);
        cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER FORGET of %d on %d: %s", port,
                  t->port[i], r->str ? r->str : "?");
    }
    redisReply *r = cl_node_cmd(port, "CLUSTER RESET HARD");
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER RESET HARD on %d: %s", port,
              r->str ? r->str : "?");
    node_id(port, id);
    cr_assert_str_neq(id, old, "node %d kept its id after CLUSTER RESET HARD", port);
    for (int i = 0; i < CTOPO_NODES; i++) {
        if (t->port[i] == port)
            continue;
        r = cl_node_cmd(port, "CLUSTER MEET 127.0.0.1 %d %d", t->port[i], t->bus[i]);
        cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER MEET %d on %d: %s", t->port[i], port,
                  r->str ? r->str : "?");
    }
    char why[256] = "";
    for (int64_t end = lb_now_ms() + MEMBER_AGREE_MS; !member_as(t, port, id, NULL, why,
                                                                 sizeof(why)); lb_sleep_ms(20))
        if (lb_now_ms() > end)
            cr_assert_fail("node %d reset and met as a new master, but after %d ms %s:%s", port,
                           MEMBER_AGREE_MS, why, describe(t));
    return lb_now_ms() - t0;
}

int64_t cl_make_replica(int port, int master_port)
{
    const ctopo *t = env();
    int64_t t0 = lb_now_ms();
    char id[CTOPO_ID_LEN + 1], mid[CTOPO_ID_LEN + 1], why[256] = "", link[16] = "";
    node_id(port, id);
    node_id(master_port, mid);
    redisReply *r = cl_node_cmd(port, "CLUSTER REPLICATE %s", mid);
    cr_assert(r->type == REDIS_REPLY_STATUS, "CLUSTER REPLICATE %d on %d: %s", master_port, port,
              r->str ? r->str : "?");
    for (int64_t end = lb_now_ms() + MEMBER_AGREE_MS;; lb_sleep_ms(20)) {
        if (member_as(t, port, id, mid, why, sizeof(why))) {
            link[0] = '\0';
            rnode_info(port, "replication", "master_link_status", link, sizeof(link));
            if (strcmp(link, "up") == 0)
                break;
            snprintf(why, sizeof(why), "its master_link_status is '%s'", link);
        }
        if (lb_now_ms() > end)
            cr_assert_fail("node %d told to replicate %d, but after %d ms %s:%s", port,
                           master_port, MEMBER_AGREE_MS, why, describe(t));
    }
    return lb_now_ms() - t0;
}

/* ---- the broker's view: stats ---------------------------------------------------------- */

json_t *cl_stats_master(json_t *st, int port)
{
    char addr[32];
    json_t *arr = lb_get(st, "redis_masters"), *e;
    size_t k;

    cr_assert(json_is_array(arr), "no redis_masters in %s", lb_dump(st));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    json_array_foreach(arr, k, e) {
        if (strcmp(lb_str(e, "addr"), addr) == 0)
            return e;
    }
    return NULL;
}

json_int_t cl_stats_redirects(json_t *st)
{
    json_t *e;
    size_t k;
    json_int_t n = 0;

    json_array_foreach(lb_get(st, "redis_masters"), k, e)
        n += lb_int(e, "redirects");
    return n;
}

json_t *cl_expect_three_masters(lb_client *c)
{
    int m[CL_MASTERS];
    json_t *st = lb_stats(c);
    json_int_t slots = 0;

    cl_masters(m);
    cr_assert_str_eq(lb_str(st, "redis"), "up", "%s", lb_dump(st));
    cr_assert_eq(json_array_size(lb_get(st, "redis_masters")), CL_MASTERS, "%s", lb_dump(st));
    for (int i = 0; i < CL_MASTERS; i++) {
        json_t *e = cl_stats_master(st, m[i]);
        cr_assert_not_null(e, "master %d is not in stats: %s", m[i], lb_dump(st));
        cr_assert(lb_bool(e, "up"), "master %d is down in stats: %s", m[i], lb_dump(st));
        cr_assert_gt(lb_int(e, "slots"), 0, "%s", lb_dump(e));
        cr_assert_geq(lb_int(e, "pending"), 0, "%s", lb_dump(e));
        cr_assert_geq(lb_int(e, "redirects"), 0, "%s", lb_dump(e));
        slots += lb_int(e, "slots");
    }
    cr_assert_eq(slots, SLOT_COUNT, "the masters' slots add up to %lld: %s", (long long)slots,
                 lb_dump(st));
    return st;
}
