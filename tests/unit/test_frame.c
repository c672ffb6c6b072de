/*
 * test_frame.c - line framing: splits at every byte and at random points
 * against a reference splitter, CRLF, empty and blank lines, the max_line boundary,
 * sticky errors, binary bytes, and the buffer's release and bounds.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/frame.h"

#define MAXL 64

typedef struct lines {
	char *v[4096];
	size_t len[4096];
	size_t n;
	int err; /* 0 or FRAME_TOO_LONG */
} lines_t;

static void lines_add(lines_t *ls, const char *p, size_t n)
{
	cr_assert_lt(ls->n, 4096u);
	ls->v[ls->n] = malloc(n ? n : 1);
	cr_assert_not_null(ls->v[ls->n]);
	memcpy(ls->v[ls->n], p, n);
	ls->len[ls->n] = n;
	ls->n++;
}

static void lines_free(lines_t *ls)
{
	size_t i;

	for (i = 0; i < ls->n; i++)
		free(ls->v[i]);
	ls->n = 0;
}

static bool blank(const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t')
			return false;
	return true;
}

/* Takes every complete line; records a FRAME_TOO_LONG. */
static void drain(frame_t *f, lines_t *ls)
{
	const char *line;
	size_t len;
	int rc;

	while ((rc = frame_next(f, &line, &len)) == FRAME_LINE) {
		cr_assert_gt(len, 0u, "empty lines are skipped");
		cr_assert_not(blank(line, len), "blank lines are skipped");
		lines_add(ls, line, len);
	}
	if (rc == FRAME_TOO_LONG)
		ls->err = rc;
	else
		cr_assert_eq(rc, FRAME_NEED_MORE);
}

/* Feeds in[0..n) in pieces of the given sizes (cycled), draining after
 * each piece unless lazy (then only at the end). */
static void run_split(const char *in, size_t n, size_t max_line,
		      const size_t *sizes, size_t nsizes, bool lazy,
		      lines_t *out)
{
	frame_t f;
	size_t off = 0, k = 0;

	frame_init(&f, max_line);
	memset(out, 0, sizeof(*out));
	while (off < n && !out->err) {
		size_t m = sizes[k++ % nsizes];
		int rc;

		if (m > n - off)
			m = n - off;
		rc = frame_feed(&f, in + off, m);
		off += m;
		if (rc == FRAME_TOO_LONG) {
			out->err = rc;
			break;
		}
		cr_assert_eq(rc, 0);
		if (!lazy)
			drain(&f, out);
	}
	if (!out->err)
		drain(&f, out);
	if (out->err) {
		cr_assert_null(f.buf, "the buffer goes with the error");
		cr_assert_eq(frame_pending(&f), 0u);
	}
	frame_free(&f);
}

/* The specification, written plainly: split on '\n', drop one '\r' before
 * it, skip empty lines and lines of only spaces and tabs; the first line over max_line, complete or not (a
 * final '\r' of a partial line not counted), is an error. */
static void reference(const char *in, size_t n, size_t max_line, lines_t *out)
{
	size_t s = 0, i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < n; i++) {
		size_t len;

		if (in[i] != '\n')
			continue;
		len = i - s;
		if (len > 0 && in[i - 1] == '\r')
			len--;
		if (len > max_line) {
			out->err = FRAME_TOO_LONG;
			return;
		}
		if (!blank(in + s, len))
			lines_add(out, in + s, len);
		s = i + 1;
	}
	if (n - s > 0) {
		size_t len = n - s;

		if (in[n - 1] == '\r')
			len--;
		if (len > max_line)
			out->err = FRAME_TOO_LONG;
	}
}

static void assert_same(const lines_t *got, const lines_t *want, const char *what)
{
	size_t i;

	cr_assert_eq(got->err, want->err, "%s: error %d, want %d", what,
		     got->err, want->err);
	cr_assert_eq(got->n, want->n, "%s: %zu lines, want %zu", what, got->n,
		     want->n);
	for (i = 0; i < got->n; i++) {
		cr_assert_eq(got->len[i], want->len[i], "%s: line %zu length", what, i);
		cr_assert_eq(memcmp(got->v[i], want->v[i], got->len[i]), 0,
			     "%s: line %zu bytes", what, i);
	}
}

