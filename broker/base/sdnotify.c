/*
 * sdnotify.c - see sdnotify.h. The socket is opened per message: the broker
 * sends two in its life (ready, stopping).
 */
#include "broker/base/sdnotify.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/base/log.h"

int sdnotify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len;
	socklen_t salen;
	int fd, rc;

	if (!path || !*path)
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) {
		LOG(LOG_WARN, "msg=\"NOTIFY_SOCKET is not a usable socket address\"");
		return -1;
	}
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		LOG(LOG_WARN, "msg=\"sd_notify socket failed\" err=\"%s\"", strerror(errno));
		return -1;
	}
	rc = (int)sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	close(fd);
	if (rc < 0) {
		LOG(LOG_WARN, "msg=\"sd_notify failed\" state=\"%s\" err=\"%s\"", state, strerror(errno));
		return -1;
	}
	LOG(LOG_DEBUG, "msg=\"sd_notify\" state=\"%s\"", state);
	return 0;
}
