/*
 * ctopo: the one Redis Cluster of a cluster_tests run.
 *
 * Started once per test binary (creation takes seconds: a cluster per
 * binary, not per test) by a Criterion PRE_ALL report hook in the runner,
 * stopped by the POST_ALL hook; in between, tests kill, freeze and restart
 * its nodes and move its slots, one test at a time (cluster_tests runs with
 * --jobs 1), and cl_ready (cl.c) mends what they left.
 *
 * Layout: six redis-server nodes on 127.0.0.1, each with a client port and
 * a cluster bus port (--cluster-port) picked below the kernel's ephemeral
 * range, so that a node restarted on its ports never finds them taken by
 * an outgoing connection. `redis-cli --cluster create` makes the first
 * three masters of 0-5460, 5461-10922 and 10923-16383, and the last three
 * their replicas. Every node is a child of the keeper (tests/ha/keeper.c,
 * reused as it is: it starts any argv with a log and a pid file), also
 * redis-cli, so nothing here is the runner's child but the keeper.
 *
 * A node keeps its cluster config file (nodes-PORT.conf) for the whole
 * run: restarted, it comes back with its identity and rejoins the cluster
 * (a killed master whose replica was promoted comes back as a replica of
 * it). It keeps no data: no persistence, and the dump file a replica wrote
 * at its last full sync is deleted before each start.
 *
 * State shared between the runner and the workers goes through the
 * environment (set once, in PRE_ALL) and the temp dir (pid files); see
 * ctopo.h.
 */
#include "tests/cluster/ctopo.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "tests/common/rnode.h"
#include "tests/common/rproc.h"
#include "tests/ha/keeper.h"
#include "tests/integration/harness.h"

#define START_TIMEOUT_MS 10000
#define CREATE_TIMEOUT_MS 60000
#define UP_TIMEOUT_MS 30000
#define QUERY_MS 1000

/* ---- small utilities ------------------------------------------------------------ */

void ctopo_path(const ctopo *t, char *out, size_t outlen, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    snprintf(out, outlen, "%s/%s", t->dir, name);
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static const char *redis_bin(void) { return env_or("LB_REDIS_BIN", "redis-server"); }
static const char *cli_bin(void) { return env_or("LB_REDIS_CLI_BIN", "redis-cli"); }

/* "P:B,P:B,..." into port[] and bus[]. */
static int parse_nodes(const char *s, int *port, int *bus)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        char *end;
        long p = s ? strtol(s, &end, 10) : 0;
        if (!s || p <= 0 || p > 65535 || *end != ':')
            return -1;
        long b = strtol(end + 1, &end, 10);
        if (b <= 0 || b > 65535 || (i + 1 < CTOPO_NODES ? *end != ',' : *end != '\0'))
            return -1;
        port[i] = (int)p;
        bus[i] = (int)b;
        s = end + 1;
    }
    return 0;
}

/* "A-B,A-B,A-B" into home[][2]. */
static int parse_home(const char *s, int home[CTOPO_MASTERS][2])
{
    for (int i = 0; i < CTOPO_MASTERS; i++) {
        char *end;
        long a = s ? strtol(s, &end, 10) : -1;
        if (!s || a < 0 || *end != '-')
            return -1;
        long b = strtol(end + 1, &end, 10);
        if (b < a || b >= SLOT_COUNT || (i + 1 < CTOPO_MASTERS ? *end != ',' : *end != '\0'))
            return -1;
        home[i][0] = (int)a;
        home[i][1] = (int)b;
        s = end + 1;
    }
    return 0;
}

