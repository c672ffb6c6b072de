/*
 * test_cluster_map.c - the Redis Cluster slot map and redirects
 * (broker/store/cluster_map.h). Replies are built from RESP text with
 * hiredis's own reader, as the broker would receive them; the CLUSTER
 * SLOTS shape is redis-server 7.0's ([host, port, id, {metadata}] per node).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "broker/store/cluster_map.h"

static redisReply *reply_of(const char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *r = NULL;

	cr_assert_not_null(rd);
	cr_assert_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK);
	cr_assert_not_null(r, "incomplete RESP in the test");
	redisReaderFree(rd);
	return r;
}

/* One range [lo, hi] served by host:port (a 7.0 node: id and metadata). */
static void range(char *out, size_t len, int lo, int hi, const char *host, int port)
{
	snprintf(out, len,
	         "*4\r\n:%d\r\n:%d\r\n*4\r\n$%zu\r\n%s\r\n:%d\r\n$3\r\nid1\r\n*0\r\n"
	         "*4\r\n$9\r\n127.0.0.9\r\n:7009\r\n$3\r\nid2\r\n*0\r\n", /* a replica */
	         lo, hi, strlen(host), host, port);
}

static cluster_map_t M;
static char err[256];

Test(cluster_map, three_masters_cover_every_slot)
{
	char a[256], b[256], c[256], resp[1024];
	range(a, sizeof(a), 0, 5460, "127.0.0.1", 7001);
	range(b, sizeof(b), 5461, 10922, "127.0.0.1", 7002);
	range(c, sizeof(c), 10923, 16383, "127.0.0.1", 7003);
	snprintf(resp, sizeof(resp), "*3\r\n%s%s%s", a, b, c);
	redisReply *r = reply_of(resp);

	cr_assert_eq(cluster_map_read_slots(&M, r, "10.0.0.1", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(M.nmasters, 3);
	cr_assert_eq(cluster_map_master_of(&M, 0)->port, 7001);
	cr_assert_eq(cluster_map_master_of(&M, 5460)->port, 7001);
	cr_assert_eq(cluster_map_master_of(&M, 5461)->port, 7002);
	cr_assert_eq(cluster_map_master_of(&M, 16383)->port, 7003);
	cr_assert_str_eq(cluster_map_master_of(&M, 105)->host, "127.0.0.1");
	freeReplyObject(r);
}

Test(cluster_map, a_master_with_two_ranges_is_one_master_and_gaps_are_counted)
{
	char a[256], b[256], resp[1024];
	range(a, sizeof(a), 0, 99, "", 7001); /* empty host: the node asked */
	range(b, sizeof(b), 200, 299, "", 7001);
	snprintf(resp, sizeof(resp), "*2\r\n%s%s", a, b);
	redisReply *r = reply_of(resp);

	cr_assert_eq(cluster_map_read_slots(&M, r, "node-a", err, sizeof(err)), SLOT_COUNT - 200);
	cr_assert_eq(M.nmasters, 1);
	cr_assert_str_eq(cluster_map_master_of(&M, 250)->host, "node-a");
	cr_assert_null(cluster_map_master_of(&M, 150));
	cr_assert_null(cluster_map_master_of(&M, 16383));
	freeReplyObject(r);
}

Test(cluster_map, a_nil_address_is_the_node_asked)
{
	redisReply *r = reply_of("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$-1\r\n:7001\r\n$2\r\nid\r\n*0\r\n");

	cr_assert_eq(cluster_map_read_slots(&M, r, "seed-1", err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(cluster_map_master_of(&M, 9)->host, "seed-1");
	cr_assert_eq(cluster_map_master_of(&M, 9)->port, 7001);
	freeReplyObject(r);
}

Test(cluster_map, an_unknown_address_serves_nothing)
{
	char a[256], resp[512];
	range(a, sizeof(a), 0, 16383, "?", 7001);
	snprintf(resp, sizeof(resp), "*1\r\n%s", a);
	redisReply *r = reply_of(resp);

	cr_assert_eq(cluster_map_read_slots(&M, r, "x", err, sizeof(err)), SLOT_COUNT);
	cr_assert_eq(M.nmasters, 0);
	freeReplyObject(r);
}

Test(cluster_map, malformed_replies_are_refused_and_leave_nothing_served)
{
	static const char *const bad[] = {
	    "-ERR This instance has cluster support disabled\r\n",
	    "$2\r\nok\r\n",
	    "*1\r\n:1\r\n",                                                    /* not a range */
	    "*1\r\n*2\r\n:0\r\n:1\r\n",                                        /* no master */
	    "*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",                 /* hi < lo */
	    "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",             /* past the last slot */
	    "*1\r\n*3\r\n:-1\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n",                /* negative */
	    "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$1\r\nh\r\n:0\r\n",                 /* port 0 */
	    "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$1\r\nh\r\n:65536\r\n",             /* port too big */
	    "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n:1\r\n:1\r\n",                      /* host not a string */
	    "*1\r\n*3\r\n:0\r\n:3\r\n*1\r\n$1\r\nh\r\n",                       /* node without port */
	    "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$3\r\nh\x01t\r\n:1\r\n",           /* a control byte */
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		redisReply *r = reply_of(bad[k]);
		err[0] = '\0';
		cr_assert_eq(cluster_map_read_slots(&M, r, "x", err, sizeof(err)), -1, "case %zu", k);
		cr_assert_neq(err[0], '\0');
		cr_assert_null(cluster_map_master_of(&M, 0), "case %zu left a slot served", k);
		cr_assert_eq(M.nmasters, 0);
		freeReplyObject(r);
	}
	cr_assert_eq(cluster_map_read_slots(&M, NULL, "x", err, sizeof(err)), -1);
}

Test(cluster_map, more_masters_than_followed_is_refused)
{
	static char resp[65536];
	size_t n = (size_t)snprintf(resp, sizeof(resp), "*%d\r\n", CLUSTER_MASTERS_MAX + 1);
	for (int k = 0; k <= CLUSTER_MASTERS_MAX; k++) {
		char a[256];
		range(a, sizeof(a), k, k, "127.0.0.1", 7000 + k);
		n += (size_t)snprintf(resp + n, sizeof(resp) - n, "%s", a);
	}
	redisReply *r = reply_of(resp);
	cr_assert_eq(cluster_map_read_slots(&M, r, "x", err, sizeof(err)), -1);
	freeReplyObject(r);
}

static int redirect(const char *msg, cluster_redirect_t *out)
{
	memset(out, 0xa5, sizeof(*out));
	return cluster_read_redirect(msg, strlen(msg), "answering-node", out);
}

Test(cluster_map, moved_and_ask)
{
	cluster_redirect_t rd;

	cr_assert_eq(redirect("MOVED 3999 127.0.0.1:6381", &rd), 0);
	cr_assert_not(rd.ask);
	cr_assert_eq(rd.slot, 3999);
	cr_assert_str_eq(rd.to.host, "127.0.0.1");
	cr_assert_eq(rd.to.port, 6381);
	cr_assert_eq(redirect("ASK 16383 10.1.2.3:7000", &rd), 0);
	cr_assert(rd.ask);
	cr_assert_eq(rd.slot, 16383);
	cr_assert_eq(redirect("MOVED 0 ::1:7001", &rd), 0); /* IPv6: the last colon */
	cr_assert_str_eq(rd.to.host, "::1");
	cr_assert_eq(rd.to.port, 7001);
	cr_assert_eq(redirect("MOVED 12 :7002", &rd), 0); /* empty host: the node that answered */
	cr_assert_str_eq(rd.to.host, "answering-node");
}

Test(cluster_map, not_redirects)
{
	static const char *const bad[] = {
	    "", "MOVED", "MOVED ", "MOVED 12", "MOVED 12 ", "MOVED x 1.2.3.4:5", "MOVED 16384 h:1",
	    "MOVED 99999999999 h:1", "MOVED 1 h", "MOVED 1 h:", "MOVED 1 h:0", "MOVED 1 h:65536",
	    "MOVED 1 h:123456", "MOVED 1 h:12a", "MOVED 1 h 1:2", "ASK", "ASKING 1 h:1",
	    "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing",
	    "moved 1 h:1", "MOVED -1 h:1", "MOVED 5 ?:7001", "ASK 5 ?:7001", "MOVED 1 h\x01st:1", "MOVED 1 h\x7fst:1",
	};
	cluster_redirect_t rd;
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		cr_assert_eq(redirect(bad[k], &rd), -1, "%s", bad[k]);
}

/* ---- config epochs (issue 26, point 4) ----------------------------------- */

/* A map of two masters: 7001 serves 0..8191, owner of 8192..16383 given. */
static void two_masters(cluster_map_t *m, int second_port)
{
	char a[256], b[256], resp[1024];

	range(a, sizeof(a), 0, 8191, "127.0.0.1", 7001);
	range(b, sizeof(b), 8192, 16383, "127.0.0.1", second_port);
	snprintf(resp, sizeof(resp), "*2\r\n%s%s", a, b);
	redisReply *r = reply_of(resp);
	cr_assert_eq(cluster_map_read_slots(m, r, "127.0.0.1", err, sizeof(err)), 0, "%s", err);
	freeReplyObject(r);
}

Test(cluster_map, config_epochs_are_read_from_cluster_nodes)
{
	static const char nodes[] =
	    "aaa 127.0.0.1:7001@17001 myself,master - 0 0 3 connected 0-8191\n"
	    "bbb 127.0.0.1:7002@17002,host-b master - 0 1700000000000 7 connected 8192-16383\n"
	    "ccc 127.0.0.1:7003@17003 slave bbb 0 1700000000000 7 connected\n"
	    "ddd :7009@17009 master,fail - 0 0 9 disconnected\n";

	two_masters(&M, 7002);
	cr_assert_eq(M.epoch[0], -1, "unknown before");
	cluster_map_read_epochs(&M, nodes, strlen(nodes), "127.0.0.1");
	cr_assert_eq(M.epoch[0], 3);
	cr_assert_eq(M.epoch[1], 7);
	/* garbage leaves them as they are, and does not crash */
	cluster_map_read_epochs(&M, "x y\n\n  \r\nzz 1:2@3 master - 0 0 nine c\n", 37, "h");
	cr_assert_eq(M.epoch[1], 7);
}

Test(cluster_map, a_map_naming_an_older_master_is_older)
{
	static cluster_map_t cur, stale, newer;
	static const char cur_nodes[] = "a 127.0.0.1:7001@1 master - 0 0 3 connected\n"
	                                "b 127.0.0.1:7004@1 master - 0 0 8 connected\n";
	/* a node that has not heard of the failover: 7002, epoch 5 */
	static const char stale_nodes[] = "a 127.0.0.1:7001@1 master - 0 0 3 connected\n"
	                                  "b 127.0.0.1:7002@1 master - 0 0 5 connected\n";
	static const char newer_nodes[] = "a 127.0.0.1:7001@1 master - 0 0 3 connected\n"
	                                  "b 127.0.0.1:7005@1 master - 0 0 9 connected\n";

	two_masters(&cur, 7004);
	cluster_map_read_epochs(&cur, cur_nodes, strlen(cur_nodes), "127.0.0.1");
	two_masters(&stale, 7002);
	cluster_map_read_epochs(&stale, stale_nodes, strlen(stale_nodes), "127.0.0.1");
	two_masters(&newer, 7005);
	cluster_map_read_epochs(&newer, newer_nodes, strlen(newer_nodes), "127.0.0.1");
	cr_assert_eq(cluster_map_older_slots(&stale, &cur), 8192, "the stale map is older there");
	cr_assert_eq(cluster_map_older_slots(&newer, &cur), 0, "a newer map may be taken");
	cr_assert_eq(cluster_map_older_slots(&cur, &cur), 0, "the same map is not older");
	/* an epoch the new map does not tell is no newer than a known one;
	 * against a map whose epochs are unknown, nothing is older */
	two_masters(&stale, 7002);
	cr_assert_eq(cluster_map_older_slots(&stale, &cur), 8192);
	cr_assert_eq(cluster_map_older_slots(&cur, &stale), 0);
}
