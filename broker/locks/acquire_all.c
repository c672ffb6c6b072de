/*
 * acquire_all.c - all or nothing (see acquire_all.h): one all_call_t per
 * acquire_all on its way, taking its locks one step at a time.
 *
 * Invariants: a call has at most one step on its way (`step`, its id);
 * it ends (answered, freed) only from that step's answer, from
 * acquire_all_client_end, or at once when it cannot start; a step answered
 * while the call is still sending it (inside lockops_acquire) is recorded
 * and taken up when the send returns, so a call is never freed under its
 * own feet. The give-back releases are steps too, whose answers nobody
 * waits for.
 */
#include "broker/locks/acquire_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/locks/client.h"
#include "broker/locks/lease.h"
#include "broker/locks/lockops.h"
#include "broker/locks/waitq.h"

typedef struct all_lock {
	char *name; /* may hold no NUL (lock names have no control characters) */
	size_t len;
	lb_mode_t mode;
	int64_t limit;
	bool held;
	char lease[LEASE_TOKEN_LEN + 1];
	lb_mode_t got; /* the mode granted (exclusive for a re-entry of it) */
	int64_t fence, ttl_ms, count;
} all_lock_t;

typedef struct all_call {
	struct all_call *prev, *next;
	client_t *s;
	json_t *req_id; /* own reference, or NULL */
	req_acquire_t opts; /* owner points to owner below */
	char *owner;
	size_t n, done;
	all_lock_t *locks; /* in the order asked */
	size_t *order;     /* the order taken: by name */
	bool has_deadline;
	uint64_t deadline;
	json_t *step; /* the id of the step on its way, or NULL */
	bool in_step; /* inside the send of a step */
	bool cancelled;
	int result;   /* a step answered inside its send: 1 granted, -1 failed */
	lb_err_t err;
	char msg[300];
} all_call_t;

static struct {
	all_call_t *head;
	double seq;
} A;

static json_t *step_id(void)
{
	A.seq += 1.0;
	return json_real(A.seq + 0.5);
}

static all_call_t *by_step(const client_t *s, const json_t *id)
{
	for (all_call_t *c = A.head; c; c = c->next)
		if (c->s == s && c->step && json_equal(c->step, (json_t *)id))
			return c;
	return NULL;
}

static void call_free(all_call_t *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		A.head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	for (size_t k = 0; k < c->n; k++)
		free(c->locks[k].name);
	free(c->locks);
	free(c->order);
	free(c->owner);
	json_decref(c->req_id);
	json_decref(c->step);
	free(c);
}

/* The call is answered (or its session gone): it ends. */
static void call_end(all_call_t *c)
{
	client_t *s = c->s;

	call_free(c);
	client_op_end(s);
}

/* Gives back every lock taken: one release each, as the client's own
 * release would (a re-entry drops its level, a first grant frees the
 * lock; never a lock delay). */
static void give_back(all_call_t *c)
{
	for (size_t k = 0; k < c->n; k++) {
		req_t r;
		if (!c->locks[k].held)
			continue;
		memset(&r, 0, sizeof(r));
		r.op = OP_RELEASE;
		r.id = step_id();
		r.u.release.lease = (lb_str_t){c->locks[k].lease, LEASE_TOKEN_LEN};
		lockops_release(c->s, &r);
		json_decref(r.id);
		c->locks[k].held = false;
	}
}

static void fail(all_call_t *c, lb_err_t code, const char *msg)
{
	give_back(c);
	client_send_error(c->s, c->req_id, code, msg && msg[0] ? msg : NULL);
	call_end(c);
}

static void succeed(all_call_t *c)
{
	json_t *o = json_object(), *arr = json_array();

	for (size_t k = 0; k < c->n; k++) {
		all_lock_t *l = &c->locks[k];
		if (!c->opts.detach && !lease_find(l->lease, LEASE_TOKEN_LEN)) {
			snprintf(c->msg, sizeof(c->msg), "the lease of lock '%.64s' was lost while the others "
			                                 "were taken; every lock was given back", l->name);
			fail(c, LB_E_UNAVAILABLE, c->msg);
			json_decref(o);
			json_decref(arr);
			return;
		}
	}
	for (size_t k = 0; k < c->n; k++) {
		all_lock_t *l = &c->locks[k];
		json_t *e = json_object();
		json_object_set_new(e, "lease", json_string(l->lease));
		json_object_set_new(e, "lock", json_stringn(l->name, l->len));
		json_object_set_new(e, "mode", json_string(lb_mode_name(l->got)));
		json_object_set_new(e, "fence", json_integer(l->fence));
		json_object_set_new(e, "ttl_ms", json_integer(l->ttl_ms));
		json_object_set_new(e, "count", json_integer(l->count));
		json_array_append_new(arr, e);
	}
	json_object_set_new(o, "id", c->req_id ? json_deep_copy(c->req_id) : json_null());
	json_object_set_new(o, "ok", json_true());
	json_object_set_new(o, "leases", arr);
	client_answer(c->s, c->req_id, o);
	call_end(c);
}

