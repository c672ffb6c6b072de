/*
 * test_health.c - the health probes on the --metrics listener: /healthz
 * (liveness) and /readyz (readiness: Redis up with the scripts loaded),
 * HEAD, 404, 405, query strings, the listener's bounds (request size, time,
 * connections), and the probe command of deploy/Dockerfile and
 * deploy/compose.yaml run for real against a broker.
 *
 * Requests are written by hand on a socket, so a test sees the exact bytes
 * of an answer (a HEAD answer must have no body) and can send what no HTTP
 * client would (half a request, too long a request).
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The listener's bounds in broker/metrics.c. */
#define MAX_REQUEST 8192
#define MAX_CONNS 64
#define REQUEST_TIMEOUT_MS 5000

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* A broker on a fresh Redis with its metrics listener on a free port;
 * returns the port. */
static int start(lb_redis **r, lb_broker **b)
{
	int port = free_port();
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	*r = lb_redis_start(false);
	*b = lb_broker_start(*r, "--metrics", url, NULL);
	return port;
}

/* ---- raw HTTP ------------------------------------------------------------- */

typedef struct http_resp {
	int status;          /* 0: no status line came */
	char head[4096];     /* status line and headers, without the blank line */
	char body[65536];
	size_t body_len;
	bool closed;         /* the server closed the connection (EOF or reset) */
	int64_t elapsed_ms;  /* from the start of the read to EOF or timeout */
} http_resp;

static int http_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
	             "cannot connect to the metrics listener on %d: %s", port, strerror(errno));
	return fd;
}

static void http_send(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		cr_assert_gt(n, 0, "send: %s", strerror(errno));
		buf += n;
		len -= (size_t)n;
	}
}

/* Reads until the server closes or timeout_ms pass, then splits the bytes
 * into status, head and body. */
static void http_read(int fd, int timeout_ms, http_resp *r)
{
	static char raw[sizeof(r->head) + sizeof(r->body)];
	int64_t t0 = lb_now_ms(), deadline = t0 + timeout_ms;
	size_t len = 0;
	char *end;

	memset(r, 0, sizeof(*r));
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - lb_now_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		n = recv(fd, raw + len, sizeof(raw) - 1 - len, 0);
		if (n <= 0) {
			r->closed = true;
			break;
		}
		len += (size_t)n;
		cr_assert_lt(len, sizeof(raw) - 1, "answer too long for the test's buffer");
	}
	r->elapsed_ms = lb_now_ms() - t0;
	raw[len] = '\0';
	end = strstr(raw, "\r\n\r\n");
	if (!end) {
		cr_assert_lt(len, sizeof(r->head));
		memcpy(r->head, raw, len);
		return;
	}
	cr_assert_lt((size_t)(end - raw), sizeof(r->head));
	memcpy(r->head, raw, (size_t)(end - raw));
	r->body_len = len - (size_t)(end + 4 - raw);
	memcpy(r->body, end + 4, r->body_len);
	if (sscanf(r->head, "HTTP/1.%*d %d ", &r->status) != 1)
		r->status = 0;
}

/* One request (raw bytes), its whole answer. */
static void http(int port, const char *req, http_resp *r)
{
	int fd = http_connect(port);

	http_send(fd, req, strlen(req));
	http_read(fd, 5000, r);
	close(fd);
	cr_assert(r->closed, "the answer to %.40s did not end within 5 s: %s", req, r->head);
}

/* GET path with HTTP/1.1 and a Host, as a probe sends it. */
static void get(int port, const char *path, http_resp *r)
{
	char req[512];

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n", path);
	http(port, req, r);
}

