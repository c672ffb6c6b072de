/*
 * main.c - lockctl, the command-line client of lockbrokerd: option parsing,
 * the usage text (the reference for exit statuses), and the one-request
 * subcommands (acquire --detach, release, extend, inspect, stats, ping),
 * each one session of the C client (client.c); --json sends the request
 * through lbc_request and prints the broker's answer line as it came.
 * `run` lives in run.c.
 *
 * Every path frees what it allocated before returning its exit status, so
 * LeakSanitizer stays quiet in the test build. Errors are one line on
 * stderr; secrets (the auth secret) are never printed, lease tokens only
 * where asked for (acquire's output).
 */
#include "cmd/lockctl/lockctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "broker/base/version.h"

static const char usage_text[] =
"Usage: lockctl [GLOBAL OPTIONS] COMMAND [ARGS]\n"
"\n"
"Command-line client of lockbrokerd, the lock broker that keeps distributed\n"
"locks in Redis.\n"
"\n"
"Commands:\n"
"  run [LOCK OPTIONS] [--kill-after DURATION] NAME [--] COMMAND [ARGS...]\n"
"      Acquire the lock NAME, run COMMAND with the lock's fencing token in\n"
"      the environment variable LOCKBROKER_FENCE, keep the lease alive while\n"
"      COMMAND runs, release it when COMMAND exits, and exit with COMMAND's\n"
"      status. If the lease is lost (expired, gone from Redis, --max-hold\n"
"      reached, connection to the broker lost, or the broker silent for\n"
"      longer than a third of the TTL, at most 5s: see --no-liveness-check),\n"
"      COMMAND gets SIGTERM, then SIGKILL after --kill-after (default 5s),\n"
"      and lockctl exits 75. It also exits 75 when the release after\n"
"      COMMAND's end finds the lease lost: COMMAND may have run part of its\n"
"      time without the lock.\n"
"      SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to lockctl\n"
"      are forwarded to COMMAND; before the lock is granted they make\n"
"      lockctl give up and exit 128+N. COMMAND leads its own process group\n"
"      and signals go to the whole group, so a lost lease stops COMMAND's\n"
"      children too; but when lockctl runs in the foreground of a terminal,\n"
"      COMMAND shares its group (it needs the terminal) and only COMMAND\n"
"      itself is signalled. If lockctl itself dies, COMMAND gets SIGTERM\n"
"      (Linux). The lease token is never put in the environment.\n"
"  elect --value VALUE [LOCK OPTIONS] [--kill-after DURATION] NAME [--]\n"
"        COMMAND [ARGS...]\n"
"      Campaign in the election NAME (an exclusive lock whose holder\n"
"      publishes VALUE, e.g. its address), and run COMMAND while this\n"
"      process leads, as run does: the term (the fencing token) is in\n"
"      LOCKBROKER_FENCE; when leadership is lost COMMAND is stopped and\n"
"      lockctl exits 75. Waits until elected unless --wait / --no-wait.\n"
"  leader NAME\n"
"      Print who leads the election NAME: its value and its term; exit 3\n"
"      when nobody leads.\n"
"  watch NAME\n"
"      Print the lock's state as one JSON line, then one JSON line (the\n"
"      broker's `changed` event) each time it changes, until interrupted\n"
"      or the connection is lost (exit 69).\n"
"  acquire --detach [LOCK OPTIONS] NAME\n"
"      Acquire a detached lease, which outlives lockctl and ends only by\n"
"      release, by its TTL (unless extended) or by --max-hold, and print its\n"
"      token. Keep the token secret: it is the right to release the lease.\n"
"  release TOKEN\n"
"      Release a lease (one reentrancy level).\n"
"  extend --ttl DURATION TOKEN\n"
"      Set a lease's remaining lifetime to DURATION.\n"
"  inspect NAME\n"
"      Show a lock's state, holders, waiters and last fencing token.\n"
"  stats\n"
"      Show the broker's counters.\n"
"  ping\n"
"      Check that the broker answers.\n"
"\n"
"Global options (before COMMAND; every command but run also takes them\n"
"after its name):\n"
"  --broker URL         tcp://HOST:PORT or unix:///PATH. Default:\n"
"                       $LOCKBROKER_URL, else\n"
"                       unix:///run/lockbroker/lockbroker.sock if it exists,\n"
"                       else tcp://127.0.0.1:7380\n"
"  --auth-file FILE     say hello with FILE's content, minus one trailing \\n\n"
"                       or \\r\\n, as the broker's shared secret\n"
"  --json               print the broker's JSON answer (one line) instead of\n"
"                       text, also when it is an error; run ignores it\n"
"  --timeout DURATION   limit on connecting and on each answer other than\n"
"                       the grant of a lock (default 10s)\n"
"  --no-liveness-check  (run) do not watch the broker. By default, while\n"
"                       the lease is held, lockctl pings the broker and\n"
"                       takes a broker silent for longer than a third of\n"
"                       the TTL (at most 5s) as gone: the lease counts as\n"
"                       lost before Redis can give the lock to another\n"
"                       client. Without the check, a frozen broker leaves\n"
"                       COMMAND running while another holder may have the\n"
"                       lock\n"
"  -h, --help           print this text\n"
"  -V, --version        print the version\n"
"\n"
"Lock options (run, acquire; before or after NAME):\n"
"  --shared             shared mode: shared holders coexist (readers)\n"
"  --limit N            a semaphore with N permits (1..1000000);\n"
"                       not with --shared\n"
"  --wait DURATION      give up after DURATION (exit 74)\n"
"  --no-wait            do not wait: fail at once if the lock is busy\n"
"                       (exit 73). Default: wait until granted.\n"
"  --ttl DURATION       lease TTL in Redis, 100ms..24h (default: the\n"
"                       broker's, 30s); run's lease is renewed every TTL/3\n"
"  --max-hold DURATION  end the lease this long after its grant, however\n"
"                       often renewed, 100ms..24h\n"
"  --kill-after DURATION  (run, elect) SIGTERM to SIGKILL grace when the\n"
"                       lease is lost (default 5s)\n"
"  --value VALUE        the holder's value (elect: the leader's; an\n"
"                       exclusive lock only), at most 4096 bytes\n"
"  --lock-delay DURATION  when the lease ends without a release (lockctl\n"
"                       killed, the broker lost), nobody gets the lock for\n"
"                       this long, 0..10m\n"
"\n"
"Durations are a number and a unit: 500ms, 30s, 1.5s, 5m, 1h. A number\n"
"without a unit is rejected (seconds or milliseconds?), except 0.\n"
"Options take their value as the next argument or after '=' (--wait=5s).\n"
"\n"
"Output: acquire prints the lease token alone on a line; release, extend,\n"
"inspect, stats and ping print short text. Errors go to stderr, one line.\n"
"\n"
"Exit status:\n"
"  0      success; for run, COMMAND's own exit status\n"
"  3      leader: nobody leads the election\n"
"  128+N  run: COMMAND was killed by signal N, or lockctl got signal N\n"
"         while it waited for the lock\n"
"  64     usage error: bad option, bad duration, unreadable --auth-file\n"
"  69     broker unavailable: cannot connect, connection lost, no answer in\n"
"         time, Redis down (unavailable), broker stopping (shutting_down)\n"
"  70     internal error: bad answer from the broker, fork failed\n"
"  73     lock busy: held elsewhere and --no-wait (or --wait 0)\n"
"  74     timeout: --wait ran out before the lock was granted\n"
"  75     run: the lease was lost while COMMAND ran; COMMAND was stopped\n"
"         (or had just ended: the release found the lease lost)\n"
"  76     the broker refused the request: not_held (unknown, released or\n"
"         expired lease), conflict, unauthorized, limit_exceeded, ...\n"
"  126    run: COMMAND could not be executed\n"
"  127    run: COMMAND was not found\n"
"\n"
"Examples:\n"
"  lockctl run --no-wait nightly-report -- ./report.sh --full\n"
"  lockctl --broker unix:///run/lockbroker/lockbroker.sock run --shared \\\n"
"      --wait 30s config -- cat /etc/app.conf\n"
"  t=$(lockctl acquire --detach --ttl 10m deploy) && ... && lockctl release \"$t\"\n"
"  lockctl --json inspect deploy\n"
"  lockctl elect --value \"$(hostname):8080\" scheduler -- ./scheduler\n"
"  lockctl leader scheduler; lockctl watch scheduler\n"
"\n"
"Environment: LOCKBROKER_URL (the broker when --broker is not given);\n"
"LOCKBROKER_FENCE (set for COMMAND by run).\n";

