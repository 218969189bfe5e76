"""Mechanisms that session 11's unseen scripts needed (eval/lint/README.md, "Session 11"), each on its
own, quoting the real code of a train-split file. Each test shows the finding appear for the real
idiom's neighbour and go away for the real idiom (or the reverse, for a miss closed)."""

from __future__ import annotations

from tests.core.lint import test_lint_unseen_idioms as unseen

HEAD = "import os\nimport sys\nimport math\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


# k2-fsa/icefall egs/librispeech/ASR/zipformer/train.py: on an out-of-memory error every rank dumps
# the batch it was given, each to a file named by a fresh uuid4.
DUMP = """
    from lhotse.utils import uuid4

    def display_and_save_batch(batch, params):
        filename = f"{params.exp_dir}/batch-{uuid4()}.pt"
        torch.save(batch, filename)

    def run(rank, world_size, params, batch):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        display_and_save_batch(batch, params=params)

    if __name__ == "__main__":
        torch.multiprocessing.spawn(run, args=(2, None, None), nprocs=2)
"""


def test_a_path_named_by_a_fresh_uuid_is_each_process_s_own() -> None:
    assert "TRG023" not in codes(DUMP)
    assert "TRG023" in codes(DUMP.replace("batch-{uuid4()}.pt", "batch.pt"))
    # `uuid.uuid4()` one name away, as accelerate's tests make their relative directories.
    named = DUMP.replace("from lhotse.utils import uuid4", "import uuid").replace(
        'filename = f"{params.exp_dir}/batch-{uuid4()}.pt"',
        'tag = uuid.uuid4().hex\n        filename = f"{tag}.pt"',
    )
    assert "TRG023" not in codes(named)


# apple/ml-4m run_training_4m.py: a rank whose loss is not finite dumps its inputs and exits.
NAN_DUMP = """
    dist.init_process_group("nccl")
    for step, x in enumerate(loader):
        loss = model(x)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            torch.save(x, os.path.join(output_dir, "debug_mod_dict.pt"))
            print(f"Loss is {loss_value}, stopping training", file=sys.stderr)
            sys.exit(1)
        loss.backward()
"""


def test_a_write_on_the_way_out_of_a_failing_rank_is_its_failure_dump() -> None:
    assert "TRG023" not in codes(NAN_DUMP)
    assert "TRG023" not in codes(NAN_DUMP.replace("sys.exit(1)", "raise RuntimeError(loss_value)"))
    # A save followed by a clean exit (a preemption handler's) is every rank's save all the same.
    assert "TRG023" in codes(NAN_DUMP.replace("sys.exit(1)", "sys.exit(0)"))
    assert "TRG023" in codes(NAN_DUMP.replace("            sys.exit(1)\n", ""))


# wenet-e2e/wenet wenet/bin/train.py before 205e33dd (#456): every rank exports the TorchScript
# model to one path.
EXPORT = """
    dist.init_process_group(args.dist_backend, world_size=args.world_size, rank=args.rank)
    model = init_model(configs)
    script_model = torch.jit.script(model)
    script_model.save(os.path.join(args.model_dir, 'init.zip'))
"""


def test_a_torchscript_module_saved_on_every_rank_writes_one_archive_n_times() -> None:
    assert "TRG023" in codes(EXPORT)
    gated = EXPORT.replace(
        "    script_model = torch.jit.script",
        "    if args.rank == 0:\n        script_model = torch.jit.script",
    )
    gated = gated.replace("    script_model.save", "        script_model.save")
    assert "TRG023" not in codes(gated)
    assert "TRG023" in codes(EXPORT.replace("script_model.save(", "torch.jit.save(script_model, "))
    # A module that is not TorchScript: `.save` is its own method, whose writes are not visible.
    assert "TRG023" not in codes(EXPORT.replace("torch.jit.script(model)", "Exporter(model)"))
    # The rank in the path: one archive per process.
    assert "TRG023" not in codes(EXPORT.replace("'init.zip'", "f'init{args.rank}.zip'"))


# lucidrains/lightweight-gan lightweight_gan/lightweight_gan.py: the Trainer takes the rank the CLI's
# mp.spawn worker hands it (`Trainer(**model_args)` in cli.py, one process per local GPU) and puts
# its tensors on that device; this module never builds a Trainer itself.
TRAINER = """
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Trainer():
        def __init__(self, name = 'default', batch_size = 4, rank = 0, world_size = 1):
            self.is_main = rank == 0
            self.rank = rank
            self.world_size = world_size
            self.batch_size = batch_size

        def init_GAN(self, gan):
            ddp_kwargs = {'device_ids': [self.rank], 'output_device': self.rank}
            self.D_ddp = DDP(gan.D, **ddp_kwargs)

        def train(self):
            latents = torch.randn(self.batch_size, 256).cuda(self.rank)
            return self.D_ddp(latents)
"""


def test_the_rank_of_a_class_this_file_never_builds_comes_from_its_builder() -> None:
    assert "TRG003" not in codes(TRAINER)
    # Built here with the global rank: that is what it holds.
    assert "TRG003" in codes(TRAINER + "\n    Trainer(rank=dist.get_rank()).train()\n")
