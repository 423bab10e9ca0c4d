package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

/**
 * Kafka through its Java client (org.apache.kafka:kafka-clients), with the OMB driver file's properties as they
 * are written for it: commonConfig, producerConfig and consumerConfig passed through (the endpoint's
 * bootstrap servers), the consumer's defaults those of the Python drivers (session 6 s, heartbeat 1 s, auto
 * commit, fetch wait 100 ms) under consumerConfig, group = the subscription, auto.offset.reset = the phase's
 * start. Topics (replicationFactor, topicConfig) are created by the Python driver's prepare. A consumer is in
 * place once it holds its partitions with their positions fixed (committed, else the end; the start for
 * earliest), in its assignment callback, as the Python drivers' (docs/worker.md "Readiness probe").
 */
final class KafkaDriver implements Driver {
    private final JsonNode driver;
    private final Samples.Recorder recorder;
    private final String bootstrap;

    KafkaDriver(JsonNode endpoint, JsonNode driver, Samples.Recorder recorder) {
        this.driver = driver;
        this.recorder = recorder;
        if (endpoint.path("client_config").size() > 0) {
            throw new BadInput("the JVM engine does not apply an endpoint's client_config (authentication, TLS) yet");
        }
        this.bootstrap = endpoint.path("bootstrap_servers").asText();
    }

    /** OMB's Java-properties text blocks ("acks=all\nlinger.ms=1") or a mapping (base.py parse_properties). */
    static Map<String, String> properties(JsonNode value) {
        Map<String, String> out = new LinkedHashMap<>();
        if (value == null || value.isNull() || value.isMissingNode()) {
            return out;
        }
        if (value.isObject()) {
            value.fields().forEachRemaining(e -> out.put(e.getKey(), e.getValue().asText()));
            return out;
        }
        for (String line : value.asText().split("\n")) {
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#") || line.startsWith("!")) {
                continue;
            }
            int eq = line.indexOf('=');
            int colon = line.indexOf(':');
            int sep = eq < 0 ? colon : (colon < 0 ? eq : Math.min(eq, colon));
            if (sep < 0) {
                out.put(line, "");
            } else {
                out.put(line.substring(0, sep).trim(), line.substring(sep + 1).trim());
            }
        }
        return out;
    }

    private Properties common() {
        Properties p = new Properties();
        p.putAll(properties(driver.get("commonConfig")));
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    @Override
    public String clientLibrary() {
        return "kafka-clients-java";
    }

    @Override
    public String clientLibraryVersion() {
        return org.apache.kafka.common.utils.AppInfoParser.getVersion();
    }

    @Override
    public Producer createProducer(String topic, int partitions) {
        Properties p = common();
        p.putAll(properties(driver.get("producerConfig")));
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(),
            new ByteArraySerializer());
        Samples.Recorder rec = recorder;
        return new Producer() {
            @Override
            public void send(byte[] payload, String key, long sendNs) {
                byte[] k = key == null ? null : key.getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, k, payload), (md, e) -> {
                    if (e == null) {
                        rec.publishNs(Clock.nowNs() - sendNs);
                    } else {
                        rec.error(e);
                    }
                });
            }

            @Override
            public void flush() {
                producer.flush();
            }

            @Override
            public void close() {
                producer.close(Duration.ofSeconds(5));
            }
        };
    }

    @Override
    public Consumer createConsumer(String topic, String subscription, int partitions, PayloadHandler handler,
                                   int consumerIndex, int consumersInSubscription, String start, boolean paused) {
        Properties p = common();
        p.put("session.timeout.ms", "6000");
        p.put("heartbeat.interval.ms", "1000");
        p.put("enable.auto.commit", "true");
        p.put("fetch.max.wait.ms", "100");
        p.putAll(properties(driver.get("consumerConfig")));
        p.put("group.id", subscription);
        p.put("auto.offset.reset", start);
        return new PollingConsumer(new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer()),
            topic, handler, "earliest".equals(start), paused);
    }

    /** One consumer and its polling thread; pause / resume are requests its thread applies between polls. */
    static final class PollingConsumer implements Consumer {
        private final KafkaConsumer<byte[], byte[]> consumer;
        private final PayloadHandler handler;
        private final boolean earliest;
        private volatile boolean wantPaused;
        private boolean paused;
        private volatile boolean assigned;
        private volatile boolean stop;
        private final Thread thread;

        PollingConsumer(KafkaConsumer<byte[], byte[]> consumer, String topic, PayloadHandler handler,
                        boolean earliest, boolean paused) {
            this.consumer = consumer;
            this.handler = handler;
            this.earliest = earliest;
            this.wantPaused = paused;
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    fixPositions(parts);
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    assigned = false;
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    assigned = false;
                }
            });
            thread = new Thread(this::loop, "kafka-consumer");
            thread.setDaemon(true);
            thread.start();
        }

        private void fixPositions(Collection<TopicPartition> parts) {
            if (!parts.isEmpty()) {
                Set<TopicPartition> set = new HashSet<>(parts);
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(set, Duration.ofSeconds(10));
                for (TopicPartition tp : parts) {
                    OffsetAndMetadata c = committed.get(tp);
                    if (c != null) {
                        consumer.seek(tp, c.offset());
                    } else if (earliest) {
                        consumer.seekToBeginning(List.of(tp));
                    } else {
                        consumer.seekToEnd(List.of(tp));
                    }
                    consumer.position(tp, Duration.ofSeconds(10)); // fixed now, not at the first fetch
                }
                if (wantPaused) { // paused from the first assignment: nothing is fetched
                    consumer.pause(parts);
                    paused = true;
                }
            }
            assigned = true;
        }

        private void loop() {
            try {
                while (!stop) {
                    if (wantPaused != paused) {
                        Set<TopicPartition> parts = consumer.assignment();
                        if (!parts.isEmpty()) {
                            if (wantPaused) {
                                consumer.pause(parts);
                            } else {
                                consumer.resume(parts);
                            }
                            paused = wantPaused;
                        }
                    }
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        handler.onPayload(r.value());
                    }
                }
            } catch (WakeupException e) {
                // closing
            } finally {
                consumer.close(Duration.ofSeconds(5));
            }
        }

        @Override
        public boolean ready() {
            return assigned;
        }

        @Override
        public void pause() {
            wantPaused = true;
        }

        @Override
        public void resume() {
            wantPaused = false;
        }

        @Override
        public void close() throws Exception {
            stop = true;
            consumer.wakeup();
            thread.join(10_000);
        }
    }

    @Override
    public void close() {
    }
}
