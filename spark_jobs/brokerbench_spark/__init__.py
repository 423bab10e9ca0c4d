"""brokerbench's Spark jobs as a package: the aggregation (spark_jobs/aggregate.py) and
the history append (spark_jobs/history.py) are thin entry points over these modules.

- ``schema``: the worker file format as Spark schemas, constants of the summary.
- ``reading``: file system helpers and the readers (all runs in one query, the run as a key).
- ``merge``: the histogram merge (each bucket once per level) and the percentiles.
- ``tables``: summary, time series and sweep tables from the merged data.
- ``outputs``: CSV, OMB JSON, summary.parquet and the text table per run.
- ``cli``: the aggregation's session and command line.
- ``history``: the history append job.
- ``pyfiles``: the package as a zip for ``spark-submit --py-files`` (no pyspark import).

Importing the package imports nothing (``pyfiles`` is used where pyspark is absent).
"""
