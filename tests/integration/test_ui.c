/*
 * test_ui.c - the live page on the --metrics listener: /ui and its files,
 * the JSON it polls (/ui/state: a held lock with its holder's client
 * label, mode, fence and TTL left, the queue length of a waiting acquire,
 * Redis up or down and the store, grants and handoffs over time, the
 * bound of UI_STATE_LOCKS locks and of UI_STATE_MAX_BYTES bytes, names cut
 * at a UTF-8 boundary, and never a lease token), wrong paths, methods and
 * requests, and deploy/grafana/lockbroker.json: every metric it queries
 * exists in a live /metrics.
 *
 * Requests are written by hand on a socket (as test_health.c does), so a
 * test sees the exact bytes of an answer. The page in a real browser is
 * tests/ui/ (make test-ui).
 */
#include "harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Woverride-init"

/* broker/ui_state.h's bounds. */
#define UI_STATE_LOCKS 50
#define UI_STATE_SHOWN 4
#define UI_STATE_NAME_BYTES 256
#define UI_STATE_MAX_BYTES (256 * 1024)

/* ---- raw HTTP ------------------------------------------------------------- */

typedef struct resp {
	int status;   /* 0: no status line came */
	char *head;   /* status line and headers, without the blank line */
	char *body;   /* NUL-terminated too */
	size_t body_len;
} resp_t;

static void resp_free(resp_t *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int start(lb_redis **r, lb_broker **b)
{
	int port = lb_free_tcp_port();
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	*r = lb_redis_start(false);
	*b = lb_broker_start(*r, "--metrics", url, NULL);
	return port;
}

/* Sends req as it is, reads until the server closes (5 s at most). */
static resp_t http(int port, const char *req)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t len = 0, cap = 65536, left = strlen(req);
	char *raw = malloc(cap), *end;
	int64_t deadline = lb_now_ms() + 5000;
	bool closed = false;
	resp_t r = {0};

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect to %d: %s", port,
	             strerror(errno));
	while (left > 0) {
		ssize_t n = send(fd, req, left, MSG_NOSIGNAL);
		cr_assert_gt(n, 0, "send: %s", strerror(errno));
		req += n;
		left -= (size_t)n;
	}
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t wait = deadline - lb_now_ms();
		ssize_t n;

		if (wait <= 0 || poll(&p, 1, (int)wait) <= 0)
			break;
		if (cap - len < 4096)
			raw = realloc(raw, cap *= 2);
		n = recv(fd, raw + len, cap - len - 1, 0);
		if (n <= 0) {
			closed = true;
			break;
		}
		len += (size_t)n;
	}
	close(fd);
	raw[len] = '\0';
	cr_assert(closed, "the answer to %.40s did not end within 5 s", req);
	end = strstr(raw, "\r\n\r\n");
	cr_assert_not_null(end, "no end of headers in: %.200s", raw);
	r.head = strndup(raw, (size_t)(end - raw));
	r.body_len = len - (size_t)(end + 4 - raw);
	r.body = malloc(r.body_len + 1);
	memcpy(r.body, end + 4, r.body_len);
	r.body[r.body_len] = '\0';
	if (sscanf(r.head, "HTTP/1.%*d %d ", &r.status) != 1)
		r.status = 0;
	free(raw);
	return r;
}

static resp_t request(int port, const char *method, const char *path)
{
	char req[1024];

	snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n", method,
	         path);
	return http(port, req);
}

/* The value of header name (case-insensitive), or NULL; static buffer. */
static const char *header(const resp_t *r, const char *name)
{
	static char val[512];
	size_t nlen = strlen(name);

	for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
		const char *line = p + 2;
		if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
			const char *v = line + nlen + 1, *e;
			while (*v == ' ')
				v++;
			e = strstr(v, "\r\n");
			snprintf(val, sizeof(val), "%.*s", (int)(e ? e - v : (int)strlen(v)), v);
			return val;
		}
	}
	return NULL;
}

static void expect_status(const resp_t *r, int status, const char *what)
{
	const char *cl = header(r, "Content-Length");

	cr_assert_eq(r->status, status, "%s: status %d, want %d; head: %s", what, r->status, status, r->head);
	cr_assert_not_null(cl, "%s: no Content-Length: %s", what, r->head);
	cr_assert_eq((size_t)atol(cl), r->body_len, "%s: Content-Length %s, body %zu bytes", what, cl,
	             r->body_len);
}

