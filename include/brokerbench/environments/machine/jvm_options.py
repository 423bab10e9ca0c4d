"""A variant's ``jvmOptions`` over brokerbench's own JVM flags for a broker, the way the brokers' start scripts
combine their variables.

Kafka's ``kafka-run-class.sh`` builds the command line from ``KAFKA_HEAP_OPTS`` (the heap; ``kafka-server-start.sh``
sets ``-Xmx1G -Xms1G`` unless it is given), ``KAFKA_JVM_PERFORMANCE_OPTS`` (the collector and its tuning:
``-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
-XX:+ExplicitGCInvokesConcurrent ...`` unless it is given) and ``KAFKA_OPTS`` (anything else, added). Pulsar's
``bin/pulsar`` does the same with ``PULSAR_MEM`` (heap and direct memory), ``PULSAR_GC`` (the collector) and
``PULSAR_EXTRA_OPTS``. A variable given replaces that part of the defaults as a whole. brokerbench starts the
brokers with ``java`` directly (no scripts: the local environment from a resolved distribution's jars, the aws
install scripts likewise), so :func:`merge` applies that rule to the flags themselves:

- any heap flag given (``-Xms``, ``-Xmx``, ``-Xmn``, ``-XX:MaxDirectMemorySize``, ``-XX:*RAMPercentage``,
  ``-XX:*HeapSize``) replaces every default heap flag (an ``-Xmx64m`` beside a default ``-Xms1024m`` would not
  start);
- a collector given (``-XX:+Use...GC``) replaces the default collector and its tuning flags (HotSpot refuses two
  collectors);
- every other flag is added after the defaults, where HotSpot takes the last value of a flag given twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: heap and direct memory sizing (KAFKA_HEAP_OPTS, PULSAR_MEM)
HEAP = re.compile(r"^-(Xm[sxn]|XX:(MaxDirectMemorySize|(Initial|Min|Max)RAMPercentage|(Initial|Min|Max)HeapSize)=)")
#: a collector's choice (the GC part of KAFKA_JVM_PERFORMANCE_OPTS, PULSAR_GC)
COLLECTOR = re.compile(r"^-XX:\+Use\w*GC$")
#: the collector flags and the G1 tuning of brokerbench's defaults, which go with their collector
COLLECTOR_TUNING = re.compile(r"^-XX:([+-]Use\w*GC|MaxGCPauseMillis=|InitiatingHeapOccupancyPercent=|"
                              r"[+-]ExplicitGCInvokesConcurrent|[+-]ParallelRefProcEnabled|G1\w*=|[+-]G1\w*)")


def merge(heap: Sequence[str], performance: Sequence[str], given: Sequence[str]) -> list[str]:
    """The JVM flags a broker starts with: brokerbench's ``heap`` and ``performance`` (collector and the rest)
    defaults with the variant's ``given`` flags over them (see the module docstring)."""
    given = list(given)
    out = [] if any(HEAP.match(f) for f in given) else list(heap)
    if any(COLLECTOR.match(f) for f in given):
        out += [f for f in performance if not COLLECTOR_TUNING.match(f)]
    else:
        out += list(performance)
    return out + given


def named_in(line: str, given: Sequence[str]) -> list[str]:
    """The flags of ``given`` a line of the JVM's own output names (``Unrecognized VM option 'Foo'`` names
    ``-XX:+Foo``; ``Invalid maximum heap size: -Xmxabc`` names ``-Xmxabc``)."""
    out = []
    for flag in given:
        bare = re.sub(r"^-XX:[+-]?", "", flag).split("=", 1)[0]
        if flag in line or (bare and re.search(rf"'{re.escape(bare)}[=']?|\b{re.escape(bare)}\b", line)):
            out.append(flag)
    return out


#: what HotSpot prints when it refuses its options (then "Error: Could not create the Java Virtual Machine.")
JVM_REFUSALS = re.compile(r"Unrecognized VM option|Unrecognized option|Invalid (initial|maximum|minimum)? ?heap size|"
                          r"Improperly specified VM option|Conflicting collector combinations|Error occurred during "
                          r"initialization of VM|Could not create the Java Virtual Machine|Missing \+/- setting|"
                          r"is outside the allowed range")
