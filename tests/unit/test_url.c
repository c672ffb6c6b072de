/*
 * test_url.c - listen and Redis URL parsing: every accepted form, every
 * rejection rule, and that no error message ever carries a password.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "broker/base/url.h"

static listen_addr_t L;
static redis_addr_t R;
static char err[256];

static void fini_redis(void)
{
	redis_addr_clear(&R);
}

static int listen_ok(const char *url)
{
	memset(&L, 0xa5, sizeof(L));
	err[0] = '\0';
	return url_parse_listen(url, &L, err, sizeof(err));
}

static void expect_listen_bad(const char *url)
{
	memset(&L, 0xa5, sizeof(L));
	strcpy(err, "");
	cr_expect_eq(url_parse_listen(url, &L, err, sizeof(err)), -1, "accepted bad listen URL '%s'", url);
	cr_expect_neq(err[0], '\0', "no message for '%s'", url);
	cr_expect_eq(L.host[0], '\0', "host not cleared for '%s'", url);
	cr_expect_eq(L.path[0], '\0', "path not cleared for '%s'", url);
}

static int redis_parse(const char *url)
{
	redis_addr_clear(&R);
	err[0] = '\0';
	return url_parse_redis(url, &R, err, sizeof(err));
}

static void expect_redis_bad(const char *url)
{
	cr_expect_eq(redis_parse(url), -1, "accepted bad Redis URL '%s'", url);
	cr_expect_neq(err[0], '\0', "no message for '%s'", url);
	cr_expect_null(R.password, "password kept after failure of '%s'", url);
	cr_expect_null(strstr(err, "hunter2"), "message for '%s' leaks the password: %s", url, err);
}

Test(url, listen_tcp_ipv4)
{
	cr_assert_eq(listen_ok("tcp://127.0.0.1:7380"), 0, "%s", err);
	cr_expect_eq(L.kind, URL_TCP);
	cr_expect_str_eq(L.host, "127.0.0.1");
	cr_expect_eq(L.port, 7380);
}

Test(url, listen_tcp_name_and_port_range)
{
	cr_assert_eq(listen_ok("tcp://broker-1.example_net.local:65535"), 0, "%s", err);
	cr_expect_str_eq(L.host, "broker-1.example_net.local");
	cr_expect_eq(L.port, 65535);
	cr_assert_eq(listen_ok("tcp://localhost:0"), 0, "%s", err);
	cr_expect_eq(L.port, 0, "port 0 means any free port");
	cr_assert_eq(listen_ok("tcp://h:00080"), 0, "%s", err);
	cr_expect_eq(L.port, 80);
}

Test(url, listen_tcp_ipv6_brackets_dropped)
{
	cr_assert_eq(listen_ok("tcp://[::1]:7380"), 0, "%s", err);
	cr_expect_str_eq(L.host, "::1");
	cr_expect_eq(L.port, 7380);
	cr_assert_eq(listen_ok("tcp://[::]:1"), 0, "%s", err);
	cr_expect_str_eq(L.host, "::");
	cr_assert_eq(listen_ok("tcp://[2001:db8::10:1]:9"), 0, "%s", err);
	cr_expect_str_eq(L.host, "2001:db8::10:1");
	cr_assert_eq(listen_ok("tcp://[::ffff:127.0.0.1]:9"), 0, "%s", err);
	cr_expect_str_eq(L.host, "::ffff:127.0.0.1");
}

Test(url, listen_scheme_case_insensitive)
{
	cr_assert_eq(listen_ok("TCP://h:1"), 0, "%s", err);
	cr_expect_eq(L.kind, URL_TCP);
	cr_assert_eq(listen_ok("Unix:///s"), 0, "%s", err);
	cr_expect_eq(L.kind, URL_UNIX);
}

Test(url, listen_unix)
{
	cr_assert_eq(listen_ok("unix:///run/lockbroker/lockbroker.sock"), 0, "%s", err);
	cr_expect_eq(L.kind, URL_UNIX);
	cr_expect_str_eq(L.path, "/run/lockbroker/lockbroker.sock");
}

Test(url, listen_unix_path_length_limit)
{
	char url[256], path[URL_PATH_MAX + 2];

	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[URL_PATH_MAX] = '\0'; /* exactly 107 bytes */
	snprintf(url, sizeof(url), "unix://%s", path);
	cr_assert_eq(listen_ok(url), 0, "%s", err);
	cr_expect_eq(strlen(L.path), (size_t)URL_PATH_MAX);
	path[URL_PATH_MAX] = 'a';
	path[URL_PATH_MAX + 1] = '\0'; /* 108 bytes */
	snprintf(url, sizeof(url), "unix://%s", path);
	expect_listen_bad(url);
	cr_assert_eq(redis_parse(url), -1, "redis unix path too long accepted");
}

