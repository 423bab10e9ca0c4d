package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentNavigableMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.Semaphore;
import java.util.zip.CRC32;

/**
 * RabbitMQ through its Java client (com.rabbitmq:amqp-client), in the Python pika driver's topology: one exchange
 * per topic, per subscription one queue per partition ({@code <topic>.<subscription>.<partition>}) bound with the
 * partition number as routing key (declared by pika's prepare); a producer spreads messages over the routing keys
 * (CRC-32 of the key, round robin without keys), publishes with publisher confirms, at most maxOutstandingConfirms
 * unconfirmed (publisher flow control shows as publish delay), delivery mode 2 with messagePersistence; a consumer
 * reads the queues of its partitions (partition % consumers = its index), auto-acknowledged, streams from offset
 * first / next with acknowledgements every 100 messages; pausing cancels its consumers.
 */
final class RabbitDriver implements Driver {
    private final JsonNode driver;
    private final Samples.Recorder recorder;
    private final List<String> uris = new ArrayList<>();
    private final List<Connection> connections = new ArrayList<>();
    private final boolean persistent;
    private final boolean stream;
    private int next;

    RabbitDriver(JsonNode endpoint, JsonNode driver, Samples.Recorder recorder) {
        this.driver = driver;
        this.recorder = recorder;
        if (endpoint.path("client_config").size() > 0) {
            throw new BadInput("the JVM engine does not apply an endpoint's client_config (authentication, TLS) yet");
        }
        JsonNode given = endpoint.path("amqp_uris").size() > 0 ? endpoint.path("amqp_uris") : driver.path("amqpUris");
        given.forEach(u -> uris.add(Driver.expandSecrets(u.asText())));
        if (uris.isEmpty()) {
            throw new BadInput("RabbitMQ endpoint has no amqp_uris");
        }
        persistent = driver.path("messagePersistence").asBoolean(false);
        stream = "STREAM".equalsIgnoreCase(driver.path("queueType").asText("CLASSIC"));
    }

    private synchronized Connection connect() throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(uris.get(++next % uris.size()));
        Connection c = f.newConnection();
        connections.add(c);
        return c;
    }

    static String queueName(String topic, String subscription, int partition) {
        return topic + "." + subscription + "." + partition;
    }

    @Override
    public String clientLibrary() {
        return "amqp-client-java";
    }

    @Override
    public String clientLibraryVersion() {
        return com.rabbitmq.client.impl.ClientVersion.VERSION;
    }

    @Override
    public Producer createProducer(String topic, int partitions) throws Exception {
        Channel ch = connect().createChannel();
        ch.confirmSelect();
        int maxOutstanding = driver.path("maxOutstandingConfirms").asInt(10_000);
        Semaphore window = new Semaphore(maxOutstanding);
        ConcurrentNavigableMap<Long, Long> pending = new ConcurrentSkipListMap<>();
        Samples.Recorder rec = recorder;
        ch.addConfirmListener((tag, multiple) -> {
            long now = Clock.nowNs();
            Map<Long, Long> done = multiple ? pending.headMap(tag, true) : pending.subMap(tag, true, tag, true);
            int n = 0;
            for (Long sendNs : done.values()) {
                rec.publishNs(now - sendNs);
                n++;
            }
            done.clear();
            window.release(n);
        }, (tag, multiple) -> {
            Map<Long, Long> done = multiple ? pending.headMap(tag, true) : pending.subMap(tag, true, tag, true);
            int n = done.size();
            for (int i = 0; i < n; i++) {
                rec.error(new RuntimeException("nack from broker"));
            }
            done.clear();
            window.release(n);
        });
        AMQP.BasicProperties props = new AMQP.BasicProperties.Builder().deliveryMode(persistent ? 2 : 1).build();
        String[] keys = new String[partitions];
        for (int p = 0; p < partitions; p++) {
            keys[p] = Integer.toString(p);
        }
        return new Producer() {
            private long rr;

            @Override
            public void send(byte[] payload, String key, long sendNs) throws Exception {
                String rk;
                if (key == null) {
                    rk = keys[(int) (++rr % keys.length)];
                } else {
                    CRC32 crc = new CRC32();
                    crc.update(key.getBytes(StandardCharsets.UTF_8));
                    rk = keys[(int) (crc.getValue() % keys.length)];
                }
                window.acquire(); // publisher flow control: the wait shows as publish delay
                pending.put(ch.getNextPublishSeqNo(), sendNs);
                ch.basicPublish(topic, rk, props, payload);
            }

            @Override
            public void flush() throws Exception {
                ch.waitForConfirms(10_000);
            }

            @Override
            public void close() throws Exception {
                if (ch.isOpen()) {
                    ch.close();
                }
            }
        };
    }

    @Override
    public Consumer createConsumer(String topic, String subscription, int partitions, PayloadHandler handler,
                                   int consumerIndex, int consumersInSubscription, String start, boolean paused)
        throws Exception {
        List<String> queues = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            if (p % consumersInSubscription == consumerIndex % consumersInSubscription) {
                queues.add(queueName(topic, subscription, p));
            }
        }
        if (queues.isEmpty()) {
            throw new BadInput("consumer " + consumerIndex + " of " + subscription + " has no queue: "
                + consumersInSubscription + " consumers > " + partitions + " partitions");
        }
        Channel ch = connect().createChannel();
        boolean autoAck = !stream;
        if (!autoAck) {
            ch.basicQos(1000);
        }
        Map<String, Object> args = stream ? Map.of("x-stream-offset", "earliest".equals(start) ? "first" : "next")
            : Map.of();
        DefaultConsumer consumer = new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties p, byte[] body)
                throws java.io.IOException {
                handler.onPayload(body);
                if (!autoAck && envelope.getDeliveryTag() % 100 == 0) {
                    ch.basicAck(envelope.getDeliveryTag(), true);
                }
            }
        };
        List<String> tags = new ArrayList<>();
        Action consume = () -> {
            for (String q : queues) {
                tags.add(ch.basicConsume(q, autoAck, args, consumer));
            }
        };
        if (!paused) {
            consume.run();
        }
        return new Consumer() {
            @Override
            public synchronized void pause() {
                try {
                    for (String t : tags) {
                        ch.basicCancel(t);
                    }
                    tags.clear();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }

            @Override
            public synchronized void resume() {
                if (tags.isEmpty()) {
                    try {
                        consume.run();
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
            }

            @Override
            public void close() throws Exception {
                if (ch.isOpen()) {
                    ch.close();
                }
            }
        };
    }

    interface Action {
        void run() throws Exception;
    }

    @Override
    public void close() throws Exception {
        for (Connection c : connections) {
            if (c.isOpen()) {
                c.close(5_000);
            }
        }
    }
}
