/*
 * pointer.c - the token -> lock name pointer of a detached lease (see
 * pointer.h): calls of lua/lease_index.lua on the pointer's key.
 */
#include "broker/locks/pointer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/locks/lease.h"
#include "protocol/req.h"

/* lease_index.lua on the pointer's key and its end key (":e"), argv its
 * args. */
static int call(const char *token, int argc, const char *const *argv, store_fn fn, void *priv)
{
	char key[64 + 16 + LEASE_TOKEN_LEN], end[64 + 18 + LEASE_TOKEN_LEN];
	const char *all[5];
	size_t lens[5];
	int n = snprintf(key, sizeof(key), "%slease:{%.*s}", server.cfg->prefix, LEASE_TOKEN_LEN, token);

	REQUIRE(argc >= 1 && argc <= 4);
	snprintf(end, sizeof(end), "%s:e", key);
	all[0] = end;
	lens[0] = strlen(end);
	for (int k = 0; k < argc; k++) {
		all[k + 1] = argv[k];
		lens[k + 1] = strlen(argv[k]);
	}
	return store_eval_keys(key, (size_t)n, 1, SCRIPT_LEASE_INDEX, argc + 1, all, lens, fn, priv, 0);
}

int pointer_set(const char *token, const char *lock, size_t lock_len, int64_t life_ms, store_fn fn,
                void *priv)
{
	char name[REQ_LOCK_MAX_BYTES + 1], ms[24];

	memcpy(name, lock, lock_len); /* lock names hold no NUL */
	name[lock_len] = '\0';
	snprintf(ms, sizeof(ms), "%" PRId64, life_ms + LB_INDEX_MARGIN_MS);
	return call(token, 3, (const char *[]){"set", name, ms}, fn, priv);
}

int pointer_get(const char *token, int64_t life_ms, store_fn fn, void *priv)
{
	char ms[24];

	snprintf(ms, sizeof(ms), "%" PRId64, life_ms > 0 ? life_ms + LB_INDEX_MARGIN_MS : 0);
	return call(token, 2, (const char *[]){"get", ms}, fn, priv);
}

static void on_end_noted(const redisReply *r, void *priv)
{
	(void)priv;
	if (store_reply_failed(r))
		LOG(LOG_WARN, "msg=\"a detached lease's end was not recorded\" err=\"%.200s\"",
		    r ? r->str : "no reply");
}

void pointer_note_end(const char *token, int64_t life_ms, int64_t hold_ms)
{
	char life[24], hold[24];

	snprintf(life, sizeof(life), "%" PRId64, life_ms > 0 ? life_ms : 0);
	snprintf(hold, sizeof(hold), "%" PRId64, hold_ms > 0 ? hold_ms : 0);
	call(token, 3, (const char *[]){"end", life, hold}, on_end_noted, NULL);
}

int pointer_why(const char *token, store_fn fn, void *priv)
{
	return call(token, 1, (const char *[]){"why"}, fn, priv);
}

static void on_deleted(const redisReply *r, void *priv)
{
	(void)priv;
	if (store_reply_failed(r))
		LOG(LOG_WARN, "msg=\"lease pointer delete failed; it ends by its expiry\" err=\"%.200s\"",
		    r ? r->str : "no reply");
}

void pointer_del(const char *token)
{
	call(token, 1, (const char *[]){"del"}, on_deleted, NULL);
}
