"""The mechanism session 13c's train evidence needed (eval/lint/README.md, "Session 13c"), quoting the
real code of a train-split file: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "snippet.py")]


# Lightning-AI/pytorch-lightning#20536, the user's method as the maintainer's answer quotes it: no
# imports, `fabric` never created, rank 0 returns before the barrier the other ranks wait in.
FABRIC_SNIPPET = """
    def make_dataset(self, x, y):
        if fabric.global_rank == 0:
            # In actual program, there is some I/O so I used barrier
            dataset = TensorDataset(x, y)
            return dataset
        fabric.barrier()
"""


def test_a_snippets_unbound_fabric_is_lightnings_by_its_rank_attribute() -> None:
    assert codes(FABRIC_SNIPPET) == ["TRG021"]


def test_the_maintainers_fix_is_clean() -> None:
    fixed = """
        def make_dataset(self, x, y):
            if fabric.global_rank == 0:
                download(x, y)
            fabric.barrier()
            return TensorDataset(x, y)
    """
    assert "TRG021" not in codes(fixed)


def test_a_fabric_the_snippet_creates_is_not_guessed() -> None:
    # The file binds `fabric` itself (to something the lint cannot see): nothing says it is Fabric.
    bound = "fabric = make_runner()\n" + textwrap.dedent(FABRIC_SNIPPET)
    assert codes(bound) == []


def test_a_trainer_attribute_of_self_counts_only_in_a_fragment() -> None:
    method = """
        def test_epoch_end(self, outputs):
            if self.trainer.is_global_zero:
                outputs = self.all_gather(outputs)
                return outputs
    """
    assert codes(method) == ["TRG021"]
    # A whole file says what it uses in its imports; this one is no Lightning module.
    assert codes("import numpy as np\n" + textwrap.dedent(method)) == []


def test_a_rank_attribute_of_another_object_implies_nothing() -> None:
    other = FABRIC_SNIPPET.replace("fabric.", "runner.")
    assert codes(other) == []