Test(url, listen_host_length_limit)
{
	char url[600], host[URL_HOST_MAX + 2];

	memset(host, 'h', sizeof(host));
	host[URL_HOST_MAX] = '\0';
	snprintf(url, sizeof(url), "tcp://%s:1", host);
	cr_assert_eq(listen_ok(url), 0, "%s", err);
	cr_expect_eq(strlen(L.host), (size_t)URL_HOST_MAX);
	host[URL_HOST_MAX] = 'h';
	host[URL_HOST_MAX + 1] = '\0';
	snprintf(url, sizeof(url), "tcp://%s:1", host);
	expect_listen_bad(url);
}

Test(url, listen_rejects)
{
	static const char *const bad[] = {
		"",
		"127.0.0.1:7380",          /* no scheme */
		"tcp:/127.0.0.1:7380",
		"http://127.0.0.1:7380",
		"udp://127.0.0.1:7380",
		"redis://127.0.0.1:6379",
		"tcp://127.0.0.1",         /* port required */
		"tcp://127.0.0.1:",        /* empty port */
		"tcp://:7380",             /* empty host */
		"tcp://",
		"tcp://h:65536",
		"tcp://h:-1",
		"tcp://h:+1",
		"tcp://h: 1",
		"tcp://h:1 ",
		"tcp://h:1x",
		"tcp://h:0x10",
		"tcp://h:99999999999999999999999",
		"tcp://h:1/",
		"tcp://h:1/x",
		"tcp://h:1?a=b",
		"tcp://h:1#f",
		"tcp://user@h:1",
		"tcp://h h:1",
		"tcp://h\t:1",
		"tcp://h:1:2",
		"tcp://::1:7380",          /* IPv6 needs brackets */
		"tcp://[::1:7380",
		"tcp://[::1]",             /* port still required */
		"tcp://[::1]7380",
		"tcp://[::1]:7380x",
		"tcp://[]:1",
		"tcp://[zz::1]:1",
		"tcp://[127.0.0.1]:1",     /* brackets are for IPv6 only */
		"tcp://[fe80::1%eth0]:1",  /* zone ids unsupported */
		"unix://",
		"unix://relative/path",
		"unix://localhost/tmp/s",
		"unix:///tmp/dir/",
		"unix:///",
		"unix:///tmp/s?x=1",
		"unix:///tmp/s#f",
		"unix:///tmp/a\tb",
		"unix:///tmp/a\x7f",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_listen_bad(bad[i]);
}

Test(url, listen_null_err_buffer_is_fine)
{
	cr_expect_eq(url_parse_listen("bogus", &L, NULL, 0), -1);
	cr_expect_eq(url_parse_listen("tcp://h:1", &L, NULL, 0), 0);
}

Test(url, format_listen_round_trip)
{
	static const char *const urls[] = {
		"tcp://127.0.0.1:7380", "tcp://[::1]:7380", "tcp://localhost:0",
		"unix:///run/lockbroker/lockbroker.sock",
	};
	char buf[256];

	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		cr_assert_eq(listen_ok(urls[i]), 0, "%s", err);
		url_format_listen(&L, buf, sizeof(buf));
		cr_expect_str_eq(buf, urls[i]);
	}
	cr_assert_eq(listen_ok("TCP://[::]:00080"), 0, "%s", err);
	url_format_listen(&L, buf, sizeof(buf));
	cr_expect_str_eq(buf, "tcp://[::]:80", "canonical form");
}

Test(url, format_listen_truncates_safely)
{
	char buf[8];

	cr_assert_eq(listen_ok("tcp://127.0.0.1:7380"), 0, "%s", err);
	memset(buf, 'x', sizeof(buf));
	url_format_listen(&L, buf, sizeof(buf));
	cr_expect_str_eq(buf, "tcp://1");
}

Test(url, redis_defaults, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://127.0.0.1:6379"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_TCP);
	cr_expect_str_eq(R.host, "127.0.0.1");
	cr_expect_eq(R.port, 6379);
	cr_expect_eq(R.db, 0);
	cr_expect_null(R.password);

	cr_assert_eq(redis_parse("redis://cache.internal"), 0, "%s", err);
	cr_expect_str_eq(R.host, "cache.internal");
	cr_expect_eq(R.port, 6379, "default port");
	cr_expect_eq(R.db, 0);
}

Test(url, redis_db, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://h/5"), 0, "%s", err);
	cr_expect_eq(R.db, 5);
	cr_expect_eq(R.port, 6379);
	cr_assert_eq(redis_parse("redis://h:7000/15"), 0, "%s", err);
	cr_expect_eq(R.port, 7000);
	cr_expect_eq(R.db, 15);
	cr_assert_eq(redis_parse("redis://h:7000/"), 0, "%s", err);
	cr_expect_eq(R.db, 0, "empty db path means 0");
	cr_assert_eq(redis_parse("redis://h/2147483647"), 0, "%s", err);
	cr_expect_eq(R.db, INT_MAX);
	expect_redis_bad("redis://h/2147483648");
	expect_redis_bad("redis://h/99999999999999999999");
}

