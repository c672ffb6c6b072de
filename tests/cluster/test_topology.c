/*
 * The cluster test infrastructure itself, with no broker: the shared Redis
 * Cluster is healthy with three masters and a replica each; cl_lock_name's
 * names hash (slot_of_key = CLUSTER KEYSLOT) to the master they are meant
 * for; cl_move_slot moves a slot with its keys (MOVED from the old owner),
 * and in steps (ASK in between); a killed master's replica takes over
 * within a bound and cl_ready puts the old master back as its replica,
 * twice in a row; and cl_ready mends a cluster broken several ways at once.
 *
 * Timings are printed ("cluster: ... in N ms") for the record; the bounds
 * asserted are generous (a loaded 2-core machine).
 */
#include "tests/cluster/cl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAILOVER_BOUND_MS 15000
#define MOVE_BOUND_MS 5000
#define NKEYS 250

/* The master port that node port names for slot in its CLUSTER SLOTS,
 * parsed here (not by cl), and how many replicas it lists with it. */
static int owner_on(int port, int slot, int *nrep)
{
    redisReply *r = cl_node_cmd(port, "CLUSTER SLOTS");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "CLUSTER SLOTS on %d", port);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (slot >= e->element[0]->integer && slot <= e->element[1]->integer) {
            if (nrep)
                *nrep = (int)e->elements - 3;
            return (int)e->element[2]->element[1]->integer;
        }
    }
    return 0;
}

static void expect_replica_of(int port, int master)
{
    redisReply *r = cl_node_cmd(port, "INFO replication");
    char want[64];
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert(strstr(r->str, "role:slave"), "node %d is not a replica:\n%s", port, r->str);
    snprintf(want, sizeof(want), "master_port:%d\r", master);
    cr_assert(strstr(r->str, want), "node %d is not a replica of %d:\n%s", port, master, r->str);
    cr_assert(strstr(r->str, "master_link_status:up"), "node %d: link not up:\n%s", port, r->str);
}

/* Three masters, each with its own replica, all six nodes, every node ok. */
static void expect_full_cluster(const int m[CL_MASTERS])
{
    bool seen[CL_NODES] = {false};
    for (int i = 0; i < CL_MASTERS; i++) {
        cr_assert_str_eq(cl_node_role(m[i]), "master", "master %d", m[i]);
        int r = cl_replica_of(m[i]);
        expect_replica_of(r, m[i]);
        for (int k = 0; k < CL_NODES; k++) {
            if (cl_node_port(k) == m[i] || cl_node_port(k) == r) {
                cr_assert_not(seen[k], "node %d counted twice (masters %d, %d, %d)",
                              cl_node_port(k), m[0], m[1], m[2]);
                seen[k] = true;
            }
        }
    }
    for (int k = 0; k < CL_NODES; k++) {
        int p = cl_node_port(k);
        cr_assert(seen[k], "node %d is neither a master nor a replica of one", p);
        cr_assert_gt(cl_node_pid(p), 0, "node %d is not running", p);
        cr_assert_str_eq(cl_node_state(p), "ok", "node %d: cluster_state", p);
    }
}

static void expect_slot_on(int slot, int master)
{
    for (int k = 0; k < CL_NODES; k++) {
        int p = cl_node_port(k), nrep = -1;
        cr_assert_eq(owner_on(p, slot, &nrep), master, "node %d names %d for slot %d, want %d",
                     p, owner_on(p, slot, NULL), slot, master);
        cr_assert_eq(nrep, 1, "node %d lists %d replicas for slot %d", p, nrep, slot);
    }
}

static void expect_no_open_slot(void)
{
    for (int k = 0; k < CL_NODES; k++) {
        redisReply *r = cl_node_cmd(cl_node_port(k), "CLUSTER NODES");
        cr_assert_eq(r->type, REDIS_REPLY_STRING);
        cr_assert_null(strchr(r->str, '['), "node %d has an open slot:\n%s", cl_node_port(k),
                       r->str);
    }
}

