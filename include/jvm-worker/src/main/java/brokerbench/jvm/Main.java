package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * brokerbench's JVM load engine: {@code java -cp ... brokerbench.jvm.Main run --job JOB.json --out RESULT.jsonl}.
 * The job file and the result file are the Python worker's (brokerbench.worker.job.Job, docs/results-format.md);
 * the Python worker validates the job and prepares topics before it starts this process
 * (brokerbench.worker.jvm). Exit 0 = ok; 2 = the phase failed (the result file still holds every interval
 * measured before); 1 = bad input.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) {
        System.exit(run(args));
    }

    /**
     * {@code histogram}: one histogram per input line (nanosecond values separated by spaces), each written as
     * one JSON line in the result file's form: how tests check the engine's buckets against histogram.py.
     */
    static int histogram() {
        ObjectMapper json = new ObjectMapper();
        try (java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in,
            java.nio.charset.StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                Hist h = new Hist();
                for (String v : line.trim().split("\\s+")) {
                    if (!v.isEmpty()) {
                        h.recordNs(Long.parseLong(v));
                    }
                }
                System.out.println(json.writeValueAsString(h.toMap()));
            }
        } catch (Exception e) {
            System.err.println("brokerbench-jvm-worker: histogram: " + e);
            return 1;
        }
        return 0;
    }

    static int run(String[] args) {
        String jobPath = null;
        String outPath = null;
        if (args.length == 1 && args[0].equals("histogram")) {
            return histogram();
        }
        if (args.length < 1 || !args[0].equals("run")) {
            System.err.println("usage: brokerbench.jvm.Main run --job JOB.json --out RESULT.jsonl");
            return 1;
        }
        for (int i = 1; i + 1 < args.length; i += 2) {
            if (args[i].equals("--job")) {
                jobPath = args[i + 1];
            } else if (args[i].equals("--out")) {
                outPath = args[i + 1];
            }
        }
        if (jobPath == null || outPath == null) {
            System.err.println("usage: brokerbench.jvm.Main run --job JOB.json --out RESULT.jsonl");
            return 1;
        }
        JsonNode job;
        try {
            job = new ObjectMapper().readTree(Path.of(jobPath).toFile());
        } catch (Exception e) {
            System.err.println("brokerbench-jvm-worker: cannot read job file " + jobPath + ": " + e);
            return 1;
        }
        Map<String, Object> engine = new LinkedHashMap<>();
        engine.put("engine", "jvm");
        engine.put("engine_jar_sha256", System.getProperty("brokerbench.engine.sha256"));
        engine.put("java_version", System.getProperty("java.version"));
        Phase phase;
        try {
            phase = new Phase(job, Path.of(outPath), line -> System.out.println(line), engine);
        } catch (Driver.BadInput e) {
            System.err.println("brokerbench-jvm-worker: job file " + jobPath + ": " + e.getMessage());
            return 1;
        } catch (Exception e) {
            System.err.println("brokerbench-jvm-worker: " + e);
            return 2;
        }
        String error = phase.run();
        if (error != null) {
            System.err.println("brokerbench-jvm-worker: worker " + job.path("worker").asText() + " ("
                + job.path("broker").asText() + "): " + error);
            return 2;
        }
        return 0;
    }
}
