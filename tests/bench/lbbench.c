/*
 * lbbench.c - load generator for lockbrokerd (issue 6; `make bench`).
 *
 * One process, one libuv loop, many connections. It speaks the line-JSON
 * protocol like any client (requests formatted with snprintf, responses
 * parsed with jansson) and takes every timestamp on the client side with
 * uv_hrtime(), a monotonic clock shared by all its connections, so events
 * seen on different connections (a release sent here, the next grant
 * received there) can be paired.
 *
 * Scenarios (see tests/bench/README.md for what each one measures):
 *   ready        wait until every endpoint answers ping (used by run.sh)
 *   uncontended  N connections, each on its own lock names, acquire
 *                (wait_ms 0) + release cycles
 *   contended    N clients on one lock over the endpoints (two brokers):
 *                convoy (--hold-ms 1) or hot loop (--hold-ms 0); --mode
 *                exclusive | rw (--xfrac of the clients exclusive, the rest
 *                shared) | sem (--limit permits)
 *   watchdog     N connections x L leases held with the watchdog on
 *   overhead     acquire latency at 1 connection through the broker vs a
 *                direct EVALSHA of the same acquire script (hiredis sync),
 *                alternating rounds
 *   rawlua       the broker's acquire and release scripts driven directly
 *                (hiredis async on this loop), N connections x depth
 *
 * Every measurement runs in windows (--reps of -d seconds after --warmup);
 * each window samples CPU ticks of the given pids (/proc/PID/stat) and
 * Redis INFO commandstats at its start and end. Output: one
 * "LABEL.metric: value unit" line per metric, the median over the windows.
 * Every loop is bounded in time; everything it opens it closes.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <jansson.h>
#include <uv.h>

#include <hiredis.h>
#include <async.h>
#include <adapters/libuv.h>

#define MAX_EP 8
#define MAX_PIDS 8
#define MAX_METRICS 96
#define MAX_REPS 9
#define MAX_SLOTS 16384
#define K_ACQ 1
#define K_REL 2
#define K_OTHER 3
#define NS_PER_MS 1000000.0
#define NS_PER_US 1000.0

/* ---- options --------------------------------------------------------- */

typedef struct endpoint {
	bool is_unix;
	char path[108];
	struct sockaddr_in addr;
} endpoint_t;

static struct {
	const char *scenario;
	const char *label;
	endpoint_t ep[MAX_EP];
	int nep;
	const char *redis_unix;
	struct {
		char name[32];
		int pid;
	} pids[MAX_PIDS];
	int npids;
	int conns;
	int depth;
	double seconds;
	double warmup;
	int reps;
	double hold_ms;
	const char *mode;
	double xfrac;
	int limit;
	int fair;
	int leases;
	int ttl_ms;
	const char *acq_sha, *rel_sha;
	const char *prefix;
	double fifo_tol_ms;
	int connect_par;
	int ping; /* uncontended: two pings per cycle instead of acquire + release */
} O = {
	.label = "bench", .conns = 1, .depth = 1, .seconds = 3, .warmup = 0.5, .reps = 1,
	.hold_ms = 1, .mode = "exclusive", .xfrac = 0.25, .limit = 4, .fair = 1, .leases = 10,
	.ttl_ms = 30000, .prefix = "lb:", .fifo_tol_ms = 0.2, .connect_par = 128,
};

static uv_loop_t *loop;
static char runid[32];

static uint64_t now_ns(void)
{
	return uv_hrtime();
}

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "lbbench: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);

	if (!p)
		die("out of memory");
	return p;
}

/* ---- samples and metrics ---------------------------------------------- */

typedef struct samples {
	uint64_t *v;
	size_t n, cap;
	bool sorted;
} samples_t;

static void samp_add(samples_t *s, uint64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			die("out of memory");
	}
	s->v[s->n++] = x;
	s->sorted = false;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank), NAN when empty. */
static double samp_pct(samples_t *s, double p)
{
	size_t k;

	if (!s->n)
		return NAN;
	if (!s->sorted) {
		qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
		s->sorted = true;
	}
	k = (size_t)ceil(p / 100.0 * (double)s->n);
	if (k < 1)
		k = 1;
	if (k > s->n)
		k = s->n;
	return (double)s->v[k - 1];
}

static double samp_mean(const samples_t *s)
{
	double sum = 0;

	if (!s->n)
		return NAN;
	for (size_t k = 0; k < s->n; k++)
		sum += (double)s->v[k];
	return sum / (double)s->n;
}

typedef struct metric {
	char name[64];
	char unit[16];
	double v[MAX_REPS];
	int n;
} metric_t;

static metric_t metrics[MAX_METRICS];
static int nmetrics;

