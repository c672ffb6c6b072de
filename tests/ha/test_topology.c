/*
 * The HA test infrastructure itself, with no broker: the shared Sentinel set
 * is healthy, the sentinels answer, a killed master is replaced (and put
 * back by ha_ready), twice in a row, with a sentinel down too, and
 * ha_pause_replication really makes the replica miss writes.
 *
 * Failover times are printed ("ha: ... failover in N ms") for the record;
 * the bound asserted is generous (a loaded 2-core machine).
 */
#include "tests/ha/ha.h"
#include "tests/ha/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAILOVER_BOUND_MS 20000

static void expect_replica_of(int port, int master)
{
    redisReply *r = ha_node_cmd(port, "INFO replication");
    char want[64];
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert(strstr(r->str, "role:slave"), "node %d is not a replica:\n%s", port, r->str);
    snprintf(want, sizeof(want), "master_port:%d\r", master);
    cr_assert(strstr(r->str, want), "node %d is not a replica of %d:\n%s", port, master, r->str);
    cr_assert(strstr(r->str, "master_link_status:up"), "node %d: link not up:\n%s", port, r->str);
}

static void expect_sentinels_name(int master)
{
    for (int i = 0; i < 3; i++) {
        redisReply *r = ha_sentinel_cmd(i, "SENTINEL get-master-addr-by-name %s", ha_master_name());
        cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 2, "sentinel %d: no address", i);
        cr_assert_str_eq(r->element[0]->str, "127.0.0.1");
        cr_assert_eq(atoi(r->element[1]->str), master, "sentinel %d names %s, want %d", i,
                     r->element[1]->str, master);
    }
}

/* The highest config epoch the sentinels report for the master: it grows
 * with every failover they make. */
static long long sentinel_epoch(void)
{
    long long top = -1;
    for (int i = 0; i < 3; i++) {
        redisReply *r = ha_sentinel_cmd(i, "SENTINEL master %s", ha_master_name());
        const char *e = topo_field(r, "config-epoch");
        if (e && atoll(e) > top)
            top = atoll(e);
    }
    return top;
}

/* After ha_ready: the master the failover made, unless the sentinels
 * failed over again by themselves meanwhile (seen on loaded machines: a
 * sentinel that stalls past down-after-milliseconds takes the new master
 * for down). ha_ready only follows the sentinels' master, so a move back
 * must come with a newer config epoch; then the topology must still be
 * whole, around the sentinels' new master. Returns the master now. */
static int master_after_ready(int now, long long epoch)
{
    int cur = ha_master_port();
    if (cur != now) {
        cr_assert_gt(sentinel_epoch(), epoch, "ha_ready moved the master back");
        fprintf(stderr, "ha: the sentinels failed over again by themselves (%d -> %d); "
                        "ha_ready followed\n", now, cur);
    }
    expect_sentinels_name(cur);
    return cur;
}

/* Kills the master, waits for the failover and checks the replica took over;
 * returns the new master. */
static int fail_over(const char *what)
{
    int m = ha_master_port(), r = ha_replica_port();
    ha_kill_node(m);
    int64_t ms = ha_wait_failover(m, FAILOVER_BOUND_MS + 10000);
    fprintf(stderr, "ha: %s: failover from %d to %d in %lld ms\n", what, m, r, (long long)ms);
    cr_assert_lt(ms, FAILOVER_BOUND_MS, "%s: failover took %lld ms", what, (long long)ms);
    cr_assert_eq(ha_master_port(), r, "%s: the sentinels promoted %d, want %d", what,
                 ha_master_port(), r);
    cr_assert_str_eq(ha_node_role(r), "master");
    cr_assert_eq(ha_node_pid(m), 0, "%s: the killed node %d runs again", what, m);
    return r;
}

HA_TEST(topology, healthy_at_start, 60)
{
    int m = ha_master_port(), r = ha_replica_port();
    cr_assert_neq(m, r);
    cr_assert(m == ha_node_port(0) || m == ha_node_port(1));
    cr_assert_str_eq(ha_node_role(m), "master");
    expect_replica_of(r, m);
    expect_sentinels_name(m);
    for (int i = 0; i < 3; i++)
        cr_assert_gt(ha_sentinel_pid(i), 0, "sentinel %d is not running", i);
    cr_assert_gt(ha_node_pid(m), 0);
    cr_assert_gt(ha_node_pid(r), 0);

    /* ha_ready flushed; a write reaches the replica. */
    redisReply *n = ha_node_cmd(m, "DBSIZE");
    cr_assert_eq(n->integer, 0, "ha_ready left %lld keys", n->integer);
    ha_node_cmd(m, "SET %s %s", "ha:hello", "1");
    redisReply *w = ha_node_cmd(m, "WAIT 1 2000");
    cr_assert_eq(w->integer, 1, "the replica did not acknowledge the write");
    cr_assert(ha_node_has_key(r, "ha:hello"));
}

