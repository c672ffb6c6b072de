/*
 * test_daemon.c - the daemon as an operator sees it: flags, the config
 * file, Unix socket handling (stale files replaced, live ones never stolen,
 * file mode), Redis password and db selection, and backpressure against a
 * client that floods requests without reading.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *broker_bin(void)
{
	const char *b = getenv("LB_BROKER_BIN");
	return b && *b ? b : "build/san/lockbrokerd";
}

/* Runs the broker binary with args (NULL-terminated), stdout and stderr to
 * out_path; waits at most timeout_ms. Returns the exit status, or -1 when it
 * was still running (then it is killed). */
static int run_broker(const char *out_path, int timeout_ms, const char *const *args)
{
	const char *argv[32];
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int n = 0, status;

	argv[n++] = broker_bin();
	for (; args[n - 1] && n < 31; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	for (int waited = 0; waited <= timeout_ms; waited += 20) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		lb_sleep_ms(20);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static char *slurp(const char *path)
{
	static char buf[65536];
	FILE *f = fopen(path, "r");
	size_t n;

	cr_assert_not_null(f, "cannot open %s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static char *tmp_path(const char *name)
{
	static char bufs[8][512];
	static int k;
	char *p = bufs[k++ % 8];

	snprintf(p, 512, "%s/%s", lb_tmpdir(), name);
	return p;
}

LB_TEST(daemon, help_and_version_exit_zero, 30)
{
	const char *help[] = {"--help", NULL};
	const char *version[] = {"--version", NULL};
	char *out;

	cr_assert_eq(run_broker(tmp_path("help.out"), 5000, help), 0);
	out = slurp(tmp_path("help.out"));
	/* Every operator flag of DESIGN.md is documented. */
	const char *flags[] = {"--config", "--listen", "--redis", "--redis-password-file",
	                       "--prefix", "--default-ttl-ms", "--auth-file", "--socket-mode",
	                       "--pool", "--max-line", "--log-level", "--shutdown-grace-ms"};
	for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++)
		cr_expect_not_null(strstr(out, flags[k]), "--help does not mention %s", flags[k]);
	cr_assert_eq(run_broker(tmp_path("version.out"), 5000, version), 0);
	cr_expect_not_null(strstr(slurp(tmp_path("version.out")), "lockbrokerd "));
}

LB_TEST(daemon, bad_flags_exit_two_with_a_message, 30)
{
	const char *unknown[] = {"--frobnicate", NULL};
	const char *bad_pool[] = {"--pool", "0", NULL};
	const char *bad_url[] = {"--redis", "http://x", NULL};
	const char *no_value[] = {"--prefix", NULL};

	cr_assert_eq(run_broker(tmp_path("e1"), 5000, unknown), 2);
	cr_expect_not_null(strstr(slurp(tmp_path("e1")), "frobnicate"));
	cr_assert_eq(run_broker(tmp_path("e2"), 5000, bad_pool), 2);
	cr_assert_eq(run_broker(tmp_path("e3"), 5000, bad_url), 2);
	cr_assert_eq(run_broker(tmp_path("e4"), 5000, no_value), 2);
}

LB_TEST(daemon, config_file_settings_and_flags_win, 30)
{
	lb_redis *r = lb_redis_start(false);
	char cfg[1024];
	lb_broker *b;
	lb_client *c;
	json_t *resp;

	snprintf(cfg, sizeof(cfg),
	         "{\"prefix\": \"cfgfile:\", \"default-ttl-ms\": 4321, \"log-level\": \"warn\"}");
	write_file(tmp_path("lb.json"), cfg);
	/* The file sets the prefix and the TTL; the flag overrides the TTL. */
	b = lb_broker_start(r, "--config", tmp_path("lb.json"), "--default-ttl-ms", "2345", NULL);
	c = lb_connect(b, LB_TCP);
	resp = lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "cfg", "wait_ms", 0);
	lb_expect_ok(resp);
	cr_expect_eq(lb_int(resp, "ttl_ms"), 2345);
	cr_expect_gt(lb_redis_count_lock_keys(r, "cfgfile:", "cfg"), 0);
	cr_expect_eq(lb_redis_count_lock_keys(r, "lb:", "cfg"), 0);
	lb_close(c);
	lb_end();
}

LB_TEST(daemon, config_file_errors_exit_two, 30)
{
	const char *args[] = {"--config", tmp_path("bad.json"), NULL};
	const char *missing[] = {"--config", tmp_path("nope.json"), NULL};

	write_file(tmp_path("bad.json"), "{\"prefix\": 5}");
	cr_assert_eq(run_broker(tmp_path("o1"), 5000, args), 2);
	cr_expect_not_null(strstr(slurp(tmp_path("o1")), "prefix"));
	write_file(tmp_path("bad.json"), "{\"no-such-setting\": 1}");
	cr_assert_eq(run_broker(tmp_path("o2"), 5000, args), 2);
	cr_assert_eq(run_broker(tmp_path("o3"), 5000, missing), 2);
}

/* A socket file left behind by a dead process: bound, never unlinked. */
static void make_stale_socket(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

static bool unix_connects(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	bool ok;

	strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

LB_TEST(daemon, stale_socket_is_replaced_and_mode_applied, 30)
{
	lb_redis *r = lb_redis_start(false);
	char url[600];
	const char *path = tmp_path("stale.sock");
	struct stat st;
	lb_broker *b;

	make_stale_socket(path);
	cr_assert_not(unix_connects(path), "the stale socket must refuse connections");
	snprintf(url, sizeof(url), "unix://%s", path);
	b = lb_broker_start(r, "--listen", url, "--socket-mode", "0600", NULL);
	cr_assert(unix_connects(path), "the broker did not take over the stale socket");
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0600, "socket mode is %o", st.st_mode & 0777);
	(void)b;
	lb_end();
	/* A clean stop removes the socket file it created. */
	cr_expect_neq(stat(path, &st), 0);
}

LB_TEST(daemon, live_socket_is_never_stolen, 30)
{
	lb_redis *r = lb_redis_start(false);
	char url[600];
	const char *path = tmp_path("live.sock");
	lb_broker *b;
	lb_client *c;

	snprintf(url, sizeof(url), "unix://%s", path);
	b = lb_broker_start(r, "--listen", url, NULL);
	{
		const char *args[] = {"--redis", lb_redis_url(r), "--listen", url, NULL};
		/* The second broker must refuse to start, and leave the first alone. */
		cr_assert_eq(run_broker(tmp_path("second.out"), 10000, args), 1);
	}
	cr_assert(unix_connects(path), "the live socket was stolen or removed");
	c = lb_connect(b, LB_TCP);
	lb_expect_ok(lb_call(c, "{s:s}", "op", "ping"));
	lb_close(c);
	lb_end();
}

LB_TEST(daemon, path_that_is_not_a_socket_is_left_alone, 30)
{
	const char *path = tmp_path("regular-file");
	char url[600];
	struct stat st;

	write_file(path, "precious");
	snprintf(url, sizeof(url), "unix://%s", path);
	{
		const char *args[] = {"--redis", "unix:///nonexistent/redis.sock", "--listen", url, NULL};
		cr_assert_eq(run_broker(tmp_path("nf.out"), 10000, args), 1);
	}
	cr_assert_eq(stat(path, &st), 0);
	cr_expect(S_ISREG(st.st_mode));
	cr_expect_str_eq(slurp(path), "precious");
}

LB_TEST(daemon, redis_password_file_and_db, 30)
{
	lb_redis *r = lb_redis_start(true);
	char url[256];
	lb_broker *good, *bad;
	lb_client *c;
	json_t *resp;

	/* The harness's own connection stays authenticated after this. */
	lb_redis_cmd(r, "CONFIG SET requirepass %s", "pw-3f9");
	write_file(tmp_path("redis.pw"), "pw-3f9\n");
	snprintf(url, sizeof(url), "%s/5", lb_redis_url(r));
	good = lb_broker_start(r, "--redis", url, "--redis-password-file", tmp_path("redis.pw"), NULL);
	c = lb_connect(good, LB_UNIX);
	lb_must_acquire(c, "in-db-5", 5000);
	lb_redis_cmd(r, "SELECT 5");
	cr_expect_gt(lb_redis_count_lock_keys(r, "lb:", "in-db-5"), 0, "the lock is not in db 5");
	lb_redis_cmd(r, "SELECT 0");
	cr_expect_eq(lb_redis_count_lock_keys(r, "lb:", "in-db-5"), 0, "the lock leaked into db 0");

	/* Without the password Redis never becomes ready: unavailable, not a hang. */
	bad = lb_broker_start_no_redis_wait(r, "--redis", lb_redis_url(r), NULL);
	c = lb_connect(bad, LB_TCP);
	resp = lb_call(c, "{s:s}", "op", "stats");
	cr_expect_str_eq(lb_str(resp, "redis"), "down");
	resp = lb_call(c, "{s:s, s:s, s:i}", "op", "acquire", "lock", "x", "wait_ms", 0);
	lb_expect_err(resp, "unavailable");
	/* The password never shows in the log. */
	cr_expect_null(strstr(slurp(lb_broker_log(good)), "pw-3f9"));
	cr_expect_null(strstr(slurp(lb_broker_log(bad)), "pw-3f9"));
	lb_end();
}

/* The pid of a broker the harness started, found by its Unix socket path
 * on its command line. */
static pid_t broker_pid(const lb_broker *b)
{
	const char *needle = lb_broker_unix_path(b);
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t pid = -1;

	cr_assert_not_null(d);
	while ((e = readdir(d)) && pid < 0) {
		char path[300], cmd[4096];
		FILE *f;
		size_t n;
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		for (size_t k = 0; k < n; k++)
			if (cmd[k] == '\0')
				cmd[k] = ' ';
		cmd[n] = '\0';
		if (strstr(cmd, "lockbrokerd") && strstr(cmd, needle))
			pid = (pid_t)atol(e->d_name);
	}
	closedir(d);
	cr_assert_gt(pid, 0, "broker process not found");
	return pid;
}

static long broker_rss_kb(const lb_broker *b)
{
	char path[64], line[256];
	long rss = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)broker_pid(b));
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &rss) == 1)
			break;
	fclose(f);
	cr_assert_geq(rss, 0);
	return rss;
}

