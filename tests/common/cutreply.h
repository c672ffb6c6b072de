/*
 * cutreply.h - the lost-reply technique of tests/integration/test_lostreply.c
 * for Redis nodes known by their TCP port (a Sentinel master, a Cluster
 * master, Redlock's masters), shared by the lost-reply tests of ha_tests,
 * cluster_tests and redlock_tests (issue 26, point 9). Header only: every
 * function is static inline, so a file that includes it links nothing more.
 *
 * cut_replies(ports, n, sleep_ms, send, arg): each node sleeps sleep_ms
 * (DEBUG SLEEP); send(arg) runs meanwhile (the client's request reaches the
 * broker, which writes its script to the nodes, where it waits); then every
 * command connection of the brokers (CLIENT LIST names lockbroker-ID:N; the
 * inboxes are left alone) is killed with CLIENT KILL from a connection that
 * wrote its command after the broker did. When a node wakes it runs the
 * broker's script first (its socket became readable first) and then the
 * kill, before it writes any reply: the script's effect stays, its reply is
 * lost.
 */
#ifndef LB_TESTS_COMMON_CUTREPLY_H
#define LB_TESTS_COMMON_CUTREPLY_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>

#include "tests/integration/harness.h"

#define CUT_MAX_NODES 8
#define CUT_MAX_CONNS 64

/* A new connection to 127.0.0.1:port that the node has accepted (it
 * answered PING), so the node's loop knows its socket. */
static inline redisContext *cut_conn(int port)
{
	struct timeval tv = {.tv_sec = 2};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *rep;

	cr_assert(c && !c->err, "cannot connect to %d: %s", port, c ? c->errstr : "out of memory");
	redisSetTimeout(c, (struct timeval){.tv_sec = 10});
	rep = redisCommand(c, "PING");
	cr_assert_not_null(rep, "PING %d: %s", port, c->errstr);
	freeReplyObject(rep);
	return c;
}

/* Writes one command on c without reading its reply. */
static inline void cut_send(redisContext *c, const char *fmt, ...)
{
	va_list ap;
	int done = 0;

	va_start(ap, fmt);
	cr_assert_eq(redisvAppendCommand(c, fmt, ap), REDIS_OK);
	va_end(ap);
	while (!done)
		cr_assert_eq(redisBufferWrite(c, &done), REDIS_OK, "write: %s", c->errstr);
}

/* Reads n replies (stopping at an error) and frees c. */
static inline void cut_wait(redisContext *c, int n)
{
	for (int k = 0; k < n; k++) {
		void *rep = NULL;
		if (redisGetReply(c, &rep) != REDIS_OK)
			break;
		freeReplyObject(rep);
	}
	redisFree(c);
}

/* The CLIENT LIST ids of the brokers' command connections on the node
 * (named lockbroker-*, not the inboxes), and their client-side TCP ports
 * in cports; returns how many. */
static inline size_t cut_broker_conns(int port, long long *ids, int *cports, size_t max)
{
	redisContext *c = cut_conn(port);
	redisReply *rep = redisCommand(c, "CLIENT LIST");
	size_t n = 0;
	char *save = NULL, *buf;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "CLIENT LIST on %d", port);
	buf = strdup(rep->str);
	cr_assert_not_null(buf);
	for (char *line = strtok_r(buf, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
		const char *name = strstr(line, " name=lockbroker-"), *addr = strstr(line, " addr=");
		const char *colon;
		long long id;
		if (!name || strstr(name, ":inbox") || !addr || sscanf(line, "id=%lld", &id) != 1)
			continue;
		colon = strchr(addr + 6, ' ');
		while (colon > addr && *colon != ':')
			colon--;
		if (!colon || *colon != ':')
			continue;
		ids[n] = id;
		cports[n++] = atoi(colon + 1);
	}
	free(buf);
	freeReplyObject(rep);
	redisFree(c);
	return n;
}

/* Bytes the kernel holds unread for the node at port on the connections
 * from the client ports cports (/proc/net/tcp's rx_queue of the node's
 * end): what the broker wrote that a sleeping node has not read. */
