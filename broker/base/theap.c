/*
 * theap.c - binary min-heap of deadlines, ordered by (deadline, seq).
 *
 * Invariants (checked by the unit tests after every operation):
 *  - for every i < len: v[i]->index == i, and v[i] is not later than its
 *    children v[2i+1] and v[2i+2];
 *  - a node not in the heap has index THEAP_NONE;
 *  - seq comes from next_seq and is taken anew on every theap_set, so among
 *    equal deadlines the node set first pops first.
 * The heap owns only the pointer array. Owners must theap_remove() a node
 * before freeing it; theap_free() does not touch the nodes.
 */
#include "broker/base/theap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THEAP_MIN_CAP 16

static void die(const char *what)
{
	fprintf(stderr, "theap: %s\n", what);
	abort();
}

static bool earlier(const theap_node_t *a, const theap_node_t *b)
{
	if (a->deadline != b->deadline)
		return a->deadline < b->deadline;
	return a->seq < b->seq;
}

static void place(theap_t *h, size_t i, theap_node_t *n)
{
	h->v[i] = n;
	n->index = i;
}

static void sift_up(theap_t *h, size_t i)
{
	theap_node_t *n = h->v[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!earlier(n, h->v[parent]))
			break;
		place(h, i, h->v[parent]);
		i = parent;
	}
	place(h, i, n);
}

static void sift_down(theap_t *h, size_t i)
{
	theap_node_t *n = h->v[i];

	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= h->len)
			break;
		if (child + 1 < h->len && earlier(h->v[child + 1], h->v[child]))
			child++;
		if (!earlier(h->v[child], n))
			break;
		place(h, i, h->v[child]);
		i = child;
	}
	place(h, i, n);
}

/* Moves the node at i to where its key now belongs. */
static void fix(theap_t *h, size_t i)
{
	if (i > 0 && earlier(h->v[i], h->v[(i - 1) / 2]))
		sift_up(h, i);
	else
		sift_down(h, i);
}

static bool contains(const theap_t *h, const theap_node_t *n)
{
	return n->index < h->len && h->v[n->index] == n;
}

static void grow(theap_t *h)
{
	size_t cap = h->cap == 0 ? THEAP_MIN_CAP : h->cap * 2;
	theap_node_t **v;

	if (cap < h->cap || cap > SIZE_MAX / sizeof(*v))
		die("too many nodes");
	v = realloc(h->v, cap * sizeof(*v));
	if (v == NULL)
		die("out of memory");
	h->v = v;
	h->cap = cap;
}

void theap_init(theap_t *h)
{
	memset(h, 0, sizeof(*h));
}

void theap_free(theap_t *h)
{
	if (h == NULL)
		return;
	free(h->v);
	memset(h, 0, sizeof(*h));
}

void theap_set(theap_t *h, theap_node_t *n, uint64_t deadline)
{
	n->deadline = deadline;
	n->seq = h->next_seq++;
	if (theap_node_active(n)) {
		if (!contains(h, n))
			die("theap_set: node belongs to another heap");
		fix(h, n->index);
		return;
	}
	if (h->len == h->cap)
		grow(h);
	h->v[h->len] = n;
	n->index = h->len;
	h->len++;
	sift_up(h, h->len - 1);
}

void theap_remove(theap_t *h, theap_node_t *n)
{
	size_t i = n->index;
	theap_node_t *last;

	if (!contains(h, n))
		return;
	n->index = THEAP_NONE;
	h->len--;
	if (i == h->len)
		return;
	last = h->v[h->len];
	place(h, i, last);
	fix(h, i);
}

theap_node_t *theap_peek(const theap_t *h)
{
	return h->len > 0 ? h->v[0] : NULL;
}

theap_node_t *theap_pop(theap_t *h)
{
	theap_node_t *n = theap_peek(h);

	if (n != NULL)
		theap_remove(h, n);
	return n;
}
