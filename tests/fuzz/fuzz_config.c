/*
 * fuzz_config.c - libFuzzer target for the daemon's settings loader
 * (broker/config.c: config_load; broker/config_reload.c: config_apply_reload), driven as the daemon
 * drives it: a config file and a command line.
 *
 * Input: byte 0 holds flags (bit 0: put "--config c" first on the command
 * line; bit 1: leave out the secret file "s"); then the config file's
 * bytes up to the first NUL, written to "c"; then the command-line
 * arguments, NUL-separated (at most 32). The secret file "s" holds a known
 * secret, so that "--auth-file s" or "redis-password-file": "s" reads it;
 * so does the absolute name SECRET_PATH, which a sentinel:// URL's
 * sentinel_password_file and a cluster:// URL's password_file need.
 *
 * The loader opens files named in the input. So that it opens nothing but
 * "c" and "s", the target runs in a private temporary directory and the
 * loader's open/fopen calls are renamed to this file's sandbox_* (objcopy,
 * Makefile): a name holding '/' is refused with ENOENT, never opened,
 * whatever the input asks for (/dev/watchdog, a FIFO, /dev/stdin...), but
 * for SECRET_PATH, which opens "s".
 * libFuzzer's own files (corpus, crash inputs) are untouched by this.
 * stdout goes to /dev/null (--help); LOCKBROKER_REDIS_PASSWORD and
 * LOCKBROKER_SENTINEL_PASSWORD are unset.
 *
 * Checked, from config.h's contract:
 * - config_load returns CONFIG_OK, CONFIG_EXIT or CONFIG_ERROR; on the last
 *   two the struct is freed and zeroed; on CONFIG_ERROR the message is
 *   printable ASCII (file bytes and names are masked) and never holds the
 *   secret (unless the input spells it out itself);
 * - on CONFIG_OK every setting is within its documented range, and loading
 *   the same input again gives a config that config_apply_reload finds
 *   identical (nothing to restart);
 * - config_free leaves a zeroed struct.
 * Any failed check aborts (libFuzzer reports it as a crash).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/config.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_config: check failed: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                    \
			abort();                                               \
		}                                                              \
	} while (0)

#define MAX_ARGS 32
#define SECRET "Sup3r-S3cret-0f-fuzz"
#define SECRET_PATH "/lb-fuzz/s" /* in config.dict */

/* ---- the only files the loader may open ---------------------------------- */

/* The Makefile renames config.o's calls of open, open64, fopen and fopen64
 * to these (objcopy --redefine-sym); nothing else in the binary, libFuzzer
 * included, goes through them. */
int sandbox_open(const char *path, int flags, ...);
int sandbox_open64(const char *path, int flags, ...);
FILE *sandbox_fopen(const char *path, const char *mode);
FILE *sandbox_fopen64(const char *path, const char *mode);

/* The name to open instead of path, or NULL (errno set): only names
 * without '/' (the private directory's), and SECRET_PATH for "s". */
static const char *allowed(const char *path)
{
	if (strcmp(path, SECRET_PATH) == 0)
		return "s";
	if (strchr(path, '/') == NULL)
		return path;
	errno = ENOENT;
	return NULL;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int sandbox_open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	path = allowed(path);
	return path != NULL ? open(path, flags, mode) : -1;
}

int sandbox_open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	path = allowed(path);
	return path != NULL ? open64(path, flags, mode) : -1;
}

FILE *sandbox_fopen(const char *path, const char *mode)
{
	path = allowed(path);
	return path != NULL ? fopen(path, mode) : NULL;
}

FILE *sandbox_fopen64(const char *path, const char *mode)
{
	path = allowed(path);
	return path != NULL ? fopen64(path, mode) : NULL;
}

/* ---- the target ------------------------------------------------------------ */

static char dir[64];

