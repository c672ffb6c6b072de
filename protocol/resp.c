/*
 * resp.c - encoding of responses and events into lines (see resp.h).
 *
 * Every builder returns a new reference the caller owns; resp_dump takes it
 * back. Keys are added in wire order ("id", "ok", then the result fields as
 * PROTOCOL.md lists them) and jansson keeps insertion order when dumping.
 * An id is copied, never stolen, so the request may be cleared first.
 *
 * Strings go through with their lengths (an owner may hold NUL bytes).
 * Strings that are not valid UTF-8 (only possible from a bug or from data
 * found in Redis) are sent with every non-ASCII byte replaced by '?', so a
 * line is always valid JSON. resp_dump's line is also NUL-terminated (the
 * NUL is not counted in *len; the line itself never holds a raw NUL, as
 * jansson escapes it). Out of memory aborts.
 */
#include "protocol/resp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(void)
{
	fprintf(stderr, "resp: out of memory\n");
	abort();
}

static json_t *must(json_t *v)
{
	if (v == NULL)
		oom();
	return v;
}

/* Adds key -> v (stolen) to o. */
static void put(json_t *o, const char *key, json_t *v)
{
	if (json_object_set_new(o, key, must(v)) != 0)
		oom();
}

static json_t *str_n(const char *p, size_t len)
{
	json_t *s;
	char *copy;
	size_t i;

	if (p == NULL)
		p = "";
	s = json_stringn(p, len);
	if (s != NULL)
		return s;
	/* Not valid UTF-8: keep ASCII, mask the rest. */
	copy = malloc(len ? len : 1);
	if (copy == NULL)
		oom();
	for (i = 0; i < len; i++)
		copy[i] = (unsigned char)p[i] < 0x80 ? p[i] : '?';
	s = must(json_stringn(copy, len));
	free(copy);
	return s;
}

static json_t *str(const char *s)
{
	return s == NULL ? json_null() : str_n(s, strlen(s));
}

static json_t *lbstr(lb_str_t s)
{
	return str_n(s.ptr, s.ptr == NULL ? 0 : s.len);
}

static json_t *num(int64_t i)
{
	return json_integer((json_int_t)i);
}

/* {"id":ID,"ok":ok} */
static json_t *head(const json_t *id, bool ok)
{
	json_t *o = must(json_object());

	put(o, "id", id == NULL ? json_null() : json_deep_copy(id));
	put(o, "ok", json_boolean(ok));
	return o;
}

json_t *resp_ok(const json_t *id)
{
	return head(id, true);
}

json_t *resp_error(const json_t *id, lb_err_t code, const char *message)
{
	json_t *o = head(id, false);
	json_t *e = must(json_object());

	put(e, "code", str(lb_err_code(code)));
	put(e, "message", str(message != NULL ? message : lb_err_message(code)));
	put(o, "error", e);
	return o;
}

json_t *resp_acquired(const json_t *id, const resp_acquired_t *a)
{
	json_t *o = head(id, true);

	put(o, "lease", str(a->lease));
	put(o, "lock", lbstr(a->lock));
	put(o, "mode", str(lb_mode_name(a->mode)));
	put(o, "fence", num(a->fence));
	put(o, "ttl_ms", num(a->ttl_ms));
	put(o, "count", num(a->count));
	return o;
}

json_t *resp_hello(const json_t *id, const resp_hello_t *h)
{
	json_t *o = head(id, true);
	json_t *l = must(json_object());

	put(o, "server", str(h->server));
	put(o, "proto", num(h->proto));
	put(o, "session", str(h->session));
	put(o, "broker", str(h->broker));
	put(l, "max_line", num(h->limits.max_line));
	put(l, "ttl_ms_min", num(h->limits.ttl_ms_min));
	put(l, "ttl_ms_max", num(h->limits.ttl_ms_max));
	put(l, "max_leases_per_session", num(h->limits.max_leases_per_session));
	put(l, "max_waiters_per_session", num(h->limits.max_waiters_per_session));
	put(l, "max_inflight", num(h->limits.max_inflight));
	put(l, "keepalive_ms_min", num(h->limits.keepalive_ms_min));
	put(l, "keepalive_ms_max", num(h->limits.keepalive_ms_max));
	if (h->limits.max_watches_per_session > 0)
		put(l, "max_watches_per_session", num(h->limits.max_watches_per_session));
	put(o, "limits", l);
	if (h->features) {
		json_t *f = must(json_array());
		for (size_t k = 0; h->features[k]; k++)
			if (json_array_append_new(f, str(h->features[k])) != 0)
				abort();
		put(o, "features", f);
	}
	return o;
}