LB_TEST(daemon, flooding_client_is_throttled_not_buffered, 60)
{
	lb_redis *r;
	lb_broker *b;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	static const char ping[] = "{\"op\":\"ping\"}\n";
	char chunk[sizeof(ping) - 1 + 4096 * (sizeof(ping) - 1)];
	size_t sent = 0, got = 0, chunk_len = 0;
	long rss_before, rss_after;
	int64_t deadline;
	lb_client *other;
	int fd;

	for (size_t k = 0; k + sizeof(ping) - 1 <= sizeof(chunk); k += sizeof(ping) - 1) {
		memcpy(chunk + k, ping, sizeof(ping) - 1);
		chunk_len = k + sizeof(ping) - 1;
	}
	/* ASan holds freed memory back (256 MB by default), which would make
	 * RSS count churn instead of live memory: shrink that for this broker. */
	{
		char opts[512];
		const char *old = getenv("ASAN_OPTIONS");
		snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=1", old ? old : "", old ? ":" : "");
		setenv("ASAN_OPTIONS", opts, 1);
	}
	r = lb_redis_start(false);
	b = lb_broker_start(r, NULL);
	rss_before = broker_rss_kb(b);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	strncpy(sa.sun_path, lb_broker_unix_path(b), sizeof(sa.sun_path) - 1);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	fcntl(fd, F_SETFL, O_NONBLOCK);

	/* Write pings for 3 s without reading a single response. */
	deadline = lb_now_ms() + 3000;
	while (lb_now_ms() < deadline) {
		ssize_t w = send(fd, chunk + sent % chunk_len, chunk_len - sent % chunk_len, MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		cr_assert(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "send: %s", strerror(errno));
		lb_sleep_ms(5);
	}
	/* The broker stopped reading long before 3 s of writing: the kernel
	 * buffers filled, and the broker's memory did not grow with the flood. */
	rss_after = broker_rss_kb(b);
	cr_log_info("flood: %zu bytes accepted, broker RSS %ld -> %ld kB", sent, rss_before, rss_after);
	cr_expect_lt(sent, (size_t)64 << 20, "the broker kept reading a client that never reads");
	cr_expect_lt(rss_after - rss_before, 32 * 1024, "broker memory grew by %ld kB", rss_after - rss_before);

	/* Another client is served promptly meanwhile. */
	other = lb_connect(b, LB_TCP);
	lb_expect_ok(lb_call_timeout(other, 2000, "{s:s}", "op", "ping"));

	/* Now read: every complete request gets exactly one response. */
	shutdown(fd, SHUT_WR);
	fcntl(fd, F_SETFL, 0);
	{
		char buf[65536];
		struct pollfd p = {.fd = fd, .events = POLLIN};
		size_t events = 0, col = 0;
		while (poll(&p, 1, 5000) > 0) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n <= 0)
				break;
			/* Answers start {"id":..., events {"event":... (the third
			 * byte tells; a line may span reads). */
			for (ssize_t k = 0; k < n; k++) {
				if (col == 2 && buf[k] == 'e')
					events++;
				got += buf[k] == '\n';
				col = buf[k] == '\n' ? 0 : col + 1;
			}
		}
		/* half_closed (answers were still owed at the EOF), closing */
		cr_expect_leq(events, 2, "%zu events", events);
		got -= events;
	}
	close(fd);
	cr_expect_eq(got, sent / (sizeof(ping) - 1), "sent %zu pings, got %zu answers",
	             sent / (sizeof(ping) - 1), got);
	lb_end();
}

