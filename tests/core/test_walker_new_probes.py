"""The real graph's probe nodes for the entries beyond the seeds: each fact leads where it should,
and each node falls back to its question when its probe cannot run."""

from __future__ import annotations

import pytest

from triage.core.model import KnowledgeBase, QuestionNode
from triage.core.walker import walk

LAUNCH = {"what_do_you_see": "It will not start - it errors or exits right at launch"}


def option(kb: KnowledgeBase, node: str, start: str) -> str:
    question = kb.graph.nodes[node]
    assert isinstance(question, QuestionNode)
    return next(str(i) for i, o in enumerate(question.options, 1) if o.label.startswith(start))


@pytest.mark.parametrize(
    ("choice", "facts", "leaf"),
    [
        ("CUDA error: invalid device ordinal", {"gpu.ranks_exceed_gpus": True}, "E5"),
        ("NCCL is missing", {"versions.platform": "windows"}, "E2"),
        ("NCCL is missing", {"versions.platform": "linux", "versions.nccl_built": False}, "E9"),
        (
            "NCCL is missing",
            {"versions.platform": "linux", "versions.nccl_built": True, "gpu.available": False},
            "E9",
        ),
        ("The GPU is not compatible", {"gpu.arch_supported": False}, "E11"),
    ],
)
def test_launch_errors_branch_on_probe_facts(
    kb: KnowledgeBase, choice: str, facts: dict[str, object], leaf: str
) -> None:
    answers = {**LAUNCH, "launch_error": option(kb, "launch_error", choice)}
    pos = walk(kb, answers, facts)
    assert pos.leaf is not None and pos.leaf.id == leaf, [s.node for s in pos.trail]


def test_unhandled_system_error_asks_for_the_last_error_line(kb: KnowledgeBase) -> None:
    answers = {**LAUNCH, "launch_error": option(kb, "launch_error", "An NCCL error")}
    shm = walk(
        kb,
        {**answers, "nccl_error": option(kb, "nccl_error", "Error while creating")},
        {"env.shm_small": True},
    )
    assert shm.leaf is not None and shm.leaf.id == "E3"
    memlock = walk(kb, {**answers, "nccl_error": option(kb, "nccl_error", "Call to ibv_reg_mr")})
    assert memlock.leaf is not None and memlock.leaf.id == "E18"
    skew = walk(
        kb,
        {**answers, "nccl_error": option(kb, "nccl_error", "internal error")},
        {"dist.cross_rank_mismatch": False, "versions.known_bad": True},
    )
    assert skew.leaf is not None and skew.leaf.id == "E16"


def test_hardware_errors_and_pcie_risk_are_probed(kb: KnowledgeBase) -> None:
    mid = {"what_do_you_see": "It trained for a while, then froze or timed out mid-run"}
    hw = walk(
        kb,
        {**mid, "hang_mid": option(kb, "hang_mid", "One node keeps failing")},
        {"gpu.hardware_errors": True},
    )
    assert hw.leaf is not None and hw.leaf.id == "E10"
    unknown = walk(
        kb, {**mid, "hang_mid": option(kb, "hang_mid", "One node keeps failing")}, {}, {"gpu.hardware_errors"}
    )
    assert isinstance(unknown.node, QuestionNode) and unknown.node.id == "hw_question"
    start = {
        "what_do_you_see": "It hangs while starting up, before the first training step",
        "hang_init": "1",
        "hang_init_single": "3",
    }
    p2p = walk(
        kb,
        start,
        {
            "env.rank_contract": "complete",
            "dist.minitest": "hang",
            "gpu.fabricmanager": "not_installed",
            "gpu.pcie_p2p_risk": True,
        },
    )
    assert p2p.leaf is not None and p2p.leaf.id == "E1", [s.node for s in p2p.trail]


def test_every_new_entry_is_a_leaf_of_the_graph(kb: KnowledgeBase) -> None:
    targets = set()
    for node in kb.graph.nodes.values():
        targets |= {o.target for o in getattr(node, "options", ())}
        targets |= set(getattr(node, "branches", {}).values())
        targets |= {t for t in (getattr(node, "default", None), getattr(node, "unknown", None)) if t}
    assert {f"E{i}" for i in range(1, 20)} | {"X6"} <= targets
