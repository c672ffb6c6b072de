/*
 * test_fake.c - the client against a fake broker in a thread of the test,
 * for what a real broker does not do on demand: answers cut into single
 * bytes with events and blank lines between them, a broker that goes mute
 * (request_timeout_ms drops the connection and loses its leases), one that
 * sends garbage, one that refuses hello with another error, one that
 * answers every request with the error code it is told (every code of
 * protocol/PROTOCOL.md, bad_json, line_too_long and internal included),
 * one that closes the connection while an acquire waits, and one that
 * accepts and closes at once (the reconnect backoff, counted in accepts).
 * Needs no broker of the suite.
 */
#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum { F_SPLIT, F_MUTE, F_GARBAGE, F_HELLO_REFUSED, F_ERRORS, F_CLOSE_WHILE_WAITING, F_FLAKY } fake_mode_t;

typedef struct fake {
	fake_mode_t mode;
	int lfd, port;
	pthread_t t;
	pthread_mutex_t mu;
	char code[32]; /* F_ERRORS: the code every request is answered with ("": none) */
	int grants;    /* F_CLOSE_WHILE_WAITING: tokens handed out */
	int accepts;   /* F_FLAKY: connections accepted */
	bool serve;    /* F_FLAKY: serve the next connection (else close it at once) */
} fake_t;

static void send_str(int fd, const char *s, bool bytewise)
{
	size_t n = strlen(s);

	if (!bytewise) {
		(void)!send(fd, s, n, MSG_NOSIGNAL);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		(void)!send(fd, s + i, 1, MSG_NOSIGNAL);
		if (i % 7 == 0)
			sleep_ms(1);
	}
}

/* F_ERRORS: the error f->code with a message naming it (quotes and a
 * non-ASCII character escaped), or a plain success when f->code is "". */
static void answer_with_code(fake_t *f, int fd, const char *line, long id)
{
	char code[32], out[1024];

	pthread_mutex_lock(&f->mu);
	snprintf(code, sizeof(code), "%s", f->code);
	pthread_mutex_unlock(&f->mu);
	if (code[0])
		snprintf(out, sizeof(out),
		         "{\"id\":%ld,\"ok\":false,\"error\":{\"code\":\"%s\",\"message\":\"the fake says %s: "
		         "\\\"q\\\" \\u00e9\"}}\n",
		         id, code, code);
	else if (strstr(line, "\"op\":\"acquire\""))
		snprintf(out, sizeof(out),
		         "{\"id\":%ld,\"ok\":true,\"lease\":\"e1\",\"lock\":\"x\",\"mode\":\"exclusive\",\"fence\":1,"
		         "\"ttl_ms\":30000,\"count\":1}\n",
		         id);
	else
		snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"count\":0,\"redis\":\"up\"}\n", id);
	send_str(fd, out, false);
}

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	char line[4096], out[1024];
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	if (fake_read_line(fd, line, sizeof(line)) < 0)
		goto done;
	if (f->mode == F_HELLO_REFUSED) {
		snprintf(out, sizeof(out),
		         "{\"id\":%ld,\"ok\":false,\"error\":{\"code\":\"limit_exceeded\",\"message\":\"too many\"}}\n",
		         fake_request_id(line));
		send_str(fd, out, false);
		goto done;
	}
	snprintf(out, sizeof(out),
	         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/1\",\"proto\":1,\"session\":\"f1\",\"broker\":\"fk\","
	         "\"limits\":{\"max_line\":4096}}\n",
	         fake_request_id(line));
	send_str(fd, out, f->mode == F_SPLIT);
	while (fake_read_line(fd, line, sizeof(line)) == 0) {
		long id = fake_request_id(line);
		if (f->mode == F_ERRORS) {
			answer_with_code(f, fd, line, id);
			continue;
		}
		if (f->mode == F_CLOSE_WHILE_WAITING) {
			if (strstr(line, "\"lock\":\"wait\"")) {
				sleep_ms(200); /* it waits; then the broker goes away */
				send_str(fd, "{\"event\":\"closing\",\"reason\":\"shutdown\"}\n", false);
				break;
			}
			pthread_mutex_lock(&f->mu);
			int k = ++f->grants;
			pthread_mutex_unlock(&f->mu);
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"lease\":\"t%d\",\"lock\":\"l%d\",\"mode\":\"exclusive\","
			         "\"fence\":%d,\"ttl_ms\":30000,\"count\":1}\n",
			         id, k, k, k);
			send_str(fd, out, false);
			continue;
		}
		if (f->mode == F_MUTE && strstr(line, "\"op\":\"ping\""))
			continue; /* never answers a ping */
		if (f->mode == F_GARBAGE && strstr(line, "\"op\":\"ping\"")) {
			send_str(fd, "this is not json\n", false);
			continue;
		}
		if (strstr(line, "\"op\":\"acquire\"")) {
			snprintf(out, sizeof(out),
			         "\r\n  \n{\"event\":\"half_closed\",\"pending\":0}\n"
			         "{\"id\":%ld,\"ok\":true,\"lease\":\"00ff\",\"lock\":\"fake\",\"mode\":\"exclusive\","
			         "\"fence\":7,\"ttl_ms\":1000,\"count\":1,\"new_field\":[1,{\"x\":null}]}\r\n",
			         id);
		} else if (strstr(line, "\"op\":\"release\"")) {
			snprintf(out, sizeof(out),
			         "{\"event\":\"lost\",\"lease\":\"00ff\",\"lock\":\"fake\",\"reason\":\"brand_new\"}\n"
			         "{\"id\":%ld,\"ok\":false,\"error\":{\"code\":\"not_held\",\"message\":\"gone\"}}\n",
			         id);
		} else {
			snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n", id);
		}
		send_str(fd, out, f->mode == F_SPLIT);
	}