int ctopo_load(ctopo *t, char *err, size_t errlen)
{
    const char *e = getenv("LB_CL_ERROR");
    memset(t, 0, sizeof(*t));
    if (e && *e) {
        snprintf(err, errlen, "the Redis Cluster failed to start: %s", e);
        return -1;
    }
    const char *dir = getenv("LB_CL_DIR"), *keeper = getenv("LB_CL_KEEPER_PID");
    if (!dir || !keeper) {
        snprintf(err, errlen, "no Redis Cluster (LB_CL_DIR unset): run inside cluster_tests, "
                              "whose PRE_ALL hook starts it");
        return -1;
    }
    snprintf(t->dir, sizeof(t->dir), "%s", dir);
    t->keeper = (pid_t)atoi(keeper);
    if (parse_nodes(getenv("LB_CL_NODES"), t->port, t->bus) != 0 ||
        parse_home(getenv("LB_CL_HOME"), t->home) != 0) {
        snprintf(err, errlen, "bad LB_CL_NODES / LB_CL_HOME");
        return -1;
    }
    return 0;
}

int ctopo_index(const ctopo *t, int port)
{
    for (int i = 0; i < CTOPO_NODES; i++)
        if (t->port[i] == port)
            return i;
    return -1;
}

/* ---- processes ------------------------------------------------------------------- */

pid_t ctopo_node_pid(const ctopo *t, int port)
{
    char path[PATH_MAX];
    ctopo_path(t, path, sizeof(path), "node-%d.pid", port);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    pid_t ppid = 0;
    if (pid <= 0 || !rproc_alive(pid))
        return 0;
    char st = rproc_state(pid, &ppid);
    if (st == 0 || ppid != t->keeper || !rproc_serves_port(pid, port))
        return 0;
    return (pid_t)pid;
}

pid_t ctopo_start_node(const ctopo *t, int port, char *err, size_t errlen)
{
    int i = ctopo_index(t, port);
    if (i < 0) {
        snprintf(err, errlen, "port %d is not a node of the cluster", port);
        return -1;
    }
    char sock[PATH_MAX], log[PATH_MAX], pidf[PATH_MAX], conf[PATH_MAX], rdb[PATH_MAX];
    char text[3 * PATH_MAX];
    ctopo_path(t, sock, sizeof(sock), "keeper.sock");
    ctopo_path(t, log, sizeof(log), "node-%d.log", port);
    ctopo_path(t, pidf, sizeof(pidf), "node-%d.pid", port);
    ctopo_path(t, conf, sizeof(conf), "node-%d.conf", port);
    ctopo_path(t, rdb, sizeof(rdb), "dump-%d.rdb", port);
    /* A config file, not options: the keeper's wire format cannot carry
     * an empty argument (save ""). Diskless sync with no delay: a replica
     * is in sync within a second. Validity factor 0: a replica may always
     * take over, however long its link was down. */
    snprintf(text, sizeof(text),
             "port %d\ncluster-port %d\nbind 127.0.0.1\ndaemonize no\n"
             "cluster-enabled yes\ncluster-config-file %s/nodes-%d.conf\n"
             "cluster-node-timeout %d\ncluster-replica-validity-factor 0\n"
             "save \"\"\nappendonly no\nenable-debug-command yes\n"
             "dir %s\ndbfilename dump-%d.rdb\n"
             "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n",
             port, t->bus[i], t->dir, port, CTOPO_NODE_TIMEOUT_MS, t->dir, port);
    unlink(rdb);
    if (rproc_write_file(conf, text) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", conf, strerror(errno));
        return -1;
    }
    const char *argv[] = {redis_bin(), conf, NULL};
    pid_t pid = keeper_spawn(sock, log, pidf, argv, err, errlen);
    if (pid < 0)
        return -1;
    return rproc_wait_ping(pid, port, START_TIMEOUT_MS, log, err, errlen) == 0 ? pid : -1;
}

/* ---- queries -------------------------------------------------------------------- */

