package lockbroker

// errors.go - the protocol's error codes as Go error values, the error type
// of a broker's answer (*ServerError), and the client's own errors: a lost
// lease (*LostError), a lost connection (ErrDisconnected), a closed client.

import (
	"errors"
	"fmt"
)

// The protocol's error codes (PROTOCOL.md, "Error codes").
const (
	CodeBadJSON            = "bad_json"
	CodeBadRequest         = "bad_request"
	CodeLineTooLong        = "line_too_long"
	CodeUnknownOp          = "unknown_op"
	CodeInvalidArgument    = "invalid_argument"
	CodeUnauthorized       = "unauthorized"
	CodeTimeout            = "timeout"
	CodeCancelled          = "cancelled"
	CodeNotHeld            = "not_held"
	CodeConflict           = "conflict"
	CodeUpgradeUnsupported = "upgrade_unsupported"
	CodeLimitExceeded      = "limit_exceeded"
	CodeUnavailable        = "unavailable"
	CodeShuttingDown       = "shutting_down"
	CodeInternal           = "internal"
)

// codeError is the sentinel of one error code; a *ServerError of that code
// matches it with errors.Is.
type codeError struct {
	code string
	text string
}

func (e *codeError) Error() string { return "lockbroker: " + e.code + ": " + e.text }

// One sentinel per protocol error code. errors.Is(err, ErrTimeout) holds for
// a *ServerError whose Code is "timeout", and for the client's own errors of
// the same meaning (ErrLineTooLong for a request it refused to send,
// ErrInvalidArgument for a name that is not valid UTF-8, ErrCancelled for an
// acquire given up because its context ended).
var (
	ErrBadJSON            error = &codeError{CodeBadJSON, "the line is not valid JSON"}
	ErrBadRequest         error = &codeError{CodeBadRequest, "not an object, or op missing"}
	ErrLineTooLong        error = &codeError{CodeLineTooLong, "the line is longer than max_line"}
	ErrUnknownOp          error = &codeError{CodeUnknownOp, "op is not an op of the protocol"}
	ErrInvalidArgument    error = &codeError{CodeInvalidArgument, "a field is missing, of the wrong type, out of range, or unknown"}
	ErrUnauthorized       error = &codeError{CodeUnauthorized, "the session has not passed hello with a valid secret"}
	ErrTimeout            error = &codeError{CodeTimeout, "the lock could not be granted within the wait"}
	ErrCancelled          error = &codeError{CodeCancelled, "the acquire was cancelled"}
	ErrNotHeld            error = &codeError{CodeNotHeld, "the lease is unknown, released, expired or lost"}
	ErrConflict           error = &codeError{CodeConflict, "the name has holders or waiters of another kind"}
	ErrUpgradeUnsupported error = &codeError{CodeUpgradeUnsupported, "a shared holder asked the same lock exclusive"}
	ErrLimitExceeded      error = &codeError{CodeLimitExceeded, "a per-session or per-broker limit was hit"}
	ErrUnavailable        error = &codeError{CodeUnavailable, "Redis cannot be reached; the request had no effect"}
	ErrShuttingDown       error = &codeError{CodeShuttingDown, "the broker is stopping"}
	ErrInternal           error = &codeError{CodeInternal, "a bug in the broker"}
)

// The client's own errors.
var (
	// ErrLost matches every *LostError.
	ErrLost = errors.New("lockbroker: the lease was lost")
	// ErrReleased is a lease's Err after its last Release, and what
	// Release and Extend return for it then.
	ErrReleased = errors.New("lockbroker: the lease was released")
	// ErrDisconnected matches a failure to reach the broker and the end
	// of a connection while a request was pending on it.
	ErrDisconnected = errors.New("lockbroker: not connected to the broker")
	// ErrClosed is returned by every call on a closed Client.
	ErrClosed = errors.New("lockbroker: the client is closed")
)

// ServerError is an error answered by the broker.
type ServerError struct {
	Op      string // the request's op
	Lock    string // the lock's name, for ops that name one
	Code    string // the protocol's error code, e.g. "timeout"
	Message string // the broker's message
}

func (e *ServerError) Error() string {
	if e.Lock != "" {
		return fmt.Sprintf("lockbroker: %s %q: %s: %s", e.Op, e.Lock, e.Code, e.Message)
	}
	return fmt.Sprintf("lockbroker: %s: %s: %s", e.Op, e.Code, e.Message)
}

// Is reports whether target is the sentinel of e's code (ErrTimeout for
// "timeout", ...).
func (e *ServerError) Is(target error) bool {
	ce, ok := target.(*codeError)
	return ok && ce.code == e.Code
}

// Reasons a lease is lost: the broker's (the "lost" event) and the client's.
const (
	ReasonExpired          = "expired"           // its TTL ran out without renewal
	ReasonGone             = "gone"              // Redis no longer holds it
	ReasonRedisUnavailable = "redis_unavailable" // renewals failed for longer than its TTL
	ReasonMaxHold          = "max_hold"          // its MaxHold ran out; the broker released it
	ReasonDisconnected     = "disconnected"      // its session's connection ended
	ReasonClosed           = "closed"            // its Client was closed while it was held
	ReasonNotHeld          = "not_held"          // a Release or Extend was answered not_held
)

// LostError says that a lease is lost and why. errors.Is(err, ErrLost) holds
// for it; with Reason "not_held", errors.Is(err, ErrNotHeld) holds too.
type LostError struct {
	Lock   string // the lock's name
	Reason string // one of the Reason constants, or a newer broker's reason
	Cause  error  // the broker's answer for ReasonNotHeld, else nil
}

func (e *LostError) Error() string {
	return fmt.Sprintf("lockbroker: lease of %q lost: %s", e.Lock, e.Reason)
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the broker's answer that revealed the loss, if any.
func (e *LostError) Unwrap() error { return e.Cause }

// connError is the end of a connection, or the failure to make one.
type connError struct {
	url   string
	cause error
}

func (e *connError) Error() string {
	return fmt.Sprintf("lockbroker: %s: %v", e.url, e.cause)
}

func (e *connError) Is(target error) bool { return target == ErrDisconnected }
func (e *connError) Unwrap() error        { return e.cause }

// cancelError is an acquire given up because its context ended: it matches
// ErrCancelled and unwraps to the context's error.
type cancelError struct {
	lock  string
	cause error
}

func (e *cancelError) Error() string {
	return fmt.Sprintf("lockbroker: acquire %q: cancelled: %v", e.lock, e.cause)
}

func (e *cancelError) Is(target error) bool { return target == ErrCancelled }
func (e *cancelError) Unwrap() error        { return e.cause }

// localError is a request the client refused to send; it matches the
// sentinel of the code the broker would have answered.
type localError struct {
	msg  string
	code error
}

func (e *localError) Error() string { return "lockbroker: " + e.msg }
func (e *localError) Unwrap() error { return e.code }

func invalidArg(format string, args ...any) error {
	return &localError{msg: fmt.Sprintf(format, args...), code: ErrInvalidArgument}
}
