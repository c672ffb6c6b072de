/*
 * topo: the one Redis Sentinel set of an ha_tests run.
 *
 * Started once per test binary (the project rule: a Sentinel set per
 * binary, not per test) by a Criterion PRE_ALL report hook in the runner,
 * stopped by the POST_ALL hook; in between, tests kill and restart its
 * processes one test at a time (ha_tests runs with --jobs 1).
 *
 * Layout: two redis-server nodes (one master, one replica) and three
 * sentinels (quorum 2) monitoring TOPO_MASTER_NAME, all on 127.0.0.1 ports
 * picked below the kernel's ephemeral range, so that a node restarted on its
 * port never finds it taken by an outgoing connection. Every process is a
 * child of the keeper (keeper.c). Nodes get a fresh config file on each
 * start (a restarted node is a new, empty machine); each sentinel keeps its
 * own config file, which it rewrites, across restarts.
 *
 * State shared between the runner and the workers goes through the
 * environment (set once, in PRE_ALL) and the temp dir (pid files); see
 * topo.h.
 */
#include "tests/ha/topo.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "tests/common/rnode.h"
#include "tests/common/rproc.h"
#include "tests/ha/keeper.h"
#include "tests/integration/harness.h"

#define START_TIMEOUT_MS 10000
#define UP_TIMEOUT_MS 30000

/* ---- small utilities ------------------------------------------------------------ */

void topo_path(const topo *t, char *out, size_t outlen, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    snprintf(out, outlen, "%s/%s", t->dir, name);
}

static const char *redis_bin(void)
{
    const char *bin = getenv("LB_REDIS_BIN");
    return bin && *bin ? bin : "redis-server";
}

static int parse_ports(const char *s, int *out, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        long v = s ? strtol(s, &end, 10) : 0;
        if (!s || v <= 0 || v > 65535 || (i + 1 < n ? *end != ',' : *end != '\0'))
            return -1;
        out[i] = (int)v;
        s = end + 1;
    }
    return 0;
}

int topo_load(topo *t, char *err, size_t errlen)
{
    const char *e = getenv("LB_HA_ERROR");
    if (e && *e) {
        snprintf(err, errlen, "the HA topology failed to start: %s", e);
        return -1;
    }
    const char *dir = getenv("LB_HA_DIR"), *name = getenv("LB_HA_MASTER_NAME");
    const char *keeper = getenv("LB_HA_KEEPER_PID");
    memset(t, 0, sizeof(*t));
    if (!dir || !name || !keeper) {
        snprintf(err, errlen, "no HA topology (LB_HA_DIR unset): run inside ha_tests, whose "
                              "PRE_ALL hook starts it");
        return -1;
    }
    snprintf(t->dir, sizeof(t->dir), "%s", dir);
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->keeper = (pid_t)atoi(keeper);
    if (parse_ports(getenv("LB_HA_NODES"), t->node, TOPO_NODES) != 0 ||
        parse_ports(getenv("LB_HA_SENTINELS"), t->sentinel, TOPO_SENTINELS) != 0) {
        snprintf(err, errlen, "bad LB_HA_NODES / LB_HA_SENTINELS");
        return -1;
    }
    return 0;
}

bool topo_is_node(const topo *t, int port)
{
    for (int i = 0; i < TOPO_NODES; i++)
        if (t->node[i] == port)
            return true;
    return false;
}

int topo_other_node(const topo *t, int port) { return t->node[0] == port ? t->node[1] : t->node[0]; }

/* ---- processes ------------------------------------------------------------------- */

