"""`python -m probes.dist`: the mini-test's one entry point.

Under a launcher (torchrun, srun, mpirun: RANK/WORLD_SIZE or their SLURM/MPI equivalents are set) it
is one rank, and rank 0 prints the report for the whole job. Run bare, it is the local mini-test:
it spawns the ranks itself and prints the same report.

    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HEAD:29400 \\
        --rdzv-id=triage -m probes.dist --timeout 30
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from probes.dist.worker import CHILD_ENV
from triage.core.exitcodes import Exit


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m probes.dist",
        description="torch.distributed mini-test: init, barrier, checked all_reduce, bandwidth sweep; "
        "names the ranks that never arrive. Under torchrun/srun, rank 0 reports for every node.",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds without progress that count as a hang")
    parser.add_argument(
        "--startup-timeout", type=float, default=60.0, help="seconds for every rank to reach the store"
    )
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    parser.add_argument("--nproc", type=int, default=None, help="local mode: number of ranks")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.startup_timeout <= 0:
        parser.error("timeouts must be positive")
    if args.nproc is not None and args.nproc < 1:
        parser.error("--nproc must be at least 1")
    return args


def _under_launcher() -> bool:
    from triage.core.launchers import under_launcher

    return under_launcher(os.environ)


def main(argv: list[str] | None = None) -> int:
    from triage.core import children
    from triage.core.termination import install_signal_handlers

    args = parse_args(argv)
    if os.environ.get(CHILD_ENV) == "1":
        children.watch_parent()  # a rank of the local mini-test ends when its launcher does
    else:
        install_signal_handlers()
    if _under_launcher():
        from probes.dist.worker import WorkerConfig, run

        try:
            cfg = WorkerConfig.from_env(
                os.environ,
                backend=args.backend,
                stall_timeout_s=args.timeout,
                startup_timeout_s=args.startup_timeout,
                as_json=args.json,
            )
        except ValueError as exc:
            print(f"probes.dist: error: {exc}", file=sys.stderr)
            return Exit.USAGE
        return run(cfg)

    from probes.dist.local import Unavailable, run_minitest
    from probes.dist.report import facts, format_text

    try:
        outcome = run_minitest(
            args.nproc,
            backend=args.backend,
            stall_timeout_s=args.timeout,
            deadline_s=args.startup_timeout + 10 * args.timeout,
        )
    except Unavailable as exc:
        print(f"probes.dist: unavailable: {exc}", file=sys.stderr)
        return Exit.OK
    found = facts(outcome)
    if args.json:
        print(json.dumps({"facts": found, **outcome.to_json()}, indent=2))
    else:
        print(format_text(outcome))
    if outcome.result != "ok":
        return Exit.FAIL
    return Exit.WARN if found.get("dist.cross_rank_mismatch") else Exit.OK


def _run() -> int:
    """main(), with Ctrl-C and SIGTERM ending it in one line once every rank it started is gone."""
    from triage.core.termination import Terminated

    try:
        return main()
    except KeyboardInterrupt:
        print("probes.dist: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"probes.dist: terminated (signal {exc.signum})", file=sys.stderr)
        return 128 + exc.signum


if __name__ == "__main__":
    sys.exit(_run())