/* The value of header name (case-insensitive), or NULL; static buffer. */
static const char *header(const http_resp *r, const char *name)
{
	static char val[256];
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

/* Asserts status, the exact body, and a Content-Length that matches it. */
static void expect(const http_resp *r, int status, const char *body, const char *what)
{
	const char *cl = header(r, "Content-Length");

	cr_assert_eq(r->status, status, "%s: status %d, want %d; head: %s", what, r->status, status, r->head);
	cr_assert_not_null(cl, "%s: no Content-Length; head: %s", what, r->head);
	cr_assert_eq((size_t)atol(cl), r->body_len, "%s: Content-Length %s, body %zu bytes", what, cl,
	             r->body_len);
	if (body) {
		cr_assert_eq(r->body_len, strlen(body), "%s: body \"%.*s\", want \"%s\"", what, (int)r->body_len,
		             r->body, body);
		cr_assert_eq(memcmp(r->body, body, r->body_len), 0, "%s: body \"%.*s\", want \"%s\"", what,
		             (int)r->body_len, r->body, body);
	}
}

/* Polls GET /readyz every 100 ms until it answers status (r holds the last
 * answer); returns the time it took, or -1 when timeout_ms passed. */
static int64_t readyz_until(int port, int status, int timeout_ms, http_resp *r)
{
	int64_t t0 = lb_now_ms();

	for (;;) {
		get(port, "/readyz", r);
		if (r->status == status)
			return lb_now_ms() - t0;
		if (lb_now_ms() - t0 > timeout_ms)
			return -1;
		lb_sleep_ms(100);
	}
}

/* ---- the probes ------------------------------------------------------------ */

LB_TEST(health, healthz_ok, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	http_resp h;

	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz");
	cr_expect_not_null(strstr(h.head, "HTTP/1.1 200 OK\r\n"), "%s", h.head);
	cr_expect_str_eq(header(&h, "Connection"), "close");
	cr_assert_not_null(header(&h, "Content-Type"), "%s", h.head);
	cr_expect_eq(strncmp(header(&h, "Content-Type"), "text/plain", 10), 0, "%s", h.head);
	/* an HTTP/1.0 request without headers, as a bare-bones probe sends */
	http(port, "GET /healthz HTTP/1.0\r\n\r\n", &h);
	expect(&h, 200, "ok\n", "HTTP/1.0 GET /healthz");
	lb_end();
}

LB_TEST(health, readyz_follows_redis, 90)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	lb_client *c = lb_connect(b, LB_TCP);
	http_resp h;
	int64_t took;

	get(port, "/readyz", &h);
	expect(&h, 200, "ready\n", "GET /readyz with Redis up");

	lb_redis_stop(r);
	took = readyz_until(port, 503, 5000, &h);
	cr_assert_geq(took, 0, "/readyz still %d 5 s after Redis stopped: %.*s", h.status, (int)h.body_len,
	              h.body);
	expect(&h, 503, "redis down\n", "GET /readyz with Redis down");
	/* what /readyz says matches what a client gets */
	lb_expect_err(lb_try_acquire(c, "hz", 5000), "unavailable");
	/* liveness does not depend on Redis */
	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz with Redis down");
	http(port, "HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", &h);
	cr_assert_eq(h.status, 503, "HEAD /readyz with Redis down: %s", h.head);
	cr_assert_eq(h.body_len, 0, "HEAD answer has a body: %.*s", (int)h.body_len, h.body);
	cr_expect_str_eq(header(&h, "Content-Length"), "11", "%s", h.head);

	lb_redis_restart(r);
	took = readyz_until(port, 200, 15000, &h);
	cr_assert_geq(took, 0, "/readyz still %d 15 s after Redis came back: %.*s", h.status,
	              (int)h.body_len, h.body);
	expect(&h, 200, "ready\n", "GET /readyz after Redis came back");
	/* ready means the scripts are loaded: an acquire works at once */
	lb_must_acquire(c, "hz", 5000);
	lb_end();
}

LB_TEST(health, readyz_503_until_redis_first_up, 60)
{
	lb_redis *r = lb_redis_start(false);
	int port = free_port();
	char url[64];
	lb_broker *b;
	lb_client *c;
	http_resp h;

	/* The broker starts while Redis is not there yet. */
	lb_redis_stop(r);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	b = lb_broker_start_no_redis_wait(r, "--metrics", url, NULL);
	get(port, "/readyz", &h);
	expect(&h, 503, "redis down\n", "GET /readyz before Redis ever answered");
	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz before Redis ever answered");
	lb_redis_restart(r);
	cr_assert_geq(readyz_until(port, 200, 15000, &h), 0, "/readyz still %d 15 s after Redis came up",
	              h.status);
	c = lb_connect(b, LB_TCP);
	lb_must_acquire(c, "first", 5000);
	lb_end();
}

/* A real client's view, and the exit status a shell probe relies on. */
LB_TEST(health, curl_fail_flag_follows_readiness, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	char cmd[200];
	http_resp h;

	snprintf(cmd, sizeof(cmd), "curl -fsS --max-time 5 -o /dev/null http://127.0.0.1:%d/readyz 2>/dev/null",
	         port);
	cr_assert_eq(system(cmd), 0, "curl -f /readyz failed with Redis up");
	lb_redis_stop(r);
	cr_assert_geq(readyz_until(port, 503, 5000, &h), 0);
	cr_assert_neq(system(cmd), 0, "curl -f /readyz succeeded with Redis down");
	lb_end();
}