static pid_t pid_from_file(const topo *t, const char *path, int port)
{
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

pid_t topo_node_pid(const topo *t, int port)
{
    char path[PATH_MAX];
    topo_path(t, path, sizeof(path), "node-%d.pid", port);
    return pid_from_file(t, path, port);
}

pid_t topo_sentinel_pid(const topo *t, int i)
{
    char path[PATH_MAX];
    topo_path(t, path, sizeof(path), "sentinel-%d.pid", i);
    return pid_from_file(t, path, t->sentinel[i]);
}

static pid_t start(const topo *t, const char *const argv[], const char *log, const char *pidf,
                   int port, char *err, size_t errlen)
{
    char sock[PATH_MAX];
    topo_path(t, sock, sizeof(sock), "keeper.sock");
    pid_t pid = keeper_spawn(sock, log, pidf, argv, err, errlen);
    if (pid < 0)
        return -1;
    return rproc_wait_ping(pid, port, START_TIMEOUT_MS, log, err, errlen) == 0 ? pid : -1;
}

pid_t topo_start_node(const topo *t, int port, int master_port, char *err, size_t errlen)
{
    char conf[PATH_MAX], log[PATH_MAX], pidf[PATH_MAX], rdb[PATH_MAX], text[PATH_MAX + 1024];
    topo_path(t, conf, sizeof(conf), "node-%d.conf", port);
    topo_path(t, log, sizeof(log), "node-%d.log", port);
    topo_path(t, pidf, sizeof(pidf), "node-%d.pid", port);
    topo_path(t, rdb, sizeof(rdb), "node-%d.rdb", port);
    /* Diskless sync with no delay: a replica is in sync within a second. A
     * restarted node starts empty: its rdb from a past full sync goes. */
    int n = snprintf(text, sizeof(text),
                     "port %d\nbind 127.0.0.1\ndaemonize no\nsave \"\"\nappendonly no\n"
                     "dir %s\ndbfilename node-%d.rdb\n"
                     "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n"
                     "enable-debug-command local\n",
                     port, t->dir, port);
    if (master_port > 0)
        snprintf(text + n, sizeof(text) - (size_t)n, "replicaof 127.0.0.1 %d\n", master_port);
    unlink(rdb);
    if (rproc_write_file(conf, text) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", conf, strerror(errno));
        return -1;
    }
    const char *argv[] = {redis_bin(), conf, NULL};
    return start(t, argv, log, pidf, port, err, errlen);
}

pid_t topo_start_sentinel(const topo *t, int i, char *err, size_t errlen)
{
    char conf[PATH_MAX], log[PATH_MAX], pidf[PATH_MAX];
    topo_path(t, conf, sizeof(conf), "sentinel-%d.conf", i);
    topo_path(t, log, sizeof(log), "sentinel-%d.log", i);
    topo_path(t, pidf, sizeof(pidf), "sentinel-%d.pid", i);
    const char *argv[] = {redis_bin(), conf, "--sentinel", NULL};
    return start(t, argv, log, pidf, t->sentinel[i], err, errlen);
}

/* ---- queries -------------------------------------------------------------------- */

int topo_info(int port, const char *field, char *out, size_t outlen)
{
    return rnode_info(port, "replication", field, out, outlen);
}

int topo_sentinel_master(const topo *t, int i)
{
    redisReply *r = rnode_cmd(t->sentinel[i], 1000, "SENTINEL get-master-addr-by-name %s", t->name);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(r->element[1]->str);
    if (r)
        freeReplyObject(r);
    return port;
}

const char *topo_field(const redisReply *kv, const char *key)
{
    if (!kv || kv->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && strcmp(kv->element[i]->str, key) == 0)
            return kv->element[i + 1]->type == REDIS_REPLY_STRING ? kv->element[i + 1]->str : NULL;
    return NULL;
}

/* What sentinel i says of the master, its replica r and its peers; 0 when
 * all is as it should be, and the master's config-epoch in *epoch. */
static int sentinel_healthy(const topo *t, int i, int replica, long long *epoch, char *why,
                            size_t whylen)
{
    int port = t->sentinel[i], rc = -1;
    redisReply *m = rnode_cmd(port, 1000, "SENTINEL master %s", t->name);
    redisReply *rs = rnode_cmd(port, 1000, "SENTINEL replicas %s", t->name);
    redisReply *ss = rnode_cmd(port, 1000, "SENTINEL sentinels %s", t->name);
    redisReply *in = rnode_cmd(port, 1000, "INFO sentinel");
    const char *flags = topo_field(m, "flags");
    const char *others = topo_field(m, "num-other-sentinels");
    const char *ep = topo_field(m, "config-epoch");
    const char *role = topo_field(m, "role-reported");
    const char *ping = topo_field(m, "last-ping-sent");
    if (!m || !rs || !ss || !in || rs->type != REDIS_REPLY_ARRAY ||
        ss->type != REDIS_REPLY_ARRAY || in->type != REDIS_REPLY_STRING || !ep || !role ||
        !ping) {
        snprintf(why, whylen, "sentinel %d (port %d) does not answer SENTINEL master / "
                              "replicas / sentinels, INFO sentinel", i, port);
        goto out;
    }
    /* A sentinel in TILT does nothing, and acts on what it sees when it
     * leaves it (30 s later). */
    if (!strstr(in->str, "sentinel_tilt:0")) {
        snprintf(why, whylen, "sentinel %d is in TILT mode (its timer ran late)", i);
        goto out;
    }
    /* Nothing but "master": s_down, o_down, failover_in_progress (its
     * failover-state not idle) and "disconnected" (its links to the master
     * not made again yet after a switch) all mean the master may move. */
    if (!flags || strcmp(flags, "master") != 0) {
        snprintf(why, whylen, "sentinel %d: master flags '%s'", i, flags ? flags : "?");
        goto out;
    }
    if (strcmp(role, "master") != 0) {
        snprintf(why, whylen, "sentinel %d: the master reported role '%s'", i, role);
        goto out;
    }
    if (atoll(ping) > TOPO_DOWN_AFTER_MS / 2) {
        snprintf(why, whylen, "sentinel %d: its PING to the master unanswered for %s ms", i, ping);
        goto out;
    }
    if (!others || atoi(others) != TOPO_SENTINELS - 1) {
        snprintf(why, whylen, "sentinel %d knows %s other sentinels", i, others ? others : "?");
        goto out;
    }
    bool seen = false;
    for (size_t k = 0; k < rs->elements; k++) {
        const char *p = topo_field(rs->element[k], "port");
        const char *f = topo_field(rs->element[k], "flags");
        if (p && atoi(p) == replica) {
            seen = true;
            if (!f || strcmp(f, "slave") != 0) {
                snprintf(why, whylen, "sentinel %d: replica %d flags '%s'", i, replica,
                         f ? f : "?");
                goto out;
            }
        }
    }
    if (!seen) {
        snprintf(why, whylen, "sentinel %d does not list replica %d", i, replica);
        goto out;
    }
    /* A peer's "master_down" is what it answered about the old master
     * during the last failover; it stays until 5 s after that answer
     * (SENTINEL_ASK_PERIOD * 5), and counts meanwhile for the NEW master: one
     * sentinel that takes the new master for down (s_down) then has its
     * quorum (o_down) at once, and starts a failover at once (a switch
     * lets it fail over again without waiting). So the master is stable
     * only once no peer has it. */
    for (size_t k = 0; k < ss->elements; k++) {
        const char *f = topo_field(ss->element[k], "flags");
        if (!f || strcmp(f, "sentinel") != 0) {
            snprintf(why, whylen, "sentinel %d: peer %s flags '%s'", i,
                     topo_field(ss->element[k], "port") ? topo_field(ss->element[k], "port") : "?",
                     f ? f : "?");
            goto out;
        }
    }
    *epoch = atoll(ep);
    rc = 0;
out:
    if (m)
        freeReplyObject(m);
    if (rs)
        freeReplyObject(rs);
    if (ss)
        freeReplyObject(ss);
    if (in)
        freeReplyObject(in);
    return rc;
}

int topo_healthy(const topo *t, topo_view *v, char *why, size_t whylen)
{
    int view[TOPO_SENTINELS];
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        view[i] = topo_sentinel_master(t, i);
        if (view[i] < 0) {
            snprintf(why, whylen, "sentinel %d (port %d) names no master", i, t->sentinel[i]);
            return -1;
        }
    }
    for (int i = 1; i < TOPO_SENTINELS; i++)
        if (view[i] != view[0]) {
            snprintf(why, whylen, "the sentinels disagree on the master: %d, %d, %d", view[0],
                     view[1], view[2]);
            return -1;
        }
    int m = view[0], r = topo_other_node(t, m);
    if (!topo_is_node(t, m)) {
        snprintf(why, whylen, "the sentinels name port %d, not one of the nodes", m);
        return -1;
    }
    char role[32] = "", link[32] = "", mport[32] = "";
    if (topo_info(m, "role", role, sizeof(role)) != 0 || strcmp(role, "master") != 0) {
        snprintf(why, whylen, "master %d says role '%s'", m, role);
        return -1;
    }
    topo_info(r, "role", role, sizeof(role));
    topo_info(r, "master_port", mport, sizeof(mport));
    topo_info(r, "master_link_status", link, sizeof(link));
    if (strcmp(role, "slave") != 0 || atoi(mport) != m || strcmp(link, "up") != 0) {
        snprintf(why, whylen, "replica %d: role '%s', master_port '%s', link '%s' (want slave "
                              "of %d, up)", r, role, mport, link, m);
        return -1;
    }
    long long epoch[TOPO_SENTINELS];
    for (int i = 0; i < TOPO_SENTINELS; i++)
        if (sentinel_healthy(t, i, r, &epoch[i], why, whylen) != 0)
            return -1;
    for (int i = 1; i < TOPO_SENTINELS; i++)
        if (epoch[i] != epoch[0]) {
            snprintf(why, whylen, "the sentinels' config-epochs differ: %lld, %lld, %lld",
                     epoch[0], epoch[1], epoch[2]);
            return -1;
        }
    /* Named again after the checks: a failover between the first look
     * and now would have passed them half on the old master. */
    for (int i = 0; i < TOPO_SENTINELS; i++)
        if (topo_sentinel_master(t, i) != m) {
            snprintf(why, whylen, "sentinel %d no longer names %d", i, m);
            return -1;
        }
    v->master = m;
    v->epoch = epoch[0];
    return 0;
}

