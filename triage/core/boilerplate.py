"""Lines of a report that describe the machine, not the failure: environment dumps and issue templates.

Bug reports paste `python -m torch.utils.collect_env`, `transformers-cli env` / `accelerate env`,
`ds_report`, `nvidia-smi` or `pip list` output, and issue templates leave their headings, checkboxes
and `[e.g. ...]` placeholders behind. Their words ("mixed_precision: bf16", "machine_rank: 0",
"two machines connected with 100 Gbps IB") would read as symptoms of whatever entry uses them, so
`ask` weighs words only from the other lines. Signatures still see the whole text: a version line
can be the evidence of a known-bad release.

Plain string tests per line (no regex): this runs on every `ask`.
"""

from __future__ import annotations

# `Key: value` lines of collect_env (with lscpu's block) and of ds_report, lower-cased keys.
_KEYS = frozenset(
    {
        "is debug build", "cuda used to build pytorch", "rocm used to build pytorch", "os",
        "python platform", "is cuda available", "cuda_module_loading set to", "gpu models and configuration",
        "nvidia driver version", "cudnn version", "hip runtime version", "miopen runtime version",
        "is xnnpack available", "cpu", "versions of relevant libraries", "is xpu available",
        "xpu used to build pytorch", "architecture", "cpu op-mode(s)", "byte order", "address sizes",
        "cpu(s)", "on-line cpu(s) list", "off-line cpu(s) list", "vendor id", "model name", "cpu family",
        "model", "thread(s) per core", "core(s) per socket", "socket(s)", "stepping", "frequency boost",
        "cpu max mhz", "cpu min mhz", "cpu(s) scaling mhz", "bogomips", "flags", "virtualization",
        "hypervisor vendor", "virtualization type", "l1d cache", "l1i cache", "l2 cache", "l3 cache",
        "numa node(s)", "platform", "using gpu in script?", "using distributed or parallel set-up in script?",
        "gpu type", "torch install path", "deepspeed install path", "deepspeed info",
        "deepspeed wheel compiled w.", "accelerate config", "accelerate default config", "accelerate bash location",
        "pytorch accelerator", "system ram", "caching allocator config",
    }
)  # fmt: skip
# Keys whose value is a list of settings indented below them (`accelerate env`'s config).
_NESTED = frozenset({"accelerate config", "accelerate default config"})
_KEY_PREFIXES = ("numa node", "vulnerability ")  # NUMA node0 CPU(s):, Vulnerability Mds:
_VERSION_VALUES = ("not installed", "n/a", "could not collect", "none", "no", "false", "true")
# Issue-template lines with nothing of the poster's own (HF's checkboxes, DeepSpeed's questions).
_TEMPLATE_LINES = frozenset(
    {
        "the official example scripts", "my own modified scripts", "my own task or dataset (give details below)",
        "an officially supported task in the examples folder (such as glue/squad, ...)",
        "one of the scripts in the examples/ folder of accelerate or an officially supported no_trainer script"
        " in the examples folder of the transformers repo (such as run_no_trainer_glue.py)",
        "are you launching your experiment with the deepspeed launcher, mpi, or something else?",
        "are you using a specific docker image that you can share?", "collecting environment information...",
        "deepspeed c++/cuda extension op report", "deepspeed general environment info:",
        "no running processes found", "copy-and-paste the text below in your github issue",
    }
)  # fmt: skip
# Section headings of the common issue templates (`### System Info`, `**To Reproduce**`).
_HEADINGS = frozenset(
    {
        "system info", "information", "tasks", "reproduction", "expected behavior", "expected behaviour",
        "who can help?", "who can help", "versions", "environment", "describe the bug", "to reproduce",
        "additional context", "screenshots", "system info (please complete the following information):",
        "ds_report output", "launcher context", "docker context", "steps to reproduce", "your environment",
        "bug description", "what version are you seeing the problem on?", "how to reproduce the bug",
        "error messages and logs", "environment details", "more info", "reminder", "others",
    }
)  # fmt: skip
# torchrun's own report of a failed worker: the words are the launcher's, the same for every failure;
# the exit code in it is read by signatures (P6's `exitcode: -11`), which see the whole text.
_LAUNCHER_MARKS = (
    "] failed (exitcode:",
    "Setting OMP_NUM_THREADS environment variable for each process",
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
)
_LAUNCHER_LINES = frozenset({"root cause (first observed failure):", "failures:", "<no_other_failures>"})
_SMI_MARKS = ("NVIDIA-SMI", "Driver Version", "MiB", "Persistence-M", "Processes:", "GPU  Name", "N/A")


