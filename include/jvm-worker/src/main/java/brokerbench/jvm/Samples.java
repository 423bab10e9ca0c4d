package brokerbench.jvm;

import org.HdrHistogram.WriterReaderPhaser;

/**
 * The measurements of one interval (recorder.py Samples), recorded straight into histograms. Writers (the
 * producer threads, the client's callback and listener threads) record under a {@link WriterReaderPhaser}
 * critical section, so the interval writer's swap never loses a sample: every sample is counted in exactly
 * one interval. Each histogram has its own lock against concurrent writers of the same kind.
 */
final class Samples {
    final Hist publish = new Hist();
    final Hist delay = new Hist();
    final Hist e2e = new Hist();
    long sendErrors;

    /** Holds the current Samples; the hot path goes through {@link #publishNs}, {@link #delayNs}, {@link #e2eNs}. */
    static final class Recorder {
        private final WriterReaderPhaser phaser = new WriterReaderPhaser();
        private volatile Samples s = new Samples();
        volatile String lastError;

        void publishNs(long ns) {
            long c = phaser.writerCriticalSectionEnter();
            try {
                Samples cur = s;
                synchronized (cur.publish) {
                    cur.publish.recordNs(ns);
                }
            } finally {
                phaser.writerCriticalSectionExit(c);
            }
        }

        void delayNs(long ns) {
            long c = phaser.writerCriticalSectionEnter();
            try {
                Samples cur = s;
                synchronized (cur.delay) {
                    cur.delay.recordNs(ns);
                }
            } finally {
                phaser.writerCriticalSectionExit(c);
            }
        }

        void e2eNs(long ns) {
            long c = phaser.writerCriticalSectionEnter();
            try {
                Samples cur = s;
                synchronized (cur.e2e) {
                    cur.e2e.recordNs(ns);
                }
            } finally {
                phaser.writerCriticalSectionExit(c);
            }
        }

        void error(Throwable e) {
            long c = phaser.writerCriticalSectionEnter();
            try {
                Samples cur = s;
                synchronized (cur) {
                    cur.sendErrors++;
                }
                lastError = String.valueOf(e);
            } finally {
                phaser.writerCriticalSectionExit(c);
            }
        }

        /** The current samples' counts (sent, acked, received): approximate, for live progress. */
        long[] live() {
            Samples cur = s;
            return new long[] {cur.delay.recorded(), cur.publish.recorded(), cur.e2e.recorded(), cur.sendErrors};
        }

        /** Swap in fresh samples and return the old ones, complete: every writer that had them has finished. */
        Samples swap() {
            phaser.readerLock();
            try {
                Samples old = s;
                s = new Samples();
                phaser.flipPhase();
                return old;
            } finally {
                phaser.readerUnlock();
            }
        }
    }
}
