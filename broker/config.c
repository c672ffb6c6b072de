/*
 * config.c - the daemon's settings: defaults, then the --config JSON file,
 * then the command line flags, in that order, each overriding the last.
 *
 * One table (options[]) names every flag; the config file uses the same
 * names without the dashes, and --help is printed from the table, so the
 * three cannot drift apart. config_load runs in three passes over argv:
 *   1. tokenize every flag (so a bad flag is reported before anything is
 *      read), remember --config, and stop at --help / --version;
 *   2. apply the config file, if any;
 *   3. apply the flags other than --config, left to right (last one wins;
 *      the first --listen replaces the list, later ones append).
 * Secrets are resolved last: the Redis password (for a sentinel:// URL the
 * master's, for a cluster:// URL the nodes') is the URL's, else (cluster://
 * only) the content of the URL's ?password_file= (the URL never gives both),
 * else the --redis-password-file content, else
 * $LOCKBROKER_REDIS_PASSWORD; for a sentinel:// URL the sentinels' password
 * is the content of the URL's ?sentinel_password_file=, else
 * $LOCKBROKER_SENTINEL_PASSWORD, else none; the auth secret is the
 * --auth-file content. An empty variable counts as unset. A secret file's
 * content loses exactly one trailing "\n" or "\r\n", must then be
 * non-empty, hold no NUL and be at most SECRET_MAX bytes.
 *
 * Ownership: every string in lb_config_t is owned by it. Whatever
 * config_load returns, the caller may (and should) call config_free(); on
 * CONFIG_EXIT and CONFIG_ERROR the struct has already been freed and zeroed,
 * so that call is a no-op. config_load overwrites cfg without freeing it:
 * pass a zeroed or config_free()d struct.
 *
 * Error messages name the flag or key and the file, never a secret: URLs
 * given to --redis are not quoted (they may hold a password), file contents
 * are never quoted, and jansson's "near '...'" excerpt is cut off.
 */
#include "broker/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/base/version.h"

#define SECRET_MAX 4096
#define PREFIX_MAX 64
#define ENV_REDIS_PASSWORD "LOCKBROKER_REDIS_PASSWORD"
#define ENV_SENTINEL_PASSWORD "LOCKBROKER_SENTINEL_PASSWORD"

enum opt_id {
	OPT_CONFIG,
	OPT_LISTEN,
	OPT_REDIS,
	OPT_REDLOCK,
	OPT_REDIS_PASSWORD_FILE,
	OPT_REDIS_WAIT_REPLICAS,
	OPT_REDIS_WAIT_MS,
	OPT_PREFIX,
	OPT_DEFAULT_TTL_MS,
	OPT_AUTH_FILE,
	OPT_SOCKET_MODE,
	OPT_POOL,
	OPT_MAX_LINE,
	OPT_LOG_LEVEL,
	OPT_LOG_FORMAT,
	OPT_METRICS,
	OPT_SHUTDOWN_GRACE_MS,
	OPT_CANARY_INTERVAL_MS,
	OPT_REDIS_BATCH_MAX,
	OPT_MAX_CONNECTIONS,
	OPT_MAX_LEASES_PER_SESSION,
	OPT_MAX_INFLIGHT,
	OPT_MAX_WAITERS,
	OPT_MAX_WAITERS_PER_SESSION,
	OPT_MAX_WATCHES_PER_SESSION,
	OPT_MAX_QUEUE,
	OPT_VERSION,
	OPT_HELP,
};

enum opt_type {
	T_NONE,   /* a switch: --help, --version */
	T_STRING, /* a string in the file */
	T_INT,    /* an integer in the file, strict decimal on the command line */
	T_LISTEN, /* a string or an array of strings in the file */
};

struct option_def {
	const char *name; /* flag without "--"; also the config file key */
	enum opt_id id;
	enum opt_type type;
	bool in_file;     /* allowed as a config file key */
	int64_t min, max; /* T_INT */
	const char *arg;  /* for --help */
	const char *help;
};

