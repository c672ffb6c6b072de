/*
 * support.c - see support.h: environment, names, RESP, private brokers.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

const char *need_env(const char *name)
{
	const char *v = getenv(name);

	if (v == NULL || *v == '\0')
		cr_skip_test("%s is not set (run under tests/clients/with-broker.sh)", name);
	return v;
}

const char *unique_name(char *buf, size_t len, const char *what)
{
	static int seq;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(buf, len, "c-%s-%d-%d-%ld", what, (int)getpid(), ++seq, (long)(ts.tv_nsec % 100000));
	return buf;
}

lbc_client_t *must_connect(const char *url, const lbc_options_t *opts)
{
	lbc_error_t err;
	lbc_client_t *c = lbc_connect(url, opts, &err);

	cr_assert_not_null(c, "lbc_connect(%s): %s: %s", url ? url : "(default)", err.code, err.message);
	return c;
}

lbc_lease_t *must_acquire(lbc_client_t *c, const char *name, const lbc_acquire_opts_t *o)
{
	lbc_error_t err;
	lbc_lease_t *l = NULL;
	lbc_status st = lbc_acquire(c, name, o, &l, &err);

	cr_assert_eq(st, LBC_OK, "acquire %s: %s: %s", name, err.code, err.message);
	cr_assert_not_null(l);
	return l;
}

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- RESP -------------------------------------------------------------------------- */

typedef struct rconn {
	int fd;
	char buf[65536];
	size_t len, off;
} rconn_t;

static int tcp_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int rbyte(rconn_t *r)
{
	if (r->off == r->len) {
		ssize_t n = recv(r->fd, r->buf, sizeof(r->buf), 0);
		if (n <= 0)
			return -1;
		r->len = (size_t)n;
		r->off = 0;
	}
	return (unsigned char)r->buf[r->off++];
}

static int rline(rconn_t *r, char *out, size_t cap)
{
	size_t n = 0;
	int ch;

	while ((ch = rbyte(r)) >= 0) {
		if (ch == '\n') {
			if (n && out[n - 1] == '\r')
				n--;
			out[n] = '\0';
			return 0;
		}
		if (n + 1 < cap)
			out[n++] = (char)ch;
	}
	return -1;
}

static int rsend(rconn_t *r, int argc, const char *const *argv)
{
	size_t cap = 64, n;
	char *out;

	for (int i = 0; i < argc; i++)
		cap += strlen(argv[i]) + 32;
	out = malloc(cap);
	n = (size_t)snprintf(out, cap, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++)
		n += (size_t)snprintf(out + n, cap - n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
	ssize_t w = send(r->fd, out, n, MSG_NOSIGNAL);
	free(out);
	return w == (ssize_t)n ? 0 : -1;
}

/* Reads an array of bulk strings (KEYS) into *keys (malloc'd). */
static int rkeys(rconn_t *r, char ***keys, int *n)
{
	char line[1024];

	*keys = NULL;
	*n = 0;
	if (rline(r, line, sizeof(line)) < 0 || line[0] != '*')
		return -1;
	int cnt = atoi(line + 1);
	*keys = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof(char *));
	for (int i = 0; i < cnt; i++) {
		if (rline(r, line, sizeof(line)) < 0 || line[0] != '$')
			return -1;
		int len = atoi(line + 1);
		char *k = malloc((size_t)len + 3);
		for (int j = 0; j < len + 2; j++)
			k[j] = (char)rbyte(r);
		k[len] = '\0';
		(*keys)[(*n)++] = k;
	}
	return 0;
}