LB_TEST(health, head_has_no_body, 60)
{
	const char *paths[] = {"/healthz", "/readyz", "/metrics"};
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	char req[128];
	http_resp h, g;

	for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
		snprintf(req, sizeof(req), "HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n", paths[k]);
		http(port, req, &h);
		cr_assert_eq(h.status, 200, "HEAD %s: %s", paths[k], h.head);
		cr_assert_eq(h.body_len, 0, "HEAD %s has a body: %.*s", paths[k], (int)h.body_len, h.body);
		cr_assert_not_null(header(&h, "Content-Length"), "HEAD %s: %s", paths[k], h.head);
		cr_assert_gt(atol(header(&h, "Content-Length")), 0, "HEAD %s: %s", paths[k], h.head);
		if (k < 2) { /* the same headers as GET (/metrics changes between two scrapes) */
			get(port, paths[k], &g);
			cr_expect_str_eq(h.head, g.head, "HEAD and GET %s differ", paths[k]);
		}
	}
	http(port, "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n", &h);
	cr_assert_eq(h.status, 404, "%s", h.head);
	cr_assert_eq(h.body_len, 0, "HEAD /nope has a body: %.*s", (int)h.body_len, h.body);
	lb_end();
}

LB_TEST(health, unknown_path_404, 60)
{
	const char *paths[] = {"/", "/health", "/healthzz", "/readyz/", "/healthz/x", "/metricsz", "/nope?x=1",
	                       "healthz"};
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	http_resp h;

	for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
		get(port, paths[k], &h);
		expect(&h, 404, "not found: try /metrics, /healthz or /readyz\n", paths[k]);
	}
	/* not a request line at all */
	http(port, "\r\n\r\n", &h);
	cr_assert_eq(h.status, 400, "%s", h.head);
	lb_end();
}

LB_TEST(health, other_methods_405, 60)
{
	const char *methods[] = {"POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get"};
	const char *paths[] = {"/healthz", "/readyz", "/metrics"};
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	char req[128];
	http_resp h;

	for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
		for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
			snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", methods[m],
			         paths[p]);
			http(port, req, &h);
			expect(&h, 405, "only GET and HEAD\n", req);
			cr_expect_str_eq(header(&h, "Allow"), "GET, HEAD", "%s", h.head);
		}
	}
	lb_end();
}

LB_TEST(health, query_string_ignored, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	char path[300];
	http_resp h;

	get(port, "/healthz?verbose=1", &h);
	expect(&h, 200, "ok\n", "/healthz?verbose=1");
	get(port, "/readyz?", &h);
	expect(&h, 200, "ready\n", "/readyz?");
	get(port, "/readyz?a=1&b=%2F", &h);
	expect(&h, 200, "ready\n", "/readyz?a=1&b=%2F");
	get(port, "/metrics?name[]=lockbroker_up", &h);
	expect(&h, 200, NULL, "/metrics?name[]=...");
	cr_expect_not_null(strstr(h.body, "\nlockbroker_up 1\n"), "%.*s", (int)h.body_len, h.body);
	/* a query longer than the part of the target the broker looks at */
	snprintf(path, sizeof(path), "/healthz?%0280d", 7);
	get(port, path, &h);
	expect(&h, 200, "ok\n", "/healthz with a 280-byte query");
	lb_end();
}

/* ---- the bounds ---------------------------------------------------------- */

/* Half a request is dropped after the request timeout, unanswered, and does
 * not hold up other probes meanwhile. */
