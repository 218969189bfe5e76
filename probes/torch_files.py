"""What an installed torch says about itself through its files, without being imported.

`import torch` costs 1.5-2 s and can crash or hang on a broken install; reading a few files costs
milliseconds and changes nothing. The versions probe uses this module first and imports torch (in a
child) only for what the files cannot answer.

- The package is the one `import torch` would load: `importlib.util.find_spec` searches sys.path the
  way import does, without executing anything.
- `torch/version.py` holds `__version__` (torch.__version__), `cuda` (torch.version.cuda), `hip` and
  `git_version`. It is parsed with `ast` and never executed.
- The distribution (`*.dist-info`) is used only when it owns that package directory. Its version is a
  cross-check, not the answer: wheels published to PyPI have their local suffix ("+cu121") stripped
  from the metadata but not from version.py (pytorch/builder `release/pypi/prep_binary_for_pypi.sh`).
  Its Requires-Dist says whether torch loads NCCL from the pip `nvidia-nccl-cuNN` distribution.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import importlib.util
import mmap
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# `name==1.2.3; markers`, `name (==1.2.3)`, or a bare name.
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\(?\s*(?:===?\s*([^\s,;)]+))?")


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_torch() -> Path | None:
    """The package directory `import torch` would load, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def read_version_file(path: Path) -> tuple[dict[str, str | None], str]:
    """The string-or-None assignments of torch/version.py, and why it could not be read ("" if it
    could). `cuda: Optional[str] = None` and `cuda = '12.1'` both count; nothing is executed."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except OSError as exc:
        return {}, f"cannot read {path}: {exc.strerror or exc}"
    except (SyntaxError, ValueError) as exc:
        return {}, f"cannot parse {path}: {exc}"
    values: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and (value.value is None or isinstance(value.value, str))
        ):
            values[target.id] = value.value
    if not isinstance(values.get("__version__"), str):
        return values, f"{path} sets no __version__"
    return values, ""


def c_extension(location: Path) -> Path | None:
    """torch's compiled core (`_C`) built for this interpreter; None when only other Pythons' copies,
    or none, are there (then `import torch` fails)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = location / f"_C{suffix}"
        if candidate.is_file():
            return candidate
    return None


def owning_distribution(location: Path) -> importlib.metadata.Distribution | None:
    """The installed `torch` distribution whose files include `location`, if any (an editable or
    source build, or a stray torch directory earlier on sys.path, has none)."""
    try:
        target = location.resolve()
        for dist in importlib.metadata.distributions(name="torch"):
            if Path(str(dist.locate_file("torch"))).resolve() == target:
                return dist
    except OSError:
        return None
    return None


def without_local(version: str) -> str:
    """'2.5.1+cu124' -> '2.5.1'."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class PipNccl:
    """The pip NCCL distribution a CUDA wheel of torch declares and loads."""

    name: str  # nvidia-nccl-cu12
    installed: str | None  # its installed version, None when missing
    pinned: str | None  # the version torch's Requires-Dist pins (the one torch was built with)


def pip_nccl(cuda: str, requires: list[str]) -> PipNccl | None:
    """The `nvidia-nccl-cuNN` distribution for CUDA major NN, when torch's Requires-Dist names it;
    None when it does not (a conda, source or static-NCCL build: NCCL is not a pip package there)."""
    major = cuda.split(".", 1)[0]
    if not major.isdigit():
        return None
    wanted = f"nvidia-nccl-cu{major}"
    for line in requires:
        match = REQUIREMENT.match(line)
        if match and normalized(match.group(1)) == wanted:
            try:
                installed: str | None = importlib.metadata.version(wanted)
            except importlib.metadata.PackageNotFoundError:
                installed = None
            return PipNccl(wanted, installed, match.group(2))
    return None


def other_libnccl(env: Mapping[str, str]) -> list[str]:
    """libnccl files that LD_PRELOAD or LD_LIBRARY_PATH offer the dynamic loader, which may replace
    the pip NCCL at run time (which one wins depends on how torch's libraries were linked)."""
    found = [
        f"LD_PRELOAD: {entry}"
        for entry in re.split(r"[\s:]+", env.get("LD_PRELOAD", ""))
        if "libnccl" in os.path.basename(entry)
    ]
    for folder in filter(None, env.get("LD_LIBRARY_PATH", "").split(":")):
        try:
            names = sorted(name for name in os.listdir(folder) if name.startswith("libnccl.so"))
        except OSError:
            continue
        found.extend(f"LD_LIBRARY_PATH: {os.path.join(folder, name)}" for name in names[:1])
    return found


# The list torch.cuda.get_arch_list() returns is the string torch was built with
# (TORCH_CUDA_ARCH_LIST as "sm_80 sm_86 sm_90 compute_90"), compiled into the Python bindings.
ARCH_LIST = re.compile(rb"(?:sm|compute)_\d{2,3}[a-z]?(?: (?:sm|compute)_\d{2,3}[a-z]?){1,40}")
ARCH_FILES = ("libtorch_python.so", "torch_python.dll", "libtorch_python.dylib")
ARCH_SCAN_LIMIT = 400 << 20  # bytes; larger files are not scanned (the probe has a time budget)


def cuda_arch_list(location: Path) -> tuple[list[str] | None, str]:
    """The CUDA architectures the torch at `location` was built for, read from its library without
    importing it: (list, where it was found) or (None, why not)."""
    for name in ARCH_FILES:
        path = location / "lib" / name
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if size > ARCH_SCAN_LIMIT:
            return None, f"{path} is {size >> 20} MiB, too large to scan quickly"
        try:
            with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                found = [m.group().decode() for m in ARCH_LIST.finditer(data)]
        except (OSError, ValueError) as exc:
            return None, f"cannot read {path}: {exc}"
        if not found:
            return None, f"no architecture list in {path} (a CPU or ROCm build)"
        best = max(found, key=len)
        return best.split(), f"the arch list compiled into {path} (torch not imported)"
    return None, f"no torch Python bindings library under {location / 'lib'}"


def arch_supports(archs: list[str], capability: tuple[int, int]) -> bool:
    """Whether a build for `archs` runs on a GPU of compute `capability`, as CUDA loads code: a
    cubin of the same major version and no newer minor, or PTX (compute_XY) no newer than the GPU."""
    major, minor = capability
    mine = major * 10 + minor
    for arch in archs:
        kind, _, number = arch.partition("_")
        digits = re.match(r"\d+", number)
        if digits is None:
            continue
        value = int(digits.group())
        if kind == "sm" and value // 10 == major and value % 10 <= minor:
            return True
        if kind == "compute" and value <= mine:
            return True
    return False
