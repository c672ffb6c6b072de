/*
 * cluster_map.c - the slot map and the redirects of Redis Cluster (see
 * cluster_map.h). A CLUSTER SLOTS reply is an array of ranges, each
 * [start, end, master, replica...], a node being [host, port, id, ...].
 */
#include "broker/store/cluster_map.h"

#include <stdio.h>
#include <string.h>

static void clear(cluster_map_t *m)
{
	m->nmasters = 0;
	for (int k = 0; k < CLUSTER_MASTERS_MAX; k++)
		m->epoch[k] = -1;
	for (int s = 0; s < SLOT_COUNT; s++)
		m->owner[s] = -1;
}

static int fail(cluster_map_t *m, char *err, size_t errlen, const char *what)
{
	clear(m);
	snprintf(err, errlen, "not a CLUSTER SLOTS reply: %s", what);
	return -1;
}

/* A host as Redis writes one: visible ASCII only (no NUL, space or
 * control byte that would cut or bend it later). */
static bool host_ok(const char *h, size_t len)
{
	if (len == 0 || len > URL_HOST_MAX)
		return false;
	for (size_t k = 0; k < len; k++) {
		if (h[k] < 0x21 || h[k] > 0x7e)
			return false;
	}
	return true;
}

/* A port as Redis writes it: 1..65535. */
static bool port_ok(long long p)
{
	return p >= 1 && p <= 65535;
}

/* The index of host:port in m, added when new; -1 when m is full. */
static int master_index(cluster_map_t *m, const char *host, size_t hlen, int port)
{
	for (int k = 0; k < m->nmasters; k++) {
		if (m->masters[k].port == port && strlen(m->masters[k].host) == hlen &&
		    memcmp(m->masters[k].host, host, hlen) == 0)
			return k;
	}
	if (m->nmasters == CLUSTER_MASTERS_MAX)
		return -1;
	memcpy(m->masters[m->nmasters].host, host, hlen);
	m->masters[m->nmasters].host[hlen] = '\0';
	m->masters[m->nmasters].port = port;
	return m->nmasters++;
}

int cluster_map_read_slots(cluster_map_t *m, const redisReply *r, const char *asked_host, char *err,
                           size_t errlen)
{
	int unserved = 0;

	clear(m);
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return fail(m, err, errlen, "not an array");
	for (size_t k = 0; k < r->elements; k++) {
		const redisReply *e = r->element[k], *node;
		const char *host;
		size_t hlen;
		int idx;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
			return fail(m, err, errlen, "a range is not [start, end, master...]");
		long long lo = e->element[0]->integer, hi = e->element[1]->integer;
		if (lo < 0 || hi < lo || hi >= SLOT_COUNT)
			return fail(m, err, errlen, "a slot range out of 0..16383");
		node = e->element[2];
		if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
		    (node->element[0]->type != REDIS_REPLY_STRING &&
		     node->element[0]->type != REDIS_REPLY_NIL) ||
		    node->element[1]->type != REDIS_REPLY_INTEGER || !port_ok(node->element[1]->integer))
			return fail(m, err, errlen, "a master is not [host, port, ...]");
		/* nil (cluster-preferred-endpoint-type unknown-endpoint) or "":
		 * the node that was asked. */
		host = node->element[0]->type == REDIS_REPLY_NIL ? "" : node->element[0]->str;
		hlen = node->element[0]->type == REDIS_REPLY_NIL ? 0 : node->element[0]->len;
		if (hlen == 1 && host[0] == '?')
			continue; /* its address is unknown to the node asked */
		if (hlen == 0) {
			host = asked_host;
			hlen = strlen(asked_host);
		}
		if (!host_ok(host, hlen))
			return fail(m, err, errlen, "a master's host is empty, too long or not printable");
		idx = master_index(m, host, hlen, (int)node->element[1]->integer);
		if (idx < 0)
			return fail(m, err, errlen, "more masters than the broker follows");
		for (long long s = lo; s <= hi; s++)
			m->owner[s] = (int16_t)idx;
	}
	for (int s = 0; s < SLOT_COUNT; s++)
		unserved += m->owner[s] < 0;
	return unserved;
}