int redis_delete_lock(const char *name)
{
	rconn_t *r = calloc(1, sizeof(*r));
	char pattern[600], main_key[600], line[256];
	char **keys = NULL;
	int n = 0, deleted = -1;

	r->fd = tcp_connect(atoi(need_env("LOCKBROKER_REDIS_PORT")));
	if (r->fd < 0) {
		free(r);
		return -1;
	}
	snprintf(pattern, sizeof(pattern), "lb:{%s}:*", name);
	snprintf(main_key, sizeof(main_key), "lb:{%s}", name);
	const char *kargv[] = {"KEYS", pattern};
	if (rsend(r, 2, kargv) == 0 && rkeys(r, &keys, &n) == 0) {
		const char **dargv = calloc((size_t)n + 2, sizeof(char *));
		dargv[0] = "DEL";
		dargv[1] = main_key;
		for (int i = 0; i < n; i++)
			dargv[i + 2] = keys[i];
		if (rsend(r, n + 2, dargv) == 0 && rline(r, line, sizeof(line)) == 0 && line[0] == ':')
			deleted = atoi(line + 1);
		free(dargv);
	}
	for (int i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	close(r->fd);
	free(r);
	return deleted;
}

/* ---- private brokers ------------------------------------------------------------------ */

#define MAX_BROKERS 8
static pid_t running[MAX_BROKERS];

int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	getsockname(fd, (struct sockaddr *)&sa, &len);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

void broker_init(broker_t *b, int port, const char *redis, const char *const *extra)
{
	memset(b, 0, sizeof(*b));
	b->port = port ? port : free_port();
	snprintf(b->url, sizeof(b->url), "tcp://127.0.0.1:%d", b->port);
	if (redis)
		snprintf(b->redis, sizeof(b->redis), "%s", redis);
	else
		snprintf(b->redis, sizeof(b->redis), "redis://%s:%s", need_env("LOCKBROKER_REDIS_HOST"),
		         need_env("LOCKBROKER_REDIS_PORT"));
	for (int i = 0; extra && extra[i] && i < 15; i++)
		b->args[b->nargs++] = strdup(extra[i]);
}

/* Sends line to the broker, returns whether the answer holds want. */
static bool probe(int port, const char *line, const char *want)
{
	char buf[4096];
	int fd = tcp_connect(port);
	ssize_t n;
	bool ok = false;
	struct timeval tv = {1, 0};

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line)) {
		n = recv(fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			ok = strstr(buf, want) != NULL;
		}
	}
	close(fd);
	return ok;
}

int broker_start(broker_t *b, bool want_redis)
{
	const char *bin = need_env("LOCKBROKER_BIN");
	const char *tmp = getenv("LOCKBROKER_TMP");
	char listen[80], logpath[512];
	char *argv[32];
	int argc = 0;
	pid_t pid;

	snprintf(listen, sizeof(listen), "tcp://127.0.0.1:%d", b->port);
	snprintf(logpath, sizeof(logpath), "%s/c-broker-%d.log", tmp ? tmp : "/tmp", b->port);
	argv[argc++] = (char *)bin;
	argv[argc++] = (char *)"--redis";
	argv[argc++] = b->redis;
	argv[argc++] = (char *)"--listen";
	argv[argc++] = listen;
	argv[argc++] = (char *)"--log-level";
	argv[argc++] = (char *)"warn";
	for (int i = 0; i < b->nargs; i++)
		argv[argc++] = b->args[i];
	argv[argc] = NULL;

	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
		}
		if (fd >= 0)
			dup2(fd, 2);
		execv(bin, argv);
		_exit(127);
	}
	b->pid = pid;
	for (int i = 0; i < MAX_BROKERS; i++)
		if (running[i] == 0) {
			running[i] = pid;
			break;
		}
	char acq[160];
	snprintf(acq, sizeof(acq), "{\"id\":1,\"op\":\"acquire\",\"lock\":\"c-probe-%d-%d\",\"wait_ms\":0}\n",
	         (int)getpid(), b->port);
	int64_t deadline = now_ms() + 10000;
	while (now_ms() < deadline) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			b->pid = 0;
			return -1;
		}
		if (want_redis ? probe(b->port, acq, "\"lease\"")
		               : probe(b->port, "{\"id\":1,\"op\":\"ping\"}\n", "\"ok\":true"))
			return 0;
		sleep_ms(20);
	}
	return -1;
}

