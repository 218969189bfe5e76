"""One probe in a child process: what the app runs, so a probe can never stall or crash the UI.

In-process, the dist probe's `import torch` holds the GIL for about half a second (measured with
bench/bench_tui.py: key latency up to ~700 ms while it loads), torch warnings would write over the
screen, and a crashing native library would take the app with it. A child process has none of
those problems. Protocol, one JSON line each way: the parent writes the request on stdin and keeps
stdin open; any further line, or stdin closing, cancels the probe (which then stops its own
children); the child writes the ProbeResult as JSON on stdout and exits.

    python -m probes.process   # reads {"name": ..., "options": {...}} on stdin
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from triage.core.facts import ProbeOptions, ProbeResult


def result_to_json(result: ProbeResult) -> str:
    """One JSON line for the parent."""
    return json.dumps(result.to_plain(), default=str)


def result_from_json(text: str) -> ProbeResult:
    """The child's JSON line as a ProbeResult."""
    data: dict[str, Any] = json.loads(text)
    return ProbeResult.from_plain(data)


def main() -> int:
    """Run one probe named on stdin and write its result as a JSON line."""
    from triage.core import children

    children.watch_parent()  # the app died without stopping this probe: stop with it
    request = json.loads(sys.stdin.readline())
    options = ProbeOptions(**request.get("options", {}))
    cancel = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()  # a line or EOF: the parent wants the probe stopped
        cancel.set()

    threading.Thread(target=watch_stdin, name="cancel-watch", daemon=True).start()
    from probes.registry import LocalProbeRunner

    result = LocalProbeRunner().run(str(request["name"]), options, cancel)
    sys.stdout.write(result_to_json(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
