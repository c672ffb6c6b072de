package lockbroker

// session.go - one connection to the broker, i.e. one broker session.
//
// connect makes the connection and passes hello before anything else is
// sent. Then one reader goroutine (readLoop) owns the read side: it routes
// each answer to the call waiting under its id and each event to the lease
// it names, and when the connection ends it tears the session down. Any
// goroutine may send: send registers the call under a fresh id and appends
// its line to the write buffer; whoever finds no write under way writes the
// buffer out, so concurrent requests leave in few writes (write combining,
// no writer goroutine).
//
// A third goroutine, the monitor (liveness.go), pings the broker and drops
// the connection when the broker stays silent too long; it runs while the
// session lives if the liveness check or keepalive is on.
//
// Invariants: a call is in pending from its registration until the reader
// answers it or teardown fails it, and its done channel is closed exactly
// once, by the reader goroutine. teardown runs once, on the reader
// goroutine; it marks the session dead first, so send fails at once from
// then on, then ends the session's leases, then fails the pending calls.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// SessionInfo is what the broker said in answer to hello.
type SessionInfo struct {
	Server  string           `json:"server"`  // "lockbroker/X.Y.Z"
	Proto   int              `json:"proto"`   // protocol version, 1
	Session string           `json:"session"` // the session's id
	Broker  string           `json:"broker"`  // the broker's id
	Limits  map[string]int64 `json:"limits"`  // max_line, ttl_ms_min, ...
}

// call is one request waiting for its answer.
type call struct {
	id   int64
	op   string
	lock string

	// Set for acquire (and acquire_all): what the grant needs to make its
	// Lease.
	ctx      context.Context
	detached bool
	owner    string
	// Set for release and extend: the lease concerned.
	lease *Lease

	wantRaw bool
	// Set for acquire_all: the leases of its answer, in the order asked.
	leases []*Lease
	// Set for watch: where the reader sends the watch's `changed` lines,
	// from its answer on (closed when the session ends).
	watchCh chan []byte
	done    chan struct{} // closed by the reader once the fields below are set
	r       reply
	raw     []byte
	err     error

	// Guarded by session.mu: the reader finished the call; its caller
	// gave up waiting (a grant that arrives then is released).
	finished  bool
	abandoned bool
}

type session struct {
	c       *Client
	conn    net.Conn
	br      *bufio.Reader
	info    SessionInfo
	maxLine int

	wmu      sync.Mutex
	wbuf     []byte
	spare    []byte
	flushing bool

	// For the monitor (liveness.go): when bytes last came from the broker
	// and were last written to it, as durations since t0 (monotonic).
	t0        time.Time
	lastRecv  atomic.Int64
	lastWrite atomic.Int64
	kick      chan struct{} // the bound may have shrunk (capacity 1)

	mu      sync.Mutex
	pending map[int64]*call
	watches map[string]chan []byte // watch id -> its Watch's lines (reader only sends)
	lastID  int64
	dead    bool
	err     error  // why the session ended, once dead
	cause   error  // why the client dropped the connection, if it did
	closing string // reason of the broker's "closing" event
	done    chan struct{}
	// The leases bound to the session that the liveness check protects,
	// with the TTL each was last given (0: unknown), and how many have each
	// TTL: the bound follows the shortest.
	held     map[*Lease]time.Duration
	ttlCount map[time.Duration]int
	curBound time.Duration // the bound the monitor last computed (0: none)
}

// connect dials the broker and passes hello. The session is not started.
func (c *Client) connect() (*session, error) {
	network, addr, err := parseURL(c.url)
	if err != nil {
		return nil, err
	}
	o := &c.opts
	hello := helloReq{Op: "hello", Client: o.client}
	if o.keepalive > 0 {
		hello.KeepaliveMs = millis(o.keepalive)
	}
	if o.authFile != "" {
		b, err := os.ReadFile(o.authFile)
		if err != nil {
			return nil, fmt.Errorf("lockbroker: auth file: %w", err)
		}
		secret := string(b)
		if strings.HasSuffix(secret, "\r\n") {
			secret = secret[:len(secret)-2]
		} else if strings.HasSuffix(secret, "\n") {
			secret = secret[:len(secret)-1]
		}
		hello.Auth = &secret
	} else if o.hasAuth {
		hello.Auth = &o.auth
	}
	if hello.Auth != nil && !utf8.ValidString(*hello.Auth) {
		return nil, invalidArg("the auth secret is not valid UTF-8 (JSON cannot carry it)")
	}
	body, err := json.Marshal(hello)
	if err != nil {
		return nil, err
	}

	deadline := time.Now().Add(o.dialTimeout)
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial(network, addr)
	if err != nil {
		return nil, &connError{url: c.url, cause: err}
	}
	s := &session{
		c:        c,
		conn:     conn,
		maxLine:  65536,
		t0:       time.Now(),
		kick:     make(chan struct{}, 1),
		pending:  make(map[int64]*call),
		done:     make(chan struct{}),
		held:     make(map[*Lease]time.Duration),
		ttlCount: make(map[time.Duration]int),
	}
	s.br = bufio.NewReaderSize(stampReader{s}, 64<<10)
	if err := s.hello(body, hello.Auth != nil, deadline); err != nil {
		conn.Close()
		return nil, err
	}
	if v := s.info.Limits["max_line"]; v > 0 {
		s.maxLine = int(v)
	}
	return s, nil
}

