/*
 * rnode: see rnode.h.
 */
#include "tests/common/rnode.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tests/integration/harness.h"

#define QUERY_MS 1000
#define PAUSE_USER "lb-paused"

redisReply *rnode_vcmd(int port, int timeout_ms, const char *fmt, va_list ap)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
        r = redisvCommand(c, fmt, ap);
    if (c)
        redisFree(c);
    return r;
}

redisReply *rnode_cmd(int port, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rnode_vcmd(port, timeout_ms, fmt, ap);
    va_end(ap);
    return r;
}

void rnode_soft_cmd(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rnode_vcmd(port, QUERY_MS, fmt, ap);
    va_end(ap);
    if (r)
        freeReplyObject(r);
}

int rnode_text_field(const char *text, const char *field, char *out, size_t outlen)
{
    size_t fl = strlen(field);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
            size_t vl = strcspn(p + fl + 1, "\r\n");
            snprintf(out, outlen, "%.*s", (int)vl, p + fl + 1);
            return 0;
        }
    }
    return -1;
}

int rnode_info(int port, const char *section, const char *field, char *out, size_t outlen)
{
    redisReply *r = strcmp(section, "cluster") == 0 ? rnode_cmd(port, QUERY_MS, "CLUSTER INFO")
                                                    : rnode_cmd(port, QUERY_MS, "INFO %s", section);
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STRING)
        rc = rnode_text_field(r->str, field, out, outlen);
    if (r)
        freeReplyObject(r);
    return rc;
}

/* ---- a replica cut off its master ------------------------------------------------ */

/* CONFIG SET masteruser U masterauth U on port; asserts it is done. */
static void set_master_login(int port, const char *user)
{
    redisReply *r = rnode_cmd(port, 10000, "CONFIG SET masteruser %s masterauth %s", user, user);
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET masteruser on %d: %s", port,
              r && r->str ? r->str : "no answer");
    freeReplyObject(r);
}

void rnode_pause_replication(int replica_port)
{
    char role[32] = "";
    cr_assert(rnode_info(replica_port, "replication", "role", role, sizeof(role)) == 0,
              "no INFO role from node %d", replica_port);
    cr_assert_str_eq(role, "slave", "pause replication: node %d is not a replica",
                     replica_port);
    set_master_login(replica_port, PAUSE_USER);
    redisReply *r = rnode_cmd(replica_port, 10000, "CLIENT KILL TYPE master");
    bool killed = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    cr_assert(killed, "CLIENT KILL TYPE master on %d killed no master link", replica_port);
    rnode_wait_link(replica_port, "down", 3000);
}

void rnode_clear_master_login(int port)
{
    redisReply *r = rnode_cmd(port, QUERY_MS, "CONFIG GET masteruser");
    bool set = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len > 0;
    if (r)
        freeReplyObject(r);
    if (set)
        rnode_soft_cmd(port, "CONFIG SET masteruser %s masterauth %s", "", "");
}

void rnode_wait_link(int port, const char *want, int timeout_ms)
{
    char link[32] = "";
    int64_t end = lb_now_ms() + timeout_ms;
    while ((rnode_info(port, "replication", "master_link_status", link, sizeof(link)) != 0 ||
            strcmp(link, want) != 0) &&
           lb_now_ms() < end)
        lb_sleep_ms(10);
    cr_assert_str_eq(link, want, "replica %d: master_link_status '%s' after %d ms, want '%s'",
                     port, link, timeout_ms, want);
}
