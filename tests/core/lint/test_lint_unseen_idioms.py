"""Mechanisms that the scripts collected in session 6 (none of which the rules had seen) needed, each
on its own, quoting the real code (eval/lint/README.md, "Session 6"). Each test shows the finding
going away for the real idiom and staying for the bug next to it."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source

HEAD = "import os\nimport shutil\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str, head: str = HEAD) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


def test_a_writer_handed_to_a_function_gates_what_runs_under_it() -> None:
    # LTH14/mar engine_mar.py: main_mar.py creates the SummaryWriter on rank 0 only and passes None
    # elsewhere; evaluate() removes its temporary image folder under `if log_writer is not None:`.
    body = """
        dist.init_process_group("nccl")
        def evaluate(model, save_folder, log_writer=None):
            model.generate(save_folder)
            torch.distributed.barrier()
            if log_writer is not None:
                log_writer.add_scalar("fid", 1.0, 0)
                shutil.rmtree(save_folder)
            torch.distributed.barrier()
        evaluate(None, "ariter64-diffsteps100", log_writer=None)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if log_writer is not None:", "if True:"))


def test_a_writer_made_in_the_same_function_is_not_taken_for_a_gate() -> None:
    body = """
        from torch.utils.tensorboard import SummaryWriter
        dist.init_process_group("nccl")
        def evaluate(save_folder):
            log_writer = SummaryWriter(save_folder)
            if log_writer is not None:
                shutil.rmtree(save_folder)
        evaluate("out")
    """
    assert "TRG023" in codes(body)


def test_is_local_master_gates_like_the_local_main_process() -> None:
    # FoundationVision/VAR train.py saves its checkpoint under `if dist.is_local_master():` (VAR's
    # own dist module): once per node, as under `local_rank == 0`.
    body = """
        dist.init_process_group("nccl")
        for ep in range(10):
            train_one_epoch(ep)
            if dist.is_local_master():
                local_out_ckpt = os.path.join(out_dir, "ar-ckpt-last.pth")
                torch.save({"epoch": ep + 1}, local_out_ckpt)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if dist.is_local_master():", "if ep % 2 == 0:"))


def test_the_default_timeout_is_reported_where_ranks_wait_for_rank_0s_work() -> None:
    # willisma/SiT train.py: rank 0 saves the checkpoint, every rank then meets at the barrier.
    body = """
        dist.init_process_group("nccl")
        for train_steps in range(1, 10000):
            step(train_steps)
            if train_steps % 1000 == 0:
                if rank == 0:
                    checkpoint = {"model": model.module.state_dict()}
                    torch.save(checkpoint, f"{checkpoint_dir}/{train_steps:07d}.pt")
                dist.barrier()
    """
    body = body.replace("if rank == 0:", "if dist.get_rank() == 0:")
    assert "TRG040" in codes(body)
    only_logs = body.replace('checkpoint = {"model": model.module.state_dict()}', "pass")
    assert "TRG040" not in codes(only_logs.replace("torch.save(checkpoint, ", "print("))


def test_the_others_waiting_first_is_the_same_phase() -> None:
    # mosaicml/composer utils/dist.py local_rank_zero_download_and_wait: `if local_rank != 0:
    # barrier()` before the download, then rank 0's own barrier after it.
    body = """
        dist.init_process_group("nccl")
        def download_and_wait(path):
            local_rank = int(os.environ["LOCAL_RANK"])
            if local_rank != 0:
                dist.barrier()
            download(path)
            if local_rank == 0:
                dist.barrier()
        download_and_wait("weights.pt")
    """
    assert "TRG040" in codes(body)


def test_no_one_sided_phase_no_timeout_advice() -> None:
    # pytorch/examples ddp-tutorial-series multigpu_torchrun.py: every rank trains and saves its
    # snapshot under `gpu_id == 0`; nothing waits for rank 0 in a barrier.
    body = """
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        for epoch in range(10):
            run_epoch(epoch)
            if int(os.environ["LOCAL_RANK"]) == 0 and epoch % 2 == 0:
                torch.save(model.module.state_dict(), "snapshot.pt")
    """
    assert "TRG040" not in codes(body)


def test_a_learning_rate_scaled_through_the_effective_batch_follows_the_world_size() -> None:
    # LTH14/mar main_mar.py (MAE's recipe): lr = blr * eff_batch_size / 256, where the effective
    # batch multiplies the per-rank batch by the world size.
    body = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        model = DDP(build_model(), device_ids=[local_rank])
        eff_batch_size = args.batch_size * misc.get_world_size()
        if args.lr is None:
            args.lr = args.blr * eff_batch_size / 256
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    """
    assert "TRG011" not in codes(body)
    assert "TRG011" in codes(body.replace("* misc.get_world_size()", "* 8"))


