"""The run report and its parts: ``html`` (the report page and the plain-text summary for task logs), ``figures``
(the report's interactive charts, Plotly), ``charts`` (their time series; the comparison's PNG charts, matplotlib),
``data`` (a run's files read for the report), ``verdict_table`` (regression.json/csv),
``compare`` (the comparison page across runs), ``templating`` (Jinja2).

Nothing is imported here, so ``verdict_table`` loads without matplotlib or Plotly."""
