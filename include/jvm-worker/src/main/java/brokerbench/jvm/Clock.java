package brokerbench.jvm;

/**
 * Wall-clock nanoseconds since the epoch (Python's time.time_ns(), the clock of the 8-byte send stamp),
 * read as one System.nanoTime() plus the offset taken at start-up: nanosecond resolution at the cost of a
 * monotonic clock read. Over a phase of minutes its drift from the system's wall clock is what NTP slews
 * (parts per million).
 */
final class Clock {
    private static final long OFFSET;

    static {
        long best = Long.MAX_VALUE;
        long offset = 0;
        // the offset of the read with the smallest gap between the two clocks' reads
        for (int i = 0; i < 100; i++) {
            long a = System.nanoTime();
            java.time.Instant now = java.time.Instant.now();
            long b = System.nanoTime();
            if (b - a < best) {
                best = b - a;
                offset = now.getEpochSecond() * 1_000_000_000L + now.getNano() - (a + (b - a) / 2);
            }
        }
        OFFSET = offset;
    }

    private Clock() {
    }

    static long nowNs() {
        return System.nanoTime() + OFFSET;
    }
}