/* ---- /ui/state ------------------------------------------------------------ */

/* Every body of /ui/state a test read, to look for tokens in at the end. */
static char *seen;
static size_t seen_len;

static void remember(const char *s, size_t len)
{
	seen = realloc(seen, seen_len + len + 2);
	memcpy(seen + seen_len, s, len);
	seen_len += len;
	seen[seen_len++] = '\n';
	seen[seen_len] = '\0';
}

static void expect_not_seen(const char *token, const char *what)
{
	cr_assert_gt(strlen(token), 16);
	cr_assert_null(seen ? strstr(seen, token) : NULL, "%s %s appears in /ui/state", what, token);
}

static void forget_seen(void)
{
	free(seen);
	seen = NULL;
	seen_len = 0;
}

/* GET /ui/state: asserts 200, JSON, no-store and the byte bound; returns the
 * parsed state (a new reference). */
static json_t *state(int port)
{
	resp_t r = request(port, "GET", "/ui/state");
	json_error_t err;
	json_t *st;

	expect_status(&r, 200, "/ui/state");
	cr_assert_str_eq(header(&r, "Content-Type"), "application/json; charset=utf-8");
	cr_assert_str_eq(header(&r, "Cache-Control"), "no-store");
	cr_assert_leq(r.body_len, UI_STATE_MAX_BYTES, "/ui/state is %zu bytes", r.body_len);
	st = json_loadb(r.body, r.body_len, JSON_REJECT_DUPLICATES, &err);
	cr_assert_not_null(st, "/ui/state is no JSON (%s at %d): %.300s", err.text, err.position, r.body);
	remember(r.body, r.body_len);
	resp_free(&r);
	cr_assert_eq(json_integer_value(json_object_get(st, "version")), 1);
	return st;
}

static json_t *find_lock(const json_t *st, const char *name)
{
	size_t k;
	json_t *l;

	json_array_foreach(json_object_get(st, "locks"), k, l) {
		if (strcmp(json_string_value(json_object_get(l, "name")), name) == 0)
			return l;
	}
	return NULL;
}

typedef bool (*state_pred)(const json_t *st, const void *arg);

/* Polls /ui/state (every 50 ms, a render is reused 250 ms) until pred
 * holds; returns that state (a new reference), or fails after timeout_ms
 * with the last one. */
static json_t *state_until(int port, state_pred pred, const void *arg, int timeout_ms, const char *what)
{
	int64_t deadline = lb_now_ms() + timeout_ms;

	for (;;) {
		json_t *st = state(port);
		if (pred(st, arg))
			return st;
		if (lb_now_ms() > deadline) {
			char *s = json_dumps(st, JSON_COMPACT);
			cr_log_error("last /ui/state: %.2000s", s);
			free(s);
			json_decref(st);
			cr_assert_fail("/ui/state never showed %s within %d ms", what, timeout_ms);
		}
		json_decref(st);
		lb_sleep_ms(50);
	}
}

struct lock_want {
	const char *name;
	json_int_t holders, queue;
	const char *holder_label; /* NULL: any */
};

static bool lock_is(const json_t *st, const void *arg)
{
	const struct lock_want *w = arg;
	const json_t *l = find_lock(st, w->name), *h0;

	if (!l || json_integer_value(json_object_get(l, "holder_count")) != w->holders ||
	    json_integer_value(json_object_get(l, "queue_length")) != w->queue)
		return false;
	if (!w->holder_label)
		return true;
	h0 = json_array_get(json_object_get(l, "holders"), 0);
	return h0 && json_is_string(json_object_get(h0, "client")) &&
	       strcmp(json_string_value(json_object_get(h0, "client")), w->holder_label) == 0;
}

static bool lock_absent(const json_t *st, const void *arg)
{
	return find_lock(st, arg) == NULL;
}

static bool redis_up_is(const json_t *st, const void *arg)
{
	return json_is_true(json_object_get(json_object_get(st, "redis"), "up")) == *(const bool *)arg;
}

static bool series_at_least(const json_t *st, const void *arg)
{
	return json_array_size(json_object_get(json_object_get(st, "series"), "grants")) >= *(const size_t *)arg;
}

