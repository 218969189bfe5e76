"""The log engine on session 11b's stored real output (eval/runs/train.yaml; no torch launched
here), and the pasted traceback of pytorch/pytorch#132068 (two optimizers on parameter subsets of
an FSDP1 model)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

ISSUE_132068 = """\
Traceback (most recent call last):
  File "/home/sahil/linum-v2-vae/tests/test_fsdp_raw_torch.py", line 174, in <module>
    main()
  File "/home/sahil/linum-v2-vae/tests/test_fsdp_raw_torch.py", line 158, in main
    gen_opt = optim.SGD(generator_parameters, lr=0.1)
  File "/home/sahil/.cache/pypoetry/virtualenvs/linum-v2-vae/lib/python3.10/site-packages/torch/optim/sgd.py", line 27, in __init__
    super().__init__(params, defaults)
  File "/home/sahil/.cache/pypoetry/virtualenvs/linum-v2-vae/lib/python3.10/site-packages/torch/optim/optimizer.py", line 279, in __init__
    raise ValueError("optimizer got an empty parameter list")
ValueError: optimizer got an empty parameter list
"""


@pytest.mark.parametrize("setting", ["default", "tee"])
def test_an_optimizer_on_a_flattened_submodule_is_fsdp1s_flat_parameter(
    kb: KnowledgeBase, setting: str
) -> None:
    # every rank refuses the same call; the log never names FSDP, only torch.optim's refusal
    verdict = verdict_for(kb, str(_item("fsdp_optim_subset_flat.py", setting)["log"]))
    assert verdict.found and verdict.diagnoses[0].entry_id == "E15", verdict.diagnoses[:3]


def test_the_same_refusal_pasted_from_one_process(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, ISSUE_132068)
    assert verdict.found and verdict.diagnoses[0].entry_id == "E15", verdict.diagnoses[:3]
