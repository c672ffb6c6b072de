/*
 * metrics.c - see metrics.h.
 *
 * Each connection (mconn_t: a scrape or a health probe) owns its handle
 * and a small request buffer; it is freed in the handle's close callback.
 * A request larger than MAX_REQUEST or slower than REQUEST_TIMEOUT_MS is
 * dropped, and at most MAX_CONNS connections are served at once, so the
 * endpoint cannot grow the broker's memory or hold its resources.
 */
#include "broker/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/counters.h"
#include "broker/base/shared.h"
#include "broker/base/log.h"
#include "broker/store/store.h"
#include "broker/base/timers.h"
#include "broker/locks/lockstat.h"
#include "broker/locks/waitq.h"
#include "broker/ui_assets.h"
#include "broker/ui_state.h"

#define MAX_REQUEST 8192
#define MAX_CONNS 64
#define REQUEST_TIMEOUT_MS 5000

_Static_assert(LB_E__COUNT <= COUNTERS_RESULT_OTHER, "every error code has an acquire counter");

/* ---- the text ------------------------------------------------------------- */

typedef struct text {
	char *buf;
	size_t len, cap;
} text_t;

static void put(text_t *t, const char *fmt, ...) LB_PRINTF(2, 3);

static void put(text_t *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return; /* an encoding error: leave the sample out */
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		t->cap = t->cap * 2 + (size_t)(n > 0 ? n : 0);
		t->buf = xrealloc(t->buf, t->cap);
	}
}

