package dev.lockbroker;

// LeaseState - the client's view of one lease token, shared by its handles
// (each reentrant acquire of the same lock by the same owner is answered
// with the same token, count + 1, and gets a Lease handle of its own that
// releases one level). Every mutable field is under client.mu. A state is
// lost at most once, and never once released down to count 0 (done).

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

final class LeaseState {
    final String token;
    final String name;
    final String mode;
    final long fence;
    final boolean detached;
    final String owner;

    long ttlMs;
    int count;
    Session session; // the granting session; null once a detached lease outlived it
    String lostReason; // set (never back to null) when lost
    boolean done; // released down to count 0
    Long counted; // the TTL it counts for in session.ttls (liveness), null if none
    final List<Watcher> watchers = new ArrayList<>(0);
    // Completed (under client.mu) with the reason when lost; nobody but the
    // client adds stages to it, so completing it runs no user code.
    final CompletableFuture<String> lost = new CompletableFuture<>();

    static final class Watcher {
        final Lease handle;
        final Consumer<Lease> fn;

        Watcher(Lease handle, Consumer<Lease> fn) {
            this.handle = handle;
            this.fn = fn;
        }
    }

    LeaseState(String token, String name, String mode, long fence, long ttlMs, int count, boolean detached,
            String owner, Session session) {
        this.token = token;
        this.name = name;
        this.mode = mode;
        this.fence = fence;
        this.ttlMs = ttlMs;
        this.count = count;
        this.detached = detached;
        this.owner = owner;
        this.session = session;
    }
}
