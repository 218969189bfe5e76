"""One rank of the mini-test: connect to the store, init, barrier, checked all_reduce, size sweep.

The same code runs as a child of the local launcher (probes.dist.local), under torchrun on one or
many nodes, or under srun. Before each step the rank checks in through the store, so whoever
monitors can name the ranks that never arrived and the step they stopped at.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from triage.core import launchers
from probes.dist.protocol import (
    FAULT_ENV,
    FAULT_EXIT_CODE,
    FINISHED_KEY,
    LAST,
    PROGRESS_KEY,
    STEPS,
    CheckIn,
    Fault,
    inventory_key,
    parse_faults,
    report_key,
    state_key,
)
from triage.core.launchers import first_int
from triage.core import children
from triage.core.exitcodes import Exit
from triage.core.redact import is_secret_name, redact_text

KEY_PREFIX = "triage/dist"
CHILD_ENV = "TRIAGE_DIST_CHILD"  # set by the local launcher, which hosts the store and monitors
RUN_ENV = "TRIAGE_DIST_RUN"
GLOO_SIZES = (4 << 10, 64 << 10, 1 << 20, 4 << 20)
NCCL_SIZES = (64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20)


@dataclass
class WorkerConfig:
    """Who this rank is and where the store lives, read from the launcher's variables."""

    rank: int
    world_size: int
    local_rank: int
    node: int
    master_addr: str
    master_port: int
    store_hosted: bool  # the store runs elsewhere (local launcher, torchrun agent); else rank 0 hosts it
    monitor: bool  # this rank watches the others and prints the report (rank 0 unless a launcher does)
    prefix: str
    backend: str = "auto"
    stall_timeout_s: float = 10.0
    startup_timeout_s: float = 60.0
    faults: dict[int, Fault] = field(default_factory=dict)
    as_json: bool = False
    child: bool = False  # started by the local launcher, which kills it if it lingers

    @classmethod
    def from_env(cls, env: Mapping[str, str], **options: Any) -> WorkerConfig:
        """From torchrun's variables, SLURM's or Open MPI's; raises ValueError naming what is missing."""
        rank = first_int(env, launchers.RANK)
        world = first_int(env, launchers.WORLD_SIZE)
        if rank is None or world is None:
            raise ValueError("RANK and WORLD_SIZE (or SLURM_PROCID and SLURM_NTASKS) must be set for a worker")
        local_rank = first_int(env, launchers.LOCAL_RANK) or 0
        node = first_int(env, launchers.NODE_RANK) or 0
        addr = env.get("MASTER_ADDR", "").strip()
        if not addr:
            raise ValueError("MASTER_ADDR must name the host of rank 0 (torchrun sets it; under srun export it)")
        port = first_int(env, ("MASTER_PORT",)) or 29500
        child = env.get(CHILD_ENV) == "1"
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        if child:
            prefix = env.get(RUN_ENV, "local")
        elif "TORCHELASTIC_RUN_ID" in env:
            prefix = f"{env['TORCHELASTIC_RUN_ID']}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        elif "SLURM_JOB_ID" in env:
            prefix = f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
        else:
            prefix = "default"
        return cls(
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            node=node,
            master_addr=addr,
            master_port=port,
            store_hosted=child or agent,
            monitor=rank == 0 and not child,
            child=child,
            prefix=prefix,
            faults=parse_faults(env.get(FAULT_ENV, "")),
            **options,
        )


def nccl_environment(env: Mapping[str, str]) -> dict[str, str]:
    """NCCL_* and TORCH_NCCL_* settings; values of secret-looking names are replaced by a digest,
    so ranks can still be compared without the value travelling or being printed."""
    import hashlib

    out = {}
    for name, value in sorted(env.items()):
        if name.startswith(("NCCL_", "TORCH_NCCL_")):
            if is_secret_name(name):
                value = "<redacted #" + hashlib.sha256(value.encode()).hexdigest()[:8] + ">"
            out[name] = redact_text(value)
    return out


def inventory(cfg: WorkerConfig, device: str, backend: str) -> dict[str, Any]:
    """What rank 0 compares across ranks: host, versions, GPUs, NICs, NCCL settings."""
    import torch

    from probes import gpu, net

    nccl = ""
    if torch.version.cuda and torch.cuda.is_available():
        try:
            raw = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            nccl = ".".join(str(p) for p in raw) if isinstance(raw, tuple) else str(raw)
        except Exception:
            nccl = ""
    names = sorted(os.listdir(net.SYS_NET)) if net.SYS_NET.is_dir() else []
    nics = net.list_interfaces(net.SYS_NET, net.addresses_from_kernel(names))
    gpus = gpu.inventory()
    return {
        "rank": cfg.rank,
        "local_rank": cfg.local_rank,
        "node": cfg.node,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "nccl": nccl,
        "backend": backend,
        "device": device,
        "gpus": gpus["gpus"],
        "driver": gpus["driver"],
        "nics": [{"name": i.name, "mtu": i.mtu, "up": i.up, "addresses": list(i.addresses)} for i in nics],
        "data_mtus": ",".join(f"{i.name}={i.mtu}" for i in nics if i.data_candidate),
        "nccl_env": nccl_environment(os.environ),
    }


