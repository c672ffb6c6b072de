package lockbroker

// unit_test.go - tests that need no broker: error values, URLs, framing,
// and the client against a fake broker (every error code, odd lines, events
// a real broker cannot be made to send on demand).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

var allCodes = []struct {
	code string
	err  error
}{
	{CodeBadJSON, ErrBadJSON},
	{CodeBadRequest, ErrBadRequest},
	{CodeLineTooLong, ErrLineTooLong},
	{CodeUnknownOp, ErrUnknownOp},
	{CodeInvalidArgument, ErrInvalidArgument},
	{CodeUnauthorized, ErrUnauthorized},
	{CodeTimeout, ErrTimeout},
	{CodeCancelled, ErrCancelled},
	{CodeNotHeld, ErrNotHeld},
	{CodeConflict, ErrConflict},
	{CodeUpgradeUnsupported, ErrUpgradeUnsupported},
	{CodeLimitExceeded, ErrLimitExceeded},
	{CodeUnavailable, ErrUnavailable},
	{CodeShuttingDown, ErrShuttingDown},
	{CodeInternal, ErrInternal},
}

func TestServerErrorMatchesItsCodeOnly(t *testing.T) {
	for _, c := range allCodes {
		err := serverError("acquire", "x", &wireError{Code: c.code, Message: "msg of " + c.code})
		for _, o := range allCodes {
			if got := errors.Is(err, o.err); got != (o.code == c.code) {
				t.Errorf("errors.Is(%s error, Err of %s) = %v", c.code, o.code, got)
			}
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Code != c.code || se.Message != "msg of "+c.code {
			t.Errorf("errors.As(%v) = %+v", err, se)
		}
		if !strings.Contains(err.Error(), c.code) || !strings.Contains(err.Error(), "msg of "+c.code) {
			t.Errorf("message %q lacks the code or the broker's message", err)
		}
	}
}

func TestClientErrors(t *testing.T) {
	lost := &LostError{Lock: "x", Reason: ReasonGone}
	if !errors.Is(lost, ErrLost) || errors.Is(lost, ErrNotHeld) {
		t.Errorf("LostError gone: Is(ErrLost) must hold, Is(ErrNotHeld) must not")
	}
	nh := &LostError{Lock: "x", Reason: ReasonNotHeld, Cause: serverError("release", "x", &wireError{Code: CodeNotHeld})}
	if !errors.Is(nh, ErrLost) || !errors.Is(nh, ErrNotHeld) {
		t.Errorf("LostError not_held must match ErrLost and ErrNotHeld")
	}
	ce := &cancelError{lock: "x", cause: context.DeadlineExceeded}
	if !errors.Is(ce, ErrCancelled) || !errors.Is(ce, context.DeadlineExceeded) || errors.Is(ce, ErrTimeout) {
		t.Errorf("cancelError matches wrongly")
	}
	de := &connError{url: "tcp://x:1", cause: ErrClosed}
	if !errors.Is(de, ErrDisconnected) || !errors.Is(de, ErrClosed) {
		t.Errorf("connError matches wrongly")
	}
	if !errors.Is(invalidArg("x"), ErrInvalidArgument) {
		t.Errorf("invalidArg must match ErrInvalidArgument")
	}
}

func TestParseURL(t *testing.T) {
	good := map[string][2]string{
		"tcp://127.0.0.1:7380":    {"tcp", "127.0.0.1:7380"},
		"TCP://[::1]:7380":        {"tcp", "[::1]:7380"},
		"tcp://localhost:1":       {"tcp", "localhost:1"},
		"unix:///run/lb/lb.sock":  {"unix", "/run/lb/lb.sock"},
		"unix://relative/lb.sock": {"unix", "relative/lb.sock"},
		"Unix:///tmp/x y/lb.sock": {"unix", "/tmp/x y/lb.sock"},
	}
	for u, want := range good {
		n, a, err := parseURL(u)
		if err != nil || n != want[0] || a != want[1] {
			t.Errorf("parseURL(%q) = %q, %q, %v; want %v", u, n, a, err, want)
		}
	}
	for _, u := range []string{"", "127.0.0.1:7380", "tcp://127.0.0.1", "tcp://:7380", "unix://", "http://x:1", "redis://x:1"} {
		if _, _, err := parseURL(u); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("parseURL(%q): err = %v, want ErrInvalidArgument", u, err)
		}
	}
}

