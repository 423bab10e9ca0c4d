package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

/**
 * One worker process running one phase of one workload: the Python worker's runner.py (_Phase), in Java.
 * Connect (consumers first), readiness probe, the open-loop schedule of every producer, intervals as they
 * close, flush, bounded drain, the end record with the validity flags.
 */
final class Phase {
    static final double ACHIEVED_MIN_RATIO = 0.99;
    /** % of the cores the process may use: a JVM is not held to one core by a GIL (docs/worker.md). */
    static final double CLIENT_CPU_BOUND_PERCENT_PER_CORE = 85.0;
    static final double CLOCK_OFFSET_WARN_MS = 1.0;
    static final double HOST_CPU_BOUND_PERCENT = 90.0;
    static final double DELAY_P99_BOUND_MS = 50.0;
    /** throughput-sweep: a step's publish latency p99 bound, ms, unless the workload's sweepMaxPublishP99Ms
     *  says otherwise (job.py SWEEP_MAX_PUBLISH_P99_MS). */
    static final double SWEEP_MAX_PUBLISH_P99_MS = 200.0;
    /** From the end of a measured phase's lead-in to its first interval, s (modes.py LEAD_IN_SETTLE_S). */
    static final double LEAD_IN_SETTLE_S = 0.5;
    static final double[] SWEEP_RATES = {1_000, 5_000, 10_000, 20_000, 35_000, 50_000, 75_000, 100_000, 200_000,
        500_000, 1_000_000};

    final JsonNode job;
    final JsonNode workload;
    final String kind;
    final List<String> topics = new ArrayList<>();
    final int partitions;
    final double durationS;
    /** Load at the target rate before the first interval, not recorded (the clients' start-up), s (job.py lead_in_for). */
    final double leadInS;
    final double intervalS;
    double rate;
    final List<String> subs = new ArrayList<>();
    int ppt;
    int cps;
    double[] sweepRates;
    final Samples.Recorder recorder = new Samples.Recorder();
    final IntervalWriter writer;
    final Consumer<String> progress;
    final List<String> errors = new CopyOnWriteArrayList<>();
    final Map<String, Object> extraEnd = new LinkedHashMap<>();
    final List<String> reasons = new ArrayList<>();
    final List<Driver.Consumer> consumers = new ArrayList<>();
    final List<Driver.Producer> producers = new ArrayList<>();
    final Set<String> seen = Collections.synchronizedSet(new HashSet<>());
    volatile boolean measuring;
    Driver driver;
    double loadS;
    long undrained;
    Double sweepTarget;
    Double sweepAchieved;
    Long sweepDelay;

    static String workloadKind(JsonNode workload, String kind) {
        if (kind == null || kind.isEmpty()) {
            kind = workload.path("kind").asText("");
        }
        if (!kind.isEmpty()) {
            return kind;
        }
        int producers = workload.path("producersPerTopic").asInt(1);
        int consumers = workload.path("subscriptionsPerTopic").asInt(1) * workload.path("consumerPerSubscription").asInt(1);
        if (workload.path("consumerBacklogSizeGB").asDouble(0) > 0) {
            return "backlog";
        }
        if (producers == 0) {
            return "consumer-only";
        }
        if (consumers == 0) {
            return "producer-only";
        }
        if (workload.path("producerRate").asDouble(0) == 0) {
            return "throughput-sweep";
        }
        return "latency";
    }