LB_TEST(daemon, script_flush_behind_the_broker_is_reloaded, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--pool", "1", NULL);
	lb_client *c = lb_connect(b, LB_TCP);
	const char *lease;
	json_t *resp;

	lease = lb_must_acquire(c, "flushed", 5000);
	lb_redis_cmd(r, "SCRIPT FLUSH");
	/* Every script is gone from Redis: each op must load it again and
	 * retry, invisibly to the client. */
	resp = lb_call(c, "{s:s, s:s, s:i}", "op", "extend", "lease", lease, "ttl_ms", 6000);
	lb_expect_ok(resp);
	cr_expect_eq(lb_int(resp, "ttl_ms"), 6000);
	lb_redis_cmd(r, "SCRIPT FLUSH");
	resp = lb_inspect(c, "flushed");
	cr_expect_str_eq(lb_str(resp, "state"), "exclusive");
	lb_redis_cmd(r, "SCRIPT FLUSH");
	resp = lb_call(c, "{s:s, s:s}", "op", "release", "lease", lease);
	lb_expect_ok(resp);
	cr_expect_eq(lb_int(resp, "count"), 0);
	lb_redis_cmd(r, "SCRIPT FLUSH");
	lb_must_acquire(c, "flushed", 5000);
	lb_close(c);
	lb_end();
}

