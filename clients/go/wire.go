package lockbroker

// wire.go - the JSON shapes of requests and answers, the broker URL, and
// line reading. Requests are marshalled without their id; the session puts
// the id in front when it sends them (frame).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
)

// Default addresses of the broker, as lockctl has them.
const (
	DefaultUnixSocket = "/run/lockbroker/lockbroker.sock"
	DefaultTCPURL     = "tcp://127.0.0.1:7380"
)

// maxAnswer bounds one line from the broker (a leases answer of 10000
// leases is about 1.3 MB).
const maxAnswer = 64 << 20

// DefaultURL is the broker lockctl would use: $LOCKBROKER_URL if set, else
// the default Unix socket if it exists, else tcp://127.0.0.1:7380.
func DefaultURL() string {
	if u := os.Getenv("LOCKBROKER_URL"); u != "" {
		return u
	}
	if _, err := os.Stat(DefaultUnixSocket); err == nil {
		return "unix://" + DefaultUnixSocket
	}
	return DefaultTCPURL
}

// parseURL turns tcp://HOST:PORT or unix:///PATH into net.Dial's network
// and address.
func parseURL(u string) (network, addr string, err error) {
	switch {
	case hasScheme(u, "tcp://"):
		addr = u[len("tcp://"):]
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return "", "", invalidArg("broker URL %q: want tcp://HOST:PORT", u)
		}
		return "tcp", addr, nil
	case hasScheme(u, "unix://"):
		addr = u[len("unix://"):]
		if addr == "" {
			return "", "", invalidArg("broker URL %q: want unix:///PATH", u)
		}
		return "unix", addr, nil
	}
	return "", "", invalidArg("broker URL %q: want tcp://HOST:PORT or unix:///PATH", u)
}

func hasScheme(u, scheme string) bool {
	return len(u) >= len(scheme) && strings.EqualFold(u[:len(scheme)], scheme)
}

// ---- requests -------------------------------------------------------------

type helloReq struct {
	Op          string  `json:"op"`
	Client      string  `json:"client,omitempty"`
	Auth        *string `json:"auth,omitempty"`
	KeepaliveMs int64   `json:"keepalive_ms,omitempty"`
}

type acquireReq struct {
	Op        string  `json:"op"`
	Lock      string  `json:"lock"`
	Mode      string  `json:"mode,omitempty"`
	Limit     *int    `json:"limit,omitempty"`
	TTLMs     *int64  `json:"ttl_ms,omitempty"`
	WaitMs    *int64  `json:"wait_ms,omitempty"`
	Watchdog  *bool   `json:"watchdog,omitempty"`
	Owner     string  `json:"owner"`
	Fair      *bool   `json:"fair,omitempty"`
	Detach    bool    `json:"detach,omitempty"`
	MaxHoldMs *int64  `json:"max_hold_ms,omitempty"`
	Value     *string `json:"value,omitempty"`
	LockDelay *int64  `json:"lock_delay_ms,omitempty"`
}

type proclaimReq struct {
	Op    string `json:"op"`
	Lease string `json:"lease"`
	Value string `json:"value"`
}

type unwatchReq struct {
	Op    string `json:"op"`
	Watch string `json:"watch"`
}

type leaseReq struct {
	Op    string `json:"op"`
	Lease string `json:"lease"`
	TTLMs *int64 `json:"ttl_ms,omitempty"`
}

type lockReq struct {
	Op   string `json:"op"`
	Lock string `json:"lock"`
}

type cancelReq struct {
	Op     string `json:"op"`
	Target int64  `json:"target"`
}

type opReq struct {
	Op string `json:"op"`
}

// frame puts "id":id in front of body (a marshalled object) and ends the
// line.
func frame(id int64, body []byte) []byte {
	line := make([]byte, 0, len(body)+24)
	line = append(line, `{"id":`...)
	line = strconv.AppendInt(line, id, 10)
	if len(body) > 2 {
		line = append(line, ',')
	}
	line = append(line, body[1:]...)
	return append(line, '\n')
}

// ---- answers --------------------------------------------------------------

// wireError is the error object of a failed answer.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// reply holds what the reader needs from any line: the id, the outcome,
// the fields of acquire, release and extend answers, and those of events.
// Other answers are decoded from the raw line by their caller.
type reply struct {
	ID     json.RawMessage `json:"id"`
	OK     bool            `json:"ok"`
	Error  *wireError      `json:"error"`
	Event  string          `json:"event"`
	Lease  string          `json:"lease"`
	Lock   string          `json:"lock"`
	Mode   string          `json:"mode"`
	Reason string          `json:"reason"`
	Fence  int64           `json:"fence"`
	TTLMs  int64           `json:"ttl_ms"`
	Count  int             `json:"count"`
	Watch  string          `json:"watch"`
}

// decodeReply decodes a line from the broker. A field of an unexpected
// type (a newer broker's) is left zero rather than failing the line.
func decodeReply(line []byte, r *reply) error {
	err := json.Unmarshal(line, r)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return nil
	}
	return err
}

// replyID returns the integer id of an answer; false for null or an id
// this client never sends.
func replyID(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || raw[0] == 'n' {
		return 0, false
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	return id, err == nil
}

func serverError(op, lock string, e *wireError) error {
	if e == nil {
		e = &wireError{Code: CodeInternal, Message: "failed answer without an error object"}
	}
	return &ServerError{Op: op, Lock: lock, Code: e.Code, Message: e.Message}
}

// readLine returns the next non-blank line without its "\n" or "\r\n". The
// slice is valid until the next call.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			buf := append((*long)[:0], line...)
			for err == bufio.ErrBufferFull {
				if len(buf) > maxAnswer {
					return nil, errors.New("a line from the broker is longer than 64 MiB")
				}
				line, err = br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			*long = buf
			line = buf
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimLeft(line, " \t")) == 0 {
			continue
		}
		return line, nil
	}
}