func TestDefaultURL(t *testing.T) {
	t.Setenv("LOCKBROKER_URL", "tcp://10.1.2.3:9")
	if got := DefaultURL(); got != "tcp://10.1.2.3:9" {
		t.Errorf("DefaultURL() = %q with LOCKBROKER_URL set", got)
	}
	t.Setenv("LOCKBROKER_URL", "")
	want := DefaultTCPURL
	if _, err := os.Stat(DefaultUnixSocket); err == nil {
		want = "unix://" + DefaultUnixSocket
	}
	if got := DefaultURL(); got != want {
		t.Errorf("DefaultURL() = %q, want %q", got, want)
	}
}

func TestFrameAndMillis(t *testing.T) {
	if got := string(frame(7, []byte(`{"op":"ping"}`))); got != `{"id":7,"op":"ping"}`+"\n" {
		t.Errorf("frame = %q", got)
	}
	if got := string(frame(-3, []byte(`{}`))); got != `{"id":-3}`+"\n" {
		t.Errorf("frame of {} = %q", got)
	}
	for d, want := range map[time.Duration]int64{0: 0, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Second: 1000, -time.Millisecond: -1} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 200000)
	in := "\n  \t\n{\"a\":1}\r\n" + long + "\nlast"
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	var buf []byte
	for _, want := range []string{`{"a":1}`, long} {
		got, err := readLine(br, &buf)
		if err != nil || string(got) != want {
			t.Fatalf("readLine = %.40q, %v; want %.40q", got, err, want)
		}
	}
	if _, err := readLine(br, &buf); err == nil {
		t.Errorf("an unterminated last line must be an error")
	}
}

// TestFakeEveryErrorCode: every code the broker may answer reaches the
// caller of every op as its error value, with the broker's message.
func TestFakeEveryErrorCode(t *testing.T) {
	f := startFake(t, func(req map[string]any, send func(string)) {
		code := "internal"
		for _, k := range []string{"lock", "lease"} {
			if s, ok := req[k].(string); ok {
				code = s
			}
		}
		send(fmt.Sprintf(`{"id":%v,"ok":false,"error":{"code":%q,"message":"the broker says %s"}}`, req["id"], code, code))
	})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 10*time.Second)
	for _, cc := range allCodes {
		_, errLock := c.Lock(ctx, cc.code, Wait(0))
		_, errInspect := c.Inspect(ctx, cc.code)
		_, errRelease := c.ReleaseToken(ctx, cc.code)
		_, errExtend := c.ExtendToken(ctx, cc.code, time.Second)
		_, errPing := c.Ping(ctx) // the fake answers internal
		for op, err := range map[string]error{"acquire": errLock, "inspect": errInspect, "release": errRelease, "extend": errExtend} {
			var se *ServerError
			if !errors.Is(err, cc.err) || !errors.As(err, &se) || se.Op != op || se.Message != "the broker says "+cc.code {
				t.Errorf("%s answered %s: got %v", op, cc.code, err)
			}
		}
		if !errors.Is(errPing, ErrInternal) {
			t.Errorf("ping answered internal: got %v", errPing)
		}
	}
	_, err := c.Lock(ctx, "brand_new_code", Wait(0))
	var se *ServerError
	if !errors.As(err, &se) || se.Code != "brand_new_code" {
		t.Errorf("an unknown code must come back as a *ServerError with that code: %v", err)
	}
	for _, cc := range allCodes {
		if errors.Is(err, cc.err) {
			t.Errorf("an unknown code matched %s", cc.code)
		}
	}
}

