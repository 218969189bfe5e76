"""The machine's part of the report: versions, launcher, settings, GPUs, network, configs, probes.

Each function returns the Markdown body of one section from the probe results and the inventory;
a section whose source did not run says so in its body (and the report's last section lists it).
Long material (evidence, topology, many variables) is folded into `<details>` blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from triage.core.facts import ProbeResult
from triage.core.inventory import Inventory
from triage.core.walker import fact_text
from triage.render.document import md_code, md_inline, md_text

FOLD_LINES = 8  # a table or listing longer than this is folded
NOT_LOOKED = "Not looked at"


def fenced(text: str, lang: str = "text") -> str:
    """A fenced code block holding `text` verbatim, whatever fences it contains."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def details(summary: str, body: str) -> str:
    """A folded block (GitHub, GitLab and most trackers render it)."""
    return f"<details><summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"


def cell(value: str) -> str:
    """A table cell holding a value as code, or `-`."""
    return md_code(value).replace("|", "\\|") if value else "-"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fold_if_long(summary: str, body: str, rows: int) -> str:
    """The body, folded under `summary` when it has many rows."""
    return details(summary, body) if rows > FOLD_LINES else body


def _facts(results: Sequence[ProbeResult]) -> dict[str, object]:
    facts: dict[str, object] = {}
    for result in results:
        facts.update(result.facts)
    return facts


def _probe(results: Sequence[ProbeResult], name: str) -> ProbeResult | None:
    return next((r for r in results if r.name == name), None)


def _status_line(result: ProbeResult | None, name: str, not_run: Mapping[str, str]) -> str:
    if result is None:
        why = not_run.get(name, "it did not run")
        return f"*{NOT_LOOKED}: the {name} probe did not run ({md_inline(why)}).*"
    return f"The {name} probe: **{result.status}**. {md_text(result.summary)}".rstrip()


# -- sections ------------------------------------------------------------------------------------


def versions_section(
    results: Sequence[ProbeResult], inventory: Inventory | None, not_run: Mapping[str, str]
) -> str:
    """The report's versions section."""
    versions = _probe(results, "versions")
    facts = _facts(results)
    rows: list[list[str]] = []

    def fact(name: str, label: str, absent: str) -> None:
        key = f"versions.{name}"
        if key in facts and fact_text(facts[key]) not in ("", '""'):
            rows.append([label, cell(fact_text(facts[key])), "versions probe"])
        elif versions is not None:
            rows.append([label, absent, "versions probe"])

    fact("python", "python", "unknown")
    fact("torch", "torch", "not installed")
    fact("cuda", "CUDA (torch build)", "none (a CPU build)" if "versions.torch" in facts else "unknown")
    fact("nccl", "NCCL", "none read (CPU build, or not found)")
    fact("accelerate", "accelerate", "not installed")
    fact("deepspeed", "deepspeed", "not installed")
    if inventory is not None:
        rows.append(["NVIDIA driver", cell(inventory.driver) if inventory.driver else "none seen", "NVML"])
        if inventory.cuda_driver:
            rows.append(["CUDA (driver supports)", cell(inventory.cuda_driver), "NVML"])
        if inventory.system:
            rows.append(["OS", cell(inventory.system), "platform"])
    out = [_status_line(versions, "versions", not_run)]
    if rows:
        out += ["", table(["component", "version", "read by"], rows)]
    if versions is not None and versions.evidence:
        out += ["", details("Where each version came from", _evidence(versions))]
    return "\n".join(out)


def launcher_section(
    results: Sequence[ProbeResult], inventory: Inventory | None, not_run: Mapping[str, str]
) -> str:
    """The report's launcher and rank-variables section."""
    env = _probe(results, "env")
    out = [_status_line(env, "env", not_run)]
    if env is not None:
        shown = [
            ("launcher", "env.launcher"),
            ("rank contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)", "env.rank_contract"),
            ("world size", "env.world_size"),
            ("several nodes", "env.multi_node"),
            ("LOCAL_RANK set", "env.local_rank_set"),
        ]
        rows = [[label, cell(fact_text(env.facts[key]))] for label, key in shown if key in env.facts]
        out += ["", table(["what", "value"], rows)]
    if inventory is not None:
        variables = inventory.rank_variables
        if variables:
            body = table(["variable", "value"], [[cell(k), cell(v)] for k, v in variables.items()])
            out += ["", fold_if_long(f"The rank variables ({len(variables)})", body, len(variables))]
        else:
            out += ["", "No rank variable is set (RANK, WORLD_SIZE, MASTER_ADDR, SLURM_*, OMPI_*, ...)."]
    return "\n".join(out)


