/*
 * nodeask.c - one hiredis async connection to one node at a time (see
 * nodeask.h for the lifetimes it keeps).
 */
#include "broker/store/nodeask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/store/redis_uv.h"

/* Tells a nodeask that hiredis freed its context. */
struct naref {
	nodeask_t *na;
	redisAsyncContext *ac;
};

/* The log's " role=R" part, or "". */
static const char *role_sep(const nodeask_t *na)
{
	return na->role ? " role=" : "";
}

static const char *role_of(const nodeask_t *na)
{
	return na->role ? na->role : "";
}

static void on_freed(void *priv)
{
	struct naref *ref = priv;

	if (ref->na->ac == ref->ac)
		ref->na->ac = NULL;
	free(ref);
}

void nodeask_abandon(nodeask_t *na, bool in_cb)
{
	redisAsyncContext *ac = na->ac;

	na->attempt++;
	na->ac = NULL;
	na->reconnect = false;
	if (!ac)
		return;
	if (in_cb)
		redisAsyncDisconnect(ac);
	else
		redisAsyncFree(ac); /* pending callbacks run, stale */
}

nodeask_t *nodeask_of(const redisAsyncContext *ac, void *priv)
{
	nodeask_t *na = ac->data;

	return na && na->ac == ac && (uintptr_t)priv == na->attempt ? na : NULL;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	nodeask_t *na = ac->data;

	if (status == REDIS_OK || !na || na->ac != ac)
		return;
	LOG(LOG_WARN, "msg=\"%s unreachable\"%s%s %s=%s:%d err=\"%s\"", na->what, role_sep(na),
	    role_of(na), na->key, na->host, na->port, ac->errstr);
	na->attempt++;
	na->ac = NULL; /* hiredis frees it after this */
	na->fail(na, false);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	nodeask_t *na = ac->data;

	(void)status;
	if (!na || na->ac != ac)
		return; /* abandoned already */
	if (na->log_lost)
		LOG(LOG_WARN, "msg=\"%s connection lost\"%s%s %s=%s:%d", na->what, role_sep(na),
		    role_of(na), na->key, na->host, na->port);
	na->attempt++;
	na->ac = NULL;
	na->fail(na, false);
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv)
{
	nodeask_t *na = nodeask_of(ac, priv);
	redisReply *reply = r;

	if (!na || !reply || reply->type != REDIS_REPLY_ERROR)
		return;
	LOG(LOG_WARN, "msg=\"%s refused the password\"%s%s %s=%s:%d", na->what, role_sep(na),
	    role_of(na), na->key, na->host, na->port);
	nodeask_abandon(na, true);
	na->fail(na, true);
}

static void open_ip(nodeask_t *na, const char *ip)
{
	redisAsyncContext *ac = redisAsyncConnect(ip, na->port);
	struct naref *ref;

	REQUIRE(ac != NULL);
	if (ac->err) {
		LOG(LOG_WARN, "msg=\"%s unreachable\"%s%s %s=%s:%d err=\"%s\"", na->what, role_sep(na),
		    role_of(na), na->key, na->host, na->port, ac->errstr);
		redisAsyncFree(ac);
		na->fail(na, false);
		return;
	}
	ref = xmalloc(sizeof(*ref));
	*ref = (struct naref){na, ac};
	if (redis_uv_attach(ac, na->loop, on_freed, ref) != REDIS_OK) {
		free(ref);
		redisAsyncFree(ac);
		na->fail(na, false);
		return;
	}
	ac->data = na;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	na->ac = ac;
	if (na->password) {
		const char *argv[2] = {"AUTH", na->password};
		size_t argvlen[2] = {4, strlen(na->password)};
		redisAsyncCommandArgv(ac, on_auth, nodeask_tag(na), 2, argv, argvlen);
	}
	na->open(na);
}

static void start(nodeask_t *na);

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	nodeask_t *na = (nodeask_t *)((char *)req - offsetof(nodeask_t, gai));
	char ip[64] = "";

	na->resolving = false;
	for (struct addrinfo *ai = status == 0 ? res : NULL; ai && !ip[0]; ai = ai->ai_next)
		redis_uv_addr_name(ai, ip, sizeof(ip));
	uv_freeaddrinfo(res);
	if (na->closed)
		return;
	if (na->gai_attempt != na->attempt) {
		/* Abandoned while it resolved: the gai request is free again for
		 * the connect that waits for it, if one does. */
		if (na->reconnect) {
			na->reconnect = false;
			start(na);
		}
		return;
	}
	if (!ip[0]) {
		LOG(LOG_WARN, "msg=\"cannot resolve the %s\"%s%s %s=%s:%d err=\"%s\"", na->what,
		    role_sep(na), role_of(na), na->key, na->host, na->port,
		    status ? uv_strerror(status) : "no address");
		na->fail(na, false);
		return;
	}
	open_ip(na, ip);
}

/* Connects to na->host:na->port as a new attempt. */
static void start(nodeask_t *na)
{
	struct in6_addr a6;
	struct addrinfo hints;
	int rc;

	na->attempt++;
	if (na->resolving) {
		na->reconnect = true; /* one gai request per nodeask: on_resolved */
		return;
	}
	if (uv_inet_pton(AF_INET, na->host, &a6) == 0 || uv_inet_pton(AF_INET6, na->host, &a6) == 0) {
		open_ip(na, na->host);
		return;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	na->gai_attempt = na->attempt;
	rc = uv_getaddrinfo(na->loop, &na->gai, on_resolved, na->host, NULL, &hints);
	if (rc != 0) {
		LOG(LOG_WARN, "msg=\"cannot resolve the %s\"%s%s %s=%s:%d err=\"%s\"", na->what,
		    role_sep(na), role_of(na), na->key, na->host, na->port, uv_strerror(rc));
		na->fail(na, false);
		return;
	}
	na->resolving = true;
}

void nodeask_connect(nodeask_t *na, const char *host, int port)
{
	if (na->closed)
		return;
	nodeask_abandon(na, false); /* never two contexts: the old one would leak */
	snprintf(na->host, sizeof(na->host), "%s", host);
	na->port = port;
	start(na);
}

void nodeask_close(nodeask_t *na)
{
	if (na->closed)
		return;
	na->closed = true;
	if (na->resolving)
		uv_cancel((uv_req_t *)&na->gai);
	nodeask_abandon(na, false);
}
