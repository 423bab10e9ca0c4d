package brokerbench.jvm;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * brokerbench's histogram (include/brokerbench/histogram.py): HdrHistogram's bucket layout with 3
 * significant digits, buckets named by their highest equivalent value, values in microseconds, values
 * below 0 counted in {@code negative} and above {@link #MAX_VALUE} in {@code overflow}; exact count, sum,
 * min and max of the values inside the range. Not thread-safe: {@link Samples} guards the writers.
 */
final class Hist {
    /** histogram.py DEFAULT_MAX_VALUE: one hour in microseconds. */
    static final long MAX_VALUE = 3_600_000_000L;
    private static final int SUB_BUCKET_MASK = 2047;
    private static final int HALF = 1024;
    /** bucket indexes up to MAX_VALUE (bit length 32: bucket index 21). */
    static final int SIZE = 2048 + 22 * HALF;

    final long[] counts = new long[SIZE];
    long count;
    long sum;
    long min = Long.MAX_VALUE;
    long max = Long.MIN_VALUE;
    long negative;
    long overflow;

    static int index(long v) {
        int bucket = (64 - Long.numberOfLeadingZeros(v | SUB_BUCKET_MASK)) - 11;
        if (bucket == 0) {
            return (int) v;
        }
        return 2048 + (bucket - 1) * HALF + (int) ((v >> bucket) - HALF);
    }

    /** The bucket's key: its highest equivalent value (histogram.py bucket_key). */
    static long key(int index) {
        if (index < 2048) {
            return index;
        }
        int bucket = (index - 2048) / HALF + 1;
        long sub = (index - 2048) % HALF + HALF;
        return (sub << bucket) + (1L << bucket) - 1;
    }

    /** Record a nanosecond difference as whole microseconds (rounded half up, as recorder.py does). */
    void recordNs(long ns) {
        record(Math.floorDiv(ns + 500, 1000));
    }

    void record(long v) {
        if (v < 0) {
            negative++;
        } else if (v > MAX_VALUE) {
            overflow++;
        } else {
            counts[index(v)]++;
            count++;
            sum += v;
            if (v < min) {
                min = v;
            }
            if (v > max) {
                max = v;
            }
        }
    }

    /** Every value recorded, in range or not. */
    long recorded() {
        return count + negative + overflow;
    }

    Hist merge(Hist o) {
        for (int i = 0; i < SIZE; i++) {
            counts[i] += o.counts[i];
        }
        count += o.count;
        sum += o.sum;
        negative += o.negative;
        overflow += o.overflow;
        min = Math.min(min, o.min);
        max = Math.max(max, o.max);
        return this;
    }

    /** histogram.py LogHistogram.percentile: the key of the bucket holding the ceil(p/100 x count)-th value. */
    Long percentile(double pct) {
        if (count == 0) {
            return null;
        }
        if (pct >= 100) {
            return max;
        }
        long rank = Math.max(1, (long) Math.ceil(pct / 100.0 * count));
        long seen = 0;
        for (int i = 0; i < SIZE; i++) {
            seen += counts[i];
            if (seen >= rank) {
                return Math.min(key(i), max);
            }
        }
        return max;
    }

    /** The serialised form of docs/results-format.md (histogram.py to_dict). */
    Map<String, Object> toMap() {
        List<Long> keys = new ArrayList<>();
        List<Long> cs = new ArrayList<>();
        for (int i = 0; i < SIZE; i++) {
            if (counts[i] != 0) {
                keys.add(key(i));
                cs.add(counts[i]);
            }
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("count", count);
        m.put("sum", sum);
        m.put("min", count == 0 ? null : min);
        m.put("max", count == 0 ? null : max);
        m.put("overflow", overflow);
        m.put("negative", negative);
        m.put("max_value", MAX_VALUE);
        m.put("buckets", keys);
        m.put("counts", cs);
        return m;
    }
}