done:
	close(fd);
	return NULL;
}

/* F_FLAKY: accepts for ever; a connection is served (hello, then ok to
 * everything) while f->serve, else closed at once. "drop" closes the
 * served connection and turns serving off. */
static void *flaky_main(void *arg)
{
	fake_t *f = arg;
	char line[4096], out[512];

	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		bool serve;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* fake_stop shut the listener down */
		}
		pthread_mutex_lock(&f->mu);
		f->accepts++;
		serve = f->serve;
		pthread_mutex_unlock(&f->mu);
		while (serve && fake_read_line(fd, line, sizeof(line)) == 0) {
			if (strstr(line, "\"op\":\"drop\"")) {
				pthread_mutex_lock(&f->mu);
				f->serve = false;
				pthread_mutex_unlock(&f->mu);
				break;
			}
			if (strstr(line, "\"op\":\"hello\""))
				snprintf(out, sizeof(out),
				         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/1\",\"proto\":1,\"session\":\"f%d\","
				         "\"broker\":\"fk\",\"limits\":{\"max_line\":4096}}\n",
				         fake_request_id(line), f->accepts);
			else
				snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n", fake_request_id(line));
			send_str(fd, out, false);
		}
		close(fd);
	}
}

static void fake_start(fake_t *f, fake_mode_t mode)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->mode = mode;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &len);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->t, NULL, mode == F_FLAKY ? flaky_main : fake_main, f);
}

static void fake_stop(fake_t *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->t, NULL);
	close(f->lfd);
	pthread_mutex_destroy(&f->mu);
}

static void fake_set_code(fake_t *f, const char *code)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->code, sizeof(f->code), "%s", code);
	pthread_mutex_unlock(&f->mu);
}

static void fake_set_serve(fake_t *f, bool serve)
{
	pthread_mutex_lock(&f->mu);
	f->serve = serve;
	pthread_mutex_unlock(&f->mu);
}

/* Connections accepted so far, once the accepts the client's attempts
 * queued have been taken (an attempt may give up before its accept). */
static int fake_accepts(fake_t *f)
{
	int n;

	sleep_ms(200);
	pthread_mutex_lock(&f->mu);
	n = f->accepts;
	pthread_mutex_unlock(&f->mu);
	return n;
}

static char *url_of(const fake_t *f, char *buf, size_t len)
{
	snprintf(buf, len, "tcp://127.0.0.1:%d", f->port);
	return buf;
}

