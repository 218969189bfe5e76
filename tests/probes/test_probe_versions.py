"""The versions probe for real: this machine's torch read from its files and checked against a real
`import torch`; a CUDA wheel's layout (pip NCCL), a CUDA build without pip NCCL (the child import),
and a broken install, each made of real files in front of the real torch on sys.path.

`audited` runs the probe or the CLI in a child Python whose audit hook records every process it
starts and every file it opens for writing, so "torch not imported, nothing written" is observed,
not assumed.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from probes import known_bad, versions
from probes.torch_files import arch_supports, cuda_arch_list, find_torch
from tests.probes.helpers import REPO, run_triage, triage_env

AUDIT = r"""
import json, os, runpy, sys
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
CHANGES = ("os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.symlink", "os.link",
           "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.copyfile", "shutil.rmtree")
STARTS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system", "os.spawn")
seen = {"writes": [], "processes": []}

def hook(event, args):
    if event == "open" and isinstance(args[2], int) and args[2] & WRITES and args[0] != os.devnull:
        seen["writes"].append(str(args[0]))
    elif event in CHANGES:
        seen["writes"].append(f"{event} {args[0]}")
    elif event in STARTS:
        seen["processes"].append(f"{event} {args[:2]!r}"[:300])

sys.addaudithook(hook)
sys.argv = ["triage", *sys.argv[1:]]
try:
    runpy.run_module("triage", run_name="__main__")
except SystemExit as exc:
    seen["exit"] = exc.code
