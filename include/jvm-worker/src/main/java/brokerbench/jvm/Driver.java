package brokerbench.jvm;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** One broker's Java client, configured from the OMB driver dict (the Python worker's drivers/base.py). */
interface Driver extends AutoCloseable {
    /** Receives every message's bytes (the first 8 are the send stamp). */
    interface PayloadHandler {
        void onPayload(byte[] payload);
    }

    interface Producer {
        /** Send one message; its acknowledgement records publish latency from sendNs (or an error). */
        void send(byte[] payload, String key, long sendNs) throws Exception;

        void flush() throws Exception;

        void close() throws Exception;
    }

    interface Consumer {
        /** True once the consumer is in place (the readiness probe waits for it). */
        default boolean ready() {
            return true;
        }

        void pause();

        void resume();

        void close() throws Exception;
    }

    String clientLibrary();

    String clientLibraryVersion();

    Producer createProducer(String topic, int partitions) throws Exception;

    Consumer createConsumer(String topic, String subscription, int partitions, PayloadHandler handler,
                            int consumerIndex, int consumersInSubscription, String start, boolean paused)
        throws Exception;

    @Override
    void close() throws Exception;

    static Driver create(String broker, JsonNode endpoint, JsonNode driver, Samples.Recorder recorder)
        throws Exception {
        switch (broker) {
            case "pulsar":
                return new PulsarDriver(endpoint, driver, recorder);
            case "kafka":
                return new KafkaDriver(endpoint, driver, recorder);
            case "rabbitmq":
                return new RabbitDriver(endpoint, driver, recorder);
            default:
                throw new BadInput("the JVM engine has no driver for broker '" + broker + "' (it has: pulsar, kafka, "
                    + "rabbitmq)");
        }
    }

    /** A secret reference in an endpoint's value (the Python drivers' base.expand_secrets). */
    Pattern SECRET_REF = Pattern.compile("\\$\\{env:(BROKERBENCH_SECRET_[A-Z0-9_]+)\\}");

    /**
     * {@code value} with each {@code ${env:BROKERBENCH_SECRET_...}} replaced by that environment variable: how an
     * endpoint names a secret (an external cluster's password) without carrying it. A variable that is not set is
     * bad input naming it.
     */
    static String expandSecrets(String value) {
        Matcher m = SECRET_REF.matcher(value);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            String secret = System.getenv(m.group(1));
            if (secret == null) {
                throw new BadInput("the endpoint names the secret " + m.group(1) + ", which is not in this process's "
                    + "environment (the environment that started the worker gives it)");
            }
            m.appendReplacement(out, Matcher.quoteReplacement(secret));
        }
        return m.appendTail(out).toString();
    }

    /** A job the engine cannot run: exit 1, as the Python worker does for bad input. */
    final class BadInput extends RuntimeException {
        BadInput(String message) {
            super(message);
        }
    }
}