Test(fake, answers_cut_into_bytes_and_unknown_things, .timeout = 10)
{
	fake_t f;
	char url[64];
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec};
	lbc_client_t *c;
	lbc_lease_t *l;
	lbc_server_info_t info;
	lbc_error_t err;

	fake_start(&f, F_SPLIT);
	c = must_connect(url_of(&f, url, sizeof(url)), &o);
	cr_assert_eq(lbc_server_info(c, &info, NULL), LBC_OK);
	cr_assert_str_eq(info.server, "fake/1");
	cr_assert_eq(info.max_line, 4096);
	l = must_acquire(c, "fake", NULL);
	cr_assert_eq(lbc_lease_fence(l), 7);
	cr_assert_str_eq(lbc_lease_token(l), "00ff");
	cr_assert_eq(recorder_get(&rec).other, 1, "half_closed: an event this client does not know");
	/* the broker reports a loss with a reason from the future, then not_held */
	cr_assert_eq(lbc_release(c, l, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_OTHER);
	cr_assert_str_eq(recorder_get(&rec).last_lost_reason, "brand_new");
	/* a request over the broker's max_line (4096 here) is refused */
	char fields[6000];
	snprintf(fields, sizeof(fields), "{\"pad\":\"%05000d\"}", 0);
	cr_assert_eq(lbc_request(c, "ping", fields, NULL, &err), LBC_LINE_TOO_LONG);
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
	lbc_close(c);
	fake_stop(&f);
}

Test(fake, a_mute_broker_is_dropped, .timeout = 10)
{
	fake_t f;
	char url[64];
	lbc_options_t o = {.request_timeout_ms = 300, .connect_timeout_ms = 200};
	lbc_client_t *c;
	lbc_lease_t *l;
	lbc_error_t err;
	int64_t t0;

	fake_start(&f, F_MUTE);
	c = must_connect(url_of(&f, url, sizeof(url)), &o);
	l = must_acquire(c, "fake", NULL);
	t0 = now_ms();
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_DISCONNECTED);
	cr_assert_geq(now_ms() - t0, 250);
	cr_assert_not_null(strstr(err.message, "no answer"), "%s", err.message);
	cr_assert_eq(lbc_lease_lost_reason(l), LBC_LOST_DISCONNECTED, "the session's state is unknown: lost");
	cr_assert_eq(lbc_poll(c, 0, NULL), 1);
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_LOST);
	lbc_close(c);
	fake_stop(&f);
}

Test(fake, garbage_ends_the_session, .timeout = 10)
{
	fake_t f;
	char url[64];
	lbc_client_t *c;
	lbc_error_t err;

	fake_start(&f, F_GARBAGE);
	c = must_connect(url_of(&f, url, sizeof(url)), NULL);
	/* bad data is LBC_IO (not the protocol), and it ends the session */
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_IO);
	cr_assert_str_eq(err.code, "io");
	cr_assert_not_null(strstr(err.message, "not a JSON object"), "%s", err.message);
	cr_assert_eq(lbc_fd(c), -1);
	lbc_close(c);
	fake_stop(&f);
}

Test(fake, hello_refused, .timeout = 10)
{
	fake_t f;
	char url[64];
	lbc_error_t err;

	fake_start(&f, F_HELLO_REFUSED);
	cr_assert_null(lbc_connect(url_of(&f, url, sizeof(url)), NULL, &err));
	cr_assert_eq(err.status, LBC_LIMIT_EXCEEDED);
	cr_assert(err.from_broker);
	cr_assert_str_eq(err.message, "too many");
	fake_stop(&f);
}

/* ---- every error code over the connection ------------------------------------------ */

static void expect_code(lbc_status got, const lbc_error_t *err, const char *code, const char *what)
{
	lbc_status want = lbc_status_from_code(code);
	char msg[128];

	snprintf(msg, sizeof(msg), "the fake says %s: \"q\" \xc3\xa9", code);
	cr_assert_eq(got, want, "%s answered %s: got %s (%s: %s)", what, code, lbc_status_code(got), err->code,
	             err->message);
	cr_assert_eq(err->status, want, "%s, %s", what, code);
	cr_assert_str_eq(err->code, code, "%s: the wire code as sent", what);
	cr_assert(err->from_broker, "%s, %s: from_broker", what, code);
	cr_assert_str_eq(err->message, msg, "%s, %s: the broker's message", what, code);
	cr_assert_eq(err->sys_errno, 0);
	cr_assert_eq(err->lost_reason, LBC_LOST_NONE);
}