static void remove_dir(void)
{
	unlink("c");
	unlink("s");
	if (chdir("/") == 0)
		rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");
	struct stat st;
	int fd;

	(void)argc;
	(void)argv;
	/* A tmpfs when there is one: the target writes two files a run. */
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
		tmp = "/dev/shm";
	snprintf(dir, sizeof(dir), "%s/lb-fuzz-config-XXXXXX",
		 tmp != NULL && strlen(tmp) < 32 ? tmp : "/tmp");
	CHECK(mkdtemp(dir) != NULL);
	CHECK(chdir(dir) == 0);
	atexit(remove_dir);
	fd = open("/dev/null", O_WRONLY);
	CHECK(fd >= 0 && dup2(fd, STDOUT_FILENO) == STDOUT_FILENO);
	close(fd);
	unsetenv("LOCKBROKER_REDIS_PASSWORD");
	unsetenv("LOCKBROKER_SENTINEL_PASSWORD");
	return 0;
}

/* A new file each time: truncating one that holds data makes ext4 flush
 * it (auto_da_alloc), a hundredfold slowdown. */
static void write_file(const char *name, const uint8_t *data, size_t n)
{
	int fd;

	unlink(name);
	fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);

	CHECK(fd >= 0);
	CHECK(n == 0 || write(fd, data, n) == (ssize_t)n);
	close(fd);
}

static bool zeroed(const lb_config_t *cfg)
{
	static const lb_config_t zero;

	return memcmp(cfg, &zero, sizeof(zero)) == 0;
}

static bool in_range(int64_t v, int64_t lo, int64_t hi)
{
	return v >= lo && v <= hi;
}

static bool secret_ok(const char *s)
{
	return s == NULL || in_range((int64_t)strlen(s), 1, 4096);
}

static void check_redis(const redis_addr_t *r)
{
	CHECK(r->kind == URL_TCP || r->kind == URL_UNIX || r->kind == URL_SENTINEL ||
	      r->kind == URL_CLUSTER);
	CHECK(r->kind != URL_TCP || in_range(r->port, 1, 65535));
	CHECK(r->kind != URL_UNIX || r->path[0] == '/');
	CHECK(r->db >= 0);
	CHECK(secret_ok(r->password) && secret_ok(r->sentinel_password));
	if (r->kind != URL_CLUSTER) {
		CHECK(r->nseeds == 0 && r->password_file == NULL);
	} else {
		CHECK(in_range(r->nseeds, 1, URL_SEEDS_MAX) && r->db == 0);
		for (int i = 0; i < r->nseeds; i++)
			CHECK(in_range(r->seeds[i].port, 1, 65535) && r->seeds[i].host[0] != '\0');
		/* the file, when named, was read: the only readable one holds SECRET */
		if (r->password_file != NULL)
			CHECK(r->password != NULL && strcmp(r->password, SECRET) == 0);
	}
	if (r->kind != URL_SENTINEL) {
		CHECK(r->nsentinels == 0 && r->sentinel_password == NULL &&
		      r->sentinel_password_file == NULL);
		return;
	}
	CHECK(in_range(r->nsentinels, 1, URL_SENTINELS_MAX));
	for (int i = 0; i < r->nsentinels; i++)
		CHECK(in_range(r->sentinels[i].port, 1, 65535) && r->sentinels[i].host[0] != '\0');
	CHECK(in_range((int64_t)strlen(r->master_name), 1, URL_MASTER_NAME_MAX));
	/* the file, when named, was read: the only readable one holds SECRET */
	if (r->sentinel_password_file != NULL)
		CHECK(r->sentinel_password != NULL && strcmp(r->sentinel_password, SECRET) == 0);
}

