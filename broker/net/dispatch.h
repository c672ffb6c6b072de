/*
 * dispatch.h - one table of ops (name, handler, flags) and the one function
 * that turns a request line into a call of its handler: parse, id, op name,
 * auth, fields, Redis availability, in the order PROTOCOL.md fixes.
 */
#ifndef LB_BROKER_DISPATCH_H
#define LB_BROKER_DISPATCH_H

#include <stddef.h>

struct session;

#include <jansson.h>

/* Handles one complete request line of s: runs it, or parks it until the
 * requests sent before it have taken effect. May close s. */
void dispatch_line(struct session *s, const char *line, size_t len);
/* Runs the parked requests of s whose turn has come. */
void dispatch_resume(struct session *s);
/* An answer to a request of s, with this id (NULL: none), was sent. */
void dispatch_answered(struct session *s, const json_t *id);
/* s ends: its parked requests are dropped unanswered, its ids forgotten. */
void dispatch_session_end(struct session *s);
/* Frees the table of pending ids at exit; every session must be gone. */
void dispatch_free(void);

#endif
