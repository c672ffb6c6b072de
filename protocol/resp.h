/*
 * resp.h - encoding of responses and events into lines.
 *
 * Builders return a new jansson reference (the caller owns it); resp_dump
 * takes ownership of a message and returns it as one compact JSON line ending
 * in "\n". Key order is stable: "id" then "ok" first, as in PROTOCOL.md.
 * Strings that may hold NUL bytes (owner, client labels) go through with
 * their lengths. Nothing here knows of Redis or sessions.
 */
#ifndef LB_PROTOCOL_RESP_H
#define LB_PROTOCOL_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "protocol/errors.h"
#include "protocol/req.h"

/* {"id":ID,"ok":true}; id NULL -> null. id is not stolen. */
json_t *resp_ok(const json_t *id);
/* {"id":ID,"ok":false,"error":{"code":..,"message":..}}; message NULL -> the
 * code's default message. */
json_t *resp_error(const json_t *id, lb_err_t code, const char *message);

typedef struct resp_acquired {
	const char *lease;
	lb_str_t lock;
	lb_mode_t mode;
	int64_t fence;
	int64_t ttl_ms;
	int64_t count;
} resp_acquired_t;
json_t *resp_acquired(const json_t *id, const resp_acquired_t *a);

/*
 * The answers of the hot path, written straight into buf (at most
 * RESP_LINE_MAX bytes, "\n" included, not NUL-terminated) byte for byte as
 * resp_dump would write the builders' messages. Returns the length, or 0
 * when a string is not plain printable ASCII or the line would not fit:
 * then use the builder.
 */
#define RESP_LINE_MAX 2048
size_t resp_line_acquired(char *buf, const json_t *id, const resp_acquired_t *a);
size_t resp_line_released(char *buf, const json_t *id, int64_t count);
size_t resp_line_extended(char *buf, const json_t *id, int64_t ttl_ms);

/* What hello tells a client it must respect (PROTOCOL.md "hello"). */
typedef struct resp_limits {
	int64_t max_line;
	int64_t ttl_ms_min, ttl_ms_max;
	int64_t max_leases_per_session;
	int64_t max_waiters_per_session;
	int64_t max_inflight;
	int64_t keepalive_ms_min, keepalive_ms_max;
	int64_t max_watches_per_session; /* 0: left out */
} resp_limits_t;

typedef struct resp_hello {
	const char *server;  /* "lockbroker/X.Y.Z" */
	int proto;
	const char *session; /* "s<N>" */
	const char *broker;  /* the broker's id */
	resp_limits_t limits;
	const char *const *features; /* NULL-terminated: "features" */
} resp_hello_t;
json_t *resp_hello(const json_t *id, const resp_hello_t *h);
/* ping: {"ok":true,"redis":"up"|"down"} */
json_t *resp_ping(const json_t *id, bool redis_up);
/* release: {"ok":true,"count":C} */
json_t *resp_released(const json_t *id, int64_t count);
/* extend: {"ok":true,"ttl_ms":T} */
json_t *resp_extended(const json_t *id, int64_t ttl_ms);
/* proclaim: {"ok":true,"fence":F} */
json_t *resp_proclaimed(const json_t *id, int64_t fence);
/* cancel: {"ok":true,"cancelled":B} */
json_t *resp_cancelled(const json_t *id, bool cancelled);

typedef struct resp_holder {
	lb_mode_t mode;
	int64_t ttl_ms;
	int64_t count;
	lb_str_t owner;
	lb_str_t client;
	lb_str_t value; /* an exclusive holder's value; ptr NULL: none (left out) */
} resp_holder_t;

typedef enum resp_lock_state {
	RESP_STATE_FREE,
	RESP_STATE_EXCLUSIVE,
	RESP_STATE_SHARED,
	RESP_STATE_SEMAPHORE,
	RESP_STATE_DELAYED, /* no holder, and a lock delay holds it back */
} resp_lock_state_t;

/* One Redlock master in inspect: {"addr", "holds"}: holds is true (it shows
 * a holder), false (none) or null (no answer). */
typedef struct resp_master_state {
	const char *addr;
	int holds; /* 1, 0, -1 */
} resp_master_state_t;

typedef struct resp_inspect {
	lb_str_t lock;
	resp_lock_state_t state;
	int64_t limit; /* 0 -> null */
	const resp_holder_t *holders;
	size_t nholders;
	int64_t waiters;
	bool has_fence;
	int64_t fence; /* used when has_fence */
	/* Redlock: what each master showed, "masters" (left out when none). */
	const struct resp_master_state *masters;
	size_t nmasters;
	int64_t delay_ms; /* > 0: how long a lock delay still holds it back ("delay_ms") */
} resp_inspect_t;
json_t *resp_inspect(const json_t *id, const resp_inspect_t *in);
/* What inspect shows of a lock, without id, ok and masters: {"lock",
 * "state", "limit", "holders", "waiters", "fence"}. */
json_t *resp_lock_state(const resp_inspect_t *in);
/* watch: {"ok":true,"watch":W, ...state} (state as resp_lock_state). */
json_t *resp_watched(const json_t *id, const char *watch, const json_t *state);

typedef struct resp_lease {
	const char *lease;
	lb_str_t lock;
	lb_mode_t mode;
	int64_t ttl_ms;
	int64_t count;
	int64_t fence;
} resp_lease_t;
json_t *resp_leases(const json_t *id, const resp_lease_t *leases, size_t n);

/* One Redis master in stats: {"addr", "up", "slots", "pending", "redirects"}
 * (a Redis Cluster's masters, or the masters of a Redlock set). */
typedef struct resp_master {
	const char *addr;
	bool up;
	int64_t slots;     /* Redis Cluster slots it serves; 0 outside a cluster */
	int64_t pending;   /* calls sent, not yet answered */
	int64_t redirects; /* MOVED and ASK replies it gave */
} resp_master_t;

typedef struct resp_stats {
	int64_t uptime_s;
	int64_t connections;
	int64_t sessions;
	int64_t leases;
	int64_t waiters;
	int64_t acquired_total;
	int64_t released_total;
	int64_t timeouts_total;
	int64_t lost_total;
	int64_t failovers_total;     /* master switches followed */
	int64_t failover_lost_total; /* leases lost to them */
	bool redis_up;
	/* "single", "sentinel", "cluster" or "redlock": "redis_mode" (left
	 * out when NULL). */
	const char *redis_mode;
	/* Per Redis Cluster or Redlock master: "redis_masters" (left out when none). */
	const struct resp_master *masters;
	size_t nmasters;
} resp_stats_t;
json_t *resp_stats(const json_t *id, const resp_stats_t *s);

/* {"event":"lost","lease":L,"lock":NAME,"reason":R} */
json_t *resp_event_lost(const char *lease, lb_str_t lock, const char *reason);
/* {"event":"changed","watch":W, ...state} */
json_t *resp_event_changed(const char *watch, const json_t *state);
/* {"event":"shutdown","grace_ms":G} */
json_t *resp_event_shutdown(int64_t grace_ms);
/* {"event":"closing","reason":R} */
json_t *resp_event_closing(const char *reason);
/* {"event":"half_closed","pending":N} */
json_t *resp_event_half_closed(int64_t pending);

/* Takes ownership of msg; returns a malloc'd line ending in "\n" and its
 * length in *len. Aborts on out of memory. */
char *resp_dump(json_t *msg, size_t *len);

#endif
