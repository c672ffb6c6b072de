/*
 * The harness's lb_broker_start_url, the way HA tests start brokers, here
 * with a redis:// URL of the shared topology's master (a sentinel:// URL
 * needs issue 16's broker): ready means stats says "redis":"up", and lb_end
 * stops it as any other broker.
 */
#include "tests/ha/ha.h"

HA_TEST(harness, broker_on_an_explicit_url, 60)
{
    int m = ha_master_port();
    lb_broker *b = lb_broker_start_url(ha_node_url(m), "--prefix", "ha:", NULL);
    lb_client *c = lb_connect(b, LB_TCP);
    json_t *st = lb_stats(c);
    cr_assert_str_eq(lb_str(st, "redis"), "up");

    const char *lease = lb_must_acquire(c, "ha-lock", 5000);
    redisReply *n = ha_node_cmd(m, "DBSIZE");
    cr_assert_gt(n->integer, 0, "the broker wrote nothing to the master %d", m);
    cr_assert_eq(lb_release(c, lease), 0);

    lb_broker_restart(b); /* same URL again */
    c = lb_connect(b, LB_TCP);
    lb_expect_free(c, "ha-lock");
    lb_end();
}