void topo_describe(const topo *t, char *out, size_t outlen)
{
    size_t o = 0;
#define PUT(...) \
    (o += (size_t)snprintf(out + (o < outlen ? o : outlen), o < outlen ? outlen - o : 0, __VA_ARGS__))
    out[0] = '\0';
    for (int i = 0; i < TOPO_NODES; i++) {
        char role[32] = "?", mport[32] = "-", link[32] = "-";
        int p = t->node[i];
        topo_info(p, "role", role, sizeof(role));
        topo_info(p, "master_port", mport, sizeof(mport));
        topo_info(p, "master_link_status", link, sizeof(link));
        PUT("\n  node %d: pid %d, role %s, master_port %s, link %s", p, (int)topo_node_pid(t, p),
            role, mport, link);
    }
    for (int i = 0; i < TOPO_SENTINELS; i++) {
        redisReply *m = rnode_cmd(t->sentinel[i], 1000, "SENTINEL master %s", t->name);
        redisReply *in = rnode_cmd(t->sentinel[i], 1000, "INFO sentinel");
        bool tilt = in && in->type == REDIS_REPLY_STRING && strstr(in->str, "sentinel_tilt:1");
        redisReply *ss = rnode_cmd(t->sentinel[i], 1000, "SENTINEL sentinels %s", t->name);
        PUT("\n  sentinel %d (port %d): pid %d, master %d, flags %s, config-epoch %s, "
            "PING pending %s ms, other sentinels %s%s", i,
            t->sentinel[i], (int)topo_sentinel_pid(t, i), topo_sentinel_master(t, i),
            topo_field(m, "flags") ? topo_field(m, "flags") : "?",
            topo_field(m, "config-epoch") ? topo_field(m, "config-epoch") : "?",
            topo_field(m, "last-ping-sent") ? topo_field(m, "last-ping-sent") : "?",
            topo_field(m, "num-other-sentinels") ? topo_field(m, "num-other-sentinels") : "?",
            tilt ? ", IN TILT MODE (its timer ran late: machine overloaded?)" : "");
        for (size_t k = 0; ss && ss->type == REDIS_REPLY_ARRAY && k < ss->elements; k++)
            PUT("%s%s '%s'", k ? ", " : " (", topo_field(ss->element[k], "port") ?
                                                 topo_field(ss->element[k], "port") : "?",
                topo_field(ss->element[k], "flags") ? topo_field(ss->element[k], "flags") : "?");
        if (ss && ss->type == REDIS_REPLY_ARRAY && ss->elements)
            PUT(")");
        if (m)
            freeReplyObject(m);
        if (in)
            freeReplyObject(in);
        if (ss)
            freeReplyObject(ss);
    }
    PUT("\n  logs in %s (LB_KEEP_TMP=1 keeps them)", t->dir);
#undef PUT
}

