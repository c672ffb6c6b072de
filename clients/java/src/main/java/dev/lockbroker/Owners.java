package dev.lockbroker;

// Owners - reentrancy owners: one per thread by default, unique in the
// process and never reused (a thread id can be), e.g. "main#1"; and a
// fresh one for each asynchronous acquire, which no thread owns.

import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;

final class Owners {
    private static final AtomicLong SEQ = new AtomicLong();
    private static final ThreadLocal<String> THREAD_OWNER =
            ThreadLocal.withInitial(() -> label(Thread.currentThread().getName()));

    private Owners() {}

    static String current() {
        return THREAD_OWNER.get();
    }

    static String fresh() {
        return "async#" + SEQ.incrementAndGet();
    }

    /** name cut to at most 96 UTF-8 bytes (whole characters), then #N. */
    private static String label(String name) {
        StringBuilder sb = new StringBuilder();
        int bytes = 0;
        for (int i = 0; i < name.length();) {
            int cp = name.codePointAt(i);
            int n = new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8).length;
            if (cp < 0x20 || cp == 0x7F || (cp >= 0xD800 && cp <= 0xDFFF) || bytes + n > 96) {
                break;
            }
            sb.appendCodePoint(cp);
            bytes += n;
            i += Character.charCount(cp);
        }
        return sb.append('#').append(SEQ.incrementAndGet()).toString();
    }
}
