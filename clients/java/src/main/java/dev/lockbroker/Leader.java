package dev.lockbroker;

import java.util.Objects;

/**
 * Who leads an election: the published value, the term (the leader's
 * fence) and the leader's client label. Two leaders are equal when value
 * and term are.
 */
public final class Leader {
    private final String value;
    private final long term;
    private final String client;

    public Leader(String value, long term, String client) {
        this.value = value;
        this.term = term;
        this.client = client;
    }

    /** The published value (null if the leader published none). */
    public String value() {
        return value;
    }

    /** The term: the leader's fence, higher for every new leader. */
    public long term() {
        return term;
    }

    /** The leader's client label. */
    public String client() {
        return client;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof Leader)) {
            return false;
        }
        Leader l = (Leader) o;
        return term == l.term && Objects.equals(value, l.value);
    }

    @Override
    public int hashCode() {
        return Objects.hash(value, term);
    }

    @Override
    public String toString() {
        return "Leader[value=" + value + ", term=" + term + "]";
    }
}
