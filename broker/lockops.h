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

#include "broker/rpool.h"
#include "protocol/req.h"

struct session;
struct lease;

/* Re-enters lease l for the acquire with request id `id` of session s
 * (count + 1), and answers it. */
void lockops_reenter(struct session *s, const json_t *id, struct lease *l);
/* Stores the token -> lock name pointer of a detached lease for ms (a
 * decimal string); rpool_eval semantics. */
int lockops_index_set(const char *token, const char *lock, size_t lock_len, const char *ms,
                      rpool_fn fn, void *priv);

/* A release or extend that needs no Redis to be answered (a token that is
 * not one, or one whose lease this broker reported lost): answers it and
 * returns true; false for every other request. */
bool lockops_answer_locally(struct session *s, req_t *req);

void lockops_acquire(struct session *s, req_t *req);
void lockops_release(struct session *s, req_t *req);
void lockops_extend(struct session *s, req_t *req);
void lockops_inspect(struct session *s, req_t *req);

#endif
