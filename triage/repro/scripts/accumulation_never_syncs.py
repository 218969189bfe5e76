"""E12 (gradient accumulation under DDP): the loop wraps every micro-step in model.no_sync(),
including the last one, so no all-reduce ever runs. Each rank steps on its own gradients; the
replicas drift apart silently. The check after the step (the one E12's fix recommends) compares
every rank's weights with rank 0's and stops the run."""

import torch
import torch.distributed as dist


def replica_gap(model: torch.nn.Module) -> float:
    with torch.no_grad():
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        ref = flat.clone()
        dist.broadcast(ref, src=0)
        return float((flat - ref).abs().max())


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)  # each rank its own data, as DistributedSampler gives it
    accum = 4
    for _ in range(accum):
        with model.no_sync():  # the bug: also on the last micro-step
            loss = model(torch.randn(16, 8)).pow(2).mean() / accum
            loss.backward()
    opt.step()
    gap = replica_gap(model)
    print(f"rank {rank}: max |param - rank 0 param| = {gap:.3g} after one accumulated step", flush=True)
    if gap > 0:
        raise RuntimeError(
            f"DDP replicas diverged: max |param - rank 0 param| = {gap:.3g} after {accum} micro-steps "
            "accumulated under no_sync() (no gradient all-reduce ran)"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
