/*
 * test_readonly6.c - a demoted master's READONLY reply to a lock script, in
 * the form of Redis 7 ("READONLY You can't write ...") and in the form of
 * Redis 6, which wraps it in a script error ("ERR Error running script
 * (call to f_<sha>): @user_script:1: @user_script: 1: -READONLY You can't
 * write ..."). Debian's redis-server is one version, so neither a real
 * Redis nor a real Sentinel is used: a fake sentinel and a fake Redis are
 * served from the test process, by one thread speaking RESP on loopback
 * TCP (F below).
 *
 * The fake sentinel names the fake Redis for FAKE_MASTER_NAME and confirms
 * SUBSCRIBE +switch-master; it notes when it is asked. The fake Redis
 * answers the broker's handshake as a master would (CLIENT SETNAME, ROLE,
 * INFO server with a run_id, SCRIPT LOAD with a 40-hex sha, SUBSCRIBE of the
 * inbox) and every EVALSHA with :1 (the broker's canary takes that as "my
 * value is there"), except an EVALSHA on the keys of a lock named "ro-...":
 * that one gets the error reply of the test.
 *
 * What a demoted master's READONLY must cause (broker/store/rpool_cmd.c,
 * on_reply): the log says "redis answered READONLY", the connection is
 * dropped, the sentinels are asked again, and the acquire is not granted.
 * Another script error must do none of that.
 *
 * The broker also asks the sentinels every 5 s (sentinel.c's REASK_MS).
 * So that such an ask is not taken for one the error caused, the acquire
 * goes out right after one of those periodic asks and every window looked
 * at ends well before the next one.
 */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAKE_MASTER_NAME "fakemaster"
#define FAKE_MAX_CONNS 64
#define FAKE_MAX_ASKS 256
#define FAKE_MAX_ARGS 64
#define FAKE_MAX_BUF (4 << 20)

/* The three error replies under test. */
#define REDIS7_READONLY "READONLY You can't write against a read only replica."
#define REDIS6_SCRIPT_ERR_FMT \
	"ERR Error running script (call to f_%.40s): @user_script:1: @user_script: 1: "
#define REDIS6_READONLY_TAIL "-READONLY You can't write against a read only replica. "
#define OTHER_ERROR_TAIL "some other error "

/* The broker's periodic ask (REASK_MS) comes this long after the last one at
 * the earliest; an ask at least PERIODIC_GAP_MS after the one before it is
 * taken for a periodic one. */
#define REASK_MS 5000
#define PERIODIC_GAP_MS 3000
/* Windows after the periodic ask the acquire follows: they end before the
 * next periodic ask (REASK_MS later) with a second to spare. */
#define QUIET_UNTIL_MS (REASK_MS - 1000)

typedef enum { FORM_REDIS7, FORM_REDIS6, FORM_OTHER } err_form;

struct fconn {
	int fd;          /* -1: free slot */
	bool sentinel;   /* accepted on the sentinel's port */
	bool got_error;  /* answered the test's error reply */
	char *buf;
	size_t len, cap;
};

static struct {
	bool running;
	pthread_t th;
	int wake[2];
	int lredis, lsent;
	int redis_port, sentinel_port;
	err_form form;
	struct fconn conn[FAKE_MAX_CONNS];

	pthread_mutex_t mu; /* guards what follows: the test thread reads it */
	int64_t asks[FAKE_MAX_ASKS];
	int nasks;
	int errors;              /* error replies sent */
	int64_t error_at;        /* the first one, lb_now_ms() */
	int64_t error_closed_at; /* when the broker closed the connection that had it, or 0 */
	int redis_conns;         /* connections accepted on the Redis port */
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- the fake servers ----------------------------------------------------- */

static void put(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* the broker went: its EOF comes next */
		s += w;
		n -= (size_t)w;
	}
}

static void put_str(int fd, const char *s)
{
	put(fd, s, strlen(s));
}

static void put_bulk(int fd, const char *s, size_t n)
{
	char head[32];
	snprintf(head, sizeof(head), "$%zu\r\n", n);
	put_str(fd, head);
	put(fd, s, n);
	put_str(fd, "\r\n");
}