static int usage_error(const char *fmt, const char *arg)
{
	char ab[LC_MASK_BUF];
	char msg[256];

	snprintf(msg, sizeof(msg), fmt, arg ? lc_masked(arg, ab) : "");
	lc_err("%s (see lockctl --help)", msg);
	return LC_EXIT_USAGE;
}

/* ---- options ------------------------------------------------------------ */

/* One "--name", "--name VALUE" or "--name=VALUE" at argv[*i]. */
typedef struct opt {
	const char *name; /* without "--" (or "-h" for short ones) */
	const char *val;  /* NULL when the option takes none */
} opt_t;

/* Splits argv[*i] into name and inline value; takes the next argument as
 * the value when needs_val and there is no inline one. Returns 0 or a
 * usage status. */
static int opt_value(int argc, char **argv, int *i, const char *inline_val,
                     const char *name, const char **val)
{
	if (inline_val) {
		*val = inline_val;
		return 0;
	}
	if (*i + 1 >= argc)
		return usage_error("option --%s needs a value", name);
	*val = argv[++*i];
	return 0;
}

static int read_auth_file(const char *path, char **out)
{
	char pb[LC_MASK_BUF];
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;
	json_t *probe;

	if (f == NULL) {
		lc_err("cannot read --auth-file %s: %s", lc_masked(path, pb), strerror(errno));
		return LC_EXIT_USAGE;
	}
	buf = xmalloc(65537);
	n = fread(buf, 1, 65537, f);
	if (ferror(f) || n > 65536) {
		lc_err("cannot read --auth-file %s: %s", lc_masked(path, pb),
		       ferror(f) ? "read error" : "larger than 64 KiB");
		fclose(f);
		free(buf);
		return LC_EXIT_USAGE;
	}
	fclose(f);
	if (n > 0 && buf[n - 1] == '\n') {
		n--;
		if (n > 0 && buf[n - 1] == '\r')
			n--;
	}
	buf[n] = '\0';
	probe = json_stringn(buf, n); /* NULL: not UTF-8, or a NUL inside */
	if (probe == NULL || strlen(buf) != n) {
		json_decref(probe);
		lc_err("--auth-file %s: the secret is not UTF-8 text", lc_masked(path, pb));
		free(buf);
		return LC_EXIT_USAGE;
	}
	json_decref(probe);
	free(*out);
	*out = buf;
	return 0;
}

