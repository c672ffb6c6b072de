/*
 * test_config.c - defaults, flags in both forms, the JSON config file and
 * its override by flags, listen list replacement, strict numbers, secret
 * files and the Redis password precedence, the Sentinel URL and its
 * password, the Cluster URL and its password file, the replication wait
 * flags, the Redlock master list and its passwords, what a reload must
 * restart for, and that no message leaks a secret. Every test works in its own mkdtemp directory, removed in .fini.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/config.h"

static char dir[64];
static lb_config_t C;
static lb_config_t F; /* the fresh config of a reload */
static char err[512];

static void setup(void)
{
	strcpy(dir, "/tmp/lb_test_config.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	unsetenv("LOCKBROKER_REDIS_PASSWORD");
	unsetenv("LOCKBROKER_SENTINEL_PASSWORD");
	memset(&C, 0, sizeof(C));
	memset(&F, 0, sizeof(F));
}

static void teardown(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];

	config_free(&C);
	config_free(&F);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (remove(p) != 0)
			cr_log_warn("cannot remove %s", p);
	}
	closedir(d);
	rmdir(dir);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes len bytes to dir/name; returns the path in a static rotating buffer. */
static const char *write_file(const char *name, const char *data, size_t len)
{
	static char paths[8][256];
	static int next;
	char *p = paths[next++ % 8];
	FILE *f;

	snprintf(p, 256, "%s/%s", dir, name);
	f = fopen(p, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	return p;
}

static const char *write_str(const char *name, const char *data)
{
	return write_file(name, data, strlen(data));
}

/* Runs config_load into cfg on {"lockbrokerd", args..., NULL} (args
 * NULL-terminated). */
static int load_into(lb_config_t *cfg, const char *const *args)
{
	char *argv[64];
	int argc = 0;
	int rc;

	argv[argc++] = strdup("lockbrokerd");
	for (; *args != NULL; args++) {
		cr_assert_lt(argc, 63);
		argv[argc++] = strdup(*args);
	}
	argv[argc] = NULL;
	config_free(cfg);
	err[0] = '\0';
	rc = config_load(cfg, argc, argv, err, sizeof(err));
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	return rc;
}

static int load_v(const char *const *args)
{
	return load_into(&C, args);
}

#define LOAD(...) load_v((const char *const[]){__VA_ARGS__, NULL})
#define LOAD0() load_v((const char *const[]){NULL})

static void expect_error(int rc, const char *must_mention)
{
	static const lb_config_t zero;

	cr_expect_eq(rc, CONFIG_ERROR, "wanted an error mentioning '%s'", must_mention);
	cr_expect_neq(err[0], '\0');
	cr_expect_not_null(strstr(err, must_mention), "message '%s' lacks '%s'", err, must_mention);
	cr_expect_eq(memcmp(&C, &zero, sizeof(C)), 0, "struct not zeroed after an error");
}

/* Like load_v, capturing stdout into out. */
static int load_capture(const char *const *args, char *out, size_t outlen)
{
	char path[256];
	int fd, saved, rc;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/stdout", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	cr_assert_geq(saved, 0);
	cr_assert_geq(dup2(fd, STDOUT_FILENO), 0);
	rc = load_v(args);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	n = pread(fd, out, outlen - 1, 0);
	close(fd);
	cr_assert_geq(n, 0);
	out[n] = '\0';
	return rc;
}

Test(config, defaults)
{
	char buf[128];

	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nlisten, 2);
	url_format_listen(&C.listen[0], buf, sizeof(buf));
	cr_expect_str_eq(buf, CONFIG_DEFAULT_TCP);
	url_format_listen(&C.listen[1], buf, sizeof(buf));
	cr_expect_str_eq(buf, CONFIG_DEFAULT_UNIX);
	cr_expect_eq(C.redis.kind, URL_TCP);
	cr_expect_str_eq(C.redis.host, "127.0.0.1");
	cr_expect_eq(C.redis.port, 6379);
	cr_expect_eq(C.redis.db, 0);
	cr_expect_null(C.redis.password);
	cr_expect_str_eq(C.prefix, "lb:");
	cr_expect_eq(C.default_ttl_ms, 30000);
	cr_expect_null(C.auth_secret);
	cr_expect_eq(C.socket_mode, 0660);
	cr_expect_eq(C.pool, 4);
	cr_expect_eq(C.max_line, 65536);
	cr_expect_eq(C.log_level, LOG_INFO);
	cr_expect_eq(C.shutdown_grace_ms, 5000);
	cr_expect_eq(C.max_connections, 10000);
	cr_expect_eq(C.max_leases_per_session, 10000);
	cr_expect_eq(C.max_inflight, 1024);
	cr_expect_eq(C.redis_wait_replicas, 0, "off by default");
	cr_expect_eq(C.redis_wait_ms, 500);
	cr_expect_eq(C.redis_batch_max, 64);
	cr_expect_null(C.redis.sentinel_password);
}

static void expect_flag_values(void)
{
	cr_expect_eq(C.redis.kind, URL_UNIX);
	cr_expect_str_eq(C.redis.path, "/run/redis.sock");
	cr_expect_eq(C.redis.db, 3);
	cr_expect_str_eq(C.prefix, "app:");
	cr_expect_eq(C.default_ttl_ms, 1500);
	cr_expect_eq(C.socket_mode, 0600);
	cr_expect_eq(C.pool, 9);
	cr_expect_eq(C.max_line, 4096);
	cr_expect_eq(C.log_level, LOG_DEBUG);
	cr_expect_eq(C.shutdown_grace_ms, 0);
	cr_expect_eq(C.max_connections, 77);
	cr_expect_eq(C.max_leases_per_session, 88);
	cr_expect_eq(C.max_inflight, 99);
}

Test(config, flags_space_form)
{
	cr_assert_eq(LOAD("--redis", "unix:///run/redis.sock?db=3", "--prefix", "app:",
			  "--default-ttl-ms", "1500", "--socket-mode", "0600", "--pool", "9",
			  "--max-line", "4096", "--log-level", "debug", "--shutdown-grace-ms", "0",
			  "--max-connections", "77", "--max-leases-per-session", "88",
			  "--max-inflight", "99"),
		     CONFIG_OK, "%s", err);
	expect_flag_values();
}

Test(config, flags_equals_form)
{
	cr_assert_eq(LOAD("--redis=unix:///run/redis.sock?db=3", "--prefix=app:",
			  "--default-ttl-ms=1500", "--socket-mode=600", "--pool=9",
			  "--max-line=4096", "--log-level=debug", "--shutdown-grace-ms=0",
			  "--max-connections=77", "--max-leases-per-session=88",
			  "--max-inflight=99"),
		     CONFIG_OK, "%s", err);
	expect_flag_values();
}

