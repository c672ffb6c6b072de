// Bench.java: uncontended acquire+release cycles/s, this client against a
// raw socket loop, from 1 and from 16 threads (the workload of
// clients/python/bench.py and clients/go/bench).
//
// Each thread takes and releases a lock of its own (wait_ms 0, so nothing
// ever waits) as fast as it can for --seconds; a run's figure is the cycles
// of all threads over the elapsed time. Variants, run in turn within each
// round so that they share the machine's conditions:
//
// - raw: one blocking socket per thread, the request lines written by hand
//   and the lease token cut out of the answer without decoding JSON: the
//   floor of any Java client's cost;
// - client: one LockBrokerClient shared by every thread (one connection,
//   pipelined), try (Lease l = client.lock(name, waitTime(ZERO))) {};
// - client/thread: one LockBrokerClient per thread.
//
// A warm-up round (unreported) lets the JIT compile the loops first. Prints
// each run, then the median of --runs per variant: cycles/s, and the CPU
// time of this JVM per cycle (all its threads). Run it under the test
// harness, against the release build:
//
//     make build/lockbrokerd
//     LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh sh clients/java/build.sh bench

import dev.lockbroker.Lease;
import dev.lockbroker.LockBrokerClient;
import dev.lockbroker.LockOptions;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

public final class Bench {
    static final LockOptions NO_WAIT = LockOptions.defaults().waitTime(Duration.ZERO);

    /** The raw baseline: one blocking channel, one request at a time. */
    static final class Raw implements AutoCloseable {
        final SocketChannel ch;
        final ByteBuffer in = ByteBuffer.allocate(64 << 10);
        int id;

        Raw(String url) throws IOException {
            if (url.startsWith("unix://")) {
                ch = SocketChannel.open(StandardProtocolFamily.UNIX);
                ch.connect(UnixDomainSocketAddress.of(url.substring(7)));
            } else {
                String hp = url.substring(6);
                int colon = hp.lastIndexOf(':');
                ch = SocketChannel.open(new InetSocketAddress(hp.substring(0, colon), Integer.parseInt(hp.substring(colon + 1))));
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            }
            roundTrip("{\"id\":0,\"op\":\"hello\",\"client\":\"bench-raw\"}\n");
        }

        /** Writes line, returns the answer (one line) without its newline. */
        String roundTrip(String line) throws IOException {
            ByteBuffer out = ByteBuffer.wrap(line.getBytes(StandardCharsets.UTF_8));
            while (out.hasRemaining()) {
                ch.write(out);
            }
            in.clear();
            for (;;) {
                if (ch.read(in) < 0) {
                    throw new IOException("the broker closed the connection");
                }
                int n = in.position();
                if (n > 0 && in.get(n - 1) == '\n') {
                    String ans = new String(in.array(), 0, n - 1, StandardCharsets.UTF_8);
                    if (!ans.contains("\"ok\":true")) {
                        throw new IOException("broker answered " + ans);
                    }
                    return ans;
                }
            }
        }

        void loop(String name, AtomicBoolean stop, long[] count) throws IOException {
            String acquire = ",\"op\":\"acquire\",\"lock\":\"" + name + "\",\"wait_ms\":0}\n";
            long n = 0;
            while (!stop.get()) {
                String ans = roundTrip("{\"id\":" + (++id) + acquire);
                int i = ans.indexOf("\"lease\":\"");
                String token = ans.substring(i + 9, ans.indexOf('"', i + 9));
                roundTrip("{\"id\":" + (++id) + ",\"op\":\"release\",\"lease\":\"" + token + "\"}\n");
                n++;
            }
            count[0] = n;
        }

        @Override
        public void close() throws IOException {
            ch.close();
        }
    }

    static void clientLoop(LockBrokerClient c, String name, AtomicBoolean stop, long[] count) {
        long n = 0;
        while (!stop.get()) {
            try (Lease l = c.lock(name, NO_WAIT)) {
                n++;
            }
        }
        count[0] = n;
    }

    interface Loop {
        void run(AtomicBoolean stop, long[] count) throws Exception;
    }