static void put(const char *name, const char *unit, double v)
{
	metric_t *m = NULL;

	for (int k = 0; k < nmetrics; k++)
		if (!strcmp(metrics[k].name, name))
			m = &metrics[k];
	if (!m) {
		if (nmetrics == MAX_METRICS)
			die("too many metrics");
		m = &metrics[nmetrics++];
		snprintf(m->name, sizeof(m->name), "%s", name);
		snprintf(m->unit, sizeof(m->unit), "%s", unit);
	}
	if (m->n < MAX_REPS)
		m->v[m->n++] = v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void fmt_value(char *buf, size_t len, double v)
{
	if (isnan(v))
		snprintf(buf, len, "n/a");
	else if (v == floor(v) && fabs(v) < 1e15)
		snprintf(buf, len, "%.0f", v);
	else if (fabs(v) >= 100)
		snprintf(buf, len, "%.1f", v);
	else
		snprintf(buf, len, "%.3f", v);
}

/* Prints every metric: the median of its non-NAN values over the windows. */
static void print_metrics(void)
{
	for (int k = 0; k < nmetrics; k++) {
		metric_t *m = &metrics[k];
		double v[MAX_REPS], med = NAN;
		int n = 0;
		char buf[64];

		for (int r = 0; r < m->n; r++)
			if (!isnan(m->v[r]))
				v[n++] = m->v[r];
		if (n) {
			qsort(v, (size_t)n, sizeof(double), cmp_double);
			med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
		}
		fmt_value(buf, sizeof(buf), med);
		printf("%s.%s: %s %s\n", O.label, m->name, buf, m->unit);
	}
	fflush(stdout);
}

/* ---- system counters: /proc and Redis INFO ------------------------------ */

typedef struct mark {
	uint64_t ticks[MAX_PIDS];
	long long evalsha, total;
	uint64_t t;
} mark_t;

static redisContext *rstat; /* sync, for INFO; NULL without --redis-unix */

static uint64_t proc_ticks(int pid)
{
	char path[64], buf[2048];
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

static long proc_rss_kb(int pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6)) {
			kb = strtol(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

static void cmdstats(long long *evalsha, long long *total)
{
	redisReply *r;
	const char *p;

	*evalsha = *total = 0;
	if (!rstat)
		return;
	r = redisCommand(rstat, "INFO commandstats");
	if (!r || r->type != REDIS_REPLY_STRING)
		die("INFO commandstats failed: %s", r ? "bad reply" : rstat->errstr);
	for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL; p++) {
		const char *c = strstr(p, ":calls=");
		long long calls;

		if (!c)
			break;
		calls = strtoll(c + 7, NULL, 10);
		*total += calls;
		if (!strncmp(p, "cmdstat_evalsha:", 16))
			*evalsha = calls;
	}
	*total -= 1; /* this INFO itself */
	freeReplyObject(r);
}

static void mark_take(mark_t *m)
{
	for (int k = 0; k < O.npids; k++)
		m->ticks[k] = proc_ticks(O.pids[k].pid);
	cmdstats(&m->evalsha, &m->total);
	m->t = now_ns();
}

/* CPU per pid and Redis commands per `what` (a cycle, an acquisition). */
static void put_sys(const mark_t *a, const mark_t *b, double ops, const char *what)
{
	double secs = (double)(b->t - a->t) / 1e9;
	long hz = sysconf(_SC_CLK_TCK);
	char name[64];

	for (int k = 0; k < O.npids; k++) {
		snprintf(name, sizeof(name), "cpu_%s", O.pids[k].name);
		put(name, "%", (double)(b->ticks[k] - a->ticks[k]) / (double)hz / secs * 100.0);
	}
	if (!rstat)
		return;
	snprintf(name, sizeof(name), "evalsha_per_%s", what);
	put(name, "calls", ops > 0 ? (double)(b->evalsha - a->evalsha) / ops : NAN);
	snprintf(name, sizeof(name), "redis_calls_per_%s", what);
	put(name, "calls", ops > 0 ? (double)(b->total - a->total) / ops : NAN);
	put("evalsha_per_s", "calls/s", (double)(b->evalsha - a->evalsha) / secs);
}

/* ---- connections to the broker ------------------------------------------ */

typedef struct conn conn_t;

typedef struct slot {
	conn_t *c;
	redisAsyncContext *ac; /* rawlua */
	int idx;
	int state; /* 0 idle, 1 acquiring, 2 releasing */
	uint64_t t_sent;
	char lock[96];
	char lease[160];
	char keys[7][128];
	char id[40];
} slot_t;

struct conn {
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} u;
	uv_connect_t creq;
	uv_timer_t timer;
	bool timer_init, up, closed, failed;
	int idx, ep;
	char *lbuf;
	size_t llen, lcap;
	uint64_t seq;
	slot_t *slots;
	int nslots;
	/* contended */
	int role; /* 0 exclusive, 1 shared, 2 permit */
	int cstate; /* 0 idle, 1 waiting, 2 holding, 3 releasing */
	uint64_t acq_sent, granted_at;
	char lease[160];
	/* watchdog */
	int granted, answered;
	int retries; /* connects refused with EAGAIN */
};

typedef struct scen {
	void (*connected)(conn_t *c);
	void (*reply)(conn_t *c, int kind, int slot, bool ok, json_t *o);
	void (*kick)(void);
	void (*window_begin)(void);
	void (*window_end)(const mark_t *a, const mark_t *b);
	void (*stop)(void);
} scen_t;

static const scen_t *S;
static conn_t *conns;
static int nconns, nconnected, nconn_failed, nclosed_handles;
static bool measuring, stopping, closing;
static uint64_t lost_events, bad_lines, error_replies, conn_errors;
static uv_timer_t phase_timer, sample_timer;
static int rep;
static mark_t mark_a;
static uint64_t t_start;

static void on_handle_closed(uv_handle_t *h)
{
	(void)h;
	nclosed_handles++;
}

static void conn_close(conn_t *c)
{
	if (c->closed)
		return;
	c->closed = true;
	if (c->timer_init)
		uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close(&c->u.h, on_handle_closed);
}

typedef struct wreq {
	uv_write_t req;
	char buf[];
} wreq_t;

static void on_written(uv_write_t *r, int status)
{
	(void)status;
	free(r);
}

static void conn_write(conn_t *c, const char *buf, size_t len)
{
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
	wreq_t *w;

	if (c->closed || !c->up)
		return;
	if (uv_stream_get_write_queue_size(&c->u.s) == 0) {
		int n = uv_try_write(&c->u.s, &b, 1);
		if (n == (int)len)
			return;
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n != UV_EAGAIN) {
			conn_errors++;
			conn_close(c);
			return;
		}
	}
	w = malloc(sizeof(*w) + len);
	if (!w)
		die("out of memory");
	memcpy(w->buf, buf, len);
	b = uv_buf_init(w->buf, (unsigned)len);
	if (uv_write(&w->req, &c->u.s, &b, 1, on_written) < 0) {
		free(w);
		conn_errors++;
		conn_close(c);
	}
}

static uint64_t next_id(conn_t *c, int slot, int kind)
{
	return (++c->seq << 16) | ((uint64_t)slot << 2) | (uint64_t)kind;
}

static void handle_line(conn_t *c, const char *line, size_t len)
{
	json_error_t err;
	json_t *o, *ev, *id;
	uint64_t v;
	bool ok;

	while (len && line[len - 1] == '\r')
		len--;
	if (!len)
		return;
	o = json_loadb(line, len, 0, &err);
	if (!o || !json_is_object(o)) {
		bad_lines++;
		json_decref(o);
		return;
	}
	ev = json_object_get(o, "event");
	if (ev) {
		if (json_is_string(ev) && !strcmp(json_string_value(ev), "lost")) {
			if (lost_events < 5)
				fprintf(stderr, "lbbench: %.*s\n", (int)(len > 300 ? 300 : len), line);
			lost_events++;
		}
		json_decref(o);
		return;
	}
	id = json_object_get(o, "id");
	ok = json_is_true(json_object_get(o, "ok"));
	if (!ok && error_replies++ < 5)
		fprintf(stderr, "lbbench: %s: error reply: %.*s\n", O.label, (int)(len > 300 ? 300 : len),
		        line);
	if (!json_is_integer(id)) {
		json_decref(o);
		return;
	}
	v = (uint64_t)json_integer_value(id);
	S->reply(c, (int)(v & 3), (int)((v >> 2) & 0x3fff), ok, o);
	json_decref(o);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char rbuf[65536];

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void lbuf_append(conn_t *c, const char *p, size_t n)
{
	if (c->llen + n > c->lcap) {
		c->lcap = (c->llen + n) * 2;
		c->lbuf = realloc(c->lbuf, c->lcap);
		if (!c->lbuf)
			die("out of memory");
	}
	memcpy(c->lbuf + c->llen, p, n);
	c->llen += n;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn_t *c = s->data;
	const char *p = buf->base, *end;

	if (n < 0) {
		if (!closing) {
			conn_errors++;
			fprintf(stderr, "lbbench: %s: connection %d: %s\n", O.label, c->idx, uv_strerror((int)n));
		}
		conn_close(c);
		return;
	}
	end = p + n;
	while (p < end && !c->closed) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			lbuf_append(c, p, (size_t)(end - p));
			break;
		}
		if (c->llen) {
			size_t l;
			lbuf_append(c, p, (size_t)(nl - p));
			l = c->llen;
			c->llen = 0;
			handle_line(c, c->lbuf, l);
		} else {
			handle_line(c, p, (size_t)(nl - p));
		}
		p = nl + 1;
	}
}

/* A Unix listener whose backlog is full refuses with EAGAIN (TCP would
 * wait in SYN backlog instead): close and try again 10 ms later. */
static int *retry_q;
static int nretry, retry_cap;
static uv_timer_t retry_timer;
static uint64_t connect_retries;

static void conn_open(conn_t *c, int ep);

static void on_retry_timer(uv_timer_t *t)
{
	int n = nretry;

	(void)t;
	nretry = 0;
	for (int k = 0; k < n; k++) {
		conn_t *c = &conns[retry_q[k]];
		c->closed = false;
		conn_open(c, c->ep);
	}
}

