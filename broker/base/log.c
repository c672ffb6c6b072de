/*
 * log.c - leveled log lines on stderr and the allocation helpers that abort
 * on out of memory. A line is written with one write(2) call so lines from
 * one process never interleave.
 */
#include "broker/base/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

log_level_t log_threshold = LOG_INFO;
bool log_json;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* A JSON string of v, or "?" when v is not valid UTF-8 (a cut line may
 * end inside a character): a log line must stay valid JSON. */
static json_t *utf8_or_mark(const char *v)
{
	json_t *j = json_string(v);

	return j ? j : json_string("?");
}

/* Turns "k=v k2=\"v 2\"" into members of obj; a quoted value ends at a
 * quote followed by a space or the end. */
static void kv_to_json(json_t *obj, char *p)
{
	while (*p) {
		char *key, *val, *eq, *sp;
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		key = p;
		eq = strchr(p, '=');
		sp = strchr(p, ' ');
		if (!eq || (sp && sp < eq)) {
			/* Not key=value: keep the rest as one text member. */
			json_object_set_new(obj, "text", utf8_or_mark(key));
			return;
		}
		*eq = '\0';
		val = eq + 1;
		if (*val == '"') {
			char *end = ++val;
			while (*end && !(end[0] == '"' && (end[1] == ' ' || end[1] == '\0')))
				end++;
			p = *end ? end + 1 : end;
			*end = '\0';
		} else {
			char *end = strchr(val, ' ');
			p = end ? end + 1 : val + strlen(val);
			if (end)
				*end = '\0';
		}
		json_object_set_new(obj, key, utf8_or_mark(val));
	}
}

static size_t format_json(char *line, size_t cap, const char *ts, const char *level, char *kv)
{
	json_t *obj = json_object();
	char *out;
	size_t n;

	json_object_set_new(obj, "ts", json_string(ts));
	json_object_set_new(obj, "level", json_string(level));
	kv_to_json(obj, kv);
	out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(obj);
	if (!out)
		return 0;
	n = strlen(out);
	if (n > cap - 2) {
		/* Never a cut object: a short valid one says what happened. */
		free(out);
		n = (size_t)snprintf(line, cap - 2,
		                     "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"log line too long\"}",
		                     ts, level);
		return n < cap - 2 ? n : cap - 3;
	}
	memcpy(line, out, n);
	free(out);
	return n;
}

void log_write(log_level_t level, const char *fmt, ...)
{
	char line[2048];
	struct timespec ts;
	struct tm tm;
	size_t n;
	va_list ap;
	int w;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	w = snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s ",
	             ts.tv_nsec / 1000000L, level_names[level & 3]);
	n += (w > 0) ? (size_t)w : 0;
	va_start(ap, fmt);
	w = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (w < 0)
		w = 0;
	n += (size_t)w;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (log_json) {
		char ts[40], kv[sizeof(line)];
		size_t head = strcspn(line, " ");
		memcpy(ts, line, head < sizeof(ts) - 1 ? head : sizeof(ts) - 1);
		ts[head < sizeof(ts) - 1 ? head : sizeof(ts) - 1] = '\0';
		line[n] = '\0';
		/* Past "TS level=LEVEL ": the caller's key=value pairs. */
		snprintf(kv, sizeof(kv), "%s", line + head + 1 + strlen("level=") + strlen(level_names[level & 3]) + 1);
		n = format_json(line, sizeof(line), ts, level_names[level & 3], kv);
	}
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nowhere left to report it. */
	}
}

const char *log_token(const char *token, char *buf)
{
	size_t n = strnlen(token, 8);

	memcpy(buf, token, n);
	memcpy(buf + n, "..", 3);
	return buf;
}

const char *log_masked(const char *s, size_t len, char *buf, size_t max)
{
	size_t n = len < max ? len : max;

	for (size_t k = 0; k < n; k++) {
		unsigned char c = (unsigned char)s[k];
		buf[k] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
	}
	if (len > max) {
		memcpy(buf + n, "...", 4);
	} else {
		buf[n] = '\0';
	}
	return buf;
}

_Noreturn void log_abort(const char *file, int line, const char *cond)
{
	log_write(LOG_ERROR, "msg=\"invariant violated, aborting\" where=%s:%d cond=\"%s\"",
	          file, line, cond);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		log_abort(__FILE__, __LINE__, "out of memory");
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		log_abort(__FILE__, __LINE__, "out of memory");
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		log_abort(__FILE__, __LINE__, "out of memory");
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}
