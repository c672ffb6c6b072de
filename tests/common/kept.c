/*
 * kept.c - what a test harness frees at teardown (see kept.h).
 */
#include "tests/common/kept.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    void *p;
    void (*fn)(void *);
} kept_t;

static struct {
    kept_t *all;
    size_t n, cap;
} K;

void kept_add(void *p, void (*fn)(void *))
{
    if (K.n == K.cap) {
        K.cap = K.cap ? K.cap * 2 : 32;
        K.all = realloc(K.all, K.cap * sizeof(*K.all));
        if (!K.all)
            abort();
    }
    K.all[K.n++] = (kept_t){p, fn};
}

const char *kept_str(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort();
    kept_add(d, free);
    return d;
}

static void free_reply(void *p)
{
    freeReplyObject(p);
}

redisReply *kept_reply(redisReply *r)
{
    if (r)
        kept_add(r, free_reply);
    return r;
}

void kept_free_all(void)
{
    for (size_t i = K.n; i > 0; i--)
        K.all[i - 1].fn(K.all[i - 1].p);
    free(K.all);
    K.all = NULL;
    K.n = K.cap = 0;
}