/* Checks that feeding `in` in one piece gives exactly the lines given. */
static void expect_lines(const char *in, size_t n, size_t max_line, int err,
			 const char *const *want, size_t nwant)
{
	static const size_t whole[] = {SIZE_MAX};
	static const size_t one[] = {1};
	lines_t got;
	size_t i, pass;

	for (pass = 0; pass < 2; pass++) {
		run_split(in, n, max_line, pass ? one : whole, 1, false, &got);
		cr_assert_eq(got.err, err, "pass %zu: err %d want %d", pass, got.err, err);
		cr_assert_eq(got.n, nwant, "pass %zu: %zu lines, want %zu", pass,
			     got.n, nwant);
		for (i = 0; i < nwant; i++) {
			cr_assert_eq(got.len[i], strlen(want[i]));
			cr_assert_eq(memcmp(got.v[i], want[i], got.len[i]), 0,
				     "pass %zu line %zu", pass, i);
		}
		lines_free(&got);
	}
}

Test(frame, byte_by_byte_gives_each_line)
{
	static const char in[] = "{\"op\":\"ping\"}\n{\"id\":1,\"op\":\"stats\"}\nlast\n";
	static const char *const want[] = {"{\"op\":\"ping\"}",
					   "{\"id\":1,\"op\":\"stats\"}", "last"};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 3);
}

Test(frame, every_split_point_matches_reference)
{
	static const char in[] = "ab\r\n\ncd\r\r\n\r\nxyz\n\n0123456789\nq\r";
	size_t n = sizeof(in) - 1, cut;
	lines_t want, got;

	reference(in, n, 10, &want);
	cr_assert_eq(want.n, 4u); /* ab, cd\r, xyz, 0123456789 */
	for (cut = 1; cut < n; cut++) {
		size_t sizes[2] = {cut, SIZE_MAX};

		run_split(in, n, 10, sizes, 2, false, &got);
		assert_same(&got, &want, "two pieces");
		lines_free(&got);
	}
	lines_free(&want);
}

Test(frame, random_splits_match_reference, .timeout = 60)
{
	static const char alphabet[] = {'a', 'b', '{', '"', ' ', ' ', '\t', '\r',
					'\n', '\n', '\0', (char)0xff, (char)0xc3};
	char in[600];
	size_t sizes[8];
	unsigned iter;
	int errors = 0, clean = 0;

	srand(12345);
	for (iter = 0; iter < 5000; iter++) {
		size_t n = (size_t)(rand() % (int)sizeof(in)), i, max_line;
		lines_t want, got;

		for (i = 0; i < n; i++) {
			/* Mostly short lines, sometimes a long run. */
			if (rand() % 40 == 0) {
				size_t run = (size_t)(rand() % 30);
				for (; run > 0 && i < n; run--)
					in[i++] = 'x';
				if (i >= n)
					break;
			}
			in[i] = alphabet[rand() % (int)sizeof(alphabet)];
		}
		max_line = (size_t)(rand() % 12);
		if (iter % 3 == 0)
			max_line += 40; /* few or no errors */
		for (i = 0; i < 8; i++)
			sizes[i] = 1 + (size_t)(rand() % 17);

		reference(in, n, max_line, &want);
		if (want.err)
			errors++;
		else
			clean++;
		run_split(in, n, max_line, sizes, 8, false, &got);
		assert_same(&got, &want, "random pieces");
		lines_free(&got);
		run_split(in, n, max_line, sizes, 8, true, &got);
		assert_same(&got, &want, "random pieces, lazy drain");
		lines_free(&got);
		sizes[0] = 1;
		run_split(in, n, max_line, sizes, 1, false, &got);
		assert_same(&got, &want, "bytes");
		lines_free(&got);
		lines_free(&want);
	}
	/* The generator must exercise both outcomes. */
	cr_assert_gt(errors, 100);
	cr_assert_gt(clean, 100);
}

Test(frame, crlf_is_one_line_end)
{
	static const char in[] = "a\r\nb\nc\r\n";
	static const char *const want[] = {"a", "b", "c"};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 3);
}

Test(frame, only_one_cr_is_dropped)
{
	static const char in[] = "a\r\r\n";
	static const char *const want[] = {"a\r"};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 1);
}

Test(frame, lone_cr_inside_a_line_is_kept)
{
	static const char in[] = "a\rb\n";
	static const char *const want[] = {"a\rb"};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 1);
}

Test(frame, pending_cr_waits_for_newline)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, MAXL);
	cr_assert_eq(frame_feed(&f, "x\r", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_pending(&f), 2u);
	cr_assert_eq(frame_feed(&f, "\n", 1), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 1u);
	cr_assert_eq(line[0], 'x');
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	frame_free(&f);
}

Test(frame, empty_lines_are_skipped)
{
	static const char in[] = "\n\n\r\n\r\nabc\n\n\r\n";
	static const char *const want[] = {"abc"};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 1);
	expect_lines("\r\n\n\r\n", 5, MAXL, 0, NULL, 0);
}

