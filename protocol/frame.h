/*
 * frame.h - I/O-free line framing with a hard maximum line length.
 *
 * Feed bytes as they arrive, then take complete lines. A line ends at "\n";
 * a "\r" right before it is dropped. Blank lines are skipped: empty ones and
 * those of only spaces and tabs (PROTOCOL.md: no answer at all). A line longer
 * than max_line bytes (not counting its "\n" or "\r\n") is an error, detected
 * as soon as more than max_line bytes (a final pending "\r" not counted) have
 * arrived without a newline. Errors are sticky: once FRAME_TOO_LONG is
 * returned, every later call returns it too (hiredis read.c does the same).
 *
 * Memory: the buffer holds at most one partial line plus whatever the last
 * feed brought; it is released when empty, so an idle connection costs no
 * buffer.
 */
#ifndef LB_PROTOCOL_FRAME_H
#define LB_PROTOCOL_FRAME_H

#include <stddef.h>

enum {
	FRAME_NEED_MORE = 0, /* no complete line yet */
	FRAME_LINE = 1,      /* *line / *len set */
	FRAME_TOO_LONG = -1, /* sticky */
};

typedef struct frame {
	char *buf;       /* owned; NULL when empty */
	size_t len;      /* bytes in buf */
	size_t cap;      /* allocated size of buf */
	size_t start;    /* first byte not yet returned as a line */
	size_t scanned;  /* bytes after start already known to hold no '\n' */
	size_t max_line;
	int err;         /* 0 or FRAME_TOO_LONG */
} frame_t;

void frame_init(frame_t *f, size_t max_line);
/* Frees the buffer; the frame may be initialised again. */
void frame_free(frame_t *f);
/* Appends n bytes. Returns 0, or FRAME_TOO_LONG (sticky). Never fails on
 * memory (aborts). A line returned by frame_next is invalid after this. */
int frame_feed(frame_t *f, const char *data, size_t n);
/* Takes the next complete line that is not blank: FRAME_LINE with *line (not
 * NUL-terminated, without "\n" or "\r\n") and *len; FRAME_NEED_MORE; or
 * FRAME_TOO_LONG. */
int frame_next(frame_t *f, const char **line, size_t *len);
/* Bytes buffered and not yet returned as lines. */
size_t frame_pending(const frame_t *f);

#endif
