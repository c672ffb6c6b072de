package dev.lockbroker;

// WireTest - what needs no broker: the JSON reader (strict) and writer, the
// line splitter fed at every split, broker URLs, option conversions and the
// backoff schedule.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class WireTest {
    private static Object parse(String s) throws Json.JsonException {
        return Json.parse(s.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void jsonReadsTheBrokersAnswers() throws Exception {
        Object o = parse("{\"id\":7,\"ok\":true,\"lease\":\"ab\",\"fence\":1795308365217499,\"limit\":null,"
                + "\"holders\":[{\"mode\":\"exclusive\",\"value\":\"\\u00e9\\ud83d\\ude00\\n\"}],\"x\":-1.5e3,\"big\":"
                + "123456789012345678901234567890}");
        Map<?, ?> m = (Map<?, ?>) o;
        assertEquals(7L, m.get("id"));
        assertEquals(Boolean.TRUE, m.get("ok"));
        assertEquals(1795308365217499L, m.get("fence"));
        assertTrue(m.containsKey("limit"));
        assertNull(m.get("limit"));
        Map<?, ?> h = (Map<?, ?>) ((List<?>) m.get("holders")).get(0);
        assertEquals("\u00e9\ud83d\ude00\n", h.get("value"));
        assertEquals(-1500.0, m.get("x"));
        assertTrue(m.get("big") instanceof Double);
        assertEquals("é😀", ((Map<?, ?>) parse("{\"v\":\"é😀\"}")).get("v")); // raw UTF-8
        assertEquals(List.of(), parse(" [ ] "));
    }

    @Test
    void jsonRefusesWhatIsNotStrictJson() {
        String[] bad = {"", "{", "{\"a\":1,}", "[1,]", "{\"a\":1}x", "{'a':1}", "{\"a\":01}", "{\"a\":1.}",
            "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00x\"}",
            "{\"a\":\"tab\there\"}", "{\"a\":1,\"a\":2}", "{\"a\":tru}", "{\"a\":nul}", "/* c */{}", "NaN",
            "{\"a\":\"unterminated}"};
        for (String s : bad) {
            assertThrows(Json.JsonException.class, () -> parse(s), s);
        }
        // invalid UTF-8: a lone continuation byte, an overlong form, a surrogate, a cut sequence
        byte[][] raw = {{'"', (byte) 0x80, '"'}, {'"', (byte) 0xC0, (byte) 0xAF, '"'},
            {'"', (byte) 0xED, (byte) 0xA0, (byte) 0x80, '"'}, {'"', (byte) 0xE2, (byte) 0x82, '"'},
            {'"', (byte) 0xF5, (byte) 0x80, (byte) 0x80, (byte) 0x80, '"'}};
        for (byte[] b : raw) {
            assertThrows(Json.JsonException.class, () -> Json.parse(b));
        }
        // nesting: 64 levels are fine, 65 are not
        assertEquals(List.of(), unwrap(parseQuiet("[".repeat(64) + "]".repeat(64)), 63));
        assertThrows(Json.JsonException.class, () -> parse("[".repeat(65) + "]".repeat(65)));
    }

    private static Object parseQuiet(String s) {
        try {
            return parse(s);
        } catch (Json.JsonException e) {
            throw new AssertionError(e);
        }
    }

    private static Object unwrap(Object o, int n) {
        for (int i = 0; i < n; i++) {
            o = ((List<?>) o).get(0);
        }
        return o;
    }

    @Test
    void jsonWritesRequests() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", 3L);
        m.put("op", "acquire");
        m.put("lock", "a\"b\\c\n\u0001\u007f é😀");
        m.put("limit", 2);
        m.put("detach", true);
        m.put("locks", List.of(Map.of("lock", "x")));
        m.put("value", null);
        String s = Json.write(m);
        assertEquals("{\"id\":3,\"op\":\"acquire\",\"lock\":\"a\\\"b\\\\c\\n\\u0001\\u007f é😀\",\"limit\":2,"
                + "\"detach\":true,\"locks\":[{\"lock\":\"x\"}],\"value\":null}", s);
        assertEquals(m.get("lock"), ((Map<?, ?>) parse(s)).get("lock")); // round trip
        assertThrows(IllegalArgumentException.class, () -> Json.write(Map.of("a", "lone \ud800")));
        assertThrows(IllegalArgumentException.class, () -> Json.write(Map.of("a", 1.5)));
    }

    @Test
    void linesSplitAtEveryByte() throws Exception {
        String text = "{\"id\":1,\"ok\":true}\r\n\n  \t\n{\"event\":\"lost\",\"lease\":\"é\"}\n[1]\n{\"id\":2";
        byte[] b = text.getBytes(StandardCharsets.UTF_8);
        for (int cut = 0; cut <= b.length; cut++) {
            Session.LineReader r = new Session.LineReader();
            List<Object> got = new ArrayList<>(r.feed(b, 0, cut));
            got.addAll(r.feed(b, cut, b.length - cut));
            assertEquals(3, got.size(), "cut at " + cut);
            assertEquals(1L, ((Map<?, ?>) got.get(0)).get("id"));
            assertEquals("é", ((Map<?, ?>) got.get(1)).get("lease"));
            assertEquals(List.of(1L), got.get(2));
            // the unfinished line completes later
            List<Object> rest = r.feed("}\n".getBytes(StandardCharsets.UTF_8), 0, 2);
            assertEquals(2L, ((Map<?, ?>) rest.get(0)).get("id"));
        }
        Session.LineReader r = new Session.LineReader();
        assertThrows(Json.JsonException.class, () -> r.feed("{not json}\n".getBytes(StandardCharsets.UTF_8), 0, 11));
    }

    @Test
    void brokerUrls() {
        BrokerUrl t = BrokerUrl.parse("tcp://127.0.0.1:7380");
        assertEquals("127.0.0.1", t.host);
        assertEquals(7380, t.port);
        assertEquals("tcp://127.0.0.1:7380", t.toString());
        BrokerUrl v6 = BrokerUrl.parse("tcp://[::1]:9");
        assertEquals("::1", v6.host);
        assertEquals("tcp://[::1]:9", v6.toString());
        BrokerUrl u = BrokerUrl.parse("unix:///run/lockbroker/lockbroker.sock");
        assertTrue(u.unix);
        assertEquals("/run/lockbroker/lockbroker.sock", u.path);
        for (String bad : new String[] {"", "tcp://", "tcp://host", "tcp://:80", "tcp://h:0", "tcp://h:65536",
            "tcp://h:80/x", "tcp://::1:80", "tcp://[::1]80", "unix://rel/path", "unix:///", "http://h:1",
            "tcp://u@h:1"}) {
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> BrokerUrl.parse(bad), bad);
            assertEquals("invalid_argument", e.code());
        }
        assertThrows(InvalidArgumentException.class, () -> LockBrokerClient.connect("bogus://x"));
    }

    @Test
    void millisRoundUp() {
        assertEquals(1, LockOptions.millis(Duration.ofNanos(1)));
        assertEquals(1500, LockOptions.millis(Duration.ofMillis(1500)));
        assertEquals(0, LockOptions.millis(Duration.ZERO));
        assertThrows(InvalidArgumentException.class, () -> LockOptions.millis(Duration.ofMillis(-1)));
        Map<String, Object> f = LockOptions.defaults().ttl(Duration.ofSeconds(10)).waitTime(Duration.ZERO).shared()
                .maxHold(Duration.ofMillis(300)).fields("n", "o");
        assertEquals("{\"lock\":\"n\",\"mode\":\"shared\",\"ttl_ms\":10000,\"wait_ms\":0,\"owner\":\"o\","
                + "\"max_hold_ms\":300}", Json.write(f));
        // options are values: a derived one leaves its origin alone
        LockOptions base = LockOptions.defaults();
        base.detach();
        assertEquals("{\"lock\":\"n\",\"owner\":\"o\"}", Json.write(base.fields("n", "o")));
    }

    /**
     * The delay after n failed connects in a row is min doubled n-1 times,
     * capped at max, with +-20% jitter.
     */
    @Test
    void backoffSchedule() {
        Duration[][] cases = {
            {ClientOptions.DEFAULT_BACKOFF_MIN, ClientOptions.DEFAULT_BACKOFF_MAX},
            {Duration.ofMillis(10), Duration.ofMillis(75)},
            {Duration.ofSeconds(1), Duration.ofSeconds(1)},
        };
        for (Duration[] c : cases) {
            ClientOptions o = ClientOptions.defaults().backoff(c[0], c[1]);
            LockBrokerClient client = newUnconnected(o);
            long want = c[0].toNanos();
            for (int n = 1; n <= 40; n++) {
                boolean low = false;
                boolean high = false;
                for (int i = 0; i < 200; i++) {
                    long d = client.backoff(n).toNanos();
                    assertTrue(d >= want * 0.8 - 1 && d <= want * 1.2 + 1, "n=" + n + " d=" + d + " want~" + want);
                    low |= d < want * 0.95;
                    high |= d > want * 1.05;
                }
                assertTrue(low && high, "no jitter after " + n + " failures");
                want = Math.min(want * 2, c[1].toNanos());
            }
        }
        assertThrows(IllegalArgumentException.class,
                () -> ClientOptions.defaults().backoff(Duration.ofSeconds(2), Duration.ofSeconds(1)));
    }

    /** A client that never connected (for its pure functions). */
    static LockBrokerClient newUnconnected(ClientOptions o) {
        try {
            java.lang.reflect.Constructor<LockBrokerClient> k =
                    LockBrokerClient.class.getDeclaredConstructor(String.class, ClientOptions.class);
            k.setAccessible(true);
            LockBrokerClient c = k.newInstance("tcp://127.0.0.1:1", o);
            c.close();
            return c;
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void defaultLabelHasTheSharedShape() {
        String l = LockBrokerClient.defaultLabel();
        assertTrue(l.matches("[^\\[]+\\[\\d+\\]@\\S+ lockbroker-java/" + LockBrokerClient.VERSION), l);
        assertTrue(l.getBytes(StandardCharsets.UTF_8).length <= 128);
    }

    @Test
    void ownersArePerThreadAndNeverReused() throws Exception {
        String mine = LockBrokerClient.currentOwner();
        assertEquals(mine, LockBrokerClient.currentOwner());
        String[] other = new String[2];
        Thread t1 = new Thread(() -> other[0] = LockBrokerClient.currentOwner(), "worker");
        Thread t2 = new Thread(() -> other[1] = LockBrokerClient.currentOwner(), "worker");
        t1.start();
        t1.join();
        t2.start();
        t2.join();
        assertTrue(other[0].startsWith("worker#") && other[1].startsWith("worker#"));
        assertTrue(!other[0].equals(other[1]) && !other[0].equals(mine));
    }
}