LB_TEST(health, slow_request_dropped, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	int fd = http_connect(port);
	http_resp slow, h;
	int64_t t0;

	static const char half[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";

	http_send(fd, half, sizeof(half) - 1);
	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz beside a slow request");
	t0 = lb_now_ms();
	http_read(fd, REQUEST_TIMEOUT_MS + 10000, &slow);
	close(fd);
	cr_assert(slow.closed, "a request without its end was kept open %lld ms", (long long)(lb_now_ms() - t0));
	cr_assert_eq(slow.status, 0, "a request without its end was answered: %s", slow.head);
	cr_assert_leq(lb_now_ms() - t0, REQUEST_TIMEOUT_MS + 5000, "dropped after %lld ms",
	              (long long)(lb_now_ms() - t0));
	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz after a slow request");
	lb_end();
}

/* A request that never ends its headers is cut at MAX_REQUEST bytes. */
LB_TEST(health, oversized_request_431, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	static char big[4 * MAX_REQUEST];
	int fd = http_connect(port), n;
	http_resp h;

	n = snprintf(big, sizeof(big), "GET /healthz HTTP/1.1\r\nX-Pad: ");
	memset(big + n, 'a', sizeof(big) - (size_t)n);
	/* The broker may close before reading it all: send what it takes. */
	for (size_t off = 0; off < sizeof(big);) {
		ssize_t w = send(fd, big + off, sizeof(big) - off, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	http_read(fd, 5000, &h);
	close(fd);
	cr_assert(h.closed, "an oversized request was kept open");
	expect(&h, 431, "too large\n", "oversized request");
	get(port, "/readyz", &h);
	expect(&h, 200, "ready\n", "GET /readyz after an oversized request");
	lb_end();
}

/* At most MAX_CONNS connections at once: one more is closed unanswered,
 * and probes are served again once the others are gone. */
LB_TEST(health, connections_bounded, 60)
{
	lb_redis *r;
	lb_broker *b;
	int port = start(&r, &b);
	int fds[MAX_CONNS], extra;
	http_resp h;

	for (int k = 0; k < MAX_CONNS; k++)
		fds[k] = http_connect(port);
	/* The first answers; the broker accepts in order, and after a moment
	 * all 64 are in. */
	http_send(fds[0], "GET /healthz HTTP/1.0\r\n\r\n", 25);
	http_read(fds[0], 5000, &h);
	expect(&h, 200, "ok\n", "GET /healthz on the first of 64 connections");
	close(fds[0]);
	fds[0] = http_connect(port);
	lb_sleep_ms(300); /* let the broker accept the replacement */
	extra = http_connect(port);
	/* may fail: the broker may have closed it already */
	(void)!send(extra, "GET /healthz HTTP/1.0\r\n\r\n", 25, MSG_NOSIGNAL);
	http_read(extra, 3000, &h);
	close(extra);
	cr_assert(h.closed, "connection %d was kept open", MAX_CONNS + 1);
	cr_assert_eq(h.status, 0, "connection %d was answered: %s", MAX_CONNS + 1, h.head);
	for (int k = 0; k < MAX_CONNS; k++)
		close(fds[k]);
	{
		int64_t deadline = lb_now_ms() + 5000;
		do {
			lb_sleep_ms(100);
			get(port, "/healthz", &h);
		} while (h.status != 200 && lb_now_ms() < deadline);
	}
	expect(&h, 200, "ok\n", "GET /healthz once the 64 connections closed");
	lb_end();
}

/* ---- the container probes --------------------------------------------------- */

/* The text after the first line of file that starts with key (after blanks),
 * lines continued with a backslash joined; static buffer. */
static const char *after_key(const char *file, const char *key)
{
	static char text[16384];
	size_t n, w = 0;
	FILE *f = fopen(file, "r");

	cr_assert_not_null(f, "cannot open %s (run the tests from the checkout)", file);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	for (size_t k = 0; k < n; k++) { /* a Dockerfile's continuation lines */
		if (text[k] == '\\' && text[k + 1] == '\n')
			k++;
		else
			text[w++] = text[k];
	}
	text[w] = '\0';
	for (char *line = text; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char *p = line + strspn(line, " \t");
		if (strncmp(p, key, strlen(key)) == 0)
			return p + strlen(key);
	}
	cr_assert_fail("no line starting with %s in %s", key, file);
	return NULL;
}

/* A probe command: the exec-form argv of a health check. */
typedef struct probe {
	char args[8][1024];
	size_t n;
} probe_t;

/* Reads the JSON array at text into p, leaving out its first skip elements
 * (compose's "CMD"); returns NULL or why it could not. */
static const char *probe_parse(const char *text, size_t skip, probe_t *p)
{
	static char why[256];
	json_error_t err;
	json_t *a = json_loads(text, JSON_DISABLE_EOF_CHECK, &err);
	size_t n;

	if (!a || !json_is_array(a)) {
		snprintf(why, sizeof(why), "not a JSON array: %s", a ? "another value" : err.text);
		json_decref(a);
		return why;
	}
	n = json_array_size(a);
	memset(p, 0, sizeof(*p));
	for (size_t k = skip; k < n && p->n < 8; k++) {
		const char *s = json_string_value(json_array_get(a, k));
		if (!s || strlen(s) >= sizeof(p->args[0])) {
			json_decref(a);
			return "an element is not a string or is too long";
		}
		snprintf(p->args[p->n++], sizeof(p->args[0]), "%s", s);
	}
	if (skip > 0 && (!json_is_string(json_array_get(a, 0)) ||
	                 strcmp(json_string_value(json_array_get(a, 0)), "CMD") != 0)) {
		json_decref(a);
		return "does not start with \"CMD\"";
	}
	json_decref(a);
	return p->n >= 1 && p->n == n - skip ? NULL : "empty or too long";
}

/* Runs the probe with the port 9380 in its last argument replaced; returns
 * its exit status (-1 when it hung 10 s). */
static int run_probe(const probe_t *p, int port)
{
	const char *argv[9];
	char last[2048], *at;
	pid_t pid;
	int st;

	for (size_t k = 0; k < p->n; k++)
		argv[k] = p->args[k];
	argv[p->n] = NULL;
	snprintf(last, sizeof(last), "%s", p->args[p->n - 1]);
	at = strstr(last, "/9380");
	cr_assert_not_null(at, "the probe does not reach port 9380: %s", last);
	snprintf(at, sizeof(last) - (size_t)(at - last), "/%d%s", port, strstr(p->args[p->n - 1], "/9380") + 5);
	argv[p->n - 1] = last;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int64_t deadline = lb_now_ms() + 10000; lb_now_ms() < deadline; lb_sleep_ms(20)) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

/* The image's HEALTHCHECK and compose's healthcheck are one command, it
 * asks /readyz, and run here (as Docker would run it in the image) it
 * passes while the broker is ready and fails while Redis is down or the
 * listener is gone. */
LB_TEST(health, container_probe_command, 90)
{
	static probe_t docker, compose;
	lb_redis *r;
	lb_broker *b;
	const char *s, *why;
	http_resp h;
	int port;

	s = strstr(after_key("deploy/Dockerfile", "HEALTHCHECK"), "CMD");
	cr_assert_not_null(s, "HEALTHCHECK without CMD");
	why = probe_parse(s + 3, 0, &docker);
	cr_assert_null(why, "the Dockerfile's HEALTHCHECK CMD: %s", why);
	why = probe_parse(after_key("deploy/compose.yaml", "test:"), 1, &compose);
	cr_assert_null(why, "compose's healthcheck test: %s", why);
	cr_assert_eq(docker.n, compose.n, "the Dockerfile's probe has %zu arguments, compose's %zu", docker.n,
	             compose.n);
	for (size_t k = 0; k < docker.n; k++) {
		cr_assert_str_eq(docker.args[k], compose.args[k], "argument %zu differs", k);
		cr_assert_null(strchr(compose.args[k], '$'), "compose would interpolate the $ in %s",
		               compose.args[k]);
	}
	cr_assert_not_null(strstr(docker.args[docker.n - 1], "/readyz"), "%s", docker.args[docker.n - 1]);

	port = start(&r, &b);
	cr_assert_eq(run_probe(&docker, port), 0, "the probe failed on a ready broker");
	lb_redis_stop(r);
	cr_assert_geq(readyz_until(port, 503, 5000, &h), 0);
	cr_assert_neq(run_probe(&docker, port), 0, "the probe passed with Redis down");
	lb_redis_restart(r);
	cr_assert_geq(readyz_until(port, 200, 15000, &h), 0);
	cr_assert_eq(run_probe(&docker, port), 0, "the probe failed after Redis came back");
	lb_broker_stop(b);
	cr_assert_neq(run_probe(&docker, port), 0, "the probe passed with no broker");
	lb_end();
}

/* While a stopping broker drains (a session still open, within the
 * shutdown grace), the listener stays: /healthz 200, /readyz 503 with the
 * reason. */
LB_TEST(health, readyz_503_while_draining, 60)
{
	int port = free_port();
	char url[64];
	lb_redis *r;
	lb_broker *b;
	lb_client *c;
	http_resp h;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	r = lb_redis_start(false);
	b = lb_broker_start(r, "--metrics", url, "--shutdown-grace-ms", "3000", NULL);
	c = lb_connect(b, LB_TCP);
	lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
	get(port, "/readyz", &h);
	expect(&h, 200, "ready\n", "GET /readyz before the shutdown");
	lb_broker_signal(b, SIGTERM);
	lb_sleep_ms(300);
	get(port, "/readyz", &h);
	expect(&h, 503, "shutting down\n", "GET /readyz while draining");
	get(port, "/healthz", &h);
	expect(&h, 200, "ok\n", "GET /healthz while draining");
	lb_close(c); /* the last session: the broker stops now */
	lb_broker_wait_exit(b);
	lb_end();
}
