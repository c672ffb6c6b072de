/*
 * lockops.h - the ops that touch locks in Redis: acquire, release, extend,
 * inspect. Each builds the lock's keys and arguments, runs its script
 * through the pool, and answers from the script's reply. Requests are
 * answered when Redis answers; nothing here blocks the session's other
 * requests.
 */
#ifndef LB_BROKER_LOCKOPS_H
#define LB_BROKER_LOCKOPS_H

#include <jansson.h>

#include "broker/store/store.h"
#include "protocol/req.h"
#include "protocol/resp.h"

struct client;
struct lease;

/* A release or extend that needs no Redis to be answered (a token that is
 * not one, or one whose lease this broker reported lost): answers it and
 * returns true; false for every other request. */
bool lockops_answer_locally(struct client *s, req_t *req);

void lockops_acquire(struct client *s, req_t *req);
void lockops_release(struct client *s, req_t *req);
void lockops_extend(struct client *s, req_t *req);
void lockops_inspect(struct client *s, req_t *req);
/* lua/inspect.lua's reply into *in (its lock left alone); in->holders is
 * malloc'd (NULL for none; the caller frees it) and borrows the reply's
 * strings. False for a reply of another shape. */
bool lockops_read_inspect(const redisReply *r, resp_inspect_t *in);
/* An exclusive holder's new value, without a new term (lua/proclaim.lua). */
void lockops_proclaim(struct client *s, req_t *req);

#endif