static void check_loaded(const lb_config_t *cfg)
{
	CHECK(cfg->nlisten >= 1 && cfg->nlisten <= CONFIG_MAX_LISTEN);
	for (size_t i = 0; i < cfg->nlisten; i++) {
		const listen_addr_t *a = &cfg->listen[i];

		CHECK(a->kind == URL_TCP || a->kind == URL_UNIX);
		CHECK(a->kind == URL_UNIX || in_range(a->port, 0, 65535));
		CHECK(a->kind == URL_TCP || a->path[0] == '/');
	}
	check_redis(&cfg->redis);
	CHECK(in_range(cfg->redis_wait_replicas, 0, 16));
	CHECK(in_range(cfg->redis_wait_ms, 1, 10000));
	CHECK(in_range(cfg->redis_batch_max, 0, 1024));
	CHECK(cfg->prefix != NULL && in_range((int64_t)strlen(cfg->prefix), 1, 64));
	CHECK(strpbrk(cfg->prefix, "{}") == NULL);
	CHECK(in_range(cfg->default_ttl_ms, 100, 86400000));
	CHECK(cfg->auth_secret == NULL ||
	      in_range((int64_t)strlen(cfg->auth_secret), 1, 4096));
	CHECK(cfg->socket_mode <= 0777);
	CHECK(in_range(cfg->pool, 1, 64));
	CHECK(in_range((int64_t)cfg->max_line, 64, 16777216));
	CHECK(in_range(cfg->log_level, LOG_DEBUG, LOG_ERROR));
	CHECK(!cfg->has_metrics || cfg->metrics.kind == URL_TCP);
	CHECK(in_range(cfg->shutdown_grace_ms, 0, 3600000));
	CHECK(in_range(cfg->max_connections, 1, 1000000));
	CHECK(in_range(cfg->max_leases_per_session, 1, 1000000));
	CHECK(in_range(cfg->max_inflight, 1, 65536));
	CHECK(in_range(cfg->max_waiters, 1, 10000000));
	CHECK(in_range(cfg->max_waiters_per_session, 1, 1000000));
	CHECK(in_range(cfg->max_queue, 1, 10000000));
}

/* secret_in_input: the input itself holds the secret's first bytes (as a
 * flag name, say), so a message may quote them. */
static void check_message(const char *err, size_t cap, bool secret_in_input)
{
	size_t n = strnlen(err, cap);

	CHECK(n > 0 && n < cap);
	for (size_t i = 0; i < n; i++)
		CHECK(err[i] >= 0x20 && err[i] < 0x7f);
	CHECK(secret_in_input || strstr(err, "Sup3r") == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *args, *argv[MAX_ARGS + 4], err[512], restart[256];
	lb_config_t cfg, again;
	const uint8_t *nul;
	size_t file_len;
	int argc = 0, rc, rc2;

	if (size < 1)
		return 0;
	data++;
	size--;
	nul = memchr(data, '\0', size);
	file_len = nul != NULL ? (size_t)(nul - data) : size;
	write_file("c", data, file_len);
	if (data[-1] & 2)
		unlink("s");
	else
		write_file("s", (const uint8_t *)SECRET "\n", strlen(SECRET) + 1);

	/* The arguments: a NUL-terminated copy, cut at each NUL. */
	args = malloc(size - file_len + 1);
	CHECK(args != NULL);
	memcpy(args, data + file_len, size - file_len);
	args[size - file_len] = '\0';
	argv[argc++] = (char *)"lockbrokerd";
	if (data[-1] & 1) {
		argv[argc++] = (char *)"--config";
		argv[argc++] = (char *)"c";
	}
	for (char *p = args, *end = args + (size - file_len); p < end && argc < MAX_ARGS + 3;) {
		size_t n;

		if (*p == '\0') { /* the separator */
			p++;
			continue;
		}
		n = strlen(p);
		argv[argc++] = p;
		p += n;
	}
	argv[argc] = NULL;

	memset(&cfg, 0, sizeof(cfg));
	rc = config_load(&cfg, argc, argv, err, sizeof(err));
	CHECK(rc == CONFIG_OK || rc == CONFIG_EXIT || rc == CONFIG_ERROR);
	if (rc == CONFIG_ERROR)
		check_message(err, sizeof(err), memmem(data, size, "Sup3r", 5) != NULL);
	if (rc != CONFIG_OK) {
		CHECK(zeroed(&cfg));
	} else {
		check_loaded(&cfg);
		memset(&again, 0, sizeof(again));
		rc2 = config_load(&again, argc, argv, err, sizeof(err));
		CHECK(rc2 == CONFIG_OK);
		restart[0] = '\0';
		config_apply_reload(&cfg, &again, restart, sizeof(restart));
		if (restart[0] != '\0') {
			fprintf(stderr, "fuzz_config: the same input reloaded needs a restart of: %s\n",
				restart);
			abort();
		}
		check_loaded(&cfg);
		config_free(&again);
		CHECK(zeroed(&again));
	}
	config_free(&cfg);
	CHECK(zeroed(&cfg));
	free(args);
	return 0;
}
