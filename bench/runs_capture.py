"""Failing scripts written independently of the log engine (eval/runs/scripts/), and their real output.

Each script's docstring names the mistake and carries `label:`, `alternates:` (optional),
`first_rank:` (a rank, or `none`) and `launch:` (the shell command, run from the repository root).
A script runs in the default setting, and some in one other setting too (`EXTRA`); its combined
stdout and stderr, as a user copies it from the terminal, is stored in eval/runs/<split>.yaml. The
split is sha256(script file name) % 10 < 3 = test, so every setting of one script lands on the same
side (eval/README.md's rule, with the script standing for the thread).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "eval" / "runs"
SCRIPTS = RUNS / "scripts"
BOUND_S = 120  # `timeout -s KILL` for one launch command
TEST_BUCKETS = 3

# A setting: (extra environment, arguments put right after every `torchrun`).
SETTINGS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "default": ({}, ()),
    "detail": ({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, ()),
    "tee": ({}, ("--tee", "3")),
    "loglevel-info": ({"LOGLEVEL": "INFO"}, ()),
    "cpp-info": ({"TORCH_CPP_LOG_LEVEL": "INFO"}, ()),
    "cpp-stack": ({"TORCH_SHOW_CPP_STACKTRACES": "1"}, ()),
}
# The scripts also run in one other setting: the ways users collect more output when asking for help.
# No DDP script runs under DETAIL: this CPU build of torch segfaults in DDP's construction there
# (triage/repro skips it for the same reason), and the log would show that crash, not the mistake.
EXTRA: dict[str, str] = {
    "ddp_unused_some_steps.py": "tee",
    "bad_sample_rank2.py": "tee",
    "barrier_slow_rank.py": "loglevel-info",
    "new_group_subset.py": "detail",
    "mismatched_collective_types.py": "detail",
    "rank_exits_zero.py": "tee",
    "loader_worker_killed.py": "loglevel-info",
    "ddp_rank_dependent_layers.py": "detail",
    "save_missing_dir.py": "tee",
    "device_mesh_cuda.py": "tee",
    "ddp_eval_rank0.py": "loglevel-info",
    "fsdp2_partial_clip.py": "loglevel-info",
    "ddp_dict_outputs_unused.py": "tee",
    "assert_finite_rank2.py": "loglevel-info",
    "allgather_variable_length.py": "detail",
    "rank0_metric_helper_allreduce.py": "detail",
    "manual_shard_extra_batch.py": "tee",
    "main_process_first_tokenize.py": "loglevel-info",
    # session 9 (written before the engine was read)
    "ddp_data_dependent_branch.py": "loglevel-info",
    "all_to_all_split_mismatch.py": "detail",
    "metric_keys_per_rank.py": "detail",
    "reduce_scatter_list_len.py": "detail",
    "numpy_memoryerror_rank1.py": "tee",
    "rank0_early_stop_break.py": "tee",
    "makedirs_race.py": "loglevel-info",
    "sigterm_rank1.py": "loglevel-info",
    # session 9b (written before the engine was read)
    "allreduce_avg_long_counter.py": "detail",
    "reduce_dst_world_size.py": "tee",
    "ddp_replace_head_after_wrap.py": "loglevel-info",
    "batchnorm_last_batch_one.py": "tee",
    "bucket_sampler_per_rank.py": "detail",
    "gloo_ifname_missing.py": "loglevel-info",
    # session 10 (written before the engine was read)
    "allreduce_numpy_float64.py": "detail",
    "p2p_tag_mismatch.py": "detail",
    "broadcast_src_outside_group.py": "cpp-info",
    "loader_worker_raises_rank1.py": "loglevel-info",
    "ddp_logit_scale_outside_forward.py": "tee",
    "sampler_before_init.py": "cpp-info",
    "init_twice_helper.py": "cpp-info",
    "gather_list_every_rank.py": "detail",
    # session 10b (written before the engine was read)
    "zero_consolidate_rank0.py": "tee",
    "fsdp_state_dict_rank0.py": "loglevel-info",
    "skip_bad_batch_rank1.py": "tee",
    "batch_p2p_wrap_send.py": "detail",
    "device_mesh_shape_world.py": "cpp-info",
    "launch_arg_local_rank_torchrun.py": "loglevel-info",
    "restart_same_error.py": "loglevel-info",
    # session 11 (written before the engine was read)
    "dcp_save_rank_paths.py": "tee",
    "autograd_allreduce_masked.py": "detail",
    "join_custom_allreduce.py": "loglevel-info",
    "ddp_freeze_after_wrap.py": "tee",
    "meta_init_ddp.py": "cpp-stack",
    "ddp_heads_from_set.py": "cpp-stack",
    "prefetch_thread_dies_rank1.py": "cpp-info",
    "timeout_units_ms.py": "cpp-info",
    "eval_sampler_padding_count.py": "detail",
    "nnodes_mismatch_two_agents.py": "loglevel-info",
    "allgather_list_aliased.py": "detail",
    # session 11b (written before the engine was read)
    "get_world_size_nonmember.py": "detail",
    "init_rank_string_env.py": "cpp-info",
    "fsdp2_ema_plain_tensors.py": "cpp-stack",
    "load_map_location_cuda.py": "loglevel-info",
    "slow_shard_read_rank1.py": "cpp-info",
    "fsdp_optim_subset_flat.py": "tee",
    # session 11c (written before the engine was read)
    "ddp_frozen_teacher_no_grad.py": "loglevel-info",
    "argparse_local_rank_required.py": "loglevel-info",
    "config_key_typo_all_ranks.py": "cpp-info",
    "spawn_rank_world_swapped.py": "cpp-info",
    "oom_rank3_two_nodes.py": "cpp-stack",
    "eval_script_reduce_helper.py": "cpp-stack",
    "rank0_vocab_broadcast_timeout.py": "detail",
    "grad_disabled_after_eval.py": "tee",
    # session 12 (written before the engine was read)
    "dcp_resume_world_change.py": "tee",
    "spawn_rank_returns_early.py": "cpp-stack",
    "callback_gather_object_rank0.py": "detail",
    "rank_sigkill_restarts.py": "loglevel-info",
    "metrics_sqlite_every_rank.py": "cpp-info",
    "trainer_outputs_logits_attr.py": "loglevel-info",
    "loader_worker_decode_node2.py": "tee",
    # session 12b (written before the engine was read)
    "per_class_acc_empty_rank2.py": "detail",
    "rank0_checksum_before_ddp.py": "loglevel-info",
    "loss_item_per_sample.py": "tee",
    "moe_top1_unused_experts.py": "cpp-stack",
    "scatter_list_every_rank.py": "cpp-info",
    # session 12c (written before the engine was read)
    "record_eval_helper_rank1.py": "loglevel-info",
    "metrics_group_rank0_only.py": "detail",
    "time_budget_stop_per_rank.py": "cpp-info",
    # session 13 (written before the engine was read)
    "compile_ddp_fullgraph_item.py": "loglevel-info",
    "device_mesh_names_string.py": "cpp-stack",
    "eval_no_grad_raises_rank3_two_nodes.py": "tee",
    "onecycle_total_steps_divided.py": "tee",
    "dcp_resume_dir_name_typo.py": "cpp-info",
    "store_get_key_never_set.py": "cpp-info",
    "fsdp2_manual_grad_allreduce.py": "cpp-stack",
    # session 13b (written before the engine was read)
    "master_addr_with_port.py": "cpp-stack",
    "forward_hook_allreduce_rank0.py": "loglevel-info",
    "set_epoch_on_batch_sampler_spawn.py": "detail",
    "download_before_init_timeout.py": "cpp-info",
    "mesh_from_local_world_nproc_differs.py": "detail",
    # session 13c (written before the engine was read)
    "inference_mode_cache_rank0.py": "loglevel-info",
    "loss_scale_skip_sync_rank.py": "detail",
    "eval_batchwise_gather_uneven.py": "cpp-info",
    "gather_object_no_list_dst.py": "cpp-stack",
}
# Variables that would make a run look launched or change torch's output (as triage.repro scrubs).
_SCRUB = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCH_DISTRIBUTED_DEBUG", "LOGLEVEL",
    "TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES", "NCCL_DEBUG",
)  # fmt: skip


@dataclass(frozen=True)
class Script:
    """One failing script and what its header says about it."""

    path: Path
    label: tuple[str, ...]
    alternates: tuple[str, ...]
    first_rank: int | None
    launch: str
    mistake: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def split(self) -> str:
        bucket = int(hashlib.sha256(self.name.encode("utf-8")).hexdigest(), 16) % 10
        return "test" if bucket < TEST_BUCKETS else "train"


def _field(doc: str, key: str) -> str:
    found = re.search(rf"^{key}:[ \t]*(.*)$", doc, re.MULTILINE)
    return found.group(1).strip() if found else ""


def _ids(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in re.split(r"[,\s]+", text) if p.strip())


def parse(path: Path) -> Script:
    """The header of one script (its module docstring)."""
    text = path.read_text(encoding="utf-8")
    doc = text.split('"""', 2)[1] if text.startswith('"""') else ""
    rank = _field(doc, "first_rank")
    mistake = " ".join(doc.split("label:", 1)[0].replace("mistake:", "", 1).split())
    return Script(
        path, _ids(_field(doc, "label")), _ids(_field(doc, "alternates")),
        int(rank) if rank.isdigit() else None, _field(doc, "launch"), mistake,
    )  # fmt: skip


def scripts() -> list[Script]:
    return [parse(p) for p in sorted(SCRIPTS.glob("*.py"))]


def runs_of(script: Script) -> list[str]:
    """The settings one script runs in: default first."""
    return ["default", *([EXTRA[script.name]] if script.name in EXTRA else [])]


def _free_port() -> int:
    from triage.repro.runner import free_port

    return free_port()


def capture(script: Script, setting: str) -> tuple[str, int | None, float]:
    """Run the script's launch command in `setting`: (combined output, exit status, seconds)."""
    from triage.repro.runner import TOKEN_VAR, end_processes

    extra_env, torchrun_args = SETTINGS[setting]
    command = script.launch
    if torchrun_args:
        command = re.sub(r"\btorchrun\b", "torchrun " + " ".join(torchrun_args), command)
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    venv_bin = str(Path(sys.executable).parent)
    port = str(_free_port())
    env.update(extra_env)
    env.update(
        {
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            # torchrun reads its options from PET_* variables too: a free port, the command untouched
            "PET_MASTER_PORT": port,
            "MASTER_PORT": port,  # the mp.spawn scripts setdefault() theirs
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            TOKEN_VAR: token,
        }
    )
    started = time.monotonic()
    try:
        proc = subprocess.run(
            ["timeout", "-s", "KILL", str(BOUND_S), "bash", "-c", command],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
        output, status = proc.stdout.decode("utf-8", "replace"), proc.returncode
    finally:
        end_processes(token)
    return output, status, time.monotonic() - started


def item(script: Script, setting: str, output: str, status: int | None) -> dict[str, object]:
    """One stored output, shaped like the corpus's log items."""
    entry: dict[str, object] = {"log": output, "expect": list(script.label)}
    if script.alternates:
        entry["alternates"] = list(script.alternates)
    if script.first_rank is not None:
        entry["first_rank"] = script.first_rank
    entry["source"] = f"{script.path.relative_to(REPO)} ({setting})"
    entry["note"] = f"{script.mistake} [exit status {status}]"
    return entry


def rerun(only: set[str] | None, progress: Callable[[str], None]) -> dict[str, list[dict[str, object]]]:
    """Run every script (or those named) in each of its settings, one after another; the stored
    items of the scripts not run are kept."""
    import yaml

    stored = {split: load_raw(split) for split in ("train", "test")}
    all_scripts = scripts()
    chosen = [s for s in all_scripts if only is None or s.name in only or s.path.stem in only]
    out: dict[str, list[dict[str, object]]] = {"train": [], "test": []}

    def kept(raw: dict[str, object]) -> bool:
        """A stored output whose script still exists and is not run again now."""
        script = str(raw.get("source", "")).split(" ", 1)[0]
        return (REPO / script).is_file() and not any(s.path == REPO / script for s in chosen)

    for split in out:
        out[split] = [raw for raw in stored[split] if kept(raw)]
    total = sum(len(runs_of(s)) for s in chosen)
    done = 0
    for script in chosen:
        for setting in runs_of(script):
            done += 1
            progress(f"[{done}/{total}] {script.name} ({setting}) ...")
            output, status, took = capture(script, setting)
            progress(f"    exit {status}, {len(output.splitlines())} lines, {took:.0f} s")
            out[script.split].append(item(script, setting, output, status))
    for split, items in out.items():
        items.sort(key=lambda raw: str(raw["source"]))
        (RUNS / f"{split}.yaml").write_text(
            yaml.safe_dump(items, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8"
        )
    return out


def load_raw(split: str) -> list[dict[str, object]]:
    import yaml

    path = RUNS / f"{split}.yaml"
    if not path.is_file():
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    assert isinstance(data, list)
    return data