static inline long cut_unread(int port, const int *cports, size_t n)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	long total = 0;

	cr_assert_not_null(f, "cannot read /proc/net/tcp");
	while (fgets(line, sizeof(line), f)) {
		unsigned lport, rport;
		unsigned long tx, rx;
		if (sscanf(line, " %*d: %*8x:%x %*8x:%x %*x %lx:%lx", &lport, &rport, &tx, &rx) != 4 ||
		    (int)lport != port)
			continue;
		for (size_t k = 0; k < n; k++)
			if ((int)rport == cports[k])
				total += (long)rx;
	}
	fclose(f);
	return total;
}

/* Waits at least 150 ms and then (up to within_ms in all) until bytes of
 * a broker wait unread on each of the sleeping nodes: the broker's request,
 * however long a loaded machine makes it take (a fixed wait failed in CI).
 * Returns whether they did on every node. */
static inline bool cut_wait_written(const int *ports, int nports, int cports[][CUT_MAX_CONNS],
                                    const size_t *n, int within_ms)
{
	int64_t end = lb_now_ms() + within_ms;

	lb_sleep_ms(150);
	for (;;) {
		int seen = 0;
		for (int i = 0; i < nports; i++)
			seen += cut_unread(ports[i], cports[i], n[i]) > 0;
		if (seen == nports)
			return true;
		if (lb_now_ms() >= end)
			return false;
		lb_sleep_ms(2);
	}
}

/* Reads the node's MONITOR feed on mon up to the line of the marker (the
 * ECHO the killer wrote right behind its CLIENT KILLs; MONITOR does not
 * show admin commands such as CLIENT KILL itself) and frees mon. True
 * when an EVALSHA naming mark ran before it, i.e. before the kills. */
static inline bool cut_ran_before_kill(redisContext *mon, const char *marker, const char *mark)
{
	bool ran = false;

	for (;;) {
		redisReply *rep = NULL;
		if (redisGetReply(mon, (void **)&rep) != REDIS_OK || !rep) {
			cr_assert_fail("MONITOR ended before the marker: %s", mon->errstr);
			break;
		}
		if (rep->type == REDIS_REPLY_STATUS && rep->str) {
			if (strstr(rep->str, marker)) {
				freeReplyObject(rep);
				break;
			}
			if (strstr(rep->str, "\"EVALSHA\"") && strstr(rep->str, mark))
				ran = true;
		}
		freeReplyObject(rep);
	}
	redisFree(mon);
	return ran;
}

/* See the top of the file. mark (e.g. "{LOCK}", the lock's hash tag,
 * which every script of the lock names) picks the broker's scripts in the
 * nodes' MONITOR feed; returns on how many nodes such a script ran before
 * the kills (the cut then lost its reply; 0 there: the request had not
 * reached that node before its connections were killed). */
