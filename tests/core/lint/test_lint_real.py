"""The lint on real code: maintained projects' training scripts (eval/lint/clean) give no error and
no warning (a file whose warning review judged true is in eval/lint/buggy); the real bugs of
eval/lint/buggy are found; and the mechanisms that real code needed, each on its own."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from triage.core.lint import lint_source

EVAL = Path(__file__).resolve().parents[3] / "eval" / "lint"
HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def _split_of() -> Callable[[str], str]:
    """bench/bench_lint_real.py's split of an eval file (train: tuned on; test: only measured)."""
    spec = importlib.util.spec_from_file_location(
        "bench_lint_real", EVAL.parents[1] / "bench" / "bench_lint_real.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    split_of: Callable[[str], str] = module.split_of
    return split_of


# Session 11c's unseen batch brought errors on test-split clean files (counted, never opened, so
# that no rule is tuned on them); the train split keeps none.
TEST_SPLIT_CLEAN_ERRORS_AT_MOST = 4


def test_maintained_scripts_get_no_error_and_no_warning_on_the_train_split() -> None:
    # A warning judged true on review moves its file to buggy/ (eval/lint/README.md); the test
    # split's warnings are counted by the bench, not judged here, so that nothing is tuned on them.
    split_of = _split_of()
    files = sorted((EVAL / "clean").glob("*.py"))
    assert len(files) >= 150
    found = []
    test_errors = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        split = split_of(text)
        for f in lint_source(text, path.name):
            if f.severity == "error" and split == "test":
                test_errors += 1
            elif f.severity == "error" or (f.severity == "warning" and split == "train"):
                found.append((path.name, f.code))
    assert found == []
    assert test_errors <= TEST_SPLIT_CLEAN_ERRORS_AT_MOST


# The train split's known misses, each with why (eval/lint/README.md); the test split's are only
# counted, so that no rule is tuned on them.
KNOWN_MISSES = {
    # A save under `local_rank == 0` writes once per node: right on one node, so not reported.
    "apex_886_local_rank0_saves_per_node.py",
    "fix_examples_5cc81aa_multinode_save_local_rank0.py",
    # os.makedirs(exist_ok=True) on every node of a shared filesystem: idiomatic, not reported.
    "fix_fairseq_94e9d77c_save_dir_every_node.py",
    # Writes through a project object (checkpoint_handler.save, file_client.remove) or a runner
    # class with no entry point in the file: what they do is not visible here.
    "fix_mace_68ad31ab_checkpoint_every_rank.py",
    "fix_mmengine_0f62a6c0_remove_best_every_rank.py",
    # `self.is_visualizer` is rank 0 only by a helper of another module.
    "fix_var_8198567e_allreduce_visualizer_only.py",
    # Session 8's unseen batch. A one-off print of the settings (TRG037 reports prints in loops).
    "fix_alpaca_lora_fcbc45e_print_every_rank.py",
    # A loader with no DistributedSampler built in a data module that wraps nothing itself (TRG025
    # judges loaders in the file that wraps the model in DDP).
    "fix_diffuseq_82a2c40_no_distributed_sampler.py",
    # Parameters the loss does not reach (MoE experts, an unused head) without
    # find_unused_parameters=True: which parameters a forward uses is not visible statically.
    "fix_minimind_5dd4df7_moe_unused_parameters.py",
    "fix_simsiam_3c17c32_unused_parameters.py",
    # NCCL with every tensor placed by hand (`model.to(LOCAL_RANK)`, DDP device_ids) but no
    # set_device: NCCL's own work lands on GPU 0. TRG030 reports only scripts that place nothing.
    "fix_examples_79ef786_mingpt_no_set_device.py",
    "fix_examples_79ef786_torchrun_no_set_device.py",
    # Session 9's unseen batch. The global rank is handed to a function of another module
    # (`prepare_scattermoe(..., rank=rank)`), which uses it as the device there.
    "fix_fms_acceleration_791bdd9_device_global_rank.py",
    # os.makedirs(exist_ok=True) on every rank (as fairseq above).
    "fix_reasoning360_76d2ed2_makedirs_every_rank.py",
    # Session 9c's unseen batch. A LightningModule's method (`res_path.mkdir(exist_ok=config.dev)`)
    # and a Lightning callback's hook (an upload through a project helper) run on every rank, but
    # nothing in those modules says they run distributed; a library's checkpoint loader
    # (`CheckPoint.load`, torch.load without map_location) is not tied to any set-up of its file.
    "fix_btc_3885d7a_mkdir_every_rank.py",
    "fix_rslearn_projects_57ef510_wandb_id_every_rank.py",
    "fix_simplecv_fbf9903_load_no_map_location.py",
    # Session 10's unseen batch. DLLogger is opened on every rank through a project helper
    # (`utils.init_logging(log_path=...)`); the file's own `dllogger.log` calls do not say so.
    "fix_dle_8bfbf82c_dlrm_logger_every_rank.py",
    # Session 11's unseen batch. A project's own checkpoint helper (`save_checkpoint_impl`, MONAI's
    # `CheckpointSaver` handler) or logger class (ParlAI's `TensorboardLogger`) called on every
    # rank: what it writes is not visible here, and framework helpers of that name (Lightning's,
    # Accelerate's, torchtitan's) must be called on every rank.
    "fix_icefall_78bb65ed_save_every_rank.py",
    "fix_monai_tutorials_d62043b2_checkpoint_every_rank.py",
    "fix_parlai_ec33fde4_tensorboard_every_worker.py",
    # A small text file (config.yaml, a .trainstats JSON) written through `PathManager.open(p, "w")`
    # on every worker: identical small files are left alone (as `config.save_pretrained`), and
    # reading every `open(..., "w")` as such a write raised 18 warnings on train clean files.
    "fix_mmf_8c80a004_config_every_process.py",
    "fix_parlai_bb9513a9_trainstats_every_worker.py",
    # A model method other than forward (`format_for_prediction`) that gathers, under the master.
    "fix_mmf_0505b85b_prediction_master_only_hang.py",
    # A trainer module with no torch.distributed import of its own (its rank comes as a parameter).
    "fix_pytext_dcb9ebc2_best_model_every_rank.py",
    # A library helper nothing in its file calls (`get_device_name`) that asks dist.get_rank()
    # itself: not judged (session 6), whatever the arm of `if dist.is_initialized():` it sits in.
    "fix_sbert_163258f1_device_global_rank.py",
    # Session 11b's unseen batch. Writes through a project's helper (a metric-recorder factory), a
    # logging handler's `os.remove` in a module with no sign of processes at all, and a results
    # JSON through `open(path, "w")` in `predict`:
    "fix_fairchem_d24fc7dd_predictions_every_rank.py",
    "fix_fairseq2_64af489f_metric_recorders_every_rank.py",
    "fix_llamafactory_e7cb145f_log_remove_every_rank.py",
    # NCCL set up in a library's distributed helpers with no GPU bound on one path (torchrun
    # without LOCAL_RANK read, or set_device in another branch only):
    "fix_fairchem_4edfbe28_init_before_set_device.py",
    "fix_fairchem_f08985fd_torchrun_no_set_device.py",
    "fix_metaseq_91e7ad34_torchrun_device_id.py",
    # Session 11c's unseen batch, as collected (eval/lint/README.md):
    "deepdewedge_40_save_every_rank.py",
    "fix_fastvideo_ae1d112c_barrier_skipped_on_cache_hit.py",
    "fix_opennmt_09f40dc5_summarywriter_every_process.py",
    # Session 11d's unseen batch: a DataLoader subclass built in a data module (as diffuseq above),
    # and a runner's `image.save` in a module with no sign of processes at all.
    "fix_fastfold_95150c3_no_distributed_sampler.py",
    "fix_lightx2v_64008ebc_images_every_rank.py",
    # Session 11e's unseen batch: project logger and checkpoint helpers, a helper of another
    # module that writes, a plain `Path.write_text`, and prints in a module with no sign of
    # processes (eval/lint/README.md):
    "fix_algoperf_6ab1aea3_loggers_checkpoint_every_rank.py",
    "fix_fairseq2_ddce313_config_every_rank.py",
    "fix_modalities_ecb13cb4_print_every_rank.py",
    "fix_xtuner_68b924da_git_info_every_rank.py",
    # Session 12b's unseen batch: a collective under a file-system test every rank makes itself, and
    # an NCCL script that places its tensors by hand (eval/lint/README.md):
    "fix_kempnerforge_c36863b.py",
    "fix_particleflow_f542ca4.py",
    # Session 12e's batch: a DDP state dict saved with its `module.` prefix and loaded into the bare
    # model on resume; no rule yet (no knowledge entry for it; eval/lint/README.md):
    "thread_diffusion_bert_24_ddp_prefix_checkpoint.py",
    # Session 13's batch: a LightningModule hook saves through a helper of another module
    # (`utils.save_checkpoint(net, optim, ..., f"{dir}/G_{epoch}.pth")`) on every device; from the
    # call alone a helper that gates itself inside (SparK's) looks the same (eval/lint/README.md):
    "fix_so_vits_svc_fork_1aaaac6_checkpoints_every_device.py",
    # Session 13b's batch (eval/lint/README.md): a trainer class iterating `self.train_dataloader`
    # it was handed, with nothing in the file saying how the loader samples; a library's fsspec
    # `fs.makedirs` under `if not fs.exists(path):` in a module with no sign of processes (the DDP
    # strategy is Lightning's, chosen by the user); a Lightning callback appended after the rank-0
    # early return, whose extra traced forwards only rank 0 then runs.
    "fix_e2eaiok_a71e2e9f_bert_trainer_no_set_epoch.py",
    "fix_neuralforecast_4148b4d6_makedirs_every_rank.py",
    "fix_zetta_utils_2c43566d_callback_rank0_only.py",
}
# Session 12c's batch added one test-split miss, session 13's two, session 13b's two, session 13c's
# two, of which its mechanism then found one, session 13d's one (counted, not read; eval/lint/README.md).
TEST_SPLIT_MISSES_AT_MOST = 22


def test_the_bugs_github_threads_established_are_found() -> None:
    split_of = _split_of()
    missed: dict[str, list[str]] = {"train": [], "test": []}
    files = sorted((EVAL / "buggy").glob("*.py"))
    for path in files:
        text = path.read_text(encoding="utf-8")
        expected = re.search(r"^# expect: (TRG\d{3})", text, re.MULTILINE)
        assert expected is not None, path.name
        if expected.group(1) not in {f.code for f in lint_source(text, path.name)}:
            missed[split_of(text)].append(path.name)
    assert len(files) >= 80
    assert set(missed["train"]) == KNOWN_MISSES
    assert len(missed["test"]) <= TEST_SPLIT_MISSES_AT_MOST


def codes(body: str, head: str = HEAD) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


def test_a_collective_in_both_arms_of_one_rank_if_is_reached_by_every_rank() -> None:
    both = """
        dist.init_process_group("gloo")
        def gather(data, dst=0):
            rank = dist.get_rank()
            if rank == dst:
                out = [None] * dist.get_world_size()
                dist.gather_object(data, out, dst=dst)
                return out
            else:
                dist.gather_object(data, None, dst=dst)
                return []
        gather(1)
    """
    assert "TRG021" not in codes(both)
    one = both.replace("                dist.gather_object(data, None, dst=dst)\n", "")
    assert "TRG021" in codes(one)


def test_a_rank_in_the_path_is_followed_through_the_names_it_is_built_from() -> None:
    named = """
        dist.init_process_group("gloo")
        tp_rank = dist.get_rank()
        name = f"mp_rank_{tp_rank:02d}"
        path = os.path.join("ckpt", f"{name}.pt")
        torch.save({}, path)
    """
    assert "TRG023" not in codes(named)
    assert "TRG023" in codes(named.replace('f"mp_rank_{tp_rank:02d}"', '"model"'))


@pytest.mark.parametrize(
    "replaced",
    [
        "import builtins\nbuiltins.print = lambda *a, **k: None\n",
        "setup_for_distributed(dist.get_rank() == 0)\n",
    ],
)
def test_print_replaced_by_a_main_process_only_print_is_not_reported(replaced: str) -> None:
    body = 'dist.init_process_group("gloo")\nfor step in range(10):\n    print(step)\n'
    assert "TRG037" in codes(body)
    assert "TRG037" not in codes(replaced + body)
    assert "TRG037" not in codes(body.replace("print(step)", "print(step, force=True)"))


def test_a_print_just_before_leaving_the_loop_is_said_once() -> None:
    body = """
        dist.init_process_group("gloo")
        for step in range(10):
            if step > 5:
                print("max steps reached")
                break
    """
    assert "TRG037" not in codes(body)


def test_a_progress_bar_under_a_rank_conditional_expression_is_gated() -> None:
    body = """
        from tqdm import tqdm
        dist.init_process_group("gloo")
        loader = range(10)
        it = tqdm(loader) if dist.get_rank() == 0 else loader
    """
    assert "TRG037" not in codes(body)
    assert "TRG037" in codes(body.replace(" if dist.get_rank() == 0 else loader", ""))


def test_an_unmapped_load_whose_other_arm_maps_it_was_chosen_per_case() -> None:
    body = """
        dist.init_process_group("gloo")
        def resume(path, gpu):
            if gpu is None:
                return torch.load(path)
            else:
                return torch.load(path, map_location=f"cuda:{gpu}")
        resume("c.pt", 0)
    """
    assert "TRG031" not in codes(body)
    assert "TRG031" in codes(body.replace(', map_location=f"cuda:{gpu}"', ""))


def test_a_library_function_nothing_in_its_file_calls_is_not_judged() -> None:
    library = textwrap.dedent(
        """
        def save(model, path):
            torch.save(model.state_dict(), path)

        def barrier():
            dist.barrier()
        """
    )
    assert codes(library) == []
    # The same function in a file that runs the job (or sets up the group) is judged.
    assert "TRG023" in codes(library + '\ndist.init_process_group("gloo")\n')
    assert "TRG023" in codes(library + "\nsave(None, 'x.pt')\n")


def test_names_unpacked_from_a_helper_take_what_it_returns_at_their_position() -> None:
    body = """
        def get_dist_info():
            if "RANK" in os.environ:
                return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
            return False, 0, 0
        is_ddp, rank, local_rank = get_dist_info()
        if is_ddp:
            dist.init_process_group("nccl")
            dist.barrier()
        if rank == 0:
            dist.barrier()
    """
    assert [c for c in codes(body) if c == "TRG021"] == ["TRG021"]  # the second barrier only


def test_a_collective_a_helper_runs_only_when_a_flag_is_set_is_off_when_it_is_passed_false() -> None:
    body = """
        dist.init_process_group("gloo")
        def save_state(path, state, synchronize=True):
            if synchronize:
                dist.barrier()
            torch.save(state, path)
            if synchronize:
                dist.barrier()
        if dist.get_rank() == 0:
            save_state("train.pt", {}, synchronize=False)
    """
    assert "TRG021" not in codes(body)
    assert "TRG021" in codes(body.replace("synchronize=False", "synchronize=True"))
    assert "TRG021" in codes(body.replace(", synchronize=False", ""))


def test_the_same_collective_down_an_elif_chain_is_reached_by_every_rank() -> None:
    body = """
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        def step(out):
            if rank == 0 and world > 1:
                dist.reduce(out, dst=0)
            elif world > 1:
                dist.reduce(out, dst=0)
        step(torch.ones(1))
    """
    assert "TRG021" not in codes(body)
    alone = body.replace(
        "elif world > 1:\n                dist.reduce(out, dst=0)", "elif world > 1:\n                pass"
    )
    assert "TRG021" in codes(alone)


def test_a_converter_that_imports_single_process_helpers_is_not_a_distributed_script() -> None:
    converter = """
        from accelerate import init_empty_weights
        from torch.distributed.checkpoint import FileSystemReader

        def main(model, out):
            reader = FileSystemReader("ckpt")
            model.save_pretrained(out)

        if __name__ == "__main__":
            main(None, "out")
    """
    assert codes(converter, head="import torch\n") == []
    assert "TRG023" in codes(converter.replace("init_empty_weights", "Accelerator"), head="import torch\n")


def test_a_branch_also_taken_when_the_backend_needs_every_rank_is_no_rank_gate() -> None:
    body = """
        from accelerate import Accelerator
        from accelerate.utils import DistributedType
        accelerator = Accelerator()
        def save(path):
            if accelerator.is_main_process or accelerator.distributed_type == DistributedType.DEEPSPEED:
                accelerator.save_state(path)
        save("ckpt")
    """
    assert "TRG036" not in codes(body)
    assert "TRG036" in codes(
        body.replace(" or accelerator.distributed_type == DistributedType.DEEPSPEED", "")
    )
    # "one process, or rank 0" is still a gate: nothing is reported for a write under it.
    single = """
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        def save(cfg, model):
            if not cfg.enable_fsdp or rank == 0:
                torch.save(model.state_dict(), "model.pt")
        save(None, None)
    """
    assert "TRG023" not in codes(single)


def test_code_after_a_rank_precondition_that_raises_runs_on_every_rank_that_goes_on() -> None:
    body = """
        dist.init_process_group("nccl")
        def send(tensor, grid):
            if dist.get_rank() != grid[0] and dist.get_rank() != 0:
                raise ValueError("this rank is not in the grid")
            dist.broadcast(tensor, src=grid[0])
        send(torch.ones(1), [0, 1])
    """
    assert "TRG021" not in codes(body)
    assert "TRG021" in codes(body.replace('raise ValueError("this rank is not in the grid")', "return"))


def test_a_one_device_fabric_utility_is_not_distributed_and_jax_process_index_is_a_rank() -> None:
    merge = """
        import lightning as L

        def merge(model, path):
            fabric = L.Fabric(devices=1, accelerator="cpu")
            torch.save(model.state_dict(), path)

        if __name__ == "__main__":
            merge(None, "lit_model.pth")
    """
    assert codes(merge, head="import torch\n") == []
    assert "TRG023" in codes(merge.replace("devices=1", "devices=4"), head="import torch\n")
    flax = """
        import jax
        rank = int(os.environ.get("LOCAL_RANK", -1))
        def checkpoint(pipeline, out):
            pipeline.save_pretrained(out)
        if jax.process_index() == 0:
            checkpoint(None, "out")
    """
    assert "TRG023" not in codes(flax)


def test_a_hook_handed_to_another_call_runs_where_that_call_runs_it() -> None:
    body = """
        from accelerate import Accelerator
        accelerator = Accelerator()
        def save_model_hook(models, weights, output_dir):
            for model in models:
                model.save_pretrained(output_dir)
        accelerator.register_save_state_pre_hook(save_model_hook)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(textwrap.dedent(body) + "save_model_hook([], [], 'out')\n")
