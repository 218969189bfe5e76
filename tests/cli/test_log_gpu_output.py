"""`triage log` on output captured on a real GPU machine (tests/fixtures/gpu-h100: torch 2.11+cu130,
NCCL 2.28.9, one H100): the entries beyond the seeds and the async-CUDA case, from real lines."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.conftest import FIXTURES, CliResult

GPU = FIXTURES / "gpu-h100"


@pytest.mark.parametrize(
    ("log", "entry", "first_rank"),
    [
        # "GPU device may be out of range": the traceback has no rank prefix, and torchrun reports
        # local rank 1 as the only worker that failed on its own (rank 0 got its SIGTERM)
        ("e5_ordinal.log", "E5", 1),
        ("e9_nogpu.log", "E9", 0),  # ValueError: ProcessGroupNCCL is only supported with GPUs (one rank)
        ("p5_assert.log", "P5", 0),  # [rank0]: Cuda failure 'device-side assert triggered'
        ("dup_gpu.log", "D3", 1),
    ],
)
def test_real_gpu_output_is_diagnosed(
    log: str, entry: str, first_rank: int | None, run_cli: Callable[..., CliResult]
) -> None:
    result = run_cli("log", "--json", str(GPU / log))
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    assert data["diagnoses"][0]["id"] == entry, [d["id"] for d in data["diagnoses"]]
    assert data["first_rank"] == first_rank
