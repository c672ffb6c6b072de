/*
 * fakeresp.c - fake Redis, Redis Cluster nodes and Redis Sentinels for the
 * tests (see fakeresp.h).
 *
 * One thread polls a wake-up pipe, every server's listening socket and
 * every connection; it reads what a connection sent, answers each
 * complete command (RESP multibulk, as hiredis sends) in order, and keeps
 * what is incomplete for the next read. What the test thread sets (views,
 * down) and what the fakes count is in F under F.mu; the servers and
 * their sockets are made before the thread starts and closed after it
 * ended, so the sockets themselves are the thread's alone meanwhile.
 * The thread never asserts (Criterion's asserts belong to the test's
 * thread): a surprise is a line on stderr and a closed connection.
 */
#include "tests/integration/fakeresp.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define FR_CONNS_MAX 96
#define FR_ARGS_MAX 64
#define FR_BUF_MAX (4 << 20)
#define FR_NAMES_MAX 64   /* commands counted per server */
#define FR_CLIENTS_MAX 64 /* client names kept per server */

struct fr_conn {
	int fd; /* -1: free slot */
	int srv;
	char *buf;
	size_t len, cap;
};

struct fr_srv {
	fr_kind kind;
	int lfd, port;
	/* Under F.mu: */
	bool down;
	char master_name[64]; /* a sentinel's view */
	int master_port;
	long long master_epoch;
	bool cluster; /* a Redis's cluster view */
	long long current_epoch, owner_epoch;
	int owner_port;
	struct {
		char name[48];
		int n;
	} count[FR_NAMES_MAX];
	int ncount;
	char clients[FR_CLIENTS_MAX][80];
	int nclients;
};