static inline int cut_replies(const int *ports, int nports, int sleep_ms, const char *mark,
                              void (*send)(void *), void *arg)
{
	long long ids[CUT_MAX_NODES][CUT_MAX_CONNS];
	int cports[CUT_MAX_NODES][CUT_MAX_CONNS];
	size_t n[CUT_MAX_NODES];
	redisContext *killer[CUT_MAX_NODES], *sleeper[CUT_MAX_NODES], *mon[CUT_MAX_NODES];
	char marker[64];
	int ran = 0;

	snprintf(marker, sizeof(marker), "cutreply-marker-%lld", (long long)lb_now_ms());
	cr_assert(nports > 0 && nports <= CUT_MAX_NODES);
	for (int i = 0; i < nports; i++) {
		redisReply *ok;
		n[i] = cut_broker_conns(ports[i], ids[i], cports[i], CUT_MAX_CONNS);
		cr_assert_gt(n[i], 0, "no broker connection in CLIENT LIST of %d", ports[i]);
		/* Connected before the sleep: a connection accepted after it
		 * would be read one loop turn too late, after the replies. */
		killer[i] = cut_conn(ports[i]);
		mon[i] = cut_conn(ports[i]);
		ok = redisCommand(mon[i], "MONITOR");
		cr_assert(ok && ok->type == REDIS_REPLY_STATUS, "MONITOR on %d", ports[i]);
		freeReplyObject(ok);
	}
	for (int i = 0; i < nports; i++) {
		sleeper[i] = cut_conn(ports[i]);
		cut_send(sleeper[i], "DEBUG SLEEP %.3f", sleep_ms / 1000.0);
	}
	lb_sleep_ms(50);
	send(arg);
	/* The broker wrote the request to the nodes; a little more for a
	 * node it writes to last (what the broker writes one node in a turn,
	 * it writes every node). */
	cut_wait_written(ports, nports, cports, n, sleep_ms - 150);
	lb_sleep_ms(20);
	/* Each node reads its sockets in the order they became readable. */
	for (int i = 0; i < nports; i++) {
		for (size_t k = 0; k < n[i]; k++)
			cut_send(killer[i], "CLIENT KILL ID %lld", ids[i][k]);
		cut_send(killer[i], "ECHO %s", marker);
	}
	for (int i = 0; i < nports; i++) {
		cut_wait(sleeper[i], 1);
		cut_wait(killer[i], (int)n[i] + 1);
		ran += cut_ran_before_kill(mon[i], marker, mark);
	}
	return ran;
}

/* The same for a request that makes the broker ask the nodes twice (the
 * release of a detached lease: its pointer's lookup, then the release
 * script): the first call is answered, the second's reply is cut. The
 * nodes sleep, send(arg) runs, the broker (broker_pid) is stopped
 * (SIGSTOP) once its first call waits in the nodes; the nodes wake and
 * answer it, into the stopped broker's socket; the nodes sleep again; the
 * broker continues, reads that answer and writes its second call to the
 * sleeping nodes; then its connections are killed as above. Returns on
 * how many nodes a script naming mark ran before the kills. */
static inline int cut_second_replies(const int *ports, int nports, int sleep_ms, const char *mark,
                                     pid_t broker_pid, void (*send)(void *), void *arg)
{
	long long ids[CUT_MAX_NODES][CUT_MAX_CONNS];
	int cports[CUT_MAX_NODES][CUT_MAX_CONNS];
	size_t n[CUT_MAX_NODES];
	redisContext *killer[CUT_MAX_NODES], *sleeper[CUT_MAX_NODES], *sleeper2[CUT_MAX_NODES],
	    *mon[CUT_MAX_NODES];
	char marker[64];
	int ran = 0;

	snprintf(marker, sizeof(marker), "cutreply-marker-%lld", (long long)lb_now_ms());
	cr_assert(nports > 0 && nports <= CUT_MAX_NODES && broker_pid > 0);
	for (int i = 0; i < nports; i++) {
		redisReply *ok;
		n[i] = cut_broker_conns(ports[i], ids[i], cports[i], CUT_MAX_CONNS);
		cr_assert_gt(n[i], 0, "no broker connection in CLIENT LIST of %d", ports[i]);
		killer[i] = cut_conn(ports[i]);
		sleeper2[i] = cut_conn(ports[i]);
		mon[i] = cut_conn(ports[i]);
		ok = redisCommand(mon[i], "MONITOR");
		cr_assert(ok && ok->type == REDIS_REPLY_STATUS, "MONITOR on %d", ports[i]);
		freeReplyObject(ok);
	}
	for (int i = 0; i < nports; i++) {
		sleeper[i] = cut_conn(ports[i]);
		cut_send(sleeper[i], "DEBUG SLEEP %.3f", sleep_ms / 1000.0);
	}
	lb_sleep_ms(50);
	send(arg);
	cut_wait_written(ports, nports, cports, n, sleep_ms - 150); /* its first call */
	lb_sleep_ms(20);
	cr_assert_eq(kill(broker_pid, SIGSTOP), 0);
	/* Each node woke (its sleeper's reply), ran the first call and wrote
	 * its answer to the stopped broker; then it sleeps again. */
	for (int i = 0; i < nports; i++) {
		cut_wait(sleeper[i], 1);
		cut_send(sleeper2[i], "DEBUG SLEEP %.3f", sleep_ms / 1000.0);
	}
	lb_sleep_ms(50);
	cr_assert_eq(kill(broker_pid, SIGCONT), 0);
	cut_wait_written(ports, nports, cports, n, sleep_ms - 150); /* its second call */
	lb_sleep_ms(20);
	for (int i = 0; i < nports; i++) {
		for (size_t k = 0; k < n[i]; k++)
			cut_send(killer[i], "CLIENT KILL ID %lld", ids[i][k]);
		cut_send(killer[i], "ECHO %s", marker);
	}
	for (int i = 0; i < nports; i++) {
		cut_wait(sleeper2[i], 1);
		cut_wait(killer[i], (int)n[i] + 1);
		ran += cut_ran_before_kill(mon[i], marker, mark);
	}
	return ran;
}

