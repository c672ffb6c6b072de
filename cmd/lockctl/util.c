/*
 * util.c - lockctl's small helpers: one-line error messages, strict parsing
 * of durations and integers, the clock, masking. Nothing here does I/O
 * except writing to stderr; nothing echoes more than a masked, shortened
 * piece of user or broker text.
 */
#include "cmd/lockctl/lockctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void lc_err(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n = snprintf(line, sizeof(line), LC_NAME ": ");
	int w;

	va_start(ap, fmt);
	w = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (w < 0)
		w = 0;
	n += w;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* one write: lines from lockctl and its child never interleave */
	if (write(2, line, (size_t)n) < 0) {
		/* nothing left to tell anyone */
	}
}

int lc_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
	int64_t v = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		if (v > (INT64_MAX - (*p - '0')) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int lc_parse_duration(const char *s, int64_t *ms)
{
	uint64_t whole = 0, frac = 0, scale = 1, mult;
	const char *p = s;
	size_t nd = 0, nf = 0;

	if (s == NULL)
		return -1;
	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return 0;
	}
	for (; *p >= '0' && *p <= '9'; p++, nd++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return -1;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (nd == 0)
		return -1;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++, nf++) {
			if (nf == 9)
				return -1; /* finer than a nanosecond: junk */
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
		if (nf == 0)
			return -1;
	}
	if (strcmp(p, "ms") == 0)
		mult = 1;
	else if (strcmp(p, "s") == 0)
		mult = 1000;
	else if (strcmp(p, "m") == 0)
		mult = 60 * 1000;
	else if (strcmp(p, "h") == 0)
		mult = 3600 * 1000;
	else
		return -1; /* no unit, an unknown one, or trailing junk */
	if (whole > (uint64_t)LC_DURATION_MAX_MS / mult)
		return -1;
	whole *= mult;
	/* frac < 10^9 and mult <= 3.6e6: the product fits in 64 bits */
	if ((frac * mult) % scale != 0)
		return -1; /* not a whole number of milliseconds */
	frac = frac * mult / scale;
	if (whole + frac > (uint64_t)LC_DURATION_MAX_MS)
		return -1;
	*ms = (int64_t)(whole + frac);
	return 0;
}

int64_t lc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int lc_poll_ms(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - lc_now_ms();
	if (left <= 0)
		return 0;
	return left > 1000000 ? 1000000 : (int)left;
}

const char *lc_masked(const char *s, char *buf)
{
	if (s == NULL)
		s = "";
	return log_masked(s, strlen(s), buf, LC_MASK_BUF - 4);
}