static void hello(lb_client *c, const char *label)
{
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "client", label));
}

/* ---- the page ------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "cannot open %s (run from the top of the tree): %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* GET path serves the file of ui/ byte for byte, with its type and the
 * page's headers; HEAD gives the same headers and no body. */
static void expect_file(int port, const char *path, const char *file, const char *type)
{
	resp_t g = request(port, "GET", path), h = request(port, "HEAD", path);
	size_t len;
	char *want = read_file(file, &len);

	expect_status(&g, 200, path);
	cr_assert_str_eq(header(&g, "Content-Type"), type, "%s", path);
	cr_assert_eq(g.body_len, len, "%s: %zu bytes, %s has %zu", path, g.body_len, file, len);
	cr_assert_eq(memcmp(g.body, want, len), 0, "%s differs from %s", path, file);
	cr_assert_str_eq(header(&g, "X-Content-Type-Options"), "nosniff");
	cr_assert_not_null(strstr(header(&g, "Content-Security-Policy"), "default-src 'none'"));
	cr_assert_not_null(strstr(header(&g, "Content-Security-Policy"), "script-src 'self'"));
	cr_assert_null(strstr(header(&g, "Content-Security-Policy"), "unsafe-inline"));
	cr_assert_eq(h.status, 200, "HEAD %s: %s", path, h.head);
	cr_assert_eq(h.body_len, 0, "HEAD %s has a body", path);
	cr_assert_eq((size_t)atol(header(&h, "Content-Length")), len, "HEAD %s", path);
	free(want);
	resp_free(&g);
	resp_free(&h);
}

LB_TEST(ui, page_and_its_files_are_served, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	size_t len;
	char *js;
	const char *never[] = {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
	                       "eval(", "new Function", "http://", "https://"};
	resp_t p;

	expect_file(port, "/ui", "ui/index.html", "text/html; charset=utf-8");
	expect_file(port, "/ui/", "ui/index.html", "text/html; charset=utf-8");
	expect_file(port, "/ui/index.html", "ui/index.html", "text/html; charset=utf-8");
	expect_file(port, "/ui/app.js", "ui/app.js", "text/javascript; charset=utf-8");
	expect_file(port, "/ui/style.css", "ui/style.css", "text/css; charset=utf-8");
	expect_file(port, "/ui?refresh=1", "ui/index.html", "text/html; charset=utf-8");

	/* The page loads nothing from elsewhere and runs no inline code (the
	 * policy above would block it); its code never parses data as
	 * markup (the SVG namespace is a name, not a load). */
	p = request(port, "GET", "/ui");
	cr_assert_not_null(strstr(p.body, "<script src=\"/ui/app.js\""), "%s", p.body);
	cr_assert_null(strstr(p.body, "<script>"), "inline script in the page");
	cr_assert_null(strstr(p.body, "http"), "the page names another origin");
	{
		regex_t re;
		cr_assert_eq(regcomp(&re, "<[^>]*[[:space:]]on[a-z]+[[:space:]]*=", REG_EXTENDED | REG_ICASE), 0);
		cr_assert_neq(regexec(&re, p.body, 0, NULL, 0), 0, "an inline event handler in the page");
		regfree(&re);
	}
	resp_free(&p);
	js = read_file("ui/app.js", &len);
	for (size_t k = 0; k < sizeof(never) / sizeof(never[0]); k++) {
		const char *at = strstr(js, never[k]);
		if (at && strncmp(at, "http://www.w3.org/2000/svg", 26) == 0)
			at = strstr(at + 26, never[k]);
		cr_assert_null(at, "ui/app.js uses %s", never[k]);
	}
	free(js);
	lb_end();
}

