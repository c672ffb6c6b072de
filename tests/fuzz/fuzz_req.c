/*
 * fuzz_req.c - libFuzzer target for the request decoder: protocol/reqjson.c
 * against jansson, then protocol/req.c on the same line.
 *
 * Input: one request line (without its newline). Checked:
 * - reqjson and jansson agree on it (accept or refuse, and the values),
 *   but for the deliberate differences tests/fuzz/reqjson_oracle.h lists;
 *   a refusal has a text and an offset within the line;
 * - req_parse fails with bad_json exactly when reqjson refuses the line,
 *   and otherwise with bad_request, invalid_argument or unknown_op only;
 * - every message is short printable ASCII (no byte of the line leaks
 *   unmasked: a control byte or a UTF-8 byte would show here);
 * - an echoed id is a valid id, and is the line's own "id" member; and
 *   whenever the line is an object whose id is valid, the id is echoed,
 *   whichever check failed;
 * - req_unpack on a parsed line never crashes, fails only with
 *   invalid_argument, and on success every field is within its range.
 * Any failed check aborts (libFuzzer reports it as a crash).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/req.h"
#include "protocol/reqjson.h"
#include "tests/fuzz/reqjson_oracle.h"

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_req: check failed: %s (%s:%d)\n", \
				#cond, __FILE__, __LINE__);                    \
			abort();                                               \
		}                                                              \
	} while (0)

static void check_message(const req_error_t *err)
{
	size_t n = strnlen(err->message, sizeof(err->message));

	CHECK(n > 0 && n < sizeof(err->message));
	for (size_t i = 0; i < n; i++)
		CHECK(err->message[i] >= 0x20 && err->message[i] < 0x7f);
}

static bool has_ctrl(lb_str_t s)
{
	for (size_t i = 0; i < s.len; i++)
		if ((unsigned char)s.ptr[i] < 0x20 || s.ptr[i] == 0x7f)
			return true;
	return false;
}

static void check_unpacked(const req_t *req)
{
	switch (req->op) {
	case OP_HELLO: {
		const req_hello_t *h = &req->u.hello;

		CHECK(h->client.ptr == NULL || h->client.len <= REQ_LABEL_MAX_BYTES);
		CHECK(h->auth.ptr == NULL || h->auth.len <= REQ_AUTH_MAX_BYTES);
		CHECK(h->keepalive_ms == 0 || (h->keepalive_ms >= REQ_KEEPALIVE_MIN_MS &&
					       h->keepalive_ms <= REQ_KEEPALIVE_MAX_MS));
		break;
	}
	case OP_ACQUIRE: {
		const req_acquire_t *a = &req->u.acquire;

		CHECK(a->lock.ptr != NULL && a->lock.len >= 1 &&
		      a->lock.len <= REQ_LOCK_MAX_BYTES && !has_ctrl(a->lock));
		CHECK((a->mode == LB_MODE_PERMIT) == (a->limit > 0));
		CHECK(a->limit >= 0 && a->limit <= REQ_LIMIT_MAX);
		CHECK(a->ttl_ms == 0 || (a->ttl_ms >= REQ_TTL_MIN_MS && a->ttl_ms <= REQ_TTL_MAX_MS));
		CHECK(a->wait_ms >= -1 && a->wait_ms <= REQ_ID_MAX_INT);
		CHECK(a->owner.ptr != NULL && a->owner.len <= REQ_LABEL_MAX_BYTES);
		CHECK(!(a->watchdog && a->detach));
		CHECK(a->max_hold_ms == 0 ||
		      (a->max_hold_ms >= REQ_TTL_MIN_MS && a->max_hold_ms <= REQ_TTL_MAX_MS));
		break;
	}
	case OP_RELEASE:
		CHECK(req->u.release.lease.ptr != NULL && req->u.release.lease.len >= 1 &&
		      req->u.release.lease.len <= REQ_LEASE_MAX_BYTES);
		break;
	case OP_EXTEND:
		CHECK(req->u.extend.lease.ptr != NULL && req->u.extend.lease.len >= 1 &&
		      req->u.extend.lease.len <= REQ_LEASE_MAX_BYTES);
		CHECK(req->u.extend.ttl_ms >= REQ_TTL_MIN_MS && req->u.extend.ttl_ms <= REQ_TTL_MAX_MS);
		break;
	case OP_CANCEL:
		CHECK(req_id_valid(req->u.cancel.target));
		break;
	case OP_INSPECT:
		CHECK(req->u.inspect.lock.ptr != NULL && req->u.inspect.lock.len >= 1 &&
		      req->u.inspect.lock.len <= REQ_LOCK_MAX_BYTES && !has_ctrl(req->u.inspect.lock));
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *line = (const char *)data, *wrong;
	reqjson_error_t jerr;
	reqjson_verdict_t verdict;
	req_error_t err;
	json_t *doc, *id;
	bool loaded;
	req_t req;
	int rc;

	doc = reqjson_load(line, size, &jerr);
	wrong = reqjson_oracle_check(line, size, doc, &verdict);
	if (wrong != NULL) {
		fprintf(stderr, "fuzz_req: %s\n", wrong);
		abort();
	}
	loaded = doc != NULL;
	if (!loaded)
		CHECK(jerr.what != NULL && jerr.offset <= size);
	json_decref(doc);

	memset(&err, 0, sizeof(err));
	rc = req_parse(line, size, &req, &err);
	if (rc != 0) {
		CHECK(rc == -1);
		CHECK((err.code == LB_E_BAD_JSON) == !loaded);
		CHECK(err.code == LB_E_BAD_JSON || err.code == LB_E_BAD_REQUEST ||
		      err.code == LB_E_INVALID_ARGUMENT || err.code == LB_E_UNKNOWN_OP);
		check_message(&err);
	} else {
		CHECK(loaded);
		CHECK((int)req.op >= 0 && req.op < OP__COUNT);
	}
	if (req.id != NULL) {
		CHECK(req_id_valid(req.id));
		CHECK(req.id == json_object_get(req.root, "id"));
	}
	if (json_is_object(req.root)) {
		id = json_object_get(req.root, "id");
		CHECK((req.id != NULL) == (id != NULL && req_id_valid(id)));
	}
	if (rc == 0) {
		memset(&err, 0, sizeof(err));
		if (req_unpack(&req, &err) == 0) {
			check_unpacked(&req);
		} else {
			CHECK(err.code == LB_E_INVALID_ARGUMENT);
			check_message(&err);
		}
	}
	req_clear(&req);
	CHECK(req.root == NULL && req.id == NULL);
	return 0;
}
