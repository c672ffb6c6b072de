/*
 * run.c - `lockctl run`: acquire a lock, run a command under it, release.
 *
 * Sequence: connect and hello (the C client, client.c); acquire on the
 * session (watchdog on, so the broker renews the lease every ttl/3 for as
 * long as this connection stays open); fork and exec the command with
 * LOCKBROKER_FENCE in its environment; supervise; release; exit with the
 * command's status.
 *
 * Signals: the handlers only write the signal number to a self-pipe and,
 * while we wait for the grant, shut the session's socket down (shutdown(2)
 * is async-signal-safe): the broker sees the session end, which withdraws
 * the wait and frees anything granted meanwhile, and lbc_acquire returns at
 * once whatever state the broker or Redis is in; we then exit 128+N. (The
 * client's cancel token would wait for the broker's answer to `cancel`,
 * up to --timeout with a stuck Redis.) Everything else happens in the
 * loops.
 *
 * Supervision is one poll() loop over the client's socket (lbc_fd) and the
 * self-pipe; lbc_poll reads what the broker sent. The lease handle marked
 * lost (a `lost` event, or the connection closing: `disconnected`) means
 * another client may get the lock: the command gets SIGTERM at once,
 * SIGKILL after --kill-after, and we exit LC_EXIT_LOST. A lease found lost
 * only by the release after the command ended is LC_EXIT_LOST too: the
 * command may have run without the lock. Forwarded signals go to the
 * command.
 *
 * Liveness: while the lease is held, the client's own thread pings the
 * broker and ends the session when the broker stays silent for longer
 * than a third of the TTL (at most 5 s): a frozen broker (its socket still
 * open, nothing renewed) is a lost lease before Redis can give the lock to
 * another client (--no-liveness-check turns that off). That thread may be
 * the one that reads the broker's lines, so the socket is not always what
 * wakes the loop: on_event writes WAKE_BYTE to the self-pipe for every
 * loss and every end of the session.
 *
 * Process groups: the command leads its own group and every signal goes to
 * the whole group, so a lost lease also stops what the command started.
 * When lockctl runs in the foreground of a terminal the command stays in
 * our group instead (it needs the terminal), gets only its own pid
 * signalled, and signals the terminal sent (si_code SI_KERNEL) are not
 * forwarded, since they reached it already.
 *
 * The guard: a kill -9 of lockctl closes its socket and the broker frees
 * the lock at once, while the command (and what it started) would run on
 * without it; PR_SET_PDEATHSIG reaches the command only, not its
 * children. So a second child of lockctl, the guard, holds a copy of the
 * session's socket and the read end of a pipe only lockctl writes to.
 * When lockctl dies the pipe ends: the guard SIGKILLs the command's group
 * (or the command), waits until it is gone, and exits, and only then does
 * the socket close and the broker release the lock. When lockctl ends
 * normally it writes a byte and the guard exits at once. The guard is a
 * child of a threaded process that never execs: async-signal-safe calls
 * only; it ignores the signals a terminal or a group kill sends.
 *
 * Invariants: the socket and the pipes are close-on-exec, so the command
 * never holds the session; the client's liveness thread runs when we
 * fork, so the child makes only async-signal-safe calls before exec
 * (everything it needs, the environment and the paths to try, is made
 * before fork; an exec failure is reported through a close-on-exec pipe
 * and printed by the parent); the command starts with the signal
 * dispositions and mask lockctl started with; signals we handle are
 * blocked across fork() so none is taken by a handler in the child before
 * exec (the client's thread blocks every signal).
 */
#include "cmd/lockctl/lockctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
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
	volatile sig_atomic_t waiting; /* lbc_acquire runs: a signal ends the session */
	int fd;                       /* the session's socket while waiting */
} S = {.pipe = {-1, -1}, .fd = -1};

/* The byte is the signal number, with TTY_SIG set when the kernel sent it
 * (a terminal's ^C, ^\, hangup): those already reached a command that
 * shares our process group. WAKE_BYTE (no signal) is on_event's: the
 * client marked the lease lost, look at it. */