// hello sends hello (id 0) and reads until its answer, before the reader
// goroutine exists. Without a secret (withSecret false), an unauthorized
// answer still opens the session, as lockctl and the other clients do:
// ping works, and every other op answers ErrUnauthorized by itself.
func (s *session) hello(body []byte, withSecret bool, deadline time.Time) error {
	if err := s.conn.SetDeadline(deadline); err != nil {
		return &connError{url: s.c.url, cause: err}
	}
	if _, err := s.conn.Write(frame(0, body)); err != nil {
		return &connError{url: s.c.url, cause: err}
	}
	var long []byte
	for {
		line, err := readLine(s.br, &long)
		if err != nil {
			if s.closing != "" {
				err = fmt.Errorf("the broker closed the connection (%s)", s.closing)
			}
			return &connError{url: s.c.url, cause: fmt.Errorf("hello: %w", err)}
		}
		var r reply
		if err := decodeReply(line, &r); err != nil {
			return &connError{url: s.c.url, cause: fmt.Errorf("hello: bad answer: %w", err)}
		}
		if r.Event == "closing" {
			s.closing = r.Reason
		}
		if id, ok := replyID(r.ID); r.Event != "" || !ok || id != 0 {
			continue
		}
		if !r.OK && !withSecret && r.Error != nil && r.Error.Code == CodeUnauthorized {
			return s.conn.SetDeadline(time.Time{}) // no SessionInfo: hello was refused
		}
		if !r.OK {
			return serverError("hello", "", r.Error)
		}
		if err := json.Unmarshal(line, &s.info); err != nil {
			return &connError{url: s.c.url, cause: fmt.Errorf("hello: bad answer: %w", err)}
		}
		return s.conn.SetDeadline(time.Time{})
	}
}

// start launches the reader, and the monitor when the liveness check or
// keepalive is on.
func (s *session) start() {
	go s.readLoop()
	if s.c.opts.liveness || s.c.opts.keepalive > 0 {
		go s.monitor()
	}
}

func (s *session) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// fail drops the connection for a reason of the client's; the reader then
// tears the session down.
func (s *session) fail(cause error) {
	s.mu.Lock()
	if s.cause == nil {
		s.cause = cause
	}
	s.mu.Unlock()
	s.conn.Close()
}