Test(frame, blank_lines_are_skipped)
{
	static const char in[] = " \n\t\n \t \r\n{\"op\":\"ping\"}\n  a \n\t\r\n \t";
	static const char *const want[] = {"{\"op\":\"ping\"}", "  a "};

	expect_lines(in, sizeof(in) - 1, MAXL, 0, want, 2);
	expect_lines(" \r\n\t\t\n \n", 8, MAXL, 0, NULL, 0);
}

Test(frame, blank_means_only_spaces_and_tabs)
{
	/* One '\r' ends the line; any other byte makes it a line to answer. */
	static const char in[] = " \r \n\r \n \r\r\n\v\n \f\n\0\n";
	static const char *const want[] = {" \r ", "\r ", " \r", "\v", " \f"};
	lines_t got;
	static const size_t whole[] = {SIZE_MAX};

	expect_lines(in, sizeof(in) - 3, MAXL, 0, want, 5);
	run_split(in, sizeof(in) - 1, MAXL, whole, 1, false, &got);
	cr_assert_eq(got.n, 6u, "a NUL byte is not blank");
	cr_assert_eq(got.len[5], 1u);
	cr_assert_eq(got.v[5][0], '\0');
	lines_free(&got);
}

Test(frame, blank_line_over_max_line_is_too_long)
{
	expect_lines("    \n", 5, 4, 0, NULL, 0);
	expect_lines("     \n", 6, 4, FRAME_TOO_LONG, NULL, 0);
	expect_lines("\t\t\t\t\t", 5, 4, FRAME_TOO_LONG, NULL, 0);
}

Test(frame, only_blank_lines_release_the_buffer)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 8);
	cr_assert_eq(frame_feed(&f, "  \r\n\t\n", 6), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_null(f.buf);
	cr_assert_eq(frame_pending(&f), 0u);
	/* A blank start that goes on into a line is kept whole. */
	cr_assert_eq(frame_feed(&f, "  ", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_feed(&f, "x\n", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 3u);
	cr_assert_eq(memcmp(line, "  x", 3), 0);
	frame_free(&f);
}

Test(frame, only_empty_lines_release_the_buffer)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "\r\n\n\r\n", 5), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_null(f.buf);
	cr_assert_eq(frame_pending(&f), 0u);
	frame_free(&f);
}

/* The boundary with max_line 4, each input fed whole and byte by byte. */
Test(frame, exactly_max_line_is_accepted)
{
	static const char *const want[] = {"abcd"};

	expect_lines("abcd\n", 5, 4, 0, want, 1);
	expect_lines("abcd\r\n", 6, 4, 0, want, 1);
}

Test(frame, max_line_plus_one_is_too_long)
{
	expect_lines("abcde\n", 6, 4, FRAME_TOO_LONG, NULL, 0);
	expect_lines("abcde\r\n", 7, 4, FRAME_TOO_LONG, NULL, 0);
	/* Only one '\r' is the line end: "abcd\r" is 5 bytes of content. */
	expect_lines("abcd\r\r\n", 7, 4, FRAME_TOO_LONG, NULL, 0);
}

Test(frame, pending_cr_at_boundary_is_not_counted)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "abcd\r", 5), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_pending(&f), 5u);
	cr_assert_eq(frame_feed(&f, "\n", 1), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 4u);
	cr_assert_eq(memcmp(line, "abcd", 4), 0);
	frame_free(&f);

	/* ... but a byte after it makes the line too long at once. */
	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "abcd\r", 5), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_feed(&f, "x", 1), FRAME_TOO_LONG);
	frame_free(&f);
}

Test(frame, too_long_detected_without_newline)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "abcd", 4), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_feed(&f, "e", 1), FRAME_TOO_LONG);
	frame_free(&f);

	/* frame_next finds it too when the feed came in one piece. */
	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "abcde", 5), FRAME_TOO_LONG);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_TOO_LONG);
	frame_free(&f);
}

