/*
 * url.h - parsing of the URLs the daemon takes: listen addresses
 * (tcp://HOST:PORT, unix:///PATH) and the Redis address
 * (redis://[:password@]host:port[/db], unix:///PATH[?db=N],
 * sentinel://[:password@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[?db=N&
 * sentinel_password_file=F]: the sentinels to ask for the master, and the
 * master's password; or cluster://[:password@]HOST[:PORT][,HOST[:PORT]...]
 * [?password_file=F]: seed nodes of a Redis Cluster, and the password of
 * its nodes, given in the URL or in F, not both; no db, a cluster has only
 * db 0. url.c's top comment says where each part ends).
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

#define URL_SENTINELS_MAX 16
#define URL_MASTER_NAME_MAX 255
#define URL_SENTINEL_DEFAULT_PORT 26379

#define URL_REDIS_DEFAULT_PORT 6379 /* redis:// and cluster:// seeds */
#define URL_SEEDS_MAX 16

typedef enum url_kind {
	URL_TCP,
	URL_UNIX,
	URL_SENTINEL, /* redis_addr_t only */
	URL_CLUSTER,  /* redis_addr_t only */
} url_kind_t;

typedef struct host_port {
	char host[URL_HOST_MAX + 1]; /* a name or an address, brackets dropped */
	int port;                    /* 1..65535 */
} host_port_t;

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
	char *password;              /* malloc'd, NULL when the URL has none; for
	                              * URL_SENTINEL the master's password, for
	                              * URL_CLUSTER the nodes' */
	int db;                      /* 0 when absent; 0..INT_MAX; always 0 for
	                              * URL_CLUSTER */
	/* URL_SENTINEL: host and port above are unused (the master is asked
	 * for); the sentinels in the URL's order, default port 26379. */
	int nsentinels;                          /* 1..URL_SENTINELS_MAX */
	host_port_t sentinels[URL_SENTINELS_MAX];
	char master_name[URL_MASTER_NAME_MAX + 1]; /* 1..255 bytes, printable ASCII
	                                            * but space / ? & # %; as written */
	char *sentinel_password_file;  /* malloc'd from ?sentinel_password_file=, or
	                                * NULL; absolute, at most 4096 bytes */
	char *sentinel_password;       /* malloc'd; resolved by config (file, else env), or NULL */
	/* URL_CLUSTER: host and port above are unused (the cluster's slot map
	 * names the masters); the seed nodes in the URL's order, default port
	 * 6379. */
	int nseeds;                    /* 1..URL_SEEDS_MAX */
	host_port_t seeds[URL_SEEDS_MAX];
	char *password_file;           /* malloc'd from ?password_file=, or NULL;
	                                * absolute, at most 4096 bytes; a URL
	                                * with it has no password (config reads
	                                * the file into password) */
} redis_addr_t;

/* Returns 0, or -1 with a message in err. */
int url_parse_listen(const char *url, listen_addr_t *out, char *err, size_t errlen);
/* Returns 0, or -1 with a message in err. On success out->password,
 * out->sentinel_password_file and out->password_file are owned by out:
 * release them with redis_addr_clear() (which also frees
 * sentinel_password). On failure out is left cleared. */
int url_parse_redis(const char *url, redis_addr_t *out, char *err, size_t errlen);
void redis_addr_clear(redis_addr_t *a);

/* Writes "tcp://127.0.0.1:7380", "tcp://[::1]:7380" or "unix:///p" into buf. */
void url_format_listen(const listen_addr_t *a, char *buf, size_t len);

#endif
