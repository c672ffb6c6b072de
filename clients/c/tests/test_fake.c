/*
 * test_fake.c - the client against a fake broker in a thread of the test,
 * for what a real broker does not do on demand: answers cut into single
 * bytes with events and blank lines between them, a broker that goes mute
 * (request_timeout_ms drops the connection and loses its leases), one that
 * sends garbage, and one that refuses hello with another error. Needs no
 * broker of the suite.
 */
#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum { F_SPLIT, F_MUTE, F_GARBAGE, F_HELLO_REFUSED } fake_mode_t;

typedef struct fake {
	fake_mode_t mode;
	int lfd, port;
	pthread_t t;
} fake_t;

static int read_line(int fd, char *buf, size_t cap)
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

static long id_of(const char *line)
{
	const char *p = strstr(line, "\"id\":");
	return p ? strtol(p + 5, NULL, 10) : -1;
}

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

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	char line[4096], out[1024];
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	if (read_line(fd, line, sizeof(line)) < 0)
		goto done;
	if (f->mode == F_HELLO_REFUSED) {
		snprintf(out, sizeof(out),
		         "{\"id\":%ld,\"ok\":false,\"error\":{\"code\":\"limit_exceeded\",\"message\":\"too many\"}}\n",
		         id_of(line));
		send_str(fd, out, false);
		goto done;
	}
	snprintf(out, sizeof(out),
	         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/1\",\"proto\":1,\"session\":\"f1\",\"broker\":\"fk\","
	         "\"limits\":{\"max_line\":4096}}\n",
	         id_of(line));
	send_str(fd, out, f->mode == F_SPLIT);
	while (read_line(fd, line, sizeof(line)) == 0) {
		long id = id_of(line);
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

static void fake_start(fake_t *f, fake_mode_t mode)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);

	f->mode = mode;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &len);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->t, NULL, fake_main, f);
}

static void fake_stop(fake_t *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->t, NULL);
	close(f->lfd);
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
	cr_assert_eq(lbc_ping(c, NULL, &err), LBC_DISCONNECTED);
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
