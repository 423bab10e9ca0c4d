package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;

import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * Pulsar through its Java client, with OMB's Pulsar driver's settings: client ioThreads and
 * connectionsPerBroker; producer batchingEnabled, batchingMaxPublishDelayMs, batchingMaxBytes, blockIfQueueFull,
 * pendingQueueSize (batchingMaxMessages unbounded and no send timeout, as OMB builds its producers); consumer
 * subscriptionType, receiverQueueSize, maxTotalReceiverQueueSizeAcrossPartitions, acknowledged asynchronously.
 * Topics, partitions, subscriptions and persistence are created by the Python driver's prepare (the same
 * admin API calls).
 */
final class PulsarDriver implements Driver {
    private final PulsarClient client;
    private final JsonNode driver;
    private final Samples.Recorder recorder;

    PulsarDriver(JsonNode endpoint, JsonNode driver, Samples.Recorder recorder) throws Exception {
        this.driver = driver;
        this.recorder = recorder;
        if (endpoint.path("client_config").size() > 0) {
            throw new BadInput("the JVM engine does not apply an endpoint's client_config (authentication, TLS) yet");
        }
        JsonNode c = driver.path("client");
        ClientBuilder b = PulsarClient.builder()
            .serviceUrl(endpoint.path("service_url").asText())
            .ioThreads(c.path("ioThreads").asInt(1))
            .connectionsPerBroker(c.path("connectionsPerBroker").asInt(1))
            .operationTimeout(30, TimeUnit.SECONDS)
            .statsInterval(0, TimeUnit.SECONDS)
            .maxConcurrentLookupRequests(50_000)
            .maxLookupRequests(100_000);
        client = b.build();
    }

    static String topicUrl(String name) {
        return name.contains("://") ? name : "persistent://public/default/" + name;
    }

    @Override
    public String clientLibrary() {
        return "pulsar-client-java";
    }

    @Override
    public String clientLibraryVersion() {
        return org.apache.pulsar.PulsarVersion.getVersion();
    }

    @Override
    public Producer createProducer(String topic, int partitions) throws Exception {
        JsonNode p = driver.path("producer");
        org.apache.pulsar.client.api.Producer<byte[]> producer = client.newProducer()
            .topic(topicUrl(topic))
            .enableBatching(p.path("batchingEnabled").asBoolean(true))
            .batchingMaxPublishDelay(p.path("batchingMaxPublishDelayMs").asLong(1), TimeUnit.MILLISECONDS)
            .batchingMaxBytes(p.path("batchingMaxBytes").asInt(128 * 1024))
            .batchingMaxMessages(Integer.MAX_VALUE)
            .blockIfQueueFull(p.path("blockIfQueueFull").asBoolean(true))
            .maxPendingMessages(p.path("pendingQueueSize").asInt(10_000))
            .sendTimeout(0, TimeUnit.MILLISECONDS)
            .create();
        Samples.Recorder rec = recorder;
        return new Producer() {
            @Override
            public void send(byte[] payload, String key, long sendNs) {
                TypedMessageBuilder<byte[]> m = producer.newMessage().value(payload);
                if (key != null) {
                    m.key(key);
                }
                m.sendAsync().whenComplete((id, e) -> {
                    if (e == null) {
                        rec.publishNs(Clock.nowNs() - sendNs);
                    } else {
                        rec.error(e);
                    }
                });
            }

            @Override
            public void flush() throws Exception {
                producer.flush();
            }

            @Override
            public void close() throws Exception {
                producer.close();
            }
        };
    }

    private static SubscriptionType subscriptionType(String name) {
        switch (name.toLowerCase(Locale.ROOT)) {
            case "exclusive":
                return SubscriptionType.Exclusive;
            case "shared":
                return SubscriptionType.Shared;
            case "key_shared":
            case "keyshared":
                return SubscriptionType.Key_Shared;
            default:
                return SubscriptionType.Failover;
        }
    }

    @Override
    public Consumer createConsumer(String topic, String subscription, int partitions, PayloadHandler handler,
                                   int consumerIndex, int consumersInSubscription, String start, boolean paused)
        throws Exception {
        JsonNode c = driver.path("consumer");
        ConsumerBuilder<byte[]> b = client.newConsumer()
            .topic(topicUrl(topic))
            .subscriptionName(subscription)
            .subscriptionType(subscriptionType(c.path("subscriptionType").asText("Failover")))
            .receiverQueueSize(c.path("receiverQueueSize").asInt(1000))
            .subscriptionInitialPosition("earliest".equals(start)
                ? SubscriptionInitialPosition.Earliest : SubscriptionInitialPosition.Latest)
            .messageListener((consumer, msg) -> {
                handler.onPayload(msg.getData());
                consumer.acknowledgeAsync(msg);
            });
        if (c.hasNonNull("maxTotalReceiverQueueSizeAcrossPartitions")) {
            b.maxTotalReceiverQueueSizeAcrossPartitions(c.get("maxTotalReceiverQueueSizeAcrossPartitions").asInt());
        }
        if (paused) {
            b.startPaused(true);
        }
        org.apache.pulsar.client.api.Consumer<byte[]> consumer = b.subscribe();
        return new Consumer() {
            @Override
            public void pause() {
                consumer.pause();
            }

            @Override
            public void resume() {
                consumer.resume();
            }

            @Override
            public void close() throws Exception {
                consumer.close();
            }
        };
    }

    @Override
    public void close() throws Exception {
        client.close();
    }
}
