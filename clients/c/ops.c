/*
 * ops.c - the ops that hold no lease: inspect, leases, stats, ping, and
 * lbc_request for any op (with the broker's answer line, as lockctl --json
 * prints it).
 *
 * Each builds its request, calls lbc_call (client.c) and turns the answer
 * into a result the caller owns (the _free functions here). Fields a newer
 * broker adds are ignored; a field that is missing keeps its zero (or -1
 * in lbc_stats_t).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_empty(const char *s)
{
	char *d = strdup(s ? s : "");
	if (d == NULL)
		abort();
	return d;
}

/* One request without fields beyond `key: str` (if key), answered in p. */
static lbc_status simple(lbc_client_t *c, lbc_pending_t *p, const char *op, const char *key,
                         const char *str, lbc_error_t *err)
{
	lbc_jw_t w;
	lbc_status st;

	lbc_pending_init(p, lbc_next_id(c));
	lbc_jw_init(&w);
	lbc_req_begin(&w, p->id, op);
	if (key)
		lbc_jw_kstr(&w, key, str);
	lbc_req_finish(&w);
	st = lbc_call(c, p, &w, lbc_request_timeout(c), NULL, err);
	lbc_jw_free(&w);
	if (st == LBC_OK && !lbc_json_true(&p->doc, 0, "ok"))
		st = lbc_set_broker_error(err, &p->doc);
	return st;
}

lbc_lock_info_t *lbc_lock_info_from(const lbc_jdoc_t *d, uint32_t obj)
{
	lbc_lock_info_t *info = calloc(1, sizeof(*info));
	const char *s;
	uint32_t hs;

	if (info == NULL)
		abort();
	info->lock = dup_or_empty(lbc_json_str(d, obj, "lock", NULL));
	if ((s = lbc_json_str(d, obj, "state", NULL)))
		snprintf(info->state, sizeof(info->state), "%s", s);
	(void)lbc_json_int(d, obj, "limit", &info->limit);
	(void)lbc_json_int(d, obj, "waiters", &info->waiters);
	(void)lbc_json_int(d, obj, "delay_ms", &info->delay_ms);
	info->has_fence = lbc_json_int(d, obj, "fence", &info->fence) == 0;
	hs = lbc_json_get(d, obj, "holders");
	if (lbc_json_type(d, hs) == LBC_J_ARR && d->nodes[hs].v.c.n > 0) {
		size_t n = d->nodes[hs].v.c.n, i = 0;
		info->holders = calloc(n, sizeof(*info->holders));
		if (info->holders == NULL)
			abort();
		for (uint32_t k = d->nodes[hs].v.c.first; k != LBC_JNONE && i < n; k = d->nodes[k].next) {
			lbc_holder_t *h = &info->holders[i++];
			if ((s = lbc_json_str(d, k, "mode", NULL)))
				snprintf(h->mode, sizeof(h->mode), "%s", s);
			(void)lbc_json_int(d, k, "ttl_ms", &h->ttl_ms);
			(void)lbc_json_int(d, k, "count", &h->count);
			h->owner = dup_or_empty(lbc_json_str(d, k, "owner", NULL));
			h->client = dup_or_empty(lbc_json_str(d, k, "client", NULL));
			if ((s = lbc_json_str(d, k, "value", NULL)))
				h->value = dup_or_empty(s);
		}
		info->n_holders = i;
	}
	return info;
}

lbc_status lbc_inspect(lbc_client_t *c, const char *name, lbc_lock_info_t **out, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;

	if (out == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_inspect: out is NULL");
	*out = NULL;
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_inspect: NULL client");
	if (!lbc_name_valid(name))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "the lock name must be 1..512 bytes of UTF-8 without control characters");
	st = simple(c, &p, "inspect", "lock", name, err);
	if (st == LBC_OK)
		*out = lbc_lock_info_from(&p.doc, 0);
	lbc_call_done(&p);
	return st;
}

