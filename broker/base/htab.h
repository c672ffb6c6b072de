/*
 * htab.h - an intrusive chained hash table.
 *
 * Nodes are embedded in their owners, which compute the hash; the table
 * never allocates nodes or frees them. Buckets double when the load passes
 * 1, so lookups stay O(1) with no rehash of keys (the hash is stored).
 */
#ifndef LB_BROKER_HTAB_H
#define LB_BROKER_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct htab_node {
	struct htab_node *next;
	uint32_t hash;
} htab_node_t;

typedef struct htab {
	htab_node_t **buckets;
	size_t nbuckets; /* a power of two, or 0 before the first insert */
	size_t count;
} htab_t;

/* Returns true when n matches the key the caller looks for. */
typedef bool (*htab_match_fn)(const htab_node_t *n, const void *key);

void htab_free(htab_t *t);
void htab_insert(htab_t *t, htab_node_t *n, uint32_t hash);
void htab_remove(htab_t *t, htab_node_t *n);
htab_node_t *htab_find(const htab_t *t, uint32_t hash, htab_match_fn match, const void *key);
/* FNV-1a, to be chained over several fields with the previous result as h. */
uint32_t htab_hash(uint32_t h, const void *data, size_t len);
#define HTAB_HASH_INIT 2166136261u

#endif
