// Command counter increments a counter in Redis under the lockbroker lock
// "counter", checking fences as a resource should.
//
// Each of -iterations rounds takes the lock, reads "counter:value" and
// "fence:last", checks that the lease's fence is greater than the last one
// stored (a lower or equal fence would be a stale holder's), sleeps a
// little, and writes the value plus one and the fence back. Run several at
// once: the counter ends at the sum of their iterations, and no fence goes
// backwards.
//
//	counter -iterations 100 -url tcp://127.0.0.1:7380 -redis 127.0.0.1:6379
//
// Exit status: 0 on success, 1 on a fence violation, 2 on any other error
// (usage, broker or Redis unreachable, a lease lost).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	lockbroker "lockbroker.dev/client"
)

// errFence is a fence not above the last one stored.
var errFence = errors.New("fence violation")

func main() {
	iterations := flag.Int("iterations", 100, "rounds to run")
	url := flag.String("url", "", "broker URL (default $LOCKBROKER_URL, else the default socket or tcp://127.0.0.1:7380)")
	redisAddr := flag.String("redis", defaultRedis(), "Redis HOST:PORT holding the counter")
	pause := flag.Duration("sleep", 2*time.Millisecond, "pause between the read and the write")
	flag.Parse()

	ctx := context.Background()
	c, err := lockbroker.Dial(ctx, *url, lockbroker.WithClientName("counter-example"))
	if err != nil {
		fail(2, err)
	}
	defer c.Close()
	rc, err := dialRedis(*redisAddr)
	if err != nil {
		fail(2, err)
	}
	defer rc.conn.Close()

	var value, fence int64
	for i := 0; i < *iterations; i++ {
		err := c.WithLock(ctx, "counter", func(ctx context.Context, l *lockbroker.Lease) error {
			last, err := rc.getInt("fence:last")
			if err != nil {
				return err
			}
			if l.Fence() <= last {
				return fmt.Errorf("%w: lease fence %d, last stored %d", errFence, l.Fence(), last)
			}
			v, err := rc.getInt("counter:value")
			if err != nil {
				return err
			}
			time.Sleep(*pause)
			if err := l.Err(); err != nil {
				return err // lost while working: write nothing
			}
			value, fence = v+1, l.Fence()
			if err := rc.set("counter:value", value); err != nil {
				return err
			}
			return rc.set("fence:last", fence)
		}, lockbroker.TTL(5*time.Second))
		if errors.Is(err, errFence) {
			fail(1, err)
		}
		if err != nil {
			fail(2, err)
		}
	}
	fmt.Printf("counter: %d increments, counter:value %d, last fence %d\n", *iterations, value, fence)
}

func fail(status int, err error) {
	fmt.Fprintln(os.Stderr, "counter:", err)
	os.Exit(status)
}

// defaultRedis is LOCKBROKER_REDIS_HOST:PORT when set (the test harness's),
// else 127.0.0.1:6379.
func defaultRedis() string {
	host, port := os.Getenv("LOCKBROKER_REDIS_HOST"), os.Getenv("LOCKBROKER_REDIS_PORT")
	if host == "" || port == "" {
		return "127.0.0.1:6379"
	}
	return net.JoinHostPort(host, port)
}

// redisConn is a tiny RESP client: one connection, one command at a time.
type redisConn struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialRedis(addr string) (*redisConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return &redisConn{conn: conn, br: bufio.NewReader(conn)}, nil
}

// do sends a command and returns its reply as a string; ok is false for a
// nil reply.
func (r *redisConn) do(args ...string) (reply string, ok bool, err error) {
	buf := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		buf += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	r.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(r.conn, buf); err != nil {
		return "", false, fmt.Errorf("redis: %w", err)
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		return "", false, fmt.Errorf("redis: %w", err)
	}
	if len(line) < 3 {
		return "", false, fmt.Errorf("redis: bad reply %q", line)
	}
	line = line[:len(line)-2]
	switch line[0] {
	case '+', ':':
		return line[1:], true, nil
	case '-':
		return "", false, fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", false, err
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r.br, data); err != nil {
			return "", false, fmt.Errorf("redis: %w", err)
		}
		return string(data[:n]), true, nil
	}
	return "", false, fmt.Errorf("redis: unexpected reply %q", line)
}

// getInt reads an integer key; a missing key is 0.
func (r *redisConn) getInt(key string) (int64, error) {
	s, ok, err := r.do("GET", key)
	if err != nil || !ok {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

func (r *redisConn) set(key string, v int64) error {
	_, _, err := r.do("SET", key, strconv.FormatInt(v, 10))
	return err
}
