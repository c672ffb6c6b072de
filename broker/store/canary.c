/*
 * canary.c - notices within a second that Redis lost data (see canary.h).
 *
 * Once a second the broker checks its canary key (lua/canary.lua): the
 * value it wrote last must still be there, and a new one is written. A
 * flush, a restart without persistence or a failover to a replica that
 * missed the last writes shows another value or none. A check whose reply
 * was lost may or may not have written its value: the next one accepts
 * either, and writes that same value again (a new one would leave three
 * values possible). A check runs only while none is on its way; with Redis
 * down nothing is checked (the run_id compared on reconnect covers a
 * restart).
 */
#include "broker/store/canary.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/store.h"

#define CANARY_EVERY_MS 1000
#define CANARY_TTL_STR "600000" /* ten minutes: a stalled broker is no loss */

static struct {
	void (*on_loss)(const char *why);
	char key[128];
	size_t key_len;
	char last[64];    /* the value known to be in Redis; "" before the first */
	char maybe[64];   /* a value whose write is unknown; "" for none */
	char sent[64];    /* the value of the check on its way */
	uint64_t serial;
	bool inflight;
	bool stopped;
	timer_ent_t timer;
} K;

static void on_checked(const redisReply *r, void *priv)
{
	(void)priv;
	K.inflight = false;
	if (K.stopped)
		return;
	if (store_reply_failed(r) || r->type != REDIS_REPLY_INTEGER) {
		/* Unknown whether it wrote: either value is fine next time. */
		if (!r)
			memcpy(K.maybe, K.sent, sizeof(K.maybe));
		return;
	}
	if (r->integer == 0) {
		LOG(LOG_WARN, "msg=\"redis lost data: the canary key is not what this broker wrote\"");
		K.on_loss("canary key lost");
	}
	memcpy(K.last, K.sent, sizeof(K.last));
	K.maybe[0] = '\0';
}

static void check(timer_ent_t *t)
{
	const char *argv[4];
	size_t argvlen[4];
	char ttl[] = CANARY_TTL_STR;

	(void)t;
	timer_at(&K.timer, timers_now() + CANARY_EVERY_MS);
	if (K.inflight || !store_up())
		return;
	if (K.maybe[0])
		memcpy(K.sent, K.maybe, sizeof(K.sent)); /* the unresolved one again */
	else
		snprintf(K.sent, sizeof(K.sent), "%s:%" PRIu64, server.id, ++K.serial);
	argv[0] = K.last;
	argvlen[0] = strlen(K.last);
	argv[1] = K.maybe;
	argvlen[1] = strlen(K.maybe);
	argv[2] = K.sent;
	argvlen[2] = strlen(K.sent);
	argv[3] = ttl;
	argvlen[3] = sizeof(ttl) - 1;
	if (store_eval_key(K.key, K.key_len, SCRIPT_CANARY, 4, argv, argvlen, on_checked, NULL, 0) == 0)
		K.inflight = true;
}

void canary_start(void (*on_loss)(const char *why))
{
	memset(&K, 0, sizeof(K));
	K.on_loss = on_loss;
	K.key_len = (size_t)snprintf(K.key, sizeof(K.key), "%sbroker:{%s}:canary", server.cfg->prefix,
	                             server.id);
	timer_init(&K.timer, check);
	timer_at(&K.timer, timers_now() + CANARY_EVERY_MS);
}

void canary_stop(void)
{
	K.stopped = true;
	timer_cancel(&K.timer);
}