struct cut_req {
	lb_client *c;
	const char *line;
};

static inline void cut_send_line(void *arg)
{
	struct cut_req *q = arg;

	cr_assert(lb_send_line(q->c, q->line));
}

static inline json_t *cut_wait_id(lb_client *c, const char *id, int timeout_ms)
{
	json_t *j = json_string(id), *resp = lb_wait_response(c, j, timeout_ms);

	json_decref(j);
	cr_assert_not_null(resp, "no answer to %s within %d ms", id, timeout_ms);
	return resp;
}

/* ---- the cases: one body per request, shared by every store ------------- */

/* What a case works on: a broker's two clients (a holds, o is another
 * session), the lock, the nodes whose replies are cut (with how long they
 * sleep) and, for the stall, how to freeze and thaw them. */
typedef struct {
	lb_client *a, *o;
	const char *lock;
	int ports[CUT_MAX_NODES];
	int nports;
	int sleep_ms;
	void (*freeze)(void *);
	void (*thaw)(void *);
	void *arg;
	/* The broker's pid, for a cut of its second call (second below). */
	pid_t broker_pid;
	bool second;
} cut_case;

/* How long an answer may take: the broker reconnects, resends, checks. */
#define CUT_ANSWER_MS 20000

/* Nothing (no event: no `lost`) reaches the holder for ms. */
static inline void cut_no_event(const cut_case *k, int ms)
{
	json_t *ev = lb_next_event(k->a, ms);

	cr_assert_null(ev, "the holder heard an event: %s", lb_dump(ev));
}

/* A try of the lock from o, tried again while the broker answers
 * unavailable (it is reconnecting) for up to 10 s: the first other answer. */
static inline json_t *cut_other_try(const cut_case *k, int ttl_ms)
{
	int64_t end = lb_now_ms() + 10000;

	for (;;) {
		json_t *t = lb_try_acquire(k->o, k->lock, ttl_ms);
		if (!lb_is_err(t, "unavailable") || lb_now_ms() > end)
			return t;
		lb_sleep_ms(100);
	}
}

/* The lock stays held by a's lease (o's tries time out, inspect shows one
 * holder at count, a hears nothing) for ms. */
static inline void cut_expect_held(const cut_case *k, json_int_t count, int ms)
{
	int64_t end = lb_now_ms() + ms;

	do {
		json_t *t = cut_other_try(k, 1000), *in, *h;
		cr_assert(lb_is_err(t, "timeout"), "the lock was given to another session while held: %s",
		          lb_dump(t));
		in = lb_inspect(k->o, k->lock);
		cr_assert(lb_is_ok(in) && lb_nholders(in) == 1, "inspect: %s", lb_dump(in));
		h = json_array_get(lb_get(in, "holders"), 0);
		cr_assert_eq(lb_int(h, "count"), count, "the holder's count: %s", lb_dump(in));
		cut_no_event(k, 200);
	} while (lb_now_ms() < end);
}