LB_TEST(ui, wrong_paths_methods_and_requests, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	const char *missing[] = {"/ui/nope.js", "/ui/state/x", "/ui/../metrics", "/ui//app.js", "/UI",
	                         "/ui/index.html/", "/uistate", "/ui/state.json", "/ui/%2e%2e/metrics"};
	resp_t x;

	for (size_t k = 0; k < sizeof(missing) / sizeof(missing[0]); k++) {
		x = request(port, "GET", missing[k]);
		expect_status(&x, 404, missing[k]);
		cr_assert_str_eq(x.body, "not found: try /metrics, /healthz or /readyz\n", "%s", missing[k]);
		resp_free(&x);
	}
	const char *methods[] = {"POST", "PUT", "DELETE", "OPTIONS"};
	for (size_t k = 0; k < sizeof(methods) / sizeof(methods[0]); k++) {
		x = request(port, methods[k], "/ui/state");
		expect_status(&x, 405, methods[k]);
		cr_assert_str_eq(header(&x, "Allow"), "GET, HEAD");
		resp_free(&x);
		x = request(port, methods[k], "/ui");
		expect_status(&x, 405, methods[k]);
		resp_free(&x);
	}
	/* HEAD of the state: its headers, no body. */
	x = request(port, "HEAD", "/ui/state");
	cr_assert_eq(x.status, 200, "%s", x.head);
	cr_assert_eq(x.body_len, 0);
	cr_assert_gt(atol(header(&x, "Content-Length")), 100);
	resp_free(&x);
	/* A query string is ignored. */
	x = request(port, "GET", "/ui/state?since=0&n=1000000");
	expect_status(&x, 200, "/ui/state?...");
	resp_free(&x);
	/* Bad requests: no target, garbage (an over-long one: test_health.c). */
	x = http(port, "GET\r\n\r\n");
	expect_status(&x, 400, "no target");
	resp_free(&x);
	x = http(port, "\x01\x02\x03 \xff\xfe\r\n\r\n");
	cr_assert(x.status == 404 || x.status == 400, "garbage: %s", x.head);
	resp_free(&x);
	/* Still serving. */
	json_decref(state(port));
	forget_seen();
	lb_end();
}

