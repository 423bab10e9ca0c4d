"""The run report and its parts: ``html`` (the report page and the plain-text summary for task logs), ``figures``
(the interactive charts of the report and the comparison, Plotly), ``charts`` (the report's time series),
``data`` (a run's files read for the report), ``verdict_table`` (regression.json/csv),
``compare`` (the comparison page across runs), ``templating`` (Jinja2).

Nothing is imported here, so ``verdict_table`` loads without Plotly."""
