"""The log engine on session 13's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.heads import from_heads
from triage.core.logscan.transport import store_wait
from triage.core.model import KnowledgeBase


def test_a_store_timeout_waiting_for_a_key_is_a_wait() -> None:
    assert store_wait("torch.distributed.DistStoreError: wait timeout after 10000ms, keys: /best_ckpt")
    assert store_wait("Timed out after 1801 seconds waiting for clients. 1/2 clients joined.") is None


def test_a_key_one_rank_waits_for_while_the_other_waits_in_a_barrier_is_a_rank_conditional_meeting(
    kb: KnowledgeBase,
) -> None:
    # rank 1's `store.get(key)` (the user's line, no torch frame) ran out while rank 0 waited in the
    # barrier: rank 1 did not crash of its own (D20); the two meeting points never pair up (D21)
    for setting in ("default", "cpp-info"):
        log = str(_item("store_get_key_never_set.py", setting)["log"])
        assert "keys: /best_ckpt" in log
        verdict = verdict_for(kb, log)
        assert verdict.found and verdict.diagnoses[0].entry_id == "D21", verdict.diagnoses[:3]


def test_torch_waiting_for_its_own_rendezvous_key_is_no_wait_of_the_program(kb: KnowledgeBase) -> None:
    # the same words under init_process_group's frames are torch's rendezvous (D1's signature), not a
    # key the user's code waited for: no rank waits in `store.get`
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/home/u/train.py", line 9, in <module>',
            '    dist.init_process_group("gloo")',
            '  File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1710, in init_process_group',
            "    store, rank, world_size = next(rendezvous_iterator)",
            "torch.distributed.DistStoreError: wait timeout after 5000ms, keys: /default_pg/0//cpu//0/2",
        ]
    )
    verdict = verdict_for(kb, log)
    assert not verdict.diagnoses or verdict.diagnoses[0].entry_id != "D21", verdict.diagnoses[:3]


def test_a_message_each_process_prints_before_its_traceback_is_no_progress_line() -> None:
    # DCP reports `Global metadata is not found. ...` and then the traceback, once per process: an
    # error report, not every rank printing the same progress (D23)
    log = str(_item("dcp_resume_dir_name_typo.py")["log"])
    assert log.count("Global metadata is not found") == 2
    assert "D23" not in [i.entry_id for i in from_heads([log])]
    report = [
        "Global metadata is not found. Falling back to rank local metadata.",
        "Rank local metadata is not found.",
    ]
    frame = '  File "/x/site-packages/torch/distributed/checkpoint/filesystem.py", line 929, in read_metadata'
    with_traceback = [
        f"{m}\nTraceback (most recent call last):\n{frame}\nFileNotFoundError: x" for m in report
    ]
    assert "D23" not in [i.entry_id for i in from_heads(["\n".join(with_traceback * 2)])]
    # the same lines with nothing after them are what every rank printing looks like
    assert "D23" in [i.entry_id for i in from_heads(["\n".join(report * 2)])]


def test_a_path_typo_every_rank_fails_alike_is_not_every_rank_saving(kb: KnowledgeBase) -> None:
    # No signature names a mistyped checkpoint directory; the query fallback's reading of the
    # DCP errors sits at its threshold (0.6) and moves with the index, so only the reading the
    # heads rule removed is asserted: the error lines are not every rank printing progress (D23).
    verdict = verdict_for(kb, str(_item("dcp_resume_dir_name_typo.py")["log"]))
    assert verdict.diagnoses and verdict.diagnoses[0].entry_id != "D23", verdict.diagnoses[:3]


def test_dtensor_and_device_mesh_refusals_are_fsdp2s(kb: KnowledgeBase) -> None:
    for script in ("device_mesh_names_string.py", "fsdp2_manual_grad_allreduce.py"):
        verdict = verdict_for(kb, str(_item(script)["log"]))
        assert verdict.found and verdict.diagnoses[0].entry_id == "E6", (script, verdict.diagnoses[:3])


def test_dynamo_refusing_to_trace_under_ddp_is_torch_compiles(kb: KnowledgeBase) -> None:
    for setting in ("default", "loglevel-info"):
        verdict = verdict_for(kb, str(_item("compile_ddp_fullgraph_item.py", setting)["log"]))
        assert verdict.found and verdict.diagnoses[0].entry_id == "E8", verdict.diagnoses[:3]