static const struct option_def options[] = {
	{"config", OPT_CONFIG, T_STRING, false, 0, 0, "FILE",
	 "JSON config file: an object whose keys are these\n"
	 "flag names without dashes; flags override it"},
	{"listen", OPT_LISTEN, T_LISTEN, true, 0, 0, "URL",
	 "tcp://HOST:PORT or unix:///PATH; repeatable; the\n"
	 "first one replaces the default list (default:\n"
	 CONFIG_DEFAULT_TCP " and\n" CONFIG_DEFAULT_UNIX ")"},
	{"redis", OPT_REDIS, T_STRING, true, 0, 0, "URL",
	 "redis://[:PASSWORD@]HOST[:PORT][/DB],\n"
	 "unix:///PATH[?db=N], or Redis Sentinel:\n"
	 "sentinel://[:PASSWORD@]HOST[:PORT][,...]\n"
	 "/MASTER_NAME[?db=N&sentinel_password_file=FILE]\n"
	 "(sentinels' default port 26379; PASSWORD is the\n"
	 "master's, FILE holds the sentinels'), or the\n"
	 "seed nodes of a Redis Cluster:\n"
	 "cluster://[:PASSWORD@]HOST[:PORT][,...]\n"
	 "[?password_file=FILE] (default port 6379; no\n"
	 "db, a cluster has only db 0; FILE holds the\n"
	 "nodes' password, given instead of PASSWORD)\n"
	 "(default: " CONFIG_DEFAULT_REDIS ")"},
	{"redlock", OPT_REDLOCK, T_STRING, true, 0, 0, "URL,URL,URL[,...]",
	 "instead of --redis: 3, 5 or 7 independent Redis\n"
	 "masters (redis:// or unix:// URLs, comma\n"
	 "separated); a lock is held when a majority\n"
	 "granted it (Redlock); exclusive locks only\n"
	 "(default: none)"},
	{"redis-password-file", OPT_REDIS_PASSWORD_FILE, T_STRING, true, 0, 0, "FILE",
	 "file holding the Redis password, used when the\n"
	 "URL has none (default: none)"},
	{"redis-wait-replicas", OPT_REDIS_WAIT_REPLICAS, T_INT, true, 0, 16, "N",
	 "after a grant or an extend, wait until N\n"
	 "replicas acknowledged it (WAIT N T); fewer: the\n"
	 "grant is undone and answered unavailable;\n"
	 "0..16 (default: 0, off)"},
	{"redis-wait-ms", OPT_REDIS_WAIT_MS, T_INT, true, 1, 10000, "T",
	 "how long that WAIT may take, in ms, 1..10000\n"
	 "(default: 500)"},
	{"prefix", OPT_PREFIX, T_STRING, true, 0, 0, "STR",
	 "key prefix in Redis, 1..64 bytes, no '{' or '}'\n"
	 "(default: lb:)"},
	{"default-ttl-ms", OPT_DEFAULT_TTL_MS, T_INT, true, 100, 86400000, "N",
	 "ttl_ms when a request gives none, 100..86400000\n"
	 "(default: 30000)"},
	{"auth-file", OPT_AUTH_FILE, T_STRING, true, 0, 0, "FILE",
	 "file holding the shared secret that hello must\n"
	 "present (default: none, no auth)"},
	{"socket-mode", OPT_SOCKET_MODE, T_STRING, true, 0, 0, "OCTAL",
	 "file mode of Unix listeners, 0..0777; a string\n"
	 "such as \"0660\" in the file (default: 0660)"},
	{"pool", OPT_POOL, T_INT, true, 1, 64, "N",
	 "Redis connections for commands, 1..64\n"
	 "(default: 4)"},
	{"max-line", OPT_MAX_LINE, T_INT, true, 64, 16777216, "N",
	 "longest request line in bytes, 64..16777216\n"
	 "(default: 65536)"},
	{"log-level", OPT_LOG_LEVEL, T_STRING, true, 0, 0, "LEVEL",
	 "debug, info, warn or error (default: info)"},
	{"log-format", OPT_LOG_FORMAT, T_STRING, true, 0, 0, "FORMAT",
	 "text (key=value lines) or json (one object a\n"
	 "line) (default: text)"},
	{"metrics", OPT_METRICS, T_STRING, true, 0, 0, "URL",
	 "tcp://HOST:PORT serving Prometheus metrics at\n"
	 "/metrics (default: none)"},
	{"shutdown-grace-ms", OPT_SHUTDOWN_GRACE_MS, T_INT, true, 0, 3600000, "N",
	 "how long SIGTERM waits for clients to release,\n"
	 "0..3600000 (default: 5000)"},
	{"canary-interval-ms", OPT_CANARY_INTERVAL_MS, T_INT, true, 10, 60000, "N",
	 "how often each Redis master's canary key is\n"
	 "checked: a data loss (a flush, a restart empty,\n"
	 "a failover that lost writes) is reported within\n"
	 "this plus a round trip, 10..60000 (default: 250)"},
	{"redis-batch-max", OPT_REDIS_BATCH_MAX, T_INT, true, 0, 1024, "N",
	 "lock calls one Redis connection sends as one\n"
	 "script call when they leave in one loop turn;\n"
	 "0 or 1: each alone, 0..1024 (default: 64)"},
	{"max-connections", OPT_MAX_CONNECTIONS, T_INT, true, 1, 1000000, "N",
	 "client connections at once, 1..1000000\n"
	 "(default: 10000)"},
	{"max-leases-per-session", OPT_MAX_LEASES_PER_SESSION, T_INT, true, 1, 1000000, "N",
	 "leases and waiters one session may hold,\n"
	 "1..1000000 (default: 10000)"},
	{"max-inflight", OPT_MAX_INFLIGHT, T_INT, true, 1, 65536, "N",
	 "requests in flight per connection, 1..65536\n"
	 "(default: 1024)"},
	{"max-waiters", OPT_MAX_WAITERS, T_INT, true, 1, 10000000, "N",
	 "pending acquires on this broker, 1..10000000\n"
	 "(default: 100000)"},
	{"max-waiters-per-session", OPT_MAX_WAITERS_PER_SESSION, T_INT, true, 1, 1000000, "N",
	 "pending acquires of one session, 1..1000000\n"
	 "(default: 1000)"},
	{"max-watches-per-session", OPT_MAX_WATCHES_PER_SESSION, T_INT, true, 1, 1000000, "N",
	 "watched locks (the watch op) of one session,\n1..1000000 (default: 1000)"},
	{"max-queue", OPT_MAX_QUEUE, T_INT, true, 1, 10000000, "N",
	 "waiters queued on one lock across all brokers,\n"
	 "1..10000000 (default: 10000)"},
	{"version", OPT_VERSION, T_NONE, false, 0, 0, NULL, "print the version and exit"},
	{"help", OPT_HELP, T_NONE, false, 0, 0, NULL, "print this help and exit"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

struct loader {
	lb_config_t *cfg;
	char *password_file; /* owned; read at the end */
	char *auth_file;     /* owned; read at the end */
	bool cli_listen;     /* a --listen was applied: later ones append */
	bool redis_given;    /* --redis (flag or file key) */
	char *err;
	size_t errlen;
};

static int fail(struct loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct loader *l, const char *fmt, ...)
{
	if (l->err != NULL && l->errlen > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(l->err, l->errlen, fmt, ap);
		va_end(ap);
	}
	return CONFIG_ERROR;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

static void free_secret(char *s)
{
	if (s != NULL) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* Copies n bytes of untrusted s into buf for an error message: non-printable
 * bytes become '?', long input is cut. Never use on secrets. */
static const char *quote(char *buf, size_t len, const char *s, size_t n)
{
	size_t j = 0;
	const size_t keep = 128;

	for (size_t i = 0; i < n && j + 4 < len; i++) {
		if (i == keep) {
			memcpy(buf + j, "...", 3);
			j += 3;
			break;
		}
		buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	}
	buf[j] = '\0';
	return buf;
}

#define Q(s) quote((char[160]){0}, 160, (s), strlen(s))

static const struct option_def *find_option(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTIONS; i++)
		if (strlen(options[i].name) == len && memcmp(options[i].name, name, len) == 0)
			return &options[i];
	return NULL;
}

/* Strict decimal: digits only, no sign, no spaces, no overflow. */
static bool parse_i64(const char *s, int64_t *out)
{
	int64_t v = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return false;
		if (v > (INT64_MAX - (*s - '0')) / 10)
			return false;
		v = v * 10 + (*s - '0');
	}
	*out = v;
	return true;
}

/* Octal digits only ("0660" or "660"), value 0..0777. */
static bool parse_mode(const char *s, unsigned *out)
{
	unsigned v = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '7')
			return false;
		v = v * 8 + (unsigned)(*s - '0');
		if (v > 0777)
			return false;
	}
	*out = v;
	return true;
}

