"""Session 12d's rule (eval/lint/README.md, "Session 12d"): a DDP/FSDP wrapper built under another
name and never trained through (TRG056), on the real buggy shape, its fix, and the correct shapes
that look like it."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py") if f.code == "TRG056"]


# lucidrains/denoising-diffusion-pytorch before dfcf324 (MIT): the Trainer wraps the model in DDP as
# `self.model_dpp` and never calls it; `train()` runs the forward through `self.model`.
TRAINER = """
    import torch
    from torch.cuda.amp import GradScaler, autocast
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim import Adam

    class Trainer(object):
        def __init__(self, diffusion_model, rank=0, world_size=1):
            self.is_dpp = world_size > 1
            self.rank = rank
            self.model = diffusion_model
            if self.is_dpp:
                ddp_kwargs = {'device_ids': [rank], 'output_device': rank, 'find_unused_parameters': True}
                self.model_dpp = DDP(self.model, **ddp_kwargs)
            self.opt = Adam(diffusion_model.parameters(), lr=1e-4)
            self.scaler = GradScaler()

        def save(self, milestone):
            if self.rank == 0:
                torch.save({'model': self.model.state_dict()}, f'model-{milestone}.pt')

        def train(self):
            while self.step < self.train_num_steps:
                data = next(self.dl).cuda(self.rank)
                with autocast(enabled=self.amp):
                    loss = self.model(data)
                    self.scaler.scale(loss).backward()
                self.scaler.step(self.opt)
                self.scaler.update()
                self.opt.zero_grad()
"""

FIXED = TRAINER.replace(
    "            while self.step",
    "            active_model = self.model if not self.is_dpp else self.model_dpp\n            while self.step",
).replace("loss = self.model(data)", "loss = active_model(data)")


def test_the_real_trainer_and_its_fix() -> None:
    assert codes(TRAINER) == ["TRG056"]
    finding = next(f for f in lint_source(textwrap.dedent(TRAINER), "m.py") if f.code == "TRG056")
    assert "self.model_dpp" in finding.message and "self.model(data)" in finding.message
    assert "[verify]" in finding.message
    assert codes(FIXED) == []


SCRIPT = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(model, loader, optimizer, local_rank):
        dist.init_process_group("nccl")
        ddp_model = DDP(model.to(local_rank), device_ids=[local_rank])
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
"""


def test_a_plain_script_that_trains_the_unwrapped_module() -> None:
    assert codes(SCRIPT) == ["TRG056"]
    fsdp = SCRIPT.replace(
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP",
    ).replace("DDP(model.to", "FSDP(model.to")
    assert codes(fsdp) == ["TRG056"]
    # the fix, and the common correct spellings
    assert codes(SCRIPT.replace("mse_loss(model(x)", "mse_loss(ddp_model(x)")) == []
    assert codes(SCRIPT.replace("ddp_model = DDP", "model = DDP")) == []


def test_near_misses_stay_quiet() -> None:
    # the forward comes before the wrap (a warm-up or a shape probe)
    assert (
        codes(
            SCRIPT.replace(
                "        dist.init_process_group",
                "        model(torch.zeros(1))\n        dist.init_process_group",
            ).replace("mse_loss(model(x)", "mse_loss(ddp_model(x)")
        )
        == []
    )
    # no backward in the function: evaluation through the inner module
    assert codes(SCRIPT.replace("            loss.backward()\n", "")) == []
    # under no_grad, or in a function named for sampling
    guarded = SCRIPT.replace(
        "            loss = torch.nn.functional.mse_loss(model(x), y)",
        "            with torch.no_grad():\n                loss = torch.nn.functional.mse_loss(model(x), y)",
    )
    assert codes(guarded) == []
    assert codes(SCRIPT.replace("def main(", "def sample_images(")) == []
    # under a rank-0 gate
    gated = SCRIPT.replace(
        "            loss = torch.nn.functional.mse_loss(model(x), y)",
        "            if dist.get_rank() == 0:\n                loss = torch.nn.functional.mse_loss(model(x), y)",
    )
    assert codes(gated) == []
    # the wrapper is used (passed on, returned): the forward through the inner module is not the only one
    assert codes(SCRIPT + "        return ddp_model\n") == []