/* The lock is free: o's try is granted within ms (the lease is then o's:
 * released at once). */
static inline void cut_expect_free(const cut_case *k, int ms)
{
	json_t *g = lb_acquire_within(k->o, k->lock, 30000, ms);

	cr_assert(lb_is_ok(g), "the lock is not free %d ms after it was released: %s", ms, lb_dump(g));
	cr_assert_eq(lb_release(k->o, lb_str(g, "lease")), 0);
}

/* A release of lease on a, answered. */
static inline json_t *cut_release(const cut_case *k, const char *lease)
{
	return lb_call_timeout(k->a, CUT_ANSWER_MS, "{s:s, s:s}", "op", "release", "lease", lease);
}

/* The lease is gone: a release of it answers not_held. */
static inline void cut_expect_not_held(const cut_case *k, const char *lease)
{
	json_t *rl = cut_release(k, lease);

	cr_assert(lb_is_err(rl, "not_held"), "a release of a released lease answered %s", lb_dump(rl));
}

/* a's request line (with "id": id) sent while the replies are cut, or,
 * when k->freeze is set, while the nodes are frozen for CUT_STALL_MS (past
 * the broker's 2 s command timeout); its answer. */
#define CUT_STALL_MS 3000
static inline json_t *cut_request(const cut_case *k, const char *line, const char *id)
{
	struct cut_req q = {k->a, line};
	char mark[600];
	int ran;

	if (k->freeze) {
		k->freeze(k->arg);
		cut_send_line(&q);
		lb_sleep_ms(CUT_STALL_MS);
		k->thaw(k->arg);
		return cut_wait_id(k->a, id, CUT_ANSWER_MS);
	}
	snprintf(mark, sizeof(mark), "{%s}", k->lock);
	if (k->second)
		ran = cut_second_replies(k->ports, k->nports, k->sleep_ms, mark, k->broker_pid, cut_send_line, &q);
	else
		ran = cut_replies(k->ports, k->nports, k->sleep_ms, mark, cut_send_line, &q);
	/* The case is a reply lost after the script ran, on every node cut. */
	cr_assert_eq(ran, k->nports, "the request ran before the kills on %d of the %d nodes cut "
	             "(the test's timing failed, not the broker)", ran, k->nports);
	return cut_wait_id(k->a, id, CUT_ANSWER_MS);
}

/* A grant of the lock to a, retried while unavailable. */
static inline json_t *cut_grant(const cut_case *k, int ttl_ms, bool watchdog)
{
	int64_t end = lb_now_ms() + 10000;

	for (;;) {
		json_t *g = lb_call(k->a, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", k->lock,
		                    "ttl_ms", ttl_ms, "wait_ms", 0, "watchdog", watchdog);
		if (lb_is_ok(g))
			return g;
		cr_assert(lb_is_err(g, "unavailable") && lb_now_ms() < end, "acquire: %s", lb_dump(g));
		lb_sleep_ms(100);
	}
}

/* A release (count 1 -> 0) whose reply was cut: ok, count 0 (never
 * unavailable), the lock free, a second release not_held, no event. */
static inline void cut_case_release(const cut_case *k)
{
	const char *lease = lb_str(cut_grant(k, 30000, true), "lease");
	char line[256];
	json_t *rl;

	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	rl = cut_request(k, line, "rl");
	cr_assert(lb_is_ok(rl), "a release that ran answered %s", lb_dump(rl));
	cr_assert_eq(lb_int(rl, "count"), 0, "%s", lb_dump(rl));
	cut_no_event(k, 300);
	cut_expect_free(k, 5000);
	cut_expect_not_held(k, lease);
	cut_no_event(k, 300);
}

/* A release of one level of two whose reply was cut: ok, count 1 (it
 * counts once), the lock still held at count 1; one more release frees
 * it; then not_held. */
