"""What a loopback RabbitMQ "existing cluster" holds, for the external environment's before / after checks."""

from __future__ import annotations


def rabbitmq_listing(cluster) -> dict[str, list[str]]:
    """Queues and exchanges (not the built-in ``amq.*``) of the RabbitMQ the fixture ``cluster["env"]`` runs."""
    broker = cluster["env"]._broker("rabbitmq")
    state = broker.state()
    out = {}
    for what in ("queues", "exchanges"):
        p = broker.ctl(state, state["nodes"][0], f"list_{what}", "name", "--quiet", "--no-table-headers",
                       check=True)
        out[what] = sorted(n for n in p.stdout.split() if n and not n.startswith("amq."))
    return out
