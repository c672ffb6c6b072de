/*
 * fuzz_frame.c - libFuzzer target for the line framer (protocol/frame.c).
 *
 * Input: byte 0 picks max_line (0..95), bytes 1-2 seed the split points,
 * the rest is the stream. The stream is fed in pieces of pseudo-random
 * sizes (1..32 bytes, now and then all that is left), lines taken after
 * every piece or only now and then. Checked after every call:
 * - every line returned is at most max_line bytes, holds no '\n' and is
 *   not blank (empty, or only spaces and tabs);
 * - the lines are exactly those of a plain reference splitter (the spec of
 *   frame.h written naively), in order, and each sits in the stream where
 *   the reference found it: the lines reassemble the input;
 * - the error comes exactly when the reference says, and is sticky: once
 *   FRAME_TOO_LONG, every feed and every next says so and nothing is
 *   buffered;
 * - without an error, what stays pending is exactly the bytes after the
 *   last complete line.
 * Any failed check aborts (libFuzzer reports it as a crash).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/frame.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_frame: check failed: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                    \
			abort();                                               \
		}                                                              \
	} while (0)

static bool blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t')
			return false;
	return true;
}

/* The reference: where each line starts and how long it is, the first
 * too-long line, and where the complete lines end. */
typedef struct ref {
	size_t *start, *len, n;
	bool too_long;
	size_t tail; /* first byte after the last '\n' (no error) */
} ref_t;

static void reference(const char *in, size_t n, size_t max_line, ref_t *r)
{
	size_t s = 0;

	r->start = malloc((n + 1) * sizeof(size_t));
	r->len = malloc((n + 1) * sizeof(size_t));
	CHECK(r->start != NULL && r->len != NULL);
	r->n = 0;
	r->too_long = false;
	for (size_t i = 0; i < n; i++) {
		size_t len;

		if (in[i] != '\n')
			continue;
		len = i - s;
		if (len > 0 && in[i - 1] == '\r')
			len--;
		if (len > max_line) {
			r->too_long = true;
			r->tail = s;
			return;
		}
		if (!blank(in + s, len)) {
			r->start[r->n] = s;
			r->len[r->n] = len;
			r->n++;
		}
		s = i + 1;
	}
	r->tail = s;
	if (n > s) {
		size_t len = n - s;

		if (in[n - 1] == '\r')
			len--;
		if (len > max_line)
			r->too_long = true;
	}
}

static uint32_t next_rand(uint32_t *state)
{
	*state = *state * 1103515245u + 12345u;
	return *state >> 16;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in, *line;
	size_t n, max_line, off = 0, got = 0, len;
	uint32_t rnd;
	bool err = false;
	frame_t f;
	ref_t r;
	int rc;

	if (size < 3)
		return 0;
	max_line = data[0] % 96;
	rnd = (uint32_t)data[1] << 8 | data[2];
	in = (const char *)data + 3;
	n = size - 3;
	reference(in, n, max_line, &r);

	frame_init(&f, max_line);
	while (off < n && !err) {
		size_t piece = 1 + next_rand(&rnd) % 32;

		if (next_rand(&rnd) % 16 == 0 || piece > n - off)
			piece = n - off;
		rc = frame_feed(&f, in + off, piece);
		off += piece;
		CHECK(rc == 0 || rc == FRAME_TOO_LONG);
		if (rc == FRAME_TOO_LONG) {
			err = true;
			break;
		}
		if (next_rand(&rnd) % 4 == 0 && off < n)
			continue; /* take the lines later, several at once */
		while ((rc = frame_next(&f, &line, &len)) == FRAME_LINE) {
			CHECK(len <= max_line);
			CHECK(memchr(line, '\n', len) == NULL);
			CHECK(!blank(line, len));
			CHECK(got < r.n);
			CHECK(len == r.len[got]);
			CHECK(memcmp(line, in + r.start[got], len) == 0);
			got++;
		}
		if (rc == FRAME_TOO_LONG)
			err = true;
		else
			CHECK(rc == FRAME_NEED_MORE);
	}
	if (!err) {
		while ((rc = frame_next(&f, &line, &len)) == FRAME_LINE) {
			CHECK(got < r.n);
			CHECK(len == r.len[got] && memcmp(line, in + r.start[got], len) == 0);
			got++;
		}
		err = rc == FRAME_TOO_LONG;
	}

	CHECK(err == r.too_long);
	/* Every line before a long one comes first: a feed reports a long
	 * line only once it is the first pending one. */
	CHECK(got == r.n);
	if (err) {
		CHECK(f.buf == NULL && frame_pending(&f) == 0);
		CHECK(frame_feed(&f, "ok\n", 3) == FRAME_TOO_LONG);
		CHECK(frame_next(&f, &line, &len) == FRAME_TOO_LONG);
		CHECK(frame_feed(&f, "", 0) == FRAME_TOO_LONG);
		CHECK(f.buf == NULL && frame_pending(&f) == 0);
	} else {
		/* Blank lines after the last line are consumed too: only the
		 * partial line after the last '\n' stays. */
		CHECK(frame_pending(&f) == n - r.tail);
		if (frame_pending(&f) == 0)
			CHECK(f.buf == NULL);
	}
	frame_free(&f);
	free(r.start);
	free(r.len);
	return 0;
}
