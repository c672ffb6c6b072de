/*
 * random.c - unguessable tokens (see random.h).
 */
#include "broker/base/random.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/types.h>

#include "broker/base/log.h"

/* Random bytes come from getrandom in blocks, not one call per token: a
 * syscall per acquire was a tenth of the broker's syscalls. The pool is
 * process memory only; each byte is handed out once. */
static const unsigned char *take(size_t n)
{
	static unsigned char pool[1024];
	static size_t left;
	const unsigned char *raw;

	if (left < n) {
		size_t got = 0;

		while (got < sizeof(pool)) {
			ssize_t r = getrandom(pool + got, sizeof(pool) - got, 0);
			if (r < 0) {
				REQUIRE(errno == EINTR);
				continue;
			}
			got += (size_t)r;
		}
		left = sizeof(pool);
	}
	raw = pool + sizeof(pool) - left;
	left -= n;
	return raw;
}

void random_hex(char *buf, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *raw;

	REQUIRE(n <= 64);
	raw = take(n);
	for (size_t k = 0; k < n; k++) {
		buf[2 * k] = hex[raw[k] >> 4];
		buf[2 * k + 1] = hex[raw[k] & 15];
	}
	buf[2 * n] = '\0';
}

uint32_t random_below(uint32_t n)
{
	const unsigned char *raw;
	uint32_t v;

	if (n <= 1)
		return 0;
	raw = take(4);
	v = (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24;
	return v % n;
}
