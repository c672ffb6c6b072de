/*
 * seam.c - the functions of store.h: picks the backend (--redlock is
 * redlock.c, a cluster:// URL cluster.c, every other kind single.c) and passes
 * each call to it. What every backend does the same way lives here: which
 * calls WAIT for replicas, and where a key that is no lock's is routed.
 */
#include "broker/store/store.h"

#include <stdio.h>
#include <string.h>

#include "broker/base/shared.h"
#include "broker/store/backend.h"
#include "broker/store/rpool.h"

static const store_backend_t *B;
static const char *mode = "single";
static char notice_channel[128];

void store_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	B = cfg->nredlock > 0                  ? &store_redlock_backend
	    : cfg->redis.kind == URL_CLUSTER ? &store_cluster_backend
	                                     : &store_single_backend;
	mode = cfg->nredlock > 0                  ? "redlock"
	       : cfg->redis.kind == URL_CLUSTER  ? "cluster"
	       : cfg->redis.kind == URL_SENTINEL ? "sentinel"
	                                         : "single";
	/* As single.c, cluster.c and redlock.c name what they subscribe to. */
	snprintf(notice_channel, sizeof(notice_channel), "%s%s%s", cfg->prefix,
	         cfg->nredlock > 0 ? "redlock:wake" : "inbox:", cfg->nredlock > 0 ? "" : server.id);
	B->start(loop, cfg, events);
}

void store_flush(void)
{
	rpool_flush();
}

bool store_flush_pending(void)
{
	return rpool_flush_pending();
}

void store_close(void)
{
	B->close();
}

void store_free(void)
{
	if (B)
		B->free();
}

void store_loss_checked(void)
{
	B->loss_checked();
}

bool store_up(void)
{
	return B && B->up();
}

size_t store_pending(void)
{
	return B ? B->pending() : 0;
}

bool store_replayed(void)
{
	return B->replayed();
}

size_t store_inspect_masters(int *holds, size_t max)
{
	return B == &store_redlock_backend ? redlock_inspected(holds, max) : 0;
}

const char *store_notice_channel(void)
{
	return notice_channel;
}

const char *store_mode(void)
{
	return mode;
}

const store_caps_t *store_caps(void)
{
	static const store_caps_t none = {.wait = STORE_WAIT_QUEUED};

	return B ? B->caps : &none;
}

bool store_replicated(void)
{
	return B && B->replicated ? B->replicated() : rpool_replicated();
}

size_t store_masters(store_master_t *out, size_t max)
{
	return B ? B->masters(out, max) : 0;
}

int store_eval_lock(const char *lock, size_t lock_len, script_id_t script, int nkeys, int argc,
                    const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                    uint64_t retry_until, uint64_t deadline, int floor_arg, bool unwaited)
{
	/* WAIT (--redis-wait-replicas) behind every call that may grant or
	 * change a lease; verify and inspect only read. */
	int wait = script == SCRIPT_VERIFY || script == SCRIPT_INSPECT ? RP_NO_WAIT
	           : unwaited                                          ? RP_UNACKED
	                                                               : RP_WAIT;

	return B->eval(lock, lock_len, script, nkeys, argc, argv, argvlen, fn, priv, retry_until,
	               deadline, wait, floor_arg);
}

/* The part of key that picks its connection: its hash tag, the way Redis
 * Cluster picks a slot (between the first '{' and the next '}', when not
 * empty), else the whole key. A detached lease's pointer so goes where
 * its token does. */
static const char *route_part(const char *key, size_t len, size_t *out_len)
{
	const char *open = memchr(key, '{', len);
	const char *close = open ? memchr(open + 1, '}', len - (size_t)(open + 1 - key)) : NULL;

	if (close && close > open + 1) {
		*out_len = (size_t)(close - open - 1);
		return open + 1;
	}
	*out_len = len;
	return key;
}

/* The key, then argv: all[0..argc]. False when argc is out of bounds. */
static bool key_then_args(const char *key, size_t key_len, int argc, const char *const *argv,
                          const size_t *argvlen, const char **all, size_t *lens)
{
	if (argc < 0 || argc > 7)
		return false;
	all[0] = key;
	lens[0] = key_len;
	memcpy(all + 1, argv, (size_t)argc * sizeof(*argv));
	memcpy(lens + 1, argvlen, (size_t)argc * sizeof(*argvlen));
	return true;
}

int store_eval_keys(const char *key, size_t key_len, int nmore, script_id_t script, int argc,
                    const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                    uint64_t retry_until)
{
	const char *all[8], *part;
	size_t lens[8], part_len;

	if (nmore < 0 || nmore > argc || !key_then_args(key, key_len, argc, argv, argvlen, all, lens))
		return -1;
	part = route_part(key, key_len, &part_len);
	return B->eval(part, part_len, script, 1 + nmore, argc + 1, all, lens, fn, priv, retry_until,
	               0, RP_NO_WAIT, -1);
}

int store_eval_key(const char *key, size_t key_len, script_id_t script, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until)
{
	return store_eval_keys(key, key_len, 0, script, argc, argv, argvlen, fn, priv, retry_until);
}

int store_eval_key_on(int master, const char *key, size_t key_len, script_id_t script, int argc,
                      const char *const *argv, const size_t *argvlen, store_fn fn, void *priv)
{
	const char *all[8], *part;
	size_t lens[8], part_len;

	if (!B || !B->eval_master || !key_then_args(key, key_len, argc, argv, argvlen, all, lens))
		return -1;
	part = route_part(key, key_len, &part_len);
	return B->eval_master(master, part, part_len, script, 1, argc + 1, all, lens, fn, priv);
}