static void metric(text_t *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_histogram(text_t *t, const char *name, const char *help, const histogram_t *h,
                          const double *bounds)
{
	uint64_t cum = 0;

	metric(t, name, "histogram", help);
	for (int k = 0; k < COUNTERS_NBOUNDS; k++) {
		cum += h->buckets[k];
		put(t, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[k], (unsigned long long)cum);
	}
	put(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
	put(t, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

/* A label value: '"' and '\\' escaped, a newline dropped. */
static void label_value(char *out, size_t len, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < len; s++) {
		if (*s == '"' || *s == '\\')
			out[n++] = '\\';
		if (*s != '\n')
			out[n++] = *s;
	}
	out[n] = '\0';
}

/* Per Redis master (Redis Cluster: each master of the slot map). */
static void put_masters(text_t *t)
{
	store_master_t m[STORE_MASTERS_SHOWN];
	size_t n = store_masters(m, STORE_MASTERS_SHOWN);
	char addr[2 * sizeof(m[0].addr)];

	if (n > STORE_MASTERS_SHOWN)
		n = STORE_MASTERS_SHOWN;
	metric(t, "lockbroker_redis_master_up", "gauge", "1 when a connection to this Redis master is ready.");
	for (size_t k = 0; k < n; k++) {
		label_value(addr, sizeof(addr), m[k].addr);
		put(t, "lockbroker_redis_master_up{addr=\"%s\"} %d\n", addr, m[k].up ? 1 : 0);
	}
	metric(t, "lockbroker_redis_master_slots", "gauge", "Redis Cluster slots this master serves (0 outside a cluster).");
	for (size_t k = 0; k < n; k++) {
		label_value(addr, sizeof(addr), m[k].addr);
		put(t, "lockbroker_redis_master_slots{addr=\"%s\"} %d\n", addr, m[k].slots);
	}
	metric(t, "lockbroker_redis_master_pending", "gauge", "Redis calls sent to this master, not yet answered.");
	for (size_t k = 0; k < n; k++) {
		label_value(addr, sizeof(addr), m[k].addr);
		put(t, "lockbroker_redis_master_pending{addr=\"%s\"} %zu\n", addr, m[k].pending);
	}
	metric(t, "lockbroker_redis_master_redirects_total", "counter", "MOVED and ASK replies from this master.");
	for (size_t k = 0; k < n; k++) {
		label_value(addr, sizeof(addr), m[k].addr);
		put(t, "lockbroker_redis_master_redirects_total{addr=\"%s\"} %llu\n", addr,
		    (unsigned long long)m[k].redirects);
	}
}

static char *render(size_t *len)
{
	text_t t = {xmalloc(4096), 0, 4096};

	metric(&t, "lockbroker_up", "gauge", "1 while the broker runs.");
	put(&t, "lockbroker_up 1\n");
	metric(&t, "lockbroker_redis_up", "gauge", "1 when a Redis connection is ready.");
	put(&t, "lockbroker_redis_up %d\n", store_up() ? 1 : 0);
	metric(&t, "lockbroker_redis_mode", "gauge",
	       "1 for the way this broker keeps locks: single, sentinel, cluster or redlock.");
	put(&t, "lockbroker_redis_mode{mode=\"%s\"} 1\n", store_mode());
	put_masters(&t);
	metric(&t, "lockbroker_uptime_seconds", "gauge", "Seconds since the broker started.");
	put(&t, "lockbroker_uptime_seconds %llu\n",
	    (unsigned long long)((timers_now() - server.started_ms) / 1000));
	metric(&t, "lockbroker_connections", "gauge", "Client connections open.");
	put(&t, "lockbroker_connections %zu\n", server.nconnections);
	metric(&t, "lockbroker_sessions", "gauge", "Client sessions open.");
	put(&t, "lockbroker_sessions %zu\n", server.nsessions);
	metric(&t, "lockbroker_leases", "gauge", "Leases held by this broker's sessions (detached ones not included).");
	put(&t, "lockbroker_leases %zu\n", server.nleases);
	metric(&t, "lockbroker_waiters", "gauge", "Acquires pending on this broker.");
	put(&t, "lockbroker_waiters %zu\n", waitq_count());

	metric(&t, "lockbroker_acquires_total", "counter", "Acquires answered, by result (ok or the error code).");
	for (int k = 0; k < LB_E__COUNT; k++) {
		uint64_t n = counters.acquires[k];
		if (k == LB_E_INTERNAL) /* a result that is no code counts as internal */
			n += counters.acquires[COUNTERS_RESULT_OTHER];
		if (k == LB_OK || n)
			put(&t, "lockbroker_acquires_total{result=\"%s\"} %llu\n",
			    k == LB_OK ? "ok" : lb_err_code((lb_err_t)k), (unsigned long long)n);
	}
	metric(&t, "lockbroker_releases_total", "counter", "Leases released (by their holder or their session's end).");
	put(&t, "lockbroker_releases_total %llu\n", (unsigned long long)server.stats.released_total);
	metric(&t, "lockbroker_timeouts_total", "counter", "Acquires answered timeout.");
	put(&t, "lockbroker_timeouts_total %llu\n", (unsigned long long)server.stats.timeouts_total);
	metric(&t, "lockbroker_failovers_total", "counter",
	       "Redis master switches followed (sentinel://).");
	put(&t, "lockbroker_failovers_total %llu\n", (unsigned long long)server.stats.failovers_total);
	metric(&t, "lockbroker_failover_lost_total", "counter",
	       "Leases the new master did not hold after a switch (reported lost, gone).");
	put(&t, "lockbroker_failover_lost_total %llu\n",
	    (unsigned long long)server.stats.failover_lost_total);
	metric(&t, "lockbroker_lost_total", "counter", "Leases reported lost, by reason.");
	for (int k = 0; k < COUNTERS_NLOST; k++)
		put(&t, "lockbroker_lost_total{reason=\"%s\"} %llu\n", counters_lost_reasons[k],
		    (unsigned long long)counters.lost[k]);
	metric(&t, "lockbroker_renewals_total", "counter", "Watchdog renewals, by result.");
	put(&t, "lockbroker_renewals_total{result=\"ok\"} %llu\n", (unsigned long long)counters.renewals_ok);
	put(&t, "lockbroker_renewals_total{result=\"failed\"} %llu\n", (unsigned long long)counters.renewals_failed);
	put_histogram(&t, "lockbroker_redis_rtt_seconds", "Round trip of Redis commands.", &counters.rtt, counters_rtt_bounds);
	put_histogram(&t, "lockbroker_redis_batch_calls",
	              "Lock calls per script call sent to Redis (1: alone; more: a batch, --redis-batch-max).",
	              &counters.batch, counters_batch_bounds);
	put_histogram(&t, "lockbroker_acquire_wait_seconds", "Time from an acquire request to its answer.",
	              &counters.wait, counters_wait_bounds);
	metric(&t, "lockbroker_grants_total", "counter",
	       "Locks and permits granted to this broker's acquires (re-entries not included).");
	put(&t, "lockbroker_grants_total %llu\n", (unsigned long long)lockstat_grants_total());
	put_histogram(&t, "lockbroker_handoff_seconds",
	              "Grants to acquires that waited: from when this broker learned the lock was free "
	              "(a wake-up, or the send of the script that freed it) to the grant.",
	              lockstat_handoffs(), lockstat_handoff_bounds);
	*len = t.len;
	return t.buf;
}

/* ---- the listener --------------------------------------------------------- */

typedef struct mconn {
	uv_tcp_t tcp; /* first: the handle gives back the connection */
	struct mconn *prev, *next; /* L.conns */
	uv_write_t wreq;
	timer_ent_t timeout;
	char req[MAX_REQUEST];
	size_t len;
	char *resp; /* owned while written */
	bool answered;
} mconn_t;

static struct {
	uv_tcp_t listener;
	bool open;
	size_t nconns;
	mconn_t *conns;
} L;

static void on_conn_closed(uv_handle_t *h)
{
	mconn_t *c = (mconn_t *)h;

	if (c->prev)
		c->prev->next = c->next;
	else
		L.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c->resp);
	free(c);
	L.nconns--;
}

static void conn_close(mconn_t *c)
{
	timer_cancel(&c->timeout);
	if (!uv_is_closing((uv_handle_t *)&c->tcp))
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_timeout(timer_ent_t *t)
{
	conn_close((mconn_t *)((char *)t - offsetof(mconn_t, timeout)));
}

static void on_written(uv_write_t *req, int status)
{
	(void)status;
	conn_close((mconn_t *)req->handle);
}

/* Writes the answer and closes after it. extra is more header lines, each
 * ending in CRLF ("" for none). With with_body false (HEAD) the headers,
 * Content-Length included, are those of the full answer, and no body. */
static void respond(mconn_t *c, const char *status, const char *type, const char *extra,
                    const char *body, size_t blen, bool with_body)
{
	size_t hlen, total;
	uv_buf_t buf;
	char head[1024];

	c->answered = true;
	uv_read_stop((uv_stream_t *)&c->tcp);
	hlen = (size_t)snprintf(head, sizeof(head),
	                        "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	                        "%sConnection: close\r\n\r\n",
	                        status, type, blen, extra);
	REQUIRE(hlen < sizeof(head));
	total = hlen + (with_body ? blen : 0);
	c->resp = xmalloc(total);
	memcpy(c->resp, head, hlen);
	if (with_body)
		memcpy(c->resp + hlen, body, blen);
	buf = uv_buf_init(c->resp, (unsigned)total);
	if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
		conn_close(c);
}

#define TEXT "text/plain; charset=utf-8"
/* The page and its files: only what they are (no sniffing), never framed,
 * scripts and styles of this origin only (no inline code, so data that
 * slipped into markup could not run), no referrer. */
#define UI_HEADERS                                                                             \
	"Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"                        \
	"X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"                             \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "    \
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "             \
	"frame-ancestors 'none'\r\n"
#define STATE_HEADERS "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
/* A string literal as the body and its length. */
#define LIT(s) s, sizeof(s) - 1

/* Why the broker cannot take lock requests now, or NULL when it can. Redis
 * counts as up once a command connection finished its handshake, which
 * loads every script (rpool_up). The listener closes when draining begins
 * (broker_shutdown), so a probe sees the first case only if it is kept
 * open longer; the answer is right either way. */
static const char *not_ready(void)
{
	if (server.state != BROKER_RUNNING)
		return "shutting down\n";
	if (!store_up())
		return "redis down\n";
	return NULL;
}

/* The file of ui/ that target (without its query) names, or NULL:
 * /ui and /ui/ are its index.html, /ui/NAME its NAME. */
static const ui_asset_t *ui_file(const char *target)
{
	if (strcmp(target, "/ui") == 0 || strcmp(target, "/ui/") == 0)
		return ui_asset_find("index.html");
	if (strncmp(target, "/ui/", 4) == 0 && !strchr(target + 4, '/'))
		return ui_asset_find(target + 4);
	return NULL;
}

/*
 * GET (or HEAD) of one of these paths; the query string is ignored.
 *   /metrics   the Prometheus text
 *   /healthz   liveness: 200 while the process runs its loop
 *   /readyz    readiness: 200 while lock requests can be served, else 503
 *              with the reason as its one line
 *   /ui        the page (ui/index.html; its files at /ui/NAME)
 *   /ui/state  the JSON the page shows (ui_state.h)
 */
static void answer(mconn_t *c)
{
	char method[16] = "", target[256] = "";
	const ui_asset_t *file = NULL;
	const char *why;
	size_t plen;
	bool with_body, state;

	if (sscanf(c->req, "%15s %255s", method, target) != 2) {
		respond(c, "400 Bad Request", TEXT, "", LIT("bad request\n"), true);
		return;
	}
	plen = strcspn(target, "?");
	target[plen] = '\0';
	with_body = strcmp(method, "HEAD") != 0; /* a HEAD answer never has one */
	state = strcmp(target, "/ui/state") == 0;
	if (!state)
		file = ui_file(target);
	if (strcmp(target, "/metrics") != 0 && strcmp(target, "/healthz") != 0 &&
	    strcmp(target, "/readyz") != 0 && !state && !file) {
		respond(c, "404 Not Found", TEXT, "", LIT("not found: try /metrics, /healthz or /readyz\n"),
		        with_body);
		return;
	}
	if (with_body && strcmp(method, "GET") != 0) {
		respond(c, "405 Method Not Allowed", TEXT, "Allow: GET, HEAD\r\n",
		        LIT("only GET and HEAD\n"), true);
		return;
	}
	if (state) {
		size_t len;
		const char *body = ui_state_render(&len);
		respond(c, "200 OK", "application/json; charset=utf-8", STATE_HEADERS, body, len,
		        with_body);
	} else if (file) {
		respond(c, "200 OK", file->type, UI_HEADERS, (const char *)file->data, file->len,
		        with_body);
	} else if (strcmp(target, "/healthz") == 0) {
		respond(c, "200 OK", TEXT, "", LIT("ok\n"), with_body);
	} else if (strcmp(target, "/readyz") == 0) {
		why = not_ready();
		if (why)
			respond(c, "503 Service Unavailable", TEXT, "", why, strlen(why), with_body);
		else
			respond(c, "200 OK", TEXT, "", LIT("ready\n"), with_body);
	} else {
		size_t len;
		char *body = render(&len);
		respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", "", body, len, with_body);
		free(body);
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	mconn_t *c = (mconn_t *)h;

	(void)suggested;
	*buf = uv_buf_init(c->req + c->len, (unsigned)(MAX_REQUEST - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	mconn_t *c = (mconn_t *)s;

	(void)buf;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	if (c->answered)
		return;
	c->len += (size_t)nread;
	c->req[c->len] = '\0';
	if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
		answer(c);
		return;
	}
	if (c->len >= MAX_REQUEST - 1)
		respond(c, "431 Request Header Fields Too Large", TEXT, "", LIT("too large\n"), true);
}

static void on_connection(uv_stream_t *server_stream, int status)
{
	mconn_t *c;

	if (status < 0)
		return;
	c = xcalloc(1, sizeof(*c));
	uv_tcp_init(server_stream->loop, &c->tcp);
	L.nconns++;
	c->next = L.conns;
	if (L.conns)
		L.conns->prev = c;
	L.conns = c;
	timer_init(&c->timeout, on_timeout);
	if (uv_accept(server_stream, (uv_stream_t *)&c->tcp) != 0 || L.nconns > MAX_CONNS) {
		conn_close(c);
		return;
	}
	timer_at(&c->timeout, timers_now() + REQUEST_TIMEOUT_MS);
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int metrics_listen(uv_loop_t *loop, const listen_addr_t *addr)
{
	struct sockaddr_storage ss;
	int rc;

	if (uv_ip4_addr(addr->host, addr->port, (struct sockaddr_in *)&ss) != 0 &&
	    uv_ip6_addr(addr->host, addr->port, (struct sockaddr_in6 *)&ss) != 0) {
		LOG(LOG_ERROR, "msg=\"metrics listener needs a numeric IP address\" host=\"%s\"", addr->host);
		return -1;
	}
	uv_tcp_init(loop, &L.listener);
	L.open = true;
	rc = uv_tcp_bind(&L.listener, (struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&L.listener, 64, on_connection);
	if (rc != 0) {
		LOG(LOG_ERROR, "msg=\"cannot listen for metrics\" host=\"%s\" port=%d err=\"%s\"", addr->host,
		    addr->port, uv_strerror(rc));
		metrics_close();
		return -1;
	}
	ui_state_start(loop);
	LOG(LOG_INFO,
	    "msg=\"metrics listening\" url=\"http://%s:%d/metrics\" health=\"/healthz /readyz\" ui=\"/ui\"",
	    addr->host, addr->port);
	return 0;
}

void metrics_close(void)
{
	if (!L.open)
		return;
	L.open = false;
	ui_state_stop();
	uv_close((uv_handle_t *)&L.listener, NULL);
	for (mconn_t *c = L.conns; c; c = c->next)
		conn_close(c);
}