Test(config, equals_form_allows_dashes_and_equals_in_value)
{
	cr_assert_eq(LOAD("--prefix=--a=b"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.prefix, "--a=b");
}

Test(config, last_flag_wins)
{
	cr_assert_eq(LOAD("--pool", "2", "--pool=3", "--log-level", "warn", "--log-level", "error"),
		     CONFIG_OK, "%s", err);
	cr_expect_eq(C.pool, 3);
	cr_expect_eq(C.log_level, LOG_ERROR);
}

Test(config, listen_flags_replace_defaults)
{
	cr_assert_eq(LOAD("--listen", "tcp://0.0.0.0:9000", "--listen=unix:///tmp/x.sock",
			  "--listen", "tcp://[::1]:0"),
		     CONFIG_OK, "%s", err);
	cr_assert_eq(C.nlisten, 3);
	cr_expect_str_eq(C.listen[0].host, "0.0.0.0");
	cr_expect_eq(C.listen[0].port, 9000);
	cr_expect_eq(C.listen[1].kind, URL_UNIX);
	cr_expect_str_eq(C.listen[1].path, "/tmp/x.sock");
	cr_expect_str_eq(C.listen[2].host, "::1");
}

Test(config, listen_limit)
{
	const char *args[2 * CONFIG_MAX_LISTEN + 3];
	char urls[CONFIG_MAX_LISTEN + 1][32];
	size_t n = 0;

	for (int i = 0; i < CONFIG_MAX_LISTEN; i++) {
		snprintf(urls[i], sizeof(urls[i]), "tcp://127.0.0.1:%d", 9000 + i);
		args[n++] = "--listen";
		args[n++] = urls[i];
	}
	args[n] = NULL;
	cr_assert_eq(load_v(args), CONFIG_OK, "%s", err);
	cr_expect_eq(C.nlisten, CONFIG_MAX_LISTEN);
	snprintf(urls[CONFIG_MAX_LISTEN], 32, "tcp://127.0.0.1:1");
	args[n++] = "--listen";
	args[n++] = urls[CONFIG_MAX_LISTEN];
	args[n] = NULL;
	expect_error(load_v(args), "too many");
}

Test(config, listen_bad_url_names_flag)
{
	expect_error(LOAD("--listen", "tcp://127.0.0.1"), "--listen");
	expect_error(LOAD("--listen", "unix://relative"), "absolute");
}

Test(config, file_sets_everything)
{
	const char *f = write_str("c.json",
		"{\"listen\": [\"tcp://10.0.0.1:7000\", \"unix:///tmp/a.sock\"],"
		" \"redis\": \"unix:///run/redis.sock?db=3\", \"prefix\": \"app:\","
		" \"default-ttl-ms\": 1500, \"socket-mode\": \"0600\", \"pool\": 9,"
		" \"max-line\": 4096, \"log-level\": \"debug\", \"shutdown-grace-ms\": 0,"
		" \"max-connections\": 77, \"max-leases-per-session\": 88, \"max-inflight\": 99}");

	cr_assert_eq(LOAD("--config", f), CONFIG_OK, "%s", err);
	expect_flag_values();
	cr_assert_eq(C.nlisten, 2, "the file's listen replaces the defaults");
	cr_expect_str_eq(C.listen[0].host, "10.0.0.1");
	cr_expect_eq(C.listen[0].port, 7000);
	cr_expect_str_eq(C.listen[1].path, "/tmp/a.sock");
}

Test(config, file_listen_single_string)
{
	const char *f = write_str("c.json", "{\"listen\": \"unix:///tmp/only.sock\"}");

	cr_assert_eq(LOAD("--config=" "placeholder"), CONFIG_ERROR); /* missing file */
	cr_assert_eq(LOAD("--config", f), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nlisten, 1);
	cr_expect_str_eq(C.listen[0].path, "/tmp/only.sock");
}

Test(config, flags_override_file_wherever_config_appears)
{
	const char *f = write_str("c.json",
		"{\"pool\": 2, \"prefix\": \"file:\", \"listen\": [\"tcp://10.0.0.1:1\"], \"log-level\": \"warn\"}");
	char cfgflag[300];

	snprintf(cfgflag, sizeof(cfgflag), "--config=%s", f);
	cr_assert_eq(LOAD("--pool", "8", "--listen", "tcp://127.0.0.2:2", cfgflag, "--prefix", "cli:"),
		     CONFIG_OK, "%s", err);
	cr_expect_eq(C.pool, 8);
	cr_expect_str_eq(C.prefix, "cli:");
	cr_expect_eq(C.log_level, LOG_WARN, "the file still applies where no flag is given");
	cr_assert_eq(C.nlisten, 1, "the command line's list replaces the file's");
	cr_expect_str_eq(C.listen[0].host, "127.0.0.2");
}

Test(config, file_redis_replaced_by_flag)
{
	const char *f = write_str("c.json", "{\"redis\": \"redis://:filepw@filehost:7000/4\"}");

	cr_assert_eq(LOAD("--config", f, "--redis", "redis://clihost"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.host, "clihost");
	cr_expect_eq(C.redis.port, 6379);
	cr_expect_eq(C.redis.db, 0);
	cr_expect_null(C.redis.password, "the whole URL is replaced, password included");
}

Test(config, file_errors)
{
	const char *f;

	f = write_str("syntax.json", "{\"pool\": 4,\n \"prefix\": }");
	expect_error(LOAD("--config", f), "syntax.json");
	cr_expect_not_null(strstr(err, "line 2"), "%s", err);

	expect_error(LOAD("--config", "/nonexistent/lb.json"), "/nonexistent/lb.json");

	f = write_str("array.json", "[1, 2]");
	expect_error(LOAD("--config", f), "object");

	f = write_str("dup.json", "{\"pool\": 4, \"pool\": 5}");
	expect_error(LOAD("--config", f), "dup.json");

	f = write_str("empty.json", "");
	expect_error(LOAD("--config", f), "empty.json");

	f = write_str("trail.json", "{} {}");
	expect_error(LOAD("--config", f), "trail.json");

	f = write_str("ok.json", "{}");
	expect_error(LOAD("--config", f, "--config", f), "--config");
	expect_error(LOAD("--config="), "--config");
}

Test(config, file_unknown_key_named)
{
	const char *f;

	f = write_str("u.json", "{\"pool\": 4, \"poool\": 5}");
	expect_error(LOAD("--config", f), "\"poool\"");
	cr_expect_not_null(strstr(err, "unknown"), "%s", err);
	f = write_str("c.json", "{\"config\": \"x.json\"}");
	expect_error(LOAD("--config", f), "\"config\"");
	f = write_str("h.json", "{\"help\": true}");
	expect_error(LOAD("--config", f), "\"help\"");
}

Test(config, file_wrong_types_named)
{
	static const char *const bad[][2] = {
		{"{\"pool\": \"4\"}", "\"pool\""},
		{"{\"pool\": 4.0}", "\"pool\""},
		{"{\"pool\": true}", "\"pool\""},
		{"{\"pool\": null}", "\"pool\""},
		{"{\"prefix\": 5}", "\"prefix\""},
		{"{\"socket-mode\": 432}", "\"socket-mode\""},
		{"{\"socket-mode\": \"0999\"}", "\"socket-mode\""},
		{"{\"listen\": 5}", "\"listen\""},
		{"{\"listen\": []}", "\"listen\""},
		{"{\"listen\": [\"tcp://h:1\", 7]}", "\"listen\"[1]"},
		{"{\"listen\": {\"a\": 1}}", "\"listen\""},
		{"{\"listen\": [\"tcp://h\"]}", "\"listen\""},
		{"{\"redis\": [\"redis://h\"]}", "\"redis\""},
		{"{\"redis\": \"redis://h:0\"}", "\"redis\""},
		{"{\"log-level\": \"loud\"}", "\"log-level\""},
		{"{\"max-line\": 63}", "\"max-line\""},
		{"{\"default-ttl-ms\": -5}", "\"default-ttl-ms\""},
		{"{\"auth-file\": \"\"}", "\"auth-file\""},
		{"{\"prefix\": \"a\\u0000b\"}", "t.json"}, /* jansson refuses NUL itself */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *f = write_str("t.json", bad[i][0]);
		expect_error(LOAD("--config", f), bad[i][1]);
	}
}

Test(config, strict_numbers)
{
	static const char *const bad[][2] = {
		{"--pool", "4x"}, {"--pool", ""}, {"--pool", "-1"}, {"--pool", "+4"},
		{"--pool", " 4"}, {"--pool", "4 "}, {"--pool", "0x4"}, {"--pool", "0"},
		{"--pool", "65"}, {"--pool", "4.0"},
		{"--default-ttl-ms", "99999999999999999999999"},
		{"--default-ttl-ms", "9223372036854775808"},
		{"--default-ttl-ms", "99"}, {"--default-ttl-ms", "86400001"},
		{"--max-line", "63"}, {"--max-line", "16777217"},
		{"--shutdown-grace-ms", "3600001"},
		{"--max-connections", "0"}, {"--max-connections", "1000001"},
		{"--max-leases-per-session", "0"}, {"--max-inflight", "0"},
		{"--max-inflight", "65537"},
	};
	char flag[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(flag, sizeof(flag), "%s=%s", bad[i][0], bad[i][1]);
		expect_error(LOAD(flag), bad[i][0]);
	}
}

Test(config, number_bounds_inclusive)
{
	cr_assert_eq(LOAD("--pool", "1", "--max-line", "64", "--shutdown-grace-ms", "0",
			  "--default-ttl-ms", "100", "--max-inflight", "1"),
		     CONFIG_OK, "%s", err);
	cr_expect_eq(C.pool, 1);
	cr_expect_eq(C.max_line, 64);
	cr_expect_eq(C.default_ttl_ms, 100);
	cr_assert_eq(LOAD("--pool", "64", "--max-line", "16777216", "--shutdown-grace-ms", "3600000",
			  "--default-ttl-ms", "86400000", "--max-inflight", "65536",
			  "--max-connections", "1000000", "--max-leases-per-session", "1000000"),
		     CONFIG_OK, "%s", err);
	cr_expect_eq(C.pool, 64);
	cr_expect_eq(C.max_line, 16777216);
	cr_expect_eq(C.shutdown_grace_ms, 3600000);
	cr_expect_eq(C.default_ttl_ms, 86400000);
	cr_expect_eq(C.max_inflight, 65536);
	cr_expect_eq(C.max_connections, 1000000);
}

Test(config, socket_mode_octal)
{
	static const struct { const char *in; unsigned want; } good[] = {
		{"0660", 0660}, {"660", 0660}, {"0777", 0777}, {"0", 0}, {"0000640", 0640},
	};
	static const char *const bad[] = {"0778", "1000", "8", "0x1ff", "", "-660", "66 0", "0o660"};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		cr_assert_eq(LOAD("--socket-mode", good[i].in), CONFIG_OK, "%s: %s", good[i].in, err);
		cr_expect_eq(C.socket_mode, good[i].want, "%s", good[i].in);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char flag[64];
		snprintf(flag, sizeof(flag), "--socket-mode=%s", bad[i]);
		expect_error(LOAD(flag), "--socket-mode");
	}
	cr_assert_eq(LOAD("--config", write_str("m.json", "{\"socket-mode\": \"0640\"}")), CONFIG_OK, "%s", err);
	cr_expect_eq(C.socket_mode, 0640);
}

Test(config, log_levels)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};

	for (int i = 0; i < 4; i++) {
		cr_expect_eq(config_log_level(names[i]), i);
		cr_assert_eq(LOAD("--log-level", names[i]), CONFIG_OK, "%s", err);
		cr_expect_eq((int)C.log_level, i);
	}
	cr_expect_eq(config_log_level("INFO"), -1);
	cr_expect_eq(config_log_level("warning"), -1);
	cr_expect_eq(config_log_level(""), -1);
	cr_expect_eq(config_log_level(NULL), -1);
	expect_error(LOAD("--log-level", "trace"), "--log-level");
}

