/*
 * url.c - parsing of listen URLs (tcp://HOST:PORT, unix:///PATH) and Redis
 * URLs (redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], unix:///PATH[?db=N],
 * sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME
 * [?db=N&sentinel_password_file=PATH],
 * cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?password_file=PATH]).
 *
 * Pure string work, no I/O, no allocation except the Redis password and the
 * password files' names.
 * Invariants:
 *  - On success the out struct is fully written; on failure a listen_addr_t
 *    is left zeroed and a redis_addr_t is left cleared (pointers NULL), so
 *    redis_addr_clear() is always safe.
 *  - Error messages describe what is wrong; they never quote the URL or any
 *    part of its userinfo, so a password cannot leak into a log line.
 *  - Hosts are names ([A-Za-z0-9._-]), IPv4 literals, or IPv6 literals in
 *    brackets (checked with inet_pton, zone ids are not supported); the
 *    brackets are dropped. Schemes match case-insensitively.
 *  - sentinel://: the authority (userinfo and sentinel list) ends at the
 *    first '/', and the userinfo at the authority's last '@'. So a password
 *    may hold a raw '@', as in redis://, but must percent-encode '/' (%2F),
 *    unlike redis://; the master name and the file name may then hold '@'.
 *    The master name and the query values are taken as they are (no
 *    percent-decoding); each query parameter comes at most once, in any
 *    order.
 *  - cluster://: the authority (userinfo and seed list) ends at the first
 *    '/', '?' or '#', and the userinfo at the authority's last '@'. So a
 *    password may hold a raw '@' but must percent-encode '/', '?' and '#'
 *    (%2F, %3F, %23); the file name may then hold '@'. What follows the
 *    authority may only be the query: a path (there is no db to name, a
 *    cluster has only db 0) and a fragment are refused, and so are a db
 *    query parameter and a password given both in the userinfo and as
 *    ?password_file=. The seed list and the query follow the sentinel://
 *    rules above (one list parser, one query splitter).
 */
#include "broker/base/url.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PASSWORD_FILE_MAX 4096 /* the config's secret file paths */
#define CLUSTER_NO_DB "cluster URL takes no path or db: Redis Cluster has only db 0"

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err != NULL && errlen > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Strict decimal: [0-9]+ over exactly len bytes, value <= max. */
static bool parse_uint(const char *s, size_t len, long max, long *out)
{
	long v = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

static bool has_scheme(const char *url, const char *scheme)
{
	size_t n = strlen(scheme);
	return strncasecmp(url, scheme, n) == 0;
}

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/*
 * Splits "HOST[:PORT]" (len bytes at s) into host and port. *port is set to
 * -1 when there is no port. The port range is min_port..65535.
 */
static int parse_hostport(const char *s, size_t len, char *host, int *port,
			  int min_port, char *err, size_t errlen)
{
	const char *hend;    /* one past the host text */
	const char *rest;    /* what follows the host */
	const char *end = s + len;
	const char *h = s;
	size_t hlen;

	if (len == 0)
		return fail(err, errlen, "host missing");
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);
		char tmp[INET6_ADDRSTRLEN + 1];
		unsigned char bin[sizeof(struct in6_addr)];

		if (close == NULL)
			return fail(err, errlen, "IPv6 address lacks its closing ']'");
		h = s + 1;
		hlen = (size_t)(close - h);
		if (hlen == 0)
			return fail(err, errlen, "host missing");
		if (hlen >= sizeof(tmp))
			return fail(err, errlen, "invalid IPv6 address");
		memcpy(tmp, h, hlen);
		tmp[hlen] = '\0';
		if (inet_pton(AF_INET6, tmp, bin) != 1)
			return fail(err, errlen, "invalid IPv6 address");
		hend = close;
		rest = close + 1;
	} else {
		const char *colon = memchr(s, ':', len);

		hend = colon != NULL ? colon : end;
		hlen = (size_t)(hend - h);
		if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL)
			return fail(err, errlen, "IPv6 addresses must be in brackets, e.g. [::1]:7380");
		if (hlen == 0)
			return fail(err, errlen, "host missing");
		if (hlen > URL_HOST_MAX)
			return fail(err, errlen, "host longer than %d bytes", URL_HOST_MAX);
		for (size_t i = 0; i < hlen; i++)
			if (!is_name_char(h[i]))
				return fail(err, errlen, "invalid character in host");
		rest = hend;
	}

	if (rest == end) {
		*port = -1;
	} else if (*rest == ':') {
		long v;
		if (!parse_uint(rest + 1, (size_t)(end - rest - 1), 65535, &v) || v < min_port)
			return fail(err, errlen, "invalid port (want %d..65535)", min_port);
		*port = (int)v;
	} else {
		return fail(err, errlen, "unexpected text after host");
	}
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	return 0;
}