def _fire(fault: Fault | None, step: str, rank: int) -> None:
    """Carry out an injected fault that is due before `step`."""
    if fault is None or fault.step != step:
        return
    if fault.kind == "sleep":
        time.sleep(24 * 3600)  # the monitor's timeout ends this
    elif fault.kind == "exit":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(FAULT_EXIT_CODE)
    elif fault.kind == "raise":
        raise RuntimeError(f"injected fault: rank {rank} raises before {step}")


def sweep(dist: Any, torch: Any, device: Any, sizes: tuple[int, ...], iters: int, world: int, on_size: Any) -> list[dict[str, float]]:
    """all_reduce over growing sizes: time per call, algorithmic and bus bandwidth (nccl-tests' busbw:
    algbw * 2(n-1)/n for all_reduce)."""
    rows = []
    for size in sizes:
        on_size(size)
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        dist.all_reduce(tensor)  # warm-up: connections, buffers
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - start) / iters
        algbw = size / seconds / 1e9
        rows.append(
            {
                "bytes": size,
                "time_s": seconds,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (world - 1) / world,
            }
        )
    return rows


def _short(message: str, limit: int = 200) -> str:
    """The first line of an error, without gloo's source path prefix, cut at a sentence if long."""
    text = message.strip().splitlines()[0] if message.strip() else ""
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]  # "[/__w/pytorch/.../pair.cc:553] Connection closed by peer ..."
    if len(text) > limit:
        cut = text.rfind(". ", 0, limit)
        text = text[: cut + 1] if cut > 40 else text[:limit] + "..."
    return text


PEERS_WAIT_S = 10.0  # how long an injected fault waits for the other ranks to finish the step before


def _await_peers(store: Any, cfg: WorkerConfig, done: int) -> None:
    """Wait (bounded) until every other rank has finished step `done`, so that an injected fault
    strikes at its step and not, by a race, while a peer is still finishing the one before (a rank
    that exits right after init can otherwise break a slower peer's own init)."""
    deadline = time.monotonic() + PEERS_WAIT_S
    peers = [r for r in range(cfg.world_size) if r != cfg.rank]
    while time.monotonic() < deadline:
        keys = [state_key(r) for r in peers]
        if store.check(keys) and all(CheckIn.decode(store.get(k)).done >= done for k in keys):
            return
        time.sleep(0.05)