Test(config, prefix_rules)
{
	char p65[66];

	memset(p65, 'p', 65);
	p65[65] = '\0';
	expect_error(LOAD("--prefix", p65), "--prefix");
	p65[64] = '\0';
	cr_assert_eq(LOAD("--prefix", p65), CONFIG_OK, "%s", err);
	cr_expect_eq(strlen(C.prefix), 64);
	cr_assert_eq(LOAD("--prefix", "my app:"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.prefix, "my app:");
	expect_error(LOAD("--prefix="), "--prefix");
	expect_error(LOAD("--prefix", "a{b"), "--prefix");
	expect_error(LOAD("--prefix", "a}b"), "--prefix");
	expect_error(LOAD("--prefix", "a\tb"), "--prefix");
	expect_error(LOAD("--prefix", "a\nb"), "--prefix");
	expect_error(LOAD("--prefix", "a\x7f"), "--prefix");
}

Test(config, bad_command_lines)
{
	expect_error(LOAD("--bogus"), "--bogus");
	expect_error(LOAD("--bogus=1"), "--bogus");
	expect_error(LOAD("--pool"), "--pool");
	expect_error(LOAD("--pool", "--prefix", "x"), "--pool");
	expect_error(LOAD("stray"), "unexpected argument");
	expect_error(LOAD("-p", "4"), "unexpected argument");
	expect_error(LOAD("--"), "unknown flag");
	expect_error(LOAD("--version=1"), "--version");
	expect_error(LOAD("--help=yes"), "--help");
	expect_error(LOAD("--Pool", "4"), "--Pool");
}

Test(config, help_lists_every_flag)
{
	static const char *const flags[] = {
		"--config FILE", "--listen URL", "--redis URL", "--redis-password-file FILE",
		"--prefix STR", "--default-ttl-ms N", "--auth-file FILE", "--socket-mode OCTAL",
		"--pool N", "--max-line N", "--log-level LEVEL", "--shutdown-grace-ms N",
		"--max-connections N", "--max-leases-per-session N", "--max-inflight N",
		"--redis-wait-replicas N", "--redis-wait-ms T", "sentinel://", "cluster://",
		"?password_file=FILE", "--redlock URL,URL,URL[,...]",
		"--version", "--help", "LOCKBROKER_REDIS_PASSWORD", "LOCKBROKER_SENTINEL_PASSWORD",
	};
	static char out[16384];
	static const lb_config_t zero;

	cr_assert_eq(load_capture((const char *const[]){"--pool", "3", "--help", NULL}, out, sizeof(out)),
		     CONFIG_EXIT, "%s", err);
	cr_expect_not_null(strstr(out, "Usage: lockbrokerd"));
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		cr_expect_not_null(strstr(out, flags[i]), "help lacks '%s'", flags[i]);
	cr_expect_eq(memcmp(&C, &zero, sizeof(C)), 0, "struct freed on CONFIG_EXIT");
}

Test(config, help_and_version_win_over_a_broken_config)
{
	char out[256];

	cr_expect_eq(load_capture((const char *const[]){"--config", "/nonexistent.json", "--help", NULL},
				  (char[16384]){0}, 16384),
		     CONFIG_EXIT);
	cr_assert_eq(load_capture((const char *const[]){"--config", "/nonexistent.json", "--version", NULL},
				  out, sizeof(out)),
		     CONFIG_EXIT);
	cr_expect_eq(strncmp(out, "lockbrokerd ", 12), 0, "%s", out);
}

Test(config, version)
{
	char out[256];
	size_t n;

	cr_assert_eq(load_capture((const char *const[]){"--version", NULL}, out, sizeof(out)), CONFIG_EXIT);
	cr_expect_eq(strncmp(out, "lockbrokerd ", 12), 0, "%s", out);
	n = strlen(out);
	cr_assert_gt(n, 13);
	cr_expect_eq(out[n - 1], '\n');
	cr_expect_null(strchr(out, '\n') == out + n - 1 ? NULL : out, "one line only: %s", out);
	cr_expect(out[12] >= '0' && out[12] <= '9', "%s", out);
}

static void expect_auth(const char *content, size_t len, const char *want)
{
	const char *f = write_file("auth", content, len);

	cr_assert_eq(LOAD("--auth-file", f), CONFIG_OK, "%s", err);
	cr_assert_not_null(C.auth_secret);
	cr_expect_str_eq(C.auth_secret, want);
}

Test(config, auth_secret_strips_exactly_one_newline)
{
	expect_auth("abc", 3, "abc");
	expect_auth("abc\n", 4, "abc");
	expect_auth("abc\r\n", 5, "abc");
	expect_auth("abc\n\n", 5, "abc\n");
	expect_auth("abc\r\n\r\n", 7, "abc\r\n");
	expect_auth("abc\r", 4, "abc\r");
	expect_auth("abc\n\r", 5, "abc\n\r");
	expect_auth(" a b ", 5, " a b ");
	expect_auth("\n\n", 2, "\n");
}

Test(config, auth_secret_bad_files)
{
	char big[4098];
	const char *f;

	expect_error(LOAD("--auth-file", write_file("e", "", 0)), "empty");
	expect_error(LOAD("--auth-file", write_file("nl", "\n", 1)), "empty");
	expect_error(LOAD("--auth-file", write_file("crnl", "\r\n", 2)), "empty");
	expect_error(LOAD("--auth-file", write_file("nul", "hunter2\0x", 9)), "NUL");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	expect_error(LOAD("--auth-file", "/nonexistent/secret"), "/nonexistent/secret");
	expect_error(LOAD("--auth-file", dir), dir);
	expect_error(LOAD("--auth-file="), "--auth-file");

	memset(big, 'h', sizeof(big));
	memcpy(big, "hunter2", 7);
	f = write_file("big", big, 4097);
	expect_error(LOAD("--auth-file", f), "4096");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	f = write_file("max", big, 4096);
	cr_assert_eq(LOAD("--auth-file", f), CONFIG_OK, "%s", err);
	cr_expect_eq(strlen(C.auth_secret), 4096);
}

Test(config, auth_unreadable_file)
{
	const char *f = write_str("locked", "hunter2\n");

	cr_assert_eq(chmod(f, 0), 0);
	if (geteuid() == 0) {
		cr_assert_eq(LOAD("--auth-file", f), CONFIG_OK, "root reads mode 000 files: %s", err);
		cr_expect_str_eq(C.auth_secret, "hunter2");
		return;
	}
	expect_error(LOAD("--auth-file", f), "locked");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, auth_file_from_config_file)
{
	const char *secret = write_str("auth", "s3cret\n");
	char json[512];

	snprintf(json, sizeof(json), "{\"auth-file\": \"%s\"}", secret);
	cr_assert_eq(LOAD("--config", write_str("c.json", json)), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.auth_secret, "s3cret");
}

Test(config, redis_password_precedence)
{
	const char *pwfile = write_str("pw", "from-file\r\n");

	setenv("LOCKBROKER_REDIS_PASSWORD", "from-env", 1);

	cr_assert_eq(LOAD("--redis", "redis://:from-url@h", "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url");

	cr_assert_eq(LOAD("--redis", "redis://:from-url@h", "--redis-password-file", "/nonexistent/pw"),
		     CONFIG_OK, "the file is not read when the URL has a password: %s", err);
	cr_expect_str_eq(C.redis.password, "from-url");

	cr_assert_eq(LOAD("--redis", "redis://h", "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-file");

	cr_assert_eq(LOAD("--redis", "unix:///r.sock"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-env");

	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-env");

	setenv("LOCKBROKER_REDIS_PASSWORD", "", 1);
	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.password, "an empty variable means no password");

	unsetenv("LOCKBROKER_REDIS_PASSWORD");
	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.password);
}

Test(config, redis_password_file_from_config_file)
{
	const char *pw = write_str("pw", "pw\n\n");
	char json[512];

	snprintf(json, sizeof(json), "{\"redis-password-file\": \"%s\"}", pw);
	cr_assert_eq(LOAD("--config", write_str("c.json", json)), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "pw\n");
}

Test(config, redis_password_file_errors)
{
	expect_error(LOAD("--redis-password-file", "/nonexistent/pw"), "/nonexistent/pw");
	expect_error(LOAD("--redis-password-file", write_str("e", "\r\n")), "empty");
}

Test(config, errors_never_show_the_password)
{
	const char *f;

	expect_error(LOAD("--redis", "redis://:hunter2@h:99999"), "--redis");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	expect_error(LOAD("--redis", "redis://:hunter2@h/x"), "--redis");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	expect_error(LOAD("--redis", "redis://alice:hunter2@h"), "--redis");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	expect_error(LOAD("--redis=redis://:hunter2@h", "--pool", "0"), "--pool");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	f = write_str("r.json", "{\"redis\": \"redis://:hunter2@h:0\"}");
	expect_error(LOAD("--config", f), "\"redis\"");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	/* A JSON syntax error right in the password: jansson would quote it. */
	f = write_str("s.json", "{\"redis\": \"redis://:hunter2\x01@h\"}");
	expect_error(LOAD("--config", f), "s.json");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	f = write_str("s2.json", "{\"redis\": \"redis://:hunter2\\q@h\"}");
	expect_error(LOAD("--config", f), "s2.json");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, free_zeroes_and_struct_is_reusable)
{
	static const lb_config_t zero;
	const char *a = write_str("a", "x\n");

	cr_assert_eq(LOAD("--auth-file", a, "--redis", "redis://:pw@h", "--prefix", "p:"), CONFIG_OK, "%s", err);
	config_free(&C);
	cr_expect_eq(memcmp(&C, &zero, sizeof(C)), 0);
	config_free(&C); /* twice is fine */
	config_free(NULL);
	cr_assert_eq(LOAD("--pool", "5"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.pool, 5);
	cr_expect_null(C.auth_secret);
	cr_expect_str_eq(C.prefix, "lb:");
}

Test(config, null_error_buffer_is_fine)
{
	char *argv[] = {(char[]){"lockbrokerd"}, (char[]){"--bogus"}, NULL};

	cr_expect_eq(config_load(&C, 2, argv, NULL, 0), CONFIG_ERROR);
	cr_expect_eq(config_load(&C, 1, argv, NULL, 0), CONFIG_OK);
}

static void expect_host(const host_port_t *hp, const char *host, int port)
{
	cr_expect_str_eq(hp->host, host);
	cr_expect_eq(hp->port, port, "%s", host);
}

Test(config, sentinel_url)
{
	cr_assert_eq(LOAD("--redis", "sentinel://s1,[::1]:26380/mymaster?db=2"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis.kind, URL_SENTINEL);
	cr_assert_eq(C.redis.nsentinels, 2);
	expect_host(&C.redis.sentinels[0], "s1", 26379);
	expect_host(&C.redis.sentinels[1], "::1", 26380);
	cr_expect_str_eq(C.redis.master_name, "mymaster");
	cr_expect_eq(C.redis.db, 2);
	cr_expect_null(C.redis.password);
	cr_expect_null(C.redis.sentinel_password, "no file, no variable: none");

	cr_assert_eq(LOAD("--config", write_str("c.json", "{\"redis\": \"sentinel://s/m\"}")), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis.kind, URL_SENTINEL);
	cr_expect_str_eq(C.redis.master_name, "m");
}

Test(config, sentinel_master_password_precedence)
{
	const char *pwfile = write_str("pw", "from-file\n");

	setenv("LOCKBROKER_REDIS_PASSWORD", "from-env", 1);
	setenv("LOCKBROKER_SENTINEL_PASSWORD", "sentinel-env", 1);
	cr_assert_eq(LOAD("--redis", "sentinel://:from-url@s/m", "--redis-password-file", pwfile), CONFIG_OK,
		     "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url");
	cr_assert_eq(LOAD("--redis", "sentinel://s/m", "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-file");
	cr_assert_eq(LOAD("--redis", "sentinel://s/m"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-env");
	cr_expect_str_eq(C.redis.sentinel_password, "sentinel-env", "the two secrets stay apart");
}

Test(config, sentinel_password_from_file)
{
	const char *sf = write_str("spw", "sentinel-secret\r\n");
	char url[512];

	setenv("LOCKBROKER_SENTINEL_PASSWORD", "from-env", 1);
	snprintf(url, sizeof(url), "sentinel://:master@s/m?sentinel_password_file=%s", sf);
	cr_assert_eq(LOAD("--redis", url), CONFIG_OK, "%s", err);
	cr_assert_not_null(C.redis.sentinel_password);
	cr_expect_str_eq(C.redis.sentinel_password, "sentinel-secret", "the file wins over the variable");
	cr_expect_str_eq(C.redis.password, "master");
	cr_expect_str_eq(C.redis.sentinel_password_file, sf);
}

Test(config, sentinel_password_from_env)
{
	setenv("LOCKBROKER_SENTINEL_PASSWORD", "from-env", 1);
	cr_assert_eq(LOAD("--redis", "sentinel://s/m"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.sentinel_password, "from-env");
	cr_expect_null(C.redis.password);

	cr_assert_eq(LOAD("--redis", "redis://h"), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.sentinel_password, "only a sentinel:// URL takes it");
	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.sentinel_password);

	setenv("LOCKBROKER_SENTINEL_PASSWORD", "", 1);
	cr_assert_eq(LOAD("--redis", "sentinel://s/m"), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.sentinel_password, "an empty variable means no password");
}

Test(config, sentinel_password_env_too_long)
{
	char big[4098];

	memset(big, 'h', sizeof(big));
	memcpy(big, "hunter2", 7);
	big[4096] = '\0';
	setenv("LOCKBROKER_SENTINEL_PASSWORD", big, 1);
	cr_assert_eq(LOAD("--redis", "sentinel://s/m"), CONFIG_OK, "%s", err);
	cr_expect_eq(strlen(C.redis.sentinel_password), 4096);
	big[4096] = 'h';
	big[4097] = '\0';
	setenv("LOCKBROKER_SENTINEL_PASSWORD", big, 1);
	expect_error(LOAD("--redis", "sentinel://s/m"), "LOCKBROKER_SENTINEL_PASSWORD");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
}

/*
 * A password file named in the URL (before + the file's name) is read like
 * the other secret files; the message names it as what says. The variable
 * env is set: it is never a fallback for a bad file.
 */
static void expect_url_file_errors(const char *before, const char *what, const char *env)
{
	char url[512], big[4098];

	setenv(env, "from-env", 1);
	snprintf(url, sizeof(url), "%s/nonexistent/pw", before);
	expect_error(LOAD("--redis", url), "/nonexistent/pw");
	cr_expect_not_null(strstr(err, what), "%s", err);

	snprintf(url, sizeof(url), "%s%s", before, write_str("e", "\n"));
	expect_error(LOAD("--redis", url), "empty");

	snprintf(url, sizeof(url), "%s%s", before, write_file("nul", "hunter2\0x", 9));
	expect_error(LOAD("--redis", url), "NUL");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	memset(big, 'h', sizeof(big));
	memcpy(big, "hunter2", 7);
	snprintf(url, sizeof(url), "%s%s", before, write_file("big", big, 4097));
	expect_error(LOAD("--redis", url), "4096");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	snprintf(url, sizeof(url), "%s%s", before, dir);
	expect_error(LOAD("--redis", url), dir);

	snprintf(url, sizeof(url), "%spw", before);
	expect_error(LOAD("--redis", url), "absolute");
}

/* Each of n bad Redis URLs, given as a flag and in a config file, is
 * refused without showing the password hunter2. */
static void expect_errors_hide_password(const char *const *bad, size_t n)
{
	char json[256];

	for (size_t i = 0; i < n; i++) {
		expect_error(LOAD("--redis", bad[i]), "--redis");
		cr_expect_null(strstr(err, "hunter2"), "%s", err);
		snprintf(json, sizeof(json), "{\"redis\": \"%s\"}", bad[i]);
		expect_error(LOAD("--config", write_str("r.json", json)), "\"redis\"");
		cr_expect_null(strstr(err, "hunter2"), "%s", err);
	}
}

Test(config, sentinel_password_file_errors)
{
	expect_url_file_errors("sentinel://s/m?sentinel_password_file=", "sentinel password file",
			       "LOCKBROKER_SENTINEL_PASSWORD");
}

Test(config, sentinel_errors_never_show_the_password)
{
	static const char *const bad[] = {
		"sentinel://:hunter2@s:0/m",
		"sentinel://:hunter2@s,,t/m",
		"sentinel://:hunter2@s",
		"sentinel://:hunter2@s/m?db=1&db=2",
		"sentinel://:hunter2@s/m?hunter2=1",
		"sentinel://alice:hunter2@s/m",
		"sentinel://s/hunter2?x=1",
	};

	expect_errors_hide_password(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(config, redis_batch_max)
{
	cr_assert_eq(LOAD("--redis-batch-max", "0"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_batch_max, 0);
	cr_assert_eq(LOAD("--redis-batch-max=1024"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_batch_max, 1024);
	expect_error(LOAD("--redis-batch-max", "1025"), "--redis-batch-max");
	cr_expect_not_null(strstr(err, "0..1024"), "%s", err);
	expect_error(LOAD("--redis-batch-max=-1"), "--redis-batch-max");
	expect_error(LOAD("--redis-batch-max", "8x"), "--redis-batch-max");
}

Test(config, redis_wait_flags)
{
	cr_assert_eq(LOAD("--redis-wait-replicas", "2", "--redis-wait-ms=250"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_wait_replicas, 2);
	cr_expect_eq(C.redis_wait_ms, 250);

	cr_assert_eq(LOAD("--redis-wait-replicas", "0", "--redis-wait-ms", "1"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_wait_replicas, 0);
	cr_expect_eq(C.redis_wait_ms, 1);
	cr_assert_eq(LOAD("--redis-wait-replicas", "16", "--redis-wait-ms", "10000"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_wait_replicas, 16);
	cr_expect_eq(C.redis_wait_ms, 10000);

	expect_error(LOAD("--redis-wait-replicas", "17"), "--redis-wait-replicas");
	cr_expect_not_null(strstr(err, "0..16"), "%s", err);
	expect_error(LOAD("--redis-wait-replicas=-1"), "--redis-wait-replicas");
	expect_error(LOAD("--redis-wait-replicas", "1x"), "--redis-wait-replicas");
	expect_error(LOAD("--redis-wait-replicas="), "--redis-wait-replicas");
	expect_error(LOAD("--redis-wait-ms", "0"), "--redis-wait-ms");
	cr_expect_not_null(strstr(err, "1..10000"), "%s", err);
	expect_error(LOAD("--redis-wait-ms", "10001"), "--redis-wait-ms");
	expect_error(LOAD("--redis-wait-ms", "5s"), "--redis-wait-ms");
	expect_error(LOAD("--redis-wait-ms"), "--redis-wait-ms");
}

Test(config, redis_wait_in_config_file)
{
	const char *f = write_str("c.json", "{\"redis-wait-replicas\": 1, \"redis-wait-ms\": 2000}");

	cr_assert_eq(LOAD("--config", f), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_wait_replicas, 1);
	cr_expect_eq(C.redis_wait_ms, 2000);
	cr_assert_eq(LOAD("--config", f, "--redis-wait-replicas", "3"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis_wait_replicas, 3, "the flag wins");
	cr_expect_eq(C.redis_wait_ms, 2000);

	expect_error(LOAD("--config", write_str("t.json", "{\"redis-wait-replicas\": \"1\"}")),
		     "\"redis-wait-replicas\"");
	expect_error(LOAD("--config", write_str("t.json", "{\"redis-wait-ms\": 0}")), "\"redis-wait-ms\"");
	expect_error(LOAD("--config", write_str("t.json", "{\"redis-wait-replicas\": 17}")),
		     "\"redis-wait-replicas\"");
}

/* Loads `live` into C and `fresh` into F, applies the reload; the names to
 * restart for in restart. */
static void reload(const char *const *live, const char *const *fresh, char *restart, size_t len)
{
	cr_assert_eq(load_into(&C, live), CONFIG_OK, "%s", err);
	cr_assert_eq(load_into(&F, fresh), CONFIG_OK, "%s", err);
	config_apply_reload(&C, &F, restart, len);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(config, reload_same_needs_no_restart)
{
	const char *sf = write_str("spw", "s3\n");
	char url[512], restart[256];

	snprintf(url, sizeof(url), "sentinel://:pw@s1,s2:1/m?db=1&sentinel_password_file=%s", sf);
	reload(ARGS("--redis", url, "--redis-wait-replicas", "2", "--redis-wait-ms", "100"),
	       ARGS("--redis", url, "--redis-wait-replicas", "2", "--redis-wait-ms", "100"),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "");
}

Test(config, reload_wait_flags_need_restart)
{
	char restart[256];

	reload(ARGS("--log-level", "info"), ARGS("--redis-wait-replicas", "1", "--log-level", "debug"),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis-wait-replicas");
	cr_expect_eq(C.redis_wait_replicas, 0, "not applied live");
	cr_expect_eq(C.log_level, LOG_DEBUG, "what can change live still does");

	reload(ARGS("--redis-wait-replicas", "1"), ARGS("--redis-wait-replicas", "1", "--redis-wait-ms", "600"),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis-wait-ms");
	cr_expect_eq(C.redis_wait_ms, 500, "not applied live");

	reload(ARGS("--redis-wait-replicas", "3", "--redis-wait-ms", "10"), ARGS("--pool", "4"),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis-wait-replicas redis-wait-ms");
}

Test(config, reload_sentinel_changes_need_restart)
{
	static const char *const base = "sentinel://:pw@s1,s2:1/m?db=1";
	static const char *const changed[] = {
		"redis://s1:26379/1",                /* kind */
		"sentinel://:pw@s1/m?db=1",          /* fewer sentinels */
		"sentinel://:pw@s2:1,s1/m?db=1",     /* order */
		"sentinel://:pw@s1,s3:1/m?db=1",     /* host */
		"sentinel://:pw@s1,s2:2/m?db=1",     /* port */
		"sentinel://:pw@s1,s2:1/m2?db=1",    /* master name */
		"sentinel://:pw@s1,s2:1/m?db=2",     /* db */
		"sentinel://:pw2@s1,s2:1/m?db=1",    /* master password */
		"sentinel://s1,s2:1/m?db=1",         /* master password gone */
	};
	char restart[256];

	for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
		reload(ARGS("--redis", base), ARGS("--redis", changed[i]), restart, sizeof(restart));
		cr_expect_str_eq(restart, "redis", "%s", changed[i]);
	}
}

Test(config, reload_sentinel_password_change_needs_restart)
{
	const char *a = write_str("a", "one\n"), *b = write_str("b", "two\n"), *c = write_str("c", "one");
	char ua[512], ub[512], uc[512], restart[256];

	snprintf(ua, sizeof(ua), "sentinel://s/m?sentinel_password_file=%s", a);
	snprintf(ub, sizeof(ub), "sentinel://s/m?sentinel_password_file=%s", b);
	snprintf(uc, sizeof(uc), "sentinel://s/m?sentinel_password_file=%s", c);
	reload(ARGS("--redis", ua), ARGS("--redis", ub), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis", "another content");
	reload(ARGS("--redis", ua), ARGS("--redis", uc), restart, sizeof(restart));
	cr_expect_str_eq(restart, "", "another file, the same content");
	reload(ARGS("--redis", ua), ARGS("--redis", "sentinel://s/m"), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis", "the password gone");

	setenv("LOCKBROKER_SENTINEL_PASSWORD", "env1", 1);
	cr_assert_eq(load_into(&C, ARGS("--redis", "sentinel://s/m")), CONFIG_OK, "%s", err);
	setenv("LOCKBROKER_SENTINEL_PASSWORD", "env2", 1);
	cr_assert_eq(load_into(&F, ARGS("--redis", "sentinel://s/m")), CONFIG_OK, "%s", err);
	config_apply_reload(&C, &F, restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis", "the variable changed");
}

Test(config, cluster_url)
{
	cr_assert_eq(LOAD("--redis", "cluster://n1,[::1]:7001,10.0.0.3:7002"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis.kind, URL_CLUSTER);
	cr_assert_eq(C.redis.nseeds, 3);
	expect_host(&C.redis.seeds[0], "n1", 6379);
	expect_host(&C.redis.seeds[1], "::1", 7001);
	expect_host(&C.redis.seeds[2], "10.0.0.3", 7002);
	cr_expect_eq(C.redis.db, 0);
	cr_expect_null(C.redis.password);
	cr_expect_null(C.redis.password_file);
	cr_expect_null(C.redis.sentinel_password);

	cr_assert_eq(LOAD("--config", write_str("c.json", "{\"redis\": \"cluster://:pw@n:7000\"}")), CONFIG_OK,
		     "%s", err);
	cr_expect_eq(C.redis.kind, URL_CLUSTER);
	cr_expect_str_eq(C.redis.password, "pw");
	cr_expect_eq(C.redis.seeds[0].port, 7000);
}

Test(config, cluster_password_from_file)
{
	const char *cf = write_str("cpw", "cluster-secret\r\n");
	char url[512];

	snprintf(url, sizeof(url), "cluster://n1,n2:7001?password_file=%s", cf);
	cr_assert_eq(LOAD("--redis", url), CONFIG_OK, "%s", err);
	cr_assert_not_null(C.redis.password);
	cr_expect_str_eq(C.redis.password, "cluster-secret", "one trailing \\r\\n dropped");
	cr_expect_str_eq(C.redis.password_file, cf);
	cr_expect_eq(C.redis.nseeds, 2);

	snprintf(url, sizeof(url), "{\"redis\": \"cluster://n?password_file=%s\"}", cf);
	cr_assert_eq(LOAD("--config", write_str("c.json", url)), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "cluster-secret");
}

Test(config, cluster_password_precedence)
{
	const char *pwfile = write_str("pw", "from-flag-file\n");
	const char *cf = write_str("cpw", "from-url-file\n");
	char url[512];

	setenv("LOCKBROKER_REDIS_PASSWORD", "from-env", 1);
	setenv("LOCKBROKER_SENTINEL_PASSWORD", "sentinel-env", 1);
	cr_assert_eq(LOAD("--redis", "cluster://:from-url@n", "--redis-password-file", pwfile), CONFIG_OK,
		     "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url");
	cr_expect_null(C.redis.sentinel_password, "only a sentinel:// URL takes it");

	snprintf(url, sizeof(url), "cluster://n?password_file=%s", cf);
	cr_assert_eq(LOAD("--redis", url, "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url-file", "the URL's file wins over the flag's");
	cr_assert_eq(LOAD("--redis-password-file", pwfile, "--redis", url), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url-file", "whatever the order");
	cr_assert_eq(LOAD("--redis", url), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-url-file", "and over the variable");

	cr_assert_eq(LOAD("--redis", "cluster://n", "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-flag-file");
	cr_assert_eq(LOAD("--redis", "cluster://n"), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redis.password, "from-env");
	unsetenv("LOCKBROKER_REDIS_PASSWORD");
	cr_assert_eq(LOAD("--redis", "cluster://n"), CONFIG_OK, "%s", err);
	cr_expect_null(C.redis.password);
}

Test(config, cluster_password_file_errors)
{
	expect_url_file_errors("cluster://n?password_file=", "cluster URL password_file",
			       "LOCKBROKER_REDIS_PASSWORD");
	expect_error(LOAD("--redis", "cluster://n?password_file=/a&password_file=/b"), "given twice");
}

Test(config, cluster_password_and_password_file_refused)
{
	const char *cf = write_str("cpw", "from-file\n");
	char url[512], json[640];

	snprintf(url, sizeof(url), "cluster://:hunter2@n?password_file=%s", cf);
	expect_error(LOAD("--redis", url), "--redis");
	cr_expect_not_null(strstr(err, "both a password and password_file"), "%s", err);
	cr_expect_null(strstr(err, "hunter2"), "%s", err);

	snprintf(json, sizeof(json), "{\"redis\": \"%s\"}", url);
	expect_error(LOAD("--config", write_str("r.json", json)), "\"redis\"");
	cr_expect_not_null(strstr(err, "both a password and password_file"), "%s", err);
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, cluster_errors_never_show_the_password)
{
	static const char *const bad[] = {
		"cluster://:hunter2@n:0",
		"cluster://:hunter2@n,,m",
		"cluster://:hunter2@",
		"cluster://:hunter2@n/0",
		"cluster://:hunter2@n?db=0",
		"cluster://:hunter2@n?hunter2=1",
		"cluster://:hunter2@n#hunter2",
		"cluster://alice:hunter2@n",
		"cluster://:hunter2@n?password_file=/p",
	};

	expect_errors_hide_password(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(config, cluster_rejects_db)
{
	expect_error(LOAD("--redis", "cluster://n/1"), "Redis Cluster has only db 0");
	expect_error(LOAD("--redis", "cluster://n?db=1"), "Redis Cluster has only db 0");
}

/* WAIT works per master: a cluster may ask for replica acks too. */
Test(config, cluster_with_wait_replicas)
{
	cr_assert_eq(LOAD("--redis", "cluster://n1,n2", "--redis-wait-replicas", "1", "--redis-wait-ms", "100"),
		     CONFIG_OK, "%s", err);
	cr_expect_eq(C.redis.kind, URL_CLUSTER);
	cr_expect_eq(C.redis_wait_replicas, 1);
	cr_expect_eq(C.redis_wait_ms, 100);
}

Test(config, reload_cluster_same_needs_no_restart)
{
	const char *a = write_str("a", "one\n"), *c = write_str("c", "one");
	char ua[512], uc[512], restart[256];

	reload(ARGS("--redis", "cluster://:pw@n1,n2:7001"), ARGS("--redis", "cluster://:pw@n1,n2:7001"),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "");

	snprintf(ua, sizeof(ua), "cluster://n1?password_file=%s", a);
	snprintf(uc, sizeof(uc), "cluster://n1?password_file=%s", c);
	reload(ARGS("--redis", ua), ARGS("--redis", uc), restart, sizeof(restart));
	cr_expect_str_eq(restart, "", "another file, the same content");
}

Test(config, reload_cluster_changes_need_restart)
{
	static const char *const base = "cluster://:pw@n1,n2:7001";
	static const char *const changed[] = {
		"redis://:pw@n1:6379",                       /* kind */
		"sentinel://:pw@n1,n2:7001/m",               /* kind */
		"cluster://:pw@n1",                          /* fewer seeds */
		"cluster://:pw@n1,n2:7001,n3",               /* more seeds */
		"cluster://:pw@n2:7001,n1",                  /* order */
		"cluster://:pw@n1,n3:7001",                  /* host */
		"cluster://:pw@n1,n2:7002",                  /* port */
		"cluster://:pw2@n1,n2:7001",                 /* password */
		"cluster://n1,n2:7001",                      /* password gone */
	};
	const char *b = write_str("b", "two\n");
	char ub[512], restart[256];

	for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
		reload(ARGS("--redis", base), ARGS("--redis", changed[i]), restart, sizeof(restart));
		cr_expect_str_eq(restart, "redis", "%s", changed[i]);
	}
	snprintf(ub, sizeof(ub), "cluster://n1,n2:7001?password_file=%s", b);
	reload(ARGS("--redis", base), ARGS("--redis", ub), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis", "the file's content differs");
}

/* ---- --redlock: 3, 5 or 7 independent masters ---------------------------- */

#define L3 "redis://r1,redis://r2:6380/2,unix:///run/r3.sock?db=3"
#define L5 "redis://a1,redis://a2,redis://a3,redis://a4,redis://a5"
#define L7 "redis://b1,redis://b2,redis://b3,redis://b4,redis://b5,redis://b6,redis://b7"

static void expect_tcp_master(int i, const char *host, int port, int db)
{
	const redis_addr_t *m = &C.redlock[i];

	cr_expect_eq(m->kind, URL_TCP, "master %d", i + 1);
	cr_expect_str_eq(m->host, host, "master %d", i + 1);
	cr_expect_eq(m->port, port, "master %d", i + 1);
	cr_expect_eq(m->db, db, "master %d", i + 1);
}

Test(config, redlock_three_five_seven)
{
	char name[16];

	cr_assert_eq(LOAD("--redlock", L3), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 3);
	expect_tcp_master(0, "r1", 6379, 0);
	expect_tcp_master(1, "r2", 6380, 2);
	cr_expect_eq(C.redlock[2].kind, URL_UNIX);
	cr_expect_str_eq(C.redlock[2].path, "/run/r3.sock");
	cr_expect_eq(C.redlock[2].db, 3);
	for (int i = 0; i < 3; i++)
		cr_expect_null(C.redlock[i].password, "master %d", i + 1);
	cr_expect_eq(C.redis_wait_replicas, 0);

	cr_assert_eq(LOAD("--redlock=" L5), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 5);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "a%d", i + 1);
		expect_tcp_master(i, name, 6379, 0);
	}

	cr_assert_eq(LOAD("--redlock", L7), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 7);
	for (int i = 0; i < 7; i++) {
		snprintf(name, sizeof(name), "b%d", i + 1);
		expect_tcp_master(i, name, 6379, 0);
	}

	cr_assert_eq(LOAD("--redlock", "redis://[::1]:7000,redis://10.0.0.2,unix:///a.sock"), CONFIG_OK,
		     "%s", err);
	expect_tcp_master(0, "::1", 7000, 0);
	expect_tcp_master(1, "10.0.0.2", 6379, 0);

	cr_assert_eq(LOAD0(), CONFIG_OK, "%s", err);
	cr_expect_eq(C.nredlock, 0, "none by default");
}

Test(config, redlock_in_config_file)
{
	cr_assert_eq(LOAD("--config", write_str("c.json", "{\"redlock\": \"" L3 "\"}")), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 3);
	expect_tcp_master(1, "r2", 6380, 2);
	cr_expect_str_eq(C.redlock[2].path, "/run/r3.sock");

	expect_error(LOAD("--config", write_str("n.json", "{\"redlock\": [\"redis://a\"]}")), "\"redlock\"");
	cr_expect_not_null(strstr(err, "must be a string"), "%s", err);
	expect_error(LOAD("--config", write_str("t.json", "{\"redlock\": \"redis://a,redis://b\"}")),
		     "\"redlock\"");
	cr_expect_not_null(strstr(err, "3, 5 or 7"), "%s", err);
}

Test(config, redlock_wrong_counts_refused)
{
	static const char *const bad[] = {
		"redis://a",
		"redis://a,redis://b",
		"redis://a,redis://b,redis://c,redis://d",
		"redis://a,redis://b,redis://c,redis://d,redis://e,redis://f",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		expect_error(LOAD("--redlock", bad[i]), "--redlock");
		cr_expect_not_null(strstr(err, "3, 5 or 7"), "%s: %s", bad[i], err);
	}
	expect_error(LOAD("--redlock", L7 ",redis://b8"), "--redlock");
	cr_expect_not_null(strstr(err, "more than 7"), "%s", err);
}

Test(config, redlock_empty_element_refused)
{
	expect_error(LOAD("--redlock", "redis://a,,redis://b,redis://c"), "empty URL");
	cr_expect_not_null(strstr(err, "master 2"), "%s", err);
	expect_error(LOAD("--redlock", ",redis://a,redis://b,redis://c"), "empty URL");
	cr_expect_not_null(strstr(err, "master 1"), "%s", err);
	expect_error(LOAD("--redlock", "redis://a,redis://b,redis://c,"), "empty URL");
	cr_expect_not_null(strstr(err, "master 4"), "%s", err);
	expect_error(LOAD("--redlock="), "--redlock");
	expect_error(LOAD("--redlock", "redis://a,redis://b,redis://c:0"), "master 3");
}

Test(config, redlock_duplicates_refused)
{
	expect_error(LOAD("--redlock", "redis://a,redis://b,redis://a"), "masters 1 and 3 are the same");
	expect_error(LOAD("--redlock", "redis://a,redis://a:6379,redis://b"), "masters 1 and 2 are the same");
	expect_error(LOAD("--redlock", "redis://a/1,redis://b,redis://a:6379/1"), "masters 1 and 3");
	expect_error(LOAD("--redlock", "redis://[::1],redis://b,redis://[::1]:6379"), "masters 1 and 3");
	expect_error(LOAD("--redlock", "unix:///r.sock,redis://b,unix:///r.sock?db=0"), "masters 1 and 3");
	expect_error(LOAD("--redlock", "redis://:one@a,redis://:two@a,redis://c"), "masters 1 and 2");
	cr_expect_null(strstr(err, "one"), "%s", err);
	cr_expect_null(strstr(err, "two"), "%s", err);

	/* Not the same: another port, or a host and a socket path spelled alike. */
	cr_assert_eq(LOAD("--redlock", "redis://a,redis://a:6380,redis://b"), CONFIG_OK, "%s", err);
	cr_assert_eq(LOAD("--redlock", "redis://x,unix:///x,redis://b"), CONFIG_OK, "%s", err);
}

Test(config, redlock_refuses_sentinel_and_cluster)
{
	expect_error(LOAD("--redlock", "redis://a,sentinel://s/m,redis://c"), "--redlock");
	cr_expect_not_null(strstr(err, "master 2"), "%s", err);
	cr_expect_not_null(strstr(err, "not a Sentinel set or a Cluster"), "%s", err);
	expect_error(LOAD("--redlock", "redis://a,redis://b,cluster://n"), "--redlock");
	cr_expect_not_null(strstr(err, "master 3"), "%s", err);
	cr_expect_not_null(strstr(err, "not a Sentinel set or a Cluster"), "%s", err);
	expect_error(LOAD("--config", write_str("c.json", "{\"redlock\": \"cluster://n,redis://b,redis://c\"}")),
		     "\"redlock\"");
	cr_expect_not_null(strstr(err, "not a Sentinel set or a Cluster"), "%s", err);
	expect_error(LOAD("--redlock", "rediss://a,redis://b,redis://c"), "TLS");
}

Test(config, redlock_and_redis_exclude_each_other)
{
	char json[256];

	expect_error(LOAD("--redlock", L3, "--redis", "redis://h"), "exclude each other");
	expect_error(LOAD("--redis", "redis://h", "--redlock", L3), "exclude each other");
	expect_error(LOAD("--redlock", L3, "--redis", CONFIG_DEFAULT_REDIS), "exclude each other");

	expect_error(LOAD("--config", write_str("a.json", "{\"redis\": \"redis://h\"}"), "--redlock", L3),
		     "exclude each other");
	expect_error(LOAD("--config", write_str("b.json", "{\"redlock\": \"" L3 "\"}"), "--redis", "redis://h"),
		     "exclude each other");
	snprintf(json, sizeof(json), "{\"redis\": \"redis://h\", \"redlock\": \"%s\"}", L3);
	expect_error(LOAD("--config", write_str("c.json", json)), "exclude each other");
}

Test(config, redlock_refuses_wait_replicas)
{
	expect_error(LOAD("--redlock", L3, "--redis-wait-replicas", "1"), "--redis-wait-replicas");
	cr_expect_not_null(strstr(err, "--redlock"), "%s", err);
	expect_error(LOAD("--redis-wait-replicas=1", "--redlock", L5), "--redis-wait-replicas");
	expect_error(LOAD("--config", write_str("c.json", "{\"redis-wait-replicas\": 2}"), "--redlock", L3),
		     "--redis-wait-replicas");

	cr_assert_eq(LOAD("--redlock", L3, "--redis-wait-replicas", "0"), CONFIG_OK, "%s", err);
	cr_expect_eq(C.nredlock, 3);
	cr_assert_eq(LOAD("--redis-wait-replicas", "1", "--redis-wait-replicas", "0", "--redlock", L3), CONFIG_OK,
		     "the last value counts: %s", err);
}

Test(config, redlock_url_passwords_kept)
{
	cr_assert_eq(LOAD("--redlock", "redis://:p1@a,redis://:p2@b,redis://:p3@c/4"), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 3);
	cr_expect_str_eq(C.redlock[0].password, "p1");
	cr_expect_str_eq(C.redlock[1].password, "p2");
	cr_expect_str_eq(C.redlock[2].password, "p3");
	expect_tcp_master(2, "c", 6379, 4);
}

Test(config, redlock_password_file_and_env)
{
	const char *pwfile = write_str("pw", "from-file\r\n");
	static const char *const list = "redis://:own@a,redis://b,unix:///c.sock";

	setenv("LOCKBROKER_REDIS_PASSWORD", "from-env", 1);
	cr_assert_eq(LOAD("--redlock", list, "--redis-password-file", pwfile), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redlock[0].password, "own", "the URL's own wins");
	cr_expect_str_eq(C.redlock[1].password, "from-file", "the file over the variable");
	cr_expect_str_eq(C.redlock[2].password, "from-file");

	cr_assert_eq(LOAD("--redis-password-file", pwfile, "--redlock", list), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redlock[1].password, "from-file", "whatever the order");

	cr_assert_eq(LOAD("--redlock", list), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redlock[0].password, "own");
	cr_expect_str_eq(C.redlock[1].password, "from-env");
	cr_expect_str_eq(C.redlock[2].password, "from-env");

	setenv("LOCKBROKER_REDIS_PASSWORD", "", 1);
	cr_assert_eq(LOAD("--redlock", list), CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redlock[0].password, "own");
	cr_expect_null(C.redlock[1].password, "an empty variable means no password");
	unsetenv("LOCKBROKER_REDIS_PASSWORD");
	cr_assert_eq(LOAD("--redlock", list), CONFIG_OK, "%s", err);
	cr_expect_null(C.redlock[2].password);

	expect_error(LOAD("--redlock", list, "--redis-password-file", "/nonexistent/pw"), "/nonexistent/pw");
}

/* As with --redis: the password file is not read when no master needs it. */
Test(config, redlock_password_file_unread_when_every_url_has_one)
{
	cr_assert_eq(LOAD("--redlock", "redis://:p1@a,redis://:p2@b,redis://:p3@c", "--redis-password-file",
			  "/nonexistent/pw"),
		     CONFIG_OK, "%s", err);
	cr_expect_str_eq(C.redlock[1].password, "p2");
}

Test(config, redlock_errors_never_show_the_password)
{
	static const char *const bad[] = {
		"redis://:hunter2@a:0,redis://b,redis://c",
		"redis://:hunter2@a,redis://b,redis://:hunter2@c/x",
		"redis://:hunter2@a,redis://b",
		"redis://:hunter2@a,redis://b,redis://c,redis://:hunter2@d",
		"redis://:hunter2@a,,redis://c",
		"redis://:hunter2@a,redis://:hunter2@a,redis://c",
		"redis://:hunter2@a,sentinel://:hunter2@s/m,redis://c",
		"redis://a,cluster://:hunter2@n,redis://c",
		"redis://alice:hunter2@a,redis://b,redis://c",
		"redis://:hunter2,x@a,redis://b,redis://c",
		"redis://:hunter2@a?x=1,redis://b,redis://c",
	};
	char json[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		expect_error(LOAD("--redlock", bad[i]), "--redlock");
		cr_expect_null(strstr(err, "hunter2"), "%s", err);
		snprintf(json, sizeof(json), "{\"redlock\": \"%s\"}", bad[i]);
		expect_error(LOAD("--config", write_str("r.json", json)), "\"redlock\"");
		cr_expect_null(strstr(err, "hunter2"), "%s", err);
	}

	/* Refused by the checks after the flags. */
	expect_error(LOAD("--redlock", "redis://:hunter2@a,redis://b,redis://c", "--redis", "redis://:hunter2@h"),
		     "exclude each other");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	expect_error(LOAD("--redlock", "redis://:hunter2@a,redis://b,redis://c", "--redis-wait-replicas", "1"),
		     "--redis-wait-replicas");
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
}

Test(config, redlock_later_replaces_earlier)
{
	cr_assert_eq(LOAD("--redlock", "redis://:x@a1,redis://a2,redis://a3,redis://a4,redis://a5", "--redlock",
			  L3),
		     CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 3);
	expect_tcp_master(0, "r1", 6379, 0);
	cr_expect_null(C.redlock[0].password, "nothing left of the earlier list");

	cr_assert_eq(LOAD("--redlock", L3, "--redlock", L7), CONFIG_OK, "%s", err);
	cr_assert_eq(C.nredlock, 7);
	expect_tcp_master(6, "b7", 6379, 0);

	cr_assert_eq(LOAD("--config", write_str("c.json", "{\"redlock\": \"" L7 "\"}"), "--redlock", L5), CONFIG_OK,
		     "%s", err);
	cr_assert_eq(C.nredlock, 5, "the flag replaces the file's list");
	expect_tcp_master(4, "a5", 6379, 0);

	/* A good list does not rescue a bad one before it: the first error stops. */
	expect_error(LOAD("--redlock", "redis://a,redis://b", "--redlock", L3), "3, 5 or 7");
}

Test(config, reload_redlock_same_needs_no_restart)
{
	const char *a = write_str("a", "one\n"), *c = write_str("c", "one");
	char restart[256];

	reload(ARGS("--redlock", L3), ARGS("--redlock", L3), restart, sizeof(restart));
	cr_expect_str_eq(restart, "");
	reload(ARGS("--redlock", "redis://:p@a,redis://b,redis://c", "--log-level", "info"),
	       ARGS("--redlock", "redis://:p@a,redis://b,redis://c", "--log-level", "debug"), restart,
	       sizeof(restart));
	cr_expect_str_eq(restart, "");
	cr_expect_eq(C.log_level, LOG_DEBUG, "what can change live still does");
	reload(ARGS("--redlock", L5, "--redis-password-file", a), ARGS("--redlock", L5, "--redis-password-file", c),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "", "another file, the same content");
}

Test(config, reload_redlock_changes_need_restart)
{
	static const char *const base = "redis://:pw@a,redis://b:6380/1,unix:///c.sock";
	static const char *const changed[] = {
		"redis://:pw@a,unix:///c.sock,redis://b:6380/1",                     /* order */
		"redis://:pw@x,redis://b:6380/1,unix:///c.sock",                     /* host */
		"redis://:pw@a,redis://b:6381/1,unix:///c.sock",                     /* port */
		"redis://:pw@a,redis://b:6380/2,unix:///c.sock",                     /* db */
		"redis://:pw@a,redis://b:6380/1,unix:///d.sock",                     /* path */
		"redis://:pw2@a,redis://b:6380/1,unix:///c.sock",                    /* password */
		"redis://a,redis://b:6380/1,unix:///c.sock",                         /* password gone */
		"redis://:pw@a,redis://b:6380/1,unix:///c.sock,redis://d,redis://e", /* more masters */
	};
	char restart[256];

	for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
		reload(ARGS("--redlock", base), ARGS("--redlock", changed[i]), restart, sizeof(restart));
		cr_expect_str_eq(restart, "redlock", "%s", changed[i]);
		cr_expect_str_eq(C.redlock[0].host, "a", "not applied live");
	}

	reload(ARGS("--pool", "4"), ARGS("--redlock", base), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redlock", "from the default --redis");
	cr_expect_eq(C.nredlock, 0, "not applied live");
	reload(ARGS("--redlock", base), ARGS("--pool", "4"), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redlock", "back to the default --redis");
	reload(ARGS("--redis", "redis://h"), ARGS("--redlock", base), restart, sizeof(restart));
	cr_expect_str_eq(restart, "redis redlock");
}

Test(config, reload_redlock_password_file_change_needs_restart)
{
	const char *a = write_str("a", "one\n"), *b = write_str("b", "two\n");
	char restart[256];

	reload(ARGS("--redlock", L3, "--redis-password-file", a), ARGS("--redlock", L3, "--redis-password-file", b),
	       restart, sizeof(restart));
	cr_expect_str_eq(restart, "redlock", "another content: '%s'", restart);

	setenv("LOCKBROKER_REDIS_PASSWORD", "env1", 1);
	cr_assert_eq(load_into(&C, ARGS("--redlock", L3)), CONFIG_OK, "%s", err);
	setenv("LOCKBROKER_REDIS_PASSWORD", "env2", 1);
	cr_assert_eq(load_into(&F, ARGS("--redlock", L3)), CONFIG_OK, "%s", err);
	config_apply_reload(&C, &F, restart, sizeof(restart));
	cr_expect_str_eq(restart, "redlock", "the variable changed: '%s'", restart);
}
