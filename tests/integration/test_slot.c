/*
 * test_slot.c - the cluster backend's pure parts against Redis itself
 * (issue 17): broker/store/slot.h, where a cluster-mode redis-server
 * answers CLUSTER KEYSLOT for thousands of keys (random bytes, braces in
 * every position, the broker's own lock keys with escaped names) and
 * slot_of_key must give the same slot for each; and cluster_map.h, read
 * from a real two-node cluster's CLUSTER SLOTS and MOVED replies.
 */
#include "tests/integration/harness.h"
#include "broker/store/cluster_map.h"
#include "broker/store/slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 4000

/* A key of 0..40 bytes: braces often, any byte sometimes. */
static size_t random_key(unsigned *seed, char *out)
{
	static const char alphabet[] = "{}{}ab:=lb";
	size_t len = (size_t)(rand_r(seed) % 41);

	for (size_t k = 0; k < len; k++) {
		int dice = rand_r(seed) % 10;
		out[k] = dice < 7 ? alphabet[rand_r(seed) % (sizeof(alphabet) - 1)]
		                  : (char)(rand_r(seed) % 256);
	}
	return len;
}

LB_TEST(slot, every_slot_is_the_one_redis_cluster_gives, 60)
{
	lb_redis *r = lb_redis_start_cluster_node();
	redisContext *c = lb_redis_ctx(r);
	static char keys[NKEYS][64];
	static size_t lens[NKEYS];
	unsigned seed = 20261125;
	int seen[SLOT_COUNT / 1024] = {0};

	for (int k = 0; k < NKEYS; k++) {
		if (k % 4 == 0) /* a lock's key as the broker names it */
			lens[k] = (size_t)snprintf(keys[k], sizeof(keys[k]), "lb:{lock-%d%s}:%c", k,
			                           k % 8 ? "" : "{x", "hiqwds"[k % 6]);
		else
			lens[k] = random_key(&seed, keys[k]);
		redisAppendCommand(c, "CLUSTER KEYSLOT %b", keys[k], lens[k]);
	}
	for (int k = 0; k < NKEYS; k++) {
		redisReply *rep = NULL;
		cr_assert_eq(redisGetReply(c, (void **)&rep), REDIS_OK, "%s", c->errstr);
		cr_assert_eq(rep->type, REDIS_REPLY_INTEGER, "key %d: %s", k,
		             rep->type == REDIS_REPLY_ERROR ? rep->str : "not an integer");
		uint16_t mine = slot_of_key(keys[k], lens[k]);
		cr_assert_eq(mine, rep->integer, "key %d (%zu bytes): slot %u, Redis says %lld", k,
		             lens[k], mine, rep->integer);
		seen[mine / 1024] = 1;
		freeReplyObject(rep);
	}
	for (int b = 0; b < SLOT_COUNT / 1024; b++)
		cr_assert(seen[b], "no key fell in slots %d..%d: the keys are not spread", b * 1024,
		          b * 1024 + 1023);
	lb_end();
}

static int port_of(lb_redis *r)
{
	const char *url = lb_redis_url(r), *colon = strrchr(url, ':');

	cr_assert_not_null(colon, "%s", url);
	return atoi(colon + 1);
}

/* Two masters, half the slots each, introduced to each other; then the
 * map read from CLUSTER SLOTS routes every lock key where a write to it
 * lands, and the MOVED a wrong node answers names the right one. */
LB_TEST(slot, the_map_and_moved_read_from_a_real_cluster, 60)
{
	lb_redis *a = lb_redis_start_cluster_node(), *b = lb_redis_start_cluster_node();
	int pa = port_of(a), pb = port_of(b);
	static cluster_map_t m;
	char err[256];

	cr_assert_eq(lb_redis_cmd(a, "CLUSTER ADDSLOTSRANGE 0 8000")->type, REDIS_REPLY_STATUS);
	cr_assert_eq(lb_redis_cmd(b, "CLUSTER ADDSLOTSRANGE 8001 16383")->type, REDIS_REPLY_STATUS);
	cr_assert_eq(lb_redis_cmd(a, "CLUSTER MEET 127.0.0.1 %d", pb)->type, REDIS_REPLY_STATUS);
	int64_t end = lb_now_ms() + 20000;
	for (;;) {
		redisReply *ia = lb_redis_cmd(a, "CLUSTER INFO"), *ib = lb_redis_cmd(b, "CLUSTER INFO");
		if (strstr(ia->str, "cluster_state:ok") && strstr(ib->str, "cluster_state:ok") &&
		    strstr(ia->str, "cluster_known_nodes:2"))
			break;
		cr_assert_lt(lb_now_ms(), end, "the two nodes did not form a cluster");
		lb_sleep_ms(50);
	}

	redisReply *slots = lb_redis_cmd(a, "CLUSTER SLOTS");
	cr_assert_eq(cluster_map_read_slots(&m, slots, "127.0.0.1", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(m.nmasters, 2);
	cr_assert_eq(cluster_map_master_of(&m, 8000)->port, pa);
	cr_assert_eq(cluster_map_master_of(&m, 8001)->port, pb);

	int moved = 0;
	for (int k = 0; k < 40; k++) {
		char key[64];
		int n = snprintf(key, sizeof(key), "lb:{lock-%d}:h", k);
		const host_port_t *owner = cluster_map_master_of(&m, slot_of_key(key, (size_t)n));
		lb_redis *right = owner->port == pa ? a : b, *wrong = right == a ? b : a;
		redisReply *ok = lb_redis_cmd(right, "SET %s 1", key);
		cr_assert_eq(ok->type, REDIS_REPLY_STATUS, "%s on its master: %s", key, ok->str);
		redisReply *no = lb_redis_cmd(wrong, "SET %s 1", key);
		cr_assert_eq(no->type, REDIS_REPLY_ERROR);
		cluster_redirect_t rd;
		cr_assert_eq(cluster_read_redirect(no->str, no->len, "127.0.0.1", &rd), 0, "%s", no->str);
		cr_assert_not(rd.ask);
		cr_assert_eq(rd.slot, slot_of_key(key, (size_t)n));
		cr_assert_eq(rd.to.port, owner->port);
		moved++;
	}
	cr_assert_eq(moved, 40);
	lb_end();
}