int config_log_level(const char *name)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};

	if (name == NULL)
		return -1;
	for (int i = 0; i < 4; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

static int add_listen(struct loader *l, const char *url, const char *where)
{
	lb_config_t *cfg = l->cfg;
	char msg[256];

	if (cfg->nlisten == CONFIG_MAX_LISTEN)
		return fail(l, "%s: too many listen URLs (at most %d)", where, CONFIG_MAX_LISTEN);
	if (url_parse_listen(url, &cfg->listen[cfg->nlisten], msg, sizeof(msg)) < 0)
		return fail(l, "%s '%s': %s", where, Q(url), msg);
	cfg->nlisten++;
	return 0;
}

static void redlock_clear(lb_config_t *cfg)
{
	for (int i = 0; i < cfg->nredlock; i++)
		redis_addr_clear(&cfg->redlock[i]);
	cfg->nredlock = 0;
}

/* --redlock URL,URL,URL[,...]: 3, 5 or 7 masters, each a redis:// or
 * unix:// URL as --redis takes it, no two the same. A later --redlock
 * replaces an earlier one. Messages never quote a URL (passwords). */
static int set_redlock(struct loader *l, const char *val, const char *where)
{
	lb_config_t *cfg = l->cfg;
	const char *p = val;
	char msg[256], one[1024];

	redlock_clear(cfg);
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		redis_addr_t *a;

		if (cfg->nredlock == CONFIG_REDLOCK_MAX)
			return fail(l, "%s: more than %d masters", where, CONFIG_REDLOCK_MAX);
		if (n == 0)
			return fail(l, "%s: master %d: empty URL", where, cfg->nredlock + 1);
		if (n >= sizeof(one))
			return fail(l, "%s: master %d: URL too long", where, cfg->nredlock + 1);
		memcpy(one, p, n);
		one[n] = '\0';
		a = &cfg->redlock[cfg->nredlock];
		if (url_parse_redis(one, a, msg, sizeof(msg)) < 0) {
			explicit_bzero(one, sizeof(one));
			return fail(l, "%s: master %d: %s", where, cfg->nredlock + 1, msg);
		}
		explicit_bzero(one, sizeof(one));
		cfg->nredlock++;
		if (a->kind != URL_TCP && a->kind != URL_UNIX)
			return fail(l, "%s: master %d: a Redlock master is one Redis (redis:// or "
			            "unix://), not a Sentinel set or a Cluster", where, cfg->nredlock);
		for (int k = 0; k < cfg->nredlock - 1; k++) {
			const redis_addr_t *b = &cfg->redlock[k];
			/* Two dbs of one server are one master: it would hold two
			 * votes, and Redlock's masters must fail independently. */
			if (a->kind == b->kind && a->port == b->port &&
			    strcmp(a->kind == URL_UNIX ? a->path : a->host,
			           b->kind == URL_UNIX ? b->path : b->host) == 0)
				return fail(l, "%s: masters %d and %d are the same", where, k + 1,
				            cfg->nredlock);
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	if (cfg->nredlock != 3 && cfg->nredlock != 5 && cfg->nredlock != 7)
		return fail(l, "%s: %d masters; Redlock takes 3, 5 or 7", where, cfg->nredlock);
	return 0;
}

static int set_int(struct loader *l, const struct option_def *o, int64_t v, const char *where)
{
	lb_config_t *cfg = l->cfg;

	if (v < o->min || v > o->max)
		return fail(l, "%s: must be an integer in %lld..%lld", where,
			    (long long)o->min, (long long)o->max);
	switch (o->id) {
	case OPT_DEFAULT_TTL_MS: cfg->default_ttl_ms = v; break;
	case OPT_REDIS_WAIT_REPLICAS: cfg->redis_wait_replicas = (int)v; break;
	case OPT_REDIS_WAIT_MS: cfg->redis_wait_ms = v; break;
	case OPT_POOL: cfg->pool = (int)v; break;
	case OPT_MAX_LINE: cfg->max_line = (size_t)v; break;
	case OPT_SHUTDOWN_GRACE_MS: cfg->shutdown_grace_ms = v; break;
	case OPT_CANARY_INTERVAL_MS: cfg->canary_interval_ms = v; break;
	case OPT_REDIS_BATCH_MAX: cfg->redis_batch_max = (int)v; break;
	case OPT_MAX_CONNECTIONS: cfg->max_connections = v; break;
	case OPT_MAX_LEASES_PER_SESSION: cfg->max_leases_per_session = v; break;
	case OPT_MAX_INFLIGHT: cfg->max_inflight = v; break;
	case OPT_MAX_WAITERS: cfg->max_waiters = v; break;
	case OPT_MAX_WAITERS_PER_SESSION: cfg->max_waiters_per_session = v; break;
	case OPT_MAX_WATCHES_PER_SESSION: cfg->max_watches_per_session = v; break;
	case OPT_MAX_QUEUE: cfg->max_queue = v; break;
	default: abort(); /* the table says T_INT only for the above */
	}
	return 0;
}

/* Applies one option given as a string (every flag; string keys of the file). */
static int set_string(struct loader *l, const struct option_def *o, const char *val, const char *where)
{
	lb_config_t *cfg = l->cfg;
	char msg[256];
	int64_t n;
	size_t len;

	switch (o->id) {
	case OPT_LISTEN:
		return add_listen(l, val, where);
	case OPT_REDIS:
		redis_addr_clear(&cfg->redis);
		l->redis_given = true;
		if (url_parse_redis(val, &cfg->redis, msg, sizeof(msg)) < 0)
			return fail(l, "%s: %s", where, msg); /* the URL may hold a password: not quoted */
		return 0;
	case OPT_REDLOCK:
		return set_redlock(l, val, where);
	case OPT_REDIS_PASSWORD_FILE:
	case OPT_AUTH_FILE:
		if (*val == '\0')
			return fail(l, "%s: empty file name", where);
		if (o->id == OPT_AUTH_FILE) {
			free(l->auth_file);
			l->auth_file = xstrdup(val);
		} else {
			free(l->password_file);
			l->password_file = xstrdup(val);
		}
		return 0;
	case OPT_PREFIX:
		len = strlen(val);
		if (len == 0 || len > PREFIX_MAX)
			return fail(l, "%s: must be 1..%d bytes", where, PREFIX_MAX);
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)val[i];
			if (c < 0x20 || c == 0x7f)
				return fail(l, "%s: control characters are not allowed", where);
			if (c == '{' || c == '}')
				return fail(l, "%s: '{' and '}' are not allowed (they would break hash tags)", where);
		}
		free(cfg->prefix);
		cfg->prefix = xstrdup(val);
		return 0;
	case OPT_SOCKET_MODE:
		if (!parse_mode(val, &cfg->socket_mode))
			return fail(l, "%s: must be an octal mode 0..0777, e.g. 0660", where);
		return 0;
	case OPT_LOG_LEVEL: {
		int lv = config_log_level(val);
		if (lv < 0)
			return fail(l, "%s: must be debug, info, warn or error", where);
		cfg->log_level = (log_level_t)lv;
		return 0;
	}
	case OPT_LOG_FORMAT:
		if (strcmp(val, "text") != 0 && strcmp(val, "json") != 0)
			return fail(l, "%s: must be text or json", where);
		cfg->log_json = strcmp(val, "json") == 0;
		return 0;
	case OPT_METRICS:
		if (url_parse_listen(val, &cfg->metrics, msg, sizeof(msg)) < 0)
			return fail(l, "%s: %s", where, msg);
		if (cfg->metrics.kind != URL_TCP)
			return fail(l, "%s: the metrics listener is tcp://HOST:PORT", where);
		cfg->has_metrics = true;
		return 0;
	default:
		if (o->type != T_INT)
			abort();
		if (!parse_i64(val, &n))
			return fail(l, "%s: must be an integer in %lld..%lld", where,
				    (long long)o->min, (long long)o->max);
		return set_int(l, o, n, where);
	}
}