static void forget(pid_t pid)
{
	for (int i = 0; i < MAX_BROKERS; i++)
		if (running[i] == pid)
			running[i] = 0;
}

void broker_kill(broker_t *b, int sig)
{
	if (b->pid <= 0)
		return;
	kill(b->pid, sig);
	if (sig == SIGKILL) {
		waitpid(b->pid, NULL, 0);
		forget(b->pid);
		b->pid = 0;
	}
}

int broker_wait(broker_t *b, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	if (b->pid <= 0)
		return 0;
	while (now_ms() < deadline) {
		if (waitpid(b->pid, NULL, WNOHANG) == b->pid) {
			forget(b->pid);
			b->pid = 0;
			return 0;
		}
		sleep_ms(10);
	}
	return -1;
}

void broker_free(broker_t *b)
{
	broker_kill(b, SIGKILL);
	for (int i = 0; i < b->nargs; i++)
		free(b->args[i]);
	b->nargs = 0;
}

void brokers_stop_all(void)
{
	for (int i = 0; i < MAX_BROKERS; i++)
		if (running[i] > 0) {
			kill(running[i], SIGKILL);
			waitpid(running[i], NULL, 0);
			running[i] = 0;
		}
}

/* ---- events ----------------------------------------------------------------------------- */

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;

void record_event(void *arg, const lbc_event_t *ev)
{
	recorder_t *r = arg;

	pthread_mutex_lock(&rec_mu);
	switch (ev->type) {
	case LBC_EVENT_LOST:
		r->lost++;
		snprintf(r->last_lost_lease, sizeof(r->last_lost_lease), "%s", ev->lease ? ev->lease : "");
		snprintf(r->last_lost_reason, sizeof(r->last_lost_reason), "%s", ev->reason ? ev->reason : "");
		break;
	case LBC_EVENT_SHUTDOWN:
		r->shutdown++;
		r->grace_ms = ev->grace_ms;
		break;
	case LBC_EVENT_CLOSING:
		r->closing++;
		break;
	case LBC_EVENT_DISCONNECTED:
		r->disconnected++;
		snprintf(r->last_disconnected_reason, sizeof(r->last_disconnected_reason), "%s",
		         ev->reason ? ev->reason : "");
		break;
	default:
		r->other++;
	}
	pthread_mutex_unlock(&rec_mu);
}

recorder_t recorder_get(recorder_t *r)
{
	recorder_t copy;

	pthread_mutex_lock(&rec_mu);
	copy = *r;
	pthread_mutex_unlock(&rec_mu);
	return copy;
}

int64_t wait_for_waiters(lbc_client_t *c, const char *name, int64_t want, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms, got;

	for (;;) {
		lbc_lock_info_t *info = NULL;
		got = lbc_inspect(c, name, &info, NULL) == LBC_OK ? info->waiters : -1;
		lbc_lock_info_free(info);
		if (got == want || now_ms() >= deadline)
			return got;
		sleep_ms(20);
	}
}

/* ---- protocol/PROTOCOL.md ------------------------------------------------------------------ */

/* A Markdown heading ("#"s, then title, then optional closing "#"s)? */
static bool md_heading(const char *line, const char *title)
{
	const char *p = line;
	size_t n = strlen(title);

	if (*p != '#')
		return false;
	while (*p == '#')
		p++;
	while (*p == ' ' || *p == '\t')
		p++;
	if (strncasecmp(p, title, n) != 0)
		return false;
	for (p += n; *p; p++)
		if (*p != ' ' && *p != '\t' && *p != '#')
			return false;
	return true;
}

/* The first cell of a table row "| a | b |", trimmed, backticks dropped;
 * false when the line is not a row. */
static bool md_first_cell(const char *line, char *out, size_t cap)
{
	const char *p = line, *end;
	size_t n;

	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '|')
		return false;
	end = strchr(p, '|');
	if (end == NULL)
		end = p + strlen(p);
	while (p < end && (*p == ' ' || *p == '\t' || *p == '`'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '`'))
		end--;
	n = (size_t)(end - p) < cap - 1 ? (size_t)(end - p) : cap - 1;
	memcpy(out, p, n);
	out[n] = '\0';
	return true;
}

