/*
 * htab.c - intrusive chained hash table (see htab.h). Invariant: count <=
 * nbuckets after every insert; each node sits in bucket hash & (nbuckets-1).
 */
#include "broker/base/htab.h"

#include <stdlib.h>

#include "broker/base/log.h"

void htab_free(htab_t *t)
{
	free(t->buckets);
	t->buckets = NULL;
	t->nbuckets = 0;
	t->count = 0;
}

static void grow(htab_t *t)
{
	size_t n = t->nbuckets ? t->nbuckets * 2 : 64;
	htab_node_t **b = xcalloc(n, sizeof(*b));

	for (size_t k = 0; k < t->nbuckets; k++) {
		htab_node_t *e = t->buckets[k];
		while (e) {
			htab_node_t *next = e->next;
			size_t at = e->hash & (n - 1);
			e->next = b[at];
			b[at] = e;
			e = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

void htab_insert(htab_t *t, htab_node_t *n, uint32_t hash)
{
	size_t at;

	if (t->count + 1 > t->nbuckets)
		grow(t);
	n->hash = hash;
	at = hash & (t->nbuckets - 1);
	n->next = t->buckets[at];
	t->buckets[at] = n;
	t->count++;
}

void htab_remove(htab_t *t, htab_node_t *n)
{
	htab_node_t **pp;

	if (!t->nbuckets)
		return;
	for (pp = &t->buckets[n->hash & (t->nbuckets - 1)]; *pp; pp = &(*pp)->next) {
		if (*pp == n) {
			*pp = n->next;
			n->next = NULL;
			t->count--;
			return;
		}
	}
}

htab_node_t *htab_find(const htab_t *t, uint32_t hash, htab_match_fn match, const void *key)
{
	if (!t->nbuckets)
		return NULL;
	for (htab_node_t *e = t->buckets[hash & (t->nbuckets - 1)]; e; e = e->next) {
		if (e->hash == hash && match(e, key))
			return e;
	}
	return NULL;
}

uint32_t htab_hash(uint32_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t k = 0; k < len; k++) {
		h ^= p[k];
		h *= 16777619u;
	}
	return h;
}
