"""`triage report`: one Markdown document to paste into an issue; `triage report merge` across nodes.

This module gathers (the probes, the machine's inventory, the logs given) and writes; the document
itself is built by triage.render.report, the same builder the TUI's `e` uses, and redacted there.
Other commands contribute a section through `_extras` (a hung job, lint findings on a script).
"""

from __future__ import annotations

import argparse
import sys
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

if TYPE_CHECKING:
    from triage.core.facts import ProbeResult
    from triage.core.inventory import Inventory
    from triage.core.model import KnowledgeBase
    from triage.render.report import ExtraPart, ReportInput

HELP = "a paste-ready issue report of this machine (merge: nodes)"
DESCRIPTION = (
    "Write one Markdown document to paste into a GitHub issue or a ticket: versions (python, torch, "
    "CUDA, NCCL, driver, accelerate, deepspeed), the launcher and its rank contract, NCCL_* and TORCH_* "
    "settings, GPUs and topology, network, configs, every probe's verdict, the diagnosis of any log "
    "given, and the fix with its note on whether it changes the science of the run. Secrets are "
    "redacted; what triage could not look at is listed.\n\n"
    "Across nodes: run `triage report --json --out node-$(hostname).json` on each node, then "
    "`triage report merge node-*.json` lists what differs (versions, NCCL settings, drivers, MTUs). "
    "merge exits 0 when the nodes agree, 1 when something differs, 2 on bad input."
)
SCHEMA = 1
MAX_JSON_BYTES = 10_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    actions = parser.add_subparsers(dest="action", metavar="merge", required=False)
    merge = actions.add_parser(
        "merge",
        help="compare `triage report --json` files from several nodes and list what differs",
        description="List what differs between nodes (versions, drivers, NCCL and torch settings, launcher "
        "variables, MTUs, probe verdicts). Exit 0: the nodes agree; 1: something differs; 2: bad input.",
    )
    merge.add_argument(
        "files", nargs="+", metavar="FILE.json", help="one `triage report --json` file per node"
    )
    merge.add_argument("--json", dest="merge_json", action="store_true", help="the differences as JSON")
    merge.add_argument("--out", dest="merge_out", metavar="FILE", help="write to FILE instead of stdout")
    parser.add_argument(
        "--log",
        action="extend",
        nargs="+",
        default=[],
        metavar="FILE",
        help="diagnose these logs too (- for stdin)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--json", action="store_true", help="machine-readable, for `triage report merge`")
    parser.add_argument(
        "--dist", action="store_true", help="also run the torch.distributed mini-test (slower)"
    )
    parser.add_argument(
        "--hang",
        action="store_true",
        help="also read the stacks of a job hanging on this machine (triage hang)",
    )
    from probes.options import add_probe_arguments

    add_probe_arguments(parser, timeout_flag="--timeout", default_timeout=5.0, can_switch_off=True)


# What a node report keeps of each probe result (the evidence stays in the Markdown, redacted).
REPORT_PROBE_KEYS = ("name", "status", "summary", "facts", "flagged")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    if args.action == "merge":
        return _merge(args.files, as_json=args.json or args.merge_json, out=args.merge_out or args.out)
    from triage.kb.loader import load_kb

    kb = load_kb()
    data = gather(kb, args)
    if args.json:
        import json

        text = json.dumps(report_json(kb, data), indent=2, ensure_ascii=False) + "\n"
    else:
        from triage.render.report import build_report

        text = build_report(kb, data)
    _write(text, args.out)
    return Exit.OK


def gather(kb: KnowledgeBase, args: argparse.Namespace) -> ReportInput:
    """Run what the report needs, the probes and the inventory at the same time, each bounded."""
    import shlex
    import socket

    from probes.options import probe_options
    from triage.cli.log import scan_inputs
    from triage.cli.probe import Progress
    from triage.render.report import REPORT_PROBES, LogPart, ReportInput

    options = probe_options(args)  # checks the timeout, configs and script before anything runs
    logs = [LogPart(*scan_inputs(list(args.log), kb))] if args.log else []
    results: list[ProbeResult] = []
    inventory: Inventory | None = None
    why = "--no-probes: this machine was not looked at"
    findings = []
    names = [*REPORT_PROBES, *(["dist"] if args.dist else []), *(["lint"] if options.script else [])]
    not_run: dict[str, str] = {}
    if not args.dist:
        not_run["dist"] = "the torch.distributed mini-test takes longer; `triage report --dist` runs it"
    if not options.script:
        not_run["lint"] = "no training script given (`--script train.py`)"
    if args.no_probes:
        not_run = not_run | {name: "not run (--no-probes)" for name in names}
    else:
        from probes.registry import flagged_facts, merged_facts, run_all
        from triage.core.findings import findings as find

        progress = Progress(sys.stderr, [*names, "inventory"]) if sys.stderr.isatty() else None
        box: list[Inventory] = []
        reader = threading.Thread(
            target=_read_inventory, args=(options.timeout_s, box, progress), daemon=True
        )
        reader.start()
        try:
            results = run_all(names, options, progress)
            reader.join(options.timeout_s + 1.0)
        finally:
            if progress is not None:
                progress.clear()
        inventory = box[0] if box else None
        why = "" if box else f"reading it took longer than {options.timeout_s:g} s"
        findings = find(merged_facts(results), kb, flagged_facts(results))
    extras, unseen = _extras(kb, args, options.timeout_s)
    command = (
        "`triage " + " ".join(shlex.quote(a) for a in sys.argv[1:]) + "`"
        if sys.argv[1:]
        else "`triage report`"
    )
    return ReportInput(
        when=datetime.now().astimezone(),
        host=socket.gethostname(),
        command=command,
        results=results,
        not_run=not_run,
        inventory=inventory,
        inventory_why=why,
        findings=findings,
        logs=logs,
        extras=extras,
        unseen=unseen,
    )


