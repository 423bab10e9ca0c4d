"""brokerbench's Spark jobs as a package: the aggregation (spark_jobs/aggregate.py) and
the history append (spark_jobs/history.py) are thin entry points over these modules.

- ``schema``: the worker file format as Spark schemas, constants of the summary.
- ``store``: local paths and s3:// URIs alike (listing, reading).
- ``reading``: the worker files as the executors' tasks (phase directories packed by bytes).
- ``workerfiles``: one pass over a phase's worker files: records, and the histograms merged with numpy.
- ``omb``: the 10 s windows of the OMB documents.
- ``phase_tables``: every table's rows of one phase (on the executors) and the summary's status (driver).
- ``outputs``: CSV, OMB JSON, summary.parquet and the text table per run.
- ``entry``: the aggregation's session and command line (one stage, one collect).
- ``history_writer``: the history append job.
- ``pyfiles``: the package as a zip for ``spark-submit --py-files`` (no pyspark import).

Importing the package imports nothing (``pyfiles`` is used where pyspark is absent).
"""
