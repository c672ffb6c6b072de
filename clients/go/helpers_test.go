package lockbroker

// helpers_test.go - what the tests share: the environment that
// tests/clients/with-broker.sh exports, a tiny RESP client to reach Redis
// behind the broker's back, brokers of a test's own (os/exec), and a fake
// broker for answers a real one cannot be made to give.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// brokerURL returns $LOCKBROKER_URL or skips the test.
func brokerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("LOCKBROKER_URL")
	if u == "" {
		t.Skip("LOCKBROKER_URL is not set (run under tests/clients/with-broker.sh)")
	}
	return u
}

func envOrSkip(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set (run under tests/clients/with-broker.sh)", name)
	}
	return v
}

// testCtx is a context that ends with the test, at most after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialTest connects to url and closes the client when the test ends.
func dialTest(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 5*time.Second), url, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var nameSeq atomic.Int64

// lockName is a lock name no other test (or run) uses.
func lockName(t *testing.T) string {
	return fmt.Sprintf("go-test:%s:%d:%d", t.Name(), time.Now().UnixNano(), nameSeq.Add(1))
}

// ---- Redis ----------------------------------------------------------------

// redisDo sends one command to the test's Redis and returns its reply:
// string, int64, []any, nil, or an error for a Redis error reply.
func redisDo(t *testing.T, args ...string) any {
	t.Helper()
	addr := net.JoinHostPort(envOrSkip(t, "LOCKBROKER_REDIS_HOST"), envOrSkip(t, "LOCKBROKER_REDIS_PORT"))
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("redis: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatalf("redis: %v", err)
	}
	v, err := readRESP(bufio.NewReader(conn))
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return v
}

type respError string

func (e respError) Error() string { return string(e) }

func readRESP(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readRESP(br); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("bad RESP line %q", line)
}

// deleteLockKeys deletes lock name's keys ("lb:{NAME}" and "lb:{NAME}:*")
// behind the broker's back.
func deleteLockKeys(t *testing.T, name string) int {
	t.Helper()
	keys := []string{"lb:{" + name + "}"}
	if found, ok := redisDo(t, "KEYS", "lb:{"+name+"}:*").([]any); ok {
		for _, k := range found {
			keys = append(keys, k.(string))
		}
	}
	n, _ := redisDo(t, append([]string{"DEL"}, keys...)...).(int64)
	return int(n)
}

// ---- brokers of a test's own ----------------------------------------------

type ownBroker struct {
	t    *testing.T
	url  string
	args []string
	cmd  *exec.Cmd
	// redisDown: the broker is given no Redis; it is ready once it answers.
	redisDown bool
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startBroker starts LOCKBROKER_BIN on a free port with extra flags, and
// waits until it answers. Its Redis is the test's, which must be up, or
// redisURL if not empty (one that is down, for the tests that want it so).
// It is killed when the test ends.
func startBroker(t *testing.T, redisURL string, extra ...string) *ownBroker {
	t.Helper()
	envOrSkip(t, "LOCKBROKER_BIN")
	redisDown := redisURL != ""
	if redisURL == "" {
		redisURL = "redis://" + net.JoinHostPort(envOrSkip(t, "LOCKBROKER_REDIS_HOST"), envOrSkip(t, "LOCKBROKER_REDIS_PORT"))
	}
	port := freePort(t)
	b := &ownBroker{t: t, url: fmt.Sprintf("tcp://127.0.0.1:%d", port), redisDown: redisDown}
	b.args = append([]string{"--redis", redisURL, "--listen", b.url, "--log-level", "error"}, extra...)
	b.start()
	t.Cleanup(b.kill)
	return b
}

func (b *ownBroker) start() {
	b.t.Helper()
	b.cmd = exec.Command(os.Getenv("LOCKBROKER_BIN"), b.args...)
	if dir := os.Getenv("LOCKBROKER_TMP"); dir != "" {
		if f, err := os.OpenFile(filepath.Join(dir, "go-"+strings.ReplaceAll(b.t.Name(), "/", "_")+".log"),
			os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			b.cmd.Stderr = f
			defer f.Close()
		}
	}
	if err := b.cmd.Start(); err != nil {
		b.t.Fatalf("start broker: %v", err)
	}
	_, addr, _ := parseURL(b.url)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := b.ready(addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("broker on %s did not start: %v", b.url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ready asks the broker for a lock: it answers, and (unless the test gave
// it no Redis) not unavailable, which it does until its scripts are loaded
// (ping says "up" a little earlier). The lock goes with the connection.
func (b *ownBroker) ready(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(`{"id":1,"op":"acquire","lock":"go-test-ready","wait_ms":0}` + "\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if b.redisDown || !strings.Contains(line, `"unavailable"`) {
		return nil
	}
	return errors.New("redis is not up yet")
}

// kill stops the broker at once (SIGKILL), as a crash would.
func (b *ownBroker) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		b.cmd.Process.Kill()
		b.cmd.Wait()
		b.cmd = nil
	}
}

// ---- a fake broker --------------------------------------------------------

// fakeBroker accepts connections, answers hello, and hands every other
// request to answer, which writes what it likes with send. It keeps every
// line it received, with the number of its connection (1 for the first).
type fakeBroker struct {
	ln     net.Listener
	url    string
	answer func(req map[string]any, send func(line string))

	mu    sync.Mutex
	conns int        // connections accepted
	lines []fakeLine // every line received, hello included, in order
}

// fakeLine is a line a fake broker received on its connection number conn.
type fakeLine struct {
	conn int
	line string
}

// connections is how many connections the fake accepted.
func (f *fakeBroker) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns
}

// received returns a copy of every line the fake received so far.
func (f *fakeBroker) received() []fakeLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeLine(nil), f.lines...)
}

func startFake(t *testing.T, answer func(req map[string]any, send func(line string))) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{ln: ln, url: "tcp://" + ln.Addr().String(), answer: answer}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns++
			n := f.conns
			f.mu.Unlock()
			go f.serve(conn, n)
		}
	}()
	return f
}

// closeConn, sent by a fake's answer, closes the connection.
const closeConn = "\x00close"

func (f *fakeBroker) serve(conn net.Conn, n int) {
	defer conn.Close()
	send := func(line string) {
		if line == closeConn {
			conn.Close()
			return
		}
		conn.Write([]byte(line + "\n"))
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		f.mu.Lock()
		f.lines = append(f.lines, fakeLine{conn: n, line: sc.Text()})
		f.mu.Unlock()
		var req map[string]any
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return
		}
		if req["op"] == "hello" {
			send(fmt.Sprintf(`{"id":%v,"ok":true,"server":"fake/0","proto":1,"session":"s1","broker":"fake","limits":{"max_line":4096}}`, req["id"]))
			continue
		}
		f.answer(req, send)
	}
}