/* Tries argv[*i] as a global option. Returns 1 consumed, 0 not a global
 * option, or a usage status (> 1). */
static int global_opt(lc_global_t *g, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *val = NULL, *eq;
	char name[32];
	int r;

	if (strcmp(a, "--json") == 0) {
		g->json = true;
		return 1;
	}
	if (strcmp(a, "--no-liveness-check") == 0) {
		g->no_liveness_check = true;
		return 1;
	}
	if (strncmp(a, "--", 2) != 0)
		return 0;
	eq = strchr(a, '=');
	snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
	if (strcmp(name, "broker") != 0 && strcmp(name, "auth-file") != 0 &&
	    strcmp(name, "timeout") != 0)
		return 0;
	if ((r = opt_value(argc, argv, i, eq ? eq + 1 : NULL, name, &val)) != 0)
		return r;
	if (strcmp(name, "broker") == 0) {
		g->url = val;
	} else if (strcmp(name, "auth-file") == 0) {
		if ((r = read_auth_file(val, &g->auth)) != 0)
			return r;
	} else {
		if (lc_parse_duration(val, &g->timeout_ms) < 0 || g->timeout_ms == 0)
			return usage_error("bad --timeout %s (want e.g. 500ms, 10s, 1m)", val);
	}
	return 1;
}

/* Lock options of run and acquire at argv[*i]. Returns 1 consumed, 0 not
 * one, or a usage status. */
