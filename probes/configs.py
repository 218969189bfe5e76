"""The configs probe: the Accelerate config and a DeepSpeed JSON, read together.

D5: no Accelerate config, or one that launches a single process on a multi-GPU box. D17: keys the
DeepSpeed JSON overrides also set in the Accelerate config. D18: gradient accumulation set to a
number in both places; fp16 in one and bf16 in the other. Reads files only.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.subproc import evidence
from triage.core.errors import UserError, shown
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status
from triage.core.files import Refused, read_regular

NAME = "configs"
KEY_FACTS = ("configs.accelerate_config", "configs.ds_config", "configs.ds_double_set")

MAX_BYTES = 1 << 20
MAX_NESTING = 64  # levels of [ and { a config may nest: real ones nest three or four
# Keys of an Accelerate config's deepspeed_config section that a DeepSpeed JSON overrides
# (Accelerate refuses them alongside deepspeed_config_file), with the JSON key each maps to.
OVERRIDDEN = {
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}


class ConfigError(Exception):
    """A config file that exists but cannot be used: its reason is one line."""


def default_accelerate_config() -> Path:
    """Where `accelerate config` writes: $HF_HOME/accelerate, else ~/.cache/huggingface/accelerate."""
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    folder = Path(hf_home) / "accelerate"
    yaml_path = folder / "default_config.yaml"
    json_path = folder / "default_config.json"
    return json_path if json_path.is_file() and not yaml_path.is_file() else yaml_path


def read_mapping(path: Path, kind: str) -> dict[str, Any]:
    """A YAML or JSON file that must hold a mapping; ConfigError names what is wrong."""
    try:
        text = read_regular(path, MAX_BYTES).decode("utf-8")
    except Refused as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text) if kind == "DeepSpeed" else _yaml_without_aliases(text)
    except ConfigError as exc:
        raise ConfigError(f"{path} {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: line {exc.lineno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path} is nested too deeply for a {kind} config") from exc
    except Exception as exc:  # yaml.YAMLError and its parser errors
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a {kind} config mapping")
    return data


def _yaml_without_aliases(text: str, parse: bool = True) -> Any:
    """yaml.safe_load, refusing aliases first: nested ones (a "billion laughs") expand exponentially
    when the result is walked, and no Accelerate config uses them. With parse=False, only the check
    (a text YAML cannot tokenize passes it)."""
    import yaml

    if _nesting(text) > MAX_NESTING:
        raise ConfigError(f"is nested more than {MAX_NESTING} levels deep")
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.AliasToken):
                raise ConfigError(f"uses a YAML alias (*{token.value}) at line {token.start_mark.line + 1}")
    except yaml.YAMLError:
        if parse:
            raise
        return None
    return yaml.safe_load(text) if parse else None


def _nesting(text: str) -> int:
    """How deep `[` and `{` nest (quotes ignored: an estimate that errs on the deep side). PyYAML
    takes time quadratic in this depth before it gives up."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def check_option(flag: str, value: str | None, kind: str) -> None:
    """A config path given on the command line, checked before any probe runs: UserError (exit 2)
    naming the flag when the file is missing, unreadable, not a regular file (a FIFO would hang the
    probe, /dev/zero fill memory), too large, or YAML with aliases. A config that merely does not
    parse is left to the probe, which reports it as a finding."""
    if value is None:
        return
    path = Path(value).expanduser()
    try:
        text = read_regular(path, MAX_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        raise UserError(f"{flag}: no such file: {shown(value)}") from None
    except OSError as exc:
        raise UserError(f"{flag}: {shown(value)}: {exc.strerror or exc}") from None
    if kind != "DeepSpeed":
        try:
            _yaml_without_aliases(text, parse=False)
        except ConfigError as exc:
            raise UserError(f"{flag}: {shown(value)} {exc}") from None


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _set(value: Any) -> bool:
    """A value the user chose (not absent, not "auto", not "none"/"no")."""
    return value is not None and str(value).strip().lower() not in ("", "auto", "none", "no")


@dataclass
class ConfigReport:
    """What the config probe found: facts, notes for people, and failures."""

    facts: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)