    Phase(JsonNode job, Path out, Consumer<String> progress, Map<String, Object> engine) throws Exception {
        this.job = job;
        this.progress = progress;
        this.workload = job.path("workload");
        this.kind = workloadKind(workload, job.path("kind").asText(""));
        if (!List.of("latency", "producer-only", "consumer-only", "throughput-sweep").contains(kind)) {
            throw new Driver.BadInput("the JVM engine does not run the '" + kind + "' kind yet (it runs latency, "
                + "producer-only, consumer-only and throughput-sweep)");
        }
        job.path("topics").forEach(t -> topics.add(t.asText()));
        partitions = workload.path("partitionsPerTopic").asInt(1);
        durationS = job.path("duration_s").asDouble();
        leadInS = job.path("lead_in_s").asDouble(0.0);
        intervalS = job.path("interval_s").asDouble(10.0);
        rate = job.path("rate_msg_s").asDouble(0.0);
        ppt = job.path("producers_per_topic").asInt(0);
        cps = job.path("consumers_per_subscription").asInt(0);
        if (kind.equals("consumer-only")) {
            ppt = 0;
        }
        if (kind.equals("producer-only")) {
            cps = 0;
            if (rate <= 0) {
                rate = Double.POSITIVE_INFINITY;
            }
        }
        if (cps > 0) {
            job.path("subscriptions").forEach(s -> subs.add(s.asText()));
        }
        if (kind.equals("throughput-sweep")) {
            JsonNode r = job.path("sweep_rates_msg_s");
            if (r.isArray() && r.size() > 0) {
                sweepRates = new double[r.size()];
                for (int i = 0; i < r.size(); i++) {
                    sweepRates[i] = r.get(i).asDouble();
                }
            } else {
                sweepRates = SWEEP_RATES.clone();
            }
        }
        driver = Driver.create(job.path("broker").asText(), job.path("endpoint"), job.path("driver"), recorder);
        writer = new IntervalWriter(out, meta(engine), recorder, subs.size(), progress);
    }

    int nProducers() {
        return ppt * topics.size();
    }

    private Map<String, Object> meta(Map<String, Object> engine) throws Exception {
        Object target;
        if (nProducers() == 0) {
            target = 0;
        } else if (kind.equals("throughput-sweep")) {
            double max = 0;
            for (double r : sweepRates) {
                max = Math.max(max, r);
            }
            target = max;
        } else {
            target = Double.isInfinite(rate) ? null : rate;
        }
        JsonNode endpoint = job.path("endpoint");
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("format_version", 1);
        m.put("kind", kind);
        m.put("workload", text(job.path("workload_id")));
        m.put("workload_name", workload.hasNonNull("name") ? workload.get("name").asText() : text(job.path("workload_id")));
        m.put("driver", job.path("driver").hasNonNull("name") ? job.path("driver").get("name").asText()
            : job.path("broker").asText());
        m.put("broker", job.path("broker").asText());
        m.put("variant", text(job.path("variant")));
        m.put("phase", job.path("phase").asText());
        m.put("worker", job.path("worker").asText());
        m.put("host", hostname());
        m.put("interval_s", intervalS);
        m.put("target_rate_msg_s", target);
        m.put("message_size_bytes", workload.path("messageSize").asInt());
        m.put("topics", topics.size());
        m.put("partitions_per_topic", partitions);
        m.put("producers", nProducers());
        m.put("consumers", cps * subs.size() * topics.size());
        m.put("subscriptions_per_topic", subs.size());
        m.put("client_library", driver.clientLibrary());
        m.put("client_library_version", driver.clientLibraryVersion());
        m.put("brokerbench_version", System.getProperty("brokerbench.version", "unknown"));
        m.put("broker_implementation", text(endpoint.path("implementation")));
        m.put("broker_version", text(endpoint.path("version")));
        m.put("start_at_ns", job.hasNonNull("start_at_ns") ? job.get("start_at_ns").asLong() : null);
        m.put("lead_in_s", leadInS);
        m.putAll(engine);
        if (kind.equals("throughput-sweep")) {
            List<Double> rates = new ArrayList<>();
            for (double r : sweepRates) {
                rates.add(r);
            }
            m.put("sweep_rates_msg_s", rates);
        }
        return m;
    }

    private static String text(JsonNode n) {
        return n == null || n.isNull() || n.isMissingNode() ? null : n.asText();
    }

    static String hostname() throws Exception {
        return Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
    }

    void say(String text) {
        progress.accept("[" + job.path("worker").asText() + "] " + text);
    }

    long backlog() {
        long[] live = writer.live();
        return subs.isEmpty() ? 0 : Math.max(0, live[1] * subs.size() - live[2]);
    }

    // -- the schedule ------------------------------------------------------------------------------------------