def test_module_helpers_and_attribute_wraps() -> None:
    helpers = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Runner:
            def __init__(self, model, rank):
                self.model = DDP(model, device_ids=[rank])

            def step(self, x):
                loss = self.model(x)
                loss.backward()
                self.model.module.log_norms()
                return self.model.module.encode(x)
    """
    assert codes(helpers) == []
    rebound = helpers.replace(
        "self.model = DDP(model", "self.net = model\n                self.model = DDP(self.net"
    )
    assert codes(rebound) == []  # the wrapper is called in step(); the inner module is not
    unused = (
        helpers.replace("self.model = DDP(model", "self.net = model\n                self.ddp = DDP(self.net")
        .replace("loss = self.model(x)", "loss = self.net(x)")
        .replace("self.model.module", "self.ddp.module")
    )
    assert codes(unused) == ["TRG056"]


# jingyaogong/minimind before #854 (Apache-2.0), trainer/train_grpo.py: the model is rebound to its DDP
# wrapper, but the policy's loss-bearing forward runs through `.module`.
GRPO = """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    def grpo_train_epoch(epoch, loader, optimizer, ref_model, autocast_ctx):
        for step, batch in enumerate(loader):
            outputs, full_mask = batch
            model_unwrapped = model.module if isinstance(model, DistributedDataParallel) else model
            with autocast_ctx:
                res = model_unwrapped(outputs, attention_mask=full_mask)
            with torch.no_grad():
                ref = ref_model(outputs, attention_mask=full_mask)
            loss = (res.logits - ref.logits).mean()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                raw_model = model.module if isinstance(model, DistributedDataParallel) else model
                torch.save(raw_model.state_dict(), "ckpt.pth")

    if __name__ == "__main__":
        model = DistributedDataParallel(model, device_ids=[local_rank])
        grpo_train_epoch(0, loader, optimizer, ref_model, autocast_ctx)
"""


def test_the_forward_through_module_and_its_fix() -> None:
    assert codes(GRPO) == ["TRG056"]
    assert codes(GRPO.replace("res = model_unwrapped(outputs", "res = model(outputs")) == []
    direct = GRPO.replace("res = model_unwrapped(outputs", "res = model.module(outputs")
    assert codes(direct) == ["TRG056"]
    assert codes(GRPO.replace("res = model_unwrapped(outputs", "res = model.module.forward(outputs")) == [
        "TRG056"
    ]


def test_module_near_misses() -> None:
    # a method of the inner module beside a forward through the wrapper (an auxiliary term); alone,
    # it is the loss-bearing forward and bypasses DDP (session 13, RAE's `model_woddp.decode(z)`)
    method = GRPO.replace("res = model_unwrapped(outputs", "res = model.module.score(outputs")
    assert codes(method) == ["TRG056"]
    beside = method.replace(
        "res = model.module.score(outputs", "res = model(outputs) + model.module.score(outputs"
    )
    assert codes(beside) == []
    # the unwrapped module for generation under no_grad, training through the wrapper
    rollout = GRPO.replace(
        "            with autocast_ctx:\n                res = model_unwrapped(outputs, attention_mask=full_mask)",
        "            with torch.no_grad():\n                gen = model_unwrapped.generate(outputs)\n"
        "                old = model_unwrapped(outputs)\n            res = model(outputs)",
    )
    assert codes(rollout) == []
    # no backward in the function: evaluation
    assert codes(GRPO.replace("            loss.backward()\n", "")) == []
    # `.module` of something no wrapper bound (a Lightning or a plain attribute)
    assert codes(GRPO.replace("model = DistributedDataParallel(model", "model = Wrapper(model")) == []
