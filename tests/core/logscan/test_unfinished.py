"""A traceback the paste cuts off before its error line: the deepest frames are what gets read.

The pastes are real: OpenRLHF/OpenRLHF#584 (a DeepSpeed config check, cut before its error) and
pytorch/torchtitan#3065 (a checkpoint save, cut the same way, Python 3.13's caret lines included),
pytorch/translate#287 (mp.spawn's bare `Exception:` line: a finished traceback).
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.logscan.unfinished import unfinished_frames
from triage.core.model import KnowledgeBase

DEEPSPEED_CONFIG = """\
[rank4]: Traceback (most recent call last):
[rank4]:   File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main
[rank4]:     return _run_code(code, main_globals, None,
[rank4]:   File "/workspace/OpenRLHF/openrlhf/cli/train_ppo.py", line 199, in train
[rank4]:     ) = strategy.prepare(
[rank4]:   File "/workspace/OpenRLHF/openrlhf/utils/deepspeed.py", line 193, in prepare
[rank4]:     ret.append(self._ds_init_train_model(*arg))
[rank4]:   File "/workspace/OpenRLHF/openrlhf/utils/deepspeed.py", line 203, in _ds_init_train_model
[rank4]:     engine, optim, _, scheduler = deepspeed.initialize(
[rank4]:   File "/usr/local/lib/python3.10/dist-packages/deepspeed/__init__.py", line 179, in initialize
[rank4]:     config_class = DeepSpeedConfig(config, mpu, mesh_device=mesh_device)
[rank4]:   File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/config.py", line 798, in __init__
[rank4]:     self._configure_train_batch_size()
[rank4]:   File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/config.py", line 981, in _configure_train_batch_size
"""

CHECKPOINT_SAVE = """\
[rank0]:[titan] 2026-05-12 17:07:23,237 - root - INFO - Saving the checkpoint (or staging if async is enabled).
[rank0]:wandb: You can sync this run to the cloud by running:
rank0]:Traceback (most recent call last):
[rank0]:  File "/torchtitan/torchtitan/train.py", line 69, in <module>
[rank0]:    main()
[rank0]:    ~~~~^^
[rank0]:  File "/torchtitan/torchtitan/train.py", line 55, in main
[rank0]:    trainer.train()
[rank0]:    ~~~~~~~~~~~~~^^
[rank0]:  File "/torchtitan/torchtitan/trainer.py", line 998, in train
[rank0]:    self.checkpointer.save(
"""


def test_the_deepest_frames_of_a_cut_traceback_are_kept() -> None:
    frames = unfinished_frames(DEEPSPEED_CONFIG)
    assert frames is not None
    lines = frames.splitlines()
    assert len(lines) == 4  # the outer frames (runpy, the script's main chain) are left out
    assert lines[-1] == "runtime config _configure_train_batch_size"  # no code quoted under it
    assert "DeepSpeedConfig(config, mpu, mesh_device=mesh_device)" in lines[-3]


def test_caret_lines_are_not_read_as_code() -> None:
    frames = unfinished_frames(CHECKPOINT_SAVE)
    assert frames is not None
    assert "~" not in frames and "^" not in frames
    assert frames.splitlines()[-1] == "torchtitan trainer train self.checkpointer.save("


def test_a_traceback_that_ends_in_its_error_is_not_cut() -> None:
    finished = DEEPSPEED_CONFIG + "[rank4]: AssertionError: Check batch related parameters.\n"
    assert unfinished_frames(finished) is None
    assert unfinished_frames("[rank0]: step 3000 loss 3.6\n") is None


SPAWN_SIGSEGV = """\
Traceback (most recent call last):
  File "language_technology/neural_mt/os/pytorch_translate/train.py", line 724, in main
    while not spawn_context.join(timeout=30):
  File "torch/multiprocessing/spawn.py", line 103, in join
    (error_index, name)
Exception: process 1 terminated with signal SIGSEGV
"""


def test_an_error_line_of_any_name_finishes_the_traceback() -> None:
    """`Exception:` has no Error/Exception suffix to a longer name, and it follows the last code."""
    assert unfinished_frames(SPAWN_SIGSEGV) is None
    cut = SPAWN_SIGSEGV.rsplit("Exception:", 1)[0]
    frames = unfinished_frames(cut)
    assert frames is not None and frames.endswith("spawn join (error_index, name)")


def test_the_fallback_reads_the_cut_frames(kb: KnowledgeBase) -> None:
    """No error line, so no signature: the closest entries come from the frames (DeepSpeed's batch
    settings), not from the words of the whole paste."""
    verdict = verdict_for(kb, DEEPSPEED_CONFIG)
    assert verdict.closest and verdict.closest[0][0] == "D18"