LB_TEST(daemon, sighup_reloads_what_is_safe, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b;
	lb_client *c;

	/* The secret's file is named by a flag (flags win over the file); its
	 * content is read again on SIGHUP all the same. */
	write_file(tmp_path("secret"), "first\n");
	write_file(tmp_path("hup.json"), "{\"default-ttl-ms\": 1111}");
	b = lb_broker_start(r, "--config", tmp_path("hup.json"), "--auth-file", tmp_path("secret"), NULL);
	c = lb_connect(b, LB_TCP);
	lb_expect_ok(lb_call(c, "{s:s, s:s}", "op", "hello", "auth", "first"));
	cr_expect_eq(lb_int(lb_try_acquire(c, "h1", 0 /* default */), "ttl_ms"), 1111);

	/* A new secret and TTL, and a prefix (which needs a restart). */
	write_file(tmp_path("secret"), "second\n");
	write_file(tmp_path("hup.json"), "{\"default-ttl-ms\": 2222, \"prefix\": \"other:\"}");
	cr_assert_eq(kill(broker_pid(b), SIGHUP), 0);
	lb_sleep_ms(300);

	/* The session that passed hello stays authorized; new ones need the
	 * new secret; the new default TTL applies; the prefix does not. */
	cr_expect_eq(lb_int(lb_try_acquire(c, "h2", 0), "ttl_ms"), 2222);
	cr_expect_gt(lb_redis_count_lock_keys(r, "lb:", "h2"), 0, "the prefix changed without a restart");
	{
		lb_client *n = lb_connect(b, LB_UNIX);
		lb_expect_err(lb_call(n, "{s:s, s:s}", "op", "hello", "auth", "first"), "unauthorized");
		lb_expect_ok(lb_call(n, "{s:s, s:s}", "op", "hello", "auth", "second"));
	}
	cr_expect_not_null(strstr(slurp(lb_broker_log(b)), "need a restart"));
	cr_expect_null(strstr(slurp(lb_broker_log(b)), "second"), "the secret was logged");

	/* A broken file is refused; the running settings stay. */
	write_file(tmp_path("hup.json"), "{ not json");
	cr_assert_eq(kill(broker_pid(b), SIGHUP), 0);
	lb_sleep_ms(300);
	cr_expect_eq(lb_int(lb_try_acquire(c, "h3", 0), "ttl_ms"), 2222);
	cr_expect_not_null(strstr(slurp(lb_broker_log(b)), "reload failed"));
	lb_end();
}

LB_TEST(daemon, connection_limit_answers_limit_exceeded, 30)
{
	lb_redis *r = lb_redis_start(false);
	lb_broker *b = lb_broker_start(r, "--max-connections", "2", NULL);
	lb_client *c1, *c2, *c3;
	json_t *m;

	lb_sleep_ms(300); /* the harness's readiness probe is closed by now */
	c1 = lb_connect(b, LB_TCP);
	c2 = lb_connect(b, LB_UNIX);

	lb_expect_ok(lb_call(c1, "{s:s}", "op", "ping"));
	lb_expect_ok(lb_call(c2, "{s:s}", "op", "ping"));
	c3 = lb_connect(b, LB_TCP);
	m = lb_read_msg(c3, 3000);
	cr_assert_not_null(m, "no answer on the connection over the limit");
	lb_expect_err(m, "limit_exceeded");
	lb_expect_closed(c3, 3000);
	/* The others are untouched, and a freed slot can be used again. */
	lb_expect_ok(lb_call(c1, "{s:s}", "op", "ping"));
	lb_close(c2);
	lb_sleep_ms(200);
	c3 = lb_connect(b, LB_UNIX);
	lb_expect_ok(lb_call(c3, "{s:s}", "op", "ping"));
	lb_end();
}