void lbc_lock_info_free(lbc_lock_info_t *info)
{
	if (info == NULL)
		return;
	for (size_t i = 0; i < info->n_holders; i++) {
		free(info->holders[i].owner);
		free(info->holders[i].client);
		free(info->holders[i].value);
	}
	free(info->holders);
	free(info->lock);
	free(info);
}

lbc_status lbc_leases(lbc_client_t *c, lbc_lease_info_t **out, size_t *n, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;
	const lbc_jdoc_t *d;
	uint32_t arr;
	size_t cnt = 0, i = 0;
	lbc_lease_info_t *v;

	if (out == NULL || n == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_leases: out or n is NULL");
	*out = NULL;
	*n = 0;
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_leases: NULL client");
	st = simple(c, &p, "leases", NULL, NULL, err);
	if (st != LBC_OK) {
		lbc_call_done(&p);
		return st;
	}
	d = &p.doc;
	arr = lbc_json_get(d, 0, "leases");
	if (lbc_json_type(d, arr) == LBC_J_ARR)
		cnt = d->nodes[arr].v.c.n;
	v = calloc(cnt ? cnt : 1, sizeof(*v));
	if (v == NULL)
		abort();
	for (uint32_t k = cnt ? d->nodes[arr].v.c.first : LBC_JNONE; k != LBC_JNONE && i < cnt;
	     k = d->nodes[k].next) {
		lbc_lease_info_t *e = &v[i++];
		const char *s;
		if ((s = lbc_json_str(d, k, "lease", NULL)))
			snprintf(e->token, sizeof(e->token), "%s", s);
		e->lock = dup_or_empty(lbc_json_str(d, k, "lock", NULL));
		if ((s = lbc_json_str(d, k, "mode", NULL)))
			snprintf(e->mode, sizeof(e->mode), "%s", s);
		(void)lbc_json_int(d, k, "ttl_ms", &e->ttl_ms);
		(void)lbc_json_int(d, k, "count", &e->count);
		(void)lbc_json_int(d, k, "fence", &e->fence);
	}
	lbc_call_done(&p);
	*out = v;
	*n = i;
	return LBC_OK;
}

void lbc_leases_free(lbc_lease_info_t *leases, size_t n)
{
	if (leases == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(leases[i].lock);
	free(leases);
}

lbc_status lbc_stats(lbc_client_t *c, lbc_stats_t *out, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;
	const lbc_jdoc_t *d;
	const char *s;
	static const struct {
		const char *key;
		size_t off;
	} ints[] = {
		{"uptime_s", offsetof(lbc_stats_t, uptime_s)},
		{"connections", offsetof(lbc_stats_t, connections)},
		{"sessions", offsetof(lbc_stats_t, sessions)},
		{"leases", offsetof(lbc_stats_t, leases)},
		{"waiters", offsetof(lbc_stats_t, waiters)},
		{"acquired_total", offsetof(lbc_stats_t, acquired_total)},
		{"released_total", offsetof(lbc_stats_t, released_total)},
		{"timeouts_total", offsetof(lbc_stats_t, timeouts_total)},
		{"lost_total", offsetof(lbc_stats_t, lost_total)},
	};

	if (c == NULL || out == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_stats: NULL argument");
	memset(out, 0, sizeof(*out));
	st = simple(c, &p, "stats", NULL, NULL, err);
	if (st == LBC_OK) {
		d = &p.doc;
		for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
			int64_t *f = (int64_t *)((char *)out + ints[i].off);
			if (lbc_json_int(d, 0, ints[i].key, f) < 0)
				*f = -1;
		}
		s = lbc_json_str(d, 0, "redis", NULL);
		out->redis_up = s && strcmp(s, "up") == 0;
		if ((s = lbc_json_str(d, 0, "redis_mode", NULL)))
			snprintf(out->redis_mode, sizeof(out->redis_mode), "%s", s);
	}
	lbc_call_done(&p);
	return st;
}

lbc_status lbc_ping(lbc_client_t *c, bool *redis_up, lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_status st;

	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_ping: NULL client");
	st = simple(c, &p, "ping", NULL, NULL, err);
	if (st == LBC_OK && redis_up) {
		const char *s = lbc_json_str(&p.doc, 0, "redis", NULL);
		*redis_up = s && strcmp(s, "up") == 0;
	}
	lbc_call_done(&p);
	return st;
}

/* The members of the object text fields[0..n) without its braces, trimmed. */
static void inner_members(const char *fields, const char **start, size_t *len)
{
	const char *a = strchr(fields, '{'), *b = strrchr(fields, '}');

	a++;
	while (a < b && (*a == ' ' || *a == '\t' || *a == '\n' || *a == '\r'))
		a++;
	while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\n' || b[-1] == '\r'))
		b--;
	*start = a;
	*len = (size_t)(b - a);
}

lbc_status lbc_request(lbc_client_t *c, const char *op, const char *fields_json, char **answer,
                       lbc_error_t *err)
{
	lbc_pending_t p;
	lbc_jw_t w;
	lbc_status st;
	int64_t timeout, wait_ms = -1;
	const char *in = NULL;
	size_t inlen = 0;
	bool waits = false;

	if (answer)
		*answer = NULL;
	if (c == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "lbc_request: NULL client");
	if (op && !lbc_utf8_valid(op, strlen(op)))
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "op is not UTF-8");
	if (fields_json) {
		lbc_jdoc_t d;
		char msg[128];
		if (lbc_json_parse(&d, fields_json, strlen(fields_json), msg, sizeof(msg)) < 0 ||
		    lbc_json_type(&d, 0) != LBC_J_OBJ) {
			lbc_json_free(&d);
			return lbc_set_error(err, LBC_INVALID_ARGUMENT, "fields_json must be a JSON object");
		}
		if (lbc_json_get(&d, 0, "id") != LBC_JNONE || (op && lbc_json_get(&d, 0, "op") != LBC_JNONE)) {
			lbc_json_free(&d);
			return lbc_set_error(err, LBC_INVALID_ARGUMENT,
			                     "fields_json may not hold \"id\" (nor \"op\" when op is given)");
		}
		/* an acquire that waits has no answer deadline but its wait */
		const char *fop = op ? op : lbc_json_str(&d, 0, "op", NULL);
		if (fop && strcmp(fop, "acquire") == 0) {
			uint32_t wm = lbc_json_get(&d, 0, "wait_ms");
			waits = true;
			if (lbc_json_type(&d, wm) == LBC_J_INT && d.nodes[wm].v.i >= 0)
				wait_ms = d.nodes[wm].v.i;
		}
		lbc_json_free(&d);
		inner_members(fields_json, &in, &inlen);
	}
	lbc_pending_init(&p, lbc_next_id(c));
	p.want_line = answer != NULL;
	lbc_jw_init(&w);
	lbc_req_begin(&w, p.id, op);
	if (inlen) {
		size_t at;
		lbc_jw_raw(&w, ",", 1);
		at = w.len;
		lbc_jw_raw(&w, in, inlen);
		/* raw newlines can only be whitespace between tokens (a valid
		 * string holds none): one request is one line */
		for (size_t i = at; i < w.len; i++)
			if (w.buf[i] == '\n' || w.buf[i] == '\r')
				w.buf[i] = ' ';
	}
	lbc_req_finish(&w);
	timeout = lbc_request_timeout(c);
	if (waits && timeout >= 0)
		timeout = wait_ms < 0 ? -1 : timeout + wait_ms;
	st = lbc_call(c, &p, &w, timeout, NULL, err);
	lbc_jw_free(&w);
	if (st == LBC_OK) {
		if (!lbc_json_true(&p.doc, 0, "ok"))
			st = lbc_set_broker_error(err, &p.doc);
		if (answer) {
			*answer = p.line;
			p.line = NULL;
		}
	}
	lbc_call_done(&p);
	return st;
}