/* One CLUSTER NODES line into n; -1 if it is not one. */
static int parse_node_line(char *line, ctopo_node *n)
{
    char *save = NULL, *f[8];
    memset(n, 0, sizeof(*n));
    n->lowest = -1;
    for (int i = 0; i < 8; i++)
        if (!(f[i] = strtok_r(i ? NULL : line, " ", &save)))
            return -1;
    snprintf(n->id, sizeof(n->id), "%s", f[0]);
    char *at = strchr(f[1], '@'), *colon;
    if (at)
        *at = '\0';
    colon = strrchr(f[1], ':');
    n->port = colon ? atoi(colon + 1) : 0;
    snprintf(n->flags, sizeof(n->flags), "%s", f[2]);
    char *fsave = NULL;
    for (char *fl = strtok_r(f[2], ",", &fsave); fl; fl = strtok_r(NULL, ",", &fsave)) {
        n->myself |= strcmp(fl, "myself") == 0;
        n->master |= strcmp(fl, "master") == 0;
        n->fail |= strcmp(fl, "fail") == 0;
        n->pfail |= strcmp(fl, "fail?") == 0;
        n->handshake |= strcmp(fl, "handshake") == 0;
        n->noaddr |= strcmp(fl, "noaddr") == 0;
    }
    snprintf(n->master_id, sizeof(n->master_id), "%s", f[3]);
    n->connected = strcmp(f[7], "connected") == 0;
    for (char *s = strtok_r(NULL, " ", &save); s; s = strtok_r(NULL, " ", &save)) {
        if (s[0] == '[') {
            if (n->nopen < (int)(sizeof(n->open) / sizeof(n->open[0])))
                n->open[n->nopen] = atoi(s + 1);
            n->nopen++;
            continue;
        }
        char *dash = strchr(s, '-');
        int a = atoi(s), b = dash ? atoi(dash + 1) : a;
        if (a < 0 || b < a || b >= SLOT_COUNT)
            continue;
        n->nslots += b - a + 1;
        if (n->lowest < 0 || a < n->lowest)
            n->lowest = a;
    }
    return 0;
}

int ctopo_view_of(int port, ctopo_view *v)
{
    memset(v, 0, sizeof(*v));
    redisReply *r = rnode_cmd(port, QUERY_MS, "CLUSTER NODES");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\n", &save); line && v->n < (int)(sizeof(v->node) /
                                                                          sizeof(v->node[0]));
         line = strtok_r(NULL, "\n", &save))
        if (parse_node_line(line, &v->node[v->n]) == 0)
            v->n++;
    freeReplyObject(r);
    return v->n > 0 ? 0 : -1;
}

const ctopo_node *ctopo_view_port(const ctopo_view *v, int port)
{
    for (int i = 0; i < v->n; i++)
        if (v->node[i].port == port)
            return &v->node[i];
    return NULL;
}

const ctopo_node *ctopo_view_id(const ctopo_view *v, const char *id)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->node[i].id, id) == 0)
            return &v->node[i];
    return NULL;
}

const ctopo_node *ctopo_view_myself(const ctopo_view *v)
{
    for (int i = 0; i < v->n; i++)
        if (v->node[i].myself)
            return &v->node[i];
    return NULL;
}

/* The port of a CLUSTER SLOTS node entry [ip, port, id, ...], or 0. */
static int entry_port(const redisReply *e)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[1]->type != REDIS_REPLY_INTEGER)
        return 0;
    return (int)e->element[1]->integer;
}

/* CLUSTER SLOTS, checked for shape; NULL if it does not answer. */
static redisReply *cluster_slots(int port)
{
    redisReply *r = rnode_cmd(port, QUERY_MS, "CLUSTER SLOTS");
    bool ok = r && r->type == REDIS_REPLY_ARRAY;
    for (size_t i = 0; ok && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        ok = e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
             e->element[0]->type == REDIS_REPLY_INTEGER &&
             e->element[1]->type == REDIS_REPLY_INTEGER && e->element[0]->integer >= 0 &&
             e->element[0]->integer <= e->element[1]->integer &&
             e->element[1]->integer < SLOT_COUNT && entry_port(e->element[2]) > 0;
    }
    if (!ok && r) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

int ctopo_slot_map(int port, uint16_t owner[SLOT_COUNT])
{
    redisReply *r = cluster_slots(port);
    if (!r)
        return -1;
    memset(owner, 0, SLOT_COUNT * sizeof(owner[0]));
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            owner[s] = (uint16_t)entry_port(e->element[2]);
    }
    freeReplyObject(r);
    return 0;
}

/* ---- health ----------------------------------------------------------------------- */

