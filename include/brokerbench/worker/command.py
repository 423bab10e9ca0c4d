"""brokerbench-worker: the load generator's command line.

    brokerbench-worker prepare --job JOB.json
    brokerbench-worker run --job JOB.json --out RESULT.jsonl

A job file is written by the environment (schema: brokerbench.worker.job.Job).
Progress goes to stdout, one line per interval; the result to --out
(docs/results-format.md). Exit code 0 = ok, 2 = the phase failed (the result
file still holds every interval measured before the failure), 1 = bad input.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="brokerbench-worker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p_prep = sub.add_parser("prepare", help="create the job's topics / queues / subscriptions")
    p_prep.add_argument("--job", required=True, help="job JSON file")
    p_run = sub.add_parser("run", help="run one phase and write its result file")
    p_run.add_argument("--job", required=True, help="job JSON file")
    p_run.add_argument("--out", required=True, help="result file (JSON Lines)")
    args = ap.parse_args(argv)

    from brokerbench.worker.job import JobError, read_job

    try:
        job = read_job(args.job)
    except OSError as e:
        print(f"brokerbench-worker: cannot read job file {args.job}: {e}", file=sys.stderr)
        return 1
    except JobError as e:
        print(f"brokerbench-worker: job file {args.job}: {e}", file=sys.stderr)
        return 1

    from brokerbench.worker.runner import WorkerError, prepare_job, run_job

    def progress(line: str) -> None:
        print(line, flush=True)

    try:
        if args.command == "prepare":
            prepare_job(job)
            progress(f"prepared {len(job.topics)} topics on {job.broker}")
        else:
            run_job(job, args.out, progress=progress)
    except WorkerError as e:
        print(f"brokerbench-worker: {e}", file=sys.stderr, flush=True)
        return 2
    except JobError as e:
        print(f"brokerbench-worker: job file {args.job}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