static inline void cut_case_release_level(const cut_case *k)
{
	const char *lease = lb_str(cut_grant(k, 30000, true), "lease");
	json_t *g2 = lb_try_acquire(k->a, k->lock, 30000), *rl;
	char line[256];

	cr_assert(lb_is_ok(g2) && lb_int(g2, "count") == 2, "re-entry: %s", lb_dump(g2));
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	rl = cut_request(k, line, "rl");
	cr_assert(lb_is_ok(rl), "a release that ran answered %s", lb_dump(rl));
	cr_assert_eq(lb_int(rl, "count"), 1, "released twice: %s", lb_dump(rl));
	cut_expect_held(k, 1, 1500);
	rl = cut_release(k, lease);
	cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 0, "the last level: %s", lb_dump(rl));
	cut_expect_free(k, 5000);
	cut_expect_not_held(k, lease);
	cut_no_event(k, 300);
}

/* An extend whose reply was cut: ok with the new TTL, and the lease (no
 * watchdog, 6 s: longer than a stall) lives past its old end. */
static inline void cut_case_extend(const cut_case *k)
{
	int64_t t0 = lb_now_ms();
	json_t *g = cut_grant(k, 6000, false), *e, *rl;
	const char *lease = lb_str(g, "lease");
	char line[256];
	int64_t left;

	snprintf(line, sizeof(line), "{\"id\":\"ex\",\"op\":\"extend\",\"lease\":\"%s\",\"ttl_ms\":15000}",
	         lease);
	e = cut_request(k, line, "ex");
	cr_assert(lb_is_ok(e), "an extend that ran answered %s", lb_dump(e));
	cr_assert_gt(lb_int(e, "ttl_ms"), 10000, "%s", lb_dump(e));
	/* Past the old end (6 s after the grant) by 1.5 s, still held. */
	left = t0 + 6000 + 1500 - lb_now_ms();
	cut_expect_held(k, 1, left > 1500 ? (int)left : 1500);
	rl = cut_release(k, lease);
	cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 0, "release after the extend: %s", lb_dump(rl));
	cut_expect_free(k, 5000);
	cut_expect_not_held(k, lease);
	cut_no_event(k, 300);
}

/* A re-entry whose reply was cut: ok, the same lease at count 2, and it
 * counts once: two releases free the lock. */
static inline void cut_case_reentry(const cut_case *k)
{
	const char *lease = lb_str(cut_grant(k, 30000, true), "lease");
	char line[600];
	json_t *g, *rl;

	snprintf(line, sizeof(line), "{\"id\":\"re\",\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0,"
	         "\"ttl_ms\":30000}", k->lock);
	g = cut_request(k, line, "re");
	cr_assert(lb_is_ok(g), "a re-entry that ran answered %s", lb_dump(g));
	cr_assert_str_eq(lb_str(g, "lease"), lease);
	cr_assert_eq(lb_int(g, "count"), 2, "%s", lb_dump(g));
	cut_expect_held(k, 2, 1000);
	rl = cut_release(k, lease);
	cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 1, "first release: %s", lb_dump(rl));
	cut_expect_held(k, 1, 1000);
	rl = cut_release(k, lease);
	cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 0, "second release: %s", lb_dump(rl));
	cut_expect_free(k, 5000);
	cut_expect_not_held(k, lease);
	cut_no_event(k, 300);
}

/* A try (wait_ms 0) whose reply was cut: ok, and then a holds the lock; or
 * timeout, and then the lock is free at once (whatever it took was given
 * back: nothing held for nobody). */
