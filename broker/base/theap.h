/*
 * theap.h - a binary min-heap of deadlines (redis timeout.c keeps one ordered
 * structure of deadlines and one timer armed to the earliest; so do we).
 *
 * Nodes are embedded in the structs that own them (a lease, a session); the
 * heap holds pointers and writes each node's index back into it, so removal
 * and re-keying are O(log n) with no search. A node not in a heap has
 * index THEAP_NONE. The heap never owns or frees nodes.
 */
#ifndef LB_BROKER_THEAP_H
#define LB_BROKER_THEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define THEAP_NONE ((size_t)-1)

typedef struct theap_node {
	uint64_t deadline;
	uint64_t seq;   /* insertion order: equal deadlines pop first-in first */
	size_t index;   /* position in the heap, or THEAP_NONE */
} theap_node_t;

typedef struct theap {
	theap_node_t **v;
	size_t len;
	size_t cap;
	uint64_t next_seq;
} theap_t;

void theap_init(theap_t *h);
/* Frees the array only; nodes stay with their owners. */
void theap_free(theap_t *h);
/* Sets n's deadline; inserts n or moves it if already in h. */
void theap_set(theap_t *h, theap_node_t *n, uint64_t deadline);
/* Removes n if it is in h; a no-op otherwise. */
void theap_remove(theap_t *h, theap_node_t *n);
/* The earliest node, or NULL when empty. */
theap_node_t *theap_peek(const theap_t *h);
/* Removes and returns the earliest node, or NULL when empty. */
theap_node_t *theap_pop(theap_t *h);
static inline void theap_node_init(theap_node_t *n) { n->deadline = 0; n->seq = 0; n->index = THEAP_NONE; }
static inline bool theap_node_active(const theap_node_t *n) { return n->index != THEAP_NONE; }
static inline size_t theap_size(const theap_t *h) { return h->len; }

#endif
