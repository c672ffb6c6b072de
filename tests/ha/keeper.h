/*
 * keeper: the process that starts, owns and reaps every redis-server and
 * sentinel of the HA topology (see keeper.c for why one is needed).
 *
 * None of these functions asserts: keeper_start runs in Criterion's runner,
 * where cr_assert has no test to fail. They return 0 / a pid, or -1 with a
 * message in err.
 */
#ifndef LB_TESTS_HA_KEEPER_H
#define LB_TESTS_HA_KEEPER_H

#include <stddef.h>
#include <sys/types.h>

/* Starts the keeper (this binary re-executed) as a child of the caller,
 * serving on sock_path. Waits until it answers. Returns its pid. */
pid_t keeper_start(const char *sock_path, char *err, size_t errlen);

/* Asks the keeper on sock_path to start argv (NULL-terminated) with stdout
 * and stderr appended to log_path; the keeper writes the pid to pid_path
 * and the child gets PR_SET_PDEATHSIG (SIGKILL) on the keeper. Returns the
 * pid; it does not wait for the program to be ready. */
pid_t keeper_spawn(const char *sock_path, const char *log_path, const char *pid_path,
                   const char *const argv[], char *err, size_t errlen);

#endif