static void on_closed_for_retry(uv_handle_t *h)
{
	conn_t *c = h->data;

	if (closing) {
		nclosed_handles++;
		return;
	}
	if (nretry == retry_cap) {
		retry_cap = retry_cap ? retry_cap * 2 : 256;
		retry_q = realloc(retry_q, (size_t)retry_cap * sizeof(*retry_q));
		if (!retry_q)
			die("out of memory");
	}
	retry_q[nretry++] = c->idx;
	if (!uv_is_active((uv_handle_t *)&retry_timer))
		uv_timer_start(&retry_timer, on_retry_timer, 10, 0);
}

static void on_connect(uv_connect_t *req, int status)
{
	conn_t *c = req->handle->data;

	if (status == UV_EAGAIN && !closing && c->retries++ < 500) {
		connect_retries++;
		c->closed = true;
		uv_close(&c->u.h, on_closed_for_retry);
		return;
	}
	if (status < 0) {
		if (nconn_failed++ < 5 && S->window_end)
			fprintf(stderr, "lbbench: %s: connect %d: %s\n", O.label, c->idx, uv_strerror(status));
		c->failed = true;
		conn_close(c);
	} else {
		c->up = true;
		nconnected++;
		uv_read_start(&c->u.s, on_alloc, on_read);
	}
	S->connected(c);
}

static void conn_open(conn_t *c, int ep)
{
	const endpoint_t *e = &O.ep[ep];
	int rc;

	c->ep = ep;
	if (e->is_unix) {
		uv_pipe_init(loop, &c->u.pipe, 0);
		c->u.h.data = c;
		uv_pipe_connect(&c->creq, &c->u.pipe, e->path, on_connect);
		return;
	}
	uv_tcp_init(loop, &c->u.tcp);
	c->u.h.data = c;
	uv_tcp_nodelay(&c->u.tcp, 1);
	rc = uv_tcp_connect(&c->creq, &c->u.tcp, (const struct sockaddr *)&e->addr, on_connect);
	if (rc < 0) {
		/* the callback never comes: report it the same way */
		c->failed = true;
		nconn_failed++;
		conn_close(c);
		S->connected(c);
	}
}

static void conns_new(int n)
{
	nconns = n;
	conns = xcalloc((size_t)n, sizeof(*conns));
	for (int k = 0; k < n; k++)
		conns[k].idx = k;
}

static void close_all(void)
{
	if (closing)
		return;
	closing = true;
	measuring = false;
	stopping = true;
	for (int k = 0; k < nconns; k++)
		conn_close(&conns[k]);
	uv_timer_stop(&phase_timer);
	uv_timer_stop(&sample_timer);
	uv_timer_stop(&retry_timer);
}

/* ---- windows ------------------------------------------------------------ */

static void window_begin(void);

static void on_force_close(uv_timer_t *t)
{
	(void)t;
	close_all();
}

static void begin_stop(void)
{
	stopping = true;
	measuring = false;
	uv_timer_start(&phase_timer, on_force_close, 2000, 0); /* stop() may shorten it */
	if (S->stop)
		S->stop();
}

static void on_window_end(uv_timer_t *t)
{
	mark_t b;

	(void)t;
	measuring = false;
	mark_take(&b);
	S->window_end(&mark_a, &b);
	rep++;
	if (rep < O.reps)
		window_begin();
	else
		begin_stop();
}

static void window_begin(void)
{
	S->window_begin();
	mark_take(&mark_a);
	measuring = true;
	uv_update_time(loop);
	uv_timer_start(&phase_timer, on_window_end, (uint64_t)(O.seconds * 1000), 0);
}

static void on_warm(uv_timer_t *t)
{
	(void)t;
	window_begin();
}

static void start_traffic(void)
{
	if (nconn_failed)
		die("%s: %d of %d connections failed", O.label, nconn_failed, nconns);
	S->kick();
	uv_timer_start(&phase_timer, on_warm, (uint64_t)(O.warmup * 1000), 0);
}

/* Connects every connection (at most O.connect_par at once), round-robin
 * over the endpoints, then starts the traffic. */
static int next_to_connect;

static void connect_more(void)
{
	while (next_to_connect < nconns && next_to_connect - (nconnected + nconn_failed) < O.connect_par) {
		conn_t *c = &conns[next_to_connect];
		conn_open(c, next_to_connect % O.nep);
		next_to_connect++;
	}
}

static void connected_default(conn_t *c)
{
	(void)c;
	connect_more();
	if (nconnected + nconn_failed == nconns)
		start_traffic();
}

/* ---- acquire/release cycles: uncontended (broker) and rawlua (Redis) ---- */

static struct {
	samples_t lat; /* acquire send -> reply, ns */
	uint64_t cycles, errors;
} CY;
static bool cy_raw;
static slot_t **all_slots;
static int nslots_total;
static void (*cy_idle_cb)(void);

static void cy_send_acquire(slot_t *sl);

static void cy_check_idle(void)
{
	for (int k = 0; k < nslots_total; k++)
		if (all_slots[k]->state)
			return;
	if (cy_idle_cb)
		cy_idle_cb();
}

static void cy_acquired(slot_t *sl, bool ok, const char *lease, size_t lease_len);
static void cy_released(slot_t *sl, bool ok);

/* EVALSHA sha, the slot's 7 keys and the context the broker sends first
 * (retention, broker id, prefix, name, heartbeat, fence floor), then the
 * slot's id. */
static int raw_head(slot_t *sl, const char *sha, const char **argv)
{
	int n = 0;

	argv[n++] = "EVALSHA";
	argv[n++] = sha;
	argv[n++] = "7";
	for (int k = 0; k < 7; k++)
		argv[n++] = sl->keys[k];
	argv[n++] = "60000";
	argv[n++] = "benchraw";
	argv[n++] = O.prefix;
	argv[n++] = sl->lock;
	argv[n++] = "5000";
	argv[n++] = "0"; /* fence floor */
	argv[n++] = sl->id;
	return n;
}

/* The broker's acquire ARGV, exactly as broker/locks/waitq_send.c sends it: the head,
 * then mode, limit, ttl_ms, owner, client, max_hold_ms, wait, fair,
 * max_queue. */
static int raw_acq_argv(slot_t *sl, const char **argv, size_t *lens)
{
	static const char *const tail[] = {"x", "0", "30000", "", "", "0", "0", "1", "10000"};
	int n = raw_head(sl, O.acq_sha, argv);

	for (size_t k = 0; k < sizeof(tail) / sizeof(tail[0]); k++)
		argv[n++] = tail[k];
	for (int k = 0; k < n; k++)
		lens[k] = strlen(argv[k]);
	return n;
}

static int raw_rel_argv(slot_t *sl, const char **argv, size_t *lens)
{
	int n = raw_head(sl, O.rel_sha, argv);

	argv[n++] = "0";
	for (int k = 0; k < n; k++)
		lens[k] = strlen(argv[k]);
	return n;
}

static void slot_init(slot_t *sl, conn_t *c, int idx, const char *kind, int cidx)
{
	/* The broker's key layout (broker/store/lockscript.c): the header is the bare
	 * P{NAME}. */
	static const char *suffix[7] = {":h", ":i", "", ":q", ":w", ":d", ":s"};

	sl->c = c;
	sl->idx = idx;
	snprintf(sl->lock, sizeof(sl->lock), "%s:%s:%d:%d", kind, runid, cidx, idx);
	for (int k = 0; k < 7; k++)
		snprintf(sl->keys[k], sizeof(sl->keys[k]), "%s{%s}%s", O.prefix, sl->lock, suffix[k]);
	snprintf(sl->id, sizeof(sl->id), "%08x%08x%08x%08x", (unsigned)getpid(), (unsigned)cidx,
	         (unsigned)idx, 0xbe4cu);
}

