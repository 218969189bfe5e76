"""Rank prefixes as launchers really print them."""

from __future__ import annotations

import pytest

from triage.core.logscan.prefixes import rank_from_path, rank_in_message, split_prefix


@pytest.mark.parametrize(
    ("line", "rank", "host", "body"),
    [
        ("[default3]:RuntimeError: boom", 3, None, "RuntimeError: boom"),
        ('[host1:0]:  File "train.py", line 3', 0, "host1", ' File "train.py", line 3'),
        (
            "[host1:2]AttributeError: 'list' object has no attribute 'sum'",
            2,
            "host1",
            "AttributeError: 'list' object has no attribute 'sum'",
        ),
        (
            "[rank1]: FloatingPointError: loss is nan at step 3",
            1,
            None,
            "FloatingPointError: loss is nan at step 3",
        ),
        (
            "[default0]:[rank0]: Traceback (most recent call last):",
            0,
            None,
            "Traceback (most recent call last):",
        ),
        ("[5:0]", 0, "5", ""),
        ("  3: RuntimeError: NCCL error", 3, None, "RuntimeError: NCCL error"),
        ("[1,3]<stderr>:ValueError: x", 3, None, "ValueError: x"),
        (
            "[rank3]:[E115 15:39:38.012111423 ProcessGroupNCCL.cpp:1899] watchdog",
            3,
            None,
            "[E115 15:39:38.012111423 ProcessGroupNCCL.cpp:1899] watchdog",
        ),
    ],
)
def test_prefixes_are_peeled(line: str, rank: int, host: str | None, body: str) -> None:
    split = split_prefix(line)
    assert (split.rank, split.host, split.body) == (rank, host, body)


@pytest.mark.parametrize(
    "line",
    [
        "[W socket.cpp:436] [c10d] The server socket has failed to bind",
        "[12:00:01] loss 3.2",
        "E1122 04:12:07.467000 10825 torch/distributed/elastic/multiprocessing/api.py:1002] failed",
        "15:39:38 training started",
    ],
)
def test_lines_without_a_rank_prefix_are_left_alone(line: str) -> None:
    split = split_prefix(line)
    assert split.rank is None
    assert split.body == line


@pytest.mark.parametrize(
    ("line", "rank", "body"),
    [
        ("2024-05-01T12:00:00.123456789Z [default1]:[rank1]: boom", 1, "boom"),
        (
            "2024-05-01T12:00:00.123456Z Traceback (most recent call last):",
            None,
            "Traceback (most recent call last):",
        ),
        ("[2024-05-01 12:00:00,123] step 4", None, "step 4"),
        (
            "(RayWorkerWrapper pid=1890, ip=10.41.0.8) [rank8]:[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh",
            8,
            "[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh",
        ),
        (
            "(VllmWorkerProcess pid=13359) RuntimeError: Cannot re-initialize CUDA",
            None,
            "RuntimeError: Cannot re-initialize CUDA",
        ),
        (
            "Fri Aug 11 12:31:45 2023[1,3]<stdout>:tomte401:1850304:1881110 [3] transport.cc:154 NCCL WARN x",
            3,
            "transport.cc:154 NCCL WARN x",
        ),
        (
            "gpu617:22841:22841 [0] bootstrap.cc:37 NCCL WARN Bootstrap : no socket",
            0,
            "bootstrap.cc:37 NCCL WARN Bootstrap : no socket",
        ),
        ("[trainer3]:host1:1958:1958 [1] NCCL INFO Using eth2", 3, "NCCL INFO Using eth2"),
    ],
)
def test_collector_process_and_nccl_prefixes(line: str, rank: int | None, body: str) -> None:
    split = split_prefix(line)
    assert (split.rank, split.body) == (rank, body)


def test_rank_named_in_the_message() -> None:
    assert rank_in_message("[Rank 1] Watchdog caught collective operation timeout") == 1
    assert rank_in_message("[PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog") == 3
    assert rank_in_message("failed (exitcode: 1) local_rank: 2 (pid: 9) of binary") == 2
    # torchrun's summary pasted with its layout lost (real paste): `rank2 (local rank: 2)exitcode: -9`
    assert rank_in_message("rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>") == 2
    assert rank_in_message("loss 3.2") is None


def test_rank_from_per_rank_file_names() -> None:
    assert rank_from_path("/tmp/torchelastic_x/run/attempt_0/3/stderr.log") == 3
    assert rank_from_path("logs/rank7.log") == 7
    assert rank_from_path("logs/worker_2.txt") == 2
    assert rank_from_path("logs/train.log") is None


@pytest.mark.parametrize(
    ("line", "body"),
    [
        (
            "E0422 05:07:49.013000 204 torch/distributed/elastic/multiprocessing/api.py:732] RuntimeError:"
            " Cannot re-initialize CUDA in forked subprocess.",
            "RuntimeError: Cannot re-initialize CUDA in forked subprocess.",
        ),
        (
            "E0422 05:07:49.013000 204 torch/distributed/elastic/multiprocessing/api.py:732]     raise RuntimeError(",
            "    raise RuntimeError(",
        ),
        # the launcher's own report keeps the prefix that says it is the launcher's
        (
            "E1122 04:12:07.467000 10825 torch/distributed/elastic/multiprocessing/api.py:869] failed"
            " (exitcode: 1) local_rank: 0 (pid: 10826) of binary: /usr/bin/python3",
            None,
        ),
        (
            "E1122 04:12:07.467000 10825 torch/distributed/elastic/agent/server/api.py:721] Error waiting on"
            " exit barrier. Elapsed: 300.1 seconds",
            None,
        ),
    ],
)
def test_the_python_loggers_relay_of_a_worker_traceback_is_peeled(line: str, body: str | None) -> None:
    """With the fork start method torch's logger relays each line of the worker's traceback behind
    its own glog prefix (real output, accelerate's notebook_launcher): the line is the worker's."""
    assert split_prefix(line).body == (line if body is None else body)


@pytest.mark.parametrize(
    ("line", "rank", "host", "body"),
    [
        # DeepSpeed's pdsh runner with a hostfile of addresses (eval/logs/v.yaml, ChatGLM-6B#748)
        (
            "36.139.225.141:     deepspeed.init_distributed(timeout=timedelta(seconds=self.ddp_timeout))",
            None,
            "36.139.225.141",
            "    deepspeed.init_distributed(timeout=timedelta(seconds=self.ddp_timeout))",
        ),
        # the host repeated by a runner that wraps pdsh, then NCCL's own prefix (eval/logs/g.yaml)
        (
            "10.0.87.143: 10.0.87.143: ip-10-0-87-143:149:298 [5] NCCL INFO transport.cc:111 -> 2",
            5,
            "10.0.87.143",
            "NCCL INFO transport.cc:111 -> 2",
        ),
        # a second, different host name is the message's, not a prefix
        ("algo-1: algo-2: ready", None, "algo-1", "algo-2: ready"),
    ],
)
def test_pdsh_host_prefixes_by_address(line: str, rank: int | None, host: str | None, body: str) -> None:
    split = split_prefix(line)
    assert (split.rank, split.host, split.body) == (rank, host, body)


def test_a_version_number_is_no_host() -> None:
    assert split_prefix("2.4.8: build ok").body == "2.4.8: build ok"
