package dev.lockbroker;

// ExampleTest - examples/java/Counter.java runs (as a single-file source
// program against this client's classes): two copies at once add up
// exactly, and a stale fence makes it exit 1.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.lockbroker.TestSupport.Resp;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class ExampleTest {
    private static Process counter(int n, Path log) throws IOException {
        Path src = TestSupport.top().resolve("examples/java/Counter.java");
        assumeTrue(Files.exists(src), "examples/java/Counter.java is not beside this checkout");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String classes;
        try {
            // where this client's classes are (the jar or the classes directory)
            classes = Path.of(LockBrokerClient.class.getProtectionDomain().getCodeSource().getLocation().toURI())
                    .toString();
        } catch (java.net.URISyntaxException e) {
            throw new AssertionError(e);
        }
        List<String> cmd = new ArrayList<>(List.of(java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                classes, src.toString(), "--iterations", Integer.toString(n)));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectErrorStream(true);
        pb.redirectOutput(log.toFile());
        return pb.start();
    }

    private static String run(Process p, Path log) throws Exception {
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "Counter.java did not end");
        return Files.readString(log, StandardCharsets.UTF_8);
    }

    @Test
    void twoCopiesAddUpAndAStaleFenceExits1() throws Exception {
        TestSupport.brokerUrl();
        File dir = Files.createTempDirectory("java-counter").toFile();
        try (Resp redis = new Resp()) {
            redis.command("DEL", "counter:value", "fence:last");
            Path l1 = dir.toPath().resolve("1.log");
            Path l2 = dir.toPath().resolve("2.log");
            Process p1 = counter(15, l1);
            Process p2 = counter(15, l2);
            String o1 = run(p1, l1);
            String o2 = run(p2, l2);
            assertEquals(0, p1.exitValue(), o1);
            assertEquals(0, p2.exitValue(), o2);
            assertTrue(o1.contains("Counter.java: 15 increments"), o1);
            assertEquals("30", redis.command("GET", "counter:value"));

            redis.command("SET", "fence:last", Long.toString(1L << 62));
            Path l3 = dir.toPath().resolve("3.log");
            Process p3 = counter(1, l3);
            String o3 = run(p3, l3);
            assertEquals(1, p3.exitValue(), o3);
            assertTrue(o3.contains("fence violation"), o3);
            redis.command("DEL", "counter:value", "fence:last");
        } finally {
            for (File f : dir.listFiles()) {
                f.delete();
            }
            dir.delete();
        }
    }
}
