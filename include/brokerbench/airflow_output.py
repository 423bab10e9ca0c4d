"""What `airflow dags test` prints, read for the command line: the lines its terminal shows
(:func:`terminal_line`: brokerbench's own log records, failures and the run's end) and what the run did
(:class:`OutputScan`: its run id, whether it started, the tasks that failed and why, the last exception)."""

from __future__ import annotations

import re

from brokerbench.run_guard import run_id_from_line

#: brokerbench's own log records in `airflow dags test` output: "<ts> [info ] MESSAGE [brokerbench] loc=..."
_OWN = re.compile(r"^\S+ \[(\w+)\s*\] (.*?)\s+\[brokerbench[\w.]*\]")
#: other lines worth showing: failures, exceptions, the run's end
_SHOW = re.compile(r"(\[error\s*\]|^\w*(Error|Exception)\b.*:|DagRun Finished|new_state=(failed|up_for_retry))")


def terminal_line(line: str) -> str | None:
    """What of an Airflow output line to show on the terminal (None = log file only)."""
    m = _OWN.match(line)
    if m:
        level, message = m.groups()
        return message if level == "info" else f"{level.upper()}: {message}"
    if _SHOW.search(line):
        return re.sub(r"\s+(correlation_id|loc|ti_id|hostname|rows_affected)=\S+", "", line.rstrip())
    return None


#: a task of the run starts; the run exists
_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
#: a task's new state
_NEW_STATE = re.compile(r"\bnew_state=(\w+)")
#: an exception line after a traceback: "airflow.sdk.exceptions.ParamValidationError: Invalid ..."
_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::\s?(.*))?$")
#: a log record (not the continuation of an exception's message)
_LOG_LINE = re.compile(r"^\s*\d{4}-\d\d-\d\dT\S+ \[")
#: tasks whose failure only repeats others' (the watcher)
_ECHO_TASKS = {"run_outcome"}


class OutputScan:
    """What `airflow dags test` output says: the run id, whether the run started,
    the tasks that failed and why, and the last exception (e.g. a refused param)."""

    def __init__(self, max_lines: int = 5):
        self.max_lines = max_lines
        self.run_id: str | None = None
        self.run_started = False
        self.task: str | None = None
        self.errors: dict[str, str] = {}  # task -> its last exception line
        self.failed: dict[str, str] = {}  # failed task -> its exception line ("" if none seen)
        self.last_exception: list[str] = []
        self.last_line = ""
        self._in_traceback = False
        self._collecting = False

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if line.strip():
            self.last_line = line.strip()
        self.run_id = self.run_id or run_id_from_line(line)
        m = _TASK_START.search(line)
        if m:
            self.run_started, self.task = True, m.group(1)
        elif "DagRun Finished" in line:
            self.run_started = True
        if line.startswith("Traceback (most recent call last):"):
            self._in_traceback, self._collecting = True, False
            return
        if self._collecting:
            if not line.strip() or _LOG_LINE.match(line) or len(self.last_exception) >= self.max_lines:
                self._collecting = False
            else:
                self.last_exception.append(line.rstrip())
                return
        if self._in_traceback and line and not line[0].isspace():
            self._in_traceback = False
            m = _EXC_LINE.match(line)
            if m:
                self.last_exception = [f"{m.group(1)}: {m.group(2) or ''}".rstrip(": ")]
                self._collecting = True
                if self.task:
                    self.errors[self.task] = self.last_exception[0]
            return
        m = _NEW_STATE.search(line)
        if m and self.task:
            if m.group(1) == "failed":
                self.failed[self.task] = self.errors.get(self.task, "")
            elif m.group(1) in ("success", "up_for_retry", "skipped"):
                self.failed.pop(self.task, None)

    @property
    def reason(self) -> list[str]:
        """Why it stopped: the last exception (up to its first blank line), else the last line."""
        return self.last_exception or ([self.last_line] if self.last_line else [])

    def failed_tasks(self) -> dict[str, str]:
        """Failed tasks and their exception line, the watcher left out when others failed."""
        own = {t: e for t, e in self.failed.items() if t not in _ECHO_TASKS}
        return own or dict(self.failed)
