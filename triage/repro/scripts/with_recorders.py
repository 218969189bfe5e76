"""Run a training script with the job's own records switched on, as a user would for a hang.

Usage, under torchrun: `with_recorders.py SCRIPT [ARGS...]`. Before the script runs:
- with `TORCH_FR_BUFFER_SIZE` and `TORCH_FR_DUMP_TEMP_FILE` set, a thread writes this rank's
  Flight Recorder to `<TORCH_FR_DUMP_TEMP_FILE><rank>` every second. gloo records every collective
  but never dumps by itself (NCCL dumps on its watchdog timeout), so the job asks, from a thread:
  the main thread is stuck inside the collective;
- with `TRIAGE_DEBUG_SERVER_PORT` set, torch.distributed.debug's server starts (the page on rank
  0 at that port, every rank's worker server on a free port), writing its dumps to
  `TRIAGE_DEBUG_DUMP_DIR` every second.
"""

import os
import runpy
import sys
import threading
import time

import torch.distributed  # noqa: F401  (imported before any thread: torch's import is not thread-safe)
from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]


def dump_flight_recorder(prefix: str, rank: str) -> None:
    """Keep writing this rank's flight-recorder trace to `prefix` + rank."""
    path = f"{prefix}{rank}"
    while True:
        data = _dump_fr_trace()
        with open(f"{path}.tmp", "wb") as handle:
            handle.write(data)
        os.replace(f"{path}.tmp", path)  # a reader never sees half a dump
        time.sleep(1.0)


def main() -> None:
    """Run this reproduction as one rank of the job."""
    script = sys.argv[1]
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if prefix and os.environ.get("TORCH_FR_BUFFER_SIZE"):
        rank = os.environ["RANK"]
        threading.Thread(target=dump_flight_recorder, args=(prefix, rank), daemon=True).start()
    port = os.environ.get("TRIAGE_DEBUG_SERVER_PORT")
    if port:
        from torch.distributed.debug import start_debug_server

        start_debug_server(
            port=int(port),
            dump_dir=os.environ.get("TRIAGE_DEBUG_DUMP_DIR"),
            dump_interval=1.0,
            enabled_dumps={"stacks", "fr_trace"},
            fetch_timeout=5.0,
        )
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
