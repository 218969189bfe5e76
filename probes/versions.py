"""The versions probe: python, torch, CUDA, NCCL, accelerate and deepspeed.

A probe is a guest on someone's machine: this one writes nothing and imports nothing heavy. Every
value is read from files first (probes.torch_files): torch and CUDA from torch/version.py, NCCL from
the pip `nvidia-nccl-cuNN` distribution a CUDA wheel loads, the rest from importlib.metadata. That
takes milliseconds, where `import torch` alone (1.5-2 s) would blow the one-second budget of the
fast probes. torch is imported, in a child process bounded by the timeout and killed past it, only
where the files cannot answer: no readable version.py, no C extension for this interpreter, files
that disagree, or a CUDA/ROCm build whose NCCL is not a pip distribution (conda, source, ROCm).
The evidence says which method produced each value.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import json
import os
import platform
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from probes import known_bad
from probes.subproc import command_evidence, evidence, run_command
from probes.torch_files import (
    c_extension,
    cuda_arch_list,
    find_torch,
    other_libnccl,
    owning_distribution,
    pip_nccl,
    read_version_file,
    without_local,
)
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status

NAME = "versions"
KEY_FACTS = ("versions.torch", "versions.cuda", "versions.nccl", "versions.platform", "versions.known_bad")
NOT_IMPORTED = "read, torch not imported"

# Runs in the child: everything that needs torch imported, as one JSON line.
TORCH_QUERY = r"""
import json, sys
import torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda or "", "hip": getattr(torch.version, "hip", None) or "",
       "git": getattr(torch.version, "git_version", ""), "cuda_available": False, "device_count": 0,
       "nccl": "", "distributed": False, "nccl_backend": False, "gloo_backend": False}
try:
    import torch.distributed as dist
    out["distributed"] = dist.is_available()
    if out["distributed"]:
        out["nccl_backend"] = dist.is_nccl_available()
        out["gloo_backend"] = dist.is_gloo_available()
except Exception as exc:
    out["distributed_error"] = repr(exc)
try:
    out["cuda_available"] = torch.cuda.is_available()
    out["device_count"] = torch.cuda.device_count()
except Exception as exc:
    out["cuda_error"] = repr(exc)
try:
    out["arch_list"] = torch.cuda.get_arch_list() if out["cuda"] else []
except Exception as exc:
    out["arch_error"] = repr(exc)
if out["cuda"] or out["hip"]:
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        out["nccl_error"] = repr(exc)
print("TRIAGE-VERSIONS " + json.dumps(out))
"""
CHILD_SOURCE = f"{sys.executable} -c 'import torch; ...'"


@dataclass
class FileReading:
    """What torch's files established: values, how each was found, and what they could not answer."""

    values: dict[str, object] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)  # why torch must be imported after all
    notes: list[str] = field(default_factory=list)  # for the summary
    proof: list[Evidence] = field(default_factory=list)


def read_torch_files(location: Path) -> FileReading:
    """torch, CUDA, NCCL and importability from the files of the torch at `location`."""
    out = FileReading()
    version_path = location / "version.py"
    version, error = read_version_file(version_path)
    if error:
        out.unanswered.append(error)
    else:
        shown = {k: v for k, v in version.items() if k in ("__version__", "cuda", "hip", "git_version")}
        out.proof.append(evidence(f"{version_path} ({NOT_IMPORTED})", json.dumps(shown, indent=1)))
    torch, cuda, hip = version.get("__version__"), version.get("cuda") or "", version.get("hip") or ""
    if isinstance(torch, str) and not error:
        out.values["versions.torch"] = torch
        out.how["versions.torch"] = f"__version__ in {version_path} ({NOT_IMPORTED})"
        out.values["versions.cuda"] = cuda
        out.how["versions.cuda"] = f"cuda in {version_path} ({NOT_IMPORTED})" + ("" if cuda else ": None")

    extension = c_extension(location)
    if extension is None:
        out.unanswered.append(
            f"no {location / '_C'}{importlib.machinery.EXTENSION_SUFFIXES[0]} for this Python"
        )
    else:
        out.values["versions.torch_available"] = True
        out.how["versions.torch_available"] = (
            f"version.py readable and {extension.name} built for this interpreter present "
            f"(inferred from files, torch not imported)"
        )

    dist = owning_distribution(location)
    if dist is None:
        out.how["distribution"] = f"no installed torch distribution owns {location}"
    else:
        out.how["distribution"] = f"torch {dist.version} at {dist.locate_file('')} owns {location}"
        if isinstance(torch, str) and without_local(dist.version) != without_local(torch):
            out.unanswered.append(f"the torch metadata says {dist.version} but version.py says {torch}")

    if error:
        return out
    if not cuda and not hip:
        out.how["versions.nccl"] = "omitted: a CPU build (version.py: cuda None) has no NCCL"
    elif hip:
        out.unanswered.append(f"a ROCm build (hip {hip}): its RCCL is not a pip distribution")
    else:
        nccl = pip_nccl(cuda, (dist.requires or []) if dist is not None else [])
        if nccl is None:
            out.unanswered.append(f"a CUDA {cuda} build whose metadata requires no nvidia-nccl package")
        elif nccl.installed is None:
            out.unanswered.append(f"torch requires {nccl.name}, which is not installed")
        else:
            out.values["versions.nccl"] = nccl.installed
            out.how["versions.nccl"] = (
                f"importlib.metadata: {nccl.name} {nccl.installed}, the libnccl torch's CUDA wheel loads"
            )
            if nccl.pinned and nccl.pinned != nccl.installed:
                out.notes.append(
                    f"torch was built against NCCL {nccl.pinned} but {nccl.name} {nccl.installed} is installed"
                )
            others = other_libnccl(os.environ)
            if others:
                out.notes.append("another libnccl may be loaded instead (" + "; ".join(others) + ")")
    return out


