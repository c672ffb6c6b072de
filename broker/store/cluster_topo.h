/*
 * cluster_topo.h - follows a Redis Cluster's slot map for the cluster
 * backend (issue 17): asks the cluster's nodes CLUSTER SLOTS, one at a time
 * (the masters of the last map, then the seeds), again when told
 * (cluster_topo_refresh: after a MOVED, coalesced, so a burst of redirects
 * costs one or two questions) and every CLUSTER_REFRESH_MS anyway (a node
 * added or removed that no redirect told of). on_map runs with each map
 * that differs from the last one given, and with the first map read after
 * cluster_topo_refresh even when it does not (the caller may have changed
 * its copy on a redirect's word).
 *
 * Never blocks the loop: host names are resolved with uv_getaddrinfo.
 * One instance per process (the broker follows one cluster).
 */
#ifndef LB_BROKER_STORE_CLUSTER_TOPO_H
#define LB_BROKER_STORE_CLUSTER_TOPO_H

#include <uv.h>

#include "broker/base/url.h"
#include "broker/store/cluster_map.h"

#define CLUSTER_REFRESH_MS 10000
#define CLUSTER_SEEDS_MAX URL_SEEDS_MAX

/* The map is valid during the call only. */
typedef void (*cluster_topo_fn)(const cluster_map_t *map);

/* seeds (1..CLUSTER_SEEDS_MAX, copied) are asked first; password (copied,
 * or NULL) is sent with AUTH to each node. Needs timers_init's loop. */
void cluster_topo_start(uv_loop_t *loop, const host_port_t *seeds, int nseeds,
                        const char *password, cluster_topo_fn on_map);
/* Ask again soon: at once if no question is out, else once more after it. */
void cluster_topo_refresh(void);
/* The same, the next round asking first (copied) the node a redirect
 * named: it serves the slot now, so it knows the newer map. */
void cluster_topo_refresh_from(const host_port_t *first);
/* Stops asking; a question out is abandoned. No on_map after this. */
void cluster_topo_close(void);

#endif
