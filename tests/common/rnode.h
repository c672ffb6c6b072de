/*
 * rnode: one redis-server of the HA (tests/ha) or Cluster (tests/cluster)
 * tests, by its TCP port on 127.0.0.1, as both need it: a command with a
 * timeout, an INFO field, and a replica cut off its master (and mended).
 *
 * No state: each call makes its own connection and closes it. The queries
 * and rnode_clear_master_login never assert (the runners' report hooks and
 * the mending between tests use them); rnode_pause_replication and
 * rnode_wait_link, for test workers, do.
 */
#ifndef LB_TESTS_COMMON_RNODE_H
#define LB_TESTS_COMMON_RNODE_H

#include <stdarg.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

/* A command on a new connection to 127.0.0.1:port, closed afterwards; NULL
 * when unreachable or timed out. The caller frees the reply. */
redisReply *rnode_cmd(int port, int timeout_ms, const char *fmt, ...);
redisReply *rnode_vcmd(int port, int timeout_ms, const char *fmt, va_list ap);
/* The same with 1 s and the reply dropped: a command whose failure is only
 * worth a note (the topology is being mended). */
void rnode_soft_cmd(int port, const char *fmt, ...);
/* The value of "field:" in INFO-like text into out; -1 if absent. */
int rnode_text_field(const char *text, const char *field, char *out, size_t outlen);
/* The value of "field:" in INFO SECTION of the node (section "cluster":
 * in CLUSTER INFO) into out; -1 if unreachable (1 s) or absent. */
int rnode_info(int port, const char *section, const char *field, char *out, size_t outlen);

/* Makes the replica on replica_port miss every write from now on, and stay
 * a replica of the same master in everybody's eyes: its link to the master
 * is cut and it cannot log in again (CONFIG SET masteruser/masterauth to an
 * unknown user, CLIENT KILL TYPE master), so it retries each second and
 * fails. Returns once INFO says master_link_status:down (asserts that
 * within 3 s). CONFIG SET masteruser "" masterauth "" undoes it. */
void rnode_pause_replication(int replica_port);
/* Undoes rnode_pause_replication (and any CONFIG SET of the same) on port
 * if it is in force. */
void rnode_clear_master_login(int port);
/* Waits until the node on port says master_link_status:want; asserts it
 * does within timeout_ms. */
void rnode_wait_link(int port, const char *want, int timeout_ms);

#endif