_LONGEST_VALUE = 100  # longer, and the line goes on with the poster's own words (or it is lscpu's flags)


def _key_value(line: str) -> tuple[str, str] | None:
    """(lower-cased key, value) of a `- Key: value` line, markdown list marks and backticks off;
    None for a sentence that happens to hold a colon ("I'm using NCCL version 2.21, driver: 550")."""
    key, colon, value = line.lstrip("-*• \t").partition(":")
    if not colon or "," in key or ". " in key or not key.isascii() or len(key.split()) > 6:
        return None
    key, value = key.replace("`", "").strip().lower(), value.strip()
    if len(value) > _LONGEST_VALUE and key != "flags" and not key.startswith(_KEY_PREFIXES):
        return None
    return key, value


def _snake(key: str) -> bool:
    """`mixed_precision`, `num_machines`: a config file's key, not a sentence."""
    return bool(key) and key.replace("_", "").isalnum() and key.islower() and " " not in key


def _is_version_line(key: str, value: str) -> bool:
    """`PyTorch version: 2.1.0+cu121`, `- transformers version: 4.36.2`, `nvcc version ..... 12.1`."""
    if "version" not in key:
        return False
    lowered = value.lower()
    return any(c.isdigit() for c in value) or lowered.startswith(_VERSION_VALUES) or not value


def _package_pin(line: str) -> bool:
    """A line of `pip list` / `pip freeze` / collect_env's `[pip3] torch==2.1.0` / `[conda] ...`."""
    if line.startswith(("[pip", "[conda]")):
        return True
    name, eq, version = line.partition("==")
    return (
        bool(eq) and " " not in name and bool(name) and version[:1].isdigit() and " " not in version.strip()
    )


def _smi_line(line: str) -> bool:
    """A line of nvidia-smi's table: a border, or a boxed row of its own fields."""
    if line[:1] == "+" and set(line) <= set("+-=| "):
        return True
    return line[:1] == "|" and any(mark in line for mark in _SMI_MARKS)


def _launcher_line(line: str, key: str | None, value: str) -> bool:
    """torchrun's exit report and failure summary (`failed (exitcode: 1) local_rank: 0 ...`,
    `exitcode  : 1 (pid: 42)`, `error_file: <N/A>`, `rank : 0 (local_rank: 0)`), and its OMP banner."""
    if any(mark in line for mark in _LAUNCHER_MARKS) or line.lower() in _LAUNCHER_LINES:
        return True
    if key in ("exitcode", "error_file", "host", "time"):
        return key != "time" or value[:4].isdigit()
    return key == "rank" and "(local_rank:" in value


def _op_report(line: str) -> bool:
    """ds_report's op table: `fused_adam ............. [NO] ....... [OKAY]`."""
    return "....." in line and ("[OKAY]" in line or "[NO]" in line or "[YES]" in line)


def _placeholders(line: str) -> str:
    """A template's `[e.g. two machines with x8 A100s each]` left in a line, taken out."""
    while (start := line.find("[e.g.")) >= 0:
        end = line.find("]", start)
        line = line[:start] + (line[end + 1 :] if end >= 0 else "")
    return line