#define TTY_SIG 0x80
#define WAKE_BYTE 0

static void on_signal(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;
	unsigned char b = (unsigned char)(sig & 0x7f);

	(void)uctx;
	if (si != NULL && si->si_code == SI_KERNEL)
		b |= TTY_SIG;
	if (sig != SIGCHLD && S.waiting)
		shutdown(S.fd, SHUT_RDWR); /* gives the wait up: see the file comment */

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

/* The first queued signal but SIGCHLD, or 0. */
static int signal_taken(void)
{
	int sigs[64];
	size_t ns = signals_take(sigs, 64);

	for (size_t k = 0; k < ns; k++)
		if ((sigs[k] & ~TTY_SIG) != SIGCHLD && sigs[k] != WAKE_BYTE)
			return sigs[k] & ~TTY_SIG;
	return 0;
}

/* Acquires the lock; a signal (but SIGCHLD) while it waits gives up, even
 * if the grant came at the same moment (the lease ends with the session).
 * Returns 0 with *lease, or the exit status (printed). */
static int acquire(lbc_client_t *c, const lc_lock_opts_t *o, lbc_lease_t **lease)
{
	lbc_acquire_opts_t ao = lc_acquire_opts(o);
	lbc_error_t err;
	lbc_status st;
	int sig;

	S.fd = lbc_fd(c);
	S.waiting = 1;
	st = lbc_acquire(c, o->name, &ao, lease, &err);
	S.waiting = 0;
	if ((sig = signal_taken()) != 0) {
		char nb[LC_MASK_BUF];
		lc_err("got signal %d while waiting for lock \"%s\"; giving up", sig,
		       lc_masked(o->name, nb));
		if (st == LBC_OK)
			lbc_lease_free(*lease); /* closing the session releases it */
		*lease = NULL;
		return 128 + sig;
	}
	return st == LBC_OK ? 0 : lc_acquire_fail(o, &err);
}

/* What the child needs for exec, made before fork(): the child of a
 * threaded process may make only async-signal-safe calls until exec (no
 * malloc, setenv or stdio), so it gets the environment and the paths to
 * try ready-made. */
typedef struct exec_plan {
	char **envp;     /* environ with LOCKBROKER_FENCE=fence */
	char fence_var[48];
	char **paths;    /* what execvp would try for cmd[0], in order */
	size_t npaths;
	char **sh_argv;  /* "sh" PATH ARGS...: a file without #! (ENOEXEC) */
} exec_plan_t;

static void plan_free(exec_plan_t *p)
{
	for (size_t i = 0; i < p->npaths; i++)
		free(p->paths[i]);
	free(p->paths);
	free(p->envp);
	free(p->sh_argv);
}

/* Fills p for cmd: execvp's search (cmd[0] with a '/' as it is, else each
 * directory of $PATH, "/bin:/usr/bin" without one; an empty entry is the
 * current directory). */
static void plan_make(exec_plan_t *p, char **cmd, int64_t fence)
{
	extern char **environ;
	const char *file = cmd[0], *path = getenv("PATH");
	size_t n = 0, k = 0, argc = 0;

	memset(p, 0, sizeof(*p));
	snprintf(p->fence_var, sizeof(p->fence_var), "LOCKBROKER_FENCE=%" PRId64, fence);
	while (environ && environ[n])
		n++;
	p->envp = xmalloc((n + 2) * sizeof(char *));
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LOCKBROKER_FENCE=", 17) != 0)
			p->envp[k++] = environ[i];
	p->envp[k++] = p->fence_var;
	p->envp[k] = NULL;

	while (cmd[argc])
		argc++;
	p->sh_argv = xmalloc((argc + 2) * sizeof(char *));
	p->sh_argv[0] = (char *)"sh";
	for (size_t i = 1; i <= argc; i++) /* [1] is set in the child */
		p->sh_argv[i + 1] = cmd[i];

	if (file[0] == '\0')
		return; /* no candidate: ENOENT, as execvp */
	if (strchr(file, '/')) {
		p->paths = xmalloc(sizeof(char *));
		p->paths[p->npaths++] = xstrndup(file, strlen(file));
		return;
	}
	if (path == NULL)
		path = "/bin:/usr/bin";
	n = 1;
	for (const char *c = path; *c; c++)
		n += *c == ':';
	p->paths = xmalloc(n * sizeof(char *));
	for (const char *d = path;; d++) {
		const char *end = strchr(d, ':');
		size_t dl = end ? (size_t)(end - d) : strlen(d);
		char *full = xmalloc(dl + strlen(file) + 3);

		if (dl == 0)
			snprintf(full, dl + strlen(file) + 3, "./%s", file);
		else
			snprintf(full, dl + strlen(file) + 3, "%.*s/%s", (int)dl, d, file);
		p->paths[p->npaths++] = full;
		if (end == NULL)
			break;
		d = end;
	}
}

/* The child's exec, async-signal-safe: execve of each candidate (a file
 * without #! goes to /bin/sh), as execvp does: it goes on after ENOENT,
 * ENOTDIR, ESTALE, ENODEV, ETIMEDOUT and EACCES (which wins at the end),
 * stops at any other error. Returns the errno to report. */
static int exec_plan(const exec_plan_t *p, char **cmd)
{
	int err = ENOENT;
	bool eacces = false;

	for (size_t i = 0; i < p->npaths; i++) {
		execve(p->paths[i], cmd, p->envp);
		err = errno;
		if (err == ENOEXEC) {
			p->sh_argv[1] = p->paths[i];
			execve("/bin/sh", p->sh_argv, p->envp);
			err = errno;
		}
		switch (err) {
		case EACCES:
			eacces = true;
			continue;
		case ENOENT:
		case ENOTDIR:
		case ESTALE:
		case ENODEV:
		case ETIMEDOUT:
			continue;
		default:
			return err;
		}
	}
	return eacces ? EACCES : err;
}

/* fork + exec; the child leads a new process group when own_group.
 * Returns the child's pid, or -1 (printed). An exec that fails is printed
 * here; the child then exits 127 (not found) or 126. */
static pid_t spawn(char **cmd, int64_t fence, bool own_group)
{
	exec_plan_t plan;
	sigset_t orig;
	pid_t parent = getpid(), pid;
	int ep[2], e = 0;
	ssize_t n;

	if (pipe2(ep, O_CLOEXEC) < 0) {
		lc_err("pipe: %s", strerror(errno));
		return -1;
	}
	plan_make(&plan, cmd, fence);
	fflush(NULL);
	pthread_sigmask(SIG_BLOCK, &S.set, &orig);
	pid = fork();
	if (pid == 0) {
		/* async-signal-safe calls only, up to exec */
		close(ep[0]);
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
		e = exec_plan(&plan, cmd);
		if (write(ep[1], &e, sizeof(e)) < 0) {
		}
		_exit(e == ENOENT ? LC_EXIT_NOTFOUND : LC_EXIT_NOEXEC);
	}
	if (pid < 0)
		lc_err("fork: %s", strerror(errno));
	else if (own_group)
		setpgid(pid, pid); /* both sides, so no signal finds it unset */
	pthread_sigmask(SIG_SETMASK, &orig, NULL);
	close(ep[1]);
	/* the exec's outcome: the pipe closes at exec, or brings the errno */
	while (pid > 0 && (n = read(ep[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	if (pid > 0 && n == (ssize_t)sizeof(e)) {
		char cb[LC_MASK_BUF];
		lc_err("cannot run %s: %s", lc_masked(cmd[0], cb), strerror(e));
	}
	close(ep[0]);
	plan_free(&plan);
	return pid;
}

/* ---- the guard (see the file comment) ------------------------------------- */

static struct {
	pid_t pid; /* 0: none */
	int wfd;   /* lockctl's end of the pipe */
} G = {0, -1};

static void guard_main(int rfd, pid_t target) __attribute__((noreturn));
static void guard_main(int rfd, pid_t target)
{
	static const int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};
	struct sigaction ign = {.sa_handler = SIG_IGN};
	struct timespec tick = {0, 10 * 1000000};
	sigset_t none;
	char b;
	ssize_t n;

	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		sigaction(ignored[i], &ign, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setpgid(0, 0); /* out of the terminal's foreground group */
	while ((n = read(rfd, &b, 1)) < 0 && errno == EINTR)
		;
	if (n == 1)
		_exit(0); /* lockctl is done: nothing to stop */
	/* lockctl is gone: the command must be before the lock is */
	kill(target, SIGKILL);
	for (int i = 0; i < 200 && !(kill(target, 0) < 0 && errno == ESRCH); i++)
		nanosleep(&tick, NULL); /* a zombie nobody reaps ends this by time */
	_exit(0);
}

/* Starts the guard over target (-pgid or pid). Without it (fork failed)
 * the run goes on as before, with a warning. */
static void guard_start(pid_t target)
{
	int gp[2];
	sigset_t orig;
	pid_t pid;

	if (pipe2(gp, O_CLOEXEC) < 0) {
		lc_err("warning: no guard (pipe: %s): a kill -9 of lockctl would leave the command running",
		       strerror(errno));
		return;
	}
	pthread_sigmask(SIG_BLOCK, &S.set, &orig);
	pid = fork();
	if (pid == 0) {
		close(gp[1]);
		guard_main(gp[0], target);
	}
	pthread_sigmask(SIG_SETMASK, &orig, NULL);
	close(gp[0]);
	if (pid < 0) {
		lc_err("warning: no guard (fork: %s): a kill -9 of lockctl would leave the command running",
		       strerror(errno));
		close(gp[1]);
		return;
	}
	G.pid = pid;
	G.wfd = gp[1];
}

/* Tells the guard lockctl is done and reaps it. */
static void guard_end(void)
{
	if (G.pid <= 0)
		return;
	if (write(G.wfd, "x", 1) < 0) {
	}
	close(G.wfd);
	G.wfd = -1;
	while (waitpid(G.pid, NULL, 0) < 0 && errno == EINTR)
		;
	G.pid = 0;
}

/* Why a lease was lost, for the message. */
static const char *lost_why(lbc_lost_reason r)
{
	return r == LBC_LOST_DISCONNECTED ? "connection to the broker closed"
	                                  : lbc_lost_reason_name(r);
}

/* The lease is held: the shutdown warning is about it. */
static atomic_bool held;

/* On the thread that read the event (ours, or the client's liveness
 * thread; one event at a time): the broker's shutdown warning, once,
 * while the lease is held (before, the waiting acquire answers
 * shutting_down by itself); and a wake-up of the supervision loop for a
 * loss or the session's end, which that thread may have read off the
 * socket before poll() saw it. */
static void on_event(void *arg, const lbc_event_t *ev)
{
	const lc_lock_opts_t *o = arg;
	static bool warned;
	char nb[LC_MASK_BUF];

	if (ev->type == LBC_EVENT_LOST || ev->type == LBC_EVENT_DISCONNECTED) {
		unsigned char b = WAKE_BYTE;
		if (S.pipe[1] >= 0 && write(S.pipe[1], &b, 1) < 0) {
		}
	}
	if (ev->type == LBC_EVENT_SHUTDOWN && atomic_load(&held) && !warned) {
		lc_err("the broker is shutting down; the lease on \"%s\" ends within %" PRId64 " ms",
		       lc_masked(o->name, nb), ev->grace_ms);
		warned = true;
	}
}

/* Runs until the child has exited. Returns the exit status lockctl owes:
 * the child's, or LC_EXIT_LOST (then *was_lost is set). */
static int supervise(lbc_client_t *c, const lc_lock_opts_t *o, const lbc_lease_t *lease,
                     pid_t pid, bool own_group, bool *was_lost)
{
	pid_t target = own_group ? -pid : pid; /* whom signals go to */
	bool lost = false, killed = false;
	int64_t kill_at = -1;
	char nb[LC_MASK_BUF];
	int wst = 0;

	lc_masked(o->name, nb);
	for (;;) {
		int sigs[64], fd;
		size_t ns;
		pid_t w;

		while ((w = waitpid(pid, &wst, WNOHANG)) < 0 && errno == EINTR)
			;
		if (w == pid || (w < 0 && errno == ECHILD))
			break;

		if (!lost && lbc_lease_lost(lease)) {
			lost = true;
			lc_err("lost the lease on lock \"%s\" (%s); stopping the command", nb,
			       lost_why(lbc_lease_lost_reason(lease)));
			kill(target, SIGTERM);
			kill_at = lc_now_ms() + o->kill_after_ms;
		}
		if (lost && !killed && lc_now_ms() >= kill_at) {
			lc_err("the command outlived --kill-after; sending SIGKILL");
			kill(target, SIGKILL);
			killed = true;
		}

		/* without a session (fd -1) the lease is lost already */
		fd = lbc_fd(c);
		struct pollfd p[2] = {{.fd = S.pipe[0], .events = POLLIN},
		                      {.fd = fd, .events = POLLIN}};
		int np = fd >= 0 ? 2 : 1;
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
			/* a terminal's signal already hit a command in our group;
			 * WAKE_BYTE is only a wake-up: the loop looks at the lease */
			if (sig != SIGCHLD && sigs[k] != WAKE_BYTE && (own_group || !(sigs[k] & TTY_SIG)))
				kill(target, sig);
		}
		if (n > 0 && np == 2 && p[1].revents)
			(void)lbc_poll(c, 0, NULL); /* marks the lease lost, if it was */
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
	lbc_client_t *c = NULL;
	lbc_lease_t *lease = NULL;
	lbc_error_t err;
	lbc_status st;
	bool lost = false;
	pid_t pid;
	int r;

	r = lc_connect(g, on_event, (void *)o, &c);
	if (r != 0)
		goto out;
	if (signals_install() < 0) {
		r = LC_EXIT_INTERNAL;
		goto out;
	}
	if ((r = acquire(c, o, &lease)) != 0)
		goto out;
	atomic_store(&held, true);

	/* The command leads its own process group, so that a lost lease stops
	 * its children too; except when we run in the foreground of a terminal,
	 * where it must stay in our group to use the terminal (job control). */
	pid_t fg = tcgetpgrp(STDIN_FILENO);
	bool own_group = !(fg >= 0 && fg == getpgrp());
	pid = spawn(cmd, lbc_lease_fence(lease), own_group);
	if (pid < 0) {
		r = LC_EXIT_INTERNAL;
		goto out; /* closing the session releases the lease */
	}
	guard_start(own_group ? -pid : pid);
	r = supervise(c, o, lease, pid, own_group, &lost);
	if (lost)
		goto out;

	/* release explicitly, to know it happened; closing would do it too.
	 * What the broker sent while the command ran is read first: a loss
	 * it reported, or one the release finds (not_held, or a lost event
	 * met on the way), means the command may have run without the lock;
	 * the release's own failure (no answer in time, the connection gone
	 * now) does not, as the lease was held up to the command's end. */
	(void)lbc_poll(c, 0, NULL);
	if (lbc_lease_lost(lease) && lbc_lease_lost_reason(lease) != LBC_LOST_DISCONNECTED) {
		st = LBC_LOST;
		err.lost_reason = lbc_lease_lost_reason(lease);
		lbc_lease_free(lease);
	} else {
		st = lbc_release(c, lease, NULL, &err);
	}
	lease = NULL; /* freed either way */
	if (st == LBC_LOST && err.lost_reason != LBC_LOST_DISCONNECTED) {
		char nb[LC_MASK_BUF];
		lc_err("the lease on lock \"%s\" was lost (%s) before the command's end was released",
		       lc_masked(o->name, nb), lost_why(err.lost_reason));
		r = LC_EXIT_LOST;
	} else if (st != LBC_OK) {
		(void)lc_fail("release", &err, -1); /* a warning: the session's end releases it */
	}
out:
	guard_end();
	lbc_close(c);
	lbc_lease_free(lease);
	signals_free();
	return r;
}
