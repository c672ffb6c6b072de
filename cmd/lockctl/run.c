/*
 * run.c - `lockctl run`: acquire a lock, run a command under it, release.
 *
 * Sequence: connect and hello; acquire on the session (watchdog on, so the
 * broker renews the lease every ttl/3 for as long as this connection stays
 * open); fork and exec the command with LOCKBROKER_FENCE in its environment;
 * supervise; release; exit with the command's status.
 *
 * Supervision is one poll() loop over the broker socket and a self-pipe fed
 * by the signal handlers (the handlers only write the signal number there;
 * everything else happens in the loop). A `lost` event for our lease, or the
 * connection closing, means another client may get the lock: the command
 * gets SIGTERM at once, SIGKILL after --kill-after, and we exit
 * LC_EXIT_LOST. Forwarded signals go to the command; before the command
 * started they make us give up (closing the connection withdraws the
 * pending acquire).
 *
 * Process groups: the command leads its own group and every signal goes to
 * the whole group, so a lost lease also stops what the command started.
 * When lockctl runs in the foreground of a terminal the command stays in
 * our group instead (it needs the terminal), gets only its own pid
 * signalled, and signals the terminal sent (si_code SI_KERNEL) are not
 * forwarded, since they reached it already.
 *
 * Invariants: the socket and the pipe are close-on-exec, so the command
 * never holds the session; the command starts with the signal dispositions
 * and mask lockctl started with; signals we handle are blocked across fork()
 * so none is taken by a handler in the child before exec.
 */
#include "cmd/lockctl/lockctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static const int handled_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};
#define NSIGS (sizeof(handled_sigs) / sizeof(handled_sigs[0]))

/* The signal state: one of it, as there is one process. */
static struct {
	int pipe[2];                  /* self-pipe: read end, write end */
	struct sigaction old[NSIGS];  /* dispositions at start, for the child */
	bool installed[NSIGS];        /* false: was SIG_IGN, left alone */
	sigset_t set;                 /* the installed signals */
} S = {.pipe = {-1, -1}};

/* The byte is the signal number, with TTY_SIG set when the kernel sent it
 * (a terminal's ^C, ^\, hangup): those already reached a command that
 * shares our process group. */
#define TTY_SIG 0x80

static void on_signal(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;
	unsigned char b = (unsigned char)(sig & 0x7f);

	(void)uctx;
	if (si != NULL && si->si_code == SI_KERNEL)
		b |= TTY_SIG;

	/* a full pipe drops the byte: enough are queued to wake the loop */
	if (write(S.pipe[1], &b, 1) < 0) {
	}
	errno = saved;
}

static int signals_install(void)
{
	if (pipe2(S.pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		lc_err("pipe: %s", strerror(errno));
		return -1;
	}
	sigemptyset(&S.set);
	for (size_t i = 0; i < NSIGS; i++) {
		struct sigaction sa = {.sa_sigaction = on_signal,
		                       .sa_flags = SA_SIGINFO | SA_NOCLDSTOP};

		sigemptyset(&sa.sa_mask);
		sigaction(handled_sigs[i], NULL, &S.old[i]);
		/* ignored when we started (nohup, `cmd &` in a script): stay so,
		 * and the command inherits the ignoring, as a shell would do */
		if (handled_sigs[i] != SIGCHLD && S.old[i].sa_handler == SIG_IGN)
			continue;
		if (sigaction(handled_sigs[i], &sa, NULL) == 0) {
			S.installed[i] = true;
			sigaddset(&S.set, handled_sigs[i]);
		}
	}
	return 0;
}

/* Back to the start-up dispositions (in the child, and before exiting). */
static void signals_restore(void)
{
	for (size_t i = 0; i < NSIGS; i++)
		if (S.installed[i]) {
			sigaction(handled_sigs[i], &S.old[i], NULL);
			S.installed[i] = false;
		}
}

static void signals_free(void)
{
	signals_restore();
	for (int i = 0; i < 2; i++)
		if (S.pipe[i] >= 0) {
			close(S.pipe[i]);
			S.pipe[i] = -1;
		}
}

/* Reads the queued signal numbers into sigs (at most n). Returns how many. */
static size_t signals_take(int *sigs, size_t n)
{
	unsigned char buf[64];
	size_t k = 0;
	ssize_t got;

	while (k < n && (got = read(S.pipe[0], buf, n - k < sizeof(buf) ? n - k : sizeof(buf))) > 0)
		for (ssize_t j = 0; j < got; j++)
			sigs[k++] = buf[j];
	return k;
}

/* Waits for the answer to the acquire. Returns 0 with *resp (ok or not),
 * or an exit status (printed). */
static int wait_grant(lc_conn_t *c, json_int_t id, const lc_lock_opts_t *o, int64_t timeout_ms,
                      json_t **resp)
{
	/* the broker enforces wait_ms; our own limit only catches a mute broker */
	int64_t deadline = o->wait_ms < 0 ? -1 : lc_now_ms() + o->wait_ms + timeout_ms;

	for (;;) {
		json_t *m;
		int r, sigs[64];
		size_t ns;

		while ((r = conn_next(c, &m, NULL)) == 1) {
			json_t *mid = json_object_get(m, "id");
			if (json_is_integer(mid) && json_integer_value(mid) == id) {
				*resp = m;
				return 0;
			}
			json_decref(m); /* shutdown: the acquire answers shutting_down */
		}
		if (r != 0)
			return r;
		if (c->eof) {
			lc_err("acquire: the broker closed the connection");
			return LC_EXIT_UNAVAILABLE;
		}

		struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
		                      {.fd = S.pipe[0], .events = POLLIN}};
		int n = poll(p, 2, lc_poll_ms(deadline));
		if (n < 0 && errno != EINTR) {
			lc_err("poll: %s", strerror(errno));
			return LC_EXIT_INTERNAL;
		}
		if (n == 0 && lc_poll_ms(deadline) == 0) {
			lc_err("acquire: no answer from the broker in time");
			return LC_EXIT_UNAVAILABLE;
		}
		ns = signals_take(sigs, 64);
		for (size_t k = 0; k < ns; k++) {
			int sig = sigs[k] & ~TTY_SIG;
			if (sig != SIGCHLD) {
				char nb[LC_MASK_BUF];
				lc_err("got signal %d while waiting for lock \"%s\"; giving up", sig,
				       lc_masked(o->name, nb));
				return 128 + sig;
			}
		}
		if (n > 0 && p[0].revents)
			(void)conn_fill(c);
	}
}