def settings_section(inventory: Inventory | None, why: str) -> str:
    """The report's settings section."""
    if inventory is None:
        return f"*{NOT_LOOKED}: {md_inline(why)}.*"
    settings = inventory.settings
    if not settings:
        return "None of NCCL_\\*, TORCH_\\*, PYTORCH_\\*, CUDA_\\*, GLOO_\\*, FI_\\*, UCX_\\* or OMP_NUM_THREADS is set."
    body = table(["variable", "value"], [[cell(k), cell(v)] for k, v in settings.items()])
    return f"{len(settings)} set in this process's environment:\n\n" + fold_if_long(
        f"The {len(settings)} variables", body, len(settings)
    )


def gpus_section(
    results: Sequence[ProbeResult], inventory: Inventory | None, not_run: Mapping[str, str]
) -> str:
    """The report's GPU section."""
    gpu = _probe(results, "gpu")
    out = [_status_line(gpu, "gpu", not_run)]
    if inventory is not None and inventory.gpus:
        counts: dict[str, int] = {}
        for name in inventory.gpus:
            counts[name] = counts.get(name, 0) + 1
        listed = ", ".join(f"{n} x {md_text(name)}" for name, n in counts.items())
        driver = f", driver {md_code(inventory.driver)}" if inventory.driver else ""
        out += ["", f"{listed}{driver}."]
    if inventory is not None and inventory.topology:
        out += ["", details("Topology (`nvidia-smi topo -m`)", fenced(inventory.topology))]
    if gpu is not None and gpu.evidence:
        out += ["", details("What the gpu probe read", _evidence(gpu))]
    return "\n".join(out)


def network_section(
    results: Sequence[ProbeResult], inventory: Inventory | None, not_run: Mapping[str, str]
) -> str:
    """The report's network section."""
    net = _probe(results, "net")
    out = [_status_line(net, "net", not_run)]
    if inventory is not None and inventory.interfaces:
        rows = [[cell(name), str(mtu)] for name, mtu in inventory.interfaces.items()]
        out += ["", table(["interface (up)", "MTU"], rows)]
    if net is not None and net.evidence:
        out += ["", details("What the net probe read", _evidence(net))]
    return "\n".join(out)


def configs_section(results: Sequence[ProbeResult], not_run: Mapping[str, str]) -> str:
    """The report's config-files section."""
    configs = _probe(results, "configs")
    out = [_status_line(configs, "configs", not_run)]
    if configs is not None and configs.evidence:
        out += ["", details("What the configs probe read", _evidence(configs))]
    return "\n".join(out)


def probes_section(
    results: Sequence[ProbeResult], not_run: Mapping[str, str], cancelled: Sequence[str]
) -> str:
    """The report's table of probes run."""
    rows = [
        [r.name, f"**{r.status}**", f"{r.duration_s:.1f} s", md_text(r.summary).replace("|", "\\|") or "-"]
        for r in results
    ]
    rows += [[name, "not run", "-", md_inline(why).replace("|", "\\|")] for name, why in not_run.items()]
    rows += [[name, "cancelled", "-", "stopped by you"] for name in cancelled]
    if not rows:
        return "No probe ran."
    out = [table(["probe", "verdict", "time", "summary"], rows)]
    for result in results:
        if result.facts:
            facts = "\n".join(
                f"- {md_code(k)} = {md_code(fact_text(v))}" for k, v in sorted(result.facts.items())
            )
            flagged = (
                f"\n\nFlagged as abnormal: {', '.join(md_code(f) for f in result.flagged)}."
                if result.flagged
                else ""
            )
            out += ["", details(f"{result.name}: the facts it established", facts + flagged)]
    return "\n".join(out)


def _evidence(result: ProbeResult) -> str:
    return "\n\n".join(
        f"{md_code(item.source)}\n\n{fenced(item.output or '(no output)')}" for item in result.evidence
    )


def value(raw: object) -> str:
    """A fact value as inline code; an empty value is said to be empty."""
    text = fact_text(raw)
    return "(empty)" if text in ("", '""') else md_code(text)
