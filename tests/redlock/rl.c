/*
 * rl.c - see rl.h. Runs on the test's own thread only (cr_assert).
 */
#include "tests/redlock/rl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#define URL_TCP "redis://"

void rl_masters_start(lb_redis **m, int n)
{
	cr_assert(n > 0 && n <= RL_MAX, "%d masters", n);
	for (int i = 0; i < n; i++) {
		m[i] = lb_redis_start(true);
		cr_assert(strncmp(lb_redis_url(m[i]), URL_TCP, strlen(URL_TCP)) == 0, "%s",
		          lb_redis_url(m[i]));
	}
}

const char *rl_addr(const lb_redis *r)
{
	const char *url = lb_redis_url(r);

	cr_assert(strncmp(url, URL_TCP, strlen(URL_TCP)) == 0, "not a TCP master: %s", url);
	return url + strlen(URL_TCP);
}

static int port_of(const lb_redis *r)
{
	const char *colon = strrchr(rl_addr(r), ':');

	cr_assert_not_null(colon);
	return atoi(colon + 1);
}

json_t *rl_master_entry(json_t *stats, const lb_redis *r)
{
	json_t *ms = lb_get(stats, "redis_masters"), *e;
	size_t k;

	cr_assert(json_is_array(ms), "no redis_masters in %s", lb_dump(stats));
	json_array_foreach(ms, k, e) {
		const char *a = json_string_value(json_object_get(e, "addr"));
		if (a && strcmp(a, rl_addr(r)) == 0)
			return e;
	}
	cr_assert_fail("master %s not in redis_masters: %s", rl_addr(r), lb_dump(stats));
	return NULL;
}

void rl_wait_master(lb_client *c, const lb_redis *r, bool up, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	json_t *st;

	for (;;) {
		st = lb_stats(c);
		if (lb_bool(rl_master_entry(st, r), "up") == up)
			return;
		if (lb_now_ms() > deadline)
			break;
		lb_sleep_ms(25);
	}
	cr_assert_fail("master %s not shown up:%s within %d ms: %s", rl_addr(r),
	               up ? "true" : "false", timeout_ms, lb_dump(st));
}

const char *rl_header(lb_redis *r, const char *name, const char *field)
{
	static char val[256];
	redisReply *rep = lb_redis_cmd(r, "HGET lb:{%s} %s", name, field);

	if (rep->type == REDIS_REPLY_NIL)
		return NULL;
	cr_assert_eq(rep->type, REDIS_REPLY_STRING, "HGET lb:{%s} %s on %s: type %d", name, field,
	             rl_addr(r), rep->type);
	snprintf(val, sizeof(val), "%s", rep->str);
	return val;
}

void rl_wait_no_holder(lb_redis **m, int n, const char *name, int timeout_ms)
{
	int64_t deadline = lb_now_ms() + timeout_ms;
	int left = -1;

	do {
		left = -1;
		for (int i = 0; i < n && left < 0; i++)
			if (lb_redis_pid(m[i]) > 0 && rl_header(m[i], name, "o"))
				left = i;
		if (left < 0)
			return;
		lb_sleep_ms(20);
	} while (lb_now_ms() < deadline);
	cr_assert_fail("lb:{%s} still has a holder ('o') on master %d (%s) after %d ms", name, left,
	               rl_addr(m[left]), timeout_ms);
}

/* ---- counting commands -------------------------------------------------- */

static redisContext *conn(int port)
{
	struct timeval tv = {.tv_sec = 2};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

	cr_assert(c && !c->err, "cannot connect to 127.0.0.1:%d: %s", port,
	          c ? c->errstr : "out of memory");
	redisSetTimeout(c, (struct timeval){.tv_sec = 10});
	return c;
}

static void mark(int port, const char *marker)
{
	redisContext *c = conn(port);
	redisReply *rep = redisCommand(c, "ECHO %s", marker);

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "ECHO %s: %s", marker, c->errstr);
	freeReplyObject(rep);
	redisFree(c);
}

void rl_monitor_start(rl_monitor *m, lb_redis *r, const char *lock)
{
	redisReply *rep;

	memset(m, 0, sizeof(*m));
	m->port = port_of(r);
	m->lock = lock;
	m->mon = conn(m->port);
	rep = redisCommand(m->mon, "MONITOR");
	cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MONITOR: %s", m->mon->errstr);
	freeReplyObject(rep);
	mark(m->port, "rl-mark-start");
}

void rl_monitor_stop(rl_monitor *m)
{
	char braced[600];
	bool counting = false;

	snprintf(braced, sizeof(braced), "{%s}", m->lock);
	mark(m->port, "rl-mark-end");
	for (;;) {
		redisReply *rep = NULL;
		cr_assert_eq(redisGetReply(m->mon, (void **)&rep), REDIS_OK, "monitor: %s",
		             m->mon->errstr);
		cr_assert(rep->type == REDIS_REPLY_STATUS, "monitor reply type %d", rep->type);
		const char *line = rep->str;
		bool end = strstr(line, "\"rl-mark-end\"") != NULL;
		if (strstr(line, "\"rl-mark-start\"")) {
			counting = true;
		} else if (counting && !end && !strstr(line, " lua]")) {
			bool es = strcasestr(line, "\"evalsha\"") != NULL;
			m->top++;
			m->evalsha += es;
			if (es && strstr(line, braced)) {
				m->lock_evalsha++;
			} else if (es && strstr(line, ":canary\"")) {
				m->canary++;
			} else {
				size_t used = strlen(m->sample);
				if (used + 130 < sizeof(m->sample))
					snprintf(m->sample + used, sizeof(m->sample) - used, "%.120s\n",
					         line);
			}
		}
		freeReplyObject(rep);
		if (end)
			break;
	}
	redisFree(m->mon);
	m->mon = NULL;
}

long long rl_evalsha_calls(lb_redis *r)
{
	redisReply *info = lb_redis_cmd(r, "INFO commandstats");

	return lb_info_number(info, "cmdstat_evalsha:calls=");
}

const char *rl_status_text(int status)
{
	static char buf[64];

	if (WIFEXITED(status))
		snprintf(buf, sizeof(buf), "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, sizeof(buf), "signal %d", WTERMSIG(status));
	else
		snprintf(buf, sizeof(buf), "status 0x%x", status);
	return buf;
}
