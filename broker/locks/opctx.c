/*
 * opctx.c - the context of a lock op on its way to Redis (see opctx.h).
 */
#include "broker/locks/opctx.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/timers.h"


opctx_t *opctx_new(client_t *s, const json_t *id)
{
	opctx_t *c = xcalloc(1, sizeof(*c));

	c->s = s;
	c->id = id ? json_incref((json_t *)id) : NULL;
	c->sent_at = timers_now();
	client_op_begin(s);
	return c;
}

void opctx_set_lock(opctx_t *c, const char *lock, size_t len)
{
	free(c->lock);
	c->lock = xstrndup(lock, len);
	c->lock_len = len;
}

/* Ends the op: the session may read on; frees the context. */
void opctx_done(opctx_t *c)
{
	client_t *s = c->s;

	json_decref(c->id);
	free(c->lock);
	free(c->value);
	free(c);
	client_op_end(s);
}

void opctx_fail(opctx_t *c, lb_err_t code, const char *message)
{
	client_send_error(c->s, c->id, code, message);
	opctx_done(c);
}

/* The message of a failed reply, for logs. */
const char *opctx_failure_text(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply from Redis";
}

void opctx_fail_unavailable(opctx_t *c, const redisReply *r)
{
	LOG(LOG_WARN, "msg=\"redis command failed\" session=%s err=\"%.200s\"", c->s->name, opctx_failure_text(r));
	opctx_fail(c, LB_E_UNAVAILABLE, "Redis did not answer the request");
}

/* A lease op's failed reply: an error from Redis (the script did not
 * run), or none at all after LB_RESOLVE_MS of resending, when the lease
 * has ended whatever happened. */
void opctx_fail_lease_op(opctx_t *c, const redisReply *r)
{
	const char *why = lease_lost_reason(c->token, LEASE_TOKEN_LEN);

	if (why) {
		/* Reported lost while the op was on its way: it is not held,
		 * whatever became of the op (never unavailable, then not_held). */
		opctx_fail(c, LB_E_NOT_HELD, lease_lost_message(why));
		return;
	}
	if (r) {
		opctx_fail_unavailable(c, r);
		return;
	}
	LOG(LOG_WARN, "msg=\"redis did not answer a lease op in time\" session=%s", c->s->name);
	opctx_fail(c, LB_E_NOT_HELD, "Redis did not answer while the lease could live; it has ended");
}

/* Element k of an array reply as an integer; false when it is not one. */
bool opctx_reply_int(const redisReply *r, size_t k, int64_t *out)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || k >= r->elements ||
	    r->element[k]->type != REDIS_REPLY_INTEGER)
		return false;
	*out = r->element[k]->integer;
	return true;
}
