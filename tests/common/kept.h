/*
 * kept: what a test harness hands out to a test (replies, strings, maps)
 * and frees itself at the test's teardown, so tests never free them. One
 * list per process (a Criterion test runs in its own), freed newest first.
 * Used by tests/ha/ha.c and tests/cluster/cl.c.
 */
#ifndef LB_TESTS_COMMON_KEPT_H
#define LB_TESTS_COMMON_KEPT_H

#include <hiredis/hiredis.h>

/* p is freed with fn at kept_free_all. */
void kept_add(void *p, void (*fn)(void *));
/* A copy of s, kept. */
const char *kept_str(const char *s);
/* r, kept (freed with freeReplyObject); returns it. */
redisReply *kept_reply(redisReply *r);
/* Frees everything kept, newest first. */
void kept_free_all(void);

#endif