/* ---- start and stop, in the runner ------------------------------------------------ */

static struct {
    topo t;
    pid_t keeper;
    bool up;
} R; /* the runner's own copy; workers use topo_load() */

/* A port below the ephemeral range, not one of the taken[0..n). */
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

static int write_sentinel_conf(const topo *t, int i, int master)
{
    char conf[PATH_MAX], text[PATH_MAX + 1024];
    topo_path(t, conf, sizeof(conf), "sentinel-%d.conf", i);
    snprintf(text, sizeof(text),
             "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\n"
             "sentinel resolve-hostnames no\nsentinel announce-hostnames no\n"
             "sentinel monitor %s 127.0.0.1 %d %d\n"
             "sentinel down-after-milliseconds %s %d\n"
             "sentinel failover-timeout %s %d\n"
             "sentinel parallel-syncs %s 1\n",
             t->sentinel[i], t->dir, t->name, master, TOPO_QUORUM, t->name, TOPO_DOWN_AFTER_MS,
             t->name, TOPO_FAILOVER_TIMEOUT_MS, t->name);
    return rproc_write_file(conf, text);
}

static void export_env(const topo *t)
{
    char buf[128];
    setenv("LB_HA_DIR", t->dir, 1);
    setenv("LB_HA_MASTER_NAME", t->name, 1);
    snprintf(buf, sizeof(buf), "%d,%d", t->node[0], t->node[1]);
    setenv("LB_HA_NODES", buf, 1);
    snprintf(buf, sizeof(buf), "%d,%d,%d", t->sentinel[0], t->sentinel[1], t->sentinel[2]);
    setenv("LB_HA_SENTINELS", buf, 1);
    snprintf(buf, sizeof(buf), "%d", (int)t->keeper);
    setenv("LB_HA_KEEPER_PID", buf, 1);
}

