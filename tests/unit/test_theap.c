/*
 * test_theap.c - the deadline heap: order by (deadline, seq), re-keying,
 * removal from the middle, index bookkeeping, and a long random run checked
 * against a plain reference model after every operation.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/theap.h"

/* Checks every invariant of theap.c's top comment. */
static void check_heap(const theap_t *h)
{
	cr_assert_leq(h->len, h->cap);
	for (size_t i = 0; i < h->len; i++) {
		const theap_node_t *n = h->v[i];
		cr_assert_eq(n->index, i, "node at %zu has index %zu", i, n->index);
		for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < h->len; c++) {
			const theap_node_t *k = h->v[c];
			cr_assert(n->deadline < k->deadline ||
				  (n->deadline == k->deadline && n->seq < k->seq),
				  "heap order broken between %zu and %zu", i, c);
		}
	}
}

Test(theap, empty)
{
	theap_t h;

	theap_init(&h);
	cr_expect_null(theap_peek(&h));
	cr_expect_null(theap_pop(&h));
	cr_expect_eq(theap_size(&h), 0);
	theap_free(&h);
	theap_free(NULL);
	cr_expect_null(h.v);
}

Test(theap, node_init_inactive)
{
	theap_node_t n;

	memset(&n, 0x77, sizeof(n));
	theap_node_init(&n);
	cr_expect_not(theap_node_active(&n));
	cr_expect_eq(n.index, THEAP_NONE);
}

Test(theap, pops_in_deadline_order)
{
	static const uint64_t d[] = {50, 10, 40, 30, 20, 60, 0, UINT64_MAX};
	theap_node_t n[8];
	theap_t h;
	uint64_t last = 0;

	theap_init(&h);
	for (size_t i = 0; i < 8; i++) {
		theap_node_init(&n[i]);
		theap_set(&h, &n[i], d[i]);
		cr_expect(theap_node_active(&n[i]));
		check_heap(&h);
	}
	cr_assert_eq(theap_size(&h), 8);
	cr_expect_eq(theap_peek(&h), &n[6]);
	for (size_t i = 0; i < 8; i++) {
		theap_node_t *p = theap_pop(&h);
		cr_assert_not_null(p);
		cr_expect_geq(p->deadline, last);
		cr_expect_not(theap_node_active(p));
		last = p->deadline;
		check_heap(&h);
	}
	cr_expect_eq(last, UINT64_MAX);
	cr_expect_null(theap_pop(&h));
	theap_free(&h);
}

Test(theap, equal_deadlines_are_fifo)
{
	theap_node_t n[20];
	theap_t h;

	theap_init(&h);
	for (size_t i = 0; i < 20; i++) {
		theap_node_init(&n[i]);
		theap_set(&h, &n[i], 100);
	}
	for (size_t i = 0; i < 20; i++)
		cr_expect_eq(theap_pop(&h), &n[i], "pop %zu out of insertion order", i);
	theap_free(&h);
}

Test(theap, rekey_moves_up_and_down)
{
	theap_node_t a, b, c;
	theap_t h;

	theap_init(&h);
	theap_node_init(&a);
	theap_node_init(&b);
	theap_node_init(&c);
	theap_set(&h, &a, 10);
	theap_set(&h, &b, 20);
	theap_set(&h, &c, 30);
	theap_set(&h, &c, 5); /* up */
	check_heap(&h);
	cr_expect_eq(theap_size(&h), 3, "re-key must not insert twice");
	cr_expect_eq(theap_peek(&h), &c);
	theap_set(&h, &c, 25); /* down */
	check_heap(&h);
	cr_expect_eq(theap_peek(&h), &a);
	theap_set(&h, &b, 10); /* tie with a, set later: after a */
	cr_expect_eq(theap_pop(&h), &a);
	cr_expect_eq(theap_pop(&h), &b);
	cr_expect_eq(theap_pop(&h), &c);
	cr_expect_eq(c.deadline, 25);
	theap_free(&h);
}

Test(theap, rekey_same_deadline_goes_behind_ties)
{
	theap_node_t a, b;
	theap_t h;

	theap_init(&h);
	theap_node_init(&a);
	theap_node_init(&b);
	theap_set(&h, &a, 7);
	theap_set(&h, &b, 7);
	theap_set(&h, &a, 7);
	cr_expect_eq(theap_pop(&h), &b);
	cr_expect_eq(theap_pop(&h), &a);
	theap_free(&h);
}

Test(theap, remove_middle_last_and_absent)
{
	theap_node_t n[10], other;
	theap_t h;

	theap_init(&h);
	for (size_t i = 0; i < 10; i++) {
		theap_node_init(&n[i]);
		theap_set(&h, &n[i], 100 - i * 7 % 13);
	}
	theap_remove(&h, &n[4]);
	cr_expect_not(theap_node_active(&n[4]));
	check_heap(&h);
	theap_remove(&h, h.v[h.len - 1]); /* the last slot */
	check_heap(&h);
	cr_expect_eq(theap_size(&h), 8);
	theap_remove(&h, &n[4]); /* already out: no-op */
	theap_node_init(&other);
	theap_remove(&h, &other);
	cr_expect_eq(theap_size(&h), 8);
	while (theap_size(&h) > 0) {
		theap_remove(&h, theap_peek(&h));
		check_heap(&h);
	}
	for (size_t i = 0; i < 10; i++)
		cr_expect_not(theap_node_active(&n[i]));
	theap_free(&h);
}