    /** One producer's open-loop schedule (runner.py _producer_loop): intended_i = start + i / rate. */
    private void producerLoop(Driver.Producer producer, double rate, long startNs, long endNs, List<byte[]> pool,
                              String[] keys, boolean[] stop) {
        boolean unthrottled = Double.isInfinite(rate);
        double period = unthrottled ? 0 : 1e9 / rate;
        int n = pool.size();
        int nk = keys.length;
        long i = 0;
        try {
            while (!stop[0]) {
                for (int b = 0; b < 256; b++) {
                    long now = Clock.nowNs();
                    long intended;
                    if (unthrottled) {
                        if (now >= endNs) {
                            return;
                        }
                        intended = now;
                    } else {
                        intended = startNs + (long) (i * period);
                        if (intended >= endNs) {
                            return;
                        }
                        while (now < intended) {
                            if (stop[0]) {
                                return;
                            }
                            LockSupport.parkNanos(intended - now);
                            now = Clock.nowNs();
                        }
                    }
                    recorder.delayNs(now - intended);
                    producer.send(Payloads.message(now, pool.get((int) (i % n))), keys[(int) (i % nk)], now);
                    i++;
                }
            }
        } catch (Exception e) {
            errors.add("producer: " + e.getClass().getSimpleName() + ": " + e.getMessage());
            recorder.error(e);
        }
    }

    List<Thread> startProducers(double rate, long startNs, long endNs, boolean[] stop) throws Exception {
        List<byte[]> pool = Payloads.pool(workload);
        double per = rate / producers.size();
        List<Thread> threads = new ArrayList<>();
        for (int k = 0; k < producers.size(); k++) {
            Driver.Producer p = producers.get(k);
            String[] keys = Payloads.keys(workload.path("keyDistributor").asText(""));
            Thread t = new Thread(() -> producerLoop(p, per, startNs, endNs, pool, keys, stop), "producer-" + k);
            t.setDaemon(true);
            threads.add(t);
        }
        threads.forEach(Thread::start);
        return threads;
    }

    static void sleepS(double s) {
        if (s > 0) {
            LockSupport.parkNanos((long) (s * 1e9));
        }
    }

    void waitUntil(long endNs, BooleanSupplier until) {
        while (Clock.nowNs() < endNs && errors.isEmpty()) {
            if (until != null && until.getAsBoolean()) {
                return;
            }
            sleepS(Math.min(0.1, Math.max(0.0, (endNs - Clock.nowNs()) / 1e9)));
        }
    }