static bool raw_granted(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	       r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static void raw_on_acq(redisAsyncContext *ac, void *reply, void *priv)
{
	redisReply *r = reply;

	(void)ac;
	if (!r)
		return; /* disconnecting */
	if (!raw_granted(r) && CY.errors < 3)
		fprintf(stderr, "lbbench: %s: acquire script: %s\n", O.label,
		        r->type == REDIS_REPLY_ERROR ? r->str : "not granted");
	cy_acquired(priv, raw_granted(r), "", 0);
}

static void raw_on_rel(redisAsyncContext *ac, void *reply, void *priv)
{
	redisReply *r = reply;

	(void)ac;
	if (!r)
		return;
	cy_released(priv, r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	                      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 0);
}

/* --ping: the cycle's two requests as pings, which the broker answers
 * without Redis: the floor of a broker round trip in this shape. */
static void cy_send_ping(slot_t *sl, int kind)
{
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"ping\"}\n",
	                 next_id(sl->c, sl->idx, kind));
	conn_write(sl->c, buf, (size_t)n);
}

static void cy_send_acquire(slot_t *sl)
{
	sl->state = 1;
	sl->t_sent = now_ns();
	if (cy_raw) {
		const char *argv[32];
		size_t lens[32];
		int n = raw_acq_argv(sl, argv, lens);
		redisAsyncCommandArgv(sl->ac, raw_on_acq, sl, n, argv, lens);
	} else if (O.ping) {
		cy_send_ping(sl, K_ACQ);
	} else {
		char buf[512];
		int n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0}\n",
		                 next_id(sl->c, sl->idx, K_ACQ), sl->lock);
		conn_write(sl->c, buf, (size_t)n);
	}
}

static void cy_send_release(slot_t *sl)
{
	sl->state = 2;
	if (cy_raw) {
		const char *argv[32];
		size_t lens[32];
		int n = raw_rel_argv(sl, argv, lens);
		redisAsyncCommandArgv(sl->ac, raw_on_rel, sl, n, argv, lens);
	} else if (O.ping) {
		cy_send_ping(sl, K_REL);
	} else {
		char buf[512];
		int n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"release\",\"lease\":\"%s\"}\n",
		                 next_id(sl->c, sl->idx, K_REL), sl->lease);
		conn_write(sl->c, buf, (size_t)n);
	}
}

static void cy_acquired(slot_t *sl, bool ok, const char *lease, size_t lease_len)
{
	uint64_t t = now_ns();

	if (!ok) {
		CY.errors++;
		sl->state = 0;
		if (!stopping)
			cy_send_acquire(sl);
		else
			cy_check_idle();
		return;
	}
	if (measuring)
		samp_add(&CY.lat, t - sl->t_sent);
	if (lease_len >= sizeof(sl->lease))
		lease_len = sizeof(sl->lease) - 1;
	memcpy(sl->lease, lease, lease_len);
	sl->lease[lease_len] = 0;
	cy_send_release(sl);
}

static void cy_released(slot_t *sl, bool ok)
{
	if (!ok)
		CY.errors++;
	if (measuring)
		CY.cycles++;
	sl->state = 0;
	if (!stopping)
		cy_send_acquire(sl);
	else
		cy_check_idle();
}

static void un_reply(conn_t *c, int kind, int slot, bool ok, json_t *o)
{
	slot_t *sl;

	if (slot >= c->nslots)
		return;
	sl = &c->slots[slot];
	if (kind == K_ACQ) {
		json_t *l = json_object_get(o, "lease"); /* none in a ping's answer */
		bool got = ok && (O.ping || json_is_string(l));
		bool lease = got && json_is_string(l);

		cy_acquired(sl, got, lease ? json_string_value(l) : "", lease ? json_string_length(l) : 0);
	} else if (kind == K_REL) {
		cy_released(sl, ok);
	}
}

static void cy_kick(void)
{
	for (int k = 0; k < nslots_total; k++)
		cy_send_acquire(all_slots[k]);
}

static void cy_window_begin(void)
{
	CY.lat.n = 0;
	CY.cycles = 0;
}

static void cy_window_end(const mark_t *a, const mark_t *b)
{
	double secs = (double)(b->t - a->t) / 1e9;

	put("cycles_per_s", "cycles/s", (double)CY.cycles / secs);
	put("acquire_p50_us", "us", samp_pct(&CY.lat, 50) / NS_PER_US);
	put("acquire_p99_us", "us", samp_pct(&CY.lat, 99) / NS_PER_US);
	put("acquire_p999_us", "us", samp_pct(&CY.lat, 99.9) / NS_PER_US);
	put_sys(a, b, (double)CY.cycles, "cycle");
}

static void cy_stop(void)
{
	cy_check_idle();
}

static void cy_setup_slots(const char *kind)
{
	nslots_total = nconns * O.depth;
	all_slots = xcalloc((size_t)nslots_total, sizeof(*all_slots));
	for (int k = 0; k < nconns; k++) {
		conn_t *c = &conns[k];
		c->nslots = O.depth;
		c->slots = xcalloc((size_t)O.depth, sizeof(slot_t));
		for (int s = 0; s < O.depth; s++) {
			slot_init(&c->slots[s], c, s, kind, k);
			all_slots[k * O.depth + s] = &c->slots[s];
		}
	}
}

static const scen_t SCEN_UNCONTENDED = {
	.connected = connected_default,
	.reply = un_reply,
	.kick = cy_kick,
	.window_begin = cy_window_begin,
	.window_end = cy_window_end,
	.stop = cy_stop,
};

/* rawlua: hiredis async contexts instead of broker connections. */
static redisAsyncContext **racs;
static int nracs, nracs_up;

static void raw_on_connect(const redisAsyncContext *ac, int status)
{
	(void)ac;
	if (status != REDIS_OK)
		die("%s: cannot connect to Redis", O.label);
	if (++nracs_up == nracs)
		start_traffic();
}

static void raw_on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)ac;
	(void)status;
}

static void raw_idle(void)
{
	if (closing)
		return;
	closing = true;
	for (int k = 0; k < nracs; k++)
		redisAsyncDisconnect(racs[k]);
	uv_timer_stop(&phase_timer);
	uv_timer_stop(&sample_timer);
}

static void raw_force(uv_timer_t *t)
{
	(void)t;
	raw_idle();
}

static void raw_stop(void)
{
	uv_timer_start(&phase_timer, raw_force, 2000, 0);
	cy_check_idle();
}

static const scen_t SCEN_RAWLUA = {
	.connected = connected_default,
	.reply = un_reply,
	.kick = cy_kick,
	.window_begin = cy_window_begin,
	.window_end = cy_window_end,
	.stop = raw_stop,
};

static void run_rawlua(void)
{
	if (!O.redis_unix || !O.acq_sha || !O.rel_sha)
		die("rawlua needs --redis-unix, --acquire-sha and --release-sha");
	cy_raw = true;
	cy_idle_cb = raw_idle;
	conns_new(O.conns);
	cy_setup_slots("rl");
	nracs = O.conns;
	racs = xcalloc((size_t)nracs, sizeof(*racs));
	for (int k = 0; k < nracs; k++) {
		racs[k] = redisAsyncConnectUnix(O.redis_unix);
		if (!racs[k] || racs[k]->err)
			die("redisAsyncConnectUnix failed");
		redisLibuvAttach(racs[k], loop);
		redisAsyncSetConnectCallback(racs[k], raw_on_connect);
		redisAsyncSetDisconnectCallback(racs[k], raw_on_disconnect);
		for (int s = 0; s < O.depth; s++)
			conns[k].slots[s].ac = racs[k];
	}
	put("connections", "conns", O.conns);
	put("depth", "locks", O.depth);
}

