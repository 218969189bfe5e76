"""Mechanisms that session 9c's unseen scripts needed (eval/lint/README.md, "Session 9c"), each on
its own, quoting the real code of a train-split file. Each test shows the finding appear for the real
idiom's neighbour and go away for the real idiom."""

from __future__ import annotations

from tests.core.lint import test_lint_unseen_idioms as unseen

HEAD = "import functools\nimport os\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


def test_a_rank_parameter_no_call_of_this_file_passes_is_handed_in_from_elsewhere() -> None:
    # ZFTurbo/Music-Source-Separation-Training train.py: `train_model(args, rank=None,
    # world_size=None)` runs alone as `train_model(None)`; train_ddp.py (another module) hands it the
    # mp.spawn index, which is what `cuda:{rank}` and DDP's device_ids take.
    body = """
        from utils.settings import initialize_environment_ddp

        def train_model(args, rank=None, world_size=None):
            ddp = True if world_size else False
            if ddp:
                initialize_environment_ddp(rank, world_size, args.seed, args.results_path)
            model = build()
            if ddp:
                device = torch.device(f'cuda:{rank}')
                model.to(device)
                model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])

        if __name__ == "__main__":
            train_model(None)
    """
    assert "TRG003" not in codes(body)
    # A call of this file that passes the rank decides its kind again (here: none known, so by name).
    passed = body.replace("train_model(None)", "train_model(None, int(os.environ['RANK']), 8)")
    assert codes(passed).count("TRG003") == 2


def test_a_disabled_tracker_run_on_the_other_ranks_is_no_run() -> None:
    # ZFTurbo/Music-Source-Separation-Training train_accelerate.py.
    body = """
        import wandb
        from accelerate import Accelerator

        accelerator = Accelerator()
        if accelerator.is_main_process and args.wandb_key is not None and args.wandb_key.strip() != '':
            wandb.login(key = args.wandb_key)
            wandb.init(project = 'msst-accelerate', config = {'args': args})
        else:
            wandb.init(mode = 'disabled')
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("wandb.init(mode = 'disabled')", "wandb.init(mode = 'offline')"))


def test_mixed_precision_of_an_fsdp_unit_no_optimizer_is_built_on_reduces_nothing() -> None:
    # Alpha-VLLM/Lumina-T2X lumina_next_t2i/train.py: the frozen text encoder is sharded with a helper
    # whose MixedPrecision has no reduce_dtype; only the DiT's parameters reach the optimizer.
    body = """
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
        from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

        def setup_lm_fsdp_sync(model):
            model = FSDP(
                model,
                auto_wrap_policy=functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: m in list(model.layers)),
                mixed_precision=MixedPrecision(
                    param_dtype=next(model.parameters()).dtype,
                ),
                device_id=torch.cuda.current_device(),
            )
            return model

        def main(args):
            dist.init_process_group("nccl")
            text_encoder = load_encoder(torch_dtype=torch.bfloat16).cuda()
            text_encoder = setup_lm_fsdp_sync(text_encoder)
            model = setup_fsdp_sync(build_dit(), args)
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.wd)
    """
    assert "TRG014" not in codes(body)
    # The same helper's unit trained (its result handed to the optimizer) reduces in bf16.
    trained = body.replace("AdamW(model.parameters()", "AdamW(text_encoder.parameters()")
    assert "TRG014" in codes(trained)
