"""brokerbench: benchmarks of message brokers as Airflow pipelines."""

__version__ = "0.1.0"
