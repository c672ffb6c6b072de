/*
 * backend.h - what seam.c (the seam, store.h) asks of a backend: single.c
 * (one Redis, or the master Sentinel names), cluster.c (Redis
 * Cluster) and redlock.c (N independent masters). store_start picks one by the URL's kind; every other store_*
 * call goes to it. Nothing outside broker/store/ includes this.
 */
#ifndef LB_BROKER_STORE_BACKEND_H
#define LB_BROKER_STORE_BACKEND_H

#include "broker/store/store.h"

typedef struct store_backend {
	const store_caps_t *caps; /* store_caps */
	void (*start)(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events);
	void (*close)(void);
	void (*free)(void);
	void (*loss_checked)(void);
	bool (*up)(void);
	size_t (*pending)(void);
	bool (*replayed)(void);
	/* NULL: rpool_replicated(). Else store_replicated for the delivery
	 * under way (Redis Cluster: false for a reply from a master that left
	 * the map). */
	bool (*replicated)(void);
	/* A script whose keys are argv[0..nkeys-1]; route (a lock's name, or
	 * the hash tag of a key that is no lock's) keeps the calls of one
	 * route in order. wait: RP_WAIT, RP_NO_WAIT or RP_UNACKED (rpool.h);
	 * deadline: store_eval_lock's. */
	int (*eval)(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
	            const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
	            uint64_t retry_until, uint64_t deadline, int wait, int floor_arg);
	/* Redlock: a script on master i alone (its canary); NULL elsewhere. */
	int (*eval_master)(int master, const char *route, size_t route_len, script_id_t script,
	                   int nkeys, int argc, const char *const *argv, const size_t *argvlen,
	                   store_fn fn, void *priv);
	/* Fills up to max entries of the masters served (store_masters). */
	size_t (*masters)(store_master_t *out, size_t max);
} store_backend_t;

extern const store_backend_t store_single_backend;
extern const store_backend_t store_cluster_backend;
extern const store_backend_t store_redlock_backend;

/* redlock.c's store_inspect_masters. */
size_t redlock_inspected(int *holds, size_t max);

/* store_eval_key on master i of a backend that has eval_master (Redlock):
 * the key is routed there and nowhere else. -1 elsewhere. */
int store_eval_key_on(int master, const char *key, size_t key_len, script_id_t script, int argc,
                      const char *const *argv, const size_t *argvlen, store_fn fn, void *priv);

#endif