/* fork + exec; the child leads a new process group when own_group.
 * Returns the child's pid, or -1 (printed). */
static pid_t spawn(char **cmd, json_int_t fence, bool own_group)
{
	char fb[32];
	sigset_t orig;
	pid_t parent = getpid(), pid;

	snprintf(fb, sizeof(fb), "%" JSON_INTEGER_FORMAT, fence);
	fflush(NULL);
	sigprocmask(SIG_BLOCK, &S.set, &orig);
	pid = fork();
	if (pid == 0) {
		char cb[LC_MASK_BUF];
		int e;

		signals_restore();
		if (own_group)
			setpgid(0, 0);
#ifdef __linux__
		/* lockctl gone = lease gone: the command must not go on alone */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(LC_EXIT_LOST);
#else
		(void)parent;
#endif
		sigprocmask(SIG_SETMASK, &orig, NULL);
		if (setenv("LOCKBROKER_FENCE", fb, 1) < 0)
			_exit(LC_EXIT_INTERNAL);
		execvp(cmd[0], cmd);
		e = errno;
		lc_err("cannot run %s: %s", lc_masked(cmd[0], cb), strerror(e));
		_exit(e == ENOENT ? LC_EXIT_NOTFOUND : LC_EXIT_NOEXEC);
	}
	if (pid < 0)
		lc_err("fork: %s", strerror(errno));
	else if (own_group)
		setpgid(pid, pid); /* both sides, so no signal finds it unset */
	sigprocmask(SIG_SETMASK, &orig, NULL);
	return pid;
}

/* Runs until the child has exited. Returns the exit status lockctl owes:
 * the child's, or LC_EXIT_LOST (then *was_lost is set). */