/* One CLUSTER NODES line [p, end): the master's epoch into m. */
static void read_node_line(cluster_map_t *m, const char *p, const char *end, const char *asked_host)
{
	const char *f[8];
	size_t flen[8];
	int n = 0;

	while (n < 8 && p < end) {
		while (p < end && *p == ' ')
			p++;
		f[n] = p;
		while (p < end && *p != ' ')
			p++;
		flen[n] = (size_t)(p - f[n]);
		if (flen[n] > 0)
			n++;
	}
	if (n < 7)
		return;
	/* flags: a comma list holding "master" */
	{
		bool master = false;
		const char *q = f[2], *fe = f[2] + flen[2];
		while (q < fe) {
			const char *c = memchr(q, ',', (size_t)(fe - q));
			size_t l = (size_t)((c ? c : fe) - q);
			master = master || (l == 6 && memcmp(q, "master", 6) == 0);
			q = c ? c + 1 : fe;
		}
		if (!master)
			return;
	}
	/* HOST:PORT@BUS[,NAME]: the port after the last ':' before '@' */
	const char *at = memchr(f[1], '@', flen[1]);
	const char *addr_end = at ? at : f[1] + flen[1];
	const char *colon = NULL;
	for (const char *q = f[1]; q < addr_end; q++)
		if (*q == ':')
			colon = q;
	if (!colon)
		return;
	long long port = 0;
	for (const char *q = colon + 1; q < addr_end; q++) {
		if (*q < '0' || *q > '9' || port > 65535)
			return;
		port = port * 10 + (*q - '0');
	}
	const char *host = f[1];
	size_t hlen = (size_t)(colon - f[1]);
	if (hlen == 0) {
		host = asked_host;
		hlen = strlen(asked_host);
	}
	long long epoch = 0;
	for (size_t k = 0; k < flen[6]; k++) {
		if (f[6][k] < '0' || f[6][k] > '9' || epoch > (INT64_MAX - 9) / 10)
			return;
		epoch = epoch * 10 + (f[6][k] - '0');
	}
	for (int k = 0; k < m->nmasters; k++) {
		if (m->masters[k].port == (int)port && strlen(m->masters[k].host) == hlen &&
		    memcmp(m->masters[k].host, host, hlen) == 0)
			m->epoch[k] = epoch;
	}
}

void cluster_map_read_epochs(cluster_map_t *m, const char *text, size_t len, const char *asked_host)
{
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if (le > p && le[-1] == '\r')
			read_node_line(m, p, le - 1, asked_host);
		else
			read_node_line(m, p, le, asked_host);
		p = nl ? nl + 1 : end;
	}
}

int cluster_map_older_slots(const cluster_map_t *m, const cluster_map_t *cur)
{
	int older = 0;

	for (int s = 0; s < SLOT_COUNT; s++) {
		int a = m->owner[s], b = cur->owner[s];
		if (a < 0 || b < 0)
			continue;
		if (m->masters[a].port == cur->masters[b].port &&
		    strcmp(m->masters[a].host, cur->masters[b].host) == 0)
			continue;
		/* An epoch m does not tell is no newer than one cur knows. */
		older += cur->epoch[b] >= 0 && m->epoch[a] < cur->epoch[b];
	}
	return older;
}

const host_port_t *cluster_map_master_of(const cluster_map_t *m, uint16_t slot)
{
	int idx = slot < SLOT_COUNT ? m->owner[slot] : -1;

	return idx >= 0 ? &m->masters[idx] : NULL;
}

int cluster_read_redirect(const char *msg, size_t len, const char *answered_host,
                          cluster_redirect_t *out)
{
	const char *p = msg, *end = msg + len, *addr, *colon = NULL;
	unsigned slot = 0;
	long port = 0;
	size_t hlen;

	if (len > 5 && memcmp(p, "MOVED ", 6) == 0) {
		out->ask = false;
		p += 6;
	} else if (len > 3 && memcmp(p, "ASK ", 4) == 0) {
		out->ask = true;
		p += 4;
	} else {
		return -1;
	}
	if (p == end || *p < '0' || *p > '9')
		return -1;
	while (p < end && *p >= '0' && *p <= '9' && slot < SLOT_COUNT)
		slot = slot * 10 + (unsigned)(*p++ - '0');
	if (slot >= SLOT_COUNT || p == end || *p != ' ')
		return -1;
	addr = ++p;
	for (const char *q = addr; q < end; q++) {
		if (*q == ':')
			colon = q;
		else if (*q == ' ' || *q == '\r' || *q == '\n')
			return -1;
	}
	if (!colon || colon + 1 == end || end - (colon + 1) > 5)
		return -1;
	for (const char *q = colon + 1; q < end; q++) {
		if (*q < '0' || *q > '9')
			return -1;
		port = port * 10 + (*q - '0');
	}
	if (!port_ok(port))
		return -1;
	hlen = (size_t)(colon - addr);
	if (hlen == 1 && addr[0] == '?')
		return -1; /* the node does not know where the slot went */
	if (hlen == 0) {
		addr = answered_host;
		hlen = strlen(answered_host);
	}
	if (!host_ok(addr, hlen))
		return -1;
	memcpy(out->to.host, addr, hlen);
	out->to.host[hlen] = '\0';
	out->to.port = (int)port;
	out->slot = (uint16_t)slot;
	return 0;
}
