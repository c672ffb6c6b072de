/*
 * fuzz_url.c - libFuzzer target for the daemon's URL parsers
 * (broker/base/url.c: url_parse_listen, url_parse_redis, url_format_listen).
 *
 * Input: byte 0 picks the parser (even: listen, odd: Redis), the rest is
 * the URL (cut at its first NUL, as a C string would be). Checked, from
 * url.h's contract:
 * - the result is 0 or -1; on -1 there is a message of printable ASCII (it
 *   never quotes the URL, so no byte of it can show there unmasked, and the
 *   dictionary's password PW_MARK never does), a listen_addr_t is left
 *   zeroed and a redis_addr_t is left cleared (no password, no password
 *   files, no sentinels, no seeds);
 * - on success every field is in range (ports, db, NUL-terminated host and
 *   path, an absolute path; for sentinel:// 1..URL_SENTINELS_MAX sentinels
 *   with a host and a port each, a master name of allowed bytes, an absolute
 *   sentinel password file of at most 4096 bytes; for cluster://
 *   1..URL_SEEDS_MAX seeds with a host and a port each, db 0, an absolute
 *   password file of at most 4096 bytes and then no password; nothing in
 *   the fields of the other kinds), and a listen address formatted with
 *   url_format_listen parses back to the same address.
 * Any failed check aborts (libFuzzer reports it as a crash).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/url.h"

/* A password in url.dict: no error message may hold it. */
#define PW_MARK "Sup3r"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_url: check failed: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                    \
			abort();                                               \
		}                                                              \
	} while (0)

static void check_message(const char *err, size_t cap)
{
	size_t n = strnlen(err, cap);

	CHECK(n > 0 && n < cap);
	for (size_t i = 0; i < n; i++)
		CHECK(err[i] >= 0x20 && err[i] < 0x7f);
	CHECK(strstr(err, PW_MARK) == NULL);
}

static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static void check_listen(const char *url)
{
	listen_addr_t a, b;
	static const listen_addr_t zero;
	char err[256], again[URL_HOST_MAX + URL_PATH_MAX + 32];
	int rc;

	memset(&a, 0x5a, sizeof(a)); /* the parser must write it all */
	err[0] = '\0';
	rc = url_parse_listen(url, &a, err, sizeof(err));
	CHECK(rc == 0 || rc == -1);
	if (rc != 0) {
		check_message(err, sizeof(err));
		CHECK(memcmp(&a, &zero, sizeof(a)) == 0);
		return;
	}
	CHECK(a.kind == URL_TCP || a.kind == URL_UNIX);
	if (a.kind == URL_TCP) {
		CHECK(terminated(a.host, sizeof(a.host)));
		CHECK(a.port >= 0 && a.port <= 65535);
	} else {
		CHECK(terminated(a.path, sizeof(a.path)));
		CHECK(a.path[0] == '/');
	}
	url_format_listen(&a, again, sizeof(again));
	CHECK(terminated(again, sizeof(again)));
	rc = url_parse_listen(again, &b, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "fuzz_url: '%s' does not parse back: %s\n", again, err);
		abort();
	}
	CHECK(a.kind == b.kind);
	if (a.kind == URL_TCP)
		CHECK(strcmp(a.host, b.host) == 0 && a.port == b.port);
	else
		CHECK(strcmp(a.path, b.path) == 0);
}

/* n hosts of a list with room for max: each with a host and a port, the
 * rest of the room zeroed. */
static void check_hosts(const host_port_t *list, int n, int max)
{
	CHECK(n >= 1 && n <= max);
	for (int i = 0; i < n; i++) {
		CHECK(terminated(list[i].host, sizeof(list[i].host)));
		CHECK(list[i].host[0] != '\0');
		CHECK(list[i].port >= 1 && list[i].port <= 65535);
	}
	for (int i = n; i < max; i++)
		CHECK(list[i].host[0] == '\0' && list[i].port == 0);
}

static void check_file(const char *file, const char *url)
{
	if (file != NULL)
		CHECK(file[0] == '/' && strlen(file) <= 4096 && strlen(file) <= strlen(url));
}

static void check_sentinel(const redis_addr_t *a, const char *url)
{
	size_t n;

	CHECK(a->host[0] == '\0' && a->port == 0 && a->path[0] == '\0');
	check_hosts(a->sentinels, a->nsentinels, URL_SENTINELS_MAX);
	CHECK(terminated(a->master_name, sizeof(a->master_name)));
	n = strlen(a->master_name);
	CHECK(n >= 1 && n <= URL_MASTER_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = a->master_name[i];
		CHECK(c > 0x20 && c < 0x7f && strchr("/?&#%", c) == NULL);
	}
	check_file(a->sentinel_password_file, url);
}

static void check_cluster(const redis_addr_t *a, const char *url)
{
	CHECK(a->host[0] == '\0' && a->port == 0 && a->path[0] == '\0' && a->db == 0);
	check_hosts(a->seeds, a->nseeds, URL_SEEDS_MAX);
	check_file(a->password_file, url);
	CHECK(a->password_file == NULL || a->password == NULL);
}

static void check_redis(const char *url)
{
	redis_addr_t a;
	char err[256];
	int rc;

	memset(&a, 0x5a, sizeof(a));
	err[0] = '\0';
	rc = url_parse_redis(url, &a, err, sizeof(err));
	CHECK(rc == 0 || rc == -1);
	if (rc != 0) {
		check_message(err, sizeof(err));
		CHECK(a.password == NULL && a.sentinel_password_file == NULL &&
		      a.sentinel_password == NULL && a.nsentinels == 0 &&
		      a.password_file == NULL && a.nseeds == 0);
		redis_addr_clear(&a);
		return;
	}
	CHECK(a.kind == URL_TCP || a.kind == URL_UNIX || a.kind == URL_SENTINEL ||
	      a.kind == URL_CLUSTER);
	CHECK(a.sentinel_password == NULL); /* config's business */
	if (a.kind == URL_TCP) {
		CHECK(terminated(a.host, sizeof(a.host)));
		CHECK(a.port >= 1 && a.port <= 65535);
	} else if (a.kind == URL_UNIX) {
		CHECK(terminated(a.path, sizeof(a.path)));
		CHECK(a.path[0] == '/');
	} else if (a.kind == URL_SENTINEL) {
		check_sentinel(&a, url);
	} else {
		check_cluster(&a, url);
	}
	if (a.kind != URL_SENTINEL)
		CHECK(a.nsentinels == 0 && a.master_name[0] == '\0' &&
		      a.sentinel_password_file == NULL);
	if (a.kind != URL_CLUSTER)
		CHECK(a.nseeds == 0 && a.password_file == NULL);
	CHECK(a.db >= 0);
	if (a.password != NULL)
		CHECK(strlen(a.password) <= strlen(url));
	redis_addr_clear(&a);
	CHECK(a.password == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *url;

	if (size < 1)
		return 0;
	url = malloc(size);
	if (url == NULL)
		abort();
	memcpy(url, data + 1, size - 1);
	url[size - 1] = '\0';
	if (data[0] % 2 == 0)
		check_listen(url);
	else
		check_redis(url);
	free(url);
	return 0;
}