/* Sends the next steps until one is on its way, or the call ends. */
static void next_steps(all_call_t *c)
{
	for (;;) {
		all_lock_t *l;
		req_t r;

		if (c->done == c->n) {
			succeed(c);
			return;
		}
		l = &c->locks[c->order[c->done]];
		memset(&r, 0, sizeof(r));
		r.op = OP_ACQUIRE;
		r.id = c->step = step_id();
		r.u.acquire = c->opts;
		r.u.acquire.lock = (lb_str_t){l->name, l->len};
		r.u.acquire.mode = l->mode;
		r.u.acquire.limit = l->limit;
		if (c->has_deadline) {
			uint64_t now = timers_now();
			r.u.acquire.wait_ms = c->deadline > now ? (int64_t)(c->deadline - now) : 0;
		}
		c->result = 0;
		c->in_step = true;
		lockops_acquire(c->s, &r);
		c->in_step = false;
		if (c->result == 0)
			return; /* on its way */
		if (c->result < 0) {
			fail(c, c->err, c->msg);
			return;
		}
		/* granted at once: the next one */
	}
}

void acquire_all_answer_acquired(client_t *s, const json_t *id, const resp_acquired_t *a)
{
	all_call_t *c = by_step(s, id);
	all_lock_t *l;

	if (!c)
		return; /* a give-back's, or a call gone with its session */
	l = &c->locks[c->order[c->done]];
	memcpy(l->lease, a->lease, LEASE_TOKEN_LEN);
	l->lease[LEASE_TOKEN_LEN] = '\0';
	l->held = true;
	l->got = a->mode;
	l->fence = a->fence;
	l->ttl_ms = a->ttl_ms;
	l->count = a->count;
	json_decref(c->step);
	c->step = NULL;
	c->done++;
	if (c->cancelled) {
		if (c->in_step) {
			c->result = -1;
			c->err = LB_E_CANCELLED;
			c->msg[0] = '\0';
		} else {
			fail(c, LB_E_CANCELLED, NULL);
		}
		return;
	}
	if (c->in_step)
		c->result = 1;
	else
		next_steps(c);
}

void acquire_all_answer_error(client_t *s, const json_t *id, lb_err_t code, const char *msg)
{
	all_call_t *c = by_step(s, id);
	const all_lock_t *l;

	if (!c)
		return;
	l = &c->locks[c->order[c->done]];
	json_decref(c->step);
	c->step = NULL;
	c->err = c->cancelled ? LB_E_CANCELLED : code;
	if (c->err == LB_E_CANCELLED)
		c->msg[0] = '\0';
	else
		snprintf(c->msg, sizeof(c->msg), "lock '%.64s': %s; what was taken was given back", l->name,
		         msg ? msg : lb_err_message(code));
	if (c->in_step)
		c->result = -1;
	else
		fail(c, c->err, c->msg);
}

static int by_name(const void *x, const void *y, void *arg)
{
	const all_lock_t *locks = arg;
	const all_lock_t *a = &locks[*(const size_t *)x], *b = &locks[*(const size_t *)y];
	int d = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);

	return d ? d : (a->len > b->len) - (a->len < b->len);
}

void acquire_all_start(client_t *s, req_t *req)
{
	const req_acquire_all_t *q = &req->u.acquire_all;
	size_t n = json_array_size(q->locks);
	all_call_t *c;

	if ((int64_t)(s->nleases + s->nwaiters + n) > server.cfg->max_leases_per_session) {
		client_send_error(s, req->id, LB_E_LIMIT_EXCEEDED, "too many leases in this session");
		return;
	}
	c = xcalloc(1, sizeof(*c));
	c->s = s;
	c->req_id = req->id ? json_incref(req->id) : NULL;
	c->opts = q->opts;
	c->owner = xstrndup(q->opts.owner.ptr, q->opts.owner.len);
	c->opts.owner = (lb_str_t){c->owner, q->opts.owner.len};
	c->opts.value = (lb_str_t){NULL, 0};
	c->n = n;
	c->locks = xcalloc(n, sizeof(*c->locks));
	c->order = xcalloc(n, sizeof(*c->order));
	for (size_t k = 0; k < n; k++) {
		lb_str_t name;
		req_all_lock(req, k, &name, &c->locks[k].mode, &c->locks[k].limit);
		c->locks[k].name = xstrndup(name.ptr, name.len);
		c->locks[k].len = name.len;
		c->order[k] = k;
	}
	qsort_r(c->order, n, sizeof(*c->order), by_name, c->locks);
	if (q->opts.wait_ms >= 0) {
		c->has_deadline = true;
		c->deadline = timers_now() + (uint64_t)q->opts.wait_ms;
	}
	c->next = A.head;
	if (A.head)
		A.head->prev = c;
	A.head = c;
	client_op_begin(s);
	next_steps(c);
}

bool acquire_all_cancel(client_t *s, const json_t *target)
{
	for (all_call_t *c = A.head; c; c = c->next) {
		if (c->s != s || !c->req_id || !json_equal(c->req_id, (json_t *)target))
			continue;
		c->cancelled = true;
		/* Its step waits (a waiter with the step's id): it answers
		 * cancelled, maybe at once, and the call ends there. Any other
		 * step ends the call when its answer comes. */
		if (c->step)
			(void)waitq_cancel(s, c->step);
		return true;
	}
	return false;
}

void acquire_all_client_end(client_t *s)
{
	all_call_t *c = A.head;

	while (c) {
		all_call_t *next = c->next;
		if (c->s == s)
			call_end(c);
		c = next;
	}
}