static int lock_opt(lc_lock_opts_t *o, bool run, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *val = NULL, *eq;
	char name[32];
	int r;

	if (strncmp(a, "--", 2) != 0)
		return 0;
	eq = strchr(a, '=');
	snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
	if (strcmp(name, "shared") == 0 || strcmp(name, "no-wait") == 0 ||
	    strcmp(name, "detach") == 0) {
		if (eq)
			return usage_error("option --%s takes no value", name);
		if (name[0] == 's')
			o->shared = true;
		else if (name[0] == 'n')
			o->wait_ms = 0;
		else if (!run)
			o->detach = true;
		else
			return usage_error("run takes no --detach%s", NULL);
		return 1;
	}
	if (strcmp(name, "limit") != 0 && strcmp(name, "wait") != 0 &&
	    strcmp(name, "ttl") != 0 && strcmp(name, "max-hold") != 0 &&
	    strcmp(name, "value") != 0 && strcmp(name, "lock-delay") != 0 &&
	    !(run && strcmp(name, "kill-after") == 0))
		return 0;
	if ((r = opt_value(argc, argv, i, eq ? eq + 1 : NULL, name, &val)) != 0)
		return r;
	if (strcmp(name, "value") == 0) {
		json_t *probe = json_string(val); /* NULL when not UTF-8 */
		if (probe == NULL || strlen(val) > 4096) {
			json_decref(probe);
			return usage_error("bad --value (want UTF-8 text of at most 4096 bytes)%s", "");
		}
		json_decref(probe);
		o->value = val;
	} else if (strcmp(name, "lock-delay") == 0) {
		if (lc_parse_duration(val, &o->lock_delay_ms) < 0 || o->lock_delay_ms > 600000)
			return usage_error("bad --lock-delay %s (want a duration, 0..10m)", val);
	} else if (strcmp(name, "limit") == 0) {
		if (lc_parse_int(val, 1, 1000000, &o->limit) < 0)
			return usage_error("bad --limit %s (want an integer 1..1000000)", val);
	} else if (strcmp(name, "wait") == 0) {
		if (lc_parse_duration(val, &o->wait_ms) < 0)
			return usage_error("bad --wait %s (want a duration: 500ms, 30s, 5m, 1h)", val);
	} else if (strcmp(name, "kill-after") == 0) {
		if (lc_parse_duration(val, &o->kill_after_ms) < 0)
			return usage_error("bad --kill-after %s (want a duration: 500ms, 5s)", val);
	} else {
		int64_t *dst = name[0] == 't' ? &o->ttl_ms : &o->max_hold_ms;
		if (lc_parse_duration(val, dst) < 0 || *dst < 100 || *dst > 86400000) {
			char m[96];
			snprintf(m, sizeof(m), "bad --%s %%s (want a duration, 100ms..24h)", name);
			return usage_error(m, val);
		}
	}
	return 1;
}

/* ---- one-request subcommands ------------------------------------------- */

/* fields (taken) as a JSON object's text for lbc_request (malloc'd). */
static char *fields_text(json_t *fields)
{
	char *s;

	REQUIRE(fields != NULL);
	s = json_dumps(fields, JSON_COMPACT);
	REQUIRE(s != NULL);
	json_decref(fields);
	return s;
}

/* op with fields (taken; may be NULL) on a new session, through
 * lbc_request. In --json mode the answer line is printed whatever it
 * says. Returns 0 with *answer (when not NULL; the caller frees it) when
 * ok: true, else the exit status (printed). lock: the options of an
 * acquire, else NULL. */
static int one_request(const lc_global_t *g, const char *op, char *fields,
                       const lc_lock_opts_t *lock, char **answer)
{
	lbc_client_t *c;
	lbc_error_t err;
	char *line = NULL;
	lbc_status st;
	int r = lc_connect(g, NULL, NULL, &c);

	if (answer)
		*answer = NULL;
	if (r != 0) {
		free(fields);
		return r;
	}
	st = lbc_request(c, op, fields, &line, &err);
	lbc_close(c);
	free(fields);
	if (g->json && line)
		printf("%s\n", line);
	if (st != LBC_OK) {
		free(line);
		return lock ? lc_acquire_fail(lock, &err) : lc_fail(op, &err, -1);
	}
	if (answer)
		*answer = line;
	else
		free(line);
	return 0;
}

static int cmd_acquire(const lc_global_t *g, const lc_lock_opts_t *o)
{
	lbc_acquire_opts_t ao = lc_acquire_opts(o);
	lbc_client_t *c;
	lbc_lease_t *lease;
	lbc_error_t err;
	lbc_status st;
	int r;

	if (g->json)
		return one_request(g, "acquire", lc_acquire_fields(o), o, NULL);
	if ((r = lc_connect(g, NULL, NULL, &c)) != 0)
		return r;
	st = lbc_acquire(c, o->name, &ao, &lease, &err);
	if (st == LBC_OK) {
		printf("%s\n", lbc_lease_token(lease));
		lbc_lease_free(lease); /* detached: it lives on, by its token */
	}
	lbc_close(c);
	return st == LBC_OK ? 0 : lc_acquire_fail(o, &err);
}