/* Starts a node or sentinel, on a new port if its port turned out taken. */
static int start_retry(topo *t, int *port, bool sentinel, int idx, int master, char *err,
                       size_t errlen)
{
    for (int attempt = 0;; attempt++) {
        pid_t pid = sentinel ? (write_sentinel_conf(t, idx, master) == 0
                                    ? topo_start_sentinel(t, idx, err, errlen)
                                    : -1)
                             : topo_start_node(t, *port, master, err, errlen);
        if (pid > 0)
            return 0;
        if (attempt == 2)
            return -1;
        int taken[TOPO_NODES + TOPO_SENTINELS];
        memcpy(taken, t->node, sizeof(t->node));
        memcpy(taken + TOPO_NODES, t->sentinel, sizeof(t->sentinel));
        int p = pick_port(taken, TOPO_NODES + TOPO_SENTINELS);
        if (p < 0)
            return -1;
        fprintf(stderr, "ha: port %d failed (%s); trying %d\n", *port, err, p);
        *port = p;
    }
}

static int topo_up(char *err, size_t errlen)
{
    topo *t = &R.t;
    int64_t t0 = lb_now_ms();
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof(t->dir), "%s/lbha-XXXXXX", base && *base ? base : "/tmp");
    if (strlen(t->dir) > 80) /* keeper.sock must fit a sockaddr_un */
        snprintf(t->dir, sizeof(t->dir), "/tmp/lbha-XXXXXX");
    if (!mkdtemp(t->dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        t->dir[0] = '\0';
        return -1;
    }
    snprintf(t->name, sizeof(t->name), "%s", TOPO_MASTER_NAME);
    char sock[PATH_MAX];
    topo_path(t, sock, sizeof(sock), "keeper.sock");
    R.keeper = t->keeper = keeper_start(sock, err, errlen);
    if (R.keeper < 0)
        return -1;
    for (int i = 0; i < TOPO_NODES + TOPO_SENTINELS; i++) {
        int taken[TOPO_NODES + TOPO_SENTINELS];
        memcpy(taken, t->node, sizeof(t->node));
        memcpy(taken + TOPO_NODES, t->sentinel, sizeof(t->sentinel));
        int p = pick_port(taken, TOPO_NODES + TOPO_SENTINELS);
        if (p < 0) {
            snprintf(err, errlen, "no free TCP port");
            return -1;
        }
        *(i < TOPO_NODES ? &t->node[i] : &t->sentinel[i - TOPO_NODES]) = p;
    }
    if (start_retry(t, &t->node[0], false, 0, 0, err, errlen) != 0 ||
        start_retry(t, &t->node[1], false, 1, t->node[0], err, errlen) != 0)
        return -1;
    /* The replica in sync before the sentinels start: their first INFO of
     * the master then lists it (else they learn it only 10 s later). */
    char link[32] = "";
    for (int64_t end = lb_now_ms() + START_TIMEOUT_MS;
         (topo_info(t->node[1], "master_link_status", link, sizeof(link)) != 0 ||
          strcmp(link, "up") != 0);
         lb_sleep_ms(20))
        if (lb_now_ms() > end) {
            snprintf(err, errlen, "the replica %d did not sync with %d within %d s", t->node[1],
                     t->node[0], START_TIMEOUT_MS / 1000);
            return -1;
        }
    for (int i = 0; i < TOPO_SENTINELS; i++)
        if (start_retry(t, &t->sentinel[i], true, i, t->node[0], err, errlen) != 0)
            return -1;
    char why[512];
    topo_view v;
    for (int64_t end = lb_now_ms() + UP_TIMEOUT_MS; topo_healthy(t, &v, why, sizeof(why)) != 0;
         lb_sleep_ms(50))
        if (lb_now_ms() > end) {
            char state[2048];
            topo_describe(t, state, sizeof(state));
            snprintf(err, errlen, "not healthy within %d s: %s;%s", UP_TIMEOUT_MS / 1000, why,
                     state);
            return -1;
        }
    export_env(t);
    fprintf(stderr, "ha: topology up in %lld ms: nodes %d (master), %d; sentinels %d,%d,%d "
                    "watching '%s'; dir %s\n",
            (long long)(lb_now_ms() - t0), t->node[0], t->node[1], t->sentinel[0],
            t->sentinel[1], t->sentinel[2], t->name, t->dir);
    return 0;
}

