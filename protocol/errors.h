/*
 * errors.h - the error codes of the wire protocol (PROTOCOL.md "Error codes").
 *
 * One X-macro yields the enum, the wire string and the default message, so a
 * code cannot exist in one place and be missing in another (libuv's
 * UV_ERRNO_MAP does the same). LB_OK is 0; every error is non-zero.
 */
#ifndef LB_PROTOCOL_ERRORS_H
#define LB_PROTOCOL_ERRORS_H

#define LB_ERR_MAP(X)                                                          \
	X(BAD_JSON, "bad_json", "the line is not valid JSON")                      \
	X(BAD_REQUEST, "bad_request", "the request is not a JSON object with a string op") \
	X(LINE_TOO_LONG, "line_too_long", "the line is longer than max_line")       \
	X(UNKNOWN_OP, "unknown_op", "unknown op")                                  \
	X(INVALID_ARGUMENT, "invalid_argument", "invalid argument")                \
	X(UNAUTHORIZED, "unauthorized", "authentication required")                 \
	X(TIMEOUT, "timeout", "the lock could not be granted within wait_ms")      \
	X(CANCELLED, "cancelled", "the acquire was cancelled")                     \
	X(NOT_HELD, "not_held", "the lease is unknown, released, expired or lost") \
	X(CONFLICT, "conflict", "the name has holders or waiters of another kind") \
	X(UPGRADE_UNSUPPORTED, "upgrade_unsupported", "a shared holder cannot re-acquire exclusive") \
	X(LIMIT_EXCEEDED, "limit_exceeded", "a limit was hit")                     \
	X(UNAVAILABLE, "unavailable", "Redis is unavailable")                      \
	X(SHUTTING_DOWN, "shutting_down", "the broker is shutting down")           \
	X(INTERNAL, "internal", "internal error")

typedef enum lb_err {
	LB_OK = 0,
#define LB_ERR_ENUM(name, code, msg) LB_E_##name,
	LB_ERR_MAP(LB_ERR_ENUM)
#undef LB_ERR_ENUM
	LB_E__COUNT
} lb_err_t;

/* The wire string of an error code ("bad_json"); "internal" for unknown. */
const char *lb_err_code(lb_err_t err);
/* The default human message of an error code. */
const char *lb_err_message(lb_err_t err);

#endif
