"""The configs probe on real files: Accelerate YAML and DeepSpeed JSON, good, conflicting, broken."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from probes import configs
from tests.probes.helpers import run_triage, triage_env
from triage.core.facts import ProbeOptions

ACCELERATE_DS = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: ds_config.json
  gradient_accumulation_steps: 4
  zero_stage: 2
mixed_precision: bf16
num_machines: 1
num_processes: 8
"""
DS_FP16 = {"fp16": {"enabled": True}, "gradient_accumulation_steps": 8, "zero_optimization": {"stage": 3}}
DS_AUTO = {
    "bf16": {"enabled": "auto"},
    "gradient_accumulation_steps": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def run(
    tmp: Path,
    accelerate: str | None,
    deepspeed: object | None,
    *,
    gpus: int = 8,
    raw_ds: bytes | None = None,
    pass_ds: bool = True,
) -> configs.ProbeResult:
    acc_path = tmp / "acc.yaml"
    if accelerate is not None:
        acc_path.write_text(accelerate)
    ds_path = tmp / "ds_config.json"
    if raw_ds is not None:
        ds_path.write_bytes(raw_ds)
    elif deepspeed is not None:
        ds_path.write_text(json.dumps(deepspeed))
    options = ProbeOptions(
        accelerate_config=str(acc_path), deepspeed_config=str(ds_path) if pass_ds else None
    )
    return configs.probe(options, threading.Event(), gpu_count=gpus)


def test_keys_set_in_both_places(tmp_path: Path) -> None:
    result = run(tmp_path, ACCELERATE_DS, DS_FP16)
    assert result.status == "warn"
    assert result.facts == {
        "configs.accelerate_config": "present",
        "configs.ds_config": "present",
        "configs.accelerate_single_process": False,
        "configs.ds_double_set": True,
        "configs.ds_grad_accum_conflict": True,
        "configs.ds_fp16_mismatch": True,
    }
    assert set(result.flagged) == {
        "configs.ds_double_set",
        "configs.ds_grad_accum_conflict",
        "configs.ds_fp16_mismatch",
    }
    assert "gradient_accumulation_steps (JSON: 8), zero_stage (JSON: 3), mixed_precision" in result.summary
    assert "the DeepSpeed JSON enables fp16 while Accelerate asks for bf16" in result.summary


def test_auto_values_and_no_overlap(tmp_path: Path) -> None:
    clean = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds_config.json\nnum_processes: 8\n"
    result = run(tmp_path, clean, DS_AUTO)
    assert result.status == "ok" and result.flagged == ()
    assert result.facts["configs.ds_double_set"] is False
    assert (
        result.facts["configs.ds_grad_accum_conflict"] is False
        and result.facts["configs.ds_fp16_mismatch"] is False
    )


def test_json_found_through_the_accelerate_config(tmp_path: Path) -> None:
    result = run(
        tmp_path, ACCELERATE_DS, DS_FP16, pass_ds=False
    )  # deepspeed_config_file, relative to the YAML
    assert result.facts["configs.ds_config"] == "present" and result.facts["configs.ds_double_set"] is True


@pytest.mark.parametrize(("processes", "gpus", "single"), [(1, 4, True), (4, 4, False), (1, 1, False)])
def test_one_process_on_a_multi_gpu_box(tmp_path: Path, processes: int, gpus: int, single: bool) -> None:
    text = f"distributed_type: {'NO' if processes == 1 else 'MULTI_GPU'}\nnum_processes: {processes}\n"
    result = run(tmp_path, text, None, gpus=gpus, pass_ds=False)
    assert result.facts["configs.accelerate_single_process"] is single
    assert result.facts["configs.ds_config"] == "not_given"
    assert ("configs.accelerate_single_process" in result.flagged) is single


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"fp16": {"enabled": true},\n "zero_optimization": }', "is not valid JSON: line 2"),
        (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
        (b"[1, 2]", "holds a list, not a DeepSpeed config mapping"),
        (b" " * (configs.MAX_BYTES + 1), "larger than"),
    ],
    ids=["malformed", "not-utf8", "not-a-mapping", "huge"],
)
def test_broken_deepspeed_json_fails(tmp_path: Path, raw: bytes, message: str) -> None:
    result = run(tmp_path, ACCELERATE_DS, None, raw_ds=raw)
    assert result.status == "fail" and message in result.summary
    assert result.facts["configs.ds_config"] == "missing" and "configs.ds_config" in result.flagged


def test_broken_accelerate_yaml_fails_with_its_line(tmp_path: Path) -> None:
    result = run(tmp_path, "distributed_type: DEEPSPEED\n  num_processes: [8\n", None, pass_ds=False)
    assert result.status == "fail" and "is not valid YAML line 2" in result.summary


def test_default_location_under_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert (
        configs.probe(ProbeOptions(), threading.Event(), gpu_count=0).facts["configs.accelerate_config"]
        == "missing"
    )
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "default_config.yaml").write_text(
        "distributed_type: MULTI_GPU\nnum_processes: 2\n"
    )
    result = configs.probe(ProbeOptions(), threading.Event(), gpu_count=0)
    assert result.facts["configs.accelerate_config"] == "present"
    assert str(tmp_path / "accelerate" / "default_config.yaml") in result.evidence[0].source


def test_cli_rejects_a_missing_config_path(tmp_path: Path) -> None:
    result = run_triage(
        "probe",
        "configs",
        "--deepspeed-config",
        str(tmp_path / "nope.json"),
        env=triage_env(),
    )
    assert result.returncode == 2
    # However long the temporary folder's path, the line names the option and ends in the file's name.
    assert result.stderr.startswith("triage: error: --deepspeed-config: no such file: '/")
    assert result.stderr.endswith("nope.json'\n")
    assert result.stderr.count("\n") == 1