Test(frame, default_max_line_boundary)
{
	size_t max = 65536, n;
	char *in = malloc(max + 3);
	frame_t f;
	const char *line;
	size_t len;

	cr_assert_not_null(in);
	memset(in, 'z', max + 1);
	in[max] = '\n';
	frame_init(&f, max);
	cr_assert_eq(frame_feed(&f, in, max + 1), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, max);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	/* max + 1 bytes in small pieces: the error comes with the last byte. */
	memset(in, 'z', max + 1);
	for (n = 0; n + 1000 <= max; n += 1000)
		cr_assert_eq(frame_feed(&f, in + n, 1000), 0);
	cr_assert_eq(frame_feed(&f, in + n, max - n), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_eq(frame_feed(&f, "z", 1), FRAME_TOO_LONG);
	frame_free(&f);
	free(in);
}

Test(frame, error_is_sticky)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "abcdefg", 7), FRAME_TOO_LONG);
	cr_assert_eq(f.err, FRAME_TOO_LONG);
	cr_assert_null(f.buf);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_TOO_LONG);
	cr_assert_eq(frame_feed(&f, "\nok\n", 4), FRAME_TOO_LONG);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_TOO_LONG);
	cr_assert_eq(frame_feed(&f, "", 0), FRAME_TOO_LONG);
	cr_assert_eq(frame_pending(&f), 0u);
	cr_assert_null(f.buf, "nothing is buffered after the error");
	frame_free(&f);
}

Test(frame, lines_before_a_too_long_one_come_first)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, 4);
	cr_assert_eq(frame_feed(&f, "ok\r\n\nfine\nabcdefgh", 18), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 2u);
	cr_assert_eq(memcmp(line, "ok", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 4u);
	cr_assert_eq(memcmp(line, "fine", 4), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_TOO_LONG);
	frame_free(&f);
}

Test(frame, binary_bytes_pass_through)
{
	static const char in[] = "\0\x01\xff\xfe\x7f\r\n\x80\x00z\n";
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, MAXL);
	cr_assert_eq(frame_feed(&f, in, sizeof(in) - 1), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 5u);
	cr_assert_eq(memcmp(line, "\0\x01\xff\xfe\x7f", 5), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 3u);
	cr_assert_eq(memcmp(line, "\x80\x00z", 3), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	frame_free(&f);
}

Test(frame, buffer_released_when_drained)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, MAXL);
	cr_assert_null(f.buf);
	cr_assert_eq(frame_feed(&f, "abc\nde", 6), 0);
	cr_assert_not_null(f.buf);
	cr_assert_eq(frame_pending(&f), 6u);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_not_null(f.buf, "a partial line stays");
	cr_assert_eq(frame_pending(&f), 2u);
	cr_assert_eq(frame_feed(&f, "f\n", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 3u);
	cr_assert_eq(memcmp(line, "def", 3), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_NEED_MORE);
	cr_assert_null(f.buf);
	cr_assert_eq(f.cap, 0u);
	cr_assert_eq(frame_pending(&f), 0u);
	frame_free(&f);
}

Test(frame, free_with_partial_line_and_reinit)
{
	frame_t f;
	const char *line;
	size_t len;

	frame_init(&f, MAXL);
	cr_assert_eq(frame_feed(&f, "partial", 7), 0);
	frame_free(&f);
	cr_assert_null(f.buf);
	frame_free(NULL);
	frame_init(&f, MAXL);
	cr_assert_eq(frame_feed(&f, "x\n", 2), 0);
	cr_assert_eq(frame_next(&f, &line, &len), FRAME_LINE);
	cr_assert_eq(len, 1u);
	frame_free(&f);
}

Test(frame, buffer_stays_bounded, .timeout = 30)
{
	/* 200000 lines of 10 bytes each: one piece of 5 bytes, then pieces of
	 * 11, so a partial line is always left and the buffer never empties;
	 * it must be compacted instead of growing with the total input. */
	static const char chunk[] = "0123456789\n";
	frame_t f;
	const char *line;
	size_t len, fed = 0, total = 200000 * 11, lines = 0, maxcap = 0;
	char piece[11];
	int rc;

	frame_init(&f, 16);
	while (fed < total) {
		size_t i, m = fed == 0 ? 5 : 11;

		if (m > total - fed)
			m = total - fed;
		for (i = 0; i < m; i++)
			piece[i] = chunk[(fed + i) % 11];
		cr_assert_eq(frame_feed(&f, piece, m), 0);
		fed += m;
		while ((rc = frame_next(&f, &line, &len)) == FRAME_LINE) {
			cr_assert_eq(len, 10u);
			cr_assert_eq(memcmp(line, chunk, 10), 0);
			lines++;
		}
		cr_assert_eq(rc, FRAME_NEED_MORE);
		if (fed < total) {
			cr_assert_eq(frame_pending(&f), 5u);
			/* The partial line is not scanned again. */
			cr_assert_eq(f.scanned, 5u);
		}
		if (f.cap > maxcap)
			maxcap = f.cap;
	}
	cr_assert_eq(lines, 200000u);
	cr_assert_leq(maxcap, 1024u, "buffer grew to %zu", maxcap);
	cr_assert_null(f.buf);
	frame_free(&f);
}
