"""The mechanisms session 13's train evidence needed (eval/lint/README.md, "Session 13"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def found(body: str, code: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py") if f.code == code]


# FongMunHong/FlowER before PR #8 (MIT): `init_model` returns the DDP-wrapped model; the training
# loop unwraps it under the author's own `hasattr(model, "module")` test and trains the inner module.
FLOWER = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def init_model(args):
        graph_attn_model = build(args).cuda()
        if args.local_rank != -1:
            graph_attn_model = DDP(graph_attn_model, device_ids=[args.local_rank])
        return graph_attn_model

    def main(args):
        model = init_model(args)
        optimizer = torch.optim.Adam(model.parameters())
        for batch in loader:
            model.train()
            model.zero_grad(set_to_none=True)
            if hasattr(model, "module"):
                model = model.module
            y_emb = model.id2emb(batch.y)
            vt = model(y_emb, batch.y_len, batch.xt, batch.t)
            loss = torch.sum((vt - batch.ut) ** 2)
            loss.backward()
            optimizer.step()
"""


def test_a_model_unwrapped_under_the_authors_own_test_and_trained() -> None:
    assert found(FLOWER, "TRG056") == ["TRG056"]
    # the fix: the forward goes through the wrapper
    fixed = FLOWER.replace(
        '            if hasattr(model, "module"):\n                model = model.module\n', ""
    )
    assert found(fixed.replace("model.id2emb(batch.y)", "batch.y"), "TRG056") == []
    # the same test in a file that wraps nothing in DDP/FSDP says nothing about a wrapper
    no_wrap = FLOWER.replace(
        "            graph_attn_model = DDP(graph_attn_model, device_ids=[args.local_rank])\n",
        "            pass\n",
    )
    assert found(no_wrap, "TRG056") == []
    # unwrapped for evaluation only
    evaluated = FLOWER.replace("def main(args):", "def evaluate(args):")
    assert found(evaluated, "TRG056") == []


# bytetriper/RAE before d355e07 (MIT): `model_woddp = ddp_model.module`; the decoder's loss-bearing
# forward is `model_woddp.decode(z)` and the wrapper is never called in the training function.
RAE = """
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main():
        rae = build().to(device)
        ddp_model = DDP(rae, device_ids=[device.index], broadcast_buffers=False)
        model_woddp = ddp_model.module
        optimizer = torch.optim.AdamW([p for p in model_woddp.decoder.parameters() if p.requires_grad])
        for images in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                z = model_woddp.encode(images)
            recon = model_woddp.decode(z)
            loss = F.l1_loss(recon, images)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
            optimizer.step()
"""


def test_a_method_of_the_inner_module_computes_the_training_loss() -> None:
    assert found(RAE, "TRG056") == ["TRG056"]
    finding = next(f for f in lint_source(textwrap.dedent(RAE), "m.py") if f.code == "TRG056")
    assert "model_woddp.decode(z)" in finding.message and "ddp_model" in finding.message
    # the fix: the training step calls the wrapper (its forward encodes and decodes)
    fixed = RAE.replace("recon = model_woddp.decode(z)", "recon = ddp_model(images)")
    assert found(fixed, "TRG056") == []
    # a method beside a forward through the wrapper is left alone (an auxiliary term)
    beside = RAE.replace("loss = F.l1_loss(recon, images)", "loss = F.l1_loss(ddp_model(images), recon)")
    assert found(beside, "TRG056") == []
    # housekeeping and data-less calls are not forwards
    housekeeping = RAE.replace("recon = model_woddp.decode(z)", "recon = model_woddp.get_last_layer(z)")
    assert found(housekeeping, "TRG056") == []
    no_data = RAE.replace("recon = model_woddp.decode(z)", "recon = model_woddp.decode(None)")
    assert found(no_data, "TRG056") == []
    # the method under no_grad (as the real `encode`) is not the loss-bearing forward
    assert found(RAE.replace("recon = model_woddp.decode(z)", "recon = z"), "TRG056") == []


# GaParmar/img2img-turbo (MIT, a clean file): LPIPS and CLIP frozen whole before
# `accelerator.prepare`, then used for validation on the main process. Accelerate wraps in DDP only a
# model with a trainable parameter, so these stay plain modules whose forward never communicates.
FROZEN = """
    import torch
    import lpips
    from accelerate import Accelerator

    def main(args):
        accelerator = Accelerator()
        net_pix2pix = Pix2Pix_Turbo()
        net_lpips = lpips.LPIPS(net="vgg").cuda()
        net_lpips.requires_grad_(False)
        optimizer = torch.optim.AdamW(net_pix2pix.parameters())
        net_pix2pix, optimizer = accelerator.prepare(net_pix2pix, optimizer)
        net_lpips = accelerator.prepare(net_lpips)
        for batch in loader:
            loss = net_lpips(net_pix2pix(batch["x"]), batch["y"]).mean()
            accelerator.backward(loss)
            optimizer.step()
            if accelerator.is_main_process:
                with torch.no_grad():
                    val = net_lpips(accelerator.unwrap_model(net_pix2pix)(val_x), val_y).mean()
"""


def test_a_model_frozen_before_prepare_is_not_a_wrapper() -> None:
    assert found(FROZEN, "TRG036") == []
    # trainable when prepared: Accelerate wraps it in DDP, whose forward may broadcast buffers
    trainable = FROZEN.replace("        net_lpips.requires_grad_(False)\n", "")
    assert found(trainable, "TRG036") == ["TRG036"]
    # unfrozen again before the prepare
    thawed = FROZEN.replace(
        "        optimizer = torch.optim",
        "        net_lpips.requires_grad_(True)\n        optimizer = torch.optim",
    )
    assert found(thawed, "TRG036") == ["TRG036"]
    # a tuple prepare binds by position: the frozen one stays plain
    pair = FROZEN.replace(
        "        net_lpips = accelerator.prepare(net_lpips)\n",
        "        net_lpips, net_other = accelerator.prepare(net_lpips, net_other)\n",
    )
    assert found(pair, "TRG036") == []
