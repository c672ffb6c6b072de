/*
 * url.c - where the broker is and what the secret is: broker URLs
 * (tcp://HOST:PORT, tcp://[V6]:PORT, unix:///PATH), the default URL as
 * lockctl chooses it, and secret files read as the broker reads its own.
 *
 * Nothing here does network I/O; the secret is never put in a message.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

const char *lbc_default_url(void)
{
	const char *env = getenv("LOCKBROKER_URL");
	struct stat st;

	if (env && *env)
		return env;
	if (stat(LBC_DEFAULT_UNIX, &st) == 0)
		return "unix://" LBC_DEFAULT_UNIX;
	return LBC_DEFAULT_TCP;
}

int lbc_url_parse(const char *url, lbc_addr_t *a, char *errbuf, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	if (url == NULL) {
		snprintf(errbuf, errlen, "no URL");
		return -1;
	}
	/* schemes are case-insensitive (RFC 3986), as the broker's own parser */
	if (strncasecmp(url, "unix://", 7) == 0) {
		const char *path = url + 7;
		size_t n = strlen(path);
		if (n == 0) {
			snprintf(errbuf, errlen, "unix:// URL without a path");
			return -1;
		}
		if (path[0] != '/') {
			snprintf(errbuf, errlen, "the socket path must be absolute (unix:///PATH)");
			return -1;
		}
		if (n >= sizeof(a->path)) {
			snprintf(errbuf, errlen, "socket path longer than %zu bytes", sizeof(a->path) - 1);
			return -1;
		}
		a->is_unix = true;
		memcpy(a->path, path, n + 1);
		return 0;
	}
	if (strncasecmp(url, "tcp://", 6) == 0) {
		const char *h = url + 6, *colon, *hend;
		char *end;
		long port;

		if (*h == '[') {
			hend = strchr(h, ']');
			if (hend == NULL || hend[1] != ':') {
				snprintf(errbuf, errlen, "expected tcp://[ADDRESS]:PORT");
				return -1;
			}
			colon = hend + 1;
			h++;
		} else {
			colon = strrchr(h, ':');
			if (colon == NULL || memchr(h, ':', (size_t)(colon - h)) != NULL) {
				snprintf(errbuf, errlen, "expected tcp://HOST:PORT (IPv6 in brackets)");
				return -1;
			}
			hend = colon;
		}
		if (hend == h || (size_t)(hend - h) >= sizeof(a->host)) {
			snprintf(errbuf, errlen, "bad host");
			return -1;
		}
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || errno || port < 1 || port > 65535) {
			snprintf(errbuf, errlen, "the port must be 1..65535");
			return -1;
		}
		memcpy(a->host, h, (size_t)(hend - h));
		a->host[hend - h] = '\0';
		a->port = (int)port;
		return 0;
	}
	snprintf(errbuf, errlen, "expected tcp://HOST:PORT or unix:///PATH");
	return -1;
}

int lbc_url_read_secret(const char *path, char **out, char *errbuf, size_t errlen)
{
	FILE *f = fopen(path, "rbe");
	char *buf;
	size_t n;

	*out = NULL;
	if (f == NULL) {
		snprintf(errbuf, errlen, "cannot read auth_file: %s", strerror(errno));
		return -1;
	}
	buf = malloc(65537);
	if (buf == NULL)
		abort();
	n = fread(buf, 1, 65537, f);
	if (ferror(f) || n > 65536) {
		snprintf(errbuf, errlen, "cannot read auth_file: %s",
		         ferror(f) ? "read error" : "larger than 64 KiB");
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	if (n > 0 && buf[n - 1] == '\n') {
		n--;
		if (n > 0 && buf[n - 1] == '\r')
			n--;
	}
	buf[n] = '\0';
	if (strlen(buf) != n || !lbc_utf8_valid(buf, n)) {
		snprintf(errbuf, errlen, "auth_file: the secret is not UTF-8 text");
		free(buf);
		return -1;
	}
	*out = buf;
	return 0;
}
