/*
 * test_unit.c - the parts that need no broker: the strict JSON reader and
 * the writer (json.c), URLs and secret files (url.c), the status table
 * (one status per protocol error code, both ways, also checked against
 * protocol/PROTOCOL.md's table), and arguments refused before any I/O.
 */
#include "support.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static int parse(const char *s, lbc_jdoc_t *d)
{
	char msg[128];
	return lbc_json_parse(d, s, strlen(s), msg, sizeof(msg));
}

Test(json, reads_an_answer)
{
	lbc_jdoc_t d;
	const char *line = "{\"id\":3,\"ok\":true,\"lease\":\"5dfd82e0\",\"lock\":\"inv\\u00e9:\\\"42\\\"\","
	                   "\"mode\":\"exclusive\",\"fence\":1795308363707125,\"ttl_ms\":10000,\"count\":1,"
	                   "\"limits\":{\"max_line\":65536},\"holders\":[{\"a\":1},[],null,false,-0.5e3],"
	                   "\"big\":-9223372036854775808,\"huge\":9223372036854775808}";
	int64_t v;
	size_t len;

	cr_assert_eq(parse(line, &d), 0);
	cr_assert_eq(lbc_json_type(&d, 0), LBC_J_OBJ);
	cr_assert(lbc_json_true(&d, 0, "ok"));
	cr_assert_str_eq(lbc_json_str(&d, 0, "lease", NULL), "5dfd82e0");
	cr_assert_str_eq(lbc_json_str(&d, 0, "lock", &len), "inv\xc3\xa9:\"42\"");
	cr_assert_eq(len, 10);
	cr_assert_eq(lbc_json_int(&d, 0, "fence", &v), 0);
	cr_assert_eq(v, 1795308363707125LL);
	cr_assert_eq(lbc_json_int(&d, lbc_json_get(&d, 0, "limits"), "max_line", &v), 0);
	cr_assert_eq(v, 65536);
	uint32_t h = lbc_json_get(&d, 0, "holders");
	cr_assert_eq(lbc_json_type(&d, h), LBC_J_ARR);
	cr_assert_eq(d.nodes[h].v.c.n, 5);
	cr_assert_eq(lbc_json_int(&d, 0, "big", &v), 0);
	cr_assert_eq(v, INT64_MIN);
	cr_assert_eq(lbc_json_type(&d, lbc_json_get(&d, 0, "huge")), LBC_J_NUM);
	cr_assert_eq(lbc_json_int(&d, 0, "huge", &v), -1);
	cr_assert_eq(lbc_json_get(&d, 0, "nope"), LBC_JNONE);
	cr_assert_null(lbc_json_str(&d, 0, "fence", NULL));
	lbc_json_free(&d);
}

Test(json, decodes_escapes_and_surrogates)
{
	lbc_jdoc_t d;
	size_t len;

	cr_assert_eq(parse("{\"s\":\"a\\u0000b\\n\\t\\/\\ud83d\\ude00\"}", &d), 0);
	const char *s = lbc_json_str(&d, 0, "s", &len);
	cr_assert_eq(len, 1 + 1 + 1 + 1 + 1 + 1 + 4);
	cr_assert_eq(memcmp(s, "a\0b\n\t/\xf0\x9f\x98\x80", len), 0);
	lbc_json_free(&d);
}

Test(json, is_strict)
{
	static const char *bad[] = {
		"",
		"{",
		"{\"a\":1,}",
		"[1,]",
		"{\"a\" 1}",
		"{a:1}",
		"{\"a\":01}",
		"{\"a\":1.}",
		"{\"a\":.5}",
		"{\"a\":-}",
		"{\"a\":1e}",
		"{\"a\":tru}",
		"{\"a\":\"x\ny\"}",
		"{\"a\":\"\\x\"}",
		"{\"a\":\"\\ud800\"}",
		"{\"a\":\"\\udc00\"}",
		"{\"a\":\"\\ud800\\u0041\"}",
		"{\"a\":\"\xff\"}",
		"{\"a\":\"\xc0\xaf\"}",
		"{\"a\":\"\xed\xa0\x80\"}",
		"{\"a\":\"\xf4\x90\x80\x80\"}",
		"{\"a\":1,\"a\":2}",
		"{\"a\":1} x",
		"{\"a\":1}{}",
		"'a'",
		"{\"a\":NaN}",
		"{\"a\":[1 2]}",
	};
	lbc_jdoc_t d;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(parse(bad[i], &d), -1, "accepted: %s", bad[i]);
		lbc_json_free(&d);
	}
	/* nesting: 64 levels are fine, 65 are not */
	char deep[200];
	for (int depth = 64; depth <= 65; depth++) {
		size_t n = 0;
		for (int i = 0; i < depth; i++)
			deep[n++] = '[';
		for (int i = 0; i < depth; i++)
			deep[n++] = ']';
		deep[n] = '\0';
		cr_expect_eq(parse(deep, &d), depth == 64 ? 0 : -1, "depth %d", depth);
		lbc_json_free(&d);
	}
	cr_assert_eq(parse(" \t\r\n{\"a\":[]} \n", &d), 0);
	lbc_json_free(&d);
}