typedef struct {
    int start, end, master, nrep, rep[CTOPO_NODES];
} range_t;

static int cmp_range(const void *a, const void *b)
{
    return ((const range_t *)a)->start - ((const range_t *)b)->start;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* CLUSTER SLOTS of port as a canonical string (ranges by start, replicas
 * by port), with the checks of one node's map: all slots covered, three
 * masters of ours, exactly one replica each. */
static int slots_healthy(const ctopo *t, int port, char *canon, size_t canonlen, char *why,
                         size_t whylen)
{
    redisReply *r = cluster_slots(port);
    if (!r) {
        snprintf(why, whylen, "node %d: no CLUSTER SLOTS", port);
        return -1;
    }
    size_t n = r->elements;
    range_t *rg = calloc(n ? n : 1, sizeof(*rg));
    if (!rg)
        abort();
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = r->element[i];
        rg[i].start = (int)e->element[0]->integer;
        rg[i].end = (int)e->element[1]->integer;
        rg[i].master = entry_port(e->element[2]);
        for (size_t k = 3; k < e->elements && rg[i].nrep < CTOPO_NODES; k++)
            rg[i].rep[rg[i].nrep++] = entry_port(e->element[k]);
        qsort(rg[i].rep, (size_t)rg[i].nrep, sizeof(int), cmp_int);
    }
    freeReplyObject(r);
    qsort(rg, n, sizeof(*rg), cmp_range);

    int rc = -1, next = 0, masters[CTOPO_NODES], nmasters = 0;
    size_t o = 0;
    canon[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (rg[i].start != next) {
            snprintf(why, whylen, "node %d: slots %d-%d are not served", port, next,
                     rg[i].start - 1);
            goto out;
        }
        next = rg[i].end + 1;
        if (ctopo_index(t, rg[i].master) < 0) {
            snprintf(why, whylen, "node %d: slots %d-%d on %d, not a node of ours", port,
                     rg[i].start, rg[i].end, rg[i].master);
            goto out;
        }
        if (rg[i].nrep != 1 || ctopo_index(t, rg[i].rep[0]) < 0) {
            snprintf(why, whylen, "node %d: master %d (slots %d-%d) has %d replicas listed, "
                                  "want 1", port, rg[i].master, rg[i].start, rg[i].end,
                     rg[i].nrep);
            goto out;
        }
        bool seen = false;
        for (int k = 0; k < nmasters; k++)
            seen = seen || masters[k] == rg[i].master;
        if (!seen && nmasters < CTOPO_NODES)
            masters[nmasters++] = rg[i].master;
        o += (size_t)snprintf(canon + (o < canonlen ? o : canonlen), o < canonlen ? canonlen - o : 0,
                              "%d-%d:%d/%d;", rg[i].start, rg[i].end, rg[i].master, rg[i].rep[0]);
    }
    if (next != SLOT_COUNT) {
        snprintf(why, whylen, "node %d: slots %d-%d are not served", port, next, SLOT_COUNT - 1);
        goto out;
    }
    if (nmasters != CTOPO_MASTERS) {
        snprintf(why, whylen, "node %d: %d masters serve slots, want %d", port, nmasters,
                 CTOPO_MASTERS);
        goto out;
    }
    if (o >= canonlen) {
        snprintf(why, whylen, "node %d: the slot map has too many ranges (%zu)", port, n);
        goto out;
    }
    rc = 0;
out:
    free(rg);
    return rc;
}

/* What the node on port says of itself and the others (CLUSTER INFO and
 * NODES, INFO replication); 0 when all is well. */
