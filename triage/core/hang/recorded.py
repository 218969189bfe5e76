"""What the job recorded about its own collectives: Flight Recorder entries, per rank.

A Flight Recorder dump (the dict `torch._C._distributed_c10d._dump_fr_trace()` pickles, or its
JSON twin `_dump_fr_trace_json()`, the format `torchfrtrace` reads) lists the last collectives a
rank issued: their sequence id in their process group, their name ("gloo:all_reduce",
"nccl:_allgather_base"), their state and whether they finished. Pure: the probe reads the files,
sockets and pages; this module turns the decoded data into `RankRecord`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from triage.core.hang.stacks import Frame, LineContext

# Flight Recorder and DDP internals name some collectives differently from the Python API.
_ALIASES = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "allgather_coalesced": "all_gather_coalesced",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "sendrecv": "send",
}
MAX_OPS = 4096  # a dump holds TORCH_FR_BUFFER_SIZE entries; more than this is not a dump


def op_name(profiling_name: str) -> str:
    """`gloo:all_reduce` / `nccl:_allgather_base` -> the torch.distributed name (all_gather_into_tensor)."""
    name = profiling_name.rsplit(":", 1)[-1].strip().lower()
    return _ALIASES.get(name, name)


@dataclass(frozen=True)
class RecordedOp:
    """One collective (or point-to-point op) a rank issued, as its Flight Recorder kept it."""

    seq: int  # collective_seq_id (p2p_seq_id for point-to-point ops), per process group
    op: str  # torch.distributed name: all_reduce, barrier, ...
    group: str  # the process group's name
    pending: bool  # issued and not finished: the rank waits in it (or will)
    state: str = ""  # scheduled | started | completed
    p2p: bool = False
    frames: tuple[Frame, ...] = ()  # the Python stack that issued it, innermost first (pickle only)

    def label(self) -> str:
        return f"{self.op} #{self.seq}" + (f" of group {self.group}" if self.group not in ("", "0") else "")


@dataclass(frozen=True)
class RankRecord:
    """What one rank's Flight Recorder holds, and where it came from."""

    rank: int
    source: str
    ops: tuple[RecordedOp, ...]
    world_size: int | None = None  # ranks in the default group, from the dump's pg_config
    contexts: dict[str, LineContext] = field(default_factory=dict)  # "file:line" of the ops' frames

    def waiting_in(self) -> RecordedOp | None:
        """The latest collective issued and not finished: the one the rank waits in."""
        pending = [o for o in self.ops if o.pending and not o.p2p]
        return max(pending, key=lambda o: o.seq) if pending else None

    def last_done(self) -> RecordedOp | None:
        done = [o for o in self.ops if not o.pending and not o.p2p]
        return max(done, key=lambda o: o.seq) if done else None


def _int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return 0


def _frames(raw: object) -> tuple[Frame, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Frame(str(f.get("name", "?")), str(f.get("filename", "?")), _int(f.get("line")))
        for f in raw[:256]
        if isinstance(f, Mapping)
    )


def _group(entry: Mapping[str, object]) -> str:
    group = entry.get("process_group")
    if isinstance(group, list | tuple) and group:
        name = str(group[-1])
        return "" if name == "default_pg" else name
    return ""


def world_from_dump(data: Mapping[str, object]) -> int | None:
    """How many ranks the default process group has, from the dump's pg_config."""
    config = data.get("pg_config")
    if not isinstance(config, Mapping):
        return None
    sizes: dict[str, int] = {}
    for key, group in config.items():
        ranks = group.get("ranks") if isinstance(group, Mapping) else None
        if isinstance(ranks, str) and ranks.startswith("["):
            sizes[str(key)] = len([r for r in ranks.strip("[]").split(",") if r.strip()])
    default = next((sizes[k] for k in ("", "0", "default_pg") if k in sizes), None)
    return default if default is not None else max(sizes.values(), default=None)


def ops_from_dump(data: object) -> tuple[RecordedOp, ...]:
    """The ops of one rank's Flight Recorder dump. Raises ValueError when `data` is not one."""
    if not isinstance(data, Mapping) or "entries" not in data or "version" not in data:
        raise ValueError("not a Flight Recorder dump (no `version` and `entries`)")
    entries = data["entries"]
    if not isinstance(entries, list) or len(entries) > MAX_OPS:
        raise ValueError("not a Flight Recorder dump (`entries` is not a list of entries)")
    ops = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        p2p = bool(entry.get("is_p2p"))
        state = str(entry.get("state") or "")
        ops.append(
            RecordedOp(
                seq=_int(entry.get("p2p_seq_id" if p2p else "collective_seq_id")),
                op=op_name(str(entry.get("profiling_name") or "?")),
                group=_group(entry),
                # gloo never marks an entry started or completed: retired is its only "finished".
                pending=not entry.get("retired") and state != "completed",
                state=state,
                p2p=p2p,
                frames=_frames(entry.get("frames")),
            )
        )
    return tuple(ops)