/* ---- contended: convoy, hot loop, rw, semaphore ------------------------- */

typedef struct grant_rec {
	uint64_t s, g; /* acquire sent, grant received (UINT64_MAX: pending) */
} grant_rec_t;

static struct {
	char lock[96];
	int hx, hs, hp; /* client-view holders: exclusive, shared, permits */
	bool empty_valid;
	uint64_t t_empty;
	int ep_empty;        /* endpoint (broker) of the release that emptied it */
	uint64_t relq[1024]; /* sem: release send times not yet paired */
	int relq_ep[1024];
	unsigned relq_head, relq_tail;
	int last_client;
	/* window */
	uint64_t grants, retakes, violations, errors, rel_errors;
	samples_t handoff, wait, hold;
	samples_t handoff_same, handoff_cross; /* releaser and grantee on one / two brokers */
	grant_rec_t *log;
	size_t nlog, caplog;
} CT;

static void ct_send_acquire(conn_t *c)
{
	char buf[512];
	int n;
	const char *extra = c->role == 1 ? ",\"mode\":\"shared\"" : "";
	char lim[32] = "";

	if (c->role == 2)
		snprintf(lim, sizeof(lim), ",\"limit\":%d", O.limit);
	c->cstate = 1;
	c->acq_sent = now_ns();
	n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"acquire\",\"lock\":\"%s\"%s%s%s}\n",
	             next_id(c, 0, K_ACQ), CT.lock, extra, lim, O.fair ? "" : ",\"fair\":false");
	conn_write(c, buf, (size_t)n);
}

static void ct_release(conn_t *c)
{
	char buf[1024];
	int n;
	uint64_t t = now_ns();

	if (c->role == 0)
		CT.hx--;
	else if (c->role == 1)
		CT.hs--;
	else
		CT.hp--;
	if (CT.hx + CT.hs + CT.hp == 0) {
		CT.t_empty = t;
		CT.ep_empty = c->ep;
		CT.empty_valid = true;
	}
	if (c->role == 2) {
		CT.relq_ep[CT.relq_tail % 1024] = c->ep;
		CT.relq[CT.relq_tail++ % 1024] = t;
		if (CT.relq_tail - CT.relq_head > 1024)
			CT.relq_head = CT.relq_tail - 1024;
	}
	if (measuring)
		samp_add(&CT.hold, t - c->granted_at);
	c->cstate = 3;
	n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"release\",\"lease\":\"%s\"}\n",
	             next_id(c, 0, K_REL), c->lease);
	conn_write(c, buf, (size_t)n);
}

static void on_hold_done(uv_timer_t *t)
{
	conn_t *c = t->data;

	if (c->cstate == 2)
		ct_release(c);
}

static void on_retry(uv_timer_t *t)
{
	conn_t *c = t->data;

	if (!stopping && c->cstate == 0)
		ct_send_acquire(c);
}

static void ct_grant(conn_t *c, json_t *o)
{
	uint64_t t = now_ns();
	json_t *l = json_object_get(o, "lease");
	int held = CT.hx + CT.hs + CT.hp;

	snprintf(c->lease, sizeof(c->lease), "%s", json_is_string(l) ? json_string_value(l) : "");
	/* Exclusion as the clients see it: a grant received while another
	 * holder has not yet sent its release is a real overlap. */
	if ((c->role == 0 && held > 0) || (c->role == 1 && CT.hx > 0) ||
	    (c->role == 2 && CT.hp >= O.limit)) {
		if (measuring)
			CT.violations++;
	}
	if (measuring) {
		CT.grants++;
		samp_add(&CT.wait, t - c->acq_sent);
		if (CT.last_client == c->idx)
			CT.retakes++;
		if (CT.nlog == CT.caplog) {
			CT.caplog = CT.caplog ? CT.caplog * 2 : 4096;
			CT.log = realloc(CT.log, CT.caplog * sizeof(*CT.log));
			if (!CT.log)
				die("out of memory");
		}
		CT.log[CT.nlog++] = (grant_rec_t){c->acq_sent, t};
	}
	CT.last_client = c->idx;
	if (c->role == 2) {
		if (CT.relq_head != CT.relq_tail) {
			int ep = CT.relq_ep[CT.relq_head % 1024];
			uint64_t r = CT.relq[CT.relq_head++ % 1024];
			if (measuring) {
				samp_add(&CT.handoff, t - r);
				samp_add(ep == c->ep ? &CT.handoff_same : &CT.handoff_cross, t - r);
			}
		}
	} else if (held == 0 && CT.empty_valid) {
		if (measuring) {
			samp_add(&CT.handoff, t - CT.t_empty);
			samp_add(CT.ep_empty == c->ep ? &CT.handoff_same : &CT.handoff_cross, t - CT.t_empty);
		}
	}
	CT.empty_valid = false;
	if (c->role == 0)
		CT.hx++;
	else if (c->role == 1)
		CT.hs++;
	else
		CT.hp++;
	c->cstate = 2;
	c->granted_at = t;
	if (stopping) {
		ct_release(c);
		return;
	}
	if (O.hold_ms > 0) {
		uv_update_time(loop);
		uv_timer_start(&c->timer, on_hold_done, (uint64_t)llround(O.hold_ms), 0);
	} else {
		ct_release(c);
	}
}

static void ct_reply(conn_t *c, int kind, int slot, bool ok, json_t *o)
{
	(void)slot;
	if (kind == K_ACQ) {
		if (c->cstate != 1)
			return;
		if (!ok) {
			if (measuring)
				CT.errors++;
			c->cstate = 0;
			uv_timer_start(&c->timer, on_retry, 10, 0);
			return;
		}
		ct_grant(c, o);
	} else if (kind == K_REL) {
		if (!ok && measuring)
			CT.rel_errors++;
		/* Re-queue as soon as the release is answered. (Not pipelined
		 * behind the release: the broker would take that acquire for a
		 * re-entry of the lease being released; see README.) */
		c->cstate = 0;
		if (!stopping)
			ct_send_acquire(c);
	}
}

static void ct_connected(conn_t *c)
{
	if (c->up) {
		uv_timer_init(loop, &c->timer);
		c->timer.data = c;
		c->timer_init = true;
	}
	connected_default(c);
}

static void ct_kick(void)
{
	for (int k = 0; k < nconns; k++)
		ct_send_acquire(&conns[k]);
}

static void ct_window_begin(void)
{
	CT.grants = CT.retakes = CT.violations = CT.errors = CT.rel_errors = 0;
	CT.handoff.n = CT.wait.n = CT.hold.n = 0;
	CT.handoff_same.n = CT.handoff_cross.n = 0;
	CT.nlog = 0;
}

static int cmp_rec_s(const void *a, const void *b)
{
	const grant_rec_t *x = a, *y = b;

	return x->s < y->s ? -1 : x->s > y->s;
}

/* Grants that passed an acquire sent more than tol earlier which was
 * granted more than tol later (or is still pending). */
static uint64_t fifo_passes(grant_rec_t *v, size_t n, uint64_t tol)
{
	uint64_t passes = 0, maxg = 0;
	size_t j = 0;

	qsort(v, n, sizeof(*v), cmp_rec_s);
	for (size_t k = 0; k < n; k++) {
		while (j < k && v[j].s + tol < v[k].s) {
			if (v[j].g > maxg)
				maxg = v[j].g;
			j++;
		}
		if (v[k].g != UINT64_MAX && maxg > v[k].g + tol)
			passes++;
	}
	return passes;
}

