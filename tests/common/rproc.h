/*
 * rproc: the redis-server and sentinel processes of the HA (tests/ha) and
 * Cluster (tests/cluster) test topologies, as both need them: is a pid
 * alive or frozen, is it the server of a port, stop it, wait until it
 * answers, and the small file chores of a topology's directory.
 */
#ifndef LB_TESTS_COMMON_RPROC_H
#define LB_TESTS_COMMON_RPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* State letter from /proc/PID/stat and the parent (ppid may be NULL); 0
 * if there is none. */
char rproc_state(pid_t pid, pid_t *ppid);
/* Running or frozen, not a zombie. */
bool rproc_alive(pid_t pid);
/* Frozen (SIGSTOP). */
bool rproc_stopped(pid_t pid);
/* Its command line names ":port" (Redis names its process
 * "redis-server 127.0.0.1:PORT ..."): with the parent, that tells a reused
 * pid apart. */
bool rproc_serves_port(pid_t pid, int port);
/* sig (after SIGCONT: a frozen one cannot act on SIGTERM), then SIGKILL
 * after timeout_ms; true if it ended before the SIGKILL. */
bool rproc_stop(pid_t pid, int sig, int timeout_ms);
/* Waits up to timeout_ms for the server on port to answer PING; fails
 * early if pid ends, and kills it on timeout. 0, or -1 with err. */
int rproc_wait_ping(pid_t pid, int port, int timeout_ms, const char *log, char *err,
                    size_t errlen);
/* Writes text to path: 0, or -1. */
int rproc_write_file(const char *path, const char *text);
/* The last max_bytes of a log to stderr. */
void rproc_print_tail(const char *path, long max_bytes);
/* Removes a directory tree (best effort). */
void rproc_rm_tree(const char *dir);

#endif