/* The flags of node port in the CLUSTER NODES of node asked. */
static const char *flags_of(int asked, int port)
{
    redisReply *r = cl_node_cmd(asked, "CLUSTER NODES");
    char addr[32];
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    snprintf(addr, sizeof(addr), " 127.0.0.1:%d@", port);
    char *at = strstr(r->str, addr);
    cr_assert(at, "node %d does not list %d:\n%s", asked, port, r->str);
    at = strchr(at + 1, ' '); /* the flags follow the address */
    cr_assert(at);
    at[strcspn(at + 1, " ") + 1] = '\0';
    return at + 1;
}

static long long count_in_slot(int port, int slot)
{
    redisReply *r = cl_node_cmd(port, "CLUSTER COUNTKEYSINSLOT %d", slot);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "COUNTKEYSINSLOT on %d: %s", port,
                 r->str ? r->str : "?");
    return r->integer;
}

static void expect_redirect(redisReply *r, const char *kind, int slot, int to)
{
    char want[64];
    snprintf(want, sizeof(want), "%s %d 127.0.0.1:%d", kind, slot, to);
    cr_assert_eq(r->type, REDIS_REPLY_ERROR, "want %s, got type %d", want, r->type);
    cr_assert_str_eq(r->str, want);
}

static void fill_slot(int port, const char *name, int n)
{
    for (int i = 0; i < n; i++) {
        redisReply *r = cl_node_cmd(port, "SET lb:{%s}:k%d v%d", name, i, i);
        cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SET on %d: %s", port, r->str);
    }
}

static void expect_keys_on(int port, const char *name, int from, int to)
{
    for (int i = from; i < to; i++) {
        redisReply *r = cl_node_cmd(port, "GET lb:{%s}:k%d", name, i);
        char want[16];
        snprintf(want, sizeof(want), "v%d", i);
        cr_assert_eq(r->type, REDIS_REPLY_STRING, "GET lb:{%s}:k%d on %d: type %d %s", name, i,
                     port, r->type, r->str ? r->str : "");
        cr_assert_str_eq(r->str, want);
    }
}