Test(url, redis_ipv6, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://[::1]:6380/3"), 0, "%s", err);
	cr_expect_str_eq(R.host, "::1");
	cr_expect_eq(R.port, 6380);
	cr_expect_eq(R.db, 3);
	cr_assert_eq(redis_parse("redis://[::1]"), 0, "%s", err);
	cr_expect_eq(R.port, 6379);
}

Test(url, redis_password, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://:secret@h:6380/2"), 0, "%s", err);
	cr_assert_not_null(R.password);
	cr_expect_str_eq(R.password, "secret");
	cr_expect_str_eq(R.host, "h");
	cr_expect_eq(R.port, 6380);
	cr_expect_eq(R.db, 2);

	cr_assert_eq(redis_parse("redis://:pa:ss@h"), 0, "%s", err);
	cr_expect_str_eq(R.password, "pa:ss", "only the first ':' separates the user");

	cr_assert_eq(redis_parse("redis://:a@b@h/1"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a@b", "a raw '@' is tolerated: the last one ends the userinfo");
	cr_expect_str_eq(R.host, "h");
	cr_expect_eq(R.db, 1);

	cr_assert_eq(redis_parse("redis://:a/b@h"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a/b");
	cr_expect_str_eq(R.host, "h");
}

Test(url, redis_password_percent_decoding, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://:p%40ss%3aw%2F%25x@h"), 0, "%s", err);
	cr_expect_str_eq(R.password, "p@ss:w/%x");
	cr_assert_eq(redis_parse("redis://:%e2%82%AC@h"), 0, "%s", err);
	cr_expect_str_eq(R.password, "\xe2\x82\xac");
	expect_redis_bad("redis://:hunter2%4@h");
	expect_redis_bad("redis://:hunter2%@h");
	expect_redis_bad("redis://:hunter2%zz@h");
	expect_redis_bad("redis://:hunter2%g0@h");
	expect_redis_bad("redis://:hunter2%00@h");
}

Test(url, redis_empty_password_is_none, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://:@h"), 0, "%s", err);
	cr_expect_null(R.password);
	cr_assert_eq(redis_parse("redis://@h"), 0, "%s", err);
	cr_expect_null(R.password);
	cr_assert_eq(redis_parse("redis://default:@h"), 0, "%s", err);
	cr_expect_null(R.password);
}

Test(url, redis_acl_user, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("redis://default:pw@h"), 0, "%s", err);
	cr_expect_str_eq(R.password, "pw", "user 'default' is what AUTH PASSWORD means");
	expect_redis_bad("redis://alice:hunter2@h");
	expect_redis_bad("redis://hunter2@h"); /* user or password? ambiguous */
}

Test(url, redis_unix, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("unix:///var/run/redis/redis.sock"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_UNIX);
	cr_expect_str_eq(R.path, "/var/run/redis/redis.sock");
	cr_expect_eq(R.db, 0);
	cr_expect_null(R.password);
	cr_assert_eq(redis_parse("unix:///r.sock?db=7"), 0, "%s", err);
	cr_expect_str_eq(R.path, "/r.sock");
	cr_expect_eq(R.db, 7);
}

Test(url, redis_rejects, .fini = fini_redis)
{
	static const char *const bad[] = {
		"",
		"h:6379",
		"rediss://h:6379",
		"http://h",
		"tcp://h:6379",
		"redis://",
		"redis:///0",
		"redis://:6379",
		"redis://h:",
		"redis://h:0",
		"redis://h:65536",
		"redis://h:abc",
		"redis://h:6379x",
		"redis://h:-1",
		"redis://h/x",
		"redis://h/1x",
		"redis://h/-1",
		"redis://h/+1",
		"redis://h/1/2",
		"redis://h/ 1",
		"redis://h?db=1",
		"redis://h#x",
		"redis://h/1?x",
		"redis://h h",
		"redis://::1",
		"redis://[::1",
		"redis://[nope]:1",
		"redis://:hunter2@",
		"redis://:hunter2@:6379",
		"redis://:hunter2@h:99999",
		"redis://:hunter2@h/x",
		"redis://:hunter2@h?db=1",
		"redis://:hunter2@[::1",
		"unix://",
		"unix://rel.sock",
		"unix:///dir/",
		"unix:///r.sock?",
		"unix:///r.sock?db=",
		"unix:///r.sock?db=x",
		"unix:///r.sock?db=-1",
		"unix:///r.sock?db=1x",
		"unix:///r.sock?db=2147483648",
		"unix:///r.sock?foo=1",
		"unix:///r.sock?db=1&x=2",
		"unix:///r.sock#x",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_redis_bad(bad[i]);
}

Test(url, redis_failure_leaves_cleared_struct)
{
	redis_addr_t a;

	memset(&a, 0x5a, sizeof(a));
	cr_assert_eq(url_parse_redis("redis://:hunter2@h:0", &a, err, sizeof(err)), -1);
	cr_expect_null(a.password);
	cr_expect_eq(a.host[0], '\0');
	cr_expect_eq(a.port, 0);
	redis_addr_clear(&a); /* safe after a failure */
	cr_expect_null(a.password);
}

Test(url, redis_clear_is_idempotent)
{
	redis_addr_t a;

	cr_assert_eq(url_parse_redis("redis://:pw@h", &a, err, sizeof(err)), 0, "%s", err);
	cr_assert_not_null(a.password);
	redis_addr_clear(&a);
	cr_expect_null(a.password);
	cr_expect_eq(a.port, 0);
	redis_addr_clear(&a);
	redis_addr_clear(NULL);
	cr_expect_null(a.password);
}

/* Element i of a host list of n: host and port. */
static void expect_host(const host_port_t *list, int n, int i, const char *host, int port)
{
	cr_assert_lt(i, n, "host %d missing", i);
	cr_expect_str_eq(list[i].host, host, "host %d", i);
	cr_expect_eq(list[i].port, port, "host %d", i);
}

#define expect_sentinel(i, host, port) expect_host(R.sentinels, R.nsentinels, i, host, port)
#define expect_seed(i, host, port) expect_host(R.seeds, R.nseeds, i, host, port)

/* prefix + max hosts "h0:1000,h1:1001,..." + suffix is accepted into list
 * (*n of them, both fields of R), one host more is refused with a message
 * that says what is too many. */
static void expect_list_limit(const char *prefix, const char *suffix, int max, const char *too_many,
			      const int *n, const host_port_t *list)
{
	char url[1024], last[16];
	size_t k = (size_t)snprintf(url, sizeof(url), "%s", prefix);

	for (int i = 0; i < max; i++)
		k += (size_t)snprintf(url + k, sizeof(url) - k, "%sh%d:%d", i ? "," : "", i, 1000 + i);
	snprintf(url + k, sizeof(url) - k, "%s", suffix);
	cr_assert_eq(redis_parse(url), 0, "%s", err);
	cr_expect_eq(*n, max);
	snprintf(last, sizeof(last), "h%d", max - 1);
	expect_host(list, *n, max - 1, last, 1000 + max - 1);

	snprintf(url + k, sizeof(url) - k, ",h%d%s", max, suffix); /* one more */
	expect_redis_bad(url);
	cr_expect_not_null(strstr(err, too_many), "%s", err);
	cr_expect_eq(*n, 0, "cleared after the failure");
}

/* before + an absolute path of 4096 bytes is accepted into *file (a field
 * of R), one of 4097 is refused. */
static void expect_file_path_limit(const char *before, char *const *file)
{
	static char url[5000], path[4098];

	memset(path, 'p', sizeof(path));
	path[0] = '/';
	path[4096] = '\0';
	snprintf(url, sizeof(url), "%s%s", before, path);
	cr_assert_eq(redis_parse(url), 0, "%s", err);
	cr_assert_not_null(*file);
	cr_expect_eq(strlen(*file), 4096);
	path[4096] = 'p';
	path[4097] = '\0';
	snprintf(url, sizeof(url), "%s%s", before, path);
	expect_redis_bad(url);
	cr_expect_not_null(strstr(err, "4096"), "%s", err);
	cr_expect_null(*file);
}

/* Each of n bad URLs with the part of the message that says why; nothing
 * of the URL is kept after the failure. */
static void expect_rejects(const char *const (*bad)[2], size_t n)
{
	for (size_t i = 0; i < n; i++) {
		expect_redis_bad(bad[i][0]);
		cr_expect_not_null(strstr(err, bad[i][1]), "message for '%s' lacks '%s': %s",
				   bad[i][0], bad[i][1], err);
		cr_expect_null(R.sentinel_password_file, "file kept after failure of '%s'", bad[i][0]);
		cr_expect_null(R.password_file, "file kept after failure of '%s'", bad[i][0]);
		cr_expect_eq(R.nsentinels, 0, "sentinels kept after failure of '%s'", bad[i][0]);
		cr_expect_eq(R.nseeds, 0, "seeds kept after failure of '%s'", bad[i][0]);
	}
}

Test(url, sentinel_one, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("sentinel://10.0.0.1:26380/mymaster"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_SENTINEL);
	cr_expect_eq(R.nsentinels, 1);
	expect_sentinel(0, "10.0.0.1", 26380);
	cr_expect_str_eq(R.master_name, "mymaster");
	cr_expect_eq(R.db, 0);
	cr_expect_null(R.password);
	cr_expect_null(R.sentinel_password_file);
	cr_expect_null(R.sentinel_password, "resolved by config, not by the parser");
	cr_expect_eq(R.host[0], '\0', "the master's address is asked for, not given");
	cr_expect_eq(R.port, 0);
}

Test(url, sentinel_several_in_order_default_port, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("sentinel://s1.example:26379,s2,10.0.0.3:5000,[::1],[2001:db8::7]:1/m"),
		     0, "%s", err);
	cr_expect_eq(R.nsentinels, 5);
	expect_sentinel(0, "s1.example", 26379);
	expect_sentinel(1, "s2", URL_SENTINEL_DEFAULT_PORT);
	expect_sentinel(2, "10.0.0.3", 5000);
	expect_sentinel(3, "::1", 26379);
	expect_sentinel(4, "2001:db8::7", 1);
	cr_expect_str_eq(R.master_name, "m");
}

Test(url, host_list_max_count, .fini = fini_redis)
{
	expect_list_limit("sentinel://", "/m", URL_SENTINELS_MAX, "more than 16 sentinel addresses",
			  &R.nsentinels, R.sentinels);
	expect_list_limit("cluster://:hunter2@", "", URL_SEEDS_MAX, "more than 16 seed node addresses",
			  &R.nseeds, R.seeds);
}

Test(url, sentinel_password_db_and_file, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("sentinel://:m%40ster@s1,s2:1/mymaster?db=3&sentinel_password_file=/etc/lb/sentinel.pw"),
		     0, "%s", err);
	cr_assert_not_null(R.password);
	cr_expect_str_eq(R.password, "m@ster", "percent-decoded like redis://");
	cr_expect_eq(R.nsentinels, 2);
	cr_expect_str_eq(R.master_name, "mymaster");
	cr_expect_eq(R.db, 3);
	cr_assert_not_null(R.sentinel_password_file);
	cr_expect_str_eq(R.sentinel_password_file, "/etc/lb/sentinel.pw");

	cr_assert_eq(redis_parse("sentinel://default:pw@s/m?sentinel_password_file=/p&db=2147483647"), 0, "%s", err);
	cr_expect_str_eq(R.password, "pw");
	cr_expect_str_eq(R.sentinel_password_file, "/p", "any order");
	cr_expect_eq(R.db, INT_MAX);

	cr_assert_eq(redis_parse("sentinel://:a@b@s/m"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a@b", "a raw '@' is tolerated: the authority's last one ends the userinfo");
	expect_sentinel(0, "s", 26379);

	cr_assert_eq(redis_parse("sentinel://:a%2Fb@s/m@x?sentinel_password_file=/run/a@b c/%41"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a/b");
	cr_expect_str_eq(R.master_name, "m@x", "the authority ends at the first '/'");
	cr_expect_str_eq(R.sentinel_password_file, "/run/a@b c/%41", "taken as is, not decoded");

	cr_assert_eq(redis_parse("sentinel://:@s/m"), 0, "%s", err);
	cr_expect_null(R.password, "an empty password means none");
	cr_assert_eq(redis_parse("sentinel://@s/m"), 0, "%s", err);
	cr_expect_null(R.password);
}

Test(url, sentinel_master_name_rules, .fini = fini_redis)
{
	char url[600], name[URL_MASTER_NAME_MAX + 2];

	cr_assert_eq(redis_parse("sentinel://s/My-master_1.x:y@z!~*()[]{}$'+;=,"), 0, "%s", err);
	cr_expect_str_eq(R.master_name, "My-master_1.x:y@z!~*()[]{}$'+;=,");

	memset(name, 'n', sizeof(name));
	name[URL_MASTER_NAME_MAX] = '\0';
	snprintf(url, sizeof(url), "sentinel://s/%s", name);
	cr_assert_eq(redis_parse(url), 0, "%s", err);
	cr_expect_eq(strlen(R.master_name), (size_t)URL_MASTER_NAME_MAX);
	name[URL_MASTER_NAME_MAX] = 'n';
	name[URL_MASTER_NAME_MAX + 1] = '\0';
	snprintf(url, sizeof(url), "sentinel://:hunter2@s/%s", name);
	expect_redis_bad(url);
	cr_expect_not_null(strstr(err, "master name"), "%s", err);
}

Test(url, sentinel_scheme_case_insensitive, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("SENTINEL://s/m"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_SENTINEL);
	cr_assert_eq(redis_parse("Sentinel://s:1/m"), 0, "%s", err);
	expect_sentinel(0, "s", 1);
}

Test(url, password_file_path_length, .fini = fini_redis)
{
	expect_file_path_limit("sentinel://:hunter2@s/m?sentinel_password_file=", &R.sentinel_password_file);
	expect_file_path_limit("cluster://n?password_file=", &R.password_file);
}

/* Each bad URL with the part of the message that says why. */
Test(url, sentinel_rejects, .fini = fini_redis)
{
	static const char *const bad[][2] = {
		{"sentinel://", "no sentinel"},
		{"sentinel://:hunter2@", "no sentinel"},
		{"sentinel:///m", "no sentinel"},
		{"sentinel://:hunter2@/m", "no sentinel"},
		{"sentinel://s", "master name missing"},
		{"sentinel://:hunter2@s:26379", "master name missing"},
		{"sentinel://s/", "master name missing"},
		{"sentinel://:hunter2@s/?db=1", "master name missing"},
		{"sentinel://s?db=1/m", "invalid character in host"},
		{"sentinel://s1,,s2/m", "sentinel address 2 is empty"},
		{"sentinel://,s/m", "sentinel address 1 is empty"},
		{"sentinel://s,/m", "sentinel address 2 is empty"},
		{"sentinel://:hunter2@s1,:26379/m", "sentinel address 2: host missing"},
		{"sentinel://s:0/m", "invalid port"},
		{"sentinel://s:65536/m", "invalid port"},
		{"sentinel://s:/m", "invalid port"},
		{"sentinel://s:x/m", "invalid port"},
		{"sentinel://s1,s2:-1/m", "sentinel address 2: invalid port"},
		{"sentinel://:hunter2@s:99999/m", "invalid port"},
		{"sentinel://::1/m", "brackets"},
		{"sentinel://[::1/m", "closing"},
		{"sentinel://[nope]/m", "IPv6"},
		{"sentinel://s s/m", "invalid character in host"},
		{"sentinel://s/a/b", "invalid character in master name"},
		{"sentinel://s/a b", "invalid character in master name"},
		{"sentinel://s/a%20b", "invalid character in master name"},
		{"sentinel://s/a&b", "invalid character in master name"},
		{"sentinel://s/a#b", "invalid character in master name"},
		{"sentinel://s/a\tb", "invalid character in master name"},
		{"sentinel://s/a\x7f", "invalid character in master name"},
		{"sentinel://s/a\xc3\xa9", "invalid character in master name"},
		{"sentinel://:hunter2@s/m?", "empty query parameter"},
		{"sentinel://s/m?db=1&", "empty query parameter"},
		{"sentinel://s/m?&db=1", "empty query parameter"},
		{"sentinel://s/m?db=", "db has no value"},
		{"sentinel://s/m?db", "db has no value"},
		{"sentinel://s/m?db=x", "invalid db"},
		{"sentinel://s/m?db=-1", "invalid db"},
		{"sentinel://s/m?db=2147483648", "invalid db"},
		{"sentinel://s/m?db=1&db=1", "db given twice"},
		{"sentinel://:hunter2@s/m?sentinel_password_file=", "has no value"},
		{"sentinel://s/m?sentinel_password_file", "has no value"},
		{"sentinel://s/m?sentinel_password_file=rel/pw", "absolute"},
		{"sentinel://s/m?sentinel_password_file=/a&sentinel_password_file=/a", "given twice"},
		{"sentinel://s/m?password=hunter2", "unknown query parameter"},
		{"sentinel://s/m?DB=1", "unknown query parameter"},
		{"sentinel://s/m?db=1&x=hunter2", "unknown query parameter"},
		{"sentinel://s/m?db=1#x", "no fragment"},
		{"sentinel://alice:hunter2@s/m", "ACL user"},
		{"sentinel://hunter2@s/m", "userinfo"},
		{"sentinel://:hunter2%zz@s/m", "percent-encoding"},
		{"sentinel://:hunter2%00@s/m", "percent-encoding"},
		{"sentinel://:hunter2/x@s/m", "host"}, /* a raw '/' ends the authority: encode it */
		{"sentinels://s/m", "unsupported"},
		{"sentinel:/s/m", "unsupported"},
	};

	expect_rejects(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(url, sentinel_failure_after_allocations_frees_them)
{
	redis_addr_t a;

	/* the password and the file name are allocated before the last check fails */
	memset(&a, 0x5a, sizeof(a));
	cr_assert_eq(url_parse_redis("sentinel://:hunter2@s/m?sentinel_password_file=/p&db=x", &a, err,
				     sizeof(err)), -1);
	cr_expect_null(a.password);
	cr_expect_null(a.sentinel_password_file);
	cr_expect_null(a.sentinel_password);
	cr_expect_eq(a.nsentinels, 0);
	cr_expect_eq(a.master_name[0], '\0');
	cr_expect_null(strstr(err, "hunter2"), "%s", err);
	redis_addr_clear(&a);
}

Test(url, sentinel_clear_frees_everything)
{
	redis_addr_t a;

	cr_assert_eq(url_parse_redis("sentinel://:pw@s/m?sentinel_password_file=/p", &a, err, sizeof(err)), 0,
		     "%s", err);
	a.sentinel_password = strdup("spw"); /* as config would set it */
	cr_assert_not_null(a.sentinel_password);
	redis_addr_clear(&a); /* ASan reports a leak otherwise */
	cr_expect_null(a.password);
	cr_expect_null(a.sentinel_password);
	cr_expect_null(a.sentinel_password_file);
	cr_expect_eq(a.nsentinels, 0);
	redis_addr_clear(&a);
}

Test(url, cluster_one, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("cluster://10.0.0.1:7000"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_CLUSTER);
	cr_expect_eq(R.nseeds, 1);
	expect_seed(0, "10.0.0.1", 7000);
	cr_expect_eq(R.db, 0);
	cr_expect_null(R.password);
	cr_expect_null(R.password_file);
	cr_expect_eq(R.host[0], '\0', "the masters come from the slot map, not the URL");
	cr_expect_eq(R.port, 0);
	cr_expect_eq(R.nsentinels, 0);
	cr_expect_eq(R.master_name[0], '\0');
	cr_expect_null(R.sentinel_password_file);

	cr_assert_eq(redis_parse("cluster://node-1.example"), 0, "%s", err);
	expect_seed(0, "node-1.example", 6379);
	cr_expect_eq(URL_REDIS_DEFAULT_PORT, 6379);

	cr_assert_eq(redis_parse("CLUSTER://n"), 0, "%s", err);
	cr_expect_eq(R.kind, URL_CLUSTER, "the scheme matches case-insensitively");
	cr_assert_eq(redis_parse("Cluster://n:1"), 0, "%s", err);
	expect_seed(0, "n", 1);
}

Test(url, cluster_several_in_order_default_port, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("cluster://n1.example:7000,n2,10.0.0.3:7002,[::1],[2001:db8::7]:1,n1.example:7000"),
		     0, "%s", err);
	cr_expect_eq(R.nseeds, 6);
	expect_seed(0, "n1.example", 7000);
	expect_seed(1, "n2", URL_REDIS_DEFAULT_PORT);
	expect_seed(2, "10.0.0.3", 7002);
	expect_seed(3, "::1", 6379);
	expect_seed(4, "2001:db8::7", 1);
	expect_seed(5, "n1.example", 7000); /* kept as written, even twice */
}

Test(url, cluster_password_and_file, .fini = fini_redis)
{
	cr_assert_eq(redis_parse("cluster://:s%40cret@n1,n2:7001"), 0, "%s", err);
	cr_assert_not_null(R.password);
	cr_expect_str_eq(R.password, "s@cret", "percent-decoded like redis://");
	cr_expect_eq(R.nseeds, 2);
	cr_expect_null(R.password_file);

	cr_assert_eq(redis_parse("cluster://default:pw@n"), 0, "%s", err);
	cr_expect_str_eq(R.password, "pw", "user 'default' is what AUTH PASSWORD means");

	cr_assert_eq(redis_parse("cluster://:a@b@n:7000"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a@b", "a raw '@' is tolerated: the authority's last one ends the userinfo");
	expect_seed(0, "n", 7000);

	cr_assert_eq(redis_parse("cluster://:a%2Fb%3Fc%23d@n"), 0, "%s", err);
	cr_expect_str_eq(R.password, "a/b?c#d", "'/', '?' and '#' percent-encoded");

	cr_assert_eq(redis_parse("cluster://n1,[::1]:7001?password_file=/etc/lb/cluster.pw"), 0, "%s", err);
	cr_expect_null(R.password, "read by config, not by the parser");
	cr_assert_not_null(R.password_file);
	cr_expect_str_eq(R.password_file, "/etc/lb/cluster.pw");
	expect_seed(1, "::1", 7001);

	cr_assert_eq(redis_parse("cluster://n?password_file=/run/a@b c/%41"), 0, "%s", err);
	cr_expect_str_eq(R.password_file, "/run/a@b c/%41", "taken as is, not decoded; '@' after the authority");
	expect_seed(0, "n", 6379);

	cr_assert_eq(redis_parse("cluster://:@n?password_file=/p"), 0, "%s", err);
	cr_expect_null(R.password, "an empty password means none, so the file may give it");
	cr_expect_str_eq(R.password_file, "/p");
	cr_assert_eq(redis_parse("cluster://@n"), 0, "%s", err);
	cr_expect_null(R.password);
}

/* Each bad URL with the part of the message that says why. */
Test(url, cluster_rejects, .fini = fini_redis)
{
	static const char *const bad[][2] = {
		{"cluster://", "no seed node address"},
		{"cluster://:hunter2@", "no seed node address"},
		{"cluster:///", "no seed node address"},
		{"cluster://?password_file=/p", "no seed node address"},
		{"cluster://#x", "no seed node address"},
		{"cluster://n1,,n2", "seed node address 2 is empty"},
		{"cluster://,n", "seed node address 1 is empty"},
		{"cluster://n,", "seed node address 2 is empty"},
		{"cluster://n,?password_file=/p", "seed node address 2 is empty"},
		{"cluster://:hunter2@n1,:7000", "seed node address 2: host missing"},
		{"cluster://n:0", "invalid port"},
		{"cluster://n:65536", "invalid port"},
		{"cluster://n:", "invalid port"},
		{"cluster://n:x", "invalid port"},
		{"cluster://n1,n2:-1", "seed node address 2: invalid port"},
		{"cluster://:hunter2@n:99999", "invalid port"},
		{"cluster://::1", "brackets"},
		{"cluster://[::1", "closing"},
		{"cluster://[nope]", "IPv6"},
		{"cluster://n n", "invalid character in host"},
		{"cluster://n;m", "invalid character in host"},
		{"cluster://n/", "cluster URL takes no path or db: Redis Cluster has only db 0"},
		{"cluster://n/0", "no path or db"},
		{"cluster://:hunter2@n:7000/1", "no path or db"},
		{"cluster://n/mymaster", "no path or db"},
		{"cluster://n/?password_file=/p", "no path or db"},
		{"cluster://n?db=0", "cluster URL takes no path or db: Redis Cluster has only db 0"},
		{"cluster://n?db", "no path or db"},
		{"cluster://:hunter2@n?password_file=/p&db=1", "no path or db"},
		{"cluster://n?", "empty query parameter"},
		{"cluster://n?password_file=/p&", "empty query parameter"},
		{"cluster://n?&password_file=/p", "empty query parameter"},
		{"cluster://n?password_file=", "password_file has no value"},
		{"cluster://n?password_file", "password_file has no value"},
		{"cluster://n?password_file=rel/pw", "password_file must be an absolute path"},
		{"cluster://n?password_file=/a&password_file=/a", "password_file given twice"},
		{"cluster://n?password=hunter2", "unknown query parameter"},
		{"cluster://n?sentinel_password_file=/p", "unknown query parameter"},
		{"cluster://n?PASSWORD_FILE=/p", "unknown query parameter"},
		{"cluster://n?password_file=/p&x=hunter2", "unknown query parameter"},
		{"cluster://n#x", "no fragment"},
		{"cluster://:hunter2@n:7000#x", "no fragment"},
		{"cluster://n?password_file=/p#x", "no fragment"},
		{"cluster://:hunter2@n?password_file=/p", "both a password and password_file"},
		{"cluster://default:hunter2@n?password_file=/p", "both a password and password_file"},
		{"cluster://alice:hunter2@n", "ACL user"},
		{"cluster://hunter2@n", "userinfo"},
		{"cluster://:hunter2%zz@n", "percent-encoding"},
		{"cluster://:hunter2%00@n", "percent-encoding"},
		{"cluster://:hunter2/x@n", "host missing"}, /* a raw '/' ends the authority: encode it */
		{"cluster://:hunter2?x@n", "host missing"}, /* so does a raw '?' */
		{"cluster://:hunter2#x@n", "host missing"}, /* and a raw '#' */
		{"clusters://n", "unsupported"},
		{"cluster:/n", "unsupported"},
	};

	expect_rejects(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(url, unsupported_scheme_names_every_form, .fini = fini_redis)
{
	expect_redis_bad("http://h");
	cr_expect_not_null(strstr(err, "sentinel://"), "%s", err);
	cr_expect_not_null(strstr(err, "cluster://"), "%s", err);
	cr_expect_eq(err[strlen(err) - 1], ')', "not cut off: %s", err);
}

Test(url, cluster_failure_after_allocations_frees_them)
{
	static const char *const urls[] = {
		"cluster://:hunter2@n?password_file=/p", /* both allocated, then refused */
		"cluster://:hunter2@n?password_file=/p&db=0",
		"cluster://:hunter2@n?password_file=/p&password_file=/q",
	};
	redis_addr_t a;

	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		memset(&a, 0x5a, sizeof(a));
		cr_assert_eq(url_parse_redis(urls[i], &a, err, sizeof(err)), -1, "%s", urls[i]);
		cr_expect_null(a.password);
		cr_expect_null(a.password_file);
		cr_expect_eq(a.nseeds, 0);
		cr_expect_eq(a.seeds[0].host[0], '\0');
		cr_expect_null(strstr(err, "hunter2"), "%s", err);
		redis_addr_clear(&a);
	}
}

Test(url, cluster_clear_frees_everything)
{
	redis_addr_t a;

	cr_assert_eq(url_parse_redis("cluster://n1,n2?password_file=/p", &a, err, sizeof(err)), 0, "%s", err);
	a.password = strdup("pw"); /* as config would set it from the file */
	cr_assert_not_null(a.password);
	redis_addr_clear(&a); /* ASan reports a leak otherwise */
	cr_expect_null(a.password);
	cr_expect_null(a.password_file);
	cr_expect_eq(a.nseeds, 0);
	redis_addr_clear(&a);
}