Test(json, survives_every_prefix)
{
	const char *line = "{\"event\":\"lost\",\"lease\":\"ab\\u00e9\",\"reason\":\"gone\",\"x\":[1,{\"y\":null}]}";
	size_t n = strlen(line);
	lbc_jdoc_t d;

	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(lbc_json_parse(&d, line, i, NULL, 0), -1, "prefix %zu accepted", i);
		lbc_json_free(&d);
	}
	cr_assert_eq(lbc_json_parse(&d, line, n, NULL, 0), 0);
	lbc_json_free(&d);
}

Test(json, writer_escapes)
{
	lbc_jw_t w;
	lbc_jdoc_t d;
	const char in[] = "q\"b\\n\nt\tc\x01\x1f\x7f" "\xc3\xa9";

	lbc_jw_init(&w);
	lbc_jw_raw(&w, "{", 1);
	lbc_jw_kstr(&w, "s", in);
	lbc_jw_kint(&w, "i", -42);
	lbc_jw_kbool(&w, "b", true);
	lbc_jw_raw(&w, "}", 1);
	cr_assert_not(w.bad);
	cr_assert_eq(memchr(w.buf, '\n', w.len), NULL, "a raw newline in a request line");
	cr_assert_eq(lbc_json_parse(&d, w.buf, w.len, NULL, 0), 0);
	cr_assert_str_eq(lbc_json_str(&d, 0, "s", NULL), in);
	int64_t v;
	cr_assert_eq(lbc_json_int(&d, 0, "i", &v), 0);
	cr_assert_eq(v, -42);
	cr_assert(lbc_json_true(&d, 0, "b"));
	lbc_json_free(&d);
	lbc_jw_free(&w);

	lbc_jw_init(&w);
	lbc_jw_str(&w, "\xff", 1);
	cr_assert(w.bad);
	lbc_jw_free(&w);
}

Test(url, parses)
{
	lbc_addr_t a;
	char msg[128];

	cr_assert_eq(lbc_url_parse("tcp://127.0.0.1:7380", &a, msg, sizeof(msg)), 0);
	cr_assert_not(a.is_unix);
	cr_assert_str_eq(a.host, "127.0.0.1");
	cr_assert_eq(a.port, 7380);
	cr_assert_eq(lbc_url_parse("tcp://[::1]:9", &a, msg, sizeof(msg)), 0);
	cr_assert_str_eq(a.host, "::1");
	cr_assert_eq(a.port, 9);
	cr_assert_eq(lbc_url_parse("unix:///run/lb.sock", &a, msg, sizeof(msg)), 0);
	cr_assert(a.is_unix);
	cr_assert_str_eq(a.path, "/run/lb.sock");
	/* schemes are case-insensitive */
	cr_assert_eq(lbc_url_parse("TCP://h:1", &a, msg, sizeof(msg)), 0);
	cr_assert_eq(lbc_url_parse("Unix:///s", &a, msg, sizeof(msg)), 0);
	cr_assert(a.is_unix);
	static const char *bad[] = {"", "http://x:1", "tcp://x", "tcp://x:0", "tcp://x:65536", "tcp://:1",
	                            "tcp://x:1a", "tcp://::1:5", "tcp://[::1]5", "unix://",
	                            "unix://rel/sock", NULL};
	for (int i = 0; bad[i]; i++)
		cr_expect_eq(lbc_url_parse(bad[i], &a, msg, sizeof(msg)), -1, "accepted %s", bad[i]);
	cr_assert_eq(lbc_url_parse(NULL, &a, msg, sizeof(msg)), -1);
}

Test(url, default_url_follows_the_environment)
{
	setenv("LOCKBROKER_URL", "tcp://10.1.2.3:99", 1);
	cr_assert_str_eq(lbc_default_url(), "tcp://10.1.2.3:99");
	unsetenv("LOCKBROKER_URL");
	cr_assert(strcmp(lbc_default_url(), "tcp://127.0.0.1:7380") == 0 ||
	          strcmp(lbc_default_url(), "unix:///run/lockbroker/lockbroker.sock") == 0);
}

