"""Mechanisms that real scripts read in session 5 needed, each on its own: the code that showed the
need is quoted in eval/lint/README.md. Each test shows the finding going away for the real idiom
and staying for the bug next to it."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str, head: str = HEAD) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


def test_a_sampler_built_only_for_evaluation_needs_no_set_epoch() -> None:
    # DeepSpeedExamples bing_bert: the loader helper is called only from pretrain_validation().
    body = """
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        dist.init_process_group("nccl")
        def get_dataloader(dataset):
            return DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        def pretrain_validation(model, dataset):
            model.eval()
            for batch in get_dataloader(dataset):
                model(batch)
        def main(model, dataset):
            for epoch in range(3):
                pretrain_validation(model, dataset)
        main(None, None)
    """
    assert "TRG022" not in codes(body)
    training = body.replace("pretrain_validation", "run_epoch").replace("model.eval()", "model.train()")
    assert "TRG022" in codes(training)


def test_a_fully_qualified_distributed_sampler_makes_a_script_distributed() -> None:
    # lucidrains/DALLE-pytorch train_dalle.py before 724e11e: no torch.distributed import at all.
    body = """
        from torch.utils.data import DataLoader
        sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=4, rank=0)
        dl = DataLoader(ds, batch_size=8, sampler=sampler)
        for epoch in range(10):
            for batch in dl:
                step(batch)
    """
    assert "TRG022" in codes(body, head="import torch\n")


def test_a_backend_s_is_root_worker_is_a_main_process_gate() -> None:
    body = """
        dist.init_process_group("nccl")
        def save_model(path, model):
            if not backend.is_root_worker():
                return
            torch.save(model.state_dict(), path)
        save_model("dalle.pt", None)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("backend.is_root_worker()", "backend.is_ready()"))