LB_TEST(ui, state_shows_holder_queue_store_and_never_a_token, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	lb_client *h = lb_connect(b, LB_TCP), *w = lb_connect(b, LB_UNIX), *q = lb_connect(b, LB_TCP);
	json_t *acq, *wid, *got, *st, *l, *h0, *w0, *redis, *series, *hot;
	const char *token, *token2;
	json_int_t fence, ttl;
	size_t n, need;
	bool up;
	char token_copy[80], token2_copy[80];

	hello(h, "holder <b>label</b> \"quoted\"");
	hello(w, "waiter-label");
	acq = lb_acq_call(h, "ui/lock 1", LB_AO(.ttl_ms = 30000, .wait_ms = 0), 5000);
	lb_expect_ok(acq);
	token = lb_str(acq, "lease");
	snprintf(token_copy, sizeof(token_copy), "%s", token);
	fence = lb_int(acq, "fence");
	wid = lb_acq_send(w, "ui/lock 1", LB_AO(.ttl_ms = 30000, .wait_ms = 30000));

	/* The holder, its label, mode, fence and TTL; the waiter in the queue. */
	struct lock_want held = {"ui/lock 1", 1, 1, "holder <b>label</b> \"quoted\""};
	st = state_until(port, lock_is, &held, 10000, "the lock held with one waiting");
	cr_assert_str_eq(json_string_value(json_object_get(st, "scope")), "this broker's sessions");
	cr_assert_eq(json_integer_value(json_object_get(st, "limit")), UI_STATE_LOCKS);
	l = find_lock(st, "ui/lock 1");
	h0 = json_array_get(json_object_get(l, "holders"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(h0, "mode")), "exclusive");
	cr_assert_eq(json_integer_value(json_object_get(h0, "fence")), fence, "%s", lb_dump(h0));
	ttl = json_integer_value(json_object_get(h0, "ttl_ms"));
	cr_assert(ttl > 20000 && ttl <= 30000, "ttl_ms %lld", (long long)ttl);
	cr_assert(json_is_true(json_object_get(h0, "watchdog")));
	cr_assert_eq(json_integer_value(json_object_get(h0, "count")), 1);
	cr_assert(json_is_string(json_object_get(h0, "session")));
	w0 = json_array_get(json_object_get(l, "waiters"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(w0, "client")), "waiter-label", "%s", lb_dump(l));
	cr_assert_str_eq(json_string_value(json_object_get(w0, "mode")), "exclusive");
	cr_assert_geq(json_integer_value(json_object_get(w0, "waited_ms")), 0);
	/* Redis and the store. */
	redis = json_object_get(st, "redis");
	cr_assert(json_is_true(json_object_get(redis, "up")));
	cr_assert_str_eq(json_string_value(json_object_get(redis, "mode")), "single");
	cr_assert(json_is_string(json_object_get(json_object_get(redis, "target"), "addr")), "%s",
	          lb_dump(redis));
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(st, "totals"), "leases")), 1);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(st, "totals"), "waiters")), 1);
	json_decref(st);

	/* A re-entry counts on the same holder; a shared lock of another
	 * session shows its mode and no label (none given). */
	lb_expect_ok(lb_acq_call(q, "ui/shared", LB_AO(.mode = "shared", .wait_ms = 0), 5000));
	struct lock_want shared = {"ui/shared", 1, 0, NULL};
	st = state_until(port, lock_is, &shared, 10000, "the shared lock");
	h0 = json_array_get(json_object_get(find_lock(st, "ui/shared"), "holders"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(h0, "mode")), "shared");
	cr_assert(json_is_null(json_object_get(h0, "client")), "%s", lb_dump(h0));
	json_decref(st);

	/* Released: the waiter holds it, with its own label; the queue is empty. */
	lb_release(h, token_copy);
	got = lb_wait_response(w, wid, 5000);
	lb_expect_ok(got);
	token2 = lb_str(got, "lease");
	snprintf(token2_copy, sizeof(token2_copy), "%s", token2);
	struct lock_want handed = {"ui/lock 1", 1, 0, "waiter-label"};
	st = state_until(port, lock_is, &handed, 10000, "the lock handed to the waiter");
	cr_assert_gt(json_integer_value(json_object_get(json_array_get(json_object_get(
	                 find_lock(st, "ui/lock 1"), "holders"), 0), "fence")), fence);
	json_decref(st);

	/* The series: a sample a second, with the grants and the handoff. */
	need = 3;
	st = state_until(port, series_at_least, &need, 10000, "three samples");
	series = json_object_get(st, "series");
	n = json_array_size(json_object_get(series, "grants"));
	{
		const char *cols[] = {"handoffs", "handoff_mean_ms", "handoff_p50_ms", "handoff_p99_ms",
		                      "handoff_max_ms", "leases", "waiters"};
		json_int_t grants = 0, handoffs = 0;
		size_t k;
		json_t *v;

		for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
			cr_assert_eq(json_array_size(json_object_get(series, cols[c])), n, "%s", cols[c]);
		json_array_foreach(json_object_get(series, "grants"), k, v)
			grants += json_integer_value(v);
		json_array_foreach(json_object_get(series, "handoffs"), k, v)
			handoffs += json_integer_value(v);
		/* Those of the current second are not in a sample yet. */
		if (grants < 3 || handoffs < 1) {
			json_decref(st);
			lb_sleep_ms(1200);
			st = state(port);
			series = json_object_get(st, "series");
			grants = handoffs = 0;
			json_array_foreach(json_object_get(series, "grants"), k, v)
				grants += json_integer_value(v);
			json_array_foreach(json_object_get(series, "handoffs"), k, v)
				handoffs += json_integer_value(v);
		}
		cr_assert_eq(grants, 3, "three grants in the samples: %s", lb_dump(series));
		cr_assert_eq(handoffs, 1, "one handoff in the samples: %s", lb_dump(series));
	}
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(st, "totals"), "grants_total")), 3);
	hot = json_object_get(st, "hot");
	cr_assert_gt(json_array_size(hot), 0, "%s", lb_dump(hot));
	json_decref(st);

	/* Neither token ever appeared, in any state read. */
	expect_not_seen(token_copy, "the holder's token");
	expect_not_seen(token2_copy, "the waiter's token");

	/* Redis down, and back. */
	lb_redis_stop(r);
	up = false;
	json_decref(state_until(port, redis_up_is, &up, 10000, "Redis down"));
	lb_redis_restart(r);
	up = true;
	json_decref(state_until(port, redis_up_is, &up, 15000, "Redis up again"));

	/* The holders' sessions end: the lock is gone from the page. */
	lb_close(h);
	lb_close(w);
	json_decref(state_until(port, lock_absent, "ui/lock 1", 10000, "the lock gone"));
	forget_seen();
	lb_end();
}

