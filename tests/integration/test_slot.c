/*
 * test_slot.c - broker/store/slot.h against Redis itself (issue 17): a
 * cluster-mode redis-server answers CLUSTER KEYSLOT for thousands of keys
 * (random bytes, braces in every position, the broker's own lock keys with
 * escaped names) and slot_of_key must give the same slot for each.
 */
#include "tests/integration/harness.h"
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
