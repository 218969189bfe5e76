"""Names a pasted snippet uses without importing them: `dist.barrier()`, `DDP(model)`.

Code from an issue or a forum post often starts below its imports. A name that the file never
binds (no import, assignment, parameter, function or class of that name) and that the PyTorch
world spells one way is read as that import, so `dist.barrier()` under `if rank == 0:` is still
found in a snippet that never says `import torch.distributed as dist`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

CONVENTIONAL: dict[str, str] = {
    "dist": "torch.distributed",
    "DDP": "torch.nn.parallel.DistributedDataParallel",
    "DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "FSDP": "torch.distributed.fsdp.FullyShardedDataParallel",
    "FullyShardedDataParallel": "torch.distributed.fsdp.FullyShardedDataParallel",
    "fully_shard": "torch.distributed.fsdp.fully_shard",
    "DistributedSampler": "torch.utils.data.distributed.DistributedSampler",
    "DataLoader": "torch.utils.data.DataLoader",
    "init_process_group": "torch.distributed.init_process_group",
    "destroy_process_group": "torch.distributed.destroy_process_group",
    "mp": "torch.multiprocessing",
    "nn": "torch.nn",
    "Accelerator": "accelerate.Accelerator",
}


def implicit_imports(names: Iterable[ast.AST], defined: set[str], imports: dict[str, str]) -> dict[str, str]:
    """The conventional imports of the names `names` (every Name node) uses but nothing binds."""
    bound = set(defined) | set(imports)
    used: set[str] = set()
    for node in names:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store | ast.Del):
                bound.add(node.id)
            elif node.id in CONVENTIONAL:
                used.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return {name: CONVENTIONAL[name] for name in used - bound}
