package dev.lockbroker;

// ErrorTableTest - the client's exception classes against the protocol's
// own table (protocol/PROTOCOL.md, "Error codes"), so that a code added to
// the protocol or to the client without the other fails here.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class ErrorTableTest {
    private static final Pattern HEADING = Pattern.compile("^\\s{0,3}(#{1,6})\\s+(.*?)\\s*#*\\s*$");
    private static final Pattern CODE = Pattern.compile("^[a-z][a-z0-9_]*$");
    private static final Pattern SEPARATOR = Pattern.compile("^:?-+:?$");

    /** The cells of a Markdown table row (an escaped "\|" stays inside its cell; outer pipes optional). */
    static List<String> splitRow(String line) {
        line = line.strip();
        if (line.startsWith("|")) {
            line = line.substring(1);
        }
        if (line.endsWith("|") && !line.endsWith("\\|")) {
            line = line.substring(0, line.length() - 1);
        }
        List<String> cells = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        for (int i = 0; i < line.length(); i++) {
            char c = line.charAt(i);
            if (c == '\\' && i + 1 < line.length() && line.charAt(i + 1) == '|') {
                cur.append('|');
                i++;
            } else if (c == '|') {
                cells.add(cur.toString().strip());
                cur.setLength(0);
            } else {
                cur.append(c);
            }
        }
        cells.add(cur.toString().strip());
        return cells;
    }

    /** A cell without Markdown emphasis or code marks. */
    static String cellText(String cell) {
        String s = cell.strip();
        int a = 0;
        int b = s.length();
        while (a < b && "`*_".indexOf(s.charAt(a)) >= 0) {
            a++;
        }
        while (b > a && "`*_".indexOf(s.charAt(b - 1)) >= 0) {
            b--;
        }
        return s.substring(a, b).strip();
    }

    /**
     * The "code" column of the first table under the heading "Error codes"
     * of a Markdown document, in order.
     */
    static List<String> protocolErrorCodes(String doc) {
        String[] lines = doc.replace("\r\n", "\n").split("\n", -1);
        int i = 0;
        int level = 0;
        for (; i < lines.length; i++) {
            Matcher m = HEADING.matcher(lines[i]);
            if (m.matches() && cellText(m.group(2)).equalsIgnoreCase("error codes")) {
                level = m.group(1).length();
                break;
            }
        }
        if (level == 0) {
            throw new IllegalArgumentException("no heading \"Error codes\"");
        }
        for (i++; i < lines.length; i++) {
            Matcher m = HEADING.matcher(lines[i]);
            if (m.matches() && m.group(1).length() <= level) {
                throw new IllegalArgumentException("no table in the section \"Error codes\"");
            }
            if (lines[i].strip().startsWith("|")) {
                break;
            }
        }
        if (i + 1 >= lines.length) {
            throw new IllegalArgumentException("no table in the section \"Error codes\"");
        }
        int col = -1;
        List<String> header = splitRow(lines[i]);
        for (int j = 0; j < header.size(); j++) {
            if (cellText(header.get(j)).equalsIgnoreCase("code")) {
                col = j;
            }
        }
        if (col < 0) {
            throw new IllegalArgumentException("the table of \"Error codes\" has no column \"code\"");
        }
        for (String cell : splitRow(lines[i + 1])) {
            if (!SEPARATOR.matcher(cell.replace(" ", "")).matches()) {
                throw new IllegalArgumentException("the table of \"Error codes\" has no separator row");
            }
        }
        List<String> codes = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        for (i += 2; i < lines.length && lines[i].strip().startsWith("|"); i++) {
            List<String> cells = splitRow(lines[i]);
            if (col >= cells.size()) {
                throw new IllegalArgumentException("a row of the table has no code: " + lines[i]);
            }
            String code = cellText(cells.get(col));
            if (!CODE.matcher(code).matches()) {
                throw new IllegalArgumentException("a row of the table has a code that is not one: " + lines[i]);
            }
            if (!seen.add(code)) {
                throw new IllegalArgumentException("a code is listed twice: " + code);
            }
            codes.add(code);
        }
        return codes;
    }

    /** The codes of protocol/PROTOCOL.md's table. */
    static List<String> documentedCodes() {
        try {
            return protocolErrorCodes(Files.readString(TestSupport.protocolDoc()));
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void theParserReadsTablesAndRefusesOthers() {
        String doc = "# P\n\n## Error codes\r\n\nSome prose.\n\n| meaning | `Code` |\n|:---|---:|\n"
                + "| a \\| b | `bad_json` |\n| x | not_held |\n\n| other | table |\n|---|---|\n| no | no |\n";
        assertEquals(List.of("bad_json", "not_held"), protocolErrorCodes(doc));
        Map<String, String> bad = Map.of(
                "no heading", "# P\n| code |\n|---|\n| x |\n",
                "no table", "### Error codes\ntext\n### Next\n| code |\n|---|\n| x |\n",
                "no column", "### Error codes\n| name |\n|---|\n| x |\n",
                "not a code", "### Error codes\n| code |\n|---|\n| Not A Code |\n",
                "twice", "### Error codes\n| code |\n|---|\n| x |\n| x |\n",
                "no separator", "### Error codes\n| code |\n| x |\n");
        for (Map.Entry<String, String> e : bad.entrySet()) {
            assertThrows(IllegalArgumentException.class, () -> protocolErrorCodes(e.getValue()), e.getKey());
        }
    }

    /**
     * Every code of the table has a class of its own whose CODE is the code,
     * and the client knows no code the table does not list.
     */
    @Test
    void everyDocumentedCodeHasItsOwnClass() {
        List<String> codes = documentedCodes();
        assertTrue(codes.size() >= 15, "the table lists " + codes);
        assertEquals(new LinkedHashSet<>(codes), new LinkedHashSet<>(LockBrokerException.knownCodes()),
                "the client's codes and PROTOCOL.md's table differ");
        Set<Class<?>> classes = new HashSet<>();
        for (String code : codes) {
            LockBrokerException e = LockBrokerException.forCode(code, "msg of " + code, "acquire", "x");
            assertNotEquals(LockBrokerException.class, e.getClass(), code);
            assertTrue(classes.add(e.getClass()), code + ": a class shared with another code");
            assertEquals(code, e.code());
            assertEquals("msg of " + code, e.brokerMessage());
            assertEquals("acquire", e.op());
            assertEquals("x", e.lock());
            try {
                assertEquals(code, e.getClass().getField("CODE").get(null), code);
            } catch (ReflectiveOperationException x) {
                throw new AssertionError(code + ": no CODE constant", x);
            }
        }
        LockBrokerException unknown = LockBrokerException.forCode("brand_new_code", "a newer broker's", "ping", null);
        assertSame(LockBrokerException.class, unknown.getClass());
        assertEquals("brand_new_code", unknown.code());
        // The client's own codes and where they sit.
        assertTrue(UnavailableException.class.isAssignableFrom(DisconnectedException.class));
        assertTrue(NotHeldException.class.isAssignableFrom(LeaseLostException.class));
        assertEquals("ping: timeout: m", LockBrokerException.forCode("timeout", "m", "ping", null).getMessage());
        assertEquals("acquire \"a?\": timeout: m",
                LockBrokerException.forCode("timeout", "m", "acquire", "a\u0001").getMessage());
    }
}