def run(cfg: WorkerConfig) -> int:
    """Run this rank; returns its exit status (rank 0 under torchrun: the verdict's)."""
    fault = cfg.faults.get(cfg.rank)
    _fire(fault, "connect", cfg.rank)
    children.quiet_torch_import()
    import torch
    import torch.distributed

    # Typed as Any: torch's stubs do not export the store classes, and this module only needs them.
    dist: Any = torch.distributed
    base = dist.TCPStore(
        cfg.master_addr,
        cfg.master_port,
        None,
        not cfg.store_hosted and cfg.rank == 0,
        timedelta(seconds=cfg.startup_timeout_s),
        wait_for_workers=False,
        multi_tenant=True,
    )
    store = dist.PrefixStore(f"{KEY_PREFIX}/{cfg.prefix}/", base)
    record = CheckIn(cfg.rank)

    def check_in(**changes: Any) -> None:
        for name, value in changes.items():
            setattr(record, name, value)
        store.set(state_key(cfg.rank), record.encode())
        store.add(PROGRESS_KEY, 1)

    backend = cfg.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(cfg.local_rank)
        device = torch.device("cuda", cfg.local_rank)
        device_text = f"cuda:{cfg.local_rank}"
    else:
        device = torch.device("cpu")
        device_text = "cpu"
    store.set(inventory_key(cfg.rank), json.dumps(inventory(cfg, device_text, backend)))
    check_in(entered=0, done=0)

    watcher = _start_monitor(cfg, dist, backend) if cfg.monitor else None
    timings: dict[str, float] = {}
    status = 0
    correct, value = True, 0.0
    rows: list[dict[str, float]] = []
    try:
        for index, step in enumerate(STEPS[1:LAST], start=1):
            if fault is not None and fault.step == step and index > 1:
                _await_peers(store, cfg, index - 1)
            _fire(fault, step, cfg.rank)
            check_in(entered=index, detail="")
            started = time.perf_counter()
            if step == "init":
                kwargs: dict[str, Any] = {}
                if backend == "nccl":
                    kwargs["device_id"] = device  # eager NCCL init, so a bad fabric shows up here
                dist.init_process_group(
                    backend,
                    store=dist.PrefixStore("pg/", store),
                    rank=cfg.rank,
                    world_size=cfg.world_size,
                    timeout=timedelta(seconds=2 * cfg.stall_timeout_s + 5),
                    **kwargs,
                )
            elif step == "barrier":
                if backend == "nccl":
                    dist.barrier(device_ids=[cfg.local_rank])
                else:
                    dist.barrier()
            elif step == "all_reduce":
                wrong = fault is not None and fault.kind == "wrong"
                tensor = torch.full((1024,), float(cfg.rank + 1 + (1 if wrong else 0)), device=device)
                dist.all_reduce(tensor)
                expected = cfg.world_size * (cfg.world_size + 1) / 2
                value = float(tensor[0].item())
                correct = bool(torch.all(tensor == expected).item())
            elif step == "sweep":
                sizes = NCCL_SIZES if backend == "nccl" else GLOO_SIZES
                rows = sweep(
                    dist,
                    torch,
                    device,
                    sizes,
                    10 if backend == "nccl" else 3,
                    cfg.world_size,
                    lambda size: check_in(detail=f"{size} bytes"),
                )
            timings[step] = round(time.perf_counter() - started, 4)
            check_in(done=index)
        _fire(fault, "report", cfg.rank)
        check_in(entered=LAST)
        report = {"rank": cfg.rank, "correct": correct, "value": value, "timings": timings, "sweep": rows}
        store.set(report_key(cfg.rank), json.dumps(report))
        check_in(done=LAST)
    except Exception as exc:
        message = _short(str(exc))
        try:
            check_in(error=f"{type(exc).__name__}: {message}")
        except Exception:
            pass  # the store is gone too; the monitor sees the process exit instead
        print(f"rank {cfg.rank}: {type(exc).__name__}: {message}", file=sys.stderr, flush=True)
        status = 1
    if watcher is not None:
        watcher.join()
        status = watcher.status
    elif status == 0:
        try:
            store.wait([FINISHED_KEY], timedelta(seconds=cfg.stall_timeout_s + 5))
        except Exception:
            pass  # the monitor went away; nothing left to wait for
    if cfg.child:
        # The launcher has its verdict; tearing down torch and the interpreter would only cost it
        # a second of waiting per run.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    if dist.is_initialized():
        dist.destroy_process_group()
    return status


class _Watcher(threading.Thread):
    """Rank 0's monitor thread under torchrun/srun: prints the report; on a failed verdict it ends the
    process at once, since the main thread may be stuck in a collective that will never return."""

    def __init__(self, cfg: WorkerConfig, dist: Any, backend: str) -> None:
        super().__init__(name="triage-dist-monitor", daemon=True)
        self.cfg = cfg
        self.dist = dist
        self.backend = backend
        self.status = 0

    def run(self) -> None:
        from probes.dist.monitor import Monitor
        from probes.dist.report import facts, format_text

        cfg = self.cfg
        client = self.dist.TCPStore(
            cfg.master_addr, cfg.master_port, None, False, timedelta(seconds=cfg.startup_timeout_s)
        )
        store = self.dist.PrefixStore(f"{KEY_PREFIX}/{cfg.prefix}/", client)
        outcome = Monitor(
            store,
            cfg.world_size,
            stall_timeout_s=cfg.stall_timeout_s,
            startup_timeout_s=cfg.startup_timeout_s,
            deadline_s=cfg.startup_timeout_s + 20 * cfg.stall_timeout_s,
            backend=self.backend,
        ).run()
        found = facts(outcome)
        if cfg.as_json:
            print(json.dumps({"facts": found, **outcome.to_json()}, indent=2), flush=True)
        else:
            print(format_text(outcome), flush=True)
        # Differences are reported, not failed on: a non-zero exit would make torchrun call the job
        # failed and bury the report under its own error summary.
        if outcome.result != "ok":
            self.status = Exit.FAIL
            sys.stderr.flush()
            os._exit(self.status)


def _start_monitor(cfg: WorkerConfig, dist: Any, backend: str) -> _Watcher:
    watcher = _Watcher(cfg, dist, backend)
    watcher.start()
    return watcher