HA_TEST(topology, sentinels_answer, 60)
{
    int m = ha_master_port();
    expect_sentinels_name(m);
    redisReply *r = ha_sentinel_cmd(0, "SENTINEL get-master-addr-by-name %s", "no-such-name");
    cr_assert_eq(r->type, REDIS_REPLY_NIL, "an unknown name should have no address");
    r = ha_sentinel_cmd(1, "SENTINEL ckquorum %s", ha_master_name());
    cr_assert(r->type == REDIS_REPLY_STATUS && strncmp(r->str, "OK", 2) == 0,
              "ckquorum: %s", r->str ? r->str : "?");

    char want[256];
    snprintf(want, sizeof(want), "sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             ha_sentinel_port(0), ha_sentinel_port(1), ha_sentinel_port(2), ha_master_name());
    cr_assert_str_eq(ha_sentinel_url(NULL), want);
    snprintf(want, sizeof(want), "sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/other",
             ha_sentinel_port(0), ha_sentinel_port(1), ha_sentinel_port(2));
    cr_assert_str_eq(ha_sentinel_url("other"), want);
}

HA_TEST(topology, failover_promotes_replica, 90)
{
    int old = ha_master_port();
    int now = fail_over("kill the master");
    expect_sentinels_name(now);
    long long epoch = sentinel_epoch();

    ha_ready();
    now = master_after_ready(now, epoch);
    old = ha_replica_port();
    cr_assert_gt(ha_node_pid(old), 0, "ha_ready did not restart %d", old);
    expect_replica_of(old, now);
    redisReply *rs = ha_sentinel_cmd(2, "SENTINEL replicas %s", ha_master_name());
    cr_assert(rs->type == REDIS_REPLY_ARRAY && rs->elements >= 1);
}

HA_TEST(topology, second_failover_right_after, 120)
{
    int first = ha_master_port();
    int second = fail_over("first of two");
    long long epoch = sentinel_epoch();
    ha_ready();
    second = master_after_ready(second, epoch);
    first = ha_replica_port();
    expect_replica_of(first, second);
    int back = fail_over("second of two, right after");
    cr_assert_eq(back, first, "the second failover should return to %d", first);
}

HA_TEST(topology, failover_with_a_sentinel_down, 90)
{
    ha_stop_sentinel(1);
    cr_assert_eq(ha_sentinel_pid(1), 0, "sentinel 1 still runs");
    int m = ha_master_port();
    for (int i = 0; i < 3; i += 2) {
        redisReply *r = ha_sentinel_cmd(i, "SENTINEL get-master-addr-by-name %s", ha_master_name());
        cr_assert(r->type == REDIS_REPLY_ARRAY && atoi(r->element[1]->str) == m,
                  "sentinel %d does not answer with %d", i, m);
    }
    fail_over("with sentinel 1 down");
    cr_assert_eq(ha_sentinel_pid(1), 0, "sentinel 1 came back by itself");

    /* Back: it learns the new master from its peers. */
    ha_ready();
    cr_assert_gt(ha_sentinel_pid(1), 0);
    expect_sentinels_name(ha_master_port());
}

HA_TEST(topology, paused_replica_misses_writes, 90)
{
    int m = ha_master_port(), r = ha_replica_port();
    ha_node_cmd(m, "SET %s %s", "ha:before", "1");
    cr_assert_eq(ha_node_cmd(m, "WAIT 1 2000")->integer, 1);
    cr_assert(ha_node_has_key(r, "ha:before"));

    ha_pause_replication(r);
    ha_node_cmd(m, "SET %s %s", "ha:after", "1");
    cr_assert_eq(ha_node_cmd(m, "WAIT 1 300")->integer, 0, "the paused replica acknowledged");
    /* Longer than the replica's reconnect period (1 s): it tried and failed. */
    lb_sleep_ms(1500);
    cr_assert_not(ha_node_has_key(r, "ha:after"), "the paused replica got the write");
    cr_assert_str_eq(ha_node_role(r), "slave", "the paused replica left its master");

    fail_over("with the replica paused");
    cr_assert(ha_node_has_key(r, "ha:before"), "the new master lost what it had");
    cr_assert_not(ha_node_has_key(r, "ha:after"), "the new master has the missed write");
}

HA_TEST(topology, resumed_replica_catches_up, 60)
{
    int m = ha_master_port(), r = ha_replica_port();
    ha_pause_replication(r);
    ha_node_cmd(m, "SET %s %s", "ha:missed", "1");
    lb_sleep_ms(1200);
    cr_assert_not(ha_node_has_key(r, "ha:missed"));
    ha_resume_replication(r);
    cr_assert_eq(ha_node_cmd(m, "WAIT 1 5000")->integer, 1);
    cr_assert(ha_node_has_key(r, "ha:missed"), "the resumed replica did not catch up");
}

HA_TEST(topology, ready_mends_a_broken_topology, 120)
{
    /* Everything at once: the replica and a sentinel gone, the master
     * frozen for a moment, client writes paused. */
    int m = ha_master_port(), r = ha_replica_port();
    ha_kill_node(r);
    ha_stop_sentinel(2);
    ha_node_cmd(m, "CLIENT PAUSE %d WRITE", 60000);
    ha_ready();
    cr_assert_eq(ha_master_port(), m);
    expect_replica_of(r, m);
    cr_assert_gt(ha_sentinel_pid(2), 0);
    ha_node_cmd(m, "SET %s %s", "ha:x", "1"); /* would block if still paused */
}