static int node_healthy(const ctopo *t, int port, char *why, size_t whylen)
{
    char state[32] = "", assigned[16] = "", ok[16] = "", known[16] = "", size[16] = "";
    redisReply *r = rnode_cmd(port, QUERY_MS, "CLUSTER INFO");
    if (r && r->type == REDIS_REPLY_STRING) {
        rnode_text_field(r->str, "cluster_state", state, sizeof(state));
        rnode_text_field(r->str, "cluster_slots_assigned", assigned, sizeof(assigned));
        rnode_text_field(r->str, "cluster_slots_ok", ok, sizeof(ok));
        rnode_text_field(r->str, "cluster_known_nodes", known, sizeof(known));
        rnode_text_field(r->str, "cluster_size", size, sizeof(size));
    }
    if (r)
        freeReplyObject(r);
    if (strcmp(state, "ok") != 0 || atoi(assigned) != SLOT_COUNT || atoi(ok) != SLOT_COUNT ||
        atoi(known) != CTOPO_NODES || atoi(size) != CTOPO_MASTERS) {
        snprintf(why, whylen, "node %d: cluster_state '%s', slots assigned '%s', ok '%s', "
                              "known nodes '%s', size '%s'", port, state, assigned, ok, known,
                 size);
        return -1;
    }
    ctopo_view v;
    if (ctopo_view_of(port, &v) != 0) {
        snprintf(why, whylen, "node %d: no CLUSTER NODES", port);
        return -1;
    }
    const ctopo_node *me = ctopo_view_myself(&v);
    if (!me) {
        snprintf(why, whylen, "node %d: no 'myself' in CLUSTER NODES", port);
        return -1;
    }
    if (me->nopen > 0) {
        snprintf(why, whylen, "node %d has slot %d migrating or importing", port, me->open[0]);
        return -1;
    }
    for (int i = 0; i < v.n; i++) {
        const ctopo_node *n = &v.node[i];
        if (n->fail || n->pfail || n->handshake || n->noaddr || !n->connected ||
            ctopo_index(t, n->port) < 0) {
            snprintf(why, whylen, "node %d sees %d with flags '%s', %s", port, n->port, n->flags,
                     n->connected ? "connected" : "disconnected");
            return -1;
        }
    }
    char role[16] = "", link[16] = "", mport[16] = "";
    rnode_info(port, "replication", "role", role, sizeof(role));
    if (me->master) {
        if (strcmp(role, "master") != 0) {
            snprintf(why, whylen, "node %d: a master in CLUSTER NODES but role '%s'", port, role);
            return -1;
        }
        return 0;
    }
    const ctopo_node *m = ctopo_view_id(&v, me->master_id);
    rnode_info(port, "replication", "master_port", mport, sizeof(mport));
    rnode_info(port, "replication", "master_link_status", link, sizeof(link));
    if (!m || strcmp(role, "slave") != 0 || atoi(mport) != m->port || strcmp(link, "up") != 0) {
        snprintf(why, whylen, "replica %d: role '%s', master_port '%s', link '%s' (want slave "
                              "of %d, up)", port, role, mport, link, m ? m->port : -1);
        return -1;
    }
    return 0;
}

void ctopo_flush(const ctopo *t)
{
    for (int i = 0; i < CTOPO_NODES; i++) {
        pid_t pid = ctopo_node_pid(t, t->port[i]);
        redisReply *r = pid > 0 && !rproc_stopped(pid) ? rnode_cmd(t->port[i], 500, "FLUSHALL")
                                                           : NULL;
        if (r)
            freeReplyObject(r);
    }
}

int ctopo_healthy(const ctopo *t, char *why, size_t whylen)
{
    char first[1024], canon[1024];
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        if (ctopo_node_pid(t, p) == 0) {
            snprintf(why, whylen, "node %d is not running", p);
            return -1;
        }
        if (node_healthy(t, p, why, whylen) != 0 ||
            slots_healthy(t, p, i ? canon : first, sizeof(canon), why, whylen) != 0)
            return -1;
        if (i && strcmp(canon, first) != 0) {
            snprintf(why, whylen, "nodes %d and %d disagree on the slots: %s vs %s", t->port[0],
                     p, first, canon);
            return -1;
        }
    }
    return 0;
}