def test_a_model_used_above_its_ddp_wrapping_is_still_the_plain_module() -> None:
    # karpathy/llm.c train_gpt2.py: one reference forward on the master, then `model = DDP(model)`.
    body = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        master_process = dist.get_rank() == 0
        model = torch.nn.Linear(2, 2)
        if master_process:
            loss = model(torch.ones(2)).sum()
        model = DDP(model)
        for step in range(10):
            model(torch.ones(2)).sum().backward()
    """
    assert "TRG036" not in codes(body)
    after = body.replace("        model = DDP(model)\n", "").replace(
        "model = torch.nn.Linear(2, 2)", "model = DDP(torch.nn.Linear(2, 2))"
    )
    assert "TRG036" in codes(after)


def test_a_grad_scaler_where_an_assert_rules_fsdp_out_never_meets_fsdp() -> None:
    # mlfoundations/open_lm main.py: `assert not args.fsdp, "FSDP not supported with amp"`.
    body = """
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.cuda.amp import GradScaler
        dist.init_process_group("nccl")
        def main(args, model):
            if args.fsdp:
                model = FSDP(model)
            scaler = None
            if args.precision == "amp":
                assert not args.fsdp, "FSDP not supported with amp"
                scaler = GradScaler()
        main(None, None)
    """
    assert "TRG033" not in codes(body)
    assert "TRG033" in codes(body.replace('assert not args.fsdp, "FSDP not supported with amp"', "pass"))


def test_a_function_handed_to_fire_at_module_level_is_the_job_not_a_hook() -> None:
    # DeepSpeedExamples HelloDeepSpeed train_bert_ds.py before 6bd444a7: `fire.Fire(train)`.
    body = """
        import deepspeed
        import fire
        from torch.utils.tensorboard import SummaryWriter
        def train(model, log_dir="runs"):
            writer = SummaryWriter(log_dir=log_dir)
            engine, _, _, _ = deepspeed.initialize(model=model)
        if __name__ == "__main__":
            fire.Fire(train)
    """
    assert "TRG023" in codes(body, head="import torch\n")


def test_every_rank_making_or_deleting_one_directory_races() -> None:
    body = """
        import pathlib, shutil
        dist.init_process_group("nccl")
        out = pathlib.Path("runs") / "exp"
        out.mkdir(exist_ok=False)
        for old in sorted(pathlib.Path("ckpt").iterdir())[:-2]:
            shutil.rmtree(old)
    """
    found = codes(body)
    assert found.count("TRG023") == 2
    fixed = body.replace("exist_ok=False", "parents=True, exist_ok=True").replace(
        "shutil.rmtree(old)", "shutil.rmtree(old, ignore_errors=True)"
    )
    assert "TRG023" not in codes(fixed)


def test_a_directory_made_under_if_not_exists_while_the_ranks_take_turns_is_made_once() -> None:
    # lm-sys/FastChat train_flant5.py: `if rank != 0: barrier()` ... `if rank == 0: barrier()`.
    body = """
        dist.init_process_group("nccl")
        def preprocess():
            if dist.get_rank() != 0:
                dist.barrier()
            if not os.path.exists("preprocessed_data"):
                os.mkdir("preprocessed_data")
            if dist.get_rank() == 0:
                dist.barrier()
        preprocess()
    """
    assert "TRG023" not in codes(body)
    racing = body.replace("            if dist.get_rank() != 0:\n                dist.barrier()\n", "")
    assert "TRG023" in codes(racing)
    in_turn = """
        from accelerate import Accelerator
        accelerator = Accelerator()
        with accelerator.main_process_first():
            if not os.path.isdir("cache"):
                os.makedirs("cache")
    """
    assert "TRG023" not in codes(in_turn)


def test_a_group_s_rank_zero_and_a_group_s_members_are_not_the_job_s_rank_zero() -> None:
    # NVIDIA/Megatron-LM examples/mimo: `dist.get_rank(group=tp) == 0`, `_is_pg_member(group)`.
    body = """
        dist.init_process_group("nccl")
        def count(t, group):
            dist.all_reduce(t, group=group)
            return t
        def step(t, tp, dp):
            if dist.get_rank(group=tp) == 0:
                dist.all_reduce(t, group=dp)
            if dist.get_rank(group=dp) >= 0:
                count(t, dp)
        step(torch.ones(1), None, None)
    """
    assert [c for c in codes(body) if c in ("TRG021", "TRG036")] == []
    assert "TRG036" in codes(body.replace("dist.get_rank(group=tp) == 0", "dist.get_rank() == 0"))


def test_a_nested_function_defined_after_a_rank_return_belongs_to_rank_zero() -> None:
    # NVIDIA/Megatron-LM checkpointing.py: `if dist.is_initialized() and dist.get_rank() != 0: return`,
    # then `def remove(...): shutil.rmtree(...)` and its call.
    body = """
        import shutil
        dist.init_process_group("nccl")
        def cleanup(old):
            if dist.is_initialized() and dist.get_rank() != 0:
                return
            def remove(paths):
                for path in paths:
                    shutil.rmtree(path)
            remove(old)
        cleanup([])
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("dist.is_initialized() and dist.get_rank() != 0", "len(old) > 9"))


def test_a_library_helper_that_picks_the_device_counts_as_binding_it() -> None:
    # pytorch/torchtune recipes: `self._device = utils.get_device(device=cfg.device)`.
    body = """
        from torchtune import utils
        dist.init_process_group("nccl")
        device = utils.get_device(device="cuda")
        buf = torch.zeros(4, device=torch.device("cuda"))
    """
    assert "TRG030" not in codes(body)
    assert "TRG030" in codes(body.replace('        device = utils.get_device(device="cuda")\n', ""))