json_t *resp_ping(const json_t *id, bool redis_up)
{
	json_t *o = head(id, true);

	put(o, "redis", str(redis_up ? "up" : "down"));
	return o;
}

json_t *resp_proclaimed(const json_t *id, int64_t fence)
{
	json_t *o = head(id, true);

	put(o, "fence", num(fence));
	return o;
}

json_t *resp_released(const json_t *id, int64_t count)
{
	json_t *o = head(id, true);

	put(o, "count", num(count));
	return o;
}

json_t *resp_extended(const json_t *id, int64_t ttl_ms)
{
	json_t *o = head(id, true);

	put(o, "ttl_ms", num(ttl_ms));
	return o;
}

/* ---- direct encoding of the hot answers ---------------------------------- */

typedef struct wbuf {
	char *p, *end;
	bool ok; /* false once something did not fit or needs the builder */
} wbuf_t;

static void w_raw(wbuf_t *w, const char *s, size_t len)
{
	if (!w->ok || (size_t)(w->end - w->p) < len) {
		w->ok = false;
		return;
	}
	memcpy(w->p, s, len);
	w->p += len;
}

#define W_LIT(w, lit) w_raw((w), (lit), sizeof(lit) - 1)

static void w_int(wbuf_t *w, int64_t v)
{
	char tmp[24];
	int n = sizeof(tmp);
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	do {
		tmp[--n] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		tmp[--n] = '-';
	w_raw(w, tmp + n, sizeof(tmp) - (size_t)n);
}

/* A JSON string of printable ASCII; anything else is left to jansson. */
static void w_str(wbuf_t *w, const char *s, size_t len)
{
	if (s == NULL)
		s = "";
	if (!w->ok || (size_t)(w->end - w->p) < 2 * len + 2) {
		w->ok = false;
		return;
	}
	*w->p++ = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c > 0x7e) {
			w->ok = false;
			return;
		}
		if (c == '"' || c == '\\')
			*w->p++ = '\\';
		*w->p++ = (char)c;
	}
	*w->p++ = '"';
}

/* A C string; NULL (null in the builders' lines) is left to jansson. */
static void w_cstr(wbuf_t *w, const char *s)
{
	if (s == NULL)
		w->ok = false;
	else
		w_str(w, s, strlen(s));
}

/* {"id":ID,"ok":true */
static void w_head(wbuf_t *w, char *buf, const json_t *id)
{
	w->p = buf;
	w->end = buf + RESP_LINE_MAX;
	w->ok = true;
	W_LIT(w, "{\"id\":");
	if (id == NULL || json_is_null(id))
		W_LIT(w, "null");
	else if (json_is_integer(id))
		w_int(w, (int64_t)json_integer_value(id));
	else if (json_is_string(id))
		w_str(w, json_string_value(id), json_string_length(id));
	else
		w->ok = false;
	W_LIT(w, ",\"ok\":true");
}

static size_t w_end(wbuf_t *w, char *buf)
{
	W_LIT(w, "}\n");
	return w->ok ? (size_t)(w->p - buf) : 0;
}

size_t resp_line_acquired(char *buf, const json_t *id, const resp_acquired_t *a)
{
	wbuf_t w;

	w_head(&w, buf, id);
	W_LIT(&w, ",\"lease\":");
	w_cstr(&w, a->lease);
	W_LIT(&w, ",\"lock\":");
	w_str(&w, a->lock.ptr, a->lock.ptr ? a->lock.len : 0);
	W_LIT(&w, ",\"mode\":");
	w_cstr(&w, lb_mode_name(a->mode));
	W_LIT(&w, ",\"fence\":");
	w_int(&w, a->fence);
	W_LIT(&w, ",\"ttl_ms\":");
	w_int(&w, a->ttl_ms);
	W_LIT(&w, ",\"count\":");
	w_int(&w, a->count);
	return w_end(&w, buf);
}