// send registers cl and sends op's body (a marshalled object without id).
// On error cl was never registered.
func (s *session) send(cl *call, body []byte) error {
	s.mu.Lock()
	if s.dead {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.lastID++
	cl.id = s.lastID
	cl.done = make(chan struct{})
	line := frame(cl.id, body)
	if len(line)-1 > s.maxLine {
		s.mu.Unlock()
		return &localError{
			msg:  fmt.Sprintf("%s: the request is %d bytes, over the broker's max_line (%d)", cl.op, len(line)-1, s.maxLine),
			code: ErrLineTooLong,
		}
	}
	s.pending[cl.id] = cl
	s.mu.Unlock()
	s.write(line)
	return nil
}

// write appends line to the write buffer and, unless another goroutine is
// writing, writes the buffer out until it is empty. A write error drops the
// connection; the calls it carried are failed by teardown.
func (s *session) write(line []byte) {
	s.wmu.Lock()
	s.wbuf = append(s.wbuf, line...)
	if s.flushing {
		s.wmu.Unlock()
		return
	}
	s.flushing = true
	for len(s.wbuf) > 0 {
		buf := s.wbuf
		s.wbuf = s.spare[:0]
		s.wmu.Unlock()
		_, err := s.conn.Write(buf)
		if err == nil {
			s.lastWrite.Store(int64(s.since()))
		}
		s.wmu.Lock()
		s.spare = buf[:0]
		if err != nil {
			s.wbuf = s.wbuf[:0]
			s.wmu.Unlock()
			s.fail(fmt.Errorf("write: %w", err))
			s.wmu.Lock()
			break
		}
	}
	s.flushing = false
	s.wmu.Unlock()
}

// roundTrip sends a request and waits for its answer or for ctx. A failed
// answer is a *ServerError; a request whose connection ended fails with
// ErrDisconnected. The answer of a request given up by ctx is discarded.
func (s *session) roundTrip(ctx context.Context, cl *call, body []byte) error {
	if err := s.send(cl, body); err != nil {
		return err
	}
	select {
	case <-cl.done:
		return cl.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readLoop is the session's reader goroutine.
func (s *session) readLoop() {
	var long []byte
	for {
		line, err := readLine(s.br, &long)
		if err == nil {
			err = s.handle(line)
		}
		if err != nil {
			s.teardown(err)
			return
		}
	}
}

// handle routes one line: an event to its lease, an answer to its call.
func (s *session) handle(line []byte) error {
	var r reply
	if err := decodeReply(line, &r); err != nil {
		return fmt.Errorf("bad line from the broker: %w", err)
	}
	if r.Event != "" {
		s.event(&r, line)
		return nil
	}
	id, ok := replyID(r.ID)
	if !ok {
		// An answer to no request of ours (bad_json and the like, which
		// this client does not provoke): nothing waits for it.
		return nil
	}
	s.mu.Lock()
	cl := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if cl == nil {
		return nil
	}
	cl.r = r
	if cl.wantRaw {
		cl.raw = append([]byte(nil), line...)
	}
	var granted *Lease
	if !r.OK {
		cl.err = serverError(cl.op, cl.lock, r.Error)
	} else {
		switch cl.op {
		case "acquire":
			granted = s.c.grant(s, cl, &r)
			cl.lease = granted
		case "release":
			if cl.lease != nil {
				cl.lease.setCount(r.Count)
			}
		case "acquire_all":
			// each lease made before the next line is read, as for acquire
			var all struct {
				Leases []reply `json:"leases"`
			}
			if err := json.Unmarshal(line, &all); err != nil {
				cl.err = fmt.Errorf("lockbroker: acquire_all: bad answer: %w", err)
			}
			for k := range all.Leases {
				cl.leases = append(cl.leases, s.c.grant(s, cl, &all.Leases[k]))
			}
		case "watch":
			// registered before the next line is read: no event slips by
			s.mu.Lock()
			if s.watches == nil {
				s.watches = make(map[string]chan []byte)
			}
			s.watches[r.Watch] = cl.watchCh
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	cl.finished = true
	abandoned := cl.abandoned
	s.mu.Unlock()
	close(cl.done)
	if abandoned && granted != nil {
		// Its Lock call gave up: give back the level this grant added.
		go granted.releaseQuietly()
	}
	return nil
}

// event applies an event from the broker. Unknown events are ignored.
func (s *session) event(r *reply, line []byte) {
	switch r.Event {
	case "changed":
		s.mu.Lock()
		ch := s.watches[r.Watch]
		s.mu.Unlock()
		if ch != nil {
			offerLatest(ch, append([]byte(nil), line...))
		}
	case "lost":
		if l := s.c.unlink(s, r.Lease); l != nil {
			l.lose(r.Reason, nil)
		}
	case "closing":
		s.mu.Lock()
		s.closing = r.Reason
		s.mu.Unlock()
	}
}

// teardown ends the session after its connection ended: it marks the
// session dead, ends its leases, then fails its pending calls.
func (s *session) teardown(readErr error) {
	s.mu.Lock()
	cause := s.cause
	if cause == nil {
		cause = readErr
		if errors.Is(readErr, io.EOF) || errors.Is(readErr, net.ErrClosed) {
			cause = errors.New("the broker closed the connection")
		}
		if s.closing != "" {
			cause = fmt.Errorf("the broker closed the connection (%s)", s.closing)
		}
	}
	s.dead = true
	s.err = &connError{url: s.c.url, cause: cause}
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.conn.Close()

	s.c.dropSession(s)
	s.mu.Lock()
	watches := s.watches
	s.watches = nil
	s.mu.Unlock()
	for _, ch := range watches {
		close(ch) // its Watch watches again on the next session
	}
	for _, cl := range pending {
		cl.err = s.err
		s.mu.Lock()
		cl.finished = true
		s.mu.Unlock()
		close(cl.done)
	}
	close(s.done)
}
