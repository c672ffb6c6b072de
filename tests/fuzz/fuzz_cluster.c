/*
 * fuzz_cluster.c - libFuzzer target for the cluster backend's readers of
 * Redis replies (broker/store/cluster_map.c: cluster_map_read_slots,
 * cluster_read_redirect).
 *
 * Input: byte 0 picks the reader (even: the bytes that follow are RESP,
 * read with hiredis's reader and every reply given to
 * cluster_map_read_slots; odd: the bytes are an error reply's text for
 * cluster_read_redirect, and then a CLUSTER NODES text for
 * cluster_map_read_epochs on a map of every master of the last slots
 * read). Checked, from cluster_map.h's contract:
 * - read_slots returns -1 (then no slot is served and no master named, and
 *   err holds a message) or the count of unserved slots, which matches
 *   owner[]; every owner index names a master; masters are distinct, with
 *   a NUL-terminated non-empty host and a port in 1..65535;
 * - read_redirect returns 0 or -1; on 0 the slot is below 16384, the port
 *   in 1..65535 and the host non-empty and NUL-terminated;
 * - read_epochs changes no slot and no master, and gives each master -1
 *   or an epoch >= 0; older_slots of a map against itself is 0.
 * Any failed check aborts (libFuzzer reports it as a crash). RESP whose
 * array or bulk header counts past 6 digits is skipped: hiredis 0.14's
 * reader allocates an array's elements as soon as it reads its header,
 * with no bound of its own (a reply from Redis is not hostile there).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/store/cluster_map.h"

#define CHECK(cond)                                                                \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "fuzz_cluster: check failed: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                        \
			abort();                                                   \
		}                                                                  \
	} while (0)

static cluster_map_t M;

/* A '*' or '$' header of more than 6 digits anywhere. */
static bool huge_header(const uint8_t *d, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		size_t digits = 0;
		if (d[k] != '*' && d[k] != '$')
			continue;
		for (size_t j = k + 1; j < n && ((d[j] >= '0' && d[j] <= '9') || d[j] == '-'); j++)
			digits++;
		if (digits > 6)
			return true;
	}
	return false;
}

static void check_map(int rc, const char *err)
{
	int unserved = 0;

	if (rc < 0) {
		CHECK(err[0] != '\0');
		CHECK(M.nmasters == 0);
	}
	CHECK(M.nmasters >= 0 && M.nmasters <= CLUSTER_MASTERS_MAX);
	for (int k = 0; k < M.nmasters; k++) {
		size_t len = strnlen(M.masters[k].host, sizeof(M.masters[k].host));
		CHECK(len > 0 && len < sizeof(M.masters[k].host));
		CHECK(M.masters[k].port >= 1 && M.masters[k].port <= 65535);
		for (int j = 0; j < k; j++)
			CHECK(M.masters[j].port != M.masters[k].port ||
			      strcmp(M.masters[j].host, M.masters[k].host) != 0);
	}
	for (int s = 0; s < SLOT_COUNT; s++) {
		CHECK(M.owner[s] >= -1 && M.owner[s] < M.nmasters);
		unserved += M.owner[s] < 0;
		CHECK((M.owner[s] < 0) == (cluster_map_master_of(&M, (uint16_t)s) == NULL));
	}
	CHECK(rc < 0 ? unserved == SLOT_COUNT : unserved == rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];

	if (size < 1)
		return 0;
	if (data[0] % 2 == 0) {
		if (huge_header(data + 1, size - 1))
			return 0;
		redisReader *rd = redisReaderCreate();
		void *r = NULL;
		CHECK(rd != NULL);
		if (redisReaderFeed(rd, (const char *)data + 1, size - 1) == REDIS_OK) {
			while (redisReaderGetReply(rd, &r) == REDIS_OK && r) {
				err[0] = '\0';
				check_map(cluster_map_read_slots(&M, r, "asked-host", err, sizeof(err)), err);
				freeReplyObject(r);
				r = NULL;
			}
		}
		redisReaderFree(rd);
	} else {
		cluster_redirect_t rd;
		memset(&rd, 0xa5, sizeof(rd));
		if (cluster_read_redirect((const char *)data + 1, size - 1, "answering-host", &rd) == 0) {
			size_t len = strnlen(rd.to.host, sizeof(rd.to.host));
			CHECK(rd.slot < SLOT_COUNT);
			CHECK(rd.to.port >= 1 && rd.to.port <= 65535);
			CHECK(len > 0 && len < sizeof(rd.to.host));
		}
		{
			static cluster_map_t before;
			before = M;
			cluster_map_read_epochs(&M, (const char *)data + 1, size - 1, "asked-host");
			CHECK(M.nmasters == before.nmasters);
			CHECK(memcmp(M.owner, before.owner, sizeof(M.owner)) == 0);
			for (int k = 0; k < M.nmasters; k++)
				CHECK(M.epoch[k] >= -1);
			CHECK(cluster_map_older_slots(&M, &M) == 0);
		}
	}
	return 0;
}
