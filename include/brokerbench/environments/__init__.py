"""Where a benchmark run's brokers and workers run.

``base`` (the interface), ``processes`` (state directories and process
control), ``hostsetup`` and ``hostmetrics`` are shared; ``machine`` runs
brokers and workers on one machine; ``local``, ``aws`` and ``external`` are the
environments, each chosen by name through ``registry``. See
docs/architecture.md for what each may import.
"""
