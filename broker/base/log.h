/*
 * log.h - one logging macro that checks the level before formatting.
 *
 * Lines go to stderr: "TIMESTAMP level=LEVEL msg..." with key=value pairs
 * written by the caller ("session=s12 lock=..."). Never log a full lease
 * token (use log_token) or a secret; never echo raw input (use log_masked).
 */
#ifndef LB_BROKER_LOG_H
#define LB_BROKER_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum log_level {
	LOG_DEBUG = 0,
	LOG_INFO = 1,
	LOG_WARN = 2,
	LOG_ERROR = 3,
} log_level_t;

extern log_level_t log_threshold;
extern bool log_json; /* one JSON object a line instead of key=value text */

#if defined(__GNUC__)
#define LB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LB_PRINTF(a, b)
#endif

void log_write(log_level_t level, const char *fmt, ...) LB_PRINTF(2, 3);

#define LOG(level, ...)                                                        \
	do {                                                                       \
		if ((level) >= log_threshold)                                          \
			log_write((level), __VA_ARGS__);                                   \
	} while (0)
#define LOG_DEBUG_(...) LOG(LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO_(...) LOG(LOG_INFO, __VA_ARGS__)
#define LOG_WARN_(...) LOG(LOG_WARN, __VA_ARGS__)
#define LOG_ERROR_(...) LOG(LOG_ERROR, __VA_ARGS__)

/* The first 8 characters of a token and "..", in a buffer of at least
 * LOG_TOKEN_LEN bytes: enough to correlate log lines, useless to an attacker. */
#define LOG_TOKEN_LEN 11
const char *log_token(const char *token, char *buf);

/* Copies at most max bytes of s into buf (size max + 4) with every byte
 * outside printable ASCII, and '"' and '\\', replaced by '?'; appends "..."
 * when cut. */
const char *log_masked(const char *s, size_t len, char *buf, size_t max);

/* Invariants abort with a message; recoverable surprises log and go on. */
#define REQUIRE(cond)                                                          \
	do {                                                                       \
		if (!(cond))                                                           \
			log_abort(__FILE__, __LINE__, #cond);                              \
	} while (0)
#define FAILS_ASSERT(cond)                                                     \
	(!(cond) ? (log_write(LOG_ERROR, "msg=\"assertion failed\" where=%s:%d cond=\"%s\"", \
	                      __FILE__, __LINE__, #cond), 1) : 0)
_Noreturn void log_abort(const char *file, int line, const char *cond);

/* Allocation that aborts on out of memory (STYLE.md: OOM aborts). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrndup(const char *s, size_t n);

#endif