Test(theap, remove_node_of_another_heap_is_noop)
{
	theap_node_t a, b, c;
	theap_t h1, h2;

	theap_init(&h1);
	theap_init(&h2);
	theap_node_init(&a);
	theap_node_init(&b);
	theap_node_init(&c);
	theap_set(&h1, &a, 1);
	theap_set(&h2, &b, 2);
	theap_set(&h2, &c, 3);
	theap_remove(&h1, &c); /* index 1 is beyond h1's length */
	theap_remove(&h1, &b); /* index 0 of h1 is a, not b */
	cr_expect_eq(theap_size(&h1), 1);
	cr_expect_eq(theap_size(&h2), 2);
	cr_expect(theap_node_active(&b));
	cr_expect_eq(theap_pop(&h1), &a);
	theap_free(&h1);
	theap_free(&h2);
}

Test(theap, set_node_of_another_heap_aborts, .signal = SIGABRT)
{
	theap_node_t a, b;
	theap_t h1, h2;

	theap_init(&h1);
	theap_init(&h2);
	theap_node_init(&a);
	theap_node_init(&b);
	theap_set(&h1, &a, 1);
	theap_set(&h2, &b, 1);
	theap_set(&h2, &a, 5); /* a is in h1: corrupting h2 must not happen */
}

Test(theap, grows_by_doubling, .timeout = 10)
{
	enum { N = 10000 };
	theap_node_t *n = calloc(N, sizeof(*n));
	theap_t h;
	size_t last_cap = 0;

	cr_assert_not_null(n);
	theap_init(&h);
	for (size_t i = 0; i < N; i++) {
		theap_node_init(&n[i]);
		theap_set(&h, &n[i], (uint64_t)((i * 7919) % N));
		if (h.cap != last_cap) {
			cr_expect(last_cap == 0 || h.cap == 2 * last_cap, "cap %zu -> %zu", last_cap, h.cap);
			last_cap = h.cap;
		}
	}
	check_heap(&h);
	for (uint64_t want = 0; want < N; want++) {
		theap_node_t *p = theap_pop(&h);
		cr_assert_not_null(p);
		cr_assert_eq(p->deadline, want);
	}
	theap_free(&h);
	free(n);
}

/* xorshift64*: fixed seed, same run on every machine. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(uint64_t bound)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (rng_state * 0x2545f4914f6cdd1dull) % bound;
}

struct ref {
	bool in;
	uint64_t deadline;
	uint64_t order; /* the reference's own set counter */
};

/* The reference's earliest node, or -1. */
static long ref_min(const struct ref *r, size_t n)
{
	long best = -1;

	for (size_t i = 0; i < n; i++) {
		if (!r[i].in)
			continue;
		if (best < 0 || r[i].deadline < r[best].deadline ||
		    (r[i].deadline == r[best].deadline && r[i].order < r[best].order))
			best = (long)i;
	}
	return best;
}

Test(theap, random_ops_match_reference, .timeout = 60)
{
	enum { NODES = 257, OPS = 40000 };
	static theap_node_t n[NODES];
	static struct ref r[NODES];
	theap_t h;
	uint64_t order = 0;
	size_t count = 0, pops = 0, rekeys = 0, middle_removes = 0;

	theap_init(&h);
	for (size_t i = 0; i < NODES; i++)
		theap_node_init(&n[i]);

	for (int op = 0; op < OPS; op++) {
		size_t k = (size_t)rnd(NODES);
		uint64_t choice = rnd(100);

		if (choice < 50) { /* insert or re-key; a small range makes many ties */
			uint64_t d = rnd(64);
			if (r[k].in)
				rekeys++;
			else
				count++;
			theap_set(&h, &n[k], d);
			r[k] = (struct ref){true, d, order++};
		} else if (choice < 75) { /* remove any node, usually from the middle */
			if (r[k].in) {
				if (n[k].index != 0 && n[k].index != h.len - 1)
					middle_removes++;
				count--;
			}
			theap_remove(&h, &n[k]);
			r[k].in = false;
		} else { /* pop */
			long want = ref_min(r, NODES);
			theap_node_t *got = theap_pop(&h);
			if (want < 0) {
				cr_assert_null(got, "op %d: pop from empty heap", op);
			} else {
				cr_assert_eq(got, &n[want], "op %d: popped node %td, want %ld",
					     op, got ? got - n : -1, want);
				r[want].in = false;
				count--;
				pops++;
			}
		}

		cr_assert_eq(theap_size(&h), count, "op %d", op);
		long want = ref_min(r, NODES);
		cr_assert_eq(theap_peek(&h), want < 0 ? NULL : &n[want], "op %d: peek", op);
		check_heap(&h);
		for (size_t i = 0; i < NODES; i++)
			cr_assert_eq(theap_node_active(&n[i]), r[i].in, "op %d: node %zu activity", op, i);
	}
	cr_expect_gt(rekeys, 1000);
	cr_expect_gt(middle_removes, 1000);
	cr_expect_gt(pops, 1000);

	/* Drain: strictly increasing (deadline, order). */
	for (long want; (want = ref_min(r, NODES)) >= 0;) {
		cr_assert_eq(theap_pop(&h), &n[want]);
		r[want].in = false;
	}
	cr_expect_null(theap_pop(&h));
	theap_free(&h);
}
