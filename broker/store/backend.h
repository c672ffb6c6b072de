/*
 * backend.h - what seam.c (the seam, store.h) asks of a backend: single.c
 * (one Redis, or the master Sentinel names) and cluster.c (Redis
 * Cluster). store_start picks one by the URL's kind; every other store_*
 * call goes to it. Nothing outside broker/store/ includes this.
 */
#ifndef LB_BROKER_STORE_BACKEND_H
#define LB_BROKER_STORE_BACKEND_H

#include "broker/store/store.h"

typedef struct store_backend {
	void (*start)(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events);
	void (*close)(void);
	void (*free)(void);
	void (*loss_checked)(void);
	bool (*up)(void);
	size_t (*pending)(void);
	bool (*replayed)(void);
	/* A script whose keys are argv[0..nkeys-1]; route (a lock's name, or
	 * the hash tag of a key that is no lock's) keeps the calls of one
	 * route in order. wait: RP_WAIT, RP_NO_WAIT or RP_UNACKED (rpool.h). */
	int (*eval)(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
	            const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
	            uint64_t retry_until, int wait, int floor_arg);
	/* Fills up to max entries of the masters served (store_masters). */
	size_t (*masters)(store_master_t *out, size_t max);
} store_backend_t;

extern const store_backend_t store_single_backend;
extern const store_backend_t store_cluster_backend;

#endif
