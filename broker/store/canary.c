/*
 * canary.c - notices within --canary-interval-ms that Redis lost data
 * (see canary.h).
 *
 * Every interval the broker checks its canary key (lua/canary.lua): the
 * value it wrote last must still be there, and a new one is written. A
 * flush, a restart without persistence or a failover to a replica that
 * missed the last writes shows another value or none. A check whose reply
 * was lost may or may not have written its value: the next one accepts
 * either, and writes that same value again (a new one would leave three
 * values possible). A check runs only while none is on its way; with Redis
 * down nothing is checked (the run_id compared on reconnect covers a
 * restart). The first check's answer primes the canary (canary.h).
 */
#include "broker/store/canary.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/backend.h"
#include "broker/store/store.h"

#define CANARY_TTL_STR "600000" /* ten minutes: a stalled broker is no loss */

struct canary {
	void (*on_loss)(const char *why);
	int master; /* -1: routed by the key (store_eval_key); else that master */
	char key[128];
	size_t key_len;
	char last[64];    /* the value known to be in Redis; "" before the first */
	char maybe[64];   /* a value whose write is unknown; "" for none */
	char sent[64];    /* the value of the check on its way */
	uint64_t serial;
	bool inflight;
	bool stopped;
	bool primed;                /* the first check was answered */
	void (*on_primed)(void);
	timer_ent_t timer;
};

static uint64_t interval(void)
{
	return (uint64_t)server.cfg->canary_interval_ms;
}

static void on_checked(const redisReply *r, void *priv)
{
	canary_t *k = priv;

	k->inflight = false;
	if (k->stopped) {
		free(k);
		return;
	}
	if (store_reply_failed(r) || r->type != REDIS_REPLY_INTEGER) {
		/* Unknown whether it wrote: either value is fine next time. */
		if (!r)
			memcpy(k->maybe, k->sent, sizeof(k->maybe));
		return;
	}
	if (r->integer == 0) {
		LOG(LOG_WARN, "msg=\"redis lost data: the canary key is not what this broker wrote\"");
		k->on_loss("canary key lost");
	}
	memcpy(k->last, k->sent, sizeof(k->last));
	k->maybe[0] = '\0';
	if (!k->primed) {
		k->primed = true;
		if (k->on_primed)
			k->on_primed();
	}
}

/* Sends a check unless one is on its way; a master that is down (or
 * closed for a check after a failover) refuses it: nothing then. */
static void send_check(canary_t *k)
{
	const char *argv[4];
	size_t argvlen[4];
	char ttl[] = CANARY_TTL_STR;

	if (k->inflight || k->stopped)
		return;
	if (k->maybe[0])
		memcpy(k->sent, k->maybe, sizeof(k->sent)); /* the unresolved one again */
	else
		snprintf(k->sent, sizeof(k->sent), "%s:%" PRIu64, server.id, ++k->serial);
	argv[0] = k->last;
	argvlen[0] = strlen(k->last);
	argv[1] = k->maybe;
	argvlen[1] = strlen(k->maybe);
	argv[2] = k->sent;
	argvlen[2] = strlen(k->sent);
	argv[3] = ttl;
	argvlen[3] = sizeof(ttl) - 1;
	if ((k->master < 0 ? store_eval_key(k->key, k->key_len, SCRIPT_CANARY, 4, argv, argvlen,
	                                    on_checked, k, 0)
	                   : store_eval_key_on(k->master, k->key, k->key_len, SCRIPT_CANARY, 4, argv,
	                                       argvlen, on_checked, k)) == 0)
		k->inflight = true;
}

static void check(timer_ent_t *t)
{
	canary_t *k = (canary_t *)((char *)t - offsetof(canary_t, timer));

	timer_at(&k->timer, timers_now() + interval());
	send_check(k);
}

void canary_check_now(canary_t *k)
{
	if (k)
		send_check(k);
}

void canary_on_primed(canary_t *k, void (*on_primed)(void))
{
	k->on_primed = on_primed;
}

bool canary_primed(const canary_t *k)
{
	return k && k->primed;
}

canary_t *canary_start(const char *key, size_t key_len, void (*on_loss)(const char *why))
{
	return canary_start_on(-1, key, key_len, on_loss);
}

canary_t *canary_start_on(int master, const char *key, size_t key_len,
                          void (*on_loss)(const char *why))
{
	canary_t *k = xcalloc(1, sizeof(*k));

	REQUIRE(key_len < sizeof(k->key));
	k->master = master;
	k->on_loss = on_loss;
	memcpy(k->key, key, key_len);
	k->key_len = key_len;
	timer_init(&k->timer, check);
	timer_at(&k->timer, timers_now() + interval());
	send_check(k); /* primes it as soon as its master is up */
	return k;
}

void canary_stop(canary_t *k)
{
	if (!k)
		return;
	k->stopped = true;
	timer_cancel(&k->timer);
	if (!k->inflight)
		free(k);
}