static void ct_window_end(const mark_t *a, const mark_t *b)
{
	double secs = (double)(b->t - a->t) / 1e9;
	double hold_ms = samp_mean(&CT.hold) / NS_PER_MS;
	uint64_t tol = (uint64_t)(O.fifo_tol_ms * NS_PER_MS);
	size_t n;

	/* acquires still pending at the window's end were passed by anyone
	 * sent after them and granted */
	for (int k = 0; k < nconns; k++)
		if (conns[k].cstate == 1) {
			if (CT.nlog == CT.caplog) {
				CT.caplog = CT.caplog ? CT.caplog * 2 : 4096;
				CT.log = realloc(CT.log, CT.caplog * sizeof(*CT.log));
				if (!CT.log)
					die("out of memory");
			}
			CT.log[CT.nlog++] = (grant_rec_t){conns[k].acq_sent, UINT64_MAX};
		}
	n = CT.nlog;
	put("grants_per_s", "grants/s", (double)CT.grants / secs);
	put("hold_avg_ms", "ms", hold_ms);
	put("handoff_p50_us", "us", samp_pct(&CT.handoff, 50) / NS_PER_US);
	put("handoff_p99_us", "us", samp_pct(&CT.handoff, 99) / NS_PER_US);
	put("handoff_max_us", "us", samp_pct(&CT.handoff, 100) / NS_PER_US);
	put("handoff_same_broker_p50_us", "us", samp_pct(&CT.handoff_same, 50) / NS_PER_US);
	put("handoff_same_broker_p99_us", "us", samp_pct(&CT.handoff_same, 99) / NS_PER_US);
	put("handoff_cross_broker_p50_us", "us", samp_pct(&CT.handoff_cross, 50) / NS_PER_US);
	put("handoff_cross_broker_p99_us", "us", samp_pct(&CT.handoff_cross, 99) / NS_PER_US);
	put("wait_p50_ms", "ms", samp_pct(&CT.wait, 50) / NS_PER_MS);
	put("wait_p99_ms", "ms", samp_pct(&CT.wait, 99) / NS_PER_MS);
	put("wait_max_ms", "ms", samp_pct(&CT.wait, 100) / NS_PER_MS);
	put("clients_x_hold_ms", "ms", (double)nconns * hold_ms);
	put("fifo_pct", "%", CT.grants ? 100.0 * (1.0 - (double)fifo_passes(CT.log, n, tol) / (double)CT.grants) : NAN);
	put("fifo_1ms_pct", "%", CT.grants ? 100.0 * (1.0 - (double)fifo_passes(CT.log, n, (uint64_t)NS_PER_MS) / (double)CT.grants) : NAN);
	put("fifo_strict_pct", "%", CT.grants ? 100.0 * (1.0 - (double)fifo_passes(CT.log, n, 0) / (double)CT.grants) : NAN);
	put("retake_pct", "%", CT.grants ? 100.0 * (double)CT.retakes / (double)CT.grants : NAN);
	put("violations", "grants", (double)CT.violations);
	put("errors", "replies", (double)(CT.errors + CT.rel_errors));
	put_sys(a, b, (double)CT.grants, "acq");
}

static void ct_stop(void)
{
	for (int k = 0; k < nconns; k++) {
		conn_t *c = &conns[k];
		if (c->cstate == 2) {
			uv_timer_stop(&c->timer);
			ct_release(c);
		}
	}
	/* waiters are withdrawn when their connection closes */
	uv_timer_start(&phase_timer, on_force_close, 300, 0);
}

static const scen_t SCEN_CONTENDED = {
	.connected = ct_connected,
	.reply = ct_reply,
	.kick = ct_kick,
	.window_begin = ct_window_begin,
	.window_end = ct_window_end,
	.stop = ct_stop,
};

static void setup_contended(void)
{
	int role = 0;

	if (!strcmp(O.mode, "exclusive"))
		role = 0;
	else if (!strcmp(O.mode, "rw"))
		role = -1;
	else if (!strcmp(O.mode, "sem"))
		role = 2;
	else
		die("--mode: exclusive, rw or sem");
	snprintf(CT.lock, sizeof(CT.lock), "ct:%s:%s", runid, O.label);
	CT.last_client = -1;
	conns_new(O.conns);
	for (int k = 0; k < nconns; k++) {
		if (role >= 0) {
			conns[k].role = role;
		} else {
			/* spread the exclusive clients evenly */
			conns[k].role = floor((k + 1) * O.xfrac) > floor(k * O.xfrac) ? 0 : 1;
		}
	}
	put("clients", "clients", O.conns);
}

/* ---- watchdog scale ------------------------------------------------------ */

static struct {
	uint64_t granted, failed, answered;
	uint64_t t_setup0;
	long rss_idle[MAX_PIDS], rss_max[MAX_PIDS];
	int stats_left;
} WD;

static void wd_sample(void)
{
	for (int k = 0; k < O.npids; k++) {
		long kb = proc_rss_kb(O.pids[k].pid);
		if (kb > WD.rss_max[k])
			WD.rss_max[k] = kb;
	}
}

static void on_wd_sample(uv_timer_t *t)
{
	(void)t;
	wd_sample();
}

static void wd_connected(conn_t *c)
{
	connect_more();
	if (c->up) {
		char *buf = xcalloc((size_t)O.leases, 256);
		size_t len = 0;
		for (int k = 0; k < O.leases; k++)
			len += (size_t)snprintf(buf + len, 256,
			                        "{\"id\":%" PRIu64 ",\"op\":\"acquire\",\"lock\":\"wd:%s:%d:%d\",\"wait_ms\":0,\"ttl_ms\":%d}\n",
			                        next_id(c, k, K_ACQ), runid, c->idx, k, O.ttl_ms);
		conn_write(c, buf, len);
		free(buf);
	}
	if (nconnected + nconn_failed == nconns && nconn_failed)
		die("%s: %d of %d connections failed", O.label, nconn_failed, nconns);
}

static void wd_all_granted(void)
{
	put("setup_s", "s", (double)(now_ns() - WD.t_setup0) / 1e9);
	put("leases_granted", "leases", (double)WD.granted);
	put("acquire_failures", "leases", (double)WD.failed);
	start_traffic();
}

static void wd_reply(conn_t *c, int kind, int slot, bool ok, json_t *o)
{
	(void)slot;
	if (kind == K_ACQ) {
		c->answered++;
		WD.answered++;
		if (ok) {
			c->granted++;
			WD.granted++;
		} else {
			WD.failed++;
		}
		if (WD.answered == (uint64_t)nconns * (uint64_t)O.leases)
			wd_all_granted();
	} else if (kind == K_OTHER) {
		json_t *l = json_object_get(o, "leases");
		json_t *cn = json_object_get(o, "connections");
		if (json_is_integer(l))
			put("broker_leases", "leases", (double)json_integer_value(l));
		if (json_is_integer(cn))
			put("broker_connections", "conns", (double)json_integer_value(cn));
		if (--WD.stats_left == 0)
			close_all();
	}
}

static void wd_kick(void)
{
	uv_timer_start(&sample_timer, on_wd_sample, 1000, 1000);
}

static void wd_window_begin(void)
{
	wd_sample();
}

static void wd_window_end(const mark_t *a, const mark_t *b)
{
	double secs = (double)(b->t - a->t) / 1e9;
	char name[64];

	wd_sample();
	for (int k = 0; k < O.npids; k++) {
		snprintf(name, sizeof(name), "rss_idle_%s", O.pids[k].name);
		put(name, "MiB", (double)WD.rss_idle[k] / 1024.0);
		snprintf(name, sizeof(name), "rss_max_%s", O.pids[k].name);
		put(name, "MiB", (double)WD.rss_max[k] / 1024.0);
	}
	put("renewals_per_s", "renewals/s", (double)(b->evalsha - a->evalsha) / secs);
	put("expected_renewals_per_s", "renewals/s", (double)WD.granted / ((double)O.ttl_ms / 3000.0));
	put("lost", "leases", (double)lost_events);
	put_sys(a, b, (double)WD.granted, "lease");
}