/* {"id":ID,"ok":true,"KEY":V} */
static size_t line_one_int(char *buf, const json_t *id, const char *key, int64_t v)
{
	wbuf_t w;

	w_head(&w, buf, id);
	W_LIT(&w, ",\"");
	w_raw(&w, key, strlen(key));
	W_LIT(&w, "\":");
	w_int(&w, v);
	return w_end(&w, buf);
}

size_t resp_line_released(char *buf, const json_t *id, int64_t count)
{
	return line_one_int(buf, id, "count", count);
}

size_t resp_line_extended(char *buf, const json_t *id, int64_t ttl_ms)
{
	return line_one_int(buf, id, "ttl_ms", ttl_ms);
}

json_t *resp_cancelled(const json_t *id, bool cancelled)
{
	json_t *o = head(id, true);

	put(o, "cancelled", json_boolean(cancelled));
	return o;
}

static const char *state_name(resp_lock_state_t s)
{
	switch (s) {
	case RESP_STATE_FREE:
		return "free";
	case RESP_STATE_EXCLUSIVE:
		return "exclusive";
	case RESP_STATE_SHARED:
		return "shared";
	case RESP_STATE_SEMAPHORE:
		return "semaphore";
	case RESP_STATE_DELAYED:
		return "delayed";
	}
	return "free";
}

json_t *resp_lock_state(const resp_inspect_t *in)
{
	json_t *o = must(json_object());
	json_t *holders = must(json_array());
	size_t i;

	for (i = 0; i < in->nholders; i++) {
		const resp_holder_t *h = &in->holders[i];
		json_t *ho = must(json_object());

		put(ho, "mode", str(lb_mode_name(h->mode)));
		put(ho, "ttl_ms", num(h->ttl_ms));
		put(ho, "count", num(h->count));
		put(ho, "owner", lbstr(h->owner));
		put(ho, "client", lbstr(h->client));
		if (h->value.ptr)
			put(ho, "value", lbstr(h->value));
		if (json_array_append_new(holders, ho) != 0)
			oom();
	}
	put(o, "lock", lbstr(in->lock));
	put(o, "state", str(state_name(in->state)));
	put(o, "limit", in->limit > 0 ? num(in->limit) : json_null());
	put(o, "holders", holders);
	put(o, "waiters", num(in->waiters));
	put(o, "fence", in->has_fence ? num(in->fence) : json_null());
	if (in->delay_ms > 0)
		put(o, "delay_ms", num(in->delay_ms));
	return o;
}

/* o gets a copy of every field of state, in its order. */
static void put_state(json_t *o, const json_t *state)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)state, k, v)
		put(o, k, json_deep_copy(v));
}

json_t *resp_inspect(const json_t *id, const resp_inspect_t *in)
{
	json_t *o = head(id, true);
	json_t *state = resp_lock_state(in);

	put_state(o, state);
	json_decref(state);
	if (in->nmasters > 0) {
		json_t *a = must(json_array());
		for (size_t k = 0; k < in->nmasters; k++) {
			json_t *e = must(json_object());
			put(e, "addr", str(in->masters[k].addr));
			put(e, "holds", in->masters[k].holds < 0 ? json_null()
			                                         : json_boolean(in->masters[k].holds > 0));
			if (json_array_append_new(a, e) != 0)
				oom();
		}
		put(o, "masters", a);
	}
	return o;
}

json_t *resp_leases(const json_t *id, const resp_lease_t *leases, size_t n)
{
	json_t *o = head(id, true);
	json_t *arr = must(json_array());
	size_t i;

	for (i = 0; i < n; i++) {
		const resp_lease_t *l = &leases[i];
		json_t *lo = must(json_object());

		put(lo, "lease", str(l->lease));
		put(lo, "lock", lbstr(l->lock));
		put(lo, "mode", str(lb_mode_name(l->mode)));
		put(lo, "ttl_ms", num(l->ttl_ms));
		put(lo, "count", num(l->count));
		put(lo, "fence", num(l->fence));
		if (json_array_append_new(arr, lo) != 0)
			oom();
	}
	put(o, "leases", arr);
	return o;
}