seen["torch_imported"] = "torch" in sys.modules
print("\nAUDIT " + json.dumps(seen))
"""


def audited(*args: str, site: Path | None = None, **env: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`triage ARGS --json` under the audit hook: (the versions probe's JSON, what the process did)."""
    path = f"{site}:{REPO}" if site is not None else str(REPO)
    done = subprocess.run(
        [sys.executable, "-B", "-c", AUDIT, *args, "--json"],
        capture_output=True,
        text=True,
        env=triage_env(PYTHONPATH=path, **env),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    document, _, audit = done.stdout.rpartition("\nAUDIT ")
    assert audit, done.stderr
    probe = next(p for p in json.loads(document)["probes"] if p["name"] == "versions")
    return probe, json.loads(audit)


def how(probe: dict[str, Any]) -> str:
    return next(e["output"] for e in probe["evidence"] if e["source"] == "where each value came from")


def real_torch() -> dict[str, Any]:
    """What `import torch` itself says, in a child of its own: the ground truth."""
    code = "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    version, cuda = json.loads(done.stdout.strip().splitlines()[-1])
    return {"torch": version, "cuda": cuda or ""}


@pytest.fixture(scope="module")
def shadow(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """make(cuda) -> a site directory whose `torch` is the real one (every entry a symlink) except
    version.py, which claims a CUDA build: importing it really loads this machine's torch."""
    real = find_torch()
    assert real is not None

    def make(cuda: str) -> Path:
        site = tmp_path_factory.mktemp("site")
        (site / "torch").mkdir()
        for entry in real.iterdir():
            if entry.name != "version.py":
                (site / "torch" / entry.name).symlink_to(entry)
        text = (real / "version.py").read_text(encoding="utf-8")
        lines = [
            f"cuda: Optional[str] = {cuda!r}" if ln.startswith("cuda") else ln for ln in text.splitlines()
        ]
        assert lines != text.splitlines()
        (site / "torch" / "version.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return site

    return make


def dist_info(site: Path, name: str, version: str, *requires: str) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir()
    headers = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    headers += [f"Requires-Dist: {line}" for line in requires]
    (folder / "METADATA").write_text("\n".join(headers) + "\n\n", encoding="utf-8")


@pytest.mark.slow  # imports torch in a child process
def test_this_machines_torch_read_from_files_matches_import_torch() -> None:
    truth = real_torch()
    probe, did = audited("probe", "versions")
    facts = probe["facts"]
    assert probe["status"] == "ok", probe["summary"]
    assert facts["versions.torch"] == truth["torch"]
    assert facts["versions.cuda"] == truth["cuda"]
    # A guest on the machine: no torch import, no child process, not one file written.
    assert did == {"writes": [], "processes": [], "torch_imported": False, "exit": 0}
    assert facts["versions.torch_available"] is True
    assert ("versions.nccl" in facts) == (truth["cuda"] != "")
    assert facts["versions.python"] == platform.python_version()
    for name in ("accelerate", "deepspeed"):  # omitted, not guessed, when absent
        try:
            installed: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        assert facts.get(f"versions.{name}") == installed
    assert "torch/version.py (read, torch not imported)" in how(probe)


@pytest.mark.parametrize(
    ("installed", "note"),
    [
        ("2.21.5", None),
        ("2.23.4", "torch was built against NCCL 2.21.5 but nvidia-nccl-cu12 2.23.4 is installed"),
    ],
)
def test_cuda_wheel_nccl_is_the_pip_distribution_torch_requires(
    shadow: Any, tmp_path: Path, installed: str, note: str | None
) -> None:
    site = shadow("12.4")
    dist_info(
        site,
        "torch",
        importlib.metadata.version("torch"),
        'nvidia-nccl-cu12==2.21.5; platform_system == "Linux"',
    )
    dist_info(site, "nvidia-nccl-cu12", installed)
    libs = tmp_path / "lib"
    libs.mkdir()
    (libs / "libnccl.so.2").write_bytes(b"")  # only offered to the loader; nothing here loads NCCL
    probe, did = audited("probe", "versions", site=site, LD_LIBRARY_PATH=str(libs))
    facts = probe["facts"]
    assert (facts["versions.cuda"], facts["versions.nccl"], facts["versions.torch_available"]) == (
        "12.4",
        installed,
        True,
    )
    assert f"versions.nccl = '{installed}': importlib.metadata: nvidia-nccl-cu12 {installed}" in how(probe)
    assert f"cuda in {site}/torch/version.py" in how(probe)
    assert (note is not None) == (note in probe["summary"] if note else False)
    assert f"LD_LIBRARY_PATH: {libs / 'libnccl.so.2'}" in probe["summary"]
    assert did == {"writes": [], "processes": [], "torch_imported": False, "exit": 0}


@pytest.mark.slow  # imports torch in a child process
def test_cuda_build_without_pip_nccl_falls_back_to_importing_torch_in_a_child(shadow: Any) -> None:
    site = shadow("12.4")  # no dist-info: a source or conda build, whose NCCL no metadata names
    # a generous bound: on a loaded machine the child's `import torch` alone took past the default 10 s
    probe, did = audited("probe", "versions", "--timeout", "40", site=site)
    facts = probe["facts"]
    assert facts["versions.cuda"] == "12.4"  # torch.version.cuda, as the imported torch reports it
    assert facts["versions.torch"] == importlib.metadata.version("torch")
    assert "versions.nccl" not in facts  # this CPU library has no NCCL to report, whatever it claims
    assert probe["status"] == "warn" and "CUDA build without the NCCL backend" in probe["summary"]
    text = how(probe)
    assert "versions.cuda = '12.4': child process `import torch`" in text
    assert "whose metadata requires no nvidia-nccl package" in text
    assert "torch.cuda.nccl.version() gave nothing" in text
    assert len(did["processes"]) == 1 and "import torch" in did["processes"][0]
    assert did["writes"] == [] and did["torch_imported"] is False


def test_broken_torch_shadowing_the_real_one(tmp_path: Path) -> None:
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise ImportError('libtorch_cpu.so: cannot open shared object file')\n"
    )
    (broken / "version.py").write_text("__version__ = '9.9.9'\ncuda: str | None = '12.8'\n")
    env = triage_env(PYTHONPATH=f"{tmp_path / 'site'}:{REPO}")
    result = run_triage("probe", "versions", "--json", env=env)
    assert result.returncode == 5, result.stderr
    probe = json.loads(result.stdout)["probes"][0]
    assert probe["status"] == "fail"
    assert probe["facts"]["versions.torch_available"] is False and probe["facts"]["versions.torch"] == "9.9.9"
    assert "libtorch_cpu.so: cannot open shared object file" in probe["summary"]
    assert probe["flagged"] == ["versions.torch_available"]
    assert "no " + str(broken / "_C") in how(probe)  # why the files could not vouch for it


def test_no_torch_at_all_is_unavailable() -> None:
    # A child whose sys.path lost site-packages has no torch to find.
    code = (
        "import json, sys, threading; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
        "from probes import versions; from triage.core.facts import ProbeOptions; "
        "r = versions.probe(ProbeOptions(), threading.Event()); print(json.dumps([r.status, r.facts, r.summary]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
    )
    status, facts, summary = json.loads(done.stdout)
    assert status == "unavailable" and facts["versions.torch_available"] is False
    assert "versions.torch" not in facts and "torch is not installed" in summary


# --- platform, NCCL in the build, CUDA architectures, known-bad versions --------------------------------


@pytest.mark.parametrize(
    ("system", "release", "name"),
    [
        ("linux", "6.8.0-49-generic", "linux"),
        ("linux", "5.15.153.1-microsoft-standard-WSL2", "wsl"),
        ("win32", "", "windows"),
        ("darwin", "", "darwin"),
        ("freebsd14", "", "other"),
    ],
)
def test_platform_name(system: str, release: str, name: str) -> None:
    assert versions.platform_name(system, release) == name


@pytest.mark.parametrize(
    ("system", "cuda", "hip", "built"),
    [
        ("linux", "12.4", "", True),
        ("linux", "", "", False),
        ("linux", "", "6.2", True),
        ("windows", "12.4", "", False),
    ],
)
def test_nccl_built_from_the_build(system: str, cuda: str, hip: str, built: bool) -> None:
    assert versions.nccl_built(system, cuda, hip)[0] is built


def test_arch_list_read_from_the_bindings_library(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    blob = b"\0junk sm_12 \0" + b"sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90 compute_90\0more"
    (tmp_path / "lib" / "libtorch_python.so").write_bytes(blob)
    archs, where = cuda_arch_list(tmp_path)
    assert archs == ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "compute_90"]
    assert "libtorch_python.so" in where and "not imported" in where
    (tmp_path / "lib" / "libtorch_python.so").write_bytes(b"\0no list here\0")
    assert cuda_arch_list(tmp_path)[0] is None


@pytest.mark.parametrize(
    ("archs", "capability", "ok"),
    [
        (["sm_80", "sm_90"], (12, 0), False),  # an RTX 5090 on a wheel built before Blackwell
        (["sm_80", "sm_90", "sm_100", "sm_120"], (12, 0), True),
        (["sm_80"], (8, 6), True),  # same major, older minor: the cubin runs
        (["sm_86"], (8, 0), False),  # a newer minor does not run on an older GPU
        (["sm_80", "compute_90"], (12, 0), True),  # PTX is compiled for newer GPUs by the driver
    ],
)
def test_arch_support_follows_cuda_rules(archs: list[str], capability: tuple[int, int], ok: bool) -> None:
    assert arch_supports(archs, capability) is ok


@pytest.mark.parametrize(
    ("version", "spec", "hit"),
    [
        ("2.7.0+cu126", "==2.7.0", True),
        ("2.7.1", "==2.7.0", False),
        ("2.14.3", ">=2.13,<2.15", True),
        ("2.13", ">=2.13,<2.15", True),
        ("2.15.5", ">=2.13,<2.15", False),
        ("2.14.3", "==2.14.*", True),
        ("2.21.5", "!=2.21.5", False),
        ("", "==2.7.0", False),
    ],
)
def test_version_specifiers(version: str, spec: str, hit: bool) -> None:
    assert known_bad.matches(version, spec) is hit


def test_the_shipped_known_bad_list_is_valid_and_cites_its_entries(kb: Any) -> None:
    items, problems, path = known_bad.load()
    assert problems == [] and path.name == "known_bad_versions.yaml"
    assert {i.id for i in items} >= {
        "torch-2.7.0-device-id-nonblocking-hang",
        "nccl-2.13-2.14-cuda-launch-blocking-hang",
    }
    for item in items:
        assert item.entry in kb.entries, item.id
        assert item.reference.startswith("https://github.com/"), item.id
    torch_270 = known_bad.installed_matches(items, {"torch": "2.7.0+cu128", "nccl": "2.26.2"})
    assert [i.id for i in torch_270] == ["torch-2.7.0-device-id-nonblocking-hang"]
    assert (
        known_bad.installed_matches(items, {"torch": "1.13.1+cu117", "nccl": "2.14.3"})[0].component == "nccl"
    )
    assert known_bad.installed_matches(items, {"torch": "2.13.0+cpu", "nccl": ""}) == []


def test_a_broken_list_is_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "known_bad_versions.yaml").write_text("- id: x\n  component: gcc\n  versions: '~=1'\n")
    items, problems, _ = known_bad.load(tmp_path)
    assert items == [] and "lacks" in problems[0]
    assert known_bad.load(tmp_path / "missing")[1][0].startswith("cannot read")


def test_known_bad_torch_is_reported_with_its_condition_and_thread() -> None:
    notes, proof = versions.check_known_bad({"versions.torch": "2.7.0+cu126", "versions.nccl": "2.26.2"})
    assert notes == [
        'torch 2.7.0+cu126 is known-bad when init_process_group(backend="nccl", device_id=...) '
        "(eager init switches on NCCL's non-blocking API by default in this release) (E16)"
    ]
    assert "https://github.com/pytorch/pytorch/issues/153960" in proof.output


def test_this_machine_platform_and_build() -> None:
    import threading

    from triage.core.facts import ProbeOptions

    result = versions.probe(ProbeOptions(timeout_s=30), threading.Event())
    assert result.facts["versions.platform"] == "linux"
    assert result.facts["versions.known_bad"] is False
    if result.facts.get("versions.cuda") == "":
        assert result.facts["versions.nccl_built"] is False  # this CPU wheel: backend="nccl" cannot work
