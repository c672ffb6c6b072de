/*
 * dispatch.h - one table of ops (name, handler, flags) and the one function
 * that turns a request line into a call of its handler: parse, id, op name,
 * auth, fields, Redis availability, in the order PROTOCOL.md fixes.
 */
#ifndef LB_BROKER_DISPATCH_H
#define LB_BROKER_DISPATCH_H

#include <stddef.h>

struct session;

/* Handles one complete request line of s. May close s. */
void dispatch_line(struct session *s, const char *line, size_t len);

#endif