    /** One run: {cycles/s, CPU microseconds per cycle}. */
    static double[] run(String variant, String url, int threads, double seconds, String tag) throws Exception {
        List<AutoCloseable> closers = new ArrayList<>();
        List<Loop> loops = new ArrayList<>();
        LockBrokerClient shared = null;
        for (int i = 0; i < threads; i++) {
            String name = "bench-" + tag + "-" + i;
            switch (variant) {
                case "raw": {
                    Raw r = new Raw(url);
                    closers.add(r);
                    loops.add((stop, count) -> r.loop(name, stop, count));
                    break;
                }
                case "client":
                case "client/thread": {
                    LockBrokerClient c = shared;
                    if (c == null || variant.equals("client/thread")) {
                        c = LockBrokerClient.connect(url);
                        closers.add(c);
                        shared = c;
                    }
                    LockBrokerClient cc = c;
                    loops.add((stop, count) -> clientLoop(cc, name, stop, count));
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown variant " + variant);
            }
        }
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        long[][] counts = new long[threads][1];
        List<Thread> ts = new ArrayList<>();
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long t0 = System.nanoTime();
        long cpu0 = os.getProcessCpuTime();
        for (int i = 0; i < threads; i++) {
            Loop loop = loops.get(i);
            long[] count = counts[i];
            Thread t = new Thread(() -> {
                try {
                    loop.run(stop, count);
                } catch (Throwable e) {
                    failed.compareAndSet(null, e);
                    stop.set(true);
                }
            });
            ts.add(t);
            t.start();
        }
        Thread.sleep((long) (seconds * 1000));
        stop.set(true);
        for (Thread t : ts) {
            t.join();
        }
        double elapsed = (System.nanoTime() - t0) / 1e9;
        long cpu = os.getProcessCpuTime() - cpu0;
        for (AutoCloseable c : closers) {
            c.close();
        }
        if (failed.get() != null) {
            throw new RuntimeException(variant + ": " + failed.get(), failed.get());
        }
        long total = 0;
        for (long[] c : counts) {
            total += c[0];
        }
        total = Math.max(1, total);
        return new double[] {total / elapsed, cpu / 1e3 / total};
    }

    static double median(List<Double> v) {
        List<Double> s = new ArrayList<>(v);
        Collections.sort(s);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    public static void main(String[] args) throws Exception {
        String url = null;
        double seconds = 2.0;
        int runs = 5;
        String threadsArg = "1,16";
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--url":
                    url = args[++i];
                    break;
                case "--seconds":
                    seconds = Double.parseDouble(args[++i]);
                    break;
                case "--runs":
                    runs = Integer.parseInt(args[++i]);
                    break;
                case "--threads":
                    threadsArg = args[++i];
                    break;
                default:
                    System.err.println("bench: usage: [--url URL] [--seconds S] [--runs N] [--threads 1,16]");
                    System.exit(2);
            }
        }
        if (url == null) {
            url = LockBrokerClient.defaultUrl();
        }
        String[] variants = {"raw", "client", "client/thread"};
        List<Integer> counts = new ArrayList<>();
        for (String t : threadsArg.split(",")) {
            counts.add(Integer.parseInt(t.trim()));
        }
        // warm-up: the JIT compiles the loops before anything is measured
        for (int t : counts) {
            for (String v : variants) {
                run(v, url, t, 0.5, "warm-" + t + "-" + v.replace("/", ""));
            }
        }
        Map<String, List<double[]>> results = new LinkedHashMap<>();
        for (int r = 0; r < runs; r++) {
            for (int t : counts) {
                for (String v : variants) {
                    double[] res = run(v, url, t, seconds, r + "-" + t + "-" + v.replace("/", ""));
                    results.computeIfAbsent(v + "@" + t, k -> new ArrayList<>()).add(res);
                    System.out.printf("run %d: %-14s %2d threads %9.0f cycles/s %7.1f CPU us/cycle%n", r + 1, v, t,
                            res[0], res[1]);
                    System.out.flush();
                }
            }
        }
        System.out.printf("%nmedians of %d runs of %s s against %s:%n", runs, seconds, url);
        System.out.printf("%7s %14s %9s %7s %13s%n", "threads", "variant", "cycles/s", "vs raw", "CPU us/cycle");
        for (int t : counts) {
            List<Double> rawC = new ArrayList<>();
            for (double[] x : results.get("raw@" + t)) {
                rawC.add(x[0]);
            }
            double raw = median(rawC);
            for (String v : variants) {
                List<Double> c = new ArrayList<>();
                List<Double> u = new ArrayList<>();
                for (double[] x : results.get(v + "@" + t)) {
                    c.add(x[0]);
                    u.add(x[1]);
                }
                double cps = median(c);
                System.out.printf("%7d %14s %9.0f %7.2f %13.1f%n", t, v, cps, cps / raw, median(u));
            }
        }
    }
}
