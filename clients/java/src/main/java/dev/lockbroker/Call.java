package dev.lockbroker;

// Call - one request waiting for its answer. It is registered in its
// session's pending table (under client.mu) before its line is written, so
// its answer always finds it; the I/O thread (or the session's teardown)
// sets result or error under client.mu, then completes done outside it.
// done has no dependent stage of a user: sync callers wait on it, and the
// asynchronous API completes its own futures from it on an executor.

import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

final class Call {
    final long id;
    final String op;
    final String lock;
    final Map<String, Object> fields;
    final Object meta; // AcquireMeta for acquire and acquire_all, a watch's sink for watch
    final Session session;
    final CompletableFuture<Object> done = new CompletableFuture<>();

    // under client.mu
    Object result;
    LockBrokerException error;
    boolean abandoned; // an acquire whose caller gave up: a grant is given back

    final AtomicBoolean givenUp = new AtomicBoolean(); // abandon() ran once

    Call(long id, String op, String lock, Map<String, Object> fields, Object meta, Session session) {
        this.id = id;
        this.op = op;
        this.lock = lock;
        this.fields = fields;
        this.meta = meta;
        this.session = session;
    }

    /** (Outside client.mu.) Wakes whoever waits. */
    void finish(Object r, LockBrokerException e) {
        if (e != null) {
            done.completeExceptionally(e);
        } else {
            done.complete(r);
        }
    }

    /** Waits for the answer; its error is thrown with the caller's stack. */
    Object await() throws InterruptedException {
        try {
            return done.get();
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        }
    }

    /** Waits without giving up on an interrupt; the interrupt status is kept. */
    Object awaitUninterruptibly() {
        boolean interrupted = false;
        try {
            for (;;) {
                try {
                    return await();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    static RuntimeException rethrow(Throwable t) {
        if (t instanceof LockBrokerException) {
            t.fillInStackTrace(); // one call's own exception: its waiter's stack
            return (LockBrokerException) t;
        }
        if (t instanceof RuntimeException) {
            return (RuntimeException) t;
        }
        if (t instanceof Error) {
            throw (Error) t;
        }
        return new IllegalStateException(t);
    }
}