    static void join(List<Thread> threads, double timeoutS) throws InterruptedException {
        long deadline = System.nanoTime() + (long) (timeoutS * 1e9);
        for (Thread t : threads) {
            t.join(Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
        }
    }

    void flushAndDrain() throws Exception {
        double timeout = job.path("drain_timeout_s").asDouble(10.0);
        long t0 = System.nanoTime();
        for (Driver.Producer p : producers) {
            p.flush();
        }
        double flush = ((Number) extraEnd.getOrDefault("flush_s", 0.0)).doubleValue() + (System.nanoTime() - t0) / 1e9;
        extraEnd.put("flush_s", Math.round(flush * 1e4) / 1e4);
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        while (!consumers.isEmpty() && System.nanoTime() < deadline && errors.isEmpty()) {
            if (backlog() == 0) {
                sleepS(0.2);
                break;
            }
            sleepS(0.05);
        }
        if (!consumers.isEmpty() && ownsSubscriptions()) {
            undrained = backlog();
        }
    }

    boolean ownsSubscriptions() {
        int total = job.hasNonNull("consumers_in_subscription") ? job.get("consumers_in_subscription").asInt() : cps;
        return total <= cps;
    }

    // -- set-up -----------------------------------------------------------------------------------------------

    void connect() throws Exception {
        int offset = job.path("consumer_index_offset").asInt(0);
        int totalInSub = job.hasNonNull("consumers_in_subscription") ? job.get("consumers_in_subscription").asInt()
            : (cps > 0 ? cps : 1);
        String start = kind.equals("consumer-only") ? "earliest" : "latest";
        for (String t : topics) {
            for (String s : subs) {
                String probeKey = t + "\u0000" + s;
                Driver.PayloadHandler handler = b -> {
                    long stamp = Payloads.stamp(b);
                    if (stamp == 0) {
                        seen.add(probeKey);
                    } else if (measuring) {
                        recorder.e2eNs(Clock.nowNs() - stamp);
                    }
                };
                for (int c = 0; c < cps; c++) {
                    consumers.add(driver.createConsumer(t, s, partitions, handler, offset + c, totalInSub, start,
                        false));
                }
            }
        }
        for (String t : topics) {
            for (int k = 0; k < ppt; k++) {
                producers.add(driver.createProducer(t, partitions));
            }
        }
        String rateText = kind.equals("throughput-sweep") ? "a sweep over " + sweepRates.length + " rates"
            : Double.isInfinite(rate) ? "unthrottled" : String.format("%,.0f msg/s", rate);
        say(String.format("%s (%s): %d producers at %s in total, %d consumers, topics %s", job.path("phase").asText(),
            kind, producers.size(), rateText, consumers.size(), String.join(", ", topics)));
    }

    /** OMB's readiness check: a probe per producer until every subscription received one (bounded). */
    void probe() throws Exception {
        if (producers.isEmpty()) {
            return;
        }
        double timeout = job.path("probe_timeout_s").asDouble(60.0);
        long t0 = System.nanoTime();
        long deadline = t0 + (long) (timeout * 1e9);
        byte[] tail = Payloads.pool(workload).get(0);
        Set<String> wanted = new HashSet<>();
        for (String t : topics) {
            for (String s : subs) {
                wanted.add(t + "\u0000" + s);
            }
        }
        int rounds = 0;
        while (true) {
            long acked = writer.live()[1];
            long joining = consumers.stream().filter(c -> !c.ready()).count();
            if (seen.containsAll(wanted) && acked >= producers.size() && joining == 0) {
                break;
            }
            if (!errors.isEmpty() || recorder.live()[3] > 0) {
                throw new PhaseError("readiness probe: sending failed: "
                    + (recorder.lastError != null ? recorder.lastError : errors));
            }
            if (System.nanoTime() > deadline) {
                List<String> missing = new ArrayList<>();
                for (String w : wanted) {
                    if (!seen.contains(w)) {
                        String[] ts = w.split("\u0000");
                        missing.add("subscription " + ts[1] + " of topic " + ts[0]);
                    }
                }
                Collections.sort(missing);
                if (acked < producers.size()) {
                    missing.add("an acknowledgement for " + (producers.size() - acked) + " of " + producers.size()
                        + " producers");
                }
                throw new PhaseError("readiness probe: nothing arrived on " + String.join(", ", missing) + " within "
                    + timeout + " s");
            }
            if (rounds == 0 || !seen.containsAll(wanted)) {
                for (int i = 0; i < producers.size(); i++) {
                    Driver.Producer p = producers.get(i);
                    p.send(Payloads.message(0, tail), partitions > 1 ? Integer.toString(rounds * 31 + i) : null,
                        Clock.nowNs());
                    p.flush();
                }
            }
            rounds++;
            sleepS(0.3);
        }
        say(String.format("ready: every subscription received a probe, every producer an acknowledgement, every "
            + "consumer its place (%d probe rounds, %.1f s)", rounds, (System.nanoTime() - t0) / 1e9));
    }

    long startNs() {
        long now = Clock.nowNs();
        if (job.hasNonNull("start_at_ns") && job.get("start_at_ns").asLong() != 0) {
            long at = job.get("start_at_ns").asLong();
            if (at < now) {
                double lateMs = (now - at) / 1e6;
                extraEnd.put("start_missed_ms", Math.round(lateMs * 10) / 10.0);
                reasons.add(String.format("missed the agreed start by %.0f ms (set-up or probe took longer)", lateMs));
                return now + 50_000_000L;
            }
            return at;
        }
        return now + 100_000_000L;
    }

    // -- the kinds ----------------------------------------------------------------------------------------------

    /**
     * The lead-in of a measured phase (modes.py Load.lead_in): the schedule at the target rate for lead_in_s from
     * beginNs, then the producers flushed and the subscriptions caught up (bounded by drain_timeout_s), so that the
     * measured schedule starts with nothing in flight. Returns the measured schedule's start: LEAD_IN_SETTLE_S
     * after the lead-in's end, or at once when settling took longer.
     */
    long leadIn(long beginNs) throws Exception {
        say(String.format("lead-in: %s s at the target rate, not recorded (the clients' own start-up)", fmt(leadInS)));
        long leadEnd = beginNs + (long) (leadInS * 1e9);
        recorder.swap(); // the probes' samples: the backlog below counts the lead-in's messages only
        boolean[] stop = {false};
        List<Thread> threads = startProducers(rate, beginNs, leadEnd, stop);
        waitUntil(leadEnd, null);
        stop[0] = true;
        join(threads, Math.max(5.0, leadInS));
        for (Driver.Producer p : producers) {
            p.flush();
        }
        long deadline = System.nanoTime() + (long) (job.path("drain_timeout_s").asDouble(10.0) * 1e9);
        while (!consumers.isEmpty() && backlog() > 0 && System.nanoTime() < deadline && errors.isEmpty()) {
            sleepS(0.01);
        }
        return Math.max(leadEnd + (long) (LEAD_IN_SETTLE_S * 1e9), Clock.nowNs() + 50_000_000L);
    }

    void runConstant() throws Exception {
        boolean producing = !producers.isEmpty() && rate > 0;
        long start = startNs();
        if (leadInS > 0 && producing) {
            start = leadIn(start);
        }
        long end = start + (long) (durationS * 1e9);
        writer.start(start, durationS); // drops what came before: the probes, the lead-in
        if (writer.leadInSent > 0) {
            Map<String, Object> leadIn = new LinkedHashMap<>();
            leadIn.put("seconds", leadInS);
            leadIn.put("sent", writer.leadInSent);
            extraEnd.put("lead_in", leadIn);
        }
        boolean[] stop = {false};
        List<Thread> threads = producing ? startProducers(rate, start, end, stop) : List.of();
        waitUntil(end, null);
        stop[0] = true;
        join(threads, Math.max(5.0, durationS));
        loadS = Math.max(1e-9, (Math.min(Clock.nowNs(), end) - start) / 1e9);
        flushAndDrain();
    }

    void runConsumerOnly() {
        long start = startNs();
        long end = start + (long) (durationS * 1e9);
        writer.start(start, durationS);
        double idleS = job.path("consumer_idle_s").asDouble(5.0);
        long[] last = {0, System.nanoTime()};
        waitUntil(end, () -> {
            long received = writer.live()[2];
            if (received != last[0]) {
                last[0] = received;
                last[1] = System.nanoTime();
                return false;
            }
            return received > 0 && (System.nanoTime() - last[1]) / 1e9 > idleS;
        });
        loadS = Math.max(1e-9, (Clock.nowNs() - start) / 1e9);
        Map<String, Object> info = new LinkedHashMap<>();
        info.put("received", writer.live()[2]);
        info.put("ended_by", Clock.nowNs() < end ? "idle" : "duration");
        extraEnd.put("consumer_only", info);
    }

    void runSweep() throws Exception {
        double stepS = job.hasNonNull("step_duration_s") ? job.get("step_duration_s").asDouble()
            : Math.max(intervalS, durationS / sweepRates.length);
        double boundMs = job.path("sweep_max_delay_p99_ms").asDouble(DELAY_P99_BOUND_MS);
        double publishBoundMs = workload.path("sweepMaxPublishP99Ms").asDouble(SWEEP_MAX_PUBLISH_P99_MS);
        int stopAfter = job.path("sweep_stop_after_unstable").asInt(1);
        List<Map<String, Object>> steps = new ArrayList<>();
        int unstable = 0;
        Double highest = null;
        for (int k = 0; k < sweepRates.length; k++) {
            double r = sweepRates[k];
            Map<String, Object> extra = new LinkedHashMap<>();
            extra.put("step", k);
            extra.put("step_target_rate_msg_s", r);
            writer.extra = extra;
            long start = k > 0 ? Clock.nowNs() + 50_000_000L : startNs();
            long end = start + (long) (stepS * 1e9);
            writer.start(start, stepS);
            long acked0 = writer.live()[1];
            boolean[] stop = {false};
            List<Thread> threads = startProducers(r, start, end, stop);
            waitUntil(start + (long) (stepS * 0.25e9), null);
            long b1 = backlog();
            waitUntil(end, null);
            long b2 = backlog();
            long[] live = writer.live();
            stop[0] = true;
            join(threads, stepS + 10);
            double secs = Math.max(1e-9, (Math.min(Clock.nowNs(), end) - start) / 1e9);
            flushAndDrain();
            writer.stopSegment();
            long acked = writer.live()[1] - acked0;
            double achieved = acked / secs;
            Long p99 = writer.segmentDelay.percentile(99);
            Long publishP99 = writer.segmentPublish.percentile(99);
            long growth = b2 - b1;
            double allowed = Math.max(1000.0, 0.01 * r * subs.size() * stepS);
            long unacked = Math.max(0, live[0] - live[1]);
            double unackedAllowed = Math.max(1000.0, 0.01 * r * stepS);
            List<String> why = new ArrayList<>();
            if (achieved < ACHIEVED_MIN_RATIO * r) {
                why.add(String.format("achieved %,.0f < 99%% of %,.0f msg/s", achieved, r));
            }
            if (unacked > unackedAllowed) {
                why.add(String.format("%,d messages unacknowledged at the step's end (allowed %,.0f)", unacked,
                    unackedAllowed));
            }
            if (!subs.isEmpty() && growth > allowed) {
                why.add(String.format("backlog grew by %d messages (allowed %,.0f)", growth, allowed));
            }
            if (p99 != null && p99 > boundMs * 1000) {
                why.add(String.format("publish-delay p99 %.1f ms > %s ms", p99 / 1000.0, fmt(boundMs)));
            }
            if (publishP99 != null && publishP99 > publishBoundMs * 1000) {
                why.add(String.format("publish p99 %,.1f ms > %s ms (the step's latency bound)", publishP99 / 1000.0,
                    fmt(publishBoundMs)));
            }
            if (!errors.isEmpty()) {
                why.add(errors.get(0));
            }
            boolean stable = why.isEmpty();
            Map<String, Object> step = new LinkedHashMap<>();
            step.put("step", k);
            step.put("target_rate_msg_s", r);
            step.put("achieved_rate_msg_s", Math.round(achieved * 10) / 10.0);
            step.put("stable", stable);
            step.put("reason", stable ? "stable" : String.join("; ", why));
            step.put("publish_delay_p99_us", p99);
            step.put("publish_latency_p99_us", publishP99);
            step.put("publish_p99_bound_ms", publishBoundMs);
            step.put("backlog_growth_msgs", growth);
            step.put("unacknowledged_at_end_msgs", unacked);
            steps.add(step);
            say(String.format("sweep step %d: target %,.0f achieved %,.0f msg/s, %s", k, r, achieved,
                stable ? "stable" : "UNSTABLE: " + String.join("; ", why)));
            if (stable) {
                highest = r;
                unstable = 0;
            } else {
                unstable++;
                if (unstable >= stopAfter || !errors.isEmpty()) {
                    break;
                }
            }
        }
        writer.extra = new LinkedHashMap<>();
        extraEnd.put("sweep_steps", steps);
        extraEnd.put("highest_stable_rate_msg_s", highest);
        sweepTarget = highest;
        for (Map<String, Object> s : steps) {
            if (highest != null && ((Double) s.get("target_rate_msg_s")).doubleValue() == highest) {
                sweepAchieved = (Double) s.get("achieved_rate_msg_s");
                sweepDelay = (Long) s.get("publish_delay_p99_us");
            }
        }
    }

    static String fmt(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : Double.toString(v);
    }

    // -- the end ------------------------------------------------------------------------------------------------

    Map<String, Object> validity(Double cpuPercent, Double hostCpu) {
        Map<String, Long> t = writer.totals;
        Double target;
        Double achieved;
        Long delayP99;
        if (kind.equals("throughput-sweep")) {
            target = sweepTarget;
            achieved = sweepAchieved;
            delayP99 = sweepDelay;
        } else {
            target = Double.isInfinite(rate) ? null : (producers.isEmpty() ? 0.0 : rate);
            achieved = loadS > 0 ? Math.round((producers.isEmpty() ? t.get("received") : t.get("acked")) / loadS * 10)
                / 10.0 : null;
            delayP99 = producers.isEmpty() ? null : writer.phaseDelay.percentile(99);
        }
        List<String> reasons = new ArrayList<>(this.reasons);
        Double off = job.hasNonNull("clock_offset_ms") ? job.get("clock_offset_ms").asDouble() : null;
        int cores = Runtime.getRuntime().availableProcessors();
        double cpuBound = CLIENT_CPU_BOUND_PERCENT_PER_CORE * cores;
        boolean behind = target != null && target != 0 && achieved != null && achieved < ACHIEVED_MIN_RATIO * target;
        boolean late = delayP99 != null && delayP99 > DELAY_P99_BOUND_MS * 1000 && !Double.isInfinite(rate);
        boolean busy = cpuPercent != null && cpuPercent >= cpuBound;
        boolean hostBusy = hostCpu != null && hostCpu >= HOST_CPU_BOUND_PERCENT;
        if (behind) {
            reasons.add(String.format("achieved %,.0f msg/s < 99%% of the target %,.0f", achieved, target));
        }
        if (late) {
            reasons.add(String.format("publish-delay p99 %.1f ms > %s ms", delayP99 / 1000.0, fmt(DELAY_P99_BOUND_MS)));
        }
        if (busy) {
            reasons.add(String.format("client process CPU %.0f %% (>= %s %%: 85 %% of the %d cores the JVM engine "
                + "may use)", cpuPercent, fmt(cpuBound), cores));
        }
        if (hostBusy) {
            reasons.add(String.format("client host CPU %.0f %% of all cores", hostCpu));
        }
        if (off != null && Math.abs(off) > CLOCK_OFFSET_WARN_MS) {
            reasons.add(String.format("clock offset %.2f ms (> 1 ms): end-to-end latency across hosts is suspect", off));
        }
        boolean clientBound = (behind || late || Double.isInfinite(rate)) && (busy || hostBusy);
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> steps = (List<Map<String, Object>>) extraEnd.get("sweep_steps");
        if (kind.equals("throughput-sweep") && steps != null && !steps.isEmpty()) {
            clientBound = !((Boolean) steps.get(steps.size() - 1).get("stable")) && (busy || hostBusy);
        }
        List<String> invalid = new ArrayList<>();
        if (clientBound) {
            List<String> cpuWhy = new ArrayList<>();
            for (String r : reasons) {
                if (r.startsWith("client process CPU") || r.startsWith("client host CPU")) {
                    cpuWhy.add(r);
                }
            }
            invalid.add("client-bound: " + (cpuWhy.isEmpty() ? "the load generator was saturated"
                : String.join("; ", cpuWhy)));
        }
        if (late) {
            invalid.add(String.format("publish-delay p99 %,.1f ms > %s ms: the producers did not keep their send "
                + "schedule", delayP99 / 1000.0, fmt(DELAY_P99_BOUND_MS)));
        }
        if (off != null && Math.abs(off) > CLOCK_OFFSET_WARN_MS) {
            invalid.add(String.format("clock offset %.2f ms > 1 ms between hosts: end-to-end latency across hosts is "
                + "suspect", off));
        }
        if (writer.outageIntervals > 0) {
            String why = String.format("unavailable: %d interval(s), %,.1f s (intervals %d to %d), with send errors or "
                    + "%d+ messages sent and none acknowledged: a fault during the phase, not a clean measurement",
                writer.outageIntervals, writer.outageSeconds, writer.outageFirst, writer.outageLast,
                IntervalWriter.OUTAGE_MIN_SENT);
            reasons.add(why);
            invalid.add(why);
        }
        if (undrained > 0) {
            String why = String.format("consumers did not catch up: %,d acknowledged messages not received when the "
                    + "drain ended (%s s after the last send); end-to-end latency covers the received ones only",
                undrained, fmt(job.path("drain_timeout_s").asDouble(10.0)));
            reasons.add(why);
            invalid.add(why);
        }
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("target_rate_msg_s", target);
        v.put("achieved_rate_msg_s", achieved);
        v.put("publish_delay_p99_us", delayP99);
        v.put("cpu_percent", cpuPercent == null ? null : Math.round(cpuPercent * 10) / 10.0);
        v.put("host_cpu_percent", hostCpu == null ? null : Math.round(hostCpu * 10) / 10.0);
        v.put("clock_offset_ms", off);
        v.put("client_bound", clientBound);
        v.put("reasons", reasons);
        v.put("invalid_reasons", invalid);
        return v;
    }

    /** /proc/stat's first line: (busy, total) jiffies of all cores (idle and iowait count as idle, as psutil). */
    static long[] hostTimes() {
        try {
            String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            long total = 0;
            for (int i = 1; i < Math.min(f.length, 9); i++) {
                total += Long.parseLong(f[i]);
            }
            long idle = Long.parseLong(f[4]) + Long.parseLong(f[5]);
            return new long[] {total - idle, total};
        } catch (Exception e) {
            return null;
        }
    }

    /** Run the phase and write the end record; the error (or null) of a phase that did not end well. */
    String run() {
        String status = "ok";
        String error = null;
        Double cpuPercent = null;
        Double hostCpu = null;
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        try {
            connect();
            probe();
            measuring = true;
            long cpu0 = os.getProcessCpuTime();
            long wall0 = System.nanoTime();
            long[] host0 = hostTimes();
            switch (kind) {
                case "throughput-sweep":
                    runSweep();
                    break;
                case "consumer-only":
                    runConsumerOnly();
                    break;
                default:
                    runConstant();
            }
            long[] host1 = hostTimes();
            if (host0 != null && host1 != null && host1[1] > host0[1]) {
                hostCpu = 100.0 * (host1[0] - host0[0]) / (host1[1] - host0[1]);
            }
            cpuPercent = 100.0 * (os.getProcessCpuTime() - cpu0) / Math.max(System.nanoTime() - wall0, 1);
            if (!errors.isEmpty()) {
                status = "error";
                error = errors.get(0);
            }
        } catch (Exception e) {
            status = "error";
            error = e.getClass().getSimpleName() + ": " + e.getMessage();
        } finally {
            // the interval clock stops before the clients close (the Java clients take a second or more to close):
            // no empty intervals after the drain
            writer.stopSegment();
            for (Driver.Consumer c : consumers) {
                quietly(c::close);
            }
            for (Driver.Producer p : producers) {
                quietly(p::close);
            }
            quietly(driver::close);
        }
        writer.stopSegment();
        Map<String, Long> t = writer.totals;
        long unacked = t.get("sent") - t.get("acked") - t.get("send_errors");
        if (status.equals("ok") && (t.get("send_errors") > 0 || unacked > 0)) {
            error = String.format("%d sends failed and %d were never acknowledged (last error: %s)",
                t.get("send_errors"), Math.max(unacked, 0), recorder.lastError);
            status = "error";
        }
        Map<String, Object> validity = validity(cpuPercent, hostCpu);
        Map<String, Object> extra = new LinkedHashMap<>();
        extra.put("cpu_percent", validity.get("cpu_percent"));
        extra.put("kind", kind);
        extra.put("validity", validity);
        extra.put("load_s", Math.round(loadS * 1000) / 1000.0);
        extra.putAll(extraEnd);
        writer.finish(status, error, extra);
        @SuppressWarnings("unchecked")
        List<String> invalid = (List<String>) validity.get("invalid_reasons");
        String seenText = invalid.isEmpty() ? "no invalidity seen by the worker"
            : "invalid: " + String.join("; ", invalid);
        say(String.format("%s done: sent %d acked %d received %d errors %d cpu %.0f%% worker %s; %s (the row's status "
                + "is the summary's)", job.path("phase").asText(), t.get("sent"), t.get("acked"), t.get("received"),
            t.get("send_errors"), cpuPercent == null ? 0.0 : cpuPercent, status, seenText));
        return status.equals("ok") ? null : error;
    }

    interface Action {
        void run() throws Exception;
    }

    static void quietly(Action a) {
        try {
            a.run();
        } catch (Exception e) {
            System.err.println("close: " + e);
        }
    }

    /** A phase that failed (exit 2). */
    static final class PhaseError extends RuntimeException {
        PhaseError(String message) {
            super(message);
        }
    }
}