static int cmd_release(const lc_global_t *g, const char *token)
{
	lbc_client_t *c;
	lbc_error_t err;
	lbc_status st;
	int64_t count = 0;
	int r;

	if (g->json)
		return one_request(g, "release", fields_text(json_pack("{s:s}", "lease", token)), NULL,
		                   NULL);
	if ((r = lc_connect(g, NULL, NULL, &c)) != 0)
		return r;
	st = lbc_release_token(c, token, &count, &err);
	lbc_close(c);
	if (st != LBC_OK)
		return lc_fail("release", &err, -1);
	if (count == 0)
		printf("released\n");
	else
		printf("released one level; the lease is still held (count %" PRId64 ")\n", count);
	return 0;
}

static int cmd_extend(const lc_global_t *g, const char *token, int64_t ttl_ms)
{
	lbc_client_t *c;
	lbc_error_t err;
	lbc_status st;
	int64_t left = 0;
	int r;

	if (g->json)
		return one_request(g, "extend",
		                   fields_text(json_pack("{s:s, s:I}", "lease", token, "ttl_ms",
		                                         (json_int_t)ttl_ms)),
		                   NULL, NULL);
	if ((r = lc_connect(g, NULL, NULL, &c)) != 0)
		return r;
	st = lbc_extend_token(c, token, ttl_ms, &left, &err);
	lbc_close(c);
	if (st != LBC_OK)
		return lc_fail("extend", &err, -1);
	printf("extended: the lease now ends in %" PRId64 " ms\n", left);
	return 0;
}

/* A JSON value as text: strings masked, others compact JSON. */
static void print_value(const char *label, const json_t *v)
{
	char b[LC_MASK_BUF];

	if (json_is_string(v)) {
		printf("%s%s\n", label, lc_masked(json_string_value(v), b));
	} else if (v == NULL || json_is_null(v)) {
		printf("%s-\n", label);
	} else {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		printf("%s%s\n", label, s ? s : "?");
		free(s);
	}
}

/* inspect on a session of its own: 0 with *out (lbc_lock_info_free it), or
 * the exit status (printed, as `what`). */
static int inspect_once(const lc_global_t *g, const char *name, const char *what,
                        lbc_lock_info_t **out)
{
	lbc_client_t *c;
	lbc_error_t err;
	lbc_status st;
	int r;

	if ((r = lc_connect(g, NULL, NULL, &c)) != 0)
		return r;
	st = lbc_inspect(c, name, out, &err);
	lbc_close(c);
	return st == LBC_OK ? 0 : lc_fail(what, &err, -1);
}

static int cmd_inspect(const lc_global_t *g, const char *name)
{
	lbc_lock_info_t *in;
	char b[LC_MASK_BUF];
	int r;

	if (g->json)
		return one_request(g, "inspect", fields_text(json_pack("{s:s}", "lock", name)), NULL,
		                   NULL);
	if ((r = inspect_once(g, name, "inspect", &in)) != 0)
		return r;
	printf("lock:    %s\n", lc_masked(in->lock, b));
	printf("state:   %s\n", lc_masked(in->state, b));
	if (in->limit > 0)
		printf("limit:   %" PRId64 "\n", in->limit);
	if (in->has_fence)
		printf("fence:   %" PRId64 "\n", in->fence);
	else
		printf("fence:   -\n");
	printf("waiters: %" PRId64 "\n", in->waiters);
	printf("holders: %zu\n", in->n_holders);
	for (size_t i = 0; i < in->n_holders; i++) {
		const lbc_holder_t *h = &in->holders[i];
		char mb[LC_MASK_BUF], ob[LC_MASK_BUF], cb[LC_MASK_BUF];

		printf("  %-9s ttl %" PRId64 " ms, count %" PRId64 ", owner \"%s\", client \"%s\"",
		       lc_masked(h->mode, mb), h->ttl_ms, h->count, lc_masked(h->owner, ob),
		       lc_masked(h->client, cb));
		if (h->value)
			printf(", value \"%s\"", lc_masked(h->value, mb));
		printf("\n");
	}
	lbc_lock_info_free(in);
	return 0;
}