/* "|---|:--:|" */
static bool md_separator(const char *line)
{
	bool dash = false;

	while (*line == ' ' || *line == '\t')
		line++;
	if (*line != '|')
		return false;
	for (; *line; line++) {
		if (*line == '-')
			dash = true;
		else if (*line != '|' && *line != ':' && *line != ' ' && *line != '\t')
			return false;
	}
	return dash;
}

static bool wire_code_shaped(const char *s)
{
	if (*s < 'a' || *s > 'z')
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

int protocol_error_codes(char (*codes)[32], int max, char *why, size_t why_len)
{
	static const char *const paths[] = {"protocol/PROTOCOL.md", "../protocol/PROTOCOL.md",
	                                    "../../protocol/PROTOCOL.md", "../../../protocol/PROTOCOL.md"};
	enum { HEADING, TABLE, SEPARATOR, ROWS } st = HEADING;
	char line[8192], cell[64];
	bool fenced = false;
	int n = 0, lineno = 0;
	FILE *f = NULL;

	for (size_t i = 0; f == NULL && i < sizeof(paths) / sizeof(paths[0]); i++)
		f = fopen(paths[i], "re");
	if (f == NULL) {
		snprintf(why, why_len, "protocol/PROTOCOL.md not found (run from the top of the tree)");
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		const char *t = line;

		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		while (*t == ' ' || *t == '\t')
			t++;
		if (strncmp(t, "```", 3) == 0) { /* a code block: no heading, no table */
			fenced = !fenced;
			if (st == ROWS)
				break;
			continue;
		}
		if (fenced)
			continue;
		switch (st) {
		case HEADING:
			if (md_heading(line, "Error codes"))
				st = TABLE;
			break;
		case TABLE:
			if (*t == '#') {
				snprintf(why, why_len, "line %d: no table under the \"Error codes\" heading", lineno);
				goto fail;
			}
			if (md_first_cell(line, cell, sizeof(cell))) {
				if (strcasecmp(cell, "code") != 0) {
					snprintf(why, why_len, "line %d: the table's first column is \"%s\", not \"code\"",
					         lineno, cell);
					goto fail;
				}
				st = SEPARATOR;
			}
			break; /* blank lines and prose before the table */
		case SEPARATOR:
			if (!md_separator(line)) {
				snprintf(why, why_len, "line %d: no |---| row under the table's header", lineno);
				goto fail;
			}
			st = ROWS;
			break;
		case ROWS:
			if (!md_first_cell(line, cell, sizeof(cell)))
				goto done; /* the first line that is not a row ends the table */
			if (!wire_code_shaped(cell) || strlen(cell) >= 32) {
				snprintf(why, why_len, "line %d: \"%s\" is not an error code", lineno, cell);
				goto fail;
			}
			if (n == max) {
				snprintf(why, why_len, "more than %d error codes", max);
				goto fail;
			}
			memcpy(codes[n++], cell, strlen(cell) + 1); /* < 32: checked above */
			break;
		}
	}
done:
	fclose(f);
	if (st != ROWS || n == 0) {
		snprintf(why, why_len, "%s", st == HEADING ? "no \"Error codes\" heading" : "the table has no rows");
		return -1;
	}
	return n;
fail:
	fclose(f);
	return -1;
}

/* ---- fake brokers ------------------------------------------------------------------------ */

int fake_read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	char ch;

	while (n + 1 < cap && recv(fd, &ch, 1, 0) == 1) {
		if (ch == '\n') {
			buf[n] = '\0';
			return 0;
		}
		buf[n++] = ch;
	}
	return -1;
}

long fake_request_id(const char *line)
{
	const char *p = strstr(line, "\"id\":");
	return p ? strtol(p + 5, NULL, 10) : -1;
}