# probes.dist.local reads these two under these names.
torch_location = find_torch


def static_torch_version(location: Path) -> dict[str, str]:
    """torch/version.py's __version__ and cuda ("" for a CPU build), read without importing torch."""
    values, _ = read_version_file(location / "version.py")
    out = {"cuda": values.get("cuda") or ""}
    if isinstance(values.get("__version__"), str):
        out["torch"] = str(values["__version__"])
    return out


def query_torch(timeout_s: float, cancel: threading.Event) -> tuple[dict[str, object] | None, Evidence, str]:
    """Import torch in a child process: (answer or None, evidence, why not)."""
    result = run_command([sys.executable, "-c", TORCH_QUERY], timeout_s=timeout_s, cancel=cancel)
    proof = command_evidence(result)
    line = next((ln for ln in result.stdout.splitlines() if ln.startswith("TRIAGE-VERSIONS ")), None)
    if result.ok and line is not None:
        try:
            data = json.loads(line.split(" ", 1)[1])
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data, evidence(CHILD_SOURCE, json.dumps(data, indent=1)), ""
    tail = result.stderr.strip().splitlines()[-1:] or [result.describe()]
    return None, proof, f"import torch failed: {tail[0][:300]}"


def package_version(name: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def platform_name(system: str, release: str) -> str:
    """linux, wsl, windows, darwin or other, from sys.platform and the kernel release."""
    if system.startswith("linux"):
        return "wsl" if "microsoft" in release.lower() else "linux"
    if system in ("win32", "cygwin"):
        return "windows"
    return "darwin" if system == "darwin" else "other"


def kernel_release() -> str:
    """The running kernel's release string, or "" when it cannot be read."""
    try:
        return Path("/proc/sys/kernel/osrelease").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return platform.release()


def nccl_built(system: str, cuda: str, hip: str) -> tuple[bool, str]:
    """Whether this torch build carries NCCL (RCCL on ROCm), judged from its files."""
    if system not in ("linux", "wsl"):
        return False, f"torch builds for {system} have no NCCL (gloo only)"
    if hip:
        return True, f"a ROCm build (hip {hip}) carries RCCL"
    if cuda:
        return True, f"a Linux CUDA {cuda} build carries NCCL"
    return False, "a CPU-only build (version.py: cuda None) has no NCCL"


def check_known_bad(facts: dict[str, object]) -> tuple[list[str], Evidence]:
    """Notes for installed versions listed in known_bad_versions.yaml, and the evidence."""
    items, problems, path = known_bad.load()
    installed = {
        "torch": str(facts.get("versions.torch", "")),
        "nccl": str(facts.get("versions.nccl", "")),
    }
    hits = known_bad.installed_matches(items, installed)
    facts["versions.known_bad"] = bool(hits)
    lines = [
        f"{len(items)} items in {path}; installed: torch {installed['torch'] or '-'}, NCCL {installed['nccl'] or '-'}"
    ]
    lines += [f"problem with the list: {p}" for p in problems]
    notes = []
    for item in hits:
        lines.append(
            f"{item.id}: {item.component} {installed[item.component]} matches {item.versions}; "
            f"bites when {item.when}; {item.symptom}; fix: {item.fix} ({item.entry}, {item.reference})"
        )
        notes.append(
            f"{item.component} {installed[item.component]} is known-bad when {item.when} ({item.entry})"
        )
    if not hits:
        lines.append("no installed version is listed")
    return notes, evidence("known-bad versions (knowledge/known_bad_versions.yaml)", "\n".join(lines))


def methods_evidence(facts: dict[str, object], how: dict[str, str]) -> Evidence:
    """Evidence saying how each version fact was read."""
    lines = [
        f"{name} = {facts[name]!r}: {how[name]}" if name in facts else f"{name}: {how[name]}" for name in how
    ]
    return evidence("where each value came from", "\n".join(lines))


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The versions probe."""
    facts: dict[str, object] = {"versions.python": platform.python_version()}
    proof: list[Evidence] = []
    system = platform_name(sys.platform, kernel_release() if sys.platform.startswith("linux") else "")
    facts["versions.platform"] = system
    others = {
        name: package_version(name) for name in ("accelerate", "deepspeed", "transformers", "nvidia-ml-py")
    }
    for name in ("accelerate", "deepspeed"):
        if others[name]:
            facts[f"versions.{name}"] = others[name]
    proof.append(
        evidence(
            "python and packages (importlib.metadata)",
            f"python {sys.version.split()[0]} at {sys.executable}\n"
            + "\n".join(f"{k}: {v or 'not installed'}" for k, v in others.items()),
        )
    )

    location = find_torch()
    if location is None:
        facts["versions.torch_available"] = False
        return ProbeResult(
            NAME,
            "unavailable",
            facts,
            tuple(proof),
            summary=f"torch is not installed for {sys.executable}: no torch, CUDA or NCCL version to read",
        )
    reading = read_torch_files(location)
    how = reading.how
    notes = list(reading.notes)
    status: Status = "ok"
    if not reading.unanswered:
        facts.update(reading.values)
        vfile, _ = read_version_file(location / "version.py")
        built, why_built = nccl_built(system, vfile.get("cuda") or "", vfile.get("hip") or "")
        facts["versions.nccl_built"] = built
        how["versions.nccl_built"] = f"{why_built} ({NOT_IMPORTED})"
        if vfile.get("cuda"):
            archs, where = cuda_arch_list(location)
            if archs is not None:
                facts["versions.cuda_archs"] = archs
            how["versions.cuda_archs"] = where
        proof += [methods_evidence(facts, how), *reading.proof]
    else:
        why = "; ".join(reading.unanswered)
        data, child_proof, failure = query_torch(max(1.0, options.timeout_s - 0.5), cancel)
        if data is None:
            facts["versions.torch_available"] = False
            how["versions.torch_available"] = f"False: the child's import failed (files: {why})"
            if "versions.torch" in reading.values:
                facts["versions.torch"] = reading.values["versions.torch"]
            else:
                how.pop("versions.torch", None)
            for name in ("versions.cuda", "versions.nccl"):
                how.pop(name, None)
            proof += [methods_evidence(facts, how), child_proof, *reading.proof]
            version = reading.values.get("versions.torch", "?")
            return ProbeResult(
                NAME,
                "fail",
                facts,
                tuple(proof),
                summary=f"torch {version} is installed at {location} but {failure}",
                flagged=("versions.torch_available",),
            )
        facts["versions.torch_available"] = True
        facts["versions.nccl_built"] = bool(data.get("nccl_backend"))
        arch_list = data.get("arch_list")
        if isinstance(arch_list, list) and arch_list:
            facts["versions.cuda_archs"] = [str(a) for a in arch_list]
        facts["versions.torch"] = str(data.get("torch", ""))
        facts["versions.cuda"] = str(data.get("cuda", ""))
        if data.get("nccl"):
            facts["versions.nccl"] = str(data["nccl"])
        child = f"child process `import torch` (the files could not answer: {why})"
        how["versions.torch_available"] = f"{child}: imported"
        how["versions.torch"] = f"{child}: torch.__version__"
        how["versions.cuda"] = f"{child}: torch.version.cuda"
        how["versions.nccl_built"] = f"{child}: torch.distributed.is_nccl_available()"
        how["versions.cuda_archs"] = f"{child}: torch.cuda.get_arch_list()"
        how["versions.nccl"] = f"{child}: torch.cuda.nccl.version()" + (
            "" if data.get("nccl") else f" gave nothing ({data.get('nccl_error') or 'a CPU build'})"
        )
        notes = []  # the files' notes on pip NCCL do not apply once torch itself answered
        if not data.get("distributed"):
            status = "warn"
            notes.append("this torch build has no torch.distributed")
        elif data.get("cuda") and not data.get("nccl_backend"):
            status = "warn"
            notes.append("CUDA build without the NCCL backend")
        proof += [methods_evidence(facts, how), child_proof, *reading.proof]

    bad_notes, bad_proof = check_known_bad(facts)
    proof.append(bad_proof)
    flagged: tuple[str, ...] = ()
    if bad_notes:
        status = "warn"
        notes = [*bad_notes, *notes]
        flagged = ("versions.known_bad",)
    if facts.get("versions.nccl_built") is False and system in ("windows", "darwin"):
        notes.append(f"{system}: gloo only, backend='nccl' cannot work here (E2)")
    summary = f"python {facts['versions.python']}, torch {facts['versions.torch']}"
    summary += f", CUDA {facts['versions.cuda']}" if facts["versions.cuda"] else " (CPU build)"
    if "versions.nccl" in facts:
        summary += f", NCCL {facts['versions.nccl']}"
    for name in ("accelerate", "deepspeed"):
        if others[name]:
            summary += f", {name} {others[name]}"
    if notes:
        summary += "; " + "; ".join(notes)
    return ProbeResult(NAME, status, facts, tuple(proof), summary=summary, flagged=flagged)
