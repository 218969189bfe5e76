"""What a bug report lists about a machine beyond the probes' facts, and how nodes are compared.

The probes establish the facts the walk branches on; a report also needs plain inventory that no
branch depends on (the driver version, the GPU models, the topology matrix, every NCCL_* and TORCH_*
variable, the MTU of each interface). `probes.inventory` reads it; this module holds its shape, the
per-node summary that `triage report --json` writes, and the comparison `triage report merge` makes.
Pure: no file, process or environment is read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage.core.errors import UserError
from triage.core.facts import ProbeResult

NODE_SCHEMA = 1
NODE_KIND = "triage-report"
# What is compared across nodes, in the order the merge lists it, with the label it is shown under.
AREAS = (
    ("versions", "Versions"),
    ("drivers", "Drivers and GPUs"),
    ("settings", "NCCL and torch settings"),
    ("launcher", "Launcher and rank contract"),
    ("network", "Network"),
    ("probes", "Probe verdicts"),
)
UNSET = "(unset)"
# Variables that differ between nodes (or processes) by design: never flagged.
_PER_NODE = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "NODE_RANK",
        "SLURM_PROCID",
        "SLURM_NODEID",
        "SLURM_LOCALID",
        "SLURM_STEP_GPUS",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "MPI_LOCALRANKID",
        "CROSS_RANK",
    }
)


@dataclass(frozen=True)
class Inventory:
    """Plain facts about the machine for the report. Values are already redacted by the reader."""

    system: str = ""  # "Linux 6.1.0 x86_64"
    driver: str = ""  # NVIDIA driver, from NVML
    cuda_driver: str = ""  # the CUDA version the driver supports
    gpus: tuple[str, ...] = ()  # one name per GPU, in index order
    topology: str = ""  # `nvidia-smi topo -m`
    settings: Mapping[str, str] = field(default_factory=dict)  # NCCL_*, TORCH_*, CUDA_*, ...
    rank_variables: Mapping[str, str] = field(default_factory=dict)  # RANK, MASTER_ADDR, SLURM_*, ...
    interfaces: Mapping[str, int] = field(default_factory=dict)  # name -> MTU, up and not loopback
    unseen: tuple[str, ...] = ()  # what could not be read, each with why


@dataclass(frozen=True)
class NodeSummary:
    """One node as `triage report --json` writes it: the values worth comparing across nodes."""

    host: str
    generated: str
    areas: Mapping[str, Mapping[str, str]]  # area -> name -> value (see AREAS)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "generated": self.generated,
            "compare": {k: dict(v) for k, v in self.areas.items()},
        }


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def summarise_node(
    host: str,
    generated: str,
    results: Sequence[ProbeResult],
    inventory: Inventory | None,
) -> NodeSummary:
    """The comparable values of one node, from its probe results and its inventory."""
    facts: dict[str, object] = {}
    for result in results:
        facts.update(result.facts)
    versions = {
        name: _text(facts[f"versions.{name}"])
        for name in ("python", "torch", "cuda", "nccl", "accelerate", "deepspeed")
        if f"versions.{name}" in facts
    }
    drivers: dict[str, str] = {}
    launcher = {
        name.split(".", 1)[1]: _text(facts[name])
        for name in ("env.launcher", "env.rank_contract", "env.world_size", "env.multi_node")
        if name in facts
    }
    settings: dict[str, str] = {}
    network = {
        name.split(".", 1)[1]: _text(facts[name]) for name in ("net.socket_ifname_valid",) if name in facts
    }
    if inventory is not None:
        if inventory.system:
            versions["os"] = inventory.system
        drivers.update({"driver": inventory.driver, "cuda_driver": inventory.cuda_driver})
        drivers = {k: v for k, v in drivers.items() if v}
        drivers["gpus"] = str(len(inventory.gpus))
        if inventory.gpus:
            drivers["gpu_models"] = ", ".join(sorted(set(inventory.gpus)))
        settings.update(inventory.settings)
        launcher.update({k: v for k, v in inventory.rank_variables.items() if k not in _PER_NODE})
        network.update({f"mtu {name}": str(mtu) for name, mtu in inventory.interfaces.items()})
    probes = {r.name: str(r.status) for r in results}
    areas: dict[str, dict[str, str]] = {
        "versions": versions,
        "drivers": drivers,
        "settings": settings,
        "launcher": launcher,
        "network": network,
        "probes": probes,
    }
    return NodeSummary(host, generated, areas)


def node_from_json(data: object, where: str) -> NodeSummary:
    """A node read back from `triage report --json`; a file of another shape is a UserError."""
    if not isinstance(data, dict) or data.get("kind") != NODE_KIND:
        raise UserError(f'{where}: not a `triage report --json` file (no "kind": "{NODE_KIND}")')
    if data.get("schema") != NODE_SCHEMA:
        raise UserError(
            f"{where}: report schema {data.get('schema')!r}; this triage reads schema {NODE_SCHEMA}"
        )
    node = data.get("node")
    if not isinstance(node, dict) or not isinstance(node.get("compare"), dict):
        raise UserError(f'{where}: the report has no "node" section to compare')
    areas: dict[str, dict[str, str]] = {}
    for area, values in node["compare"].items():
        if not isinstance(values, dict):
            raise UserError(f"{where}: node.compare.{area} is not an object")
        areas[str(area)] = {str(k): str(v) for k, v in values.items()}
    return NodeSummary(str(node.get("host") or where), str(node.get("generated", "")), areas)


@dataclass(frozen=True)
class Difference:
    """One value that is not the same on every node."""

    area: str
    name: str
    values: tuple[str, ...]  # one per node, in the order the nodes were given


def differences(nodes: Sequence[NodeSummary]) -> list[Difference]:
    """Every compared value that differs between the nodes, by area then name. A value present on
    some nodes only counts as a difference (shown as "(unset)" where it is missing)."""
    out: list[Difference] = []
    known = [area for area, _ in AREAS] + sorted({a for n in nodes for a in n.areas} - {a for a, _ in AREAS})
    for area in known:
        names = sorted({name for node in nodes for name in node.areas.get(area, {})})
        for name in names:
            values = tuple(node.areas.get(area, {}).get(name, UNSET) for node in nodes)
            if len(set(values)) > 1:
                out.append(Difference(area, name, values))
    return out


def area_title(area: str) -> str:
    """The heading of an inventory area."""
    return dict(AREAS).get(area, area)