def _read_inventory(timeout_s: float, box: list[Inventory], progress: Any) -> None:
    from probes.inventory import collect

    if progress is not None:
        progress("inventory", None)
    box.append(collect(timeout_s, threading.Event()))
    if progress is not None:
        from triage.core.facts import ProbeResult

        progress("inventory", ProbeResult("inventory", "ok"))


def _extras(
    kb: KnowledgeBase, args: argparse.Namespace, timeout_s: float
) -> tuple[list[ExtraPart], list[str]]:
    """What another command contributes: `triage hang` on a job hanging here (only with --hang: it
    reads every rank's stack). (`triage lint` runs as the lint probe with --script.) What was not
    looked at is said."""
    parts: list[ExtraPart] = []
    unseen: list[str] = []
    if not args.hang:
        unseen.append(
            "a hung job: not looked at (`triage report --hang` reads the stacks of a job hanging here)"
        )
    elif args.no_probes:
        unseen.append("a hung job: not looked at (--no-probes)")
    else:
        part, why = _hang_part(kb, timeout_s)
        if part is not None:
            parts.append(part)
        else:
            unseen.append(f"a hung job: {why}")
    return parts, unseen


def _hang_part(kb: KnowledgeBase, timeout_s: float) -> tuple[ExtraPart | None, str]:
    """`triage hang`'s picture of the job running here, as a report section."""
    from triage.cli.hang import _live
    from triage.render.hang_text import hang_markdown
    from triage.render.report import ExtraPart

    wanted = argparse.Namespace(
        pid=[], timeout=timeout_s, fr_dir=None, debug_dir=None, debug_url=None, ras=None, no_recorded=False
    )
    try:
        picture, _ = _live(wanted)
    except UserError as exc:
        return None, str(exc)
    body = hang_markdown(kb, picture)
    entries = tuple(d.entry for d in picture.diagnoses)
    how = f"from the stacks of the hung job: {picture.verdict}"
    return ExtraPart("Hung job", "\n".join(body), entries, how), ""


def report_json(kb: KnowledgeBase, data: ReportInput) -> dict[str, Any]:
    """The `--json` document: what `merge` compares, the diagnosis, and the Markdown report itself."""
    from triage.core.inventory import NODE_KIND, NODE_SCHEMA, summarise_node
    from triage.core.redact import redact_obj
    from triage.render.report import build_report, diagnosis

    entry, source = diagnosis(kb, data)
    node = summarise_node(data.host, data.when.isoformat(timespec="seconds"), data.results, data.inventory)
    payload = {
        "kind": NODE_KIND,
        "schema": NODE_SCHEMA,
        "node": node.to_json(),
        "diagnosis": {"id": entry.id, "title": entry.title, "how": source} if entry else None,
        "probes": [{k: v for k, v in r.to_plain().items() if k in REPORT_PROBE_KEYS} for r in data.results],
        "not_run": dict(data.not_run),
        "findings": [{"entry": f.entry_id, "text": f.text} for f in data.findings],
        "markdown": build_report(kb, data),
    }
    redacted = redact_obj(payload)
    assert isinstance(redacted, dict)
    return redacted


def _merge(files: list[str], *, as_json: bool, out: str | None) -> int:
    import json

    from triage.core.inventory import differences, node_from_json
    from triage.render.report_merge import merge_markdown, node_labels

    if len(files) < 2:
        raise UserError("report merge needs two or more `triage report --json` files, one per node")
    nodes = [node_from_json(_read_json(path), path) for path in files]
    found = differences(nodes)
    if as_json:
        labels = node_labels(nodes, files)
        payload = {
            "nodes": labels,
            "differences": [
                {"area": d.area, "name": d.name, "values": dict(zip(labels, d.values, strict=True))}
                for d in found
            ],
        }
        text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
    else:
        text = merge_markdown(nodes, files, found)
    _write(text, out)
    return Exit.NOT_FOUND if found else Exit.OK


def _read_json(path: str) -> object:
    import json

    from triage.cli._common import read_text_file

    try:
        return json.loads(read_text_file(path, limit=MAX_JSON_BYTES))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def _write(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    from pathlib import Path

    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--out {out}: cannot be written ({exc.strerror or exc})") from None
    print(f"triage: report written to {out} ({text.count(chr(10))} lines)", file=sys.stderr)
