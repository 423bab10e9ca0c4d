"""What an ``airflow dags test`` log says about its failed tasks, for a test's failure message.

A failed run's last lines are the run's outcome; the reason is in the failed task's own lines, earlier in the
log. ``failed_tasks(text)`` returns each failed try's lines, from ``[DAG TEST] starting`` to the end of the try.
"""

from __future__ import annotations

import re

START = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(\S+)")
END = re.compile(r"\[DAG TEST\] end task task_id=")
FAILED = "Task failed with exception"


def failed_tasks(text: str, keep: int = 120, width: int = 600) -> str:
    """Each failed try's section of the log (its last ``keep`` lines, each cut at ``width`` characters; the
    run's own outcome task left out), or '' when no task failed."""
    tries: list[tuple[str, list[str]]] = []
    inside = False
    for line in text.splitlines():
        if m := START.search(line):
            tries.append((f"{m.group(1)} (map_index {m.group(2)})", []))
            inside = True
        if inside:
            tries[-1][1].append(line[:width])
        if END.search(line):
            inside = False
    failed = [(task, lines) for task, lines in tries
              if not task.startswith("run_outcome ") and any(FAILED in line for line in lines)]
    return "\n".join(f"--- failed: {task} ---\n" + "\n".join(lines[-keep:]) for task, lines in failed)


def failure_message(text: str, tail: int = 3000) -> str:
    """The failed tries' sections, then the log's last ``tail`` characters."""
    return f"{failed_tasks(text)}\n--- end of log ---\n{text[-tail:]}"
