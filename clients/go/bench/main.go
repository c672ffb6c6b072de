// Command bench measures uncontended acquire+release cycles per second
// against a running broker, with this client and with a raw-socket loop,
// side by side.
//
// Each goroutine loops on a lock name of its own (so nothing waits): Lock
// with Wait(0), then Release. Modes:
//
//	client   one Client shared by every goroutine (one connection, pipelined)
//	clients  one Client per goroutine
//	raw      one connection per goroutine, writing the request lines and
//	         reading the answers by hand (the floor of any client's cost)
//
// Every mode runs -runs times, interleaved, for -duration each; the table
// gives the median and the spread. Run it beside a release broker:
//
//	make build/lockbrokerd
//	LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh \
//	    sh -c 'cd clients/go && go run ./bench -runs 5'
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lockbroker "lockbroker.dev/client"
)

func main() {
	url := flag.String("url", "", "broker URL (default $LOCKBROKER_URL)")
	duration := flag.Duration("duration", 2*time.Second, "length of one run")
	runs := flag.Int("runs", 3, "runs per mode")
	gs := flag.String("goroutines", "1,16", "goroutine counts, comma separated")
	modes := flag.String("modes", "raw,client,clients", "modes, comma separated")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *url == "" {
		*url = lockbroker.DefaultURL()
	}
	var counts []int
	for _, s := range strings.Split(*gs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -goroutines %q\n", *gs)
			os.Exit(2)
		}
		counts = append(counts, n)
	}
	ms := strings.Split(*modes, ",")

	results := map[string][]float64{}
	for r := 0; r < *runs; r++ {
		for _, g := range counts {
			for _, m := range ms {
				rate, err := run(m, *url, g, *duration)
				if err != nil {
					pprof.StopCPUProfile()
					fmt.Fprintf(os.Stderr, "bench: %s x%d: %v\n", m, g, err)
					os.Exit(1)
				}
				key := fmt.Sprintf("%s/%d", m, g)
				results[key] = append(results[key], rate)
				fmt.Fprintf(os.Stderr, "run %d %-8s %3d goroutines: %8.0f cycles/s\n", r+1, m, g, rate)
			}
		}
	}
	fmt.Printf("%-8s %10s %12s %12s %12s\n", "mode", "goroutines", "median/s", "min/s", "max/s")
	for _, g := range counts {
		for _, m := range ms {
			v := results[fmt.Sprintf("%s/%d", m, g)]
			sort.Float64s(v)
			fmt.Printf("%-8s %10d %12.0f %12.0f %12.0f\n", m, g, median(v), v[0], v[len(v)-1])
		}
	}
}

func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

var runSeq atomic.Int64

// run runs g goroutines of mode m for d and returns cycles per second.
func run(m, url string, g int, d time.Duration) (float64, error) {
	ctx := context.Background()
	var loops []func(stop *atomic.Bool) (int, error)
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	prefix := fmt.Sprintf("bench:%d:%d:%s", os.Getpid(), runSeq.Add(1), m)
	var shared *lockbroker.Client
	for i := 0; i < g; i++ {
		name := fmt.Sprintf("%s:%d", prefix, i)
		switch m {
		case "client", "clients":
			c := shared
			if c == nil || m == "clients" {
				var err error
				if c, err = lockbroker.Dial(ctx, url); err != nil {
					return 0, err
				}
				closers = append(closers, func() { c.Close() })
				shared = c
			}
			loops = append(loops, func(stop *atomic.Bool) (int, error) { return clientLoop(c, name, stop) })
		case "raw":
			r, err := dialRaw(url)
			if err != nil {
				return 0, err
			}
			closers = append(closers, func() { r.conn.Close() })
			loops = append(loops, func(stop *atomic.Bool) (int, error) { return r.loop(name, stop) })
		default:
			return 0, fmt.Errorf("unknown mode %q", m)
		}
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var total atomic.Int64
	errc := make(chan error, g)
	start := time.Now()
	for _, loop := range loops {
		wg.Add(1)
		go func(loop func(*atomic.Bool) (int, error)) {
			defer wg.Done()
			n, err := loop(&stop)
			total.Add(int64(n))
			if err != nil {
				errc <- err
			}
		}(loop)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(total.Load()) / elapsed.Seconds(), nil
}

func clientLoop(c *lockbroker.Client, name string, stop *atomic.Bool) (int, error) {
	ctx := context.Background()
	n := 0
	for !stop.Load() {
		l, err := c.Lock(ctx, name, lockbroker.Wait(0))
		if err != nil {
			return n, err
		}
		if err := l.Release(ctx); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// rawConn is the raw-socket baseline: request lines written by hand, the
// answer's lease token cut out of the line without decoding JSON.
type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
	id   int
}

func dialRaw(url string) (*rawConn, error) {
	var network, addr string
	switch {
	case strings.HasPrefix(url, "tcp://"):
		network, addr = "tcp", url[len("tcp://"):]
	case strings.HasPrefix(url, "unix://"):
		network, addr = "unix", url[len("unix://"):]
	default:
		return nil, fmt.Errorf("bad URL %q", url)
	}
	conn, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	r := &rawConn{conn: conn, br: bufio.NewReader(conn)}
	if _, err := r.roundTrip(`{"id":0,"op":"hello","client":"bench-raw"}`); err != nil {
		conn.Close()
		return nil, err
	}
	return r, nil
}

func (r *rawConn) roundTrip(line string) ([]byte, error) {
	if _, err := r.conn.Write([]byte(line + "\n")); err != nil {
		return nil, err
	}
	ans, err := r.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(ans, []byte(`"ok":true`)) {
		return nil, fmt.Errorf("broker answered %s", ans)
	}
	return ans, nil
}

var leaseKey = []byte(`"lease":"`)

func (r *rawConn) loop(name string, stop *atomic.Bool) (int, error) {
	qname := strconv.Quote(name) // bench names are plain ASCII: valid JSON too
	n := 0
	for !stop.Load() {
		r.id++
		ans, err := r.roundTrip(`{"id":` + strconv.Itoa(r.id) + `,"op":"acquire","lock":` + qname + `,"wait_ms":0}`)
		if err != nil {
			return n, err
		}
		i := bytes.Index(ans, leaseKey)
		if i < 0 {
			return n, errors.New("no lease in the answer")
		}
		tok := ans[i+len(leaseKey):]
		tok = tok[:bytes.IndexByte(tok, '"')]
		r.id++
		if _, err := r.roundTrip(`{"id":` + strconv.Itoa(r.id) + `,"op":"release","lease":"` + string(tok) + `"}`); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
