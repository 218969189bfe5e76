"""`triage hang`: name the stuck rank, the collective it waits in and the line, while the job hangs."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

HELP = "look at a hung job's ranks now: who waits in which collective, at which line, and why"
DESCRIPTION = (
    "Find the distributed job on this machine (torchrun, accelerate, deepspeed, srun workers, or any "
    "process with RANK/LOCAL_RANK in its environment), read every rank's Python stack with py-spy "
    "without stopping it, and say which ranks are the odd ones out, the collective each waits in, "
    "the line of your script that put it there, and the knowledge-base entry that explains it. "
    "Across nodes: run `triage hang --json > $(hostname).json` on each node, then "
    "`triage hang merge *.json`."
)
EPILOG = "Exit status: 0 a hang was diagnosed, 1 nothing looks hung, 2 no job found or a stack unreadable."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "files",
        nargs="*",
        metavar="merge FILE",
        help="`merge` and the JSON files of `triage hang --json` from each node",
    )
    parser.add_argument(
        "--pid", type=int, action="append", default=[], help="a rank's or launcher's PID (repeatable)"
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds allowed per stack read (default 5)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--full", action="store_true", help="the whole entry, not only the fix")


def _load(path: str) -> dict[str, Any]:
    from triage.cli._common import read_text_file

    try:
        data = json.loads(read_text_file(path, limit=64 << 20))
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not the output of `triage hang --json`")
    return data


def run(args: argparse.Namespace) -> int:
    from triage.core.hang.analyse import analyse
    from triage.core.hang.codec import merge, picture_json
    from triage.kb.loader import load_kb
    from triage.render.hang_text import hang_lines
    from triage.render.terminal import style_for

    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UserError("--timeout must be a positive number of seconds")
    if args.files:
        if args.files[0] != "merge" or len(args.files) < 2:
            raise UserError("usage: triage hang merge NODE.json [NODE.json ...]")
        try:
            picture, slots = merge([_load(p) for p in args.files[1:]])
        except ValueError as exc:
            raise UserError(str(exc)) from None
    else:
        from probes.hang import NoJob, collect

        try:
            samples, notes = collect(args.pid or None, timeout_s=args.timeout)
        except NoJob as exc:
            raise UserError(str(exc)) from None
        unreadable = [s for s in samples if s.error]
        if unreadable and len(unreadable) == len(samples):
            raise UserError(unreadable[0].error)
        picture = analyse(samples)
        slots = sum(n or 0 for n in {s.host: s.local_world_size for s in samples}.values())
        if notes:
            from dataclasses import replace

            picture = replace(picture, notes=(*notes, *picture.notes))
    kb = load_kb()
    if args.json:
        from triage.core.redact import redact_obj

        print(json.dumps(redact_obj(picture_json(picture, slots)), indent=2))
    else:
        from triage.core.redact import redact_text

        print(redact_text("\n".join(hang_lines(kb, picture, style_for(), full=args.full))))
    return Exit.OK if picture.diagnoses else Exit.NOT_FOUND