/* Sends n requests on c, then reads their n answers; asserts each ok. */
static void pipeline(lb_client *c, json_t **reqs, size_t n)
{
	json_t **ids = calloc(n, sizeof(*ids));

	for (size_t k = 0; k < n; k++)
		ids[k] = lb_send_req(c, "O", reqs[k]);
	for (size_t k = 0; k < n; k++) {
		json_t *a = lb_wait_response(c, ids[k], 10000);
		cr_assert(lb_is_ok(a), "%s -> %s", lb_dump(reqs[k]), lb_dump(a));
		json_decref(reqs[k]);
	}
	free(ids);
}

LB_TEST(ui, state_bounded_to_the_busiest_locks, 90)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	lb_client *c = lb_connect(b, LB_TCP), *d = lb_connect(b, LB_TCP);
	enum { NLOCKS = UI_STATE_LOCKS + 12 };
	json_t *reqs[NLOCKS], *st, *locks, *l, *id;
	char name[600];
	size_t k;

	hello(c, "many");
	for (k = 0; k < NLOCKS; k++) {
		snprintf(name, sizeof(name), "bound-%03zu", k);
		reqs[k] = json_pack("{s:s, s:s, s:i}", "op", "acquire", "lock", name, "wait_ms", 0);
	}
	pipeline(c, reqs, NLOCKS);
	/* The last lock gets a waiter: the busiest, shown first. */
	id = lb_acq_send(d, "bound-061", LB_AO(.wait_ms = 30000));
	lb_wait_waiters(c, "bound-061", 1, 5000);
	/* A name of the protocol's longest, 512 bytes of 3-byte characters
	 * (and 2 more): shown cut at a character boundary. */
	name[0] = '\0';
	for (k = 0; k < 170; k++)
		strcat(name, "\xe2\x82\xac"); /* U+20AC */
	strcat(name, "ab");
	cr_assert_eq(strlen(name), 512);
	lb_expect_ok(lb_acq_call(d, name, LB_AO(.wait_ms = 0), 5000));

	struct lock_want busiest = {"bound-061", 1, 1, NULL};
	st = state_until(port, lock_is, &busiest, 10000, "the lock with a waiter");
	locks = json_object_get(st, "locks");
	cr_assert_eq(json_array_size(locks), UI_STATE_LOCKS, "%zu locks shown", json_array_size(locks));
	cr_assert_eq(json_integer_value(json_object_get(st, "locks_total")), NLOCKS + 1);
	cr_assert(json_is_true(json_object_get(st, "truncated")));
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(locks, 0), "name")), "bound-061",
	                 "the busiest first: %s", lb_dump(json_array_get(locks, 0)));
	json_array_foreach(locks, k, l) {
		const char *s = json_string_value(json_object_get(l, "name"));
		if (strncmp(s, "\xe2\x82\xac", 3) != 0)
			continue;
		cr_assert_eq(strlen(s), 255, "cut at 256 bytes, back to a character: %zu", strlen(s));
		cr_assert(json_is_true(json_object_get(l, "name_cut")));
	}
	json_decref(st);
	(void)id; /* still waiting: answered shutting_down at the end */
	forget_seen();
	lb_end();
}

