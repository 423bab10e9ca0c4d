package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/** Payload tails and keys as the Python worker's payload.py makes them (OMB's workload fields). */
final class Payloads {
    static final int STAMP_SIZE = 8;

    private Payloads() {
    }

    /** The payload tails (messageSize - 8 bytes each) a producer cycles through. */
    static List<byte[]> pool(JsonNode workload) throws IOException {
        int size = workload.path("messageSize").asInt();
        if (size < STAMP_SIZE) {
            throw new Driver.BadInput("messageSize " + size + " is smaller than the 8-byte send timestamp");
        }
        int tail = size - STAMP_SIZE;
        SecureRandom random = new SecureRandom();
        List<byte[]> out = new ArrayList<>();
        String file = workload.path("payloadFile").asText("");
        if (!file.isEmpty()) {
            byte[] data = Files.readAllBytes(Path.of(file));
            if (data.length != size) {
                throw new Driver.BadInput("payloadFile " + file + " has " + data.length + " bytes, messageSize is "
                    + size);
            }
            out.add(Arrays.copyOfRange(data, STAMP_SIZE, size));
            return out;
        }
        if (workload.path("useRandomizedPayloads").asBoolean(false)) {
            double ratio = workload.path("randomBytesRatio").asDouble(0.5);
            int n = workload.path("randomizedPayloadPoolSize").asInt(1000);
            int rnd = (int) (tail * ratio);
            for (int i = 0; i < n; i++) {
                byte[] b = new byte[tail];
                byte[] r = new byte[rnd];
                random.nextBytes(r);
                System.arraycopy(r, 0, b, 0, rnd);
                out.add(b);
            }
            return out;
        }
        byte[] b = new byte[tail];
        random.nextBytes(b);
        out.add(b);
        return out;
    }

    /** The keys of OMB's keyDistributor (NO_KEY: null), cycled by the producer. */
    static String[] keys(String distributor) {
        String d = distributor == null || distributor.isEmpty() ? "NO_KEY" : distributor.toUpperCase();
        String[] keys = new String[10_000];
        switch (d) {
            case "NO_KEY":
                return new String[] {null};
            case "KEY_ROUND_ROBIN":
                for (int i = 0; i < keys.length; i++) {
                    keys[i] = Integer.toString(i);
                }
                return keys;
            case "RANDOM_NANO":
                Random rng = new Random(System.nanoTime());
                for (int i = 0; i < keys.length; i++) {
                    keys[i] = Long.toString(rng.nextLong() & ((1L << 40) - 1));
                }
                return keys;
            default:
                throw new Driver.BadInput("keyDistributor " + distributor
                    + " is not one of NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO");
        }
    }

    /** stamp + tail: one message of exactly messageSize bytes. */
    static byte[] message(long stampNs, byte[] tail) {
        byte[] m = new byte[STAMP_SIZE + tail.length];
        for (int i = 7; i >= 0; i--) {
            m[i] = (byte) stampNs;
            stampNs >>>= 8;
        }
        System.arraycopy(tail, 0, m, STAMP_SIZE, tail.length);
        return m;
    }

    static long stamp(byte[] m) {
        long v = 0;
        for (int i = 0; i < STAMP_SIZE; i++) {
            v = (v << 8) | (m[i] & 0xff);
        }
        return v;
    }
}
