/*
 * status.c - the client's errors: the table of statuses (one per protocol
 * error code, from LBC_STATUS_MAP in lbclient.h, plus the client's own),
 * lost reasons, and filling an lbc_error_t from a status or from a broker
 * error answer.
 *
 * Messages are copied, cut to fit, and never hold a secret (the callers
 * never pass one).
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *code;
	const char *msg;
} table[LBC_STATUS_COUNT] = {
#define LBC_STATUS_ROW(name, code, msg) [LBC_##name] = {code, msg},
	LBC_STATUS_MAP(LBC_STATUS_ROW)
#undef LBC_STATUS_ROW
};

static const char *const reasons[] = {
	[LBC_LOST_NONE] = "",
	[LBC_LOST_EXPIRED] = "expired",
	[LBC_LOST_GONE] = "gone",
	[LBC_LOST_REDIS_UNAVAILABLE] = "redis_unavailable",
	[LBC_LOST_MAX_HOLD] = "max_hold",
	[LBC_LOST_DISCONNECTED] = "disconnected",
	[LBC_LOST_CLOSED] = "closed",
	[LBC_LOST_NOT_HELD] = "not_held",
	[LBC_LOST_OTHER] = "other",
};

const char *lbc_status_code(lbc_status st)
{
	if ((unsigned)st >= LBC_STATUS_COUNT)
		return "unknown_code";
	return table[st].code;
}

const char *lbc_strerror(lbc_status st)
{
	if ((unsigned)st >= LBC_STATUS_COUNT)
		return "unknown status";
	return table[st].msg;
}

lbc_status lbc_status_from_code(const char *code)
{
	if (code == NULL)
		return LBC_UNKNOWN_CODE;
	/* the wire codes only: the client's own never come from the broker */
	for (int i = LBC_BAD_JSON; i <= LBC_INTERNAL; i++)
		if (strcmp(table[i].code, code) == 0)
			return (lbc_status)i;
	return LBC_UNKNOWN_CODE;
}

const char *lbc_lost_reason_name(lbc_lost_reason r)
{
	if ((unsigned)r > LBC_LOST_OTHER)
		return "other";
	return reasons[r];
}

lbc_lost_reason lbc_lost_reason_from(const char *s)
{
	if (s == NULL)
		return LBC_LOST_OTHER;
	for (int i = LBC_LOST_EXPIRED; i < LBC_LOST_OTHER; i++)
		if (strcmp(reasons[i], s) == 0)
			return (lbc_lost_reason)i;
	return LBC_LOST_OTHER;
}

lbc_status lbc_set_error(lbc_error_t *err, lbc_status st, const char *msg)
{
	if (err == NULL)
		return st;
	memset(err, 0, sizeof(*err));
	err->status = st;
	snprintf(err->code, sizeof(err->code), "%s", lbc_status_code(st));
	snprintf(err->message, sizeof(err->message), "%s", msg ? msg : lbc_strerror(st));
	return st;
}

lbc_status lbc_set_errorf(lbc_error_t *err, lbc_status st, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	if (err == NULL)
		return st;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return lbc_set_error(err, st, buf);
}

lbc_status lbc_set_broker_error(lbc_error_t *err, const lbc_jdoc_t *doc)
{
	uint32_t e = lbc_json_get(doc, 0, "error");
	const char *code = lbc_json_str(doc, e, "code", NULL);
	const char *msg = lbc_json_str(doc, e, "message", NULL);
	lbc_status st;

	if (code == NULL)
		return lbc_set_error(err, LBC_IO, "the broker answered an error without a code");
	st = lbc_status_from_code(code);
	if (err == NULL)
		return st;
	lbc_set_error(err, st, msg ? msg : lbc_strerror(st));
	snprintf(err->code, sizeof(err->code), "%s", code);
	err->from_broker = true;
	return st;
}

const char *lbc_masked(const char *s, char *buf)
{
	size_t i = 0;

	for (; s && *s && i < 80; s++)
		buf[i++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
	if (s && *s) {
		buf[i++] = '.';
		buf[i++] = '.';
		buf[i++] = '.';
	}
	buf[i] = '\0';
	return buf;
}