static void wd_stop(void)
{
	/* the endpoints are listeners of one broker: ask it for its stats */
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "{\"id\":%" PRIu64 ",\"op\":\"stats\"}\n",
	                 next_id(&conns[0], 0, K_OTHER));

	uv_timer_stop(&sample_timer);
	WD.stats_left = 1;
	conn_write(&conns[0], buf, (size_t)n);
	uv_timer_start(&phase_timer, on_force_close, 3000, 0);
}

static const scen_t SCEN_WATCHDOG = {
	.connected = wd_connected,
	.reply = wd_reply,
	.kick = wd_kick,
	.window_begin = wd_window_begin,
	.window_end = wd_window_end,
	.stop = wd_stop,
};

static void on_setup_timeout(uv_timer_t *t)
{
	(void)t;
	fprintf(stderr, "lbbench: %s: only %" PRIu64 " of %d acquires answered in time\n", O.label,
	        WD.answered, nconns * O.leases);
	conn_errors++;
	close_all();
}

static void setup_watchdog(void)
{
	conns_new(O.conns);
	for (int k = 0; k < O.npids; k++)
		WD.rss_idle[k] = WD.rss_max[k] = proc_rss_kb(O.pids[k].pid);
	WD.t_setup0 = now_ns();
	uv_timer_start(&phase_timer, on_setup_timeout, 300000, 0); /* start_traffic replaces it */
	put("connections", "conns", O.conns);
	put("leases_per_conn", "leases", O.leases);
}

/* ---- overhead: broker at 1 connection vs direct EVALSHA ------------------ */

static bool oh_phase_done;

static void oh_idle(void)
{
	oh_phase_done = true;
	uv_stop(loop);
}

static void oh_connected(conn_t *c)
{
	(void)c;
	uv_stop(loop);
}

static void on_oh_timer(uv_timer_t *t)
{
	(void)t;
	stopping = true;
	cy_check_idle();
}

static const scen_t SCEN_OVERHEAD = {
	.connected = oh_connected,
	.reply = un_reply,
	.kick = cy_kick,
	.window_begin = cy_window_begin,
	.window_end = cy_window_end,
	.stop = cy_stop,
};

/* Acquire + release of the broker's own scripts over a blocking hiredis
 * connection for `secs`; acquire latencies go to out. */
