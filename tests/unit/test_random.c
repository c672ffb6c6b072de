/*
 * test_random.c - broker/base/random.c: random_hex gives 2*n lowercase hex
 * characters and a NUL; random_below stays in 0..n-1 (0 for n <= 1) and
 * reaches both halves of its range. Statistical checks are loose enough
 * never to fail by chance (the odds of a false failure are below 2^-400).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "broker/base/random.h"

Test(random, hex_length_and_alphabet)
{
	char buf[2 * 64 + 2];

	for (size_t n = 0; n <= 64; n++) {
		memset(buf, 'X', sizeof(buf));
		random_hex(buf, n);
		cr_assert_eq(strlen(buf), 2 * n, "n=%zu", n);
		cr_assert_eq(strspn(buf, "0123456789abcdef"), 2 * n, "%s", buf);
		cr_assert_eq(buf[2 * n + 1], 'X', "nothing written past the NUL");
	}
}

Test(random, hex_tokens_differ)
{
	char a[33], b[33];

	random_hex(a, 16);
	random_hex(b, 16);
	cr_assert_str_neq(a, b);
}

Test(random, below_zero_and_one_give_zero)
{
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(random_below(0), 0);
		cr_assert_eq(random_below(1), 0);
	}
}

Test(random, below_stays_below_n)
{
	static const uint32_t ns[] = {2, 3, 7, 10, 1000, 1u << 31, UINT32_MAX};

	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
		for (int i = 0; i < 10000; i++) {
			uint32_t v = random_below(ns[k]);
			cr_assert_lt(v, ns[k], "n=%u gave %u", ns[k], v);
		}
}

/* Over 1000 draws each half of the range turns up (a draw misses a half
 * with probability at most 2/3, for n = 3), and for n = 2 both values do. */
Test(random, below_reaches_both_halves)
{
	static const uint32_t ns[] = {2, 3, 100, 1000, UINT32_MAX};

	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		uint32_t n = ns[k];
		int low = 0, high = 0;

		for (int i = 0; i < 1000; i++) {
			if (random_below(n) < n / 2)
				low++;
			else
				high++;
		}
		cr_expect_gt(low, 0, "n=%u: nothing below %u", n, n / 2);
		cr_expect_gt(high, 0, "n=%u: nothing at or above %u", n, n / 2);
	}
}

/* Every value of a small range turns up: the modulo reaches each residue. */
Test(random, below_reaches_every_value_of_a_small_range)
{
	int seen[7] = {0};

	for (int i = 0; i < 2000; i++)
		seen[random_below(7)]++;
	for (int v = 0; v < 7; v++)
		cr_expect_gt(seen[v], 0, "%d never drawn", v);
}