Test(url, secret_files)
{
	char path[] = "/tmp/lbc-secret-XXXXXX", msg[128], *s;
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "s3cret\r\n", 8), 8);
	close(fd);
	cr_assert_eq(lbc_url_read_secret(path, &s, msg, sizeof(msg)), 0);
	cr_assert_str_eq(s, "s3cret");
	free(s);
	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_eq(write(fd, "a\0b", 3), 3);
	close(fd);
	cr_assert_eq(lbc_url_read_secret(path, &s, msg, sizeof(msg)), -1);
	unlink(path);
	cr_assert_eq(lbc_url_read_secret(path, &s, msg, sizeof(msg)), -1);
}

Test(status, one_status_per_wire_code)
{
	static const struct {
		const char *code;
		lbc_status st;
	} codes[] = {
		{"bad_json", LBC_BAD_JSON},
		{"bad_request", LBC_BAD_REQUEST},
		{"line_too_long", LBC_LINE_TOO_LONG},
		{"unknown_op", LBC_UNKNOWN_OP},
		{"invalid_argument", LBC_INVALID_ARGUMENT},
		{"unauthorized", LBC_UNAUTHORIZED},
		{"timeout", LBC_TIMEOUT},
		{"cancelled", LBC_CANCELLED},
		{"not_held", LBC_NOT_HELD},
		{"conflict", LBC_CONFLICT},
		{"upgrade_unsupported", LBC_UPGRADE_UNSUPPORTED},
		{"limit_exceeded", LBC_LIMIT_EXCEEDED},
		{"unavailable", LBC_UNAVAILABLE},
		{"shutting_down", LBC_SHUTTING_DOWN},
		{"internal", LBC_INTERNAL},
	};
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		cr_expect_eq(lbc_status_from_code(codes[i].code), codes[i].st, "%s", codes[i].code);
		cr_expect_str_eq(lbc_status_code(codes[i].st), codes[i].code);
		cr_expect(strlen(lbc_strerror(codes[i].st)) > 0);
	}
	/* every status has a distinct code */
	for (int a = 0; a < LBC_STATUS_COUNT; a++)
		for (int b = a + 1; b < LBC_STATUS_COUNT; b++)
			cr_expect_str_neq(lbc_status_code((lbc_status)a), lbc_status_code((lbc_status)b));
	cr_assert_eq(lbc_status_from_code("frobnicated"), LBC_UNKNOWN_CODE);
	cr_assert_eq(lbc_status_from_code("lost"), LBC_UNKNOWN_CODE, "the client's codes are not wire codes");
	cr_assert_eq(lbc_status_from_code(NULL), LBC_UNKNOWN_CODE);
	cr_assert_str_eq(lbc_status_code(LBC_LOST), "lost");
	cr_assert_str_eq(lbc_status_code(LBC_DISCONNECTED), "disconnected");
}

/* The table above is written by hand; this one is read from the contract:
 * every code of protocol/PROTOCOL.md's "Error codes" table has a status of
 * its own, and every status the client treats as a wire code is in it.
 * The statuses that are not wire codes are exactly the client's own. */
Test(status, every_code_of_protocol_md_and_back)
{
	static const lbc_status own[] = {LBC_OK, LBC_LOST, LBC_DISCONNECTED, LBC_IO, LBC_UNKNOWN_CODE};
	char codes[64][32], why[200] = "";
	int n = protocol_error_codes(codes, 64, why, sizeof(why));
	int wire = 0;

	cr_assert_geq(n, 10, "PROTOCOL.md's error codes: %s (%d codes)", why, n);
	for (int i = 0; i < n; i++) {
		lbc_status st = lbc_status_from_code(codes[i]);
		cr_expect_neq(st, LBC_UNKNOWN_CODE, "PROTOCOL.md's code %s has no lbc_status", codes[i]);
		cr_expect_str_eq(lbc_status_code(st), codes[i]);
		for (int j = 0; j < i; j++)
			cr_expect_str_neq(codes[i], codes[j], "PROTOCOL.md lists %s twice", codes[i]);
	}
	for (int s = 0; s < LBC_STATUS_COUNT; s++) {
		const char *code = lbc_status_code((lbc_status)s);
		bool in_doc = false, is_own = false;

		for (int i = 0; i < n; i++)
			in_doc = in_doc || strcmp(codes[i], code) == 0;
		for (size_t k = 0; k < sizeof(own) / sizeof(own[0]); k++)
			is_own = is_own || own[k] == (lbc_status)s;
		/* LBC_UNKNOWN_CODE is what lbc_status_from_code answers for a
		 * code it does not know: its own code does not make it a wire code */
		if (s != LBC_UNKNOWN_CODE && lbc_status_from_code(code) == (lbc_status)s) {
			wire++;
			cr_expect(in_doc, "status %d's code %s is not in PROTOCOL.md's table", s, code);
			cr_expect_not(is_own, "%s is the client's own, yet read as a wire code", code);
		} else {
			cr_expect(is_own, "status %d (%s) is neither a wire code nor one of the client's own", s, code);
			cr_expect_not(in_doc, "PROTOCOL.md's code %s is not read as a wire code", code);
		}
	}
	cr_assert_eq(wire, n, "%d wire statuses, %d codes in PROTOCOL.md", wire, n);
	cr_assert_eq(LBC_STATUS_COUNT, n + (int)(sizeof(own) / sizeof(own[0])));
}