static uint64_t direct_phase(redisContext *rc, slot_t *sl, double secs, samples_t *out)
{
	uint64_t end = now_ns() + (uint64_t)(secs * 1e9), cycles = 0;
	const char *argv[32];
	size_t lens[32];

	while (now_ns() < end) {
		int n = raw_acq_argv(sl, argv, lens);
		uint64_t t0 = now_ns();
		redisReply *r = redisCommandArgv(rc, n, argv, lens);
		uint64_t t1 = now_ns();
		if (!raw_granted(r))
			die("direct acquire failed: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : rc->errstr);
		freeReplyObject(r);
		if (out)
			samp_add(out, t1 - t0);
		n = raw_rel_argv(sl, argv, lens);
		r = redisCommandArgv(rc, n, argv, lens);
		if (!r)
			die("direct release failed: %s", rc->errstr);
		freeReplyObject(r);
		cycles++;
	}
	return cycles;
}

static void broker_phase(double secs)
{
	stopping = false;
	oh_phase_done = false;
	uv_update_time(loop); /* the loop slept through the direct phase */
	cy_kick();
	uv_timer_start(&phase_timer, on_oh_timer, (uint64_t)(secs * 1000), 0);
	while (!oh_phase_done)
		uv_run(loop, UV_RUN_DEFAULT);
}

static void run_overhead(void)
{
	redisContext *rc;
	slot_t direct;
	samples_t dl = {0};

	if (!O.redis_unix || !O.acq_sha || !O.rel_sha)
		die("overhead needs --redis-unix, --acquire-sha and --release-sha");
	rc = redisConnectUnix(O.redis_unix);
	if (!rc || rc->err)
		die("cannot connect to Redis");
	memset(&direct, 0, sizeof(direct));
	slot_init(&direct, NULL, 0, "ohd", 0);
	S = &SCEN_OVERHEAD;
	cy_idle_cb = oh_idle;
	conns_new(1);
	cy_setup_slots("ohb");
	conn_open(&conns[0], 0);
	uv_run(loop, UV_RUN_DEFAULT);
	if (!conns[0].up)
		die("cannot connect to the broker");
	/* warm both paths */
	direct_phase(rc, &direct, O.warmup, NULL);
	broker_phase(O.warmup);
	for (rep = 0; rep < O.reps; rep++) {
		mark_t a, b;
		uint64_t cycles;

		dl.n = 0;
		mark_take(&a);
		cycles = direct_phase(rc, &direct, O.seconds, &dl);
		mark_take(&b);
		put("direct_cycles_per_s", "cycles/s", (double)cycles / ((double)(b.t - a.t) / 1e9));
		put("direct_acquire_p50_us", "us", samp_pct(&dl, 50) / NS_PER_US);
		put("direct_acquire_p99_us", "us", samp_pct(&dl, 99) / NS_PER_US);
		cy_window_begin();
		measuring = true;
		mark_take(&a);
		broker_phase(O.seconds);
		mark_take(&b);
		measuring = false;
		put("broker_cycles_per_s", "cycles/s", (double)CY.cycles / ((double)(b.t - a.t) / 1e9));
		put("broker_acquire_p50_us", "us", samp_pct(&CY.lat, 50) / NS_PER_US);
		put("broker_acquire_p99_us", "us", samp_pct(&CY.lat, 99) / NS_PER_US);
		put("overhead_p50_us", "us", (samp_pct(&CY.lat, 50) - samp_pct(&dl, 50)) / NS_PER_US);
		put("overhead_p99_us", "us", (samp_pct(&CY.lat, 99) - samp_pct(&dl, 99)) / NS_PER_US);
	}
	redisFree(rc);
	closing = true;
	conn_close(&conns[0]);
	uv_run(loop, UV_RUN_DEFAULT);
}

/* ---- ready: every endpoint answers ping ---------------------------------- */

static int ready_ok;

static void ready_connected(conn_t *c)
{
	if (c->up)
		conn_write(c, "{\"id\":3,\"op\":\"ping\"}\n", 21);
	if (nconnected + nconn_failed == nconns && nconn_failed)
		close_all();
}

static void ready_reply(conn_t *c, int kind, int slot, bool ok, json_t *o)
{
	(void)c;
	(void)kind;
	(void)slot;
	(void)o;
	if (ok && ++ready_ok == nconns)
		close_all();
}

static const scen_t SCEN_READY = {
	.connected = ready_connected,
	.reply = ready_reply,
};

static int run_ready(void)
{
	uint64_t end = now_ns() + (uint64_t)(O.seconds * 1e9);

	S = &SCEN_READY;
	for (;;) {
		nconnected = nconn_failed = ready_ok = 0;
		closing = stopping = false;
		conns_new(O.nep);
		for (int k = 0; k < O.nep; k++)
			conn_open(&conns[k], k);
		uv_run(loop, UV_RUN_DEFAULT);
		free(conns);
		if (ready_ok == O.nep)
			return 0;
		if (now_ns() > end)
			return 1;
		usleep(50000);
	}
}

/* ---- main ---------------------------------------------------------------- */

static void parse_endpoint(const char *s)
{
	endpoint_t *e;

	if (O.nep == MAX_EP)
		die("too many endpoints");
	e = &O.ep[O.nep++];
	if (!strncmp(s, "unix://", 7)) {
		e->is_unix = true;
		snprintf(e->path, sizeof(e->path), "%s", s + 7);
	} else if (!strncmp(s, "tcp://", 6)) {
		char host[64];
		const char *colon = strrchr(s + 6, ':');
		if (!colon || (size_t)(colon - (s + 6)) >= sizeof(host))
			die("bad endpoint %s", s);
		memcpy(host, s + 6, (size_t)(colon - (s + 6)));
		host[colon - (s + 6)] = 0;
		if (uv_ip4_addr(host, atoi(colon + 1), &e->addr) < 0)
			die("bad endpoint %s", s);
	} else {
		die("endpoint: tcp://HOST:PORT or unix:///PATH: %s", s);
	}
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: lbbench SCENARIO [options]\n"
	        "  scenarios: ready uncontended contended watchdog overhead rawlua\n"
	        "  -e URL            broker endpoint, repeatable (tcp://H:P, unix:///PATH)\n"
	        "  --redis-unix P    Redis socket: INFO commandstats, direct scripts\n"
	        "  --pid NAME=PID    process whose CPU (and RSS) to report, repeatable (0: self)\n"
	        "  -c N              connections / clients       -d S  window seconds\n"
	        "  --reps N          windows (median printed)    --warmup S\n"
	        "  --depth N         locks in flight per connection (uncontended, rawlua)\n"
	        "  --ping            uncontended: two pings per cycle (no Redis: the broker floor)\n"
	        "  --hold-ms X       contended: hold time (0: hot loop)\n"
	        "  --mode M          contended: exclusive | rw | sem\n"
	        "  --xfrac F         rw: fraction of exclusive clients (0.25)\n"
	        "  --limit N         sem: permits (4)            --unfair  fair:false\n"
	        "  --leases N        watchdog: leases per connection   --ttl-ms N\n"
	        "  --acquire-sha S --release-sha S   scripts for overhead/rawlua\n"
	        "  --label L         prefix of the output lines\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	O.scenario = argv[1];
	for (int k = 2; k < argc; k++) {
		const char *a = argv[k];
		const char *v = k + 1 < argc ? argv[k + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++k)
		if (ARG("-e"))
			parse_endpoint(v);
		else if (ARG("--redis-unix"))
			O.redis_unix = v;
		else if (ARG("--pid")) {
			const char *eq = strchr(v, '=');
			if (!eq || O.npids == MAX_PIDS)
				usage();
			snprintf(O.pids[O.npids].name, sizeof(O.pids[0].name), "%.*s", (int)(eq - v), v);
			O.pids[O.npids].pid = atoi(eq + 1);
			if (O.pids[O.npids].pid == 0) /* 0: lbbench itself */
				O.pids[O.npids].pid = getpid();
			O.npids++;
		} else if (ARG("-c"))
			O.conns = atoi(v);
		else if (ARG("-d"))
			O.seconds = atof(v);
		else if (ARG("--reps"))
			O.reps = atoi(v);
		else if (ARG("--warmup"))
			O.warmup = atof(v);
		else if (ARG("--depth"))
			O.depth = atoi(v);
		else if (ARG("--hold-ms"))
			O.hold_ms = atof(v);
		else if (ARG("--mode"))
			O.mode = v;
		else if (ARG("--xfrac"))
			O.xfrac = atof(v);
		else if (ARG("--limit"))
			O.limit = atoi(v);
		else if (!strcmp(a, "--unfair"))
			O.fair = 0;
		else if (!strcmp(a, "--ping"))
			O.ping = 1;
		else if (ARG("--leases"))
			O.leases = atoi(v);
		else if (ARG("--ttl-ms"))
			O.ttl_ms = atoi(v);
		else if (ARG("--acquire-sha"))
			O.acq_sha = v;
		else if (ARG("--release-sha"))
			O.rel_sha = v;
		else if (ARG("--label"))
			O.label = v;
		else if (ARG("--prefix"))
			O.prefix = v;
		else if (ARG("--fifo-tol-ms"))
			O.fifo_tol_ms = atof(v);
		else
			usage();
#undef ARG
	}
	if (O.conns < 1 || O.depth < 1 || O.depth > MAX_SLOTS || O.reps < 1 || O.reps > MAX_REPS ||
	    O.seconds <= 0 || O.leases < 1 || O.leases > MAX_SLOTS)
		usage();
	signal(SIGPIPE, SIG_IGN);
	/* the last bound on every loop: a stuck run ends by SIGALRM */
	alarm((unsigned)(O.reps * (O.seconds + 1) + O.warmup + 420));
	loop = uv_default_loop();
	snprintf(runid, sizeof(runid), "%x%llx", (unsigned)getpid(), (unsigned long long)(now_ns() % 0xffffff));
	uv_timer_init(loop, &phase_timer);
	uv_timer_init(loop, &sample_timer);
	uv_timer_init(loop, &retry_timer);
	if (strcmp(O.scenario, "ready") && strcmp(O.scenario, "rawlua") && O.nep == 0)
		die("no endpoint (-e)");
	if (O.redis_unix && strcmp(O.scenario, "ready")) {
		rstat = redisConnectUnix(O.redis_unix);
		if (!rstat || rstat->err)
			die("cannot connect to Redis at %s", O.redis_unix);
	}
	t_start = now_ns();
	if (!strcmp(O.scenario, "ready")) {
		int rc = run_ready();
		uv_close((uv_handle_t *)&phase_timer, NULL);
		uv_close((uv_handle_t *)&sample_timer, NULL);
		uv_close((uv_handle_t *)&retry_timer, NULL);
		uv_run(loop, UV_RUN_DEFAULT);
		return rc;
	} else if (!strcmp(O.scenario, "uncontended")) {
		S = &SCEN_UNCONTENDED;
		cy_idle_cb = close_all;
		conns_new(O.conns);
		cy_setup_slots("un");
		put("connections", "conns", O.conns);
		connect_more();
	} else if (!strcmp(O.scenario, "contended")) {
		S = &SCEN_CONTENDED;
		setup_contended();
		connect_more();
	} else if (!strcmp(O.scenario, "watchdog")) {
		S = &SCEN_WATCHDOG;
		setup_watchdog();
		connect_more();
	} else if (!strcmp(O.scenario, "rawlua")) {
		S = &SCEN_RAWLUA;
		run_rawlua();
	} else if (!strcmp(O.scenario, "overhead")) {
		run_overhead();
		goto out;
	} else {
		usage();
	}
	uv_run(loop, UV_RUN_DEFAULT);
out:
	uv_close((uv_handle_t *)&phase_timer, NULL);
	uv_close((uv_handle_t *)&sample_timer, NULL);
	uv_close((uv_handle_t *)&retry_timer, NULL);
	if (connect_retries)
		put("connect_retries", "EAGAIN", (double)connect_retries);
	uv_run(loop, UV_RUN_DEFAULT);
	put("lost_events", "events", (double)lost_events);
	put("connection_errors", "errors", (double)conn_errors);
	put("error_replies", "replies", (double)error_replies);
	put("wall_s", "s", (double)(now_ns() - t_start) / 1e9);
	print_metrics();
	if (rstat)
		redisFree(rstat);
	uv_loop_close(loop);
	return conn_errors ? 1 : 0;
}
