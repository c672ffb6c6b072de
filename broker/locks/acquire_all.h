/*
 * acquire_all.h - all or nothing: the `acquire_all` op (PROTOCOL.md, "All
 * or nothing").
 *
 * The locks are taken one at a time in one total order (their names'
 * bytes), each as an ordinary acquire of the session, so two sessions on
 * any brokers that ask overlapping sets never wait for each other in a
 * cycle: one of them holds the first lock both want, the other waits for
 * it holding nothing it needs. The client is answered once every lock is
 * held (the leases in the order it asked), or, on the first step that
 * fails (timeout, cancelled, an error), after whatever was taken was given
 * back (one release per lock taken, as a client's release).
 *
 * The steps are the session's own acquires and releases with an id no
 * client can send (a JSON real): their answers come back here through
 * client.h's answer functions (acquire_all_answer_*), never to the socket.
 * The wait_ms budget is the whole call's: each step waits what is left.
 */
#ifndef LB_BROKER_LOCKS_ACQUIRE_ALL_H
#define LB_BROKER_LOCKS_ACQUIRE_ALL_H

#include <stdbool.h>
#include <jansson.h>

#include "protocol/req.h"
#include "protocol/resp.h"

struct client;

void acquire_all_start(struct client *s, req_t *req);
/* cancel's target: true when it named one of s's acquire_all calls (then
 * cancelled: its step is cancelled, what it took given back). */
bool acquire_all_cancel(struct client *s, const json_t *target);
/* s's session ended: its calls end unanswered (its leases go with it). */
void acquire_all_client_end(struct client *s);

/* A step's answer: declared in client.h, whose answer functions call them. */

#endif