Test(status, broker_error_answers)
{
	lbc_jdoc_t d;
	lbc_error_t err;

	cr_assert_eq(parse("{\"id\":1,\"ok\":false,\"error\":{\"code\":\"conflict\",\"message\":\"m1\"}}", &d), 0);
	cr_assert_eq(lbc_set_broker_error(&err, &d), LBC_CONFLICT);
	cr_assert_eq(err.status, LBC_CONFLICT);
	cr_assert_str_eq(err.code, "conflict");
	cr_assert_str_eq(err.message, "m1");
	cr_assert(err.from_broker);
	lbc_json_free(&d);
	cr_assert_eq(parse("{\"id\":1,\"ok\":false,\"error\":{\"code\":\"new_code\",\"message\":\"m2\"}}", &d), 0);
	cr_assert_eq(lbc_set_broker_error(&err, &d), LBC_UNKNOWN_CODE);
	cr_assert_str_eq(err.code, "new_code", "an unknown code is kept as sent");
	lbc_json_free(&d);
	cr_assert_eq(lbc_set_broker_error(NULL, &d), LBC_IO); /* freed doc: no error member */
}

Test(status, lost_reasons)
{
	static const char *names[] = {"expired", "gone", "redis_unavailable", "max_hold"};
	for (int i = 0; i < 4; i++)
		cr_expect_str_eq(lbc_lost_reason_name(lbc_lost_reason_from(names[i])), names[i]);
	cr_assert_eq(lbc_lost_reason_from("eaten"), LBC_LOST_OTHER);
	cr_assert_str_eq(lbc_lost_reason_name(LBC_LOST_DISCONNECTED), "disconnected");
	cr_assert_str_eq(lbc_lost_reason_name(LBC_LOST_CLOSED), "closed");
}

Test(args, refused_without_a_client)
{
	lbc_error_t err;
	lbc_lease_t *l = (lbc_lease_t *)1;
	lbc_lock_info_t *info;
	int64_t n;

	cr_assert_eq(lbc_acquire(NULL, "x", NULL, &l, &err), LBC_INVALID_ARGUMENT);
	cr_assert_null(l, "out is cleared");
	cr_assert_not(err.from_broker);
	cr_assert_eq(lbc_acquire(NULL, "x", NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_release(NULL, NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_extend(NULL, NULL, 100, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_release_token(NULL, "t", &n, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_extend_token(NULL, "t", 1, &n, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_inspect(NULL, "x", &info, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_ping(NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_request(NULL, "ping", NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_poll(NULL, 0, &err), -1);
	cr_assert_eq(lbc_fd(NULL), -1);
	cr_assert_eq(lbc_close(NULL), 0);
	lbc_lease_free(NULL);
	cr_assert_eq(lbc_lease_check(NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_not(lbc_lease_lost(NULL));
	/* errors may be NULL everywhere */
	cr_assert_eq(lbc_acquire(NULL, "x", NULL, NULL, NULL), LBC_INVALID_ARGUMENT);
	cr_assert_null(lbc_connect("bogus://", NULL, NULL));
}

Test(args, bad_connect_options)
{
	lbc_error_t err;
	lbc_options_t o = {.keepalive_ms = 100};

	cr_assert_null(lbc_connect("tcp://127.0.0.1:1", &o, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
	o = (lbc_options_t){.auth = "a", .auth_file = "/nonexistent"};
	cr_assert_null(lbc_connect("tcp://127.0.0.1:1", &o, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
	char label[200];
	memset(label, 'l', sizeof(label) - 1);
	label[sizeof(label) - 1] = '\0';
	o = (lbc_options_t){.client_label = label};
	cr_assert_null(lbc_connect("tcp://127.0.0.1:1", &o, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
	cr_assert_null(lbc_connect("tcp://nohost", NULL, &err));
	cr_assert_eq(err.status, LBC_INVALID_ARGUMENT);
	cr_assert_not(err.from_broker);
}

Test(args, cancel_tokens)
{
	lbc_cancel_t *t = lbc_cancel_new();

	cr_assert_not_null(t);
	cr_assert_not(lbc_cancel_fired(t));
	lbc_cancel_fire(t);
	lbc_cancel_fire(t);
	cr_assert(lbc_cancel_fired(t));
	lbc_cancel_free(t);
	lbc_cancel_free(NULL);
	cr_assert_not(lbc_cancel_fired(NULL));
}