void ctopo_describe(const ctopo *t, char *out, size_t outlen)
{
    size_t o = 0;
#define PUT(...) \
    (o += (size_t)snprintf(out + (o < outlen ? o : outlen), o < outlen ? outlen - o : 0, __VA_ARGS__))
    out[0] = '\0';
    for (int i = 0; i < CTOPO_NODES; i++) {
        int p = t->port[i];
        pid_t pid = ctopo_node_pid(t, p);
        char state[32] = "?", link[32] = "-";
        ctopo_view v;
        if (pid > 0 && rproc_stopped(pid)) {
            PUT("\n  node %d: pid %d, STOPPED (SIGSTOP)", p, (int)pid);
            continue;
        }
        if (pid == 0 || ctopo_view_of(p, &v) != 0) {
            PUT("\n  node %d: pid %d, %s", p, (int)pid, pid ? "does not answer" : "not running");
            continue;
        }
        rnode_info(p, "cluster", "cluster_state", state, sizeof(state));
        rnode_info(p, "replication", "master_link_status", link, sizeof(link));
        const ctopo_node *me = ctopo_view_myself(&v);
        const ctopo_node *m = me && !me->master ? ctopo_view_id(&v, me->master_id) : NULL;
        PUT("\n  node %d: pid %d, state %s, flags %s", p, (int)pid, state, me ? me->flags : "?");
        if (me && me->master)
            PUT(", %d slots from %d", me->nslots, me->lowest);
        else
            PUT(", replica of %d, link %s", m ? m->port : -1, link);
        if (me && me->nopen)
            PUT(", %d open slot(s) (migrating / importing), the first %d", me->nopen,
                me->open[0]);
        for (int k = 0; k < v.n; k++)
            if (!v.node[k].myself && (v.node[k].fail || v.node[k].pfail ||
                                      v.node[k].handshake || !v.node[k].connected))
                PUT("; sees %d as %s%s", v.node[k].port, v.node[k].flags,
                    v.node[k].connected ? "" : " (disconnected)");
    }
    PUT("\n  logs in %s (LB_KEEP_TMP=1 keeps them)", t->dir);
#undef PUT
}

/* ---- start and stop, in the runner ------------------------------------------------ */

static struct {
    ctopo t;
    pid_t keeper;
} R; /* the runner's own copy; workers use ctopo_load() */

/* A port below the ephemeral range, none of the taken[0..n). */
static int pick_port(const int *taken, int n)
{
    int lo = 20000, hi = 32768, eph_lo = 0, eph_hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &eph_lo, &eph_hi) == 2 && eph_lo > 1024 && eph_lo < hi)
            hi = eph_lo;
        fclose(f);
    }
    if (hi - lo < 1000)
        lo = hi = 0; /* odd range: any free port */
    for (int tries = 0; tries < 50; tries++) {
        int p = lb_try_free_tcp_port(lo, hi);
        bool dup = false;
        for (int i = 0; i < n; i++)
            dup = dup || taken[i] == p;
        if (p > 0 && !dup)
            return p;
    }
    return -1;
}

/* New client and bus ports for node i. */
static int pick_ports(ctopo *t, int i)
{
    int taken[2 * CTOPO_NODES];
    memcpy(taken, t->port, sizeof(t->port));
    memcpy(taken + CTOPO_NODES, t->bus, sizeof(t->bus));
    int p = pick_port(taken, 2 * CTOPO_NODES);
    if (p < 0)
        return -1;
    taken[i] = p;
    int b = pick_port(taken, 2 * CTOPO_NODES);
    if (b < 0)
        return -1;
    t->port[i] = p;
    t->bus[i] = b;
    return 0;
}

static void export_env(const ctopo *t)
{
    char buf[256];
    size_t o = 0;
    setenv("LB_CL_DIR", t->dir, 1);
    for (int i = 0; i < CTOPO_NODES; i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%d:%d", i ? "," : "", t->port[i],
                              t->bus[i]);
    setenv("LB_CL_NODES", buf, 1);
    snprintf(buf, sizeof(buf), "%d-%d,%d-%d,%d-%d", t->home[0][0], t->home[0][1], t->home[1][0],
             t->home[1][1], t->home[2][0], t->home[2][1]);
    setenv("LB_CL_HOME", buf, 1);
    snprintf(buf, sizeof(buf), "%d", (int)t->keeper);
    setenv("LB_CL_KEEPER_PID", buf, 1);
}

