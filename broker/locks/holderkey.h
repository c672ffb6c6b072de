/*
 * holderkey.h - the identity that reentrancy goes by: (session, lock name,
 * owner). Held leases (lease.c) and pending acquires (waitq.c) are both
 * indexed by it, with this one hash.
 */
#ifndef LB_BROKER_HOLDERKEY_H
#define LB_BROKER_HOLDERKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "broker/base/htab.h"

struct client;

typedef struct holder_key {
	const struct client *s;
	const char *lock;
	size_t lock_len;
	const char *owner;
	size_t owner_len;
} holder_key_t;

static inline uint32_t holder_key_hash(const holder_key_t *k)
{
	uint32_t h = htab_hash(HTAB_HASH_INIT, &k->s, sizeof(k->s));

	h = htab_hash(h, k->lock, k->lock_len);
	h = htab_hash(h, "\0", 1); /* lock names hold no NUL: no ambiguity */
	return htab_hash(h, k->owner, k->owner_len);
}

/* Whether (s, lock, owner) equals k. */
static inline bool holder_key_equal(const holder_key_t *k, const struct client *s,
                                    const char *lock, size_t lock_len, const char *owner,
                                    size_t owner_len)
{
	return k->s == s && k->lock_len == lock_len && memcmp(k->lock, lock, lock_len) == 0 &&
	       k->owner_len == owner_len && memcmp(k->owner, owner, owner_len) == 0;
}

#endif
