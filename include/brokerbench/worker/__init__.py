"""The load generator that runs on client hosts. It must not import Airflow."""
