/*
 * test_ops.c - what operators see: the Prometheus endpoint scraped with a
 * real HTTP client (curl) and parsed, READY=1 / STOPPING=1 on a test
 * NOTIFY_SOCKET, the systemd unit checked by systemd-analyze, and JSON log
 * lines.
 */
#include "harness.h"

#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

LB_TEST(ops, metrics_scraped_with_curl, 60)
{
	lb_redis *r = lb_redis_start(false);
	int port = free_port(), status;
	char url[64], cmd[160];
	lb_broker *b;
	lb_client *c, *d;
	const char *text;
	double prev = -1;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	b = lb_broker_start(r, "--metrics", url, NULL);
	c = lb_connect(b, LB_TCP);
	d = lb_connect(b, LB_UNIX);
	lb_must_acquire(c, "m1", 5000);
	lb_must_acquire(c, "m2", 5000);
	lb_expect_err(lb_try_acquire(d, "m1", 1000), "timeout");
	lb_expect_err(lb_call(d, "{s:s, s:s, s:i}", "op", "acquire", "lock", "m1", "wait_ms", 200), "timeout");

	snprintf(cmd, sizeof(cmd), "curl -sS --max-time 5 http://127.0.0.1:%d/metrics", port);
	text = lb_run_cmd(cmd, &status);
	cr_assert_eq(status, 0, "curl failed: %s", text);
	/* Every sample has its HELP and TYPE, and the values add up. */
	const char *names[] = {"lockbroker_connections", "lockbroker_sessions", "lockbroker_leases",
	                       "lockbroker_waiters", "lockbroker_acquires_total", "lockbroker_releases_total",
	                       "lockbroker_timeouts_total", "lockbroker_lost_total", "lockbroker_renewals_total",
	                       "lockbroker_redis_rtt_seconds", "lockbroker_acquire_wait_seconds",
	                       "lockbroker_redis_up"};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		char help[128];
		snprintf(help, sizeof(help), "# TYPE %s ", names[k]);
		cr_expect_not_null(strstr(text, help), "no TYPE line for %s", names[k]);
	}
	cr_expect_eq(lb_metric_sample(text, "lockbroker_connections"), 2);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_leases"), 2);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_redis_up"), 1);
	/* Per-master series are a Redis Cluster's only. */
	cr_expect_null(strstr(text, "lockbroker_redis_master_up{"), "per-master series outside a cluster");
	cr_expect_eq(lb_metric_sample(text, "lockbroker_acquires_total{result=\"ok\"}"), 2);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_acquires_total{result=\"timeout\"}"), 2);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_timeouts_total"), 2);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_lost_total{reason=\"gone\"}"), 0);
	cr_expect_eq(lb_metric_sample(text, "lockbroker_acquire_wait_seconds_count"), 4);
	cr_expect_geq(lb_metric_sample(text, "lockbroker_redis_rtt_seconds_count"), 4);
	/* Histogram buckets are cumulative, ending in +Inf == count. */
	for (const char *p = strstr(text, "lockbroker_redis_rtt_seconds_bucket"); p;
	     p = strstr(p + 1, "lockbroker_redis_rtt_seconds_bucket")) {
		double v = atof(strchr(p, ' ') + 1);
		cr_expect_geq(v, prev, "buckets not cumulative");
		prev = v;
	}
	cr_expect_eq(prev, lb_metric_sample(text, "lockbroker_redis_rtt_seconds_count"));

	/* Other paths and methods, and a request that never ends its headers. */
	snprintf(cmd, sizeof(cmd), "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/other", port);
	cr_expect_str_eq(lb_run_cmd(cmd, &status), "404");
	snprintf(cmd, sizeof(cmd), "curl -s -o /dev/null -w '%%{http_code}' -X POST http://127.0.0.1:%d/metrics", port);
	cr_expect_str_eq(lb_run_cmd(cmd, &status), "405");
	lb_end();
}

LB_TEST(ops, sd_notify_ready_and_stopping, 60)
{
	lb_redis *r = lb_redis_start(false);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char path[300], buf[256];
	struct pollfd p;
	lb_broker *b;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/notify.sock", lb_tmpdir());
	fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", path, 1);
	b = lb_broker_start(r, NULL);
	unsetenv("NOTIFY_SOCKET");

	p = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1, "no READY=1 from the broker");
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	cr_expect_str_eq(buf, "READY=1");

	lb_broker_stop(b);
	cr_assert_eq(poll(&p, 1, 5000), 1, "no STOPPING=1 from the broker");
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	cr_expect_str_eq(buf, "STOPPING=1");
	close(fd);
	lb_end();
}

LB_TEST(ops, systemd_unit_verifies, 60)
{
	char cmd[1024], unit[300], bin[512];
	const char *broker = getenv("LB_BROKER_BIN");
	const char *out;
	int status;

	lb_run_cmd("command -v systemd-analyze", &status);
	if (status != 0)
		cr_skip_test("systemd-analyze is not available here");
	cr_assert_not_null(realpath(broker && *broker ? broker : "build/san/lockbrokerd", bin));
	*strrchr(bin, '/') = '\0';
	/* The unit as make install writes it, pointing at this build. */
	snprintf(unit, sizeof(unit), "%s/lockbroker.service", lb_tmpdir());
	snprintf(cmd, sizeof(cmd),
	         "sed -e 's|@BINDIR@|%s|g' -e 's|@SYSCONFDIR@|/etc|g' deploy/lockbroker.service.in > %s",
	         bin, unit);
	lb_run_cmd(cmd, &status);
	cr_assert_eq(status, 0);
	snprintf(cmd, sizeof(cmd), "systemd-analyze verify %s 2>&1", unit);
	out = lb_run_cmd(cmd, &status);
	cr_expect_eq(status, 0, "systemd-analyze verify: %s", out);
	cr_expect_null(strstr(out, "lockbroker.service:"), "warnings about the unit: %s", out);
}

LB_TEST(ops, json_log_lines, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--log-format", "json", "--log-level", "debug", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	char line[4096];
	int lines = 0, with_session = 0;
	FILE *f;

	lb_must_acquire(c, "j", 1000);
	lb_close(c);
	lb_sleep_ms(200);
	lb_broker_stop(b);
	f = fopen(lb_broker_log(b), "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		json_error_t err;
		json_t *j;
		if (strncmp(line, "==", 2) == 0 || line[0] == '#' || line[0] == '\n')
			continue; /* the harness's own note, sanitizer chatter */
		j = json_loads(line, 0, &err);
		cr_assert_not_null(j, "not JSON: %s (%s)", line, err.text);
		cr_expect(json_is_string(json_object_get(j, "ts")));
		cr_expect(json_is_string(json_object_get(j, "level")));
		cr_expect(json_is_string(json_object_get(j, "msg")), "no msg: %s", line);
		with_session += json_object_get(j, "session") != NULL;
		lines++;
		json_decref(j);
	}
	fclose(f);
	cr_expect_gt(lines, 5);
	cr_expect_gt(with_session, 0, "no line names its session");
	lb_end();
}
