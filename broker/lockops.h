/*
 * lockops.h - the ops that touch locks in Redis: acquire, release, extend,
 * inspect. Each builds the lock's keys and arguments, runs its script
 * through the pool, and answers from the script's reply. Requests are
 * answered when Redis answers; nothing here blocks the session's other
 * requests.
 */
#ifndef LB_BROKER_LOCKOPS_H
#define LB_BROKER_LOCKOPS_H

#include "protocol/req.h"

struct session;

void lockops_acquire(struct session *s, req_t *req);
void lockops_release(struct session *s, req_t *req);
void lockops_extend(struct session *s, req_t *req);
void lockops_inspect(struct session *s, req_t *req);

#endif