static void put_subscribed(int fd, const char *ch, size_t n, int count)
{
	char num[32];
	put_str(fd, "*3\r\n");
	put_bulk(fd, "subscribe", 9);
	put_bulk(fd, ch, n);
	snprintf(num, sizeof(num), ":%d\r\n", count);
	put_str(fd, num);
}

/* The decimal number from p up to the "\r" before nl; -1 if it is not one.
 * (Not strtol: the buffer has no NUL, and ASan's strict_string_checks
 * reads to one.) */
static long number(const char *p, const char *nl)
{
	long v = 0;

	if (p >= nl - 1 || nl[-1] != '\r')
		return -1;
	for (; p < nl - 1; p++) {
		if (*p < '0' || *p > '9' || v > FAKE_MAX_BUF)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

/* One RESP multibulk command at the start of buf: 1 and its arguments
 * (pointers into buf) and length; 0 when incomplete; -1 when it is not
 * one (hiredis only ever sends multibulk). */
static int parse(const char *buf, size_t len, const char **argv, size_t *argvlen, int *argc,
                 size_t *used)
{
	const char *p = buf, *end = buf + len, *nl;
	long n;

	if (len == 0)
		return 0;
	if (*p != '*')
		return -1;
	if (!(nl = memchr(p, '\n', (size_t)(end - p))))
		return 0;
	n = number(p + 1, nl);
	if (n < 1 || n > FAKE_MAX_ARGS)
		return -1;
	p = nl + 1;
	for (long k = 0; k < n; k++) {
		long bl;
		if (p >= end)
			return 0;
		if (*p != '$')
			return -1;
		if (!(nl = memchr(p, '\n', (size_t)(end - p))))
			return 0;
		bl = number(p + 1, nl);
		if (bl < 0 || bl > FAKE_MAX_BUF)
			return -1;
		p = nl + 1;
		if (end - p < bl + 2)
			return 0;
		argv[k] = p;
		argvlen[k] = (size_t)bl;
		p += bl + 2;
	}
	*argc = (int)n;
	*used = (size_t)(p - buf);
	return 1;
}

static bool is(const char *arg, size_t len, const char *word)
{
	return len == strlen(word) && strncasecmp(arg, word, len) == 0;
}

/* A sha for a script text: 40 hex digits, the same for the same text. */
static void fake_sha(const char *s, size_t n, char out[41])
{
	uint64_t h1 = 1469598103934665603ULL, h2 = 0x9e3779b97f4a7c15ULL;

	for (size_t k = 0; k < n; k++) {
		h1 = (h1 ^ (unsigned char)s[k]) * 1099511628211ULL;
		h2 = (h2 ^ (unsigned char)s[k]) * 0x100000001b3ULL + 7;
	}
	snprintf(out, 41, "%016llx%016llx%08x", (unsigned long long)h1, (unsigned long long)h2,
	         (unsigned)n);
}

static void sentinel_cmd(struct fconn *c, const char **argv, const size_t *argvlen, int argc)
{
	/* SENTINEL MASTER NAME (the broker's question: the view with its
	 * config epoch), or the older get-master-addr-by-name. */
	bool master_q = argc == 3 && is(argv[0], argvlen[0], "SENTINEL") &&
	                (is(argv[1], argvlen[1], "MASTER") ||
	                 is(argv[1], argvlen[1], "get-master-addr-by-name"));
	if (master_q) {
		char port[16];
		bool full = is(argv[1], argvlen[1], "MASTER");
		pthread_mutex_lock(&F.mu);
		if (F.nasks < FAKE_MAX_ASKS)
			F.asks[F.nasks++] = lb_now_ms();
		pthread_mutex_unlock(&F.mu);
		if (!is(argv[2], argvlen[2], FAKE_MASTER_NAME)) {
			put_str(c->fd, full ? "-ERR No such master with that name\r\n" : "*-1\r\n");
			return;
		}
		snprintf(port, sizeof(port), "%d", F.redis_port);
		if (full) {
			put_str(c->fd, "*8\r\n");
			put_bulk(c->fd, "name", 4);
			put_bulk(c->fd, FAKE_MASTER_NAME, strlen(FAKE_MASTER_NAME));
			put_bulk(c->fd, "ip", 2);
			put_bulk(c->fd, "127.0.0.1", 9);
			put_bulk(c->fd, "port", 4);
			put_bulk(c->fd, port, strlen(port));
			put_bulk(c->fd, "config-epoch", 12);
			put_bulk(c->fd, "1", 1);
			return;
		}
		put_str(c->fd, "*2\r\n");
		put_bulk(c->fd, "127.0.0.1", 9);
		put_bulk(c->fd, port, strlen(port));
	} else if (is(argv[0], argvlen[0], "SUBSCRIBE") && argc >= 2) {
		for (int k = 1; k < argc; k++)
			put_subscribed(c->fd, argv[k], argvlen[k], k);
	} else if (is(argv[0], argvlen[0], "AUTH")) {
		put_str(c->fd, "+OK\r\n");
	} else if (is(argv[0], argvlen[0], "PING")) {
		put_str(c->fd, "+PONG\r\n");
	} else {
		put_str(c->fd, "-ERR unknown command for this fake sentinel\r\n");
	}
}

/* EVALSHA on the keys of a lock named ro-...: the test's error reply. */
static void evalsha(struct fconn *c, const char **argv, const size_t *argvlen, int argc)
{
	long nkeys = argc > 2 ? number(argv[2], argv[2] + argvlen[2] + 1) : 0;
	bool ours = false;
	char msg[512];

	for (long k = 0; k < nkeys && 3 + k < argc; k++)
		ours = ours || memmem(argv[3 + k], argvlen[3 + k], "{ro-", 4) != NULL;
	if (!ours) {
		put_str(c->fd, ":1\r\n"); /* the canary: its value is there */
		return;
	}
	switch (F.form) {
	case FORM_REDIS7:
		snprintf(msg, sizeof(msg), "-%s\r\n", REDIS7_READONLY);
		break;
	case FORM_REDIS6:
		snprintf(msg, sizeof(msg), "-" REDIS6_SCRIPT_ERR_FMT "%s\r\n", argv[1],
		         REDIS6_READONLY_TAIL);
		break;
	default:
		snprintf(msg, sizeof(msg), "-" REDIS6_SCRIPT_ERR_FMT "%s\r\n", argv[1],
		         OTHER_ERROR_TAIL);
		break;
	}
	pthread_mutex_lock(&F.mu);
	if (F.errors++ == 0) {
		F.error_at = lb_now_ms();
		c->got_error = true;
	}
	pthread_mutex_unlock(&F.mu);
	put_str(c->fd, msg);
}

static void redis_cmd(struct fconn *c, const char **argv, const size_t *argvlen, int argc)
{
	if (is(argv[0], argvlen[0], "EVALSHA")) {
		evalsha(c, argv, argvlen, argc);
	} else if (is(argv[0], argvlen[0], "ROLE")) {
		put_str(c->fd, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
	} else if (is(argv[0], argvlen[0], "INFO")) {
		static const char info[] = "# Server\r\nredis_version:6.2.14\r\n"
		                           "run_id:0123456789abcdef0123456789abcdef01234567\r\n";
		put_bulk(c->fd, info, sizeof(info) - 1);
	} else if (is(argv[0], argvlen[0], "SCRIPT") && argc == 3 && is(argv[1], argvlen[1], "LOAD")) {
		char sha[41];
		fake_sha(argv[2], argvlen[2], sha);
		put_bulk(c->fd, sha, 40);
	} else if (is(argv[0], argvlen[0], "SUBSCRIBE") && argc >= 2) {
		for (int k = 1; k < argc; k++)
			put_subscribed(c->fd, argv[k], argvlen[k], k);
	} else if (is(argv[0], argvlen[0], "CLIENT") || is(argv[0], argvlen[0], "AUTH") ||
	           is(argv[0], argvlen[0], "SELECT")) {
		put_str(c->fd, "+OK\r\n");
	} else if (is(argv[0], argvlen[0], "PING")) {
		put_str(c->fd, "+PONG\r\n");
	} else {
		put_str(c->fd, "-ERR unknown command for this fake redis\r\n");
	}
}

static void conn_close(struct fconn *c, bool by_peer)
{
	pthread_mutex_lock(&F.mu);
	if (by_peer && c->got_error && !F.error_closed_at)
		F.error_closed_at = lb_now_ms();
	pthread_mutex_unlock(&F.mu);
	close(c->fd);
	free(c->buf);
	*c = (struct fconn){.fd = -1};
}

/* Reads what is there and answers every complete command. */
static void conn_read(struct fconn *c)
{
	const char *argv[FAKE_MAX_ARGS];
	size_t argvlen[FAKE_MAX_ARGS], used, off = 0;
	int argc, rc;
	ssize_t n;

	/* No cr_assert here: this is not the test's thread. */
	if (c->cap - c->len < 65536) {
		c->cap = c->cap ? c->cap * 2 : 131072;
		if (c->cap > FAKE_MAX_BUF * 2) {
			fprintf(stderr, "fake server: a command too long\n");
			conn_close(c, false);
			return;
		}
		c->buf = realloc(c->buf, c->cap);
		if (!c->buf)
			abort();
	}
	n = read(c->fd, c->buf + c->len, c->cap - c->len);
	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		conn_close(c, true);
		return;
	}
	c->len += (size_t)n;
	while ((rc = parse(c->buf + off, c->len - off, argv, argvlen, &argc, &used)) == 1) {
		if (c->sentinel)
			sentinel_cmd(c, argv, argvlen, argc);
		else
			redis_cmd(c, argv, argvlen, argc);
		off += used;
	}
	if (rc < 0) {
		put_str(c->fd, "-ERR protocol error\r\n");
		conn_close(c, false);
		return;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static void accept_on(int lfd, bool sentinel)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		return;
	for (int k = 0; k < FAKE_MAX_CONNS; k++) {
		if (F.conn[k].fd >= 0)
			continue;
		F.conn[k] = (struct fconn){.fd = fd, .sentinel = sentinel};
		if (!sentinel) {
			pthread_mutex_lock(&F.mu);
			F.redis_conns++;
			pthread_mutex_unlock(&F.mu);
		}
		return;
	}
	close(fd); /* full: the broker tries again */
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[FAKE_MAX_CONNS + 3];
		int idx[FAKE_MAX_CONNS + 3], n = 0;

		p[n++] = (struct pollfd){.fd = F.wake[0], .events = POLLIN};
		p[n++] = (struct pollfd){.fd = F.lredis, .events = POLLIN};
		p[n++] = (struct pollfd){.fd = F.lsent, .events = POLLIN};
		for (int k = 0; k < FAKE_MAX_CONNS; k++) {
			if (F.conn[k].fd < 0)
				continue;
			idx[n] = k;
			p[n++] = (struct pollfd){.fd = F.conn[k].fd, .events = POLLIN};
		}
		if (poll(p, (nfds_t)n, 1000) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			break;
		if (p[1].revents & POLLIN)
			accept_on(F.lredis, false);
		if (p[2].revents & POLLIN)
			accept_on(F.lsent, true);
		for (int i = 3; i < n; i++)
			if (p[i].revents && F.conn[idx[i]].fd == p[i].fd)
				conn_read(&F.conn[idx[i]]);
	}
	for (int k = 0; k < FAKE_MAX_CONNS; k++)
		if (F.conn[k].fd >= 0)
			conn_close(&F.conn[k], false);
	return NULL;
}

static int listen_loopback(int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind: %s", strerror(errno));
	cr_assert_eq(listen(fd, 64), 0, "listen: %s", strerror(errno));
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static void fake_start(err_form form)
{
	F.form = form;
	for (int k = 0; k < FAKE_MAX_CONNS; k++)
		F.conn[k].fd = -1;
	cr_assert_eq(pipe(F.wake), 0);
	F.lredis = listen_loopback(&F.redis_port);
	F.lsent = listen_loopback(&F.sentinel_port);
	cr_assert_eq(pthread_create(&F.th, NULL, serve, NULL), 0);
	F.running = true;
}

static void fake_stop(void)
{
	if (!F.running)
		return;
	F.running = false;
	(void)!write(F.wake[1], "x", 1);
	pthread_join(F.th, NULL);
	close(F.wake[0]);
	close(F.wake[1]);
	close(F.lredis);
	close(F.lsent);
}

/* The brokers stop first (lb_teardown): they close their connections while
 * the fakes still answer. */
static void fake_teardown(void)
{
	lb_teardown();
	fake_stop();
}

static const char *fake_url(void)
{
	static char url[128];
	snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/%s", F.sentinel_port, FAKE_MASTER_NAME);
	return url;
}

/* ---- what the tests look at ------------------------------------------------ */

static int nasks(void)
{
	pthread_mutex_lock(&F.mu);
	int n = F.nasks;
	pthread_mutex_unlock(&F.mu);
	return n;
}

/* The time of ask k. */
static int64_t ask_at(int k)
{
	pthread_mutex_lock(&F.mu);
	int64_t t = k < F.nasks ? F.asks[k] : 0;
	pthread_mutex_unlock(&F.mu);
	return t;
}

/* The number of asks after time t. */
static int asks_after(int64_t t)
{
	int n = 0;
	pthread_mutex_lock(&F.mu);
	for (int k = 0; k < F.nasks; k++)
		n += F.asks[k] > t;
	pthread_mutex_unlock(&F.mu);
	return n;
}

static bool log_has(const lb_broker *b, const char *what)
{
	FILE *f = fopen(lb_broker_log(b), "r");
	char line[4096];
	bool found = false;

	cr_assert_not_null(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Waits for a periodic ask of the broker (one PERIODIC_GAP_MS or more after
 * the ask before it); returns its time. The next one comes REASK_MS after
 * it at the earliest. */
static int64_t periodic_ask(int timeout_ms)
{
	int64_t end = lb_now_ms() + timeout_ms;
	int seen = nasks();

	for (;;) {
		int n = nasks();
		for (; seen < n; seen++)
			if (seen > 0 && ask_at(seen) - ask_at(seen - 1) >= PERIODIC_GAP_MS)
				return ask_at(seen);
		cr_assert_lt(lb_now_ms(), end, "no periodic ask of the sentinel within %d ms (%d asks)",
		             timeout_ms, n);
		lb_sleep_ms(5);
	}
}

/* A broker on the fakes, serving (stats says redis up), right after one of
 * its periodic asks: *t0 is that ask's time. */
static lb_client *broker_on_the_fakes(err_form form, lb_broker **b, int64_t *t0)
{
	fake_start(form);
	*b = lb_broker_start_url_no_redis_wait(fake_url(), NULL);
	lb_client *c = lb_connect(*b, LB_TCP);
	int64_t end = lb_now_ms() + 20000;
	while (strcmp(lb_str(lb_stats(c), "redis"), "up") != 0) {
		cr_assert_lt(lb_now_ms(), end, "the broker never served on the fake Redis");
		lb_sleep_ms(50);
	}
	cr_assert(log_has(*b, "redis master found"), "the broker found no master");
	*t0 = periodic_ask(3 * REASK_MS);
	return c;
}

static json_t *try_acquire(lb_client *c, const char *lock)
{
	return lb_call_timeout(c, 20000, "{s:s, s:s, s:i, s:i}", "op", "acquire", "lock", lock,
	                       "ttl_ms", 10000, "wait_ms", 0);
}

/* READONLY, in either form: the broker logs it, drops the connection,
 * asks the sentinels again, and does not grant. */
static void readonly_means_a_replica(err_form form)
{
	lb_broker *b;
	int64_t t0;
	lb_client *c = broker_on_the_fakes(form, &b, &t0);
	json_t *g = try_acquire(c, "ro-lock");

	cr_assert(!lb_is_ok(g), "granted although Redis answered READONLY: %s", lb_dump(g));
	cr_assert(lb_is_err(g, "unavailable") || lb_is_err(g, "timeout"), "%s", lb_dump(g));
	pthread_mutex_lock(&F.mu);
	int64_t err_at = F.error_at;
	pthread_mutex_unlock(&F.mu);
	cr_assert_gt(err_at, 0, "the acquire never reached the fake Redis");
	cr_assert_lt(err_at - t0, QUIET_UNTIL_MS - 1500,
	             "the acquire reached Redis %lld ms after the periodic ask: too late to tell "
	             "the asks apart (machine overloaded?)", (long long)(err_at - t0));

	/* Asked again soon after the error (sentinel.c waits ASK_GAP_MS
	 * between rounds), long before the next periodic ask. */
	int64_t end = t0 + QUIET_UNTIL_MS, closed_at = 0;
	for (;;) {
		pthread_mutex_lock(&F.mu);
		closed_at = F.error_closed_at;
		pthread_mutex_unlock(&F.mu);
		if ((asks_after(err_at) > 0 && closed_at > 0) || lb_now_ms() >= end)
			break;
		lb_sleep_ms(10);
	}
	cr_assert_gt(asks_after(err_at), 0,
	             "the sentinels were not asked again within %lld ms of the READONLY reply",
	             (long long)(end - err_at));
	cr_assert_gt(closed_at, 0, "the broker kept the connection that answered READONLY");
	cr_assert(log_has(b, "redis answered READONLY"), "the log does not say READONLY");
	lb_end();
}

Test(readonly, redis7_readonly_makes_the_broker_ask_the_sentinels_again, .init = lb_setup,
     .fini = fake_teardown, .timeout = 90)
{
	readonly_means_a_replica(FORM_REDIS7);
}

Test(readonly, redis6_readonly_in_a_script_error_makes_the_broker_ask_again, .init = lb_setup,
     .fini = fake_teardown, .timeout = 90)
{
	readonly_means_a_replica(FORM_REDIS6);
}

/* Another script error says nothing about the master: the acquire fails,
 * the connection stays, the sentinels are not asked. */
Test(readonly, another_script_error_does_not_make_the_broker_ask_again, .init = lb_setup,
     .fini = fake_teardown, .timeout = 90)
{
	lb_broker *b;
	int64_t t0;
	lb_client *c = broker_on_the_fakes(FORM_OTHER, &b, &t0);
	pthread_mutex_lock(&F.mu);
	int conns_before = F.redis_conns;
	pthread_mutex_unlock(&F.mu);
	json_t *g = try_acquire(c, "ro-lock");

	cr_assert(!lb_is_ok(g), "granted although the script failed: %s", lb_dump(g));
	pthread_mutex_lock(&F.mu);
	int64_t err_at = F.error_at;
	pthread_mutex_unlock(&F.mu);
	cr_assert_gt(err_at, 0, "the acquire never reached the fake Redis");
	cr_assert_lt(err_at - t0, QUIET_UNTIL_MS - 1500,
	             "the acquire reached Redis %lld ms after the periodic ask: too late to tell "
	             "the asks apart (machine overloaded?)", (long long)(err_at - t0));

	int64_t wait = t0 + QUIET_UNTIL_MS - lb_now_ms();
	if (wait > 0)
		lb_sleep_ms(wait);
	cr_assert_eq(asks_after(t0), 0, "the sentinels were asked again after a plain script error");
	pthread_mutex_lock(&F.mu);
	int64_t closed_at = F.error_closed_at;
	int conns_after = F.redis_conns;
	pthread_mutex_unlock(&F.mu);
	cr_assert_eq(closed_at, 0, "the broker dropped the connection after a plain script error");
	cr_assert_eq(conns_after, conns_before, "the broker connected again after a plain script "
	                                        "error");
	cr_assert_not(log_has(b, "READONLY"), "a plain script error was taken for READONLY");
	/* The broker still serves on that master. */
	cr_assert_str_eq(lb_str(lb_stats(c), "redis"), "up");
	lb_end();
}
