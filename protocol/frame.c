/*
 * frame.c - I/O-free line framing with a hard maximum line length.
 *
 * Invariants of a frame_t (see frame.h for the contract):
 * - buf[start, len) are the bytes fed and not yet returned as lines;
 *   buf[0, start) are dead (already returned or skipped) and get reclaimed
 *   by the next feed that needs room.
 * - buf[start, start + scanned) holds no '\n'. When the first line is
 *   complete, buf[start + scanned] is its '\n'. Bytes are scanned once: a
 *   scan always resumes at start + scanned, so framing is O(bytes fed).
 * - Only the first pending line is ever checked for length, so every line
 *   before a too-long one is still returned, in order, before the error.
 * - A line frame_next returns is never blank: it holds a byte other than
 *   ' ' and '\t' (blank lines are consumed and dropped, as empty ones).
 * - buf is NULL whenever nothing is pending: an idle connection holds no
 *   buffer. Once err is set (FRAME_TOO_LONG) it never clears and nothing is
 *   buffered any more.
 *
 * The frame owns buf. Out of memory aborts.
 */
#include "protocol/frame.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FRAME_MIN_CAP 256

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (q == NULL) {
		fprintf(stderr, "frame: out of memory (%zu bytes)\n", n);
		abort();
	}
	return q;
}

static void release(frame_t *f)
{
	free(f->buf);
	f->buf = NULL;
	f->len = 0;
	f->cap = 0;
	f->start = 0;
	f->scanned = 0;
}

void frame_init(frame_t *f, size_t max_line)
{
	memset(f, 0, sizeof(*f));
	f->max_line = max_line;
}

void frame_free(frame_t *f)
{
	if (f == NULL)
		return;
	release(f);
}

size_t frame_pending(const frame_t *f)
{
	return f->len - f->start;
}

/* Makes room for n more bytes after len. Moves the pending bytes to the
 * front when that frees enough room and the dead prefix is worth reclaiming
 * (pending + n fits in half the buffer), else grows to at least twice the
 * size; either way the copying is amortised O(1) per byte. */
static void reserve(frame_t *f, size_t n)
{
	size_t live = f->len - f->start;
	size_t need, cap;

	if (f->cap - f->len >= n)
		return;
	if (n > SIZE_MAX / 2 - live) {
		fprintf(stderr, "frame: buffer size overflow\n");
		abort();
	}
	need = live + n;
	if (f->start > 0 && need <= f->cap / 2) {
		memmove(f->buf, f->buf + f->start, live);
		f->len = live;
		f->start = 0;
		return;
	}
	cap = f->cap * 2;
	if (cap < need)
		cap = need;
	if (cap < FRAME_MIN_CAP)
		cap = FRAME_MIN_CAP;
	if (f->start > 0) {
		/* Copy only the live bytes into the new block. */
		char *nbuf = xrealloc(NULL, cap);

		memcpy(nbuf, f->buf + f->start, live);
		free(f->buf);
		f->buf = nbuf;
		f->len = live;
		f->start = 0;
	} else {
		f->buf = xrealloc(f->buf, cap);
	}
	f->cap = cap;
}

/* Looks for the end of the first pending line, resuming after the bytes
 * already scanned. Returns 1 with *nl set to the index of its '\n', 0 when
 * the line is still incomplete, or FRAME_TOO_LONG (and sets the sticky
 * error) when the line is already known to exceed max_line. */
static int scan(frame_t *f, size_t *nl)
{
	size_t from = f->start + f->scanned;
	const char *p = NULL;
	size_t linelen;

	if (from < f->len)
		p = memchr(f->buf + from, '\n', f->len - from);
	if (p != NULL) {
		*nl = (size_t)(p - f->buf);
		f->scanned = *nl - f->start;
		linelen = f->scanned;
		if (linelen > 0 && f->buf[*nl - 1] == '\r')
			linelen--;
		if (linelen <= f->max_line)
			return 1;
	} else {
		f->scanned = f->len - f->start;
		linelen = f->scanned;
		/* A final '\r' may be the start of "\r\n": not counted yet. */
		if (linelen > 0 && f->buf[f->len - 1] == '\r')
			linelen--;
		if (linelen <= f->max_line)
			return 0;
	}
	f->err = FRAME_TOO_LONG;
	release(f);
	return FRAME_TOO_LONG;
}

int frame_feed(frame_t *f, const char *data, size_t n)
{
	size_t nl;
	int rc;

	if (f->err)
		return f->err;
	if (n == 0)
		return 0;
	if (f->start == f->len) {
		/* Everything was taken: reuse the block from its start. */
		f->start = f->len = 0;
		f->scanned = 0;
	}
	reserve(f, n);
	memcpy(f->buf + f->len, data, n);
	f->len += n;
	/* Report an over-long first line at once (lines after it are checked
	 * when frame_next reaches them, so earlier lines still come first). */
	rc = scan(f, &nl);
	return rc == FRAME_TOO_LONG ? rc : 0;
}

/* True when line[0, n) is only spaces and tabs (or empty). Only the first
 * bytes are read for a real request, which starts with '{'. */
static bool is_blank(const char *line, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (line[i] != ' ' && line[i] != '\t')
			return false;
	return true;
}

int frame_next(frame_t *f, const char **line, size_t *len)
{
	size_t nl, n;
	int rc;

	for (;;) {
		if (f->err)
			return f->err;
		if (f->start == f->len) {
			if (f->buf != NULL)
				release(f);
			return FRAME_NEED_MORE;
		}
		rc = scan(f, &nl);
		if (rc != 1)
			return rc;
		n = nl - f->start;
		if (n > 0 && f->buf[nl - 1] == '\r')
			n--;
		*line = f->buf + f->start;
		*len = n;
		f->start = nl + 1;
		f->scanned = 0;
		if (!is_blank(*line, n))
			return FRAME_LINE;
		/* A blank line ("\n", "\r\n", " \t\r\n"...): skip it. */
	}
}