/* Sentinels first (no failover while the nodes go), then the nodes, each
 * with SIGTERM then SIGKILL; then the keeper, which takes along anything
 * left (its children's PR_SET_PDEATHSIG). */
static void topo_down(void)
{
    topo *t = &R.t;
    if (R.keeper > 0) {
        for (int i = 0; i < TOPO_SENTINELS; i++)
            rproc_stop(topo_sentinel_pid(t, i), SIGTERM, 5000);
        for (int i = 0; i < TOPO_NODES; i++)
            rproc_stop(topo_node_pid(t, t->node[i]), SIGTERM, 5000);
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
    char err[4096];
    if (topo_up(err, sizeof(err)) == 0) {
        R.up = true;
        return;
    }
    /* Every test fails with this message (ha_ready), instead of a runner
     * that dies without saying why. */
    fprintf(stderr, "ha: the HA topology did not start: %s\n", err);
    for (int i = 0; R.t.dir[0] && i < TOPO_SENTINELS; i++) {
        char log[PATH_MAX];
        topo_path(&R.t, log, sizeof(log), "sentinel-%d.log", i);
        rproc_print_tail(log, 2000);
    }
    for (int i = 0; R.t.dir[0] && i < TOPO_NODES; i++) {
        char log[PATH_MAX];
        topo_path(&R.t, log, sizeof(log), "node-%d.log", R.t.node[i]);
        rproc_print_tail(log, 2000);
    }
    setenv("LB_HA_ERROR", err, 1);
    topo_down();
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    topo_down();
}