Test(fake, every_error_code_reaches_the_caller, .timeout = 20)
{
	/* a real broker sends bad_json and line_too_long with "id": null and
	 * internal only for a bug: here each travels as an answer to a request,
	 * through every call, with every other code of PROTOCOL.md and one from
	 * a newer broker */
	char codes[65][32], why[200] = "", url[64];
	int n = protocol_error_codes(codes, 64, why, sizeof(why));
	fake_t f;
	lbc_client_t *c;
	lbc_error_t err;
	int fd;

	cr_assert_geq(n, 10, "PROTOCOL.md's error codes: %s", why);
	snprintf(codes[n++], sizeof(codes[0]), "brand_new_code");
	fake_start(&f, F_ERRORS);
	c = must_connect(url_of(&f, url, sizeof(url)), NULL);
	fd = lbc_fd(c);
	for (int i = 0; i < n; i++) {
		const char *code = codes[i];
		lbc_lease_t *held, *l = NULL;
		lbc_lock_info_t *info = NULL;
		lbc_lease_info_t *v = NULL;
		size_t nv = 0;
		lbc_stats_t stats;
		char *answer = NULL;
		lbc_status st;

		if (i < n - 1)
			cr_assert_neq(lbc_status_from_code(code), LBC_UNKNOWN_CODE, "%s has no status", code);
		else
			cr_assert_eq(lbc_status_from_code(code), LBC_UNKNOWN_CODE);
		fake_set_code(&f, "");
		held = must_acquire(c, "x", NULL);
		fake_set_code(&f, code);

		expect_code(lbc_request(c, "ping", NULL, &answer, &err), &err, code, "lbc_request");
		cr_assert_not_null(answer, "the answer line comes with an error too");
		cr_assert_not_null(strstr(answer, code), "%s", answer);
		free(answer);
		expect_code(lbc_acquire(c, "x", &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &l, &err), &err, code,
		            "lbc_acquire");
		cr_assert_null(l);
		expect_code(lbc_ping(c, NULL, &err), &err, code, "lbc_ping");
		expect_code(lbc_inspect(c, "x", &info, &err), &err, code, "lbc_inspect");
		cr_assert_null(info);
		expect_code(lbc_leases(c, &v, &nv, &err), &err, code, "lbc_leases");
		cr_assert_null(v);
		expect_code(lbc_stats(c, &stats, &err), &err, code, "lbc_stats");
		expect_code(lbc_release_token(c, "e1", NULL, &err), &err, code, "lbc_release_token");
		expect_code(lbc_extend_token(c, "e1", 1000, NULL, &err), &err, code, "lbc_extend_token");
		/* by handle: not_held means lost; any other code is the broker's error */
		st = lbc_extend(c, held, 1000, NULL, &err);
		if (strcmp(code, "not_held") == 0) {
			cr_assert_eq(st, LBC_LOST);
			cr_assert_eq(err.lost_reason, LBC_LOST_NOT_HELD);
			cr_assert_eq(lbc_release(c, held, NULL, &err), LBC_LOST);
			cr_assert_not(err.from_broker, "a lost token is not sent again");
			cr_assert_eq(lbc_poll(c, 0, NULL), 1);
		} else {
			expect_code(st, &err, code, "lbc_extend");
			cr_assert_not(lbc_lease_lost(held), "%s does not lose the lease", code);
			expect_code(lbc_release(c, held, NULL, &err), &err, code, "lbc_release");
		}
		cr_assert_eq(lbc_fd(c), fd, "an error answer (%s) does not end the session", code);
	}
	fake_set_code(&f, "");
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
	cr_assert_eq(lbc_poll(c, 0, NULL), 0);
	lbc_close(c);
	fake_stop(&f);
}

/* ---- the broker closes the connection while an acquire waits ------------------------- */

