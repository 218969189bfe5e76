"""`triage hang`: name the stuck rank, the collective it waits in and the line, while the job hangs."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture
    from triage.render.report import ExtraPart

HELP = "a hung job now: which rank waits where, and why"
DESCRIPTION = (
    "Find the distributed job on this machine (torchrun, accelerate, deepspeed, srun workers, "
    "torch.multiprocessing.spawn or multiprocessing, any process with RANK/LOCAL_RANK in its environment "
    "or --rank N on its command line; a launcher "
    "with no worker yet, still in its rendezvous, is read itself), read every rank's Python stack with py-spy "
    "without stopping it, and say which ranks are the odd ones out, the collective each waits in, "
    "the line of your script that put it there, and the knowledge-base entry that explains it. "
    "It also reads what the job recorded itself: Flight Recorder dumps (--fr-dir, or the files "
    "TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE in the job's environment point at), "
    "torch.distributed.debug's server (its page on 127.0.0.1:25999, or --debug-dir) and NCCL RAS "
    "(localhost:28028, or NCCL_RAS_ADDR), checks them against the stacks, and falls back to them "
    "where the stacks cannot be read. "
    "Across nodes: run `triage hang --json > $(hostname).json` on each node, then "
    "`triage hang merge *.json`."
)
EPILOG = (
    "Exit status: 0 a hang was diagnosed, 1 nothing looks hung, 2 no job found, a stack unreadable "
    "with nothing recorded to fall back on, or a folder or address given that cannot be read."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
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
    parser.add_argument(
        "--fr-dir", metavar="DIR", help="Flight Recorder dumps, one file per rank (<prefix><rank>)"
    )
    parser.add_argument(
        "--debug-dir", metavar="DIR", help="torch.distributed.debug's dump folder (stacks_<time>.txt)"
    )
    parser.add_argument(
        "--debug-url",
        metavar="URL",
        help="torch.distributed.debug's page (default: tried on http://127.0.0.1:25999)",
    )
    parser.add_argument(
        "--ras", metavar="HOST:PORT", help="NCCL RAS address (default: NCCL_RAS_ADDR, else localhost:28028)"
    )
    parser.add_argument(
        "--no-recorded",
        action="store_true",
        help="read the stacks only, not what the job recorded (Flight Recorder, debug server, RAS)",
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


def _live(args: argparse.Namespace) -> tuple[HangPicture, int]:
    """The picture of the job running here, from its stacks and its own records."""
    from probes.hang import NoJob
    from probes.hang.gather import HangInputError, HangOptions, StacksUnreadable, live_picture

    options = HangOptions(
        pids=tuple(args.pid),
        timeout_s=args.timeout,
        fr_dir=args.fr_dir,
        debug_dir=args.debug_dir,
        debug_url=args.debug_url,
        ras=args.ras,
        recorded=not args.no_recorded,
    )
    try:
        return live_picture(options)
    except (NoJob, HangInputError, StacksUnreadable) as exc:
        raise UserError(str(exc)) from None


def report_part(args: argparse.Namespace) -> ExtraPart | None:
    """`triage report`'s section on a job hanging on this machine; None when no job runs here."""
    from probes.hang import NoJob
    from probes.hang.gather import HangInputError, HangOptions, StacksUnreadable, live_picture
    from probes.hang.probe import pids_from_env
    from triage.kb.loader import load_kb
    from triage.render.hang_text import hang_markdown
    from triage.render.report import ExtraPart

    timeout = getattr(args, "timeout", 5.0)
    try:
        picture, _ = live_picture(HangOptions(pids=pids_from_env(), timeout_s=timeout))
    except (NoJob, HangInputError):
        return None
    except StacksUnreadable as exc:
        return ExtraPart("Hung job on this machine", f"A job runs here, but {exc}.")
    entries = tuple(d.entry for d in picture.diagnoses)
    markdown = "\n".join(hang_markdown(load_kb(), picture))
    return ExtraPart(
        "Hung job on this machine", markdown, entries, how=f"from triage hang: {picture.verdict}"
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from triage.core.hang.codec import merge, picture_json
    from triage.kb.loader import load_kb
    from triage.render.hang_text import hang_lines
    from triage.render.terminal import style_for

    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UserError("--timeout must be a positive number of seconds")
    if args.files:
        if args.files[0] != "merge":
            hint = f" (to read one process: --pid {args.files[0]})" if args.files[0].isdigit() else ""
            raise UserError(
                f"unknown argument {args.files[0]!r}{hint}; to merge nodes' pictures: triage hang merge NODE.json ..."
            )
        if len(args.files) < 2:
            raise UserError("usage: triage hang merge NODE.json [NODE.json ...]")
        try:
            picture, slots = merge([_load(p) for p in args.files[1:]])
        except ValueError as exc:
            raise UserError(str(exc)) from None
    else:
        picture, slots = _live(args)
    kb = load_kb()
    if args.json:
        from triage.core.redact import redact_obj

        print(json.dumps(redact_obj(picture_json(picture, slots)), indent=2))
    else:
        from triage.core.redact import redact_text

        print(redact_text("\n".join(hang_lines(kb, picture, style_for(), full=args.full))))
    return Exit.OK if picture.diagnoses else Exit.NOT_FOUND