/* A JSON string without embedded NUL, or NULL. */
static const char *json_cstring(const json_t *v)
{
	if (!json_is_string(v))
		return NULL;
	if (strlen(json_string_value(v)) != json_string_length(v))
		return NULL;
	return json_string_value(v);
}

static int apply_file_key(struct loader *l, const char *key, json_t *v, const char *where)
{
	const struct option_def *o = find_option(key, strlen(key));
	const char *s;

	if (o == NULL || !o->in_file)
		return fail(l, "%s: unknown key", where);
	switch (o->type) {
	case T_INT:
		if (!json_is_integer(v))
			return fail(l, "%s: must be an integer", where);
		return set_int(l, o, json_integer_value(v), where);
	case T_LISTEN:
		l->cfg->nlisten = 0; /* the file's list replaces the defaults */
		if (json_is_array(v)) {
			size_t i;
			json_t *e;
			if (json_array_size(v) == 0)
				return fail(l, "%s: must not be empty", where);
			json_array_foreach(v, i, e) {
				if ((s = json_cstring(e)) == NULL)
					return fail(l, "%s[%zu]: must be a string", where, i);
				if (add_listen(l, s, where) < 0)
					return CONFIG_ERROR;
			}
			return 0;
		}
		if ((s = json_cstring(v)) == NULL)
			return fail(l, "%s: must be a string or an array of strings", where);
		return add_listen(l, s, where);
	case T_STRING:
		if ((s = json_cstring(v)) == NULL)
			return fail(l, "%s: must be a string%s", where,
				    o->id == OPT_SOCKET_MODE ? " such as \"0660\"" : "");
		return set_string(l, o, s, where);
	default:
		abort();
	}
}