CL_TEST(topology, healthy_at_start, 60)
{
    int m[CL_MASTERS];
    cl_masters(m);
    expect_full_cluster(m);
    for (int k = 0; k < CL_NODES; k++) {
        redisReply *r = cl_node_cmd(cl_node_port(k), "CLUSTER SLOTS");
        long long covered = 0;
        for (size_t i = 0; i < r->elements; i++)
            covered += r->element[i]->element[1]->integer - r->element[i]->element[0]->integer + 1;
        cr_assert_eq(covered, SLOT_COUNT, "node %d: CLUSTER SLOTS covers %lld slots",
                     cl_node_port(k), covered);
    }
    for (int i = 0; i < CL_MASTERS; i++)
        cr_assert_eq(cl_node_cmd(m[i], "DBSIZE")->integer, 0, "cl_ready left keys on %d", m[i]);

    char want[128];
    snprintf(want, sizeof(want), "cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             cl_node_port(0), cl_node_port(1), cl_node_port(2));
    cr_assert_str_eq(cl_seed_url(), want);

    /* Lock names on each master: Redis hashes them (and a lock's keys) to
     * the slot we compute, which that master serves. */
    for (int i = 0; i < CL_MASTERS; i++) {
        long last = -1;
        for (int k = 0; k < 4; k++) {
            char name[32], again[32];
            int slot = cl_lock_name(i, k, name, sizeof(name));
            cr_assert_eq(cl_lock_name(i, k, again, sizeof(again)), slot);
            cr_assert_str_eq(again, name, "cl_lock_name(%d, %d) is not deterministic", i, k);
            cr_assert_eq(strncmp(name, "clk-", 4), 0, "name %s", name);
            cr_assert_gt(atol(name + 4), last, "names of master %d do not go up: %s after %ld",
                         i, name, last);
            last = atol(name + 4);
            cr_assert_eq(slot, slot_of_key(name, strlen(name)));
            int asked = cl_node_port((i + k) % CL_NODES);
            redisReply *r = cl_node_cmd(asked, "CLUSTER KEYSLOT %s", name);
            cr_assert_eq(r->integer, slot, "CLUSTER KEYSLOT %s on %d: %lld, want %d", name,
                         asked, r->integer, slot);
            r = cl_node_cmd(asked, "CLUSTER KEYSLOT lb:{%s}:queue", name);
            cr_assert_eq(r->integer, slot, "the lock's keys hash elsewhere: %lld", r->integer);
            cr_assert_eq(cl_master_of_slot(slot), m[i]);
            r = cl_node_cmd(m[i], "SET lb:{%s}:probe 1", name);
            cr_assert_eq(r->type, REDIS_REPLY_STATUS, "SET of %s on its master %d: %s", name,
                         m[i], r->str);
            expect_redirect(cl_node_cmd(m[(i + 1) % CL_MASTERS], "SET lb:{%s}:probe 1", name),
                            "MOVED", slot, m[i]);
        }
    }
}

CL_TEST(topology, move_slot_moves_its_keys, 90)
{
    int m[CL_MASTERS];
    cl_masters(m);
    char name[32], other[32];
    int slot = cl_lock_name(0, 0, name, sizeof(name)), oslot = -1;
    for (int k = 1; oslot < 0 || oslot == slot; k++)
        oslot = cl_lock_name(0, k, other, sizeof(other));
    fill_slot(m[0], name, NKEYS);
    fill_slot(m[0], other, 3);
    cr_assert_eq(count_in_slot(m[0], slot), NKEYS);

    int64_t ms = cl_move_slot(slot, m[1]);
    fprintf(stderr, "cluster: slot %d with %d keys moved from %d to %d in %lld ms\n", slot,
            NKEYS, m[0], m[1], (long long)ms);
    cr_assert_lt(ms, MOVE_BOUND_MS, "the move took %lld ms", (long long)ms);
    cr_assert_eq(cl_master_of_slot(slot), m[1]);
    expect_slot_on(slot, m[1]);
    expect_no_open_slot();
    cr_assert_eq(count_in_slot(m[0], slot), 0, "keys left on the source");
    cr_assert_eq(count_in_slot(m[1], slot), NKEYS, "keys missing on the target");
    expect_keys_on(m[1], name, 0, NKEYS);
    char key[64];
    snprintf(key, sizeof(key), "lb:{%s}:k0", name);
    expect_redirect(cl_node_cmd(m[0], "GET %s", key), "MOVED", slot, m[1]);
    expect_keys_on(m[0], other, 0, 3); /* another slot of the source stayed */
    cr_assert_eq(cl_master_of_slot(oslot), m[0]);

    /* The names follow the map: that name is master 1's now. */
    char now0[32];
    cl_lock_name(0, 0, now0, sizeof(now0));
    cr_assert_str_neq(now0, name, "cl_lock_name(0, 0) still gives %s, moved to %d", name, m[1]);

    /* And back. */
    ms = cl_move_slot(slot, m[0]);
    fprintf(stderr, "cluster: slot %d moved back in %lld ms\n", slot, (long long)ms);
    expect_slot_on(slot, m[0]);
    cr_assert_eq(count_in_slot(m[0], slot), NKEYS);
    expect_keys_on(m[0], name, 0, NKEYS);
    cr_assert_eq(cl_move_slot(slot, m[0]), 0, "a move to the owner is a no-op");
}

CL_TEST(topology, move_slot_in_steps_asks_in_between, 90)
{
    int m[CL_MASTERS];
    cl_masters(m);
    char name[32];
    int slot = cl_lock_name(2, 0, name, sizeof(name));
    fill_slot(m[2], name, 30);

    cr_assert_eq(cl_move_slot_begin(slot, m[0]), m[2]);
    cr_assert_eq(cl_move_slot_keys(slot, 10), 10);
    cr_assert_eq(count_in_slot(m[2], slot), 20);
    cr_assert_eq(count_in_slot(m[0], slot), 10);
    /* Mid-move: the source serves what it still has, sends ASK for the
     * rest; the target answers only after ASKING. */
    redisReply *keys = cl_node_cmd(m[0], "CLUSTER GETKEYSINSLOT %d 1", slot);
    cr_assert_eq(keys->elements, 1);
    expect_redirect(cl_node_cmd(m[2], "GET %s", keys->element[0]->str), "ASK", slot, m[0]);
    expect_redirect(cl_node_cmd(m[0], "GET %s", keys->element[0]->str), "MOVED", slot, m[2]);
    redisContext *c = redisConnect("127.0.0.1", m[0]);
    cr_assert(c && !c->err);
    redisAppendCommand(c, "ASKING");
    redisAppendCommand(c, "GET %s", keys->element[0]->str);
    redisReply *a = NULL, *g = NULL;
    cr_assert_eq(redisGetReply(c, (void **)&a), REDIS_OK);
    cr_assert_eq(redisGetReply(c, (void **)&g), REDIS_OK);
    bool got = g->type == REDIS_REPLY_STRING && g->str[0] == 'v';
    freeReplyObject(a);
    freeReplyObject(g);
    redisFree(c);
    cr_assert(got, "GET after ASKING on the target did not answer the value");
    redisReply *still = cl_node_cmd(m[2], "CLUSTER GETKEYSINSLOT %d 1", slot);
    cr_assert_eq(still->elements, 1);
    cr_assert_eq(cl_node_cmd(m[2], "GET %s", still->element[0]->str)->type, REDIS_REPLY_STRING,
                 "the source stopped serving a key it still has");

    cl_move_slot_end(slot);
    expect_slot_on(slot, m[0]);
    expect_no_open_slot();
    cr_assert_eq(count_in_slot(m[0], slot), 30);
    expect_keys_on(m[0], name, 0, 30);

    /* cl_ready puts the slot back home, empty. */
    cl_ready();
    expect_slot_on(slot, m[2]);
    cr_assert_eq(count_in_slot(m[2], slot), 0);
    cr_assert_eq(count_in_slot(m[0], slot), 0);
}

/* Kills master i, waits for the failover and checks its replica took
 * over, alone; returns the new master. */
static int fail_over(int i, const char *what)
{
    int m[CL_MASTERS], now[CL_MASTERS];
    cl_masters(m);
    int old = m[i], r = cl_replica_of(old);
    char name[32];
    cl_lock_name(i, 0, name, sizeof(name));
    cl_node_cmd(old, "SET lb:{%s}:x before", name);
    cr_assert_eq(cl_node_cmd(old, "WAIT 1 2000")->integer, 1, "the replica %d did not ack", r);

    cl_kill_node(old);
    int64_t ms = cl_wait_failover(old, FAILOVER_BOUND_MS + 15000);
    fprintf(stderr, "cluster: %s: failover from %d to %d in %lld ms\n", what, old, r,
            (long long)ms);
    cr_assert_lt(ms, FAILOVER_BOUND_MS, "%s: failover took %lld ms", what, (long long)ms);
    cl_masters(now);
    for (int k = 0; k < CL_MASTERS; k++)
        cr_assert_eq(now[k], k == i ? r : m[k], "%s: master %d is %d, want %d", what, k, now[k],
                     k == i ? r : m[k]);
    cr_assert_str_eq(cl_node_role(r), "master");
    cr_assert_eq(cl_node_pid(old), 0, "%s: the killed node %d runs again", what, old);
    for (int k = 0; k < CL_NODES; k++)
        if (cl_node_port(k) != old)
            cr_assert_str_eq(cl_node_state(cl_node_port(k)), "ok", "%s: node %d", what,
                             cl_node_port(k));
    redisReply *x = cl_node_cmd(r, "GET lb:{%s}:x", name);
    cr_assert(x->type == REDIS_REPLY_STRING && strcmp(x->str, "before") == 0,
              "%s: the new master %d lost the write", what, r);
    return r;
}

CL_TEST(topology, failover_promotes_replica, 120)
{
    int before[CL_MASTERS], after[CL_MASTERS];
    cl_masters(before);
    int old = before[1];
    int now = fail_over(1, "kill master 1");

    int64_t t0 = lb_now_ms();
    cl_ready();
    fprintf(stderr, "cluster: cl_ready after the failover: %lld ms\n",
            (long long)(lb_now_ms() - t0));
    cl_masters(after);
    cr_assert_eq(after[1], now, "cl_ready moved the master back");
    cr_assert_gt(cl_node_pid(old), 0, "cl_ready did not restart %d", old);
    expect_replica_of(old, now);
    cr_assert_eq(cl_replica_of(now), old);
    expect_full_cluster(after);
}

CL_TEST(topology, second_failover_right_after, 150)
{
    int m[CL_MASTERS];
    cl_masters(m);
    int first = m[0];
    int second = fail_over(0, "first of two");
    cl_ready();
    expect_replica_of(first, second);
    int back = fail_over(0, "second of two, right after");
    cr_assert_eq(back, first, "the second failover should return to %d", first);
}

CL_TEST(topology, ready_mends_a_broken_cluster, 120)
{
    /* At once: a replica killed, another frozen, a master's clients
     * paused, a slot left half moved with keys on both sides. */
    int m[CL_MASTERS];
    cl_masters(m);
    int r0 = cl_replica_of(m[0]), r2 = cl_replica_of(m[2]);
    char name1[32], name2[32];
    cl_lock_name(1, 0, name1, sizeof(name1));
    int slot = cl_lock_name(2, 0, name2, sizeof(name2));
    fill_slot(m[2], name2, 10);

    cl_kill_node(r0);
    cr_assert_eq(kill(cl_node_pid(r2), SIGSTOP), 0);
    redisReply *p = cl_node_cmd(m[1], "CLIENT PAUSE %d WRITE", 60000);
    cr_assert_eq(p->type, REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", p->str);
    cr_assert_null(cl_node_try_cmd(m[1], 300, "SET lb:{%s}:x 1", name1),
                   "the paused master %d took a write", m[1]);
    cr_assert_null(cl_node_try_cmd(r2, 300, "PING"), "the frozen replica %d answered", r2);
    cl_move_slot_begin(slot, m[0]);
    cr_assert_eq(cl_move_slot_keys(slot, 4), 4);
    /* After the node timeout (1 s), the others see r2 failing. */
    const char *f = "";
    for (int64_t end = lb_now_ms() + 10000; !strstr(f, "fail") && lb_now_ms() < end;
         lb_sleep_ms(50))
        f = flags_of(m[0], r2);
    cr_assert(strstr(f, "fail"), "master %d sees the frozen %d as '%s' after 10 s", m[0], r2, f);

    int64_t t0 = lb_now_ms();
    cl_ready();
    fprintf(stderr, "cluster: cl_ready mended a broken cluster in %lld ms\n",
            (long long)(lb_now_ms() - t0));
    int now[CL_MASTERS];
    cl_masters(now);
    for (int k = 0; k < CL_MASTERS; k++)
        cr_assert_eq(now[k], m[k], "master %d changed from %d to %d", k, m[k], now[k]);
    cr_assert_gt(cl_node_pid(r0), 0, "the killed replica %d was not restarted", r0);
    expect_replica_of(r0, m[0]);
    redisReply *pong = cl_node_try_cmd(r2, 1000, "PING");
    cr_assert(pong && pong->type == REDIS_REPLY_STATUS, "the frozen replica %d does not answer",
              r2);
    expect_replica_of(r2, m[2]);
    redisReply *w = cl_node_try_cmd(m[1], 2000, "SET lb:{%s}:x 1", name1);
    cr_assert(w && w->type == REDIS_REPLY_STATUS, "master %d still paused", m[1]);
    expect_no_open_slot();
    expect_slot_on(slot, m[2]);
    expect_full_cluster(now);
    cr_assert_eq(count_in_slot(m[0], slot), 0, "the half-moved keys stayed on %d", m[0]);
    cr_assert_eq(count_in_slot(m[2], slot), 0, "cl_ready did not flush %d", m[2]);
}