/* Starts node i, on new ports if its ports turned out taken. */
static int start_retry(ctopo *t, int i, char *err, size_t errlen)
{
    for (int attempt = 0;; attempt++) {
        if (ctopo_start_node(t, t->port[i], err, errlen) > 0)
            return 0;
        if (attempt == 2)
            return -1;
        int old = t->port[i];
        char conf[PATH_MAX];
        ctopo_path(t, conf, sizeof(conf), "nodes-%d.conf", old);
        unlink(conf);
        if (pick_ports(t, i) != 0)
            return -1;
        fprintf(stderr, "cluster: port %d failed (%s); trying %d (bus %d)\n", old, err,
                t->port[i], t->bus[i]);
    }
}

/* redis-cli --cluster create, run by the keeper (it must not be the
 * runner's child: see keeper.c) through sh, which writes its exit status
 * to the log; waits for it to end. */
static int create_cluster(ctopo *t, char *err, size_t errlen)
{
    char sock[PATH_MAX], log[PATH_MAX], pidf[PATH_MAX], addr[CTOPO_NODES][32];
    ctopo_path(t, sock, sizeof(sock), "keeper.sock");
    ctopo_path(t, log, sizeof(log), "create.log");
    ctopo_path(t, pidf, sizeof(pidf), "create.pid");
    const char *argv[CTOPO_NODES + 12];
    int n = 0;
    argv[n++] = "sh";
    argv[n++] = "-c";
    argv[n++] = "\"$@\"; s=$?; echo; echo \"lbcl-exit-status $s\"";
    argv[n++] = "sh";
    argv[n++] = cli_bin();
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < CTOPO_NODES; i++) {
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", t->port[i]);
        argv[n++] = addr[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    pid_t pid = keeper_spawn(sock, log, pidf, argv, err, errlen);
    if (pid < 0)
        return -1;
    for (int64_t end = lb_now_ms() + CREATE_TIMEOUT_MS; rproc_alive(pid); lb_sleep_ms(20))
        if (lb_now_ms() > end) {
            rproc_stop(pid, SIGKILL, 1000);
            snprintf(err, errlen, "redis-cli --cluster create did not end within %d s (log: %s)",
                     CREATE_TIMEOUT_MS / 1000, log);
            return -1;
        }
    FILE *f = fopen(log, "r");
    char line[512];
    int status = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "lbcl-exit-status ", 17) == 0)
            status = atoi(line + 17); /* redis-cli ends without a newline */
    if (f)
        fclose(f);
    if (status != 0) {
        rproc_print_tail(log, 3000);
        snprintf(err, errlen, "redis-cli --cluster create: exit status %d (log: %s)", status,
                 log);
        return -1;
    }
    return 0;
}

/* The home layout: the three masters' ranges right after creation. */
static int record_home(ctopo *t, char *err, size_t errlen)
{
    uint16_t *owner = malloc(SLOT_COUNT * sizeof(*owner));
    if (!owner)
        abort();
    int rc = ctopo_slot_map(t->port[0], owner), n = 0;
    for (int s = 0; rc == 0 && s < SLOT_COUNT; s++) {
        if (s > 0 && owner[s] == owner[s - 1])
            continue;
        if (n == CTOPO_MASTERS) {
            rc = -1;
            break;
        }
        t->home[n][0] = s;
        if (n > 0)
            t->home[n - 1][1] = s - 1;
        n++;
    }
    if (rc == 0 && n == CTOPO_MASTERS)
        t->home[n - 1][1] = SLOT_COUNT - 1;
    free(owner);
    if (rc != 0 || n != CTOPO_MASTERS) {
        snprintf(err, errlen, "the new cluster's slots are not %d ranges", CTOPO_MASTERS);
        return -1;
    }
    return 0;
}

