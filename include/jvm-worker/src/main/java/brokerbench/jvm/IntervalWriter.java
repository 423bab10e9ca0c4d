package brokerbench.jvm;

import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Consumer;

/** The meta, interval and end records of one worker result file (recorder.py IntervalWriter). */
final class IntervalWriter {
    /** faults.py OUTAGE_MIN_SENT: messages sent and none acknowledged in an interval = an outage. */
    static final int OUTAGE_MIN_SENT = 10;

    private final ObjectMapper json = new ObjectMapper();
    private final BufferedWriter out;
    private final Samples.Recorder recorder;
    private final int subscriptions;
    private final Consumer<String> progress;
    private final double intervalS;
    private final String phase;
    private final String worker;
    int index;
    final Map<String, Long> totals = new LinkedHashMap<>();
    long outageIntervals;
    double outageSeconds;
    Integer outageFirst;
    Integer outageLast;
    Map<String, Object> extra = new LinkedHashMap<>();
    final Hist phaseDelay = new Hist();
    final Hist phasePublish = new Hist();
    /** Merged over the current segment (a sweep step): its stability checks. */
    Hist segmentDelay = new Hist();
    Hist segmentPublish = new Hist();
    private Long intervalStartNs;
    Long phaseStartNs;
    private double durationS;
    private Thread thread;
    private volatile boolean stop;
    private final Object lock = new Object();
    private final Object wake = new Object();

    IntervalWriter(Path path, Map<String, Object> meta, Samples.Recorder recorder, int subscriptions,
                   Consumer<String> progress) throws IOException {
        this.recorder = recorder;
        this.subscriptions = subscriptions;
        this.progress = progress;
        this.intervalS = ((Number) meta.get("interval_s")).doubleValue();
        this.phase = String.valueOf(meta.get("phase"));
        this.worker = String.valueOf(meta.get("worker"));
        Path parent = path.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        out = Files.newBufferedWriter(path, StandardCharsets.UTF_8);
        for (String k : new String[] {"sent", "acked", "send_errors", "received"}) {
            totals.put(k, 0L);
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("record", "meta");
        m.putAll(meta);
        write(m);
    }

    private void write(Map<String, Object> record) {
        try {
            out.write(json.writeValueAsString(record));
            out.write('\n');
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    boolean started() {
        return phaseStartNs != null;
    }

    /** Messages sent before the first interval (a measured phase's lead-in), not recorded. */
    long leadInSent;

    /** Begin intervals at startNs; a thread closes one every interval_s. The first start drops the probes. */
    void start(long startNs, double durationS) {
        intervalStartNs = startNs;
        this.durationS = durationS;
        segmentDelay = new Hist();
        segmentPublish = new Hist();
        if (phaseStartNs == null) {
            phaseStartNs = startNs;
            // anything before the start (probes, the lead-in) is not measured
            leadInSent = recorder.swap().delay.recorded();
        }
        stop = false;
        thread = new Thread(this::loop, "interval-writer");
        thread.setDaemon(true);
        thread.start();
    }

    /** Stop the interval clock and close the (partial) interval now. */
    void stopSegment() {
        stop = true;
        synchronized (wake) {
            wake.notifyAll();
        }
        if (thread != null) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            thread = null;
            closeInterval(null);
        }
    }

    /** (sent, acked, received) so far, the open interval included. */
    long[] live() {
        long[] cur = recorder.live();
        synchronized (lock) {
            return new long[] {totals.get("sent") + cur[0], totals.get("acked") + cur[1],
                totals.get("received") + cur[2]};
        }
    }

    private void loop() {
        long period = (long) (intervalS * 1e9);
        long nextEnd = intervalStartNs + period;
        while (!stop) {
            long waitNs = nextEnd - Clock.nowNs();
            if (waitNs > 0) {
                synchronized (wake) {
                    try {
                        if (!stop) {
                            wake.wait(Math.max(1, waitNs / 1_000_000), 0);
                        }
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                continue; // woken early, or to check the time again
            }
            closeInterval(nextEnd);
            nextEnd += period;
        }
    }

    void closeInterval(Long endNs) {
        synchronized (lock) {
            Samples s = recorder.swap();
            long end = endNs != null ? endNs : Clock.nowNs();
            phaseDelay.merge(s.delay);
            segmentDelay.merge(s.delay);
            segmentPublish.merge(s.publish);
            phasePublish.merge(s.publish);
            long sent = s.delay.recorded();
            long acked = s.publish.recorded();
            long received = s.e2e.recorded();
            totals.merge("sent", sent, Long::sum);
            totals.merge("acked", acked, Long::sum);
            totals.merge("send_errors", s.sendErrors, Long::sum);
            totals.merge("received", received, Long::sum);
            if (s.sendErrors > 0 || (sent >= OUTAGE_MIN_SENT && acked == 0)) {
                outageIntervals++;
                outageSeconds += (end - (intervalStartNs == null ? end : intervalStartNs)) / 1e9;
                outageFirst = outageFirst == null ? index : outageFirst;
                outageLast = index;
            }
            long backlog = subscriptions > 0
                ? Math.max(0, totals.get("acked") * subscriptions - totals.get("received")) : 0;
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("record", "interval");
            r.put("index", index);
            r.put("start_ns", intervalStartNs);
            r.put("end_ns", end);
            r.put("sent", sent);
            r.put("acked", acked);
            r.put("send_errors", s.sendErrors);
            r.put("received", received);
            r.put("backlog", backlog);
            r.put("publish_latency_us", s.publish.toMap());
            r.put("publish_delay_us", s.delay.toMap());
            r.put("e2e_latency_us", s.e2e.toMap());
            r.putAll(extra);
            write(r);
            logProgress(r, s, end);
            index++;
            intervalStartNs = end;
        }
    }

    private static String ms(Hist h, double p) {
        Long v = h.percentile(p);
        return v == null ? "-" : String.format("%.2f", v / 1000.0);
    }

    private void logProgress(Map<String, Object> r, Samples s, long end) {
        double secs = Math.max((end - (Long) r.get("start_ns")) / 1e9, 1e-9);
        double elapsed = (end - phaseStartNs) / 1e9;
        progress.accept(String.format(
            "[%s] %s %6.1f/%.0f s | sent %d acked %d recv %d err %d | publish %,.0f msg/s consume %,.0f msg/s | "
                + "publish p99 %s ms e2e p99 %s ms delay p99 %s ms | backlog %d",
            worker, phase, elapsed, durationS, r.get("sent"), r.get("acked"), r.get("received"),
            r.get("send_errors"), (Long) r.get("acked") / secs, (Long) r.get("received") / secs, ms(s.publish, 99),
            ms(s.e2e, 99), ms(s.delay, 99), r.get("backlog")));
    }

    /** Close the last (partial) interval and write the end record. */
    void finish(String status, String error, Map<String, Object> extraEnd) {
        stopSegment();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("record", "end");
        r.put("end_ns", Clock.nowNs());
        r.put("status", status);
        r.put("error", error);
        r.put("totals", totals);
        r.putAll(extraEnd);
        write(r);
        try {
            out.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