LB_TEST(ui, state_bounded_in_bytes, 120)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	lb_client *a = lb_connect(b, LB_TCP), *c = lb_connect(b, LB_TCP);
	enum { NLOCKS = UI_STATE_LOCKS + 2, NOWN = UI_STATE_SHOWN };
	json_t *reqs[NLOCKS * NOWN], *st;
	char label[129], name[600], owner[16];
	size_t k, n = 0;

	/* Labels of 128 control characters escape to 6 bytes each, names of
	 * quotes to 2: 52 locks of 4 shared holders and 4 waiters each are
	 * more than the bound. */
	memset(label, 1, 128);
	label[128] = '\0';
	hello(a, label);
	hello(c, label);
	for (k = 0; k < NLOCKS; k++) {
		memset(name, '"', 500);
		snprintf(name + 500, 12, "%03zu", k);
		for (int o = 0; o < NOWN; o++) {
			snprintf(owner, sizeof(owner), "o%d", o);
			reqs[n++] = json_pack("{s:s, s:s, s:s, s:s, s:i}", "op", "acquire", "lock", name, "mode",
			                      "shared", "owner", owner, "wait_ms", 0);
		}
	}
	pipeline(a, reqs, n);
	for (k = 0; k < NLOCKS; k++) {
		memset(name, '"', 500);
		snprintf(name + 500, 12, "%03zu", k);
		for (int o = 0; o < NOWN; o++) {
			snprintf(owner, sizeof(owner), "w%d", o);
			lb_send_req(c, "{s:s, s:s, s:s, s:i}", "op", "acquire", "lock", name, "owner", owner,
			            "wait_ms", 60000);
		}
	}
	/* Every waiter pending. */
	{
		int64_t deadline = lb_now_ms() + 20000;
		for (;;) {
			st = state(port);
			if (json_integer_value(json_object_get(json_object_get(st, "totals"), "waiters")) ==
			    NLOCKS * NOWN)
				break;
			json_decref(st);
			cr_assert_lt(lb_now_ms(), deadline, "the waiters never all showed");
			lb_sleep_ms(100);
		}
	}
	/* state() asserted the byte bound; the busiest locks were kept. */
	cr_assert(json_is_true(json_object_get(st, "truncated")));
	cr_assert_lt(json_array_size(json_object_get(st, "locks")), UI_STATE_LOCKS, "%zu locks",
	             json_array_size(json_object_get(st, "locks")));
	cr_assert_gt(json_array_size(json_object_get(st, "locks")), 0);
	{
		json_t *l0 = json_array_get(json_object_get(st, "locks"), 0);
		json_t *h0 = json_array_get(json_object_get(l0, "holders"), 0);
		cr_assert_eq(json_array_size(json_object_get(l0, "holders")), UI_STATE_SHOWN);
		cr_assert_eq(json_array_size(json_object_get(l0, "waiters")), UI_STATE_SHOWN);
		cr_assert_str_eq(json_string_value(json_object_get(h0, "client")), label);
		cr_assert_eq(strlen(json_string_value(json_object_get(l0, "name"))), UI_STATE_NAME_BYTES);
	}
	json_decref(st);
	forget_seen();
	lb_end();
}

static bool hot_first_is(const json_t *st, const void *arg)
{
	const json_t *h0 = json_array_get(json_object_get(st, "hot"), 0);

	return h0 && strcmp(json_string_value(json_object_get(h0, "name")), arg) == 0;
}

/* More distinct names than the grant-rate table keeps (256): the table
 * evicts the coldest, a lock granted often stays, and the hottest shows
 * first, with at most 10 shown. */
LB_TEST(ui, hot_locks_in_a_bounded_table, 90)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	lb_client *c = lb_connect(b, LB_TCP);
	enum { NAMES = 300, HOT = 30 };
	json_t *reqs[NAMES], *st, *hot;
	char name[32];

	for (int k = 0; k < NAMES; k++) {
		snprintf(name, sizeof(name), "many-%03d", k);
		reqs[k] = json_pack("{s:s, s:s, s:i}", "op", "acquire", "lock", name, "wait_ms", 0);
	}
	pipeline(c, reqs, NAMES);
	for (int k = 0; k < HOT; k++)
		lb_release(c, lb_must_acquire(c, "the-hot-one", 10000));
	st = state_until(port, hot_first_is, "the-hot-one", 10000, "the-hot-one first among the hot");
	hot = json_object_get(st, "hot");
	cr_assert_leq(json_array_size(hot), 10);
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(hot, 0), "grants")), HOT, "%s",
	             lb_dump(hot));
	cr_assert_gt(json_real_value(json_object_get(json_array_get(hot, 0), "grants_per_s")), 0);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(st, "totals"), "grants_total")),
	             NAMES + HOT);
	cr_assert_eq(json_integer_value(json_object_get(st, "locks_total")), NAMES);
	json_decref(st);
	forget_seen();
	lb_end();
}

/* ---- the Grafana dashboard ------------------------------------------------ */

/* Adds to names (a string array) every lockbroker_* name in s. */
static void names_in(const char *s, json_t *names)
{
	regex_t re;
	regmatch_t m;

	cr_assert_eq(regcomp(&re, "lockbroker_[a-z0-9_]+", REG_EXTENDED), 0);
	while (regexec(&re, s, 1, &m, 0) == 0) {
		json_array_append_new(names, json_stringn(s + m.rm_so, (size_t)(m.rm_eo - m.rm_so)));
		s += m.rm_eo;
	}
	regfree(&re);
}