def _heading_or_fence(line: str) -> bool:
    """A template's section heading, or a code fence with at most its language (```` ```Shell ````)."""
    if line.startswith("```"):
        return len(line[3:].split()) <= 1
    if line[:1] not in "#*":
        return False
    title = line.strip("#* \t").lstrip("🐛🚀📚❓ ").strip("*: ").lower()
    return title in _HEADINGS


def _mentions_only(line: str) -> bool:
    """`cc @a @b` or `@a @b`: whom the poster asks, not what failed."""
    words = line.split()
    return bool(words) and all(w.startswith("@") or w.lower() in ("cc", "cc:") for w in words) and "@" in line


def _environment_key(key: str, value: str) -> bool:
    """A key of an environment dump: collect_env's, `accelerate env`'s, ds_report's, a version line."""
    numbered_gpu = key.startswith("gpu ") and key[4:].isdigit()  # collect_env's `GPU 0: NVIDIA A100`
    backend = key.startswith("pytorch ") and key.endswith(" available")  # `PyTorch NPU available: False`
    return (
        key in _KEYS
        or numbered_gpu
        or backend
        or key.startswith(_KEY_PREFIXES)
        or _is_version_line(key, value)
    )


_SETTING_WORDS = 5  # `NVIDIA A100 80GB PCIe`, `1.12.1 (True)`: a setting's value is a few words


def _dump_segment(segment: str) -> bool:
    """One `key: value` of an environment dump or a config listing, cut out of a flattened line."""
    pair = _key_value(segment)
    if pair is not None:
        key, value = pair
        # a long value is the poster's sentence run on after the dump's last setting
        return len(value.split()) <= _SETTING_WORDS and (
            _environment_key(key, value) or (_snake(key) and bool(value))
        )
    key, colon, value = segment.lstrip("-*• \t").partition(":")
    return bool(colon) and _snake(key.strip()) and value.strip()[:1] in ("{", "[")


def _unflatten_dump(line: str) -> str:
    """A line into which a paste (or an excerpt) ran a dump's `- key: value` lines together
    (`... hangs at inference. - distributed_type: DEEPSPEED - num_processes: 3 - zero_stage: 3`),
    without the dump's settings: they describe the machine as the separate lines would. Two such
    settings at least, so a sentence with one dash and one colon stays whole."""
    if " - " not in line:
        return line
    segments = [part for chunk in line.split(" - ") for part in chunk.split(" ... ")]
    dump = [_dump_segment(segment) for segment in segments]
    if sum(dump) < 2:
        return line
    return " ".join(segment for segment, drop in zip(segments, dump, strict=True) if not drop)


def drop_boilerplate(text: str) -> str:
    """The text without environment-dump and issue-template lines (the rest as written)."""
    if "\n" not in text:
        text = _unflatten_dump(text)
        return _placeholders(text) if "[e.g." in text else text
    kept: list[str] = []
    nested_under: int | None = None  # the indent of a key whose settings follow, while inside them
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            nested_under = None  # a blank line ends a key's settings
            kept.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        pair = _key_value(stripped)
        key, value = pair or (None, "")
        if nested_under is not None:
            # a setting below the key: indented deeper, or (flattened by the paste) a snake_case key
            if indent > nested_under or (key is not None and _snake(key)):
                continue
            nested_under = None
        if key is not None and _environment_key(key, value):
            if key in _NESTED and not value:
                nested_under = indent
            continue
        if _launcher_line(stripped, key, value):
            continue
        checkbox = stripped.lstrip("-* ").removeprefix("[ ]").removeprefix("[x]").removeprefix("[X]")
        checkbox = checkbox.replace("`", "").strip()
        if (
            checkbox.lower() in _TEMPLATE_LINES
            or _package_pin(stripped)
            or _smi_line(stripped)
            or _op_report(stripped)
            or _mentions_only(stripped)
            or _heading_or_fence(stripped)
        ):
            continue
        line = _unflatten_dump(line)
        kept.append(_placeholders(line) if "[e.g." in line else line)
    return "\n".join(kept)
