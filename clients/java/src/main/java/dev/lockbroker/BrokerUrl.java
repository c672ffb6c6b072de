package dev.lockbroker;

// BrokerUrl - a broker's address: tcp://HOST:PORT (tcp://[V6]:PORT) or
// unix:///PATH, as lockctl and the other clients take it, and the default
// one.

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;

final class BrokerUrl {
    static final String DEFAULT_UNIX_SOCKET = "/run/lockbroker/lockbroker.sock";
    static final String DEFAULT_TCP_URL = "tcp://127.0.0.1:7380";

    final boolean unix;
    final String host;
    final int port;
    final String path;

    private BrokerUrl(boolean unix, String host, int port, String path) {
        this.unix = unix;
        this.host = host;
        this.port = port;
        this.path = path;
    }

    /** $LOCKBROKER_URL, else the default Unix socket if it exists, else tcp://127.0.0.1:7380. */
    static String defaultUrl() {
        String env = System.getenv("LOCKBROKER_URL");
        if (env != null && !env.isEmpty()) {
            return env;
        }
        if (Files.exists(Path.of(DEFAULT_UNIX_SOCKET))) {
            return "unix://" + DEFAULT_UNIX_SOCKET;
        }
        return DEFAULT_TCP_URL;
    }

    private static InvalidArgumentException bad(String url, String want) {
        return new InvalidArgumentException("bad broker URL \"" + LockBrokerException.printable(url) + "\": " + want,
                null, null);
    }

    static BrokerUrl parse(String url) {
        if (url == null || url.isEmpty()) {
            throw new InvalidArgumentException("empty broker URL", null, null);
        }
        if (url.startsWith("unix://")) {
            String p = url.substring(7);
            if (!p.startsWith("/")) {
                throw bad(url, "the socket path must be absolute (unix:///PATH)");
            }
            if (p.endsWith("/") || p.indexOf('?') >= 0 || p.indexOf('#') >= 0 || p.indexOf('\0') >= 0) {
                throw bad(url, "want unix:///PATH");
            }
            return new BrokerUrl(true, null, 0, p);
        }
        if (url.startsWith("tcp://")) {
            String rest = url.substring(6);
            for (char c : new char[] {'/', '?', '#', '@'}) {
                if (rest.indexOf(c) >= 0) {
                    throw bad(url, "want tcp://HOST:PORT, nothing more");
                }
            }
            String host;
            String portText;
            if (rest.startsWith("[")) {
                int close = rest.indexOf(']');
                if (close < 0 || close + 1 >= rest.length() || rest.charAt(close + 1) != ':') {
                    throw bad(url, "want tcp://[V6ADDR]:PORT");
                }
                host = rest.substring(1, close);
                portText = rest.substring(close + 2);
            } else {
                int colon = rest.lastIndexOf(':');
                if (colon < 0 || rest.indexOf(':') != colon) {
                    throw bad(url, "want tcp://HOST:PORT");
                }
                host = rest.substring(0, colon);
                portText = rest.substring(colon + 1);
            }
            int port = -1;
            if (!portText.isEmpty() && portText.length() <= 5 && portText.chars().allMatch(ch -> ch >= '0' && ch <= '9')) {
                port = Integer.parseInt(portText);
            }
            if (host.isEmpty() || port < 1 || port > 65535) {
                throw bad(url, "want tcp://HOST:PORT, port 1..65535");
            }
            return new BrokerUrl(false, host, port, null);
        }
        throw bad(url, "want tcp://HOST:PORT or unix:///PATH");
    }

    /** The socket address (a TCP host name is resolved now). */
    SocketAddress address() {
        if (unix) {
            return UnixDomainSocketAddress.of(path);
        }
        return new InetSocketAddress(host, port);
    }

    @Override
    public String toString() {
        if (unix) {
            return "unix://" + path;
        }
        return "tcp://" + (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
    }
}