/* leader: the exclusive holder's value and term, from inspect. */
static int cmd_leader(const lc_global_t *g, const char *name)
{
	lbc_lock_info_t *in;
	char b[LC_MASK_BUF];
	int r;

	if (g->json) {
		char *line = NULL;
		json_t *j;
		bool leads;
		if ((r = one_request(g, "inspect", fields_text(json_pack("{s:s}", "lock", name)), NULL,
		                     &line)) != 0)
			return r;
		j = json_loads(line, 0, NULL);
		leads = j && json_is_string(json_object_get(j, "state")) &&
		        strcmp(json_string_value(json_object_get(j, "state")), "exclusive") == 0;
		json_decref(j);
		free(line);
		return leads ? 0 : LC_EXIT_NOLEADER;
	}
	if ((r = inspect_once(g, name, "leader", &in)) != 0)
		return r;
	if (strcmp(in->state, "exclusive") != 0 || in->n_holders == 0) {
		lc_err("%s: nobody leads (state %s)", lc_masked(name, b), in->state);
		lbc_lock_info_free(in);
		return LC_EXIT_NOLEADER;
	}
	printf("leader: %s\n", in->holders[0].value ? lc_masked(in->holders[0].value, b) : "(no value)");
	printf("term:   %" PRId64 "\n", in->fence);
	printf("client: %s\n", lc_masked(in->holders[0].client, b));
	lbc_lock_info_free(in);
	return 0;
}

/* watch: the state, then each `changed` event, one JSON line each. */
static void on_watch_event(void *arg, const lbc_event_t *ev)
{
	bool *gone = arg;

	if (ev->type == LBC_EVENT_OTHER && ev->name && strcmp(ev->name, "changed") == 0 && ev->line) {
		printf("%s\n", ev->line);
		fflush(stdout);
	} else if (ev->type == LBC_EVENT_DISCONNECTED || ev->type == LBC_EVENT_CLOSING) {
		*gone = true;
	}
}

static int cmd_watch(const lc_global_t *g, const char *name)
{
	lbc_client_t *c;
	lbc_error_t err;
	lbc_status st;
	char *line = NULL, *fields = fields_text(json_pack("{s:s}", "lock", name));
	bool gone = false;
	int r;

	if ((r = lc_connect(g, on_watch_event, &gone, &c)) != 0) {
		free(fields);
		return r;
	}
	st = lbc_request(c, "watch", fields, &line, &err);
	free(fields);
	if (st != LBC_OK) {
		free(line);
		lbc_close(c);
		return lc_fail("watch", &err, -1);
	}
	printf("%s\n", line);
	fflush(stdout);
	free(line);
	/* poll(2) on the client's socket, then what arrived at once: each
	 * change is printed when it comes (lbc_poll hands events over when it
	 * returns). */
	while (!gone) {
		struct pollfd p = {.fd = lbc_fd(c), .events = POLLIN};
		(void)poll(&p, 1, 1000);
		if (lbc_poll(c, 0, &err) < 0)
			break;
	}
	lbc_close(c);
	lc_err("watch: the connection to the broker was lost");
	return LC_EXIT_UNAVAILABLE;
}

/* stats prints every counter the broker has (lbc_stats_t holds the common
 * ones only), so it takes the answer line and prints its members. */
static int cmd_stats(const lc_global_t *g)
{
	char *line;
	json_t *resp, *v;
	const char *key;
	int r = one_request(g, "stats", NULL, NULL, &line);

	if (r != 0 || g->json) {
		free(line);
		return r;
	}
	resp = json_loads(line, 0, NULL);
	free(line);
	if (!json_is_object(resp)) {
		json_decref(resp);
		lc_err("stats: the answer is not a JSON object");
		return LC_EXIT_INTERNAL;
	}
	json_object_foreach(resp, key, v) {
		char kb[LC_MASK_BUF], label[LC_MASK_BUF + 4];
		if (strcmp(key, "id") == 0 || strcmp(key, "ok") == 0)
			continue;
		snprintf(label, sizeof(label), "%s: ", lc_masked(key, kb));
		print_value(label, v);
	}
	json_decref(resp);
	return 0;
}