static inline void cut_case_try(const cut_case *k)
{
	char line[600];
	json_t *t;

	snprintf(line, sizeof(line), "{\"id\":\"tr\",\"op\":\"acquire\",\"lock\":\"%s\",\"wait_ms\":0,"
	         "\"ttl_ms\":30000}", k->lock);
	t = cut_request(k, line, "tr");
	fprintf(stderr, "cutreply: %s: the try whose reply was %s answered %s\n", k->lock,
	        k->freeze ? "stalled" : "cut", lb_dump(t));
	if (lb_is_ok(t)) {
		const char *lease = lb_str(t, "lease");
		json_t *rl;
		cr_assert_eq(lb_int(t, "count"), 1, "%s", lb_dump(t));
		cut_expect_held(k, 1, 3000);
		rl = cut_release(k, lease);
		cr_assert(lb_is_ok(rl) && lb_int(rl, "count") == 0, "release of the try's grant: %s",
		          lb_dump(rl));
		cut_expect_free(k, 5000);
		cut_expect_not_held(k, lease);
	} else {
		json_t *ls = lb_call(k->a, "{s:s}", "op", "leases");
		/* The lock's TTL is 30 s: a grant left behind would keep it. */
		json_t *g = lb_acquire_within(k->o, k->lock, 30000, 3000);
		bool is_free = lb_is_ok(g);
		if (is_free)
			cr_assert_eq(lb_release(k->o, lb_str(g, "lease")), 0);
		cr_assert(lb_is_err(t, "timeout"),
		          "a try whose reply was lost answered %s (the lock was then %s %s)", lb_dump(t),
		          is_free ? "free:" : "not free within 3 s:", lb_dump(g));
		cr_assert(is_free, "a try answered timeout, but the lock was not free within 3 s: %s",
		          lb_dump(g));
		cr_assert_eq(json_array_size(lb_get(ls, "leases")), 0, "%s", lb_dump(ls));
	}
	cut_no_event(k, 300);
}

/* A release in flight while the nodes are frozen past the broker's 2 s
 * command timeout (3 s), then thawed: ok, count 0, the lock free. */
static inline void cut_case_stall(const cut_case *k)
{
	cr_assert_not_null(k->freeze);
	cut_case_release(k);
}

/* A detached lease (in no broker's table: its release looks up the lock
 * by the token's pointer first, then runs the release script) released
 * (count 1 -> 0) with the release script's reply cut: ok, count 0, the
 * lock free, then not_held. With pointer_ok, the grant is retried until
 * pointer_ok(token) says a plain cut of k's nodes reaches the release
 * script and not the lookup (Redis Cluster: the pointer lives on another
 * master than the lock); without, the lookup is answered and the release
 * script's reply cut (cut_second_replies: k->broker_pid). */
static inline void cut_case_detached_release(const cut_case *k, bool (*pointer_ok)(const char *token))
{
	const char *lease = NULL;
	char line[256];
	json_t *rl;

	for (int tries = 0; tries < 50 && !lease; tries++) {
		json_t *g = lb_call(k->a, "{s:s, s:s, s:i, s:i, s:b}", "op", "acquire", "lock", k->lock,
		                    "ttl_ms", 30000, "wait_ms", 0, "detach", 1);
		cr_assert(lb_is_ok(g), "detached acquire: %s", lb_dump(g));
		if (!pointer_ok || pointer_ok(lb_str(g, "lease")))
			lease = lb_str(g, "lease");
		else
			cr_assert_eq(lb_release(k->a, lb_str(g, "lease")), 0);
	}
	cr_assert_not_null(lease, "no token whose pointer suits the cut in 50 grants");
	snprintf(line, sizeof(line), "{\"id\":\"rl\",\"op\":\"release\",\"lease\":\"%s\"}", lease);
	if (!pointer_ok && !k->freeze) {
		cut_case k2 = *k;
		k2.second = true;
		rl = cut_request(&k2, line, "rl");
	} else {
		rl = cut_request(k, line, "rl");
	}
	if (!lb_is_ok(rl)) {
		/* Say what the release did, whatever it answered. */
		json_t *g = lb_acquire_within(k->o, k->lock, 30000, 3000);
		cr_assert_fail("the release of a detached lease that ran answered %s (the lock was then %s %s)",
		               lb_dump(rl), lb_is_ok(g) ? "free:" : "not free within 3 s:", lb_dump(g));
	}
	cr_assert_eq(lb_int(rl, "count"), 0, "%s", lb_dump(rl));
	cut_expect_free(k, 5000);
	cut_expect_not_held(k, lease);
	cut_no_event(k, 300);
}

#endif