static int load_file(struct loader *l, const char *path)
{
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	char where[384], qpath[160];
	FILE *f;
	int rc = 0;

	quote(qpath, sizeof(qpath), path, strlen(path));
	f = fopen(path, "re");
	if (f == NULL)
		return fail(l, "config file '%s': %s", qpath, strerror(errno));
	root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
	fclose(f);
	if (root == NULL) {
		/* Drop jansson's "near '<text>'": the text may be part of a password. */
		char *near = strstr(jerr.text, " near ");
		if (near != NULL)
			*near = '\0';
		return fail(l, "config file '%s': line %d column %d: %s", qpath,
			    jerr.line, jerr.column, jerr.text);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return fail(l, "config file '%s': must be a JSON object", qpath);
	}
	json_object_foreach(root, key, v) {
		snprintf(where, sizeof(where), "config file '%s': key \"%s\"", qpath, Q(key));
		if ((rc = apply_file_key(l, key, v, where)) < 0)
			break;
	}
	json_decref(root);
	return rc;
}

/*
 * Reads a secret file into *out (see the top comment for the rules). The
 * message names the file, never its content.
 */
static int read_secret(struct loader *l, const char *what, const char *path, char **out)
{
	char *buf = xmalloc(SECRET_MAX + 2);
	size_t n = 0;
	int fd, e = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		e = errno;
		free(buf);
		return fail(l, "%s '%s': %s", what, Q(path), strerror(e));
	}
	while (n < SECRET_MAX + 1) {
		ssize_t r = read(fd, buf + n, SECRET_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			e = errno;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	if (e != 0) {
		fail(l, "%s '%s': %s", what, Q(path), strerror(e));
		goto bad;
	}
	if (n > SECRET_MAX) {
		fail(l, "%s '%s': larger than %d bytes", what, Q(path), SECRET_MAX);
		goto bad;
	}
	if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
		n -= 2;
	else if (n >= 1 && buf[n - 1] == '\n')
		n -= 1;
	buf[n] = '\0';
	if (n == 0) {
		fail(l, "%s '%s': empty", what, Q(path));
		goto bad;
	}
	if (memchr(buf, '\0', n) != NULL) {
		fail(l, "%s '%s': contains a NUL byte", what, Q(path));
		goto bad;
	}
	*out = buf;
	return 0;
bad:
	explicit_bzero(buf, SECRET_MAX + 2);
	free(buf);
	return CONFIG_ERROR;
}

/* A secret from the environment variable name into *out, unless it is unset
 * or empty. The message names the variable, never its value. */
static int env_secret(struct loader *l, const char *name, char **out)
{
	const char *env = getenv(name);

	if (env == NULL || *env == '\0')
		return 0;
	if (strlen(env) > SECRET_MAX)
		return fail(l, "$%s: longer than %d bytes", name, SECRET_MAX);
	*out = xstrdup(env);
	return 0;
}

static int resolve_secrets(struct loader *l)
{
	redis_addr_t *r = &l->cfg->redis;

	if (l->auth_file != NULL && read_secret(l, "auth file", l->auth_file, &l->cfg->auth_secret) < 0)
		return CONFIG_ERROR;
	for (int i = 0; i < l->cfg->nredlock; i++) {
		redis_addr_t *m = &l->cfg->redlock[i];
		int rc = 0;

		if (m->password != NULL)
			continue;
		if (l->password_file != NULL)
			rc = read_secret(l, "redis password file", l->password_file, &m->password);
		else
			rc = env_secret(l, ENV_REDIS_PASSWORD, &m->password);
		if (rc < 0)
			return rc;
	}
	if (l->cfg->nredlock > 0)
		return 0; /* cfg->redis is not used: no copy of a secret for it */
	if (r->password == NULL) {
		int rc;

		if (r->password_file != NULL) /* cluster://...?password_file= */
			rc = read_secret(l, "cluster URL password_file", r->password_file, &r->password);
		else if (l->password_file != NULL)
			rc = read_secret(l, "redis password file", l->password_file, &r->password);
		else
			rc = env_secret(l, ENV_REDIS_PASSWORD, &r->password);
		if (rc < 0)
			return rc;
	}
	if (r->kind != URL_SENTINEL)
		return 0;
	if (r->sentinel_password_file != NULL)
		return read_secret(l, "sentinel password file", r->sentinel_password_file,
				   &r->sentinel_password);
	return env_secret(l, ENV_SENTINEL_PASSWORD, &r->sentinel_password);
}

static void set_defaults(lb_config_t *cfg)
{
	char msg[128];

	memset(cfg, 0, sizeof(*cfg));
	if (url_parse_listen(CONFIG_DEFAULT_TCP, &cfg->listen[0], msg, sizeof(msg)) < 0 ||
	    url_parse_listen(CONFIG_DEFAULT_UNIX, &cfg->listen[1], msg, sizeof(msg)) < 0 ||
	    url_parse_redis(CONFIG_DEFAULT_REDIS, &cfg->redis, msg, sizeof(msg)) < 0)
		abort(); /* compile-time constants */
	cfg->nlisten = 2;
	cfg->prefix = xstrdup("lb:");
	cfg->default_ttl_ms = 30000;
	cfg->redis_wait_replicas = 0;
	cfg->redis_wait_ms = 500;
	cfg->auth_secret = NULL;
	cfg->socket_mode = 0660;
	cfg->pool = 4;
	cfg->max_line = 65536;
	cfg->log_level = LOG_INFO;
	cfg->shutdown_grace_ms = 5000;
	cfg->canary_interval_ms = 250;
	cfg->redis_batch_max = 64;
	cfg->max_connections = 10000;
	cfg->max_leases_per_session = 10000;
	cfg->max_inflight = 1024;
	cfg->max_waiters = 100000;
	cfg->max_waiters_per_session = 1000;
	cfg->max_watches_per_session = 1000;
	cfg->max_queue = 10000;
}

static void print_usage(FILE *out)
{
	fputs("Usage: lockbrokerd [FLAGS]\n"
	      "Serves distributed locks kept in Redis over TCP and Unix sockets.\n"
	      "\n"
	      "Flags take their value as --flag VALUE or --flag=VALUE (use the second form\n"
	      "for a value that starts with --). Flags override the config file.\n"
	      "\n",
	      out);
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		char head[64];
		const char *h = o->help;

		snprintf(head, sizeof(head), "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		/* one help line per '\n', aligned after the flag column */
		for (bool first = true; *h != '\0'; first = false) {
			const char *nl = strchr(h, '\n');
			int n = nl ? (int)(nl - h) : (int)strlen(h);
			fprintf(out, "  %-28s %.*s\n", first ? head : "", n, h);
			h += n + (nl ? 1 : 0);
		}
	}
	fputs("\nEnvironment:\n"
	      "  " ENV_REDIS_PASSWORD "    the Redis password when neither the\n"
	      "                               URL nor --redis-password-file gives one\n"
	      "  " ENV_SENTINEL_PASSWORD " the Redis Sentinel password when a\n"
	      "                               sentinel:// URL has no\n"
	      "                               sentinel_password_file\n",
	      out);
}

struct arg {
	const struct option_def *opt;
	const char *value; /* NULL for T_NONE */
};

/* Tokenizes argv[*i] (and its value) into a; advances *i. */
static int next_arg(struct loader *l, int argc, char **argv, int *i, struct arg *a)
{
	const char *s = argv[*i];
	const char *name, *eq;
	size_t nlen;

	if (strncmp(s, "--", 2) != 0)
		return fail(l, "unexpected argument #%d (flags start with --; see --help)", *i);
	name = s + 2;
	eq = strchr(name, '=');
	nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
	a->opt = find_option(name, nlen);
	if (a->opt == NULL) {
		char q[160];
		return fail(l, "unknown flag '--%s' (see --help)", quote(q, sizeof(q), name, nlen));
	}
	if (a->opt->type == T_NONE) {
		if (eq != NULL)
			return fail(l, "--%s takes no value", a->opt->name);
		a->value = NULL;
		*i += 1;
	} else if (eq != NULL) {
		a->value = eq + 1;
		*i += 1;
	} else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
		a->value = argv[*i + 1];
		*i += 2;
	} else {
		return fail(l, "--%s needs a value (--%s %s)", a->opt->name, a->opt->name, a->opt->arg);
	}
	return 0;
}