static struct {
	bool running;
	pthread_t th;
	int wake[2];
	int nsrv;
	struct fr_srv srv[FR_SERVERS_MAX];
	struct fr_conn conn[FR_CONNS_MAX];
	pthread_mutex_t mu; /* guards the fields of srv marked so, and stop */
	bool stop;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- replies ---------------------------------------------------------------- */

static void put(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* the peer went: its EOF comes next */
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

static void put_cstr(int fd, const char *s)
{
	put_bulk(fd, s, strlen(s));
}

static void put_int(int fd, long long v)
{
	char num[32];

	snprintf(num, sizeof(num), ":%lld\r\n", v);
	put_str(fd, num);
}

static void put_subscribed(int fd, const char *ch, size_t n, int count)
{
	put_str(fd, "*3\r\n");
	put_bulk(fd, "subscribe", 9);
	put_bulk(fd, ch, n);
	put_int(fd, count);
}

/* ---- reading commands ---------------------------------------------------- */

/* The decimal number from p up to the "\r" before nl; -1 if it is not one.
 * (Not strtol: the buffer has no NUL, and ASan's strict_string_checks
 * reads to one.) */
static long number(const char *p, const char *nl)
{
	long v = 0;

	if (p >= nl - 1 || nl[-1] != '\r')
		return -1;
	for (; p < nl - 1; p++) {
		if (*p < '0' || *p > '9' || v > FR_BUF_MAX)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

/* One RESP multibulk command at the start of buf: 1 and its arguments
 * (pointers into buf) and length; 0 when incomplete; -1 when it is not
 * one. */
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
	if (n < 1 || n > FR_ARGS_MAX)
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
		if (bl < 0 || bl > FR_BUF_MAX)
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

/* Counts name (cut short) for s. Under F.mu. */
static void count_one(struct fr_srv *s, const char *name, size_t len)
{
	char key[48];

	if (len >= sizeof(key))
		len = sizeof(key) - 1;
	for (size_t k = 0; k < len; k++)
		key[k] = (char)(name[k] >= 'a' && name[k] <= 'z' ? name[k] - 'a' + 'A' : name[k]);
	key[len] = '\0';
	for (int k = 0; k < s->ncount; k++) {
		if (strcmp(s->count[k].name, key) == 0) {
			s->count[k].n++;
			return;
		}
	}
	if (s->ncount == FR_NAMES_MAX)
		return;
	snprintf(s->count[s->ncount].name, sizeof(s->count[0].name), "%s", key);
	s->count[s->ncount++].n = 1;
}

/* Counts the command's name, and its name with its first argument. */
static void count_cmd(struct fr_srv *s, const char **argv, const size_t *argvlen, int argc)
{
	char two[48];

	pthread_mutex_lock(&F.mu);
	count_one(s, argv[0], argvlen[0]);
	if (argc > 1 && argvlen[0] + argvlen[1] + 2 <= sizeof(two)) {
		memcpy(two, argv[0], argvlen[0]);
		two[argvlen[0]] = ' ';
		memcpy(two + argvlen[0] + 1, argv[1], argvlen[1]);
		count_one(s, two, argvlen[0] + 1 + argvlen[1]);
	}
	if (argc == 3 && is(argv[0], argvlen[0], "CLIENT") && is(argv[1], argvlen[1], "SETNAME") &&
	    s->nclients < FR_CLIENTS_MAX) {
		size_t n = argvlen[2] < 79 ? argvlen[2] : 79;
		memcpy(s->clients[s->nclients], argv[2], n);
		s->clients[s->nclients++][n] = '\0';
	}
	pthread_mutex_unlock(&F.mu);
}

/* ---- the sentinel ------------------------------------------------------------ */

static void sentinel_cmd(struct fr_conn *c, const char **argv, const size_t *argvlen, int argc)
{
	struct fr_srv *s = &F.srv[c->srv];

	if (is(argv[0], argvlen[0], "SENTINEL") && argc == 3 &&
	    (is(argv[1], argvlen[1], "MASTER") || is(argv[1], argvlen[1], "get-master-addr-by-name"))) {
		char port[16], epoch[32];
		bool known;

		pthread_mutex_lock(&F.mu);
		known = s->master_port > 0 && is(argv[2], argvlen[2], s->master_name);
		snprintf(port, sizeof(port), "%d", s->master_port);
		snprintf(epoch, sizeof(epoch), "%lld", s->master_epoch);
		pthread_mutex_unlock(&F.mu);
		if (is(argv[1], argvlen[1], "get-master-addr-by-name")) {
			if (!known) {
				put_str(c->fd, "*-1\r\n");
				return;
			}
			put_str(c->fd, "*2\r\n");
			put_cstr(c->fd, "127.0.0.1");
			put_cstr(c->fd, port);
			return;
		}
		if (!known) {
			put_str(c->fd, "-ERR No such master with that name\r\n");
			return;
		}
		/* The fields of a real SENTINEL MASTER the broker may read,
		 * config-epoch not first. */
		static const char *const rest[] = {"flags", "master", "role-reported", "master",
		                                   "num-slaves", "0", "num-other-sentinels", "2",
		                                   "quorum", "2"};
		put_str(c->fd, "*20\r\n");
		put_cstr(c->fd, "name");
		put_bulk(c->fd, argv[2], argvlen[2]);
		put_cstr(c->fd, "ip");
		put_cstr(c->fd, "127.0.0.1");
		put_cstr(c->fd, "port");
		put_cstr(c->fd, port);
		put_cstr(c->fd, "runid");
		put_cstr(c->fd, "0123456789abcdef0123456789abcdef01234567");
		for (size_t k = 0; k < sizeof(rest) / sizeof(rest[0]); k++)
			put_cstr(c->fd, rest[k]);
		put_cstr(c->fd, "config-epoch");
		put_cstr(c->fd, epoch);
	} else if (is(argv[0], argvlen[0], "SUBSCRIBE") && argc >= 2) {
		for (int k = 1; k < argc; k++)
			put_subscribed(c->fd, argv[k], argvlen[k], k);
	} else if (is(argv[0], argvlen[0], "AUTH") || is(argv[0], argvlen[0], "CLIENT")) {
		put_str(c->fd, "+OK\r\n");
	} else if (is(argv[0], argvlen[0], "PING")) {
		put_str(c->fd, "+PONG\r\n");
	} else {
		put_str(c->fd, "-ERR unknown command for this fake sentinel\r\n");
	}
}

/* ---- Redis, and a cluster node ------------------------------------------------ */

/* A node id of 40 hex digits made from a port. */
static void node_id(int port, char out[41])
{
	snprintf(out, 41, "%040x", (unsigned)port);
}

static void cluster_cmd(struct fr_conn *c, const char **argv, const size_t *argvlen, int argc)
{
	struct fr_srv *s = &F.srv[c->srv];
	long long current, owner_epoch;
	int owner;
	bool cluster;
	char id[41], text[512];

	pthread_mutex_lock(&F.mu);
	cluster = s->cluster;
	current = s->current_epoch;
	owner = s->owner_port;
	owner_epoch = s->owner_epoch;
	pthread_mutex_unlock(&F.mu);
	if (!cluster) {
		put_str(c->fd, "-ERR This instance has cluster support disabled\r\n");
		return;
	}
	node_id(owner, id);
	if (argc == 2 && is(argv[1], argvlen[1], "INFO")) {
		snprintf(text, sizeof(text),
		         "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n"
		         "cluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n"
		         "cluster_known_nodes:1\r\ncluster_size:1\r\ncluster_current_epoch:%lld\r\n"
		         "cluster_my_epoch:%lld\r\n",
		         current, owner == s->port ? owner_epoch : 0);
		put_cstr(c->fd, text);
	} else if (argc == 2 && is(argv[1], argvlen[1], "SLOTS")) {
		put_str(c->fd, "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n");
		put_cstr(c->fd, "127.0.0.1");
		put_int(c->fd, owner);
		put_cstr(c->fd, id);
	} else if (argc == 2 && is(argv[1], argvlen[1], "NODES")) {
		snprintf(text, sizeof(text), "%s 127.0.0.1:%d@%d %smaster - 0 0 %lld connected 0-16383\n",
		         id, owner, owner + 10000, owner == s->port ? "myself," : "", owner_epoch);
		put_cstr(c->fd, text);
	} else if (argc == 2 && is(argv[1], argvlen[1], "MYID")) {
		node_id(s->port, id);
		put_cstr(c->fd, id);
	} else {
		put_str(c->fd, "-ERR unknown CLUSTER subcommand for this fake node\r\n");
	}
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

static void redis_cmd(struct fr_conn *c, const char **argv, const size_t *argvlen, int argc)
{
	if (is(argv[0], argvlen[0], "EVALSHA")) {
		put_str(c->fd, ":1\r\n"); /* the canary: its value is there */
	} else if (is(argv[0], argvlen[0], "CLUSTER") && argc >= 2) {
		cluster_cmd(c, argv, argvlen, argc);
	} else if (is(argv[0], argvlen[0], "ROLE")) {
		put_str(c->fd, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
	} else if (is(argv[0], argvlen[0], "INFO")) {
		char info[256];
		snprintf(info, sizeof(info), "# Server\r\nredis_version:7.0.15\r\nrun_id:%040x\r\n",
		         (unsigned)F.srv[c->srv].port);
		put_cstr(c->fd, info);
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

/* ---- connections ------------------------------------------------------------- */

static void conn_close(struct fr_conn *c)
{
	close(c->fd);
	free(c->buf);
	*c = (struct fr_conn){.fd = -1};
}

/* Reads what is there and answers every complete command. */
static void conn_read(struct fr_conn *c)
{
	const char *argv[FR_ARGS_MAX];
	size_t argvlen[FR_ARGS_MAX], used, off = 0;
	int argc, rc;
	ssize_t n;

	if (c->cap - c->len < 65536) {
		c->cap = c->cap ? c->cap * 2 : 131072;
		if (c->cap > FR_BUF_MAX * 2) {
			fprintf(stderr, "fakeresp: a command too long\n");
			conn_close(c);
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
		conn_close(c);
		return;
	}
	c->len += (size_t)n;
	while ((rc = parse(c->buf + off, c->len - off, argv, argvlen, &argc, &used)) == 1) {
		count_cmd(&F.srv[c->srv], argv, argvlen, argc);
		if (F.srv[c->srv].kind == FR_SENTINEL)
			sentinel_cmd(c, argv, argvlen, argc);
		else
			redis_cmd(c, argv, argvlen, argc);
		off += used;
	}
	if (rc < 0) {
		put_str(c->fd, "-ERR protocol error\r\n");
		conn_close(c);
		return;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static void accept_on(int srv)
{
	int fd = accept4(F.srv[srv].lfd, NULL, NULL, SOCK_CLOEXEC);
	bool down;

	if (fd < 0)
		return;
	pthread_mutex_lock(&F.mu);
	down = F.srv[srv].down;
	pthread_mutex_unlock(&F.mu);
	if (down) {
		close(fd);
		return;
	}
	for (int k = 0; k < FR_CONNS_MAX; k++) {
		if (F.conn[k].fd >= 0)
			continue;
		F.conn[k] = (struct fr_conn){.fd = fd, .srv = srv};
		return;
	}
	fprintf(stderr, "fakeresp: too many connections\n");
	close(fd);
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[1 + FR_SERVERS_MAX + FR_CONNS_MAX];
		int idx[1 + FR_SERVERS_MAX + FR_CONNS_MAX], n = 0;
		bool down[FR_SERVERS_MAX], stop;
		char drain[64];

		pthread_mutex_lock(&F.mu);
		stop = F.stop;
		for (int k = 0; k < F.nsrv; k++)
			down[k] = F.srv[k].down;
		pthread_mutex_unlock(&F.mu);
		if (stop)
			break;
		for (int k = 0; k < FR_CONNS_MAX; k++)
			if (F.conn[k].fd >= 0 && down[F.conn[k].srv])
				conn_close(&F.conn[k]);
		p[n++] = (struct pollfd){.fd = F.wake[0], .events = POLLIN};
		for (int k = 0; k < F.nsrv; k++) {
			idx[n] = k;
			p[n++] = (struct pollfd){.fd = F.srv[k].lfd, .events = POLLIN};
		}
		for (int k = 0; k < FR_CONNS_MAX; k++) {
			if (F.conn[k].fd < 0)
				continue;
			idx[n] = k;
			p[n++] = (struct pollfd){.fd = F.conn[k].fd, .events = POLLIN};
		}
		if (poll(p, (nfds_t)n, 1000) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "fakeresp: poll: %s\n", strerror(errno));
			break;
		}
		if (p[0].revents)
			(void)!read(F.wake[0], drain, sizeof(drain));
		for (int i = 1; i <= F.nsrv; i++)
			if (p[i].revents & POLLIN)
				accept_on(idx[i]);
		for (int i = 1 + F.nsrv; i < n; i++)
			if (p[i].revents && F.conn[idx[i]].fd == p[i].fd)
				conn_read(&F.conn[idx[i]]);
	}
	for (int k = 0; k < FR_CONNS_MAX; k++)
		if (F.conn[k].fd >= 0)
			conn_close(&F.conn[k]);
	return NULL;
}

static void wake(void)
{
	if (F.running)
		(void)!write(F.wake[1], "x", 1);
}

/* ---- the test's side ----------------------------------------------------------- */

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

int fr_add(fr_kind kind)
{
	struct fr_srv *s;

	cr_assert(!F.running, "fr_add after fr_start");
	cr_assert_lt(F.nsrv, FR_SERVERS_MAX, "too many fake servers");
	s = &F.srv[F.nsrv];
	*s = (struct fr_srv){.kind = kind};
	s->lfd = listen_loopback(&s->port);
	return F.nsrv++;
}

int fr_port(int id)
{
	cr_assert(id >= 0 && id < F.nsrv, "no fake server %d", id);
	return F.srv[id].port;
}

void fr_start(void)
{
	cr_assert(!F.running, "fr_start twice");
	for (int k = 0; k < FR_CONNS_MAX; k++)
		F.conn[k].fd = -1;
	cr_assert_eq(pipe2(F.wake, O_CLOEXEC | O_NONBLOCK), 0, "pipe: %s", strerror(errno));
	F.stop = false;
	cr_assert_eq(pthread_create(&F.th, NULL, serve, NULL), 0);
	F.running = true;
}

void fr_stop(void)
{
	if (F.running) {
		pthread_mutex_lock(&F.mu);
		F.stop = true;
		pthread_mutex_unlock(&F.mu);
		wake();
		pthread_join(F.th, NULL);
		F.running = false;
		close(F.wake[0]);
		close(F.wake[1]);
	}
	for (int k = 0; k < F.nsrv; k++)
		close(F.srv[k].lfd);
	F.nsrv = 0;
}

void fr_set_down(int id, bool down)
{
	cr_assert(id >= 0 && id < F.nsrv, "no fake server %d", id);
	pthread_mutex_lock(&F.mu);
	F.srv[id].down = down;
	pthread_mutex_unlock(&F.mu);
	wake(); /* its connections close at the thread's next turn */
}

void fr_sentinel_view(int id, const char *name, int master_port, long long epoch)
{
	cr_assert(id >= 0 && id < F.nsrv && F.srv[id].kind == FR_SENTINEL, "no fake sentinel %d", id);
	cr_assert_lt(strlen(name), sizeof(F.srv[id].master_name));
	pthread_mutex_lock(&F.mu);
	snprintf(F.srv[id].master_name, sizeof(F.srv[id].master_name), "%s", name);
	F.srv[id].master_port = master_port;
	F.srv[id].master_epoch = epoch;
	pthread_mutex_unlock(&F.mu);
}

void fr_cluster_view(int id, long long current_epoch, int owner_port, long long owner_epoch)
{
	cr_assert(id >= 0 && id < F.nsrv && F.srv[id].kind == FR_REDIS, "no fake redis %d", id);
	pthread_mutex_lock(&F.mu);
	F.srv[id].cluster = true;
	F.srv[id].current_epoch = current_epoch;
	F.srv[id].owner_port = owner_port;
	F.srv[id].owner_epoch = owner_epoch;
	pthread_mutex_unlock(&F.mu);
}

int fr_count(int id, const char *cmd)
{
	int n = 0;

	cr_assert(id >= 0 && id < F.nsrv, "no fake server %d", id);
	pthread_mutex_lock(&F.mu);
	for (int k = 0; k < F.srv[id].ncount; k++)
		if (strcasecmp(F.srv[id].count[k].name, cmd) == 0)
			n = F.srv[id].count[k].n;
	pthread_mutex_unlock(&F.mu);
	return n;
}

int fr_named_conns(int id, const char *prefix)
{
	int n = 0;

	cr_assert(id >= 0 && id < F.nsrv, "no fake server %d", id);
	pthread_mutex_lock(&F.mu);
	for (int k = 0; k < F.srv[id].nclients; k++)
		n += strncmp(F.srv[id].clients[k], prefix, strlen(prefix)) == 0;
	pthread_mutex_unlock(&F.mu);
	return n;
}