static int ctopo_up(char *err, size_t errlen)
{
    ctopo *t = &R.t;
    int64_t t0 = lb_now_ms();
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof(t->dir), "%s/lbcl-XXXXXX", base && *base ? base : "/tmp");
    if (strlen(t->dir) > 80) /* keeper.sock must fit a sockaddr_un */
        snprintf(t->dir, sizeof(t->dir), "/tmp/lbcl-XXXXXX");
    if (!mkdtemp(t->dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        t->dir[0] = '\0';
        return -1;
    }
    char sock[PATH_MAX];
    ctopo_path(t, sock, sizeof(sock), "keeper.sock");
    R.keeper = t->keeper = keeper_start(sock, err, errlen);
    if (R.keeper < 0) {
        R.keeper = 0;
        return -1;
    }
    for (int i = 0; i < CTOPO_NODES; i++)
        if (pick_ports(t, i) != 0) {
            snprintf(err, errlen, "no free TCP port");
            return -1;
        }
    for (int i = 0; i < CTOPO_NODES; i++)
        if (start_retry(t, i, err, errlen) != 0)
            return -1;
    int64_t t1 = lb_now_ms();
    if (create_cluster(t, err, errlen) != 0)
        return -1;
    int64_t t2 = lb_now_ms();
    char why[512], last[512] = "nothing";
    for (int64_t end = lb_now_ms() + UP_TIMEOUT_MS, flushed = 0;
         ctopo_healthy(t, why, sizeof(why)) != 0; lb_sleep_ms(50)) {
        if (lb_now_ms() - flushed > 500) {
            ctopo_flush(t);
            flushed = lb_now_ms();
        }
        snprintf(last, sizeof(last), "%s", why);
        if (lb_now_ms() > end) {
            char state[4096];
            ctopo_describe(t, state, sizeof(state));
            snprintf(err, errlen, "not healthy within %d s of its creation: %s;%s",
                     UP_TIMEOUT_MS / 1000, why, state);
            return -1;
        }
    }
    if (record_home(t, err, errlen) != 0)
        return -1;
    export_env(t);
    int64_t t3 = lb_now_ms();
    fprintf(stderr, "cluster: up in %lld ms (nodes started %lld, redis-cli --cluster create "
                    "%lld, healthy after %lld more, last waiting for: %s); nodes %d,%d,%d "
                    "(masters), %d,%d,%d; dir %s\n",
            (long long)(t3 - t0), (long long)(t1 - t0), (long long)(t2 - t1),
            (long long)(t3 - t2), last, t->port[0], t->port[1], t->port[2], t->port[3], t->port[4],
            t->port[5], t->dir);
    return 0;
}

/* Every node with SIGTERM then SIGKILL; then the keeper, which takes along
 * anything left (its children's PR_SET_PDEATHSIG). */
static void ctopo_down(void)
{
    ctopo *t = &R.t;
    if (R.keeper > 0) {
        for (int i = 0; i < CTOPO_NODES; i++)
            if (t->port[i] > 0)
                rproc_stop(ctopo_node_pid(t, t->port[i]), SIGTERM, 5000);
        kill(R.keeper, SIGKILL);
        waitpid(R.keeper, NULL, 0);
        R.keeper = 0;
    }
    if (!t->dir[0])
        return;
    const char *k = getenv("LB_KEEP_TMP");
    if (k && *k && strcmp(k, "0") != 0)
        fprintf(stderr, "LB_KEEP_TMP: kept %s\n", t->dir);
    else
        rproc_rm_tree(t->dir);
    t->dir[0] = '\0';
}

ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
    (void)tests;
    char err[16384];
    if (ctopo_up(err, sizeof(err)) == 0)
        return;
    /* Every test fails with this message (cl_ready), instead of a runner
     * that dies without saying why. */
    fprintf(stderr, "cluster: the Redis Cluster did not start: %s\n", err);
    for (int i = 0; R.t.dir[0] && i < CTOPO_NODES; i++) {
        char log[PATH_MAX];
        ctopo_path(&R.t, log, sizeof(log), "node-%d.log", R.t.port[i]);
        rproc_print_tail(log, 3000);
    }
    setenv("LB_CL_ERROR", err, 1);
    ctopo_down();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    ctopo_down();
}