// TestFakeOddLines: blank lines, CRLF, answers out of order, unknown
// events and fields, answers with id null, and a lost event with a reason
// this client does not know.
func TestFakeOddLines(t *testing.T) {
	f := startFake(t, func(req map[string]any, send func(string)) {
		id := req["id"]
		switch req["op"] {
		case "acquire":
			if req["lock"] == "slow" {
				go func() {
					time.Sleep(100 * time.Millisecond)
					send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":"aa","lock":"slow","mode":"exclusive","fence":5,"ttl_ms":1000,"count":1}`, id))
				}()
				return
			}
			send("")
			send("   \t")
			send(`{"event":"brand_new_event","x":[1,2]}`)
			send(`{"id":null,"ok":false,"error":{"code":"bad_json","message":"?"}}`)
			send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":"bb","lock":"fast","mode":"exclusive","fence":9007199254740000,"ttl_ms":1000,"count":1,"new_field":{"a":1}}`+"\r", id))
			send(`{"event":"lost","lease":"bb","lock":"fast","reason":"brand_new_reason"}`)
		case "ping":
			send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, id))
		}
	})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 5*time.Second)
	slow := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "slow")
		if err == nil && l.Fence() != 5 {
			err = fmt.Errorf("fence %d", l.Fence())
		}
		slow <- err
	}()
	time.Sleep(20 * time.Millisecond)
	l, err := c.Lock(ctx, "fast")
	if err != nil {
		t.Fatalf("Lock(fast): %v", err)
	}
	if l.Fence() != 9007199254740000 || l.Token() != "bb" {
		t.Errorf("fence %d token %q", l.Fence(), l.Token())
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("lost event not delivered")
	}
	var le *LostError
	if !errors.As(l.Err(), &le) || le.Reason != "brand_new_reason" {
		t.Errorf("Err() = %v", l.Err())
	}
	if r, err := c.Ping(ctx); err != nil || r != "up" {
		t.Errorf("Ping = %q, %v", r, err)
	}
	if err := <-slow; err != nil {
		t.Errorf("Lock(slow): %v", err)
	}
}

// TestFakeLineTooLong: a request longer than the broker's max_line is
// refused before it is sent, and the session goes on.
func TestFakeLineTooLong(t *testing.T) {
	f := startFake(t, func(req map[string]any, send func(string)) {
		send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, req["id"]))
	})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 5*time.Second)
	_, err := c.Do(ctx, "ping", map[string]any{"pad": strings.Repeat("x", 5000)})
	if !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Do with a 5000-byte line against max_line 4096: %v", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after: %v", err)
	}
}

func TestLocalValidation(t *testing.T) {
	f := startFake(t, func(req map[string]any, send func(string)) {})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.Lock(ctx, "bad\xff"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("invalid UTF-8 name: %v", err)
	}
	if _, err := c.Lock(ctx, "ok", WithOwner("bad\xff")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("invalid UTF-8 owner: %v", err)
	}
	for _, op := range []string{"hello", "acquire"} {
		if _, err := c.Do(ctx, op, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Do(%s): %v", op, err)
		}
	}
	if _, err := c.Do(ctx, "ping", map[string]any{"id": 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Do with id: %v", err)
	}
	if _, err := Dial(ctx, f.url, WithAuth("bad\xff")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("invalid UTF-8 secret: %v", err)
	}
	if _, err := Dial(ctx, "http://x"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Dial(http://x): %v", err)
	}
}

// TestFakeDropFailsPending: the connection ends while an acquire waits and
// a lease is held: the lease is lost ("disconnected") and the acquire fails
// with ErrDisconnected.
func TestFakeDropFailsPending(t *testing.T) {
	drop := make(chan struct{})
	f := startFake(t, func(req map[string]any, send func(string)) {
		if req["lock"] == "held" {
			send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":"cc","lock":"held","mode":"exclusive","fence":1,"ttl_ms":1000,"count":1}`, req["id"]))
			return
		}
		close(drop)
		send(closeConn)
	})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 5*time.Second)
	l, err := c.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c.Lock(ctx, "waits"); errc <- err }()
	<-drop
	if err := <-errc; !errors.Is(err, ErrDisconnected) {
		t.Errorf("pending Lock: %v", err)
	}
	var le *LostError
	if !errors.As(l.Err(), &le) || le.Reason != ReasonDisconnected {
		t.Errorf("held lease: Err() = %v", l.Err())
	}
	if err := l.Release(ctx); !errors.As(err, &le) {
		t.Errorf("Release after the drop: %v", err)
	}
}
