"""What OMB's chart script (bin/create_charts.py of openmessaging/benchmark) needs of a set of
result documents, as one check shared by the unit and the Spark tests.

The script groups the documents by ``workload``; per group it draws one series per document
labelled with its ``driver``; it plots entry n of a per-interval list at ``10 * n`` seconds and
sets the y range from ``max`` over all entries of all series (a null there stops it with
TypeError); the quantile charts read the maps' keys as floats and keep those <= 99.999.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

#: the per-interval lists the script plots
PLOTTED_SERIES = ("publishLatency99pct", "publishDelayLatency99pct", "publishRate", "publishErrorRate",
                  "endToEndLatency95pct", "consumeRate", "endToEndLatencyAvg")
#: the quantile maps the script plots
PLOTTED_QUANTILES = ("aggregatedPublishLatencyQuantiles", "aggregatedPublishDelayLatencyQuantiles",
                     "aggregatedEndToEndLatencyQuantiles")
#: every list of io.openmessaging.benchmark.TestResult
TEST_RESULT_LISTS = tuple(
    [f"{base}{suffix}" for base in ("publishLatency", "publishDelayLatency", "endToEndLatency")
     for suffix in ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "Max")]
    + ["publishRate", "publishErrorRate", "consumeRate", "backlog"])
#: the scalars of TestResult
TEST_RESULT_SCALARS = ("workload", "driver", "messageSize", "topics", "partitions", "producersPerTopic",
                       "consumersPerTopic") + tuple(
    f"aggregated{base}{suffix}" for base in ("PublishLatency", "PublishDelayLatency", "EndToEndLatency")
    for suffix in ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "Max"))
#: the seconds between two entries that the script assumes
CHART_INTERVAL_S = 10


def chart_problems(docs: Iterable[dict[str, Any]]) -> list[str]:
    """Every reason OMB's chart script would fail on, or mis-draw, ``docs`` (one set of files);
    [] when it draws them as they are meant."""
    problems = []
    labels: dict[str, list[str]] = defaultdict(list)
    for doc in docs:
        name = f"{doc.get('workload')} / {doc.get('driver')}"
        missing = [k for k in (*TEST_RESULT_SCALARS, *TEST_RESULT_LISTS, *PLOTTED_QUANTILES) if k not in doc]
        if missing:
            problems.append(f"{name}: missing {', '.join(missing)}")
            continue
        labels[str(doc["workload"])].append(str(doc["driver"]))
        lengths = {len(doc[k]) for k in TEST_RESULT_LISTS}
        if len(lengths) != 1:
            problems.append(f"{name}: the per-interval lists differ in length ({sorted(lengths)})")
        for key in TEST_RESULT_LISTS:
            bad = [i for i, v in enumerate(doc[key]) if not isinstance(v, (int, float)) or isinstance(v, bool)]
            if bad:
                problems.append(f"{name}: {key} has no number at entries {bad}")
        if doc.get("intervalSeconds") != CHART_INTERVAL_S:
            problems.append(f"{name}: intervalSeconds is {doc.get('intervalSeconds')}, the script plots every "
                            f"{CHART_INTERVAL_S} s")
        for key in PLOTTED_QUANTILES:
            for p, v in doc[key].items():
                try:
                    float(p)
                except ValueError:
                    problems.append(f"{name}: {key} key {p!r} is no number")
                if not isinstance(v, (int, float)):
                    problems.append(f"{name}: {key}[{p!r}] is {v!r}")
        if not any(doc[k] for k in PLOTTED_SERIES):
            problems.append(f"{name}: no entry to plot")
    for workload, names in labels.items():
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            problems.append(f"{workload}: series labels (driver) used twice: {', '.join(repeated)}")
    return problems
