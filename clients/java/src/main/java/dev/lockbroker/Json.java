package dev.lockbroker;

// Json - the client's JSON: a strict reader for the broker's lines and a
// writer for requests. No I/O.
//
// Reader: recursive descent over the bytes of one line. It accepts exactly
// RFC 8259 JSON: no trailing commas, no comments, no control characters in
// strings, valid UTF-8 only (raw or escaped: a high surrogate escape must pair with
// a low surrogate), no duplicate keys within an object, nesting at most
// MAX_DEPTH deep, nothing after the value but whitespace. Values come out as
// Map<String, Object> (insertion order), List<Object>, String, Long (an
// integer without fraction or exponent that fits in 64 bits), Double (any
// other number), Boolean, and null.
//
// Writer: Map, List, String, Long/Integer, Boolean and null. Strings are
// escaped (", \, every char below 0x20 and 0x7F as a six-char escape or its short
// form); a lone surrogate cannot be UTF-8 and is refused.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class Json {
    static final int MAX_DEPTH = 64;

    private Json() {}

    /** A line that is not JSON as this reader accepts it. */
    static final class JsonException extends Exception {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    // ---- reader -----------------------------------------------------------

    static Object parse(byte[] b) throws JsonException {
        return parse(b, 0, b.length);
    }

    /** Parses the bytes b[off, off+len) as one JSON value. */
    static Object parse(byte[] b, int off, int len) throws JsonException {
        Reader r = new Reader(b, off, off + len);
        r.ws();
        Object v = r.value(0);
        r.ws();
        if (r.pos != r.end) {
            throw r.fail("unexpected data after the value");
        }
        return v;
    }

    private static final class Reader {
        final byte[] b;
        int pos;
        final int end;
        final int start;
        final StringBuilder sb = new StringBuilder();

        Reader(byte[] b, int off, int end) {
            this.b = b;
            this.pos = off;
            this.start = off;
            this.end = end;
        }

        JsonException fail(String what) {
            return new JsonException("invalid JSON at byte " + (pos - start) + ": " + what);
        }

        void ws() {
            while (pos < end) {
                byte c = b[pos];
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                pos++;
            }
        }

        Object value(int depth) throws JsonException {
            if (pos >= end) {
                throw fail("expected a value");
            }
            byte c = b[pos];
            switch (c) {
                case '{':
                    return object(depth + 1);
                case '[':
                    return array(depth + 1);
                case '"':
                    return string();
                case 't':
                    word("true");
                    return Boolean.TRUE;
                case 'f':
                    word("false");
                    return Boolean.FALSE;
                case 'n':
                    word("null");
                    return null;
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return number();
                    }
                    throw fail("expected a value");
            }
        }

        void word(String w) throws JsonException {
            int n = w.length();
            if (end - pos < n) {
                throw fail("expected " + w);
            }
            for (int i = 0; i < n; i++) {
                if (b[pos + i] != w.charAt(i)) {
                    throw fail("expected " + w);
                }
            }
            pos += n;
        }

        Map<String, Object> object(int depth) throws JsonException {
            if (depth > MAX_DEPTH) {
                throw fail("nested deeper than " + MAX_DEPTH);
            }
            pos++; // {
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (pos < end && b[pos] == '}') {
                pos++;
                return m;
            }
            for (;;) {
                ws();
                if (pos >= end || b[pos] != '"') {
                    throw fail("expected a string key");
                }
                String k = string();
                if (m.containsKey(k)) {
                    throw fail("duplicate key");
                }
                ws();
                if (pos >= end || b[pos] != ':') {
                    throw fail("expected ':'");
                }
                pos++;
                ws();
                m.put(k, value(depth));
                ws();
                if (pos < end && b[pos] == ',') {
                    pos++;
                    continue;
                }
                if (pos < end && b[pos] == '}') {
                    pos++;
                    return m;
                }
                throw fail("expected ',' or '}'");
            }
        }

        List<Object> array(int depth) throws JsonException {
            if (depth > MAX_DEPTH) {
                throw fail("nested deeper than " + MAX_DEPTH);
            }
            pos++; // [
            List<Object> a = new ArrayList<>();
            ws();
            if (pos < end && b[pos] == ']') {
                pos++;
                return a;
            }
            for (;;) {
                ws();
                a.add(value(depth));
                ws();
                if (pos < end && b[pos] == ',') {
                    pos++;
                    continue;
                }
                if (pos < end && b[pos] == ']') {
                    pos++;
                    return a;
                }
                throw fail("expected ',' or ']'");
            }
        }

        Object number() throws JsonException {
            int s = pos;
            if (b[pos] == '-') {
                pos++;
            }
            if (pos >= end) {
                throw fail("bad number");
            }
            if (b[pos] == '0') {
                pos++;
            } else if (b[pos] >= '1' && b[pos] <= '9') {
                while (pos < end && b[pos] >= '0' && b[pos] <= '9') {
                    pos++;
                }
            } else {
                throw fail("bad number");
            }
            boolean integer = true;
            if (pos < end && b[pos] == '.') {
                integer = false;
                pos++;
                int d = pos;
                while (pos < end && b[pos] >= '0' && b[pos] <= '9') {
                    pos++;
                }
                if (pos == d) {
                    throw fail("bad number");
                }
            }
            if (pos < end && (b[pos] == 'e' || b[pos] == 'E')) {
                integer = false;
                pos++;
                if (pos < end && (b[pos] == '+' || b[pos] == '-')) {
                    pos++;
                }
                int d = pos;
                while (pos < end && b[pos] >= '0' && b[pos] <= '9') {
                    pos++;
                }
                if (pos == d) {
                    throw fail("bad number");
                }
            }
            String text = new String(b, s, pos - s, StandardCharsets.US_ASCII);
            if (integer) {
                try {
                    return Long.parseLong(text);
                } catch (NumberFormatException e) {
                    // beyond 64 bits: a double like any other number
                }
            }
            return Double.parseDouble(text);
        }

        String string() throws JsonException {
            pos++; // opening quote
            sb.setLength(0);
            for (;;) {
                if (pos >= end) {
                    throw fail("unterminated string");
                }
                int c = b[pos] & 0xff;
                if (c == '"') {
                    pos++;
                    return sb.toString();
                }
                if (c == '\\') {
                    escape();
                    continue;
                }
                if (c < 0x20) {
                    throw fail("control character in a string");
                }
                if (c < 0x80) {
                    sb.append((char) c);
                    pos++;
                    continue;
                }
                utf8(c);
            }
        }

        private void escape() throws JsonException {
            pos++; // backslash
            if (pos >= end) {
                throw fail("unterminated escape");
            }
            byte e = b[pos++];
            switch (e) {
                case '"':
                    sb.append('"');
                    return;
                case '\\':
                    sb.append('\\');
                    return;
                case '/':
                    sb.append('/');
                    return;
                case 'b':
                    sb.append('\b');
                    return;
                case 'f':
                    sb.append('\f');
                    return;
                case 'n':
                    sb.append('\n');
                    return;
                case 'r':
                    sb.append('\r');
                    return;
                case 't':
                    sb.append('\t');
                    return;
                case 'u':
                    int u = hex4();
                    if (u >= 0xD800 && u <= 0xDBFF) {
                        if (end - pos < 6 || b[pos] != '\\' || b[pos + 1] != 'u') {
                            throw fail("unpaired surrogate escape");
                        }
                        pos += 2;
                        int lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) {
                            throw fail("unpaired surrogate escape");
                        }
                        sb.append((char) u).append((char) lo);
                        return;
                    }
                    if (u >= 0xDC00 && u <= 0xDFFF) {
                        throw fail("unpaired surrogate escape");
                    }
                    sb.append((char) u);
                    return;
                default:
                    pos--;
                    throw fail("bad escape");
            }
        }

        private int hex4() throws JsonException {
            if (end - pos < 4) {
                throw fail("bad \\u escape");
            }
            int v = 0;
            for (int i = 0; i < 4; i++) {
                int c = b[pos++];
                int d;
                if (c >= '0' && c <= '9') {
                    d = c - '0';
                } else if (c >= 'a' && c <= 'f') {
                    d = c - 'a' + 10;
                } else if (c >= 'A' && c <= 'F') {
                    d = c - 'A' + 10;
                } else {
                    pos--;
                    throw fail("bad \\u escape");
                }
                v = v << 4 | d;
            }
            return v;
        }

        /** One multi-byte UTF-8 sequence starting with lead byte c, strictly. */
        private void utf8(int c) throws JsonException {
            int n;
            int cp;
            int min;
            if (c >= 0xC2 && c <= 0xDF) {
                n = 1;
                cp = c & 0x1F;
                min = 0x80;
            } else if (c >= 0xE0 && c <= 0xEF) {
                n = 2;
                cp = c & 0x0F;
                min = 0x800;
            } else if (c >= 0xF0 && c <= 0xF4) {
                n = 3;
                cp = c & 0x07;
                min = 0x10000;
            } else {
                throw fail("invalid UTF-8");
            }
            if (end - pos <= n) {
                throw fail("invalid UTF-8");
            }
            for (int i = 1; i <= n; i++) {
                int cc = b[pos + i] & 0xff;
                if ((cc & 0xC0) != 0x80) {
                    throw fail("invalid UTF-8");
                }
                cp = cp << 6 | (cc & 0x3F);
            }
            if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                throw fail("invalid UTF-8");
            }
            sb.appendCodePoint(cp);
            pos += n + 1;
        }
    }

    // ---- writer -----------------------------------------------------------

    /** The JSON text of v; IllegalArgumentException for what JSON cannot carry. */
    static String write(Object v) {
        StringBuilder sb = new StringBuilder(64);
        write(sb, v);
        return sb.toString();
    }

    static void write(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            string(sb, (String) v);
        } else if (v instanceof Boolean) {
            sb.append(((Boolean) v).booleanValue() ? "true" : "false");
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short) {
            sb.append(((Number) v).longValue());
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!(e.getKey() instanceof String)) {
                    throw new IllegalArgumentException("a JSON object key must be a string");
                }
                if (!first) {
                    sb.append(',');
                }
                first = false;
                string(sb, (String) e.getKey());
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object o : (List<?>) v) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                write(sb, o);
            }
            sb.append(']');
        } else {
            throw new IllegalArgumentException("JSON cannot carry a " + v.getClass().getSimpleName());
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    static void string(StringBuilder sb, String s) {
        sb.append('"');
        int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                case '\b':
                    sb.append("\\b");
                    break;
                case '\f':
                    sb.append("\\f");
                    break;
                default:
                    if (c < 0x20 || c == 0x7F) {
                        sb.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xF]);
                    } else if (Character.isHighSurrogate(c)) {
                        if (i + 1 >= n || !Character.isLowSurrogate(s.charAt(i + 1))) {
                            throw new IllegalArgumentException("a string holds a lone surrogate (not valid Unicode)");
                        }
                        sb.append(c).append(s.charAt(++i));
                    } else if (Character.isLowSurrogate(c)) {
                        throw new IllegalArgumentException("a string holds a lone surrogate (not valid Unicode)");
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    /** Whether s can be encoded as UTF-8 (no lone surrogate). */
    static boolean validUnicode(String s) {
        int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 >= n || !Character.isLowSurrogate(s.charAt(i + 1))) {
                    return false;
                }
                i++;
            } else if (Character.isLowSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