/* An absolute socket path, len bytes at s. */
static int parse_path(const char *s, size_t len, char *path, char *err, size_t errlen)
{
	if (len == 0)
		return fail(err, errlen, "socket path missing (unix:///absolute/path)");
	if (s[0] != '/')
		return fail(err, errlen, "socket path must be absolute (unix:///absolute/path)");
	if (len > URL_PATH_MAX)
		return fail(err, errlen, "socket path longer than %d bytes", URL_PATH_MAX);
	if (s[len - 1] == '/')
		return fail(err, errlen, "socket path names a directory");
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return fail(err, errlen, "control character in socket path");
	memcpy(path, s, len);
	path[len] = '\0';
	return 0;
}

int url_parse_listen(const char *url, listen_addr_t *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (url == NULL || *url == '\0')
		return fail(err, errlen, "empty URL");

	if (has_scheme(url, "tcp://")) {
		const char *s = url + 6;
		size_t len = strlen(s);
		int port;

		if (strpbrk(s, "/?#@") != NULL)
			return fail(err, errlen, "tcp listen URL must be tcp://HOST:PORT, nothing more");
		if (parse_hostport(s, len, out->host, &port, 0, err, errlen) < 0)
			goto bad;
		if (port < 0) {
			fail(err, errlen, "port missing (tcp://HOST:PORT)");
			goto bad;
		}
		out->kind = URL_TCP;
		out->port = port;
		return 0;
	}
	if (has_scheme(url, "unix://")) {
		const char *s = url + 7;

		if (strpbrk(s, "?#") != NULL)
			return fail(err, errlen, "a unix:// URL takes no query or fragment");
		if (parse_path(s, strlen(s), out->path, err, errlen) < 0)
			goto bad;
		out->kind = URL_UNIX;
		return 0;
	}
	return fail(err, errlen, "unsupported URL scheme (want tcp://HOST:PORT or unix:///PATH)");
bad:
	memset(out, 0, sizeof(*out));
	return -1;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes len bytes at s into a new string; NULL on a bad escape or
 * an encoded NUL. Aborts on OOM. */
static char *percent_decode(const char *s, size_t len)
{
	char *d = malloc(len + 1);
	size_t j = 0;

	if (d == NULL)
		abort();
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi, lo;
			if (i + 2 >= len)
				goto bad;
			hi = hexval(s[i + 1]);
			lo = hexval(s[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				goto bad;
			d[j++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			d[j++] = s[i];
		}
	}
	d[j] = '\0';
	return d;
bad:
	free(d);
	return NULL;
}

/* "db=N" query of a unix Redis URL. */
static int parse_query(const char *q, int *db, char *err, size_t errlen)
{
	long v;

	if (strncmp(q, "db=", 3) != 0)
		return fail(err, errlen, "unknown query parameter (only ?db=N)");
	if (!parse_uint(q + 3, strlen(q + 3), INT_MAX, &v))
		return fail(err, errlen, "invalid db number (want 0..%d)", INT_MAX);
	*db = (int)v;
	return 0;
}

/*
 * Userinfo of a redis:// URL, len bytes at s (without the '@'):
 *   ":PASSWORD" or "USER:PASSWORD", PASSWORD percent-decoded.
 * The only USER accepted is "default": this version sends AUTH PASSWORD,
 * which Redis 6 ACLs check against the user "default". Silently dropping
 * another user name would authenticate as the wrong user, so it is refused
 * until AUTH USER PASSWORD is supported. A bare "PASSWORD@" is refused too:
 * clients disagree whether it names a user or a password.
 * An empty password means none.
 */
static int parse_userinfo(const char *s, size_t len, char **password,
			  char *err, size_t errlen)
{
	const char *colon = memchr(s, ':', len);
	size_t ulen, plen;

	*password = NULL;
	if (len == 0)
		return 0;
	if (colon == NULL)
		return fail(err, errlen, "userinfo must be ':PASSWORD@' (percent-encode '@' as %%40)");
	ulen = (size_t)(colon - s);
	if (ulen != 0 && !(ulen == 7 && memcmp(s, "default", 7) == 0))
		return fail(err, errlen, "Redis ACL user names other than 'default' are not supported");
	plen = len - ulen - 1;
	if (plen == 0)
		return 0;
	*password = percent_decode(colon + 1, plen);
	if (*password == NULL)
		return fail(err, errlen, "invalid percent-encoding in password");
	return 0;
}

static int parse_redis_tcp(const char *s, redis_addr_t *out, char *err, size_t errlen)
{
	const char *at = strrchr(s, '@'); /* hosts and db never hold '@'; a raw one in the password is tolerated */
	const char *hp = at != NULL ? at + 1 : s;
	const char *slash = strchr(hp, '/');
	size_t hplen = slash != NULL ? (size_t)(slash - hp) : strlen(hp);
	int port;

	if (at != NULL && parse_userinfo(s, (size_t)(at - s), &out->password, err, errlen) < 0)
		return -1;
	if (memchr(hp, '?', hplen) != NULL || memchr(hp, '#', hplen) != NULL)
		return fail(err, errlen, "redis URL takes no query or fragment");
	if (parse_hostport(hp, hplen, out->host, &port, 1, err, errlen) < 0)
		return -1;
	out->port = port < 0 ? URL_REDIS_DEFAULT_PORT : port;
	out->db = 0;
	if (slash != NULL && slash[1] != '\0') {
		long v;
		if (!parse_uint(slash + 1, strlen(slash + 1), INT_MAX, &v))
			return fail(err, errlen, "invalid db number after '/' (want 0..%d)", INT_MAX);
		out->db = (int)v;
	}
	out->kind = URL_TCP;
	return 0;
}

/*
 * A URL's list of hosts: what an element is called in messages ("sentinel"
 * gives "sentinel address 2 is empty"), the URL's form for the message of
 * an empty list, the port of an element without one, and the most elements.
 */
struct host_list {
	const char *what;
	const char *form;
	int default_port;
	int max;
};

static const struct host_list sentinel_list = {
	"sentinel", "sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME",
	URL_SENTINEL_DEFAULT_PORT, URL_SENTINELS_MAX,
};

static const struct host_list seed_list = {
	"seed node", "cluster://HOST[:PORT][,HOST[:PORT]...]",
	URL_REDIS_DEFAULT_PORT, URL_SEEDS_MAX,
};

/* One element of a host list, len bytes at s; i counts from 0. */
static int parse_list_addr(const char *s, size_t len, const struct host_list *hl, int i,
			   host_port_t *hp, char *err, size_t errlen)
{
	char msg[128];
	int port;

	if (len == 0)
		return fail(err, errlen, "%s address %d is empty (nothing between commas)", hl->what, i + 1);
	if (parse_hostport(s, len, hp->host, &port, 1, msg, sizeof(msg)) < 0)
		return fail(err, errlen, "%s address %d: %s", hl->what, i + 1, msg);
	hp->port = port < 0 ? hl->default_port : port;
	return 0;
}

/* "HOST[:PORT][,HOST[:PORT]...]", len bytes at s, into list[0..*n), in
 * order; list has room for hl->max. */
static int parse_host_list(const char *s, size_t len, const struct host_list *hl,
			   host_port_t *list, int *n, char *err, size_t errlen)
{
	const char *end = s + len;

	if (len == 0)
		return fail(err, errlen, "no %s address (%s)", hl->what, hl->form);
	for (const char *p = s;; ) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *eend = comma != NULL ? comma : end;

		if (*n == hl->max)
			return fail(err, errlen, "more than %d %s addresses", hl->max, hl->what);
		if (parse_list_addr(p, (size_t)(eend - p), hl, *n, &list[*n], err, errlen) < 0)
			return -1;
		(*n)++;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

/*
 * The authority of a sentinel:// or cluster:// URL, len bytes at s:
 * "[USERINFO@]HOST[:PORT][,HOST[:PORT]...]", the userinfo ending at the last
 * '@'. The password goes to out->password, the hosts to list.
 */
static int parse_list_authority(const char *s, size_t len, const struct host_list *hl,
				redis_addr_t *out, host_port_t *list, int *n,
				char *err, size_t errlen)
{
	const char *at = len > 0 ? memrchr(s, '@', len) : NULL;
	const char *hosts = at != NULL ? at + 1 : s;

	if (at != NULL && parse_userinfo(s, (size_t)(at - s), &out->password, err, errlen) < 0)
		return -1;
	return parse_host_list(hosts, (size_t)(s + len - hosts), hl, list, n, err, errlen);
}

/* The master name, len bytes at s: 1..URL_MASTER_NAME_MAX bytes of printable
 * ASCII other than space and / ? & # % (taken as is, not percent-decoded). */
static int parse_master_name(const char *s, size_t len, char *name, char *err, size_t errlen)
{
	if (len == 0)
		return fail(err, errlen, "master name missing (sentinel://HOST[:PORT]/MASTER_NAME)");
	if (len > URL_MASTER_NAME_MAX)
		return fail(err, errlen, "master name longer than %d bytes", URL_MASTER_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (s[i] <= 0x20 || s[i] >= 0x7f || strchr("/?&#%", s[i]) != NULL)
			return fail(err, errlen, "invalid character in master name (printable ASCII but space / ? & # %%)");
	memcpy(name, s, len);
	name[len] = '\0';
	return 0;
}

/* One parameter of a query: KEY[=VALUE], len bytes in all; the value is
 * empty when there is no '='. */
struct query_param {
	const char *key, *value;
	size_t len, klen, vlen;
};

/* Takes the next '&'-separated parameter off the query at *q (what follows
 * the '?'); false when the query is used up. */
static bool next_param(const char **q, struct query_param *p)
{
	const char *s = *q;
	const char *amp, *eq;

	if (s == NULL)
		return false;
	amp = strchr(s, '&');
	p->key = s;
	p->len = amp != NULL ? (size_t)(amp - s) : strlen(s);
	eq = memchr(s, '=', p->len);
	p->klen = eq != NULL ? (size_t)(eq - s) : p->len;
	p->value = eq != NULL ? eq + 1 : s + p->len;
	p->vlen = (size_t)(s + p->len - p->value);
	*q = amp != NULL ? amp + 1 : NULL;
	return true;
}

static bool param_is(const struct query_param *p, const char *key)
{
	return p->klen == strlen(key) && memcmp(p->key, key, p->klen) == 0;
}

/* A password file's name, the value of the parameter p: given once, an
 * absolute path of at most PASSWORD_FILE_MAX bytes, taken as it is into a
 * new string at *file. */
static int parse_file_param(const struct query_param *p, char **file, char *err, size_t errlen)
{
	int klen = (int)p->klen; /* a known key, short */

	if (*file != NULL)
		return fail(err, errlen, "query parameter %.*s given twice", klen, p->key);
	if (p->vlen == 0)
		return fail(err, errlen, "query parameter %.*s has no value", klen, p->key);
	if (p->value[0] != '/')
		return fail(err, errlen, "%.*s must be an absolute path", klen, p->key);
	if (p->vlen > PASSWORD_FILE_MAX)
		return fail(err, errlen, "%.*s longer than %d bytes", klen, p->key, PASSWORD_FILE_MAX);
	*file = malloc(p->vlen + 1);
	if (*file == NULL)
		abort();
	memcpy(*file, p->value, p->vlen);
	(*file)[p->vlen] = '\0';
	return 0;
}

/*
 * The query of a sentinel URL (after the '?'): "&"-separated KEY=VALUE,
 * KEY one of db, sentinel_password_file, each at most once, values not
 * empty. Unknown keys are not quoted: they are part of the URL.
 */
static int parse_sentinel_query(const char *q, redis_addr_t *out, char *err, size_t errlen)
{
	struct query_param p;
	bool seen_db = false;

	while (next_param(&q, &p)) {
		if (p.len == 0)
			return fail(err, errlen, "empty query parameter (want ?db=N&sentinel_password_file=PATH)");
		if (param_is(&p, "db")) {
			long n;
			if (seen_db)
				return fail(err, errlen, "query parameter db given twice");
			if (p.vlen == 0)
				return fail(err, errlen, "query parameter db has no value");
			if (!parse_uint(p.value, p.vlen, INT_MAX, &n))
				return fail(err, errlen, "invalid db number (want 0..%d)", INT_MAX);
			out->db = (int)n;
			seen_db = true;
		} else if (param_is(&p, "sentinel_password_file")) {
			if (parse_file_param(&p, &out->sentinel_password_file, err, errlen) < 0)
				return -1;
		} else {
			return fail(err, errlen, "unknown query parameter (want db=N or sentinel_password_file=PATH)");
		}
	}
	return 0;
}

/* After "sentinel://"; see the top comment for where each part ends. */
static int parse_sentinel(const char *s, redis_addr_t *out, char *err, size_t errlen)
{
	const char *slash = strchr(s, '/');
	size_t alen = slash != NULL ? (size_t)(slash - s) : strlen(s);
	const char *name, *q;

	if (parse_list_authority(s, alen, &sentinel_list, out, out->sentinels, &out->nsentinels,
				 err, errlen) < 0)
		return -1;
	if (slash == NULL)
		return fail(err, errlen, "master name missing (sentinel://HOST[:PORT]/MASTER_NAME)");
	name = slash + 1;
	q = strchr(name, '?');
	if (parse_master_name(name, q != NULL ? (size_t)(q - name) : strlen(name),
			      out->master_name, err, errlen) < 0)
		return -1;
	if (q != NULL) {
		if (strchr(q, '#') != NULL)
			return fail(err, errlen, "sentinel URL takes no fragment");
		if (parse_sentinel_query(q + 1, out, err, errlen) < 0)
			return -1;
	}
	out->kind = URL_SENTINEL;
	return 0;
}

/*
 * The query of a cluster URL (after the '?'): "&"-separated KEY=VALUE, the
 * only KEY password_file, at most once, its value not empty. db is refused
 * by name, other keys are not quoted: they are part of the URL.
 */
static int parse_cluster_query(const char *q, redis_addr_t *out, char *err, size_t errlen)
{
	struct query_param p;

	while (next_param(&q, &p)) {
		if (p.len == 0)
			return fail(err, errlen, "empty query parameter (want ?password_file=PATH)");
		if (param_is(&p, "password_file")) {
			if (parse_file_param(&p, &out->password_file, err, errlen) < 0)
				return -1;
		} else if (param_is(&p, "db")) {
			return fail(err, errlen, CLUSTER_NO_DB);
		} else {
			return fail(err, errlen, "unknown query parameter (want password_file=PATH)");
		}
	}
	return 0;
}

/* After "cluster://"; see the top comment for where each part ends. */
static int parse_cluster(const char *s, redis_addr_t *out, char *err, size_t errlen)
{
	size_t alen = strcspn(s, "/?#");
	const char *rest = s + alen;

	if (parse_list_authority(s, alen, &seed_list, out, out->seeds, &out->nseeds, err, errlen) < 0)
		return -1;
	if (*rest == '/')
		return fail(err, errlen, CLUSTER_NO_DB);
	if (strchr(rest, '#') != NULL)
		return fail(err, errlen, "cluster URL takes no fragment");
	if (*rest == '?' && parse_cluster_query(rest + 1, out, err, errlen) < 0)
		return -1;
	if (out->password != NULL && out->password_file != NULL)
		return fail(err, errlen, "cluster URL gives both a password and password_file (give one)");
	out->kind = URL_CLUSTER;
	return 0;
}

int url_parse_redis(const char *url, redis_addr_t *out, char *err, size_t errlen)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (url == NULL || *url == '\0')
		return fail(err, errlen, "empty Redis URL");

	if (has_scheme(url, "redis://")) {
		rc = parse_redis_tcp(url + 8, out, err, errlen);
	} else if (has_scheme(url, "unix://")) {
		const char *s = url + 7;
		const char *q = strchr(s, '?');
		size_t plen = q != NULL ? (size_t)(q - s) : strlen(s);

		rc = -1;
		if (strchr(s, '#') != NULL)
			fail(err, errlen, "redis unix URL takes no fragment");
		else if (parse_path(s, plen, out->path, err, errlen) == 0 &&
			 (q == NULL || parse_query(q + 1, &out->db, err, errlen) == 0))
			rc = 0;
		out->kind = URL_UNIX;
	} else if (has_scheme(url, "sentinel://")) {
		rc = parse_sentinel(url + 11, out, err, errlen);
	} else if (has_scheme(url, "cluster://")) {
		rc = parse_cluster(url + 10, out, err, errlen);
	} else if (has_scheme(url, "rediss://")) {
		rc = fail(err, errlen, "TLS (rediss://) is not supported");
	} else {
		rc = fail(err, errlen, "unsupported Redis URL (want redis://[:PASSWORD@]HOST[:PORT][/DB], "
			  "unix:///PATH[?db=N], sentinel://[:PASSWORD@]HOST[:PORT][,...]/MASTER_NAME[?db=N] "
			  "or cluster://[:PASSWORD@]HOST[:PORT][,...])");
	}
	if (rc < 0)
		redis_addr_clear(out);
	return rc;
}

/* Do not leave a secret in freed heap memory. */
static void free_secret(char *s)
{
	if (s != NULL) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void redis_addr_clear(redis_addr_t *a)
{
	if (a == NULL)
		return;
	free_secret(a->password);
	free_secret(a->sentinel_password);
	free(a->sentinel_password_file);
	free(a->password_file);
	memset(a, 0, sizeof(*a));
}

void url_format_listen(const listen_addr_t *a, char *buf, size_t len)
{
	if (buf == NULL || len == 0)
		return;
	if (a->kind == URL_UNIX)
		snprintf(buf, len, "unix://%s", a->path);
	else if (strchr(a->host, ':') != NULL)
		snprintf(buf, len, "tcp://[%s]:%d", a->host, a->port);
	else
		snprintf(buf, len, "tcp://%s:%d", a->host, a->port);
}