static int load(struct loader *l, int argc, char **argv)
{
	const char *config_path = NULL;
	struct arg a;
	char where[64];
	int rc;

	/* Pass 1: tokenize all, find --config, stop at --help / --version. */
	for (int i = 1; i < argc;) {
		if ((rc = next_arg(l, argc, argv, &i, &a)) < 0)
			return rc;
		switch (a.opt->id) {
		case OPT_HELP:
			print_usage(stdout);
			fflush(stdout);
			return CONFIG_EXIT;
		case OPT_VERSION:
			fputs("lockbrokerd " LOCKBROKER_VERSION "\n", stdout);
			fflush(stdout);
			return CONFIG_EXIT;
		case OPT_CONFIG:
			if (config_path != NULL)
				return fail(l, "--config given more than once");
			if (*a.value == '\0')
				return fail(l, "--config: empty file name");
			config_path = a.value;
			break;
		default:
			break;
		}
	}

	/* Pass 2: the file. */
	if (config_path != NULL && (rc = load_file(l, config_path)) < 0)
		return rc;

	/* Pass 3: the flags, left to right. */
	for (int i = 1; i < argc;) {
		if ((rc = next_arg(l, argc, argv, &i, &a)) < 0)
			return rc;
		if (a.opt->id == OPT_CONFIG)
			continue;
		if (a.opt->id == OPT_LISTEN && !l->cli_listen) {
			l->cfg->nlisten = 0; /* the command line's list replaces the file's */
			l->cli_listen = true;
		}
		snprintf(where, sizeof(where), "--%s", a.opt->name);
		if ((rc = set_string(l, a.opt, a.value, where)) < 0)
			return rc;
	}

	if (l->cfg->nredlock > 0 && l->redis_given)
		return fail(l, "--redlock and --redis exclude each other: give one");
	if (l->cfg->nredlock > 0 && l->cfg->redis_wait_replicas > 0)
		return fail(l, "--redis-wait-replicas does not apply to --redlock (its masters are "
		            "independent: a majority of them is what keeps a grant)");
	return resolve_secrets(l);
}

int config_load(lb_config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
	struct loader l = {.cfg = cfg, .err = err, .errlen = errlen};
	int rc;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	set_defaults(cfg);
	rc = load(&l, argc, argv);
	free(l.password_file);
	free(l.auth_file);
	if (rc != CONFIG_OK)
		config_free(cfg);
	return rc;
}

void config_free(lb_config_t *cfg)
{
	if (cfg == NULL)
		return;
	redis_addr_clear(&cfg->redis);
	redlock_clear(cfg);
	free(cfg->prefix);
	free_secret(cfg->auth_secret);
	memset(cfg, 0, sizeof(*cfg));
}