static int supervise(lc_conn_t *c, const lc_lock_opts_t *o, const char *lease, pid_t pid,
                     bool own_group, bool *was_lost)
{
	pid_t target = own_group ? -pid : pid; /* whom signals go to */
	bool lost = false, killed = false, warned_shutdown = false;
	int64_t kill_at = -1;
	char nb[LC_MASK_BUF];
	int wst = 0;

	lc_masked(o->name, nb);
	for (;;) {
		const char *why = NULL;
		char rb[LC_MASK_BUF];
		json_t *m;
		int r, sigs[64];
		size_t ns;
		pid_t w;

		while ((w = waitpid(pid, &wst, WNOHANG)) < 0 && errno == EINTR)
			;
		if (w == pid || (w < 0 && errno == ECHILD))
			break;

		while ((r = conn_next(c, &m, NULL)) == 1) {
			const char *ev = NULL, *ml = NULL, *reason = NULL;
			json_int_t g = 0;

			json_unpack(m, "{s?s, s?s, s?s}", "event", &ev, "lease", &ml, "reason", &reason);
			if (ev && strcmp(ev, "lost") == 0 && ml && strcmp(ml, lease) == 0 && !why) {
				why = lc_masked(reason ? reason : "unknown", rb);
			} else if (ev && strcmp(ev, "shutdown") == 0 && !warned_shutdown) {
				json_unpack(m, "{s?I}", "grace_ms", &g);
				lc_err("the broker is shutting down; the lease on \"%s\" ends within "
				       "%" JSON_INTEGER_FORMAT " ms", nb, g);
				warned_shutdown = true;
			}
			json_decref(m);
		}
		if (r != 0 && !why)
			why = "bad data from the broker";
		if (!why && c->eof)
			why = "connection to the broker closed";
		if (why && !lost) {
			lost = true;
			lc_err("lost the lease on lock \"%s\" (%s); stopping the command", nb, why);
			kill(target, SIGTERM);
			kill_at = lc_now_ms() + o->kill_after_ms;
		}
		if (lost && !killed && lc_now_ms() >= kill_at) {
			lc_err("the command outlived --kill-after; sending SIGKILL");
			kill(target, SIGKILL);
			killed = true;
		}

		struct pollfd p[2] = {{.fd = S.pipe[0], .events = POLLIN},
		                      {.fd = c->fd, .events = POLLIN}};
		/* a closed socket would be readable for ever: leave it out */
		int np = (c->eof || r != 0) ? 1 : 2;
		int n = poll(p, (nfds_t)np, lost && !killed ? lc_poll_ms(kill_at) : -1);
		if (n < 0 && errno != EINTR) {
			lc_err("poll: %s", strerror(errno));
			kill(target, SIGKILL);
			lost = true;
			killed = true;
		}
		ns = signals_take(sigs, 64);
		for (size_t k = 0; k < ns; k++) {
			int sig = sigs[k] & ~TTY_SIG;
			/* a terminal's signal already hit a command in our group */
			if (sig != SIGCHLD && (own_group || !(sigs[k] & TTY_SIG)))
				kill(target, sig);
		}
		if (n > 0 && np == 2 && p[1].revents)
			(void)conn_fill(c);
	}
	*was_lost = lost;
	if (lost)
		return LC_EXIT_LOST;
	if (WIFEXITED(wst))
		return WEXITSTATUS(wst);
	if (WIFSIGNALED(wst))
		return 128 + WTERMSIG(wst);
	return LC_EXIT_INTERNAL;
}

int lc_run(const lc_global_t *g, const lc_lock_opts_t *o, char **cmd)
{
	lc_conn_t c;
	json_t *req, *resp = NULL, *rr = NULL;
	json_int_t id, fence;
	const char *lease_s;
	char *lease = NULL;
	bool lost = false;
	pid_t pid;
	int r;

	r = lc_connect(g, &c);
	if (r != 0)
		goto out;
	if (signals_install() < 0) {
		r = LC_EXIT_INTERNAL;
		goto out;
	}
	req = lc_acquire_req(o);
	r = conn_send(&c, req, &id, g->timeout_ms);
	json_decref(req);
	if (r != 0)
		goto out;
	if ((r = wait_grant(&c, id, o, g->timeout_ms, &resp)) != 0)
		goto out;
	if (!json_is_true(json_object_get(resp, "ok"))) {
		r = lc_acquire_error(o, resp);
		goto out;
	}
	if (json_unpack(resp, "{s:s, s:I}", "lease", &lease_s, "fence", &fence) < 0) {
		lc_err("acquire: the answer has no lease or fence");
		r = LC_EXIT_INTERNAL;
		goto out;
	}
	lease = xstrndup(lease_s, strlen(lease_s));

	/* The command leads its own process group, so that a lost lease stops
	 * its children too; except when we run in the foreground of a terminal,
	 * where it must stay in our group to use the terminal (job control). */
	pid_t fg = tcgetpgrp(STDIN_FILENO);
	bool own_group = !(fg >= 0 && fg == getpgrp());
	pid = spawn(cmd, fence, own_group);
	if (pid < 0) {
		r = LC_EXIT_INTERNAL;
		goto out; /* closing the connection releases the lease */
	}
	r = supervise(&c, o, lease, pid, own_group, &lost);
	if (lost || c.eof)
		goto out;

	/* release explicitly, to know it happened; closing would do it too */
	req = json_pack("{s:s, s:s}", "op", "release", "lease", lease);
	if (conn_call(&c, req, g->timeout_ms, "release", &rr, NULL) == 0) {
		if (!json_is_true(json_object_get(rr, "ok")))
			(void)lc_broker_error("release", rr, -1); /* a warning: status stays */
		json_decref(rr);
	}
out:
	signals_free();
	json_decref(resp);
	free(lease);
	conn_close(&c);
	return r;
}