/* Every query of the dashboard (targets' expr, variables' query and
 * definition), walked through the whole document. */
static void queries_in(const json_t *j, json_t *names, size_t *nexpr)
{
	const char *key;
	json_t *v;
	size_t k;

	if (json_is_object(j)) {
		json_object_foreach((json_t *)j, key, v) {
			if (json_is_string(v) &&
			    (!strcmp(key, "expr") || !strcmp(key, "query") || !strcmp(key, "definition"))) {
				names_in(json_string_value(v), names);
				*nexpr += !strcmp(key, "expr");
			} else {
				queries_in(v, names, nexpr);
			}
		}
	} else if (json_is_array(j)) {
		json_array_foreach((json_t *)j, k, v)
			queries_in(v, names, nexpr);
	}
}

/* The metric family (or series) name is in the exposition: a sample line
 * starts with it, or a TYPE line declares it (a family with no sample
 * yet, such as the per-master ones of a single Redis). */
static bool in_exposition(const char *text, const char *name)
{
	size_t len = strlen(name);
	char type[160];

	snprintf(type, sizeof(type), "# TYPE %s ", name);
	if (strstr(text, type))
		return true;
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, name, len) == 0 && (p[len] == ' ' || p[len] == '{'))
			return true;
	return false;
}

LB_TEST(ui, grafana_dashboard_queries_only_metrics_that_exist, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	json_error_t err;
	json_t *dash = json_load_file("deploy/grafana/lockbroker.json", JSON_REJECT_DUPLICATES, &err);
	json_t *names = json_array(), *v, *var, *panel;
	size_t nexpr = 0, k;
	bool has_ds_var = false;
	resp_t m;

	cr_assert_not_null(dash, "deploy/grafana/lockbroker.json: %s (line %d)", err.text, err.line);
	cr_assert_geq(json_integer_value(json_object_get(dash, "schemaVersion")), 36);
	json_array_foreach(json_object_get(json_object_get(dash, "templating"), "list"), k, var) {
		if (!strcmp(json_string_value(json_object_get(var, "type")), "datasource") &&
		    !strcmp(json_string_value(json_object_get(var, "query")), "prometheus"))
			has_ds_var = true;
	}
	cr_assert(has_ds_var, "no Prometheus data source variable");
	/* Every panel that queries names the variable as its data source. */
	json_array_foreach(json_object_get(dash, "panels"), k, panel) {
		json_t *ds = json_object_get(panel, "datasource");
		if (!json_object_get(panel, "targets"))
			continue;
		cr_assert_str_eq(json_string_value(json_object_get(ds, "uid")), "${datasource}", "panel %s",
		                 json_string_value(json_object_get(panel, "title")));
	}
	queries_in(dash, names, &nexpr);
	cr_assert_geq(nexpr, 10, "only %zu queries", nexpr);

	/* One grant and one handoff, so every family has samples it can. */
	{
		lb_client *c = lb_connect(b, LB_TCP), *d = lb_connect(b, LB_TCP);
		const char *t = lb_must_acquire(c, "dash", 10000);
		json_t *id = lb_acq_send(d, "dash", LB_AO(.wait_ms = 10000));
		lb_wait_waiters(c, "dash", 1, 5000);
		lb_release(c, t);
		lb_expect_ok(lb_wait_response(d, id, 5000));
	}
	m = request(port, "GET", "/metrics");
	expect_status(&m, 200, "/metrics");
	json_array_foreach(names, k, v)
		cr_assert(in_exposition(m.body, json_string_value(v)),
		          "deploy/grafana/lockbroker.json queries %s, which /metrics does not have",
		          json_string_value(v));
	cr_log_info("grafana: %zu queries, %zu metric names, all in /metrics", nexpr, json_array_size(names));
	cr_assert_geq(lb_metric_sample(m.body, "lockbroker_grants_total"), 2);
	cr_assert_geq(lb_metric_sample(m.body, "lockbroker_handoff_seconds_count"), 1);
	resp_free(&m);
	json_decref(names);
	json_decref(dash);
	lb_end();
}