static int cmd_ping(const lc_global_t *g)
{
	lbc_client_t *c;
	lbc_server_info_t info;
	lbc_error_t err;
	lbc_status st;
	struct timespec t0, t1;
	char sb[LC_MASK_BUF];
	int r;

	if (g->json)
		return one_request(g, "ping", NULL, NULL, NULL);
	if ((r = lc_connect(g, NULL, NULL, &c)) != 0)
		return r;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	st = lbc_ping(c, NULL, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (st == LBC_OK && lbc_server_info(c, &info, NULL) != LBC_OK)
		info = (lbc_server_info_t){.server = ""};
	lbc_close(c);
	if (st != LBC_OK)
		return lc_fail("ping", &err, -1);
	printf("ok: %s, protocol %" PRId64 ", answered in %.2f ms\n",
	       info.server[0] ? lc_masked(info.server, sb) : "?", info.proto,
	       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

/* The subcommand's arguments: options (global and lock) anywhere, the rest
 * positional. For run, the first positional is NAME and parsing stops at
 * the next positional or at "--": that is where COMMAND starts. Returns 0,
 * a usage status, or -1 when --help was asked for (and printed). */
static int parse_sub(lc_global_t *g, lc_lock_opts_t *o, bool lock_opts, bool run, int argc,
                     char **argv, int *i, const char **pos, int maxpos, int *npos)
{
	*npos = 0;
	for (; *i < argc; (*i)++) {
		const char *a = argv[*i];
		int r;

		if (strcmp(a, "--") == 0) {
			(*i)++;
			if (run)
				return 0;
			for (; *i < argc; (*i)++) {
				if (*npos == maxpos)
					return usage_error("unexpected argument %s", argv[*i]);
				pos[(*npos)++] = argv[*i];
			}
			return 0;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage_text, stdout);
			return -1;
		}
		if (a[0] == '-' && a[1] != '\0') {
			if (lock_opts && (r = lock_opt(o, run, argc, argv, i)) != 0) {
				if (r > 1)
					return r;
				continue;
			}
			if ((r = global_opt(g, argc, argv, i)) != 0) {
				if (r > 1)
					return r;
				continue;
			}
			return usage_error("unknown option %s", a);
		}
		if (run && *npos == 1)
			return 0; /* COMMAND starts here */
		if (*npos == maxpos)
			return usage_error("unexpected argument %s", a);
		pos[(*npos)++] = a;
	}
	return 0;
}

static int dispatch(lc_global_t *g, int argc, char **argv)
{
	lc_lock_opts_t o = {.wait_ms = -1, .ttl_ms = -1, .max_hold_ms = -1,
	                    .kill_after_ms = 5000};
	const char *pos[2] = {NULL, NULL};
	int i = 1, npos, r;
	const char *cmd;

	for (; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			printf(LC_NAME " (" LOCKBROKER_NAME ") " LOCKBROKER_VERSION
			       ", protocol %d\n", LB_PROTO_VERSION);
			return 0;
		}
		if (a[0] != '-')
			break;
		if ((r = global_opt(g, argc, argv, &i)) > 1)
			return r;
		if (r == 0)
			return usage_error("unknown option %s", a);
	}
	if (i >= argc)
		return usage_error("no command given%s", NULL);
	cmd = argv[i++];

	if (strcmp(cmd, "run") == 0 || strcmp(cmd, "elect") == 0) {
		if ((r = parse_sub(g, &o, true, true, argc, argv, &i, pos, 1, &npos)) != 0)
			return r < 0 ? 0 : r;
		if (npos < 1)
			return usage_error("%s needs a lock NAME and a COMMAND", cmd);
		if (i >= argc)
			return usage_error("%s needs a COMMAND after the lock name", cmd);
		if (cmd[0] == 'e' && (!o.value || o.shared || o.limit > 0))
			return usage_error("elect needs --value VALUE, and takes no --shared or --limit%s",
			                   "");
	} else if (strcmp(cmd, "leader") == 0 || strcmp(cmd, "watch") == 0) {
		if ((r = parse_sub(g, &o, false, false, argc, argv, &i, pos, 1, &npos)) != 0)
			return r < 0 ? 0 : r;
		if (npos != 1)
			return usage_error("%s needs exactly one lock NAME", cmd);
	} else if (strcmp(cmd, "acquire") == 0) {
		if ((r = parse_sub(g, &o, true, false, argc, argv, &i, pos, 1, &npos)) != 0)
			return r < 0 ? 0 : r;
		if (npos != 1)
			return usage_error("acquire needs exactly one lock NAME%s", NULL);
		if (!o.detach)
			return usage_error("acquire needs --detach: a lease that is not detached "
			                   "ends with lockctl's connection (use run)%s", NULL);
	} else if (strcmp(cmd, "extend") == 0) {
		/* --ttl is the only lock option extend takes */
		for (; i < argc; i++) {
			const char *a = argv[i];
			if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
				fputs(usage_text, stdout);
				return 0;
			}
			if (strncmp(a, "--ttl", 5) == 0 && (a[5] == '\0' || a[5] == '=')) {
				if ((r = lock_opt(&o, false, argc, argv, &i)) > 1)
					return r;
			} else if (strcmp(a, "--") != 0 && a[0] == '-' && a[1] != '\0') {
				if ((r = global_opt(g, argc, argv, &i)) > 1)
					return r;
				if (r == 0)
					return usage_error("unknown option %s", a);
			} else if (strcmp(a, "--") == 0 && i + 1 < argc && !pos[0]) {
				pos[0] = argv[++i];
			} else if (!pos[0]) {
				pos[0] = a;
			} else {
				return usage_error("unexpected argument %s", a);
			}
		}
		if (!pos[0])
			return usage_error("extend needs a lease TOKEN%s", NULL);
		if (o.ttl_ms < 0)
			return usage_error("extend needs --ttl DURATION%s", NULL);
	} else if (strcmp(cmd, "release") == 0 || strcmp(cmd, "inspect") == 0) {
		if ((r = parse_sub(g, &o, false, false, argc, argv, &i, pos, 1, &npos)) != 0)
			return r < 0 ? 0 : r;
		if (npos != 1)
			return usage_error(cmd[0] == 'r' ? "release needs exactly one lease TOKEN%s"
			                                 : "inspect needs exactly one lock NAME%s",
			                   NULL);
	} else if (strcmp(cmd, "stats") == 0 || strcmp(cmd, "ping") == 0) {
		if ((r = parse_sub(g, &o, false, false, argc, argv, &i, pos, 0, &npos)) != 0)
			return r < 0 ? 0 : r;
	} else {
		return usage_error("unknown command %s", cmd);
	}

	if (o.shared && o.limit > 0)
		return usage_error("--shared and --limit exclude each other%s", NULL);
	if ((strcmp(cmd, "run") == 0 || strcmp(cmd, "elect") == 0 || strcmp(cmd, "acquire") == 0) &&
	    pos[0][0] == '\0')
		return usage_error("the lock name is empty%s", NULL);
	if (pos[0]) {
		json_t *probe = json_string(pos[0]); /* NULL when not UTF-8 */
		if (probe == NULL)
			return usage_error("%s is not UTF-8 text", pos[0]);
		json_decref(probe);
	}
	o.name = pos[0];
	if (g->url == NULL)
		g->url = lbc_default_url();

	if (strcmp(cmd, "run") == 0 || strcmp(cmd, "elect") == 0)
		return lc_run(g, &o, argv + i);
	if (strcmp(cmd, "leader") == 0)
		return cmd_leader(g, pos[0]);
	if (strcmp(cmd, "watch") == 0)
		return cmd_watch(g, pos[0]);
	if (strcmp(cmd, "acquire") == 0)
		return cmd_acquire(g, &o);
	if (strcmp(cmd, "release") == 0)
		return cmd_release(g, pos[0]);
	if (strcmp(cmd, "extend") == 0)
		return cmd_extend(g, pos[0], o.ttl_ms);
	if (strcmp(cmd, "inspect") == 0)
		return cmd_inspect(g, pos[0]);
	if (strcmp(cmd, "stats") == 0)
		return cmd_stats(g);
	return cmd_ping(g);
}

int main(int argc, char **argv)
{
	lc_global_t g = {.timeout_ms = 10000};
	int r = dispatch(&g, argc, argv);

	free(g.auth);
	if (fflush(stdout) != 0 && r == 0) {
		lc_err("writing the output: %s", strerror(errno));
		r = LC_EXIT_INTERNAL;
	}
	return r;
}