def analyse(
    accelerate: dict[str, Any] | None,
    deepspeed: dict[str, Any] | None,
    gpu_count: int,
    ds_state: str,
) -> ConfigReport:
    """The configs.* facts for parsed configs (None where a file is absent). Pure."""
    report = ConfigReport()
    report.facts["configs.accelerate_config"] = "present" if accelerate is not None else "missing"
    report.facts["configs.ds_config"] = ds_state
    if accelerate is not None:
        processes = accelerate.get("num_processes")
        single = processes in (None, 1) or accelerate.get("distributed_type", "NO") == "NO"
        report.facts["configs.accelerate_single_process"] = bool(single and gpu_count > 1)
        if single and gpu_count > 1:
            report.notes.append(
                f"the Accelerate config launches one process (num_processes={processes}, "
                f"distributed_type={accelerate.get('distributed_type')}) on a box with {gpu_count} GPUs"
            )
    else:
        report.facts["configs.accelerate_single_process"] = False

    ds_section = accelerate.get("deepspeed_config") if accelerate is not None else None
    ds_section = ds_section if isinstance(ds_section, dict) else {}
    if deepspeed is None or accelerate is None:
        report.facts["configs.ds_double_set"] = False
        report.facts["configs.ds_grad_accum_conflict"] = False
        report.facts["configs.ds_fp16_mismatch"] = False
        return report

    doubled = [key for key in OVERRIDDEN if _set(ds_section.get(key))]
    precision = str(accelerate.get("mixed_precision") or "no").lower()
    if precision in ("fp16", "bf16", "fp8"):
        doubled.append("mixed_precision")
    report.facts["configs.ds_double_set"] = bool(doubled)
    if doubled:
        shown = ", ".join(
            f"{key} (JSON: {_get(deepspeed, OVERRIDDEN[key])!r})" if key in OVERRIDDEN else key
            for key in doubled
        )
        report.notes.append(
            f"set in the Accelerate config although the DeepSpeed JSON overrides them: {shown}"
        )

    ds_accum = deepspeed.get("gradient_accumulation_steps")
    acc_accum = ds_section.get("gradient_accumulation_steps", accelerate.get("gradient_accumulation_steps"))
    conflict = _numeric(ds_accum) and _numeric(acc_accum)
    report.facts["configs.ds_grad_accum_conflict"] = conflict
    if conflict:
        report.notes.append(
            f"gradient_accumulation_steps is {ds_accum} in the DeepSpeed JSON and {acc_accum} in the "
            'Accelerate config: set it in one place ("auto" in the JSON)'
        )

    fp16 = _get(deepspeed, "fp16.enabled")
    bf16 = _get(deepspeed, "bf16.enabled")
    mismatch = (fp16 is True and precision == "bf16") or (bf16 is True and precision == "fp16")
    report.facts["configs.ds_fp16_mismatch"] = mismatch
    if mismatch:
        ds_side = "fp16" if fp16 is True else "bf16"
        report.notes.append(f"the DeepSpeed JSON enables {ds_side} while Accelerate asks for {precision}")
    return report


def _load(path: Path, kind: str, report_failures: list[str]) -> dict[str, Any] | None:
    try:
        return read_mapping(path, kind)
    except ConfigError as exc:
        report_failures.append(str(exc))
        return None


def probe(options: ProbeOptions, cancel: threading.Event, gpu_count: int | None = None) -> ProbeResult:
    """The configs probe on the given paths (or Accelerate's default one)."""
    failures: list[str] = []
    acc_path = (
        Path(options.accelerate_config).expanduser()
        if options.accelerate_config
        else default_accelerate_config()
    )
    accelerate = _load(acc_path, "Accelerate", failures) if acc_path.is_file() else None
    if options.accelerate_config and not acc_path.is_file():
        failures.append(f"Accelerate config {acc_path} does not exist")
    acc_proof = evidence(
        f"Accelerate config {acc_path}" + ("" if options.accelerate_config else " (default location)"),
        "does not exist"
        if not acc_path.is_file()
        else "does not parse"
        if accelerate is None
        else json.dumps(accelerate, indent=1, default=str),
    )

    ds_path: Path | None = None
    if options.deepspeed_config:
        ds_path = Path(options.deepspeed_config).expanduser()
    elif accelerate is not None:
        referenced = _get(accelerate, "deepspeed_config.deepspeed_config_file")
        if isinstance(referenced, str) and referenced.strip():
            ds_path = (
                (acc_path.parent / referenced).resolve()
                if not Path(referenced).is_absolute()
                else Path(referenced)
            )
            if not ds_path.is_file():
                ds_path = Path(referenced).expanduser()  # Accelerate resolves it from the working directory
    deepspeed = None
    if ds_path is None:
        ds_state = "not_given"
    elif not ds_path.is_file():
        ds_state = "missing"
        failures.append(f"DeepSpeed config {ds_path} does not exist")
    else:
        deepspeed = _load(ds_path, "DeepSpeed", failures)
        ds_state = "present" if deepspeed is not None else "missing"

    if gpu_count is None:
        from probes.gpu import gpu_count as count_gpus

        gpu_count = count_gpus()
    report = analyse(accelerate, deepspeed, gpu_count, ds_state)
    proof = [acc_proof]
    if ds_path is not None:
        proof.append(
            evidence(
                f"DeepSpeed config {ds_path}",
                json.dumps(deepspeed, indent=1, default=str)
                if deepspeed is not None
                else "missing or unreadable",
            )
        )
    if failures or report.notes:
        proof.append(evidence("what does not fit", "\n".join(failures + report.notes)))
    flagged = [
        name
        for name in (
            "configs.accelerate_single_process",
            "configs.ds_double_set",
            "configs.ds_grad_accum_conflict",
            "configs.ds_fp16_mismatch",
        )
        if report.facts.get(name) is True
    ]
    if report.facts.get("configs.ds_config") == "missing":
        flagged.append("configs.ds_config")
    if options.accelerate_config and report.facts.get("configs.accelerate_config") == "missing":
        flagged.append("configs.accelerate_config")
    status: Status = "fail" if failures else "warn" if report.notes else "ok"
    if failures or report.notes:
        summary = "; ".join(failures + report.notes)
    else:
        acc_text = f"Accelerate config {acc_path}" if accelerate is not None else "no Accelerate config"
        ds_text = f"DeepSpeed JSON {ds_path}" if deepspeed is not None else "no DeepSpeed JSON given"
        summary = f"{acc_text}; {ds_text}; nothing conflicts"
    return ProbeResult(NAME, status, report.facts, tuple(proof), summary=summary, flagged=tuple(flagged))