def test_accumulation_divided_by_a_world_scaled_batch_keeps_the_global_batch() -> None:
    # karpathy/llm.c train_gpt2.py: grad_accum_steps = total_batch_size // (B * T * world_size).
    body = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        ddp_world_size = int(os.environ["WORLD_SIZE"])
        tokens_per_fwdbwd = B * T * ddp_world_size
        grad_accum_steps = args.total_batch_size // tokens_per_fwdbwd
        model = DDP(build_model(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    """
    assert "TRG011" not in codes(body)
    assert "TRG011" in codes(body.replace("B * T * ddp_world_size", "B * T"))


def test_a_print_in_an_except_handler_reports_this_rank_s_own_failure() -> None:
    # OpenGVLab/InternVL internvl_chat_finetune.py: the dataset's retry loop prints the error.
    body = """
        dist.init_process_group("nccl")
        for step, batch in enumerate(loader):
            try:
                train_step(batch)
            except Exception as e:
                print(e, "skipping a bad sample", flush=True)
    """
    assert "TRG037" not in codes(body)
    assert "TRG037" in codes(body.replace("train_step(batch)", "print(step)"))


def test_a_forward_two_helpers_down_is_followed_from_the_rank_gate() -> None:
    # FareedKhan-dev/train-llm-from-scratch train_reward.py before 9476be5: the final eval runs
    # on the main process only; eval_accuracy(rm) calls _pair_rewards(rm, batch), whose forward
    # of the DDP-wrapped reward model the other ranks (already at cleanup) never join.
    body = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        def _pair_rewards(rm, batch):
            return rm(batch)
        def eval_accuracy(rm, batches):
            return sum(_pair_rewards(rm, b) for b in batches)
        def main():
            dist.init_process_group("nccl")
            rm = DDP(build_reward_model(), device_ids=[local_rank])
            train(rm)
            if dist.get_rank() == 0:
                acc = eval_accuracy(rm, test_batches)
            dist.destroy_process_group()
        main()
    """
    assert "TRG036" in codes(body)
    assert "TRG036" not in codes(
        body.replace("eval_accuracy(rm, test_batches)", "eval_accuracy(rm.module, test_batches)")
    )


def test_a_test_the_call_site_settled_stays_settled_two_helpers_down() -> None:
    # EleutherAI/gpt-neox gradient_noise_scale.py: rank 0 alone runs _update() in the `else` of
    # `if self.neox_args.is_pipe_parallel:`; the all_reduce two calls down is under that very test.
    body = """
        class GradientNoiseScale:
            def _sync_overflow(self, is_overflow):
                if self.neox_args.is_pipe_parallel:
                    dist.all_reduce(is_overflow)
                return is_overflow
            def _update(self):
                return self._sync_overflow(False)
            def update(self):
                if self.neox_args.is_pipe_parallel:
                    self._update()
                else:
                    if dist.get_rank() == 0:
                        self._update()
                    dist.barrier()
        dist.init_process_group("nccl")
        GradientNoiseScale().update()
    """
    assert "TRG036" not in codes(body) and "TRG021" not in codes(body)


def test_cuda_work_above_the_set_device_line_lands_on_gpu_0() -> None:
    # KellerJordan/modded-nanogpt train_gpt.py before 4d6fe167: an import-time warm-up tensor on
    # device="cuda", ~1300 lines above `torch.cuda.set_device(device)`.
    body = """
        torch.empty(1, device="cuda", requires_grad=True).backward()  # prevents a bug on some systems
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl", device_id=device)
        model = build_model().cuda()
    """
    assert "TRG030" in codes(body)
    fixed = body.replace('device="cuda", requires_grad', 'device=f"cuda:{local_rank}", requires_grad')
    assert "TRG030" not in codes(fixed)
    # A function that uses "cuda" runs when it is called, after the binding: not reported.
    later = body.replace("torch.empty(", "def warm_up():\n            torch.empty(", 1)
    assert "TRG030" not in codes(later)


def test_the_hf_examples_rank_helper_says_the_trainer_runs_one_process_per_gpu() -> None:
    # obss/trapper training/train.py before #74 (issue #73): the HF Trainer runs the script on every
    # GPU; every process made the serialization directories under `if not os.path.isdir(dir_):`.
    body = """
        from transformers.trainer_utils import is_main_process
        def _create_serialization_dirs(dirs):
            for dir_ in dirs:
                if not os.path.isdir(dir_):
                    os.makedirs(dir_)
        def run(training_args, dirs):
            _create_serialization_dirs(dirs)
            if is_main_process(training_args.local_rank):
                print("training")
        if __name__ == "__main__":
            run(parse_args(), ["out", "results"])
    """
    assert "TRG023" in codes(body, head="import os\n")
    # A project's own main-process test says the same since session 11b (a module that asks
    # whether it is rank 0 runs where there are other ranks); with no such test at all, the same
    # code is a plain script.
    own = body.replace("from transformers.trainer_utils import", "from myproject.utils import")
    assert "TRG023" in codes(own, head="import os\n")
    plain = own.replace("is_main_process", "is_verbose")
    assert "TRG023" not in codes(plain, head="import os\n")


def test_a_class_that_wraps_ddp_in_a_property_is_distributed_from_birth() -> None:
    # salesforce/LAVIS runners/runner_base.py before a4c54eb: the runner wraps the model in DDP in
    # its `model` property, and train() saves a checkpoint on every process when there is no
    # validation split.
    body = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        class Runner:
            @property
            def model(self):
                if self._wrapped_model is None:
                    self._wrapped_model = DDP(self._model, device_ids=[self.config.gpu])
                return self._wrapped_model
            def train(self):
                for cur_epoch in range(self.max_epoch):
                    self.train_epoch(cur_epoch)
                    if not self.evaluate_only:
                        self.save_checkpoint(cur_epoch)
            def save_checkpoint(self, cur_epoch):
                save_obj = {"model": self.model.module.state_dict(), "epoch": cur_epoch}
                torch.save(save_obj, os.path.join(self.output_dir, f"checkpoint_{cur_epoch}.pth"))
    """
    assert "TRG023" in codes(body)
    fixed = body.replace("if not self.evaluate_only:", "if not self.evaluate_only and dist.get_rank() == 0:")
    assert "TRG023" not in codes(fixed)
    # A method (not a property) that wraps DDP is one test among many: the class is not tied.
    assert "TRG023" not in codes(body.replace("@property", "@torch.no_grad()"))


def test_a_dataset_loaded_with_torch_load_carries_no_gpu() -> None:
    # Lightning-AI/lit-llama finetune/full.py: load_datasets() returns the token tensors that the
    # prepare script saved on the CPU; the checkpoint loaded next to it is state, and is reported.
    body = """
        dist.init_process_group("nccl")
        def load_datasets(data_dir):
            train_data = torch.load(os.path.join(data_dir, "train.pt"))
            val_data = torch.load(os.path.join(data_dir, "test.pt"))
            return train_data, val_data
        def main():
            train_data, val_data = load_datasets("data/alpaca")
            checkpoint = torch.load("checkpoints/lit-llama/7B/lit-llama.pth")
            model.load_state_dict(checkpoint, strict=False)
        main()
    """
    found = [f for f in lint_source(HEAD + textwrap.dedent(body), "train.py") if f.code == "TRG031"]
    assert [f.line for f in found] == [13]


def test_horovod_collectives_under_a_rank_test_are_reached_by_one_rank() -> None:
    # Horovod's own warning ("One or more tensors were submitted to be reduced ... by subset of
    # ranks ... will cause deadlock", horovod/horovod#334): its collectives, like torch's, need
    # every rank. Scripts ported from Horovod keep `hvd.allreduce` for metrics.
    body = """
        import horovod.torch as hvd
        hvd.init()
        torch.cuda.set_device(hvd.local_rank())
        for epoch in range(10):
            train(epoch)
            if hvd.rank() == 0:
                avg = hvd.allreduce(torch.tensor(val_loss), name="avg_loss")
                torch.save(model.state_dict(), "checkpoint.pt")
    """
    assert "TRG021" in codes(body, head="import torch\n")
    moved = body.replace(
        '            if hvd.rank() == 0:\n                avg = hvd.allreduce(torch.tensor(val_loss), name="avg_loss")',
        '            avg = hvd.allreduce(torch.tensor(val_loss), name="avg_loss")\n            if hvd.rank() == 0:',
    )
    assert "TRG021" not in codes(moved, head="import torch\n")


def test_a_signal_protocol_pairs_rank_0_with_the_others_across_functions() -> None:
    # ACEsuit/mace tools/train.py (LBFGS): rank 0 runs optimizer.step(closure) and signals the
    # others with broadcast(signal); they wait in broadcast(signal) and run closure() themselves.
    body = """
        dist.init_process_group("nccl")
        def take_step(model, optimizer, rank, signal):
            def closure():
                if rank == 0:
                    signal.fill_(1)
                    torch.distributed.broadcast(signal, src=0)
                total_loss = compute_loss(model)
                torch.distributed.all_reduce(total_loss)
                return total_loss
            if rank == 0:
                loss = optimizer.step(closure)
                signal.fill_(0)
                torch.distributed.broadcast(signal, src=0)
            else:
                while True:
                    torch.distributed.broadcast(signal, src=0)
                    if signal.item() == 0:
                        break
                    loss = closure()
        take_step(model, optimizer, dist.get_rank(), signal)
    """
    assert [c for c in codes(body) if c in ("TRG021", "TRG036")] == []
    # Without rank 0's side of the protocol, the others wait alone.
    broken = body.replace("loss = optimizer.step(closure)", "loss = optimizer.step()")
    assert "TRG021" in codes(broken)


def test_a_local_rank_that_falls_back_to_the_rank_when_unset_stays_local() -> None:
    # xdit-project/xDiT core/distributed/parallel_state.py: `if local_rank == -1:` (not given, the
    # single-node case) it becomes LOCAL_RANK or the rank, then binds the device.
    body = """
        def init_distributed_environment(world_size=-1, rank=-1, local_rank=-1, method="env://"):
            if local_rank == -1:
                if method == "env://":
                    local_rank = int(os.environ["LOCAL_RANK"])
                else:
                    local_rank = rank
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl", init_method=method, world_size=world_size, rank=rank)
        init_distributed_environment()
    """
    assert "TRG003" not in codes(body)
    # A local rank that is the global rank unconditionally is still the global rank.
    always = body.replace("            if local_rank == -1:\n", "            if True:\n")
    assert "TRG003" in codes(
        always.replace('local_rank = int(os.environ["LOCAL_RANK"])', "local_rank = rank")
    )


def test_a_backward_method_of_the_trainer_is_not_a_bare_loss_backward() -> None:
    # snowflakedb/ArcticTraining trainer.py: step() calls self.backward(loss), the trainer's own
    # method, which calls the engine's backward.
    body = """
        import deepspeed
        class Trainer:
            def __init__(self, model, config):
                self.model, *_ = deepspeed.initialize(model=model, config=config)
            def backward(self, loss):
                self.model.backward(loss)
            def step(self, batch):
                self.model.train()
                loss = self.model(batch).mean()
                self.backward(loss)
                self.model.step()
        Trainer(build(), "ds.json").step(batch)
    """
    assert "TRG018" not in codes(body)
    assert "TRG018" in codes(
        body.replace("self.backward(loss)\n", "loss.backward()\n", 1).replace(
            "def backward(self, loss):\n                self.model.backward(loss)",
            "def other(self):\n                pass",
        )
    )


def test_rank_0_reads_the_state_dict_of_a_model_it_has_not_sharded_yet() -> None:
    # mosaicml/composer distributed/prepare_distributed.py (sync_module_states): rank 0 takes the
    # full state dict of the plain model, then every rank shards it and rank 0's state is broadcast.
    body = """
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("nccl")
        def parallelize(model):
            full_state_dict = {}
            if dist.get_rank() == 0:
                full_state_dict = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
            fully_shard(model)
            sync_module_states(model, full_state_dict)
        parallelize(build())
    """
    assert "TRG021" not in codes(body)
    sharded_first = body.replace("            fully_shard(model)\n", "").replace(
        "            full_state_dict = {}\n",
        "            fully_shard(model)\n            full_state_dict = {}\n",
    )
    assert "TRG021" in codes(sharded_first)


def test_rank_0_of_one_mesh_dimension_saving_with_its_group_is_every_member() -> None:
    # mosaicml/composer utils/checkpoint.py (HSDP): the first replica saves its shards, with the
    # shard group as process_group.
    body = """
        import torch.distributed.checkpoint as dist_cp
        dist.init_process_group("nccl")
        def save(state_dict, device_mesh, dirname):
            expect_file = device_mesh.get_local_rank(mesh_dim=0) == 0
            if expect_file:
                process_group = device_mesh.get_group(1)
                dist_cp.save(state_dict=state_dict, storage_writer=dist_cp.FileSystemWriter(dirname),
                             process_group=process_group)
        save(sd, mesh, "ckpt")
    """
    assert "TRG021" not in codes(body)


def test_a_library_helper_that_asks_for_the_rank_is_not_anchored_by_that_alone() -> None:
    # OpenGVLab/InternVL classification/utils.py: save_checkpoint() saves, then deletes an old
    # checkpoint under `if dist.get_rank() == 0`; main.py calls it only on rank 0. A helper handed
    # its rank (`def train(..., rank)`) says it runs per rank; one that asks dist.get_rank() does not.
    body = """
        def save_checkpoint(config, epoch, model):
            save_path = os.path.join(config.OUTPUT, f"ckpt_epoch_{epoch}.pth")
            torch.save({"model": model.state_dict(), "epoch": epoch}, save_path)
            if dist.get_rank() == 0 and isinstance(epoch, int):
                old = os.path.join(config.OUTPUT, f"ckpt_epoch_{epoch - 5}.pth")
                if os.path.exists(old):
                    os.remove(old)
        def reduce_tensor(tensor):
            rt = tensor.clone()
            dist.all_reduce(rt)
            return rt / dist.get_world_size()
    """
    assert "TRG023" not in codes(body)
    handed = body.replace(
        "def save_checkpoint(config, epoch, model):", "def save_checkpoint(config, epoch, model, rank):"
    )
    assert "TRG023" in codes(handed.replace("dist.get_rank() == 0", "rank == 0"))


def test_a_method_reading_its_object_s_rank_runs_on_every_rank_s_object() -> None:
    # Lightning-AI/litgpt extensions/thunder/strategies/thunder_fsdp.py save_checkpoint(): the
    # strategy object exists on every rank; its method removes a sharded checkpoint with
    # shutil.rmtree on all of them, and writes metadata under `if self.global_rank == 0:`.
    body = """
        import shutil
        class ThunderFSDPStrategy:
            def save_checkpoint(self, path, state):
                if self._state_dict_type == "sharded":
                    save(state, path)
                    if self.global_rank == 0:
                        torch.save(metadata, path / "meta.pt")
                elif self._state_dict_type == "full":
                    if is_sharded_checkpoint(path):
                        shutil.rmtree(path)
    """
    assert "TRG023" in codes(body)
