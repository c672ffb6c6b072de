/*
 * test_slot.c - the Redis Cluster hash slot (broker/store/slot.h). The
 * expected slots are what redis-server 7.0.15 (--cluster-enabled yes)
 * answered to CLUSTER KEYSLOT for the same keys, hash-tag edge cases
 * included.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "broker/store/slot.h"

static uint16_t slot(const char *key)
{
	return slot_of_key(key, strlen(key));
}

Test(slot, the_crc_is_the_specs)
{
	/* The cluster spec's check value for CRC16-XMODEM. */
	cr_assert_eq(slot_crc16("123456789", 9), 0x31C3);
	cr_assert_eq(slot_crc16("", 0), 0);
}

Test(slot, plain_keys_hash_whole)
{
	cr_assert_eq(slot("123456789"), 12739);
	cr_assert_eq(slot("foo"), 12182);
	cr_assert_eq(slot("bar"), 5061);
	cr_assert_eq(slot("hello"), 866);
	cr_assert_eq(slot("a"), 15495);
	cr_assert_eq(slot(""), 0);
	cr_assert_eq(slot("\xc3\xa9"), 10180); /* bytes, not characters */
}

Test(slot, the_hash_tag_is_the_first_braces_with_something_inside)
{
	cr_assert_eq(slot("{user1000}.following"), 3443);
	cr_assert_eq(slot("{user1000}.followers"), 3443);
	cr_assert_eq(slot("foo{}{bar}"), 8363);    /* empty tag: the whole key */
	cr_assert_eq(slot("foo{{bar}}zap"), 4015); /* the tag is "{bar" */
	cr_assert_eq(slot("foo{bar}{zap}"), 5061); /* the first tag: "bar" */
	cr_assert_eq(slot("{"), 4092);
	cr_assert_eq(slot("}"), 12090);
	cr_assert_eq(slot("{}"), 15257);
	cr_assert_eq(slot("x{y"), 2740); /* no closing brace: the whole key */
}

Test(slot, every_key_of_a_lock_is_in_its_slot)
{
	static const char *const sfx[] = {":h", ":i", "", ":q", ":w", ":d", ":s"};
	char key[64];

	cr_assert_eq(slot("lb:{orders}:h"), 105);
	cr_assert_eq(slot("orders"), 105);
	cr_assert_eq(slot("lb:{=a{b}:q"), 8563); /* a name with a brace, escaped */
	for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
		snprintf(key, sizeof(key), "lb:{orders}%s", sfx[k]);
		cr_assert_eq(slot(key), 105, "%s", key);
	}
	cr_assert_lt(slot_of_key("\xff\xff\xff\xff", 4), SLOT_COUNT);
}