def test_tracker_runs_named_per_rank_are_one_per_process_on_purpose() -> None:
    # EleutherAI/gpt-neox: `wandb.init(group=group_name, name=f"{host}-{local_rank()}")`; a group
    # alone is not enough (Emerge-Lab/PufferDrive#468 grouped the duplicate runs it made by mistake).
    body = """
        import wandb
        dist.init_process_group("nccl")
        wandb.init(project="neox", group="run-7", name=f"worker-{dist.get_rank()}")
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace(', name=f"worker-{dist.get_rank()}"', ""))


def test_code_after_assert_rank_zero_runs_on_rank_zero_only() -> None:
    # karpathy/nanochat checkpoint_manager.py: `assert int(os.environ.get('RANK', 0)) == 0`.
    body = """
        dist.init_process_group("nccl")
        def save_checkpoint(path, state):
            assert int(os.environ.get("RANK", 0)) == 0
            torch.save(state, path)
        save_checkpoint("model.pt", {})
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace('assert int(os.environ.get("RANK", 0)) == 0', "assert path"))


def test_file_work_under_main_or_deepspeed_is_the_main_process_s_everywhere_else() -> None:
    # huggingface/diffusers examples: `if distributed_type == DEEPSPEED or is_main_process:` lets every
    # rank into save_state (which DeepSpeed needs) around the clean-up of old checkpoints.
    body = """
        import shutil
        from accelerate import Accelerator
        from accelerate.utils import DistributedType
        accelerator = Accelerator()
        for step in range(100):
            if accelerator.distributed_type == DistributedType.DEEPSPEED or accelerator.is_main_process:
                for old in ["checkpoint-1"]:
                    shutil.rmtree(old)
                accelerator.save_state("checkpoint-2")
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(
        body.replace(
            "accelerator.distributed_type == DistributedType.DEEPSPEED or accelerator.is_main_process", "True"
        )
    )


def test_a_temporary_directory_is_each_process_s_own() -> None:
    # huggingface/accelerate utils/modeling.py: `folder = tempfile.mkdtemp()` ... `shutil.rmtree(folder)`.
    body = """
        import shutil, tempfile
        dist.init_process_group("nccl")
        def offload(state):
            folder = tempfile.mkdtemp()
            torch.save(state, os.path.join(folder, "w.pt"))
            shutil.rmtree(folder)
        offload({})
    """
    assert "TRG023" not in [c for c in codes(body)]
    assert "TRG023" in codes(body.replace("tempfile.mkdtemp()", '"offload"'))


def test_an_argparse_rank_option_aliased_to_local_rank_holds_the_local_rank() -> None:
    # kan-bayashi/ParallelWaveGAN train.py: `add_argument("--rank", "--local_rank", ...)`.
    body = """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--rank", "--local_rank", default=0, type=int)
        args = parser.parse_args()
        torch.cuda.set_device(args.rank)
        dist.init_process_group("nccl")
    """
    assert "TRG003" not in codes(body)
    assert "TRG003" in codes(body.replace(', "--local_rank"', ""))


def test_a_method_called_on_a_subscript_is_still_that_method() -> None:
    # kan-bayashi/ParallelWaveGAN after #177: `self.sampler["train"].set_epoch(self.epochs)`.
    body = """
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("nccl")
        samplers = {"train": DistributedSampler(ds)}
        loader = DataLoader(ds, sampler=samplers["train"])
        for epoch in range(10):
            samplers["train"].set_epoch(epoch)
            for batch in loader:
                step(batch)
    """
    assert "TRG022" not in codes(body)
    assert "TRG022" in codes(body.replace('            samplers["train"].set_epoch(epoch)\n', ""))


def test_a_guarded_mkdir_on_every_rank_is_told_as_the_race_it_is() -> None:
    # huggingface/diffusers dreambooth: `if not class_images_dir.exists(): class_images_dir.mkdir(parents=True)`.
    body = """
        import pathlib
        from accelerate import Accelerator
        accelerator = Accelerator()
        class_images_dir = pathlib.Path("class_images")
        if not class_images_dir.exists():
            class_images_dir.mkdir(parents=True)
    """
    found = [f for f in lint_source(HEAD + textwrap.dedent(body), "train.py") if f.code == "TRG023"]
    assert len(found) == 1 and "two ranks can both find it missing" in found[0].message