Test(fake, the_broker_closes_while_an_acquire_waits, .timeout = 15)
{
	fake_t f;
	char url[64];
	recorder_t rec = {0};
	lbc_options_t o = {.on_event = record_event, .event_arg = &rec};
	lbc_client_t *c;
	lbc_lease_t *a, *b, *d, *l = NULL;
	lbc_lost_reason ra, rb;
	bool dlost;
	lbc_error_t err;
	lbc_status st;

	fake_start(&f, F_CLOSE_WHILE_WAITING);
	c = must_connect(url_of(&f, url, sizeof(url)), &o);
	a = must_acquire(c, "a", NULL);
	b = must_acquire(c, "b", &(lbc_acquire_opts_t){.mode = LBC_SHARED});
	d = must_acquire(c, "d", &(lbc_acquire_opts_t){.detach = true});
	/* never answered: the fake says closing and closes the connection */
	st = lbc_acquire(c, "wait", NULL, &l, &err);
	ra = lbc_lease_lost_reason(a);
	rb = lbc_lease_lost_reason(b);
	dlost = lbc_lease_lost(d);
	cr_assert_eq(st, LBC_DISCONNECTED, "got %s: %s", lbc_status_code(st), err.message);
	cr_assert_not(err.from_broker);
	cr_assert_not_null(strstr(err.message, "closed"), "%s", err.message);
	cr_assert_null(l);
	/* lost before the pending request failed: marked by the time it returned */
	cr_assert_eq(ra, LBC_LOST_DISCONNECTED, "%s", lbc_lost_reason_name(ra));
	cr_assert_eq(rb, LBC_LOST_DISCONNECTED, "%s", lbc_lost_reason_name(rb));
	cr_assert_not(dlost, "a detached lease outlives its session");
	recorder_t r = recorder_get(&rec);
	cr_assert_eq(r.closing, 1);
	cr_assert_eq(r.disconnected, 1);
	cr_assert_eq(lbc_poll(c, 0, NULL), 2);
	cr_assert_eq(lbc_fd(c), -1);
	cr_assert_eq(lbc_release(c, a, NULL, &err), LBC_LOST);
	cr_assert_eq(err.lost_reason, LBC_LOST_DISCONNECTED);
	cr_assert_eq(lbc_release(c, b, NULL, NULL), LBC_LOST);
	cr_assert_eq(lbc_lease_check(d, NULL), LBC_OK);
	lbc_lease_free(d); /* its token lives on in the broker */
	lbc_close(c);
	fake_stop(&f);
}

/* ---- reconnect backoff --------------------------------------------------------------- */

Test(fake, reconnect_backoff, .timeout = 30)
{
	/* README: lbc_connect makes one attempt; afterwards the next call that
	 * needs a session connects again at once after a drop, then with
	 * backoff, 50 ms doubling to 2 s, within connect_timeout_ms */
	fake_t f;
	char url[64];
	lbc_options_t o = {.connect_timeout_ms = 800};
	lbc_client_t *c;
	lbc_error_t err;
	int base, n, calls = 0;
	int64_t t0;

	fake_start(&f, F_FLAKY);
	url_of(&f, url, sizeof(url));
	cr_assert_null(lbc_connect(url, &o, &err));
	cr_assert_eq(err.status, LBC_DISCONNECTED, "%s: %s", err.code, err.message);
	cr_assert_eq(fake_accepts(&f), 1, "lbc_connect makes one attempt");

	fake_set_serve(&f, true);
	c = must_connect(url, &o);
	cr_assert_eq(lbc_ping(c, NULL, NULL), LBC_OK);
	/* the fake drops the session, then closes every connection at once */
	cr_assert_eq(lbc_request(c, "drop", NULL, NULL, &err), LBC_DISCONNECTED);
	base = fake_accepts(&f);
	t0 = now_ms();
	while (now_ms() - t0 < 1500) {
		cr_assert_eq(lbc_ping(c, NULL, &err), LBC_DISCONNECTED, "%s: %s", err.code, err.message);
		calls++;
	}
	n = fake_accepts(&f) - base;
	cr_assert_geq(n, 2, "%d connection attempts in %d calls: at once, then retries", n, calls);
	cr_assert_lt(n, 15, "%d connection attempts in %d calls over 1.5 s: no backoff", n, calls);

	/* it serves again: a call connects (after the backoff, within its
	 * connect_timeout_ms) */
	fake_set_serve(&f, true);
	base = fake_accepts(&f);
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_OK, "%s: %s", err.code, err.message);
	cr_assert_eq(fake_accepts(&f) - base, 1);

	/* dropped after a successful connect: the next call tries at once and
	 * the backoff starts again at 50 ms: within 800 ms that is attempts at
	 * about 0, 50, 150, 350 and 750 ms (not one, as a backoff left at 2 s
	 * would allow) */
	cr_assert_eq(lbc_request(c, "drop", NULL, NULL, &err), LBC_DISCONNECTED);
	base = fake_accepts(&f);
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_DISCONNECTED);
	n = fake_accepts(&f) - base;
	cr_assert_geq(n, 3, "%d attempts within connect_timeout_ms after a drop: the backoff did not start over", n);
	cr_assert_lt(n, 15, "%d attempts within connect_timeout_ms: no backoff", n);
	lbc_close(c);
	fake_stop(&f);
}
