/*
 * url.h - parsing of the URLs the daemon takes: listen addresses
 * (tcp://HOST:PORT, unix:///PATH) and the Redis address
 * (redis://[:password@]host:port[/db], unix:///PATH[?db=N]).
 *
 * Pure functions, no I/O. HOST may be a name, an IPv4 address or an IPv6
 * address in brackets ([::1]); the brackets are not kept. Errors are
 * reported as -1 with a human message in err (never echoing a password).
 */
#ifndef LB_BROKER_URL_H
#define LB_BROKER_URL_H

#include <stddef.h>

#define URL_HOST_MAX 255
#define URL_PATH_MAX 107 /* sun_path is 108 bytes with its NUL */

typedef enum url_kind {
	URL_TCP,
	URL_UNIX,
} url_kind_t;

typedef struct listen_addr {
	url_kind_t kind;
	char host[URL_HOST_MAX + 1]; /* URL_TCP */
	int port;                    /* URL_TCP, 1..65535 (0 is allowed: any free port) */
	char path[URL_PATH_MAX + 1]; /* URL_UNIX, absolute */
} listen_addr_t;

typedef struct redis_addr {
	url_kind_t kind;
	char host[URL_HOST_MAX + 1]; /* URL_TCP; default port 6379 when absent */
	int port;
	char path[URL_PATH_MAX + 1]; /* URL_UNIX */
	char *password;              /* malloc'd, NULL when the URL has none */
	int db;                      /* 0 when absent; 0..INT_MAX */
} redis_addr_t;

/* Returns 0, or -1 with a message in err. */
int url_parse_listen(const char *url, listen_addr_t *out, char *err, size_t errlen);
/* Returns 0, or -1 with a message in err. On success out->password is owned
 * by out: release it with redis_addr_clear(). */
int url_parse_redis(const char *url, redis_addr_t *out, char *err, size_t errlen);
void redis_addr_clear(redis_addr_t *a);

/* Writes "tcp://127.0.0.1:7380", "tcp://[::1]:7380" or "unix:///p" into buf. */
void url_format_listen(const listen_addr_t *a, char *buf, size_t len);

#endif
