"""The 10 s windows of the OMB result documents (summary/omb/*.json).

OMB's chart script (bin/create_charts.py of openmessaging/benchmark) plots the n-th entry of
every per-interval list at ``10 * n`` seconds: OMB's own driver reports every 10 s. Workers
of brokerbench report every ``interval_s`` seconds (the plan's ``interval_seconds``), so the
OMB lists are built from 10 s windows of the measured phase, each the merge of the worker
intervals it holds (histograms summed bucket by bucket, counters summed; never an average
of percentiles). :func:`window_map` says which interval belongs to which window; the
histograms' merge (workerfiles.py) and the windows' counters and scalars (phase_tables.py)
both follow it.

Nothing here imports pyspark.
"""

from __future__ import annotations

import math
from typing import Mapping

#: the interval OMB's chart script assumes between two entries of a per-interval list (s)
OMB_INTERVAL_S = 10


#: an interval shorter than this fraction of the reporting interval is partial (the phase ended in it)
FULL_INTERVAL_FRACTION = 0.99


def window_map(sent_by_index: Mapping[int, int], interval_s: float,
               seconds_by_index: Mapping[int, float] | None = None,
               window_s: float = OMB_INTERVAL_S) -> list[tuple[int, int, bool]]:
    """(interval index, window, timed) for every interval of one measured phase, sorted.

    ``sent_by_index``: messages sent in each interval index, summed over the workers;
    ``interval_s``: the workers' reporting interval; ``seconds_by_index``: each interval's
    wall-clock length (first start to last end over the workers; unknown = full). Interval
    ``i`` starts ``i x interval_s`` after the phase's start; window ``w`` spans
    ``[w x window_s, (w+1) x window_s)``.

    - An interval belongs to the window it starts in. When ``interval_s`` divides
      ``window_s`` (1, 2, 5 or 10 s for 10 s windows) every window holds exactly
      ``window_s / interval_s`` intervals. Otherwise a window holds the intervals that start
      in it (with 3 s intervals: 4, 3, 3, 4, ... intervals; rates use their real seconds).
    - A window in which no interval starts (intervals longer than ``window_s``) takes the
      interval that covers its start: that interval's values repeat in every window it spans.
    - The tail: the intervals after the last full-length interval that sent something (of a
      phase that sends nothing: after the last full-length one) are no window of their own.
      They are the drain (acks and receipts of messages in flight when sending stopped, and
      the last late sends) over a fraction of a second, whose rates would be meaningless
      points. They join the last window of that interval: their counts and histograms are
      merged into it, their time counts (``timed``) only when they sent something, as the
      summary counts the seconds of load.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    seconds = seconds_by_index or {}
    indexes = sorted(sent_by_index)
    sends = any((sent_by_index[i] or 0) > 0 for i in indexes)

    def full(i: int) -> bool:
        length = seconds.get(i)
        return length is None or length >= FULL_INTERVAL_FRACTION * interval_s

    anchors = [i for i in indexes if full(i) and (not sends or (sent_by_index[i] or 0) > 0)]
    last_regular = anchors[-1] if anchors else None
    regular = [i for i in indexes if last_regular is None or i <= last_regular]
    tail = [i for i in indexes if last_regular is not None and i > last_regular]

    def first_window(i: int) -> int:
        # the window the interval starts in (the small term keeps whole seconds exact)
        return math.floor(i * interval_s / window_s + 1e-9)

    windows: dict[int, list[int]] = {i: [first_window(i)] for i in regular}
    if regular:
        started = {w for ws in windows.values() for w in ws}
        last_window = math.ceil((regular[-1] + 1) * interval_s / window_s - 1e-9) - 1
        for w in range(last_window + 1):
            if w not in started:
                covering = math.floor(w * window_s / interval_s + 1e-9)
                if covering in windows:
                    windows[covering].append(w)
    out = [(i, w, True) for i in regular for w in windows[i]]
    if tail and last_regular is not None:
        last = max(windows[last_regular])
        out += [(i, last, not sends or (sent_by_index[i] or 0) > 0) for i in tail]
    return sorted(out)