json_t *resp_stats(const json_t *id, const resp_stats_t *s)
{
	json_t *o = head(id, true);

	put(o, "uptime_s", num(s->uptime_s));
	put(o, "connections", num(s->connections));
	put(o, "sessions", num(s->sessions));
	put(o, "leases", num(s->leases));
	put(o, "waiters", num(s->waiters));
	put(o, "acquired_total", num(s->acquired_total));
	put(o, "released_total", num(s->released_total));
	put(o, "timeouts_total", num(s->timeouts_total));
	put(o, "lost_total", num(s->lost_total));
	put(o, "failovers_total", num(s->failovers_total));
	put(o, "failover_lost_total", num(s->failover_lost_total));
	put(o, "redis", str(s->redis_up ? "up" : "down"));
	if (s->redis_mode)
		put(o, "redis_mode", str(s->redis_mode));
	if (s->nmasters > 0) {
		json_t *a = must(json_array());
		for (size_t k = 0; k < s->nmasters; k++) {
			const resp_master_t *m = &s->masters[k];
			json_t *e = must(json_object());
			put(e, "addr", str(m->addr));
			put(e, "up", json_boolean(m->up));
			put(e, "slots", num(m->slots));
			put(e, "pending", num(m->pending));
			put(e, "redirects", num(m->redirects));
			if (json_array_append_new(a, e) != 0)
				oom();
		}
		put(o, "redis_masters", a);
	}
	return o;
}

json_t *resp_watched(const json_t *id, const char *watch, const json_t *state)
{
	json_t *o = head(id, true);

	put(o, "watch", str(watch));
	put_state(o, state);
	return o;
}

json_t *resp_event_changed(const char *watch, const json_t *state)
{
	json_t *o = must(json_object());

	put(o, "event", str("changed"));
	put(o, "watch", str(watch));
	put_state(o, state);
	return o;
}

json_t *resp_event_lost(const char *lease, lb_str_t lock, const char *reason)
{
	json_t *o = must(json_object());

	put(o, "event", str("lost"));
	put(o, "lease", str(lease));
	put(o, "lock", lbstr(lock));
	put(o, "reason", str(reason));
	return o;
}

json_t *resp_event_shutdown(int64_t grace_ms)
{
	json_t *o = must(json_object());

	put(o, "event", str("shutdown"));
	put(o, "grace_ms", num(grace_ms));
	return o;
}

json_t *resp_event_half_closed(int64_t pending)
{
	json_t *o = must(json_object());

	put(o, "event", str("half_closed"));
	put(o, "pending", num(pending));
	return o;
}

json_t *resp_event_closing(const char *reason)
{
	json_t *o = must(json_object());

	put(o, "event", str("closing"));
	put(o, "reason", str(reason));
	return o;
}

/* ---- dumping ----------------------------------------------------------- */

typedef struct out {
	char *buf;
	size_t len, cap;
} out_t;

static int out_write(const char *data, size_t n, void *arg)
{
	out_t *o = arg;

	if (o->cap - o->len < n + 1) { /* + 1: room for the final '\n' */
		size_t cap = o->cap ? o->cap : 128;

		while (cap - o->len < n + 1) {
			if (cap > SIZE_MAX / 2)
				oom();
			cap *= 2;
		}
		o->buf = realloc(o->buf, cap);
		if (o->buf == NULL)
			oom();
		o->cap = cap;
	}
	memcpy(o->buf + o->len, data, n);
	o->len += n;
	return 0;
}

char *resp_dump(json_t *msg, size_t *len)
{
	out_t o = {NULL, 0, 0};

	if (msg == NULL) {
		fprintf(stderr, "resp_dump: NULL message\n");
		abort();
	}
	/* No JSON_ENSURE_ASCII: UTF-8 goes out as it came in. */
	if (json_dump_callback(msg, out_write, &o, JSON_COMPACT) != 0) {
		fprintf(stderr, "resp_dump: cannot encode message\n");
		abort();
	}
	json_decref(msg);
	out_write("\n", 1, &o);
	o.buf[o.len] = '\0'; /* out_write always leaves room for it */
	*len = o.len;
	return o.buf;
}
