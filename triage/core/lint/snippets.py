"""Names a pasted snippet uses without importing them: `dist.barrier()`, `DDP(model)`.

Code from an issue or a forum post often starts below its imports. A name that the file never
binds (no import, assignment, parameter, function or class of that name) and that the PyTorch
world spells one way is read as that import, so `dist.barrier()` under `if rank == 0:` is still
found in a snippet that never says `import torch.distributed as dist`. An object the snippet uses
without creating it tells its framework by a rank attribute only that framework has:
`fabric.global_rank` and `trainer.is_global_zero` are Lightning's, so `fabric.barrier()` under
`if fabric.global_rank == 0:` is Fabric's collective.
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
    # Collectives of objects: no other library spells these, and Accelerate's helpers are the ones
    # snippets call bare (`from accelerate.utils import gather_object`).
    "gather_object": "accelerate.utils.gather_object",
    "broadcast_object_list": "accelerate.utils.broadcast_object_list",
    "all_gather_object": "torch.distributed.all_gather_object",
}


# (object, attribute) pairs that only one framework's objects have, and that framework.
_RANK_ATTRIBUTES: dict[tuple[str, str], str] = {
    ("fabric", "global_rank"): "lightning",
    ("fabric", "is_global_zero"): "lightning",
    ("trainer", "global_rank"): "lightning",
    ("trainer", "is_global_zero"): "lightning",
}


def bound_names(names: Iterable[ast.AST], defined: set[str], imports: dict[str, str]) -> set[str]:
    """Every name the file binds: imports, definitions, assignments, parameters."""
    bound = set(defined) | set(imports)
    for node in names:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound


def implicit_imports(names: Iterable[ast.AST], bound: set[str]) -> dict[str, str]:
    """The conventional imports of the names `names` (every Name node) uses but nothing binds."""
    used = {node.id for node in names if isinstance(node, ast.Name) and node.id in CONVENTIONAL}
    return {name: CONVENTIONAL[name] for name in used - bound}


def implicit_frameworks(attributes: Iterable[ast.AST], bound: set[str], fragment: bool) -> set[str]:
    """The frameworks an unbound object's rank attribute implies (`fabric.global_rank`: Lightning).

    `self.trainer.is_global_zero` counts only in a fragment that imports nothing: a whole file
    says what it uses in its imports."""
    found: set[str] = set()
    for node in attributes:
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id not in bound:
            owner = base.id
        elif isinstance(base, ast.Attribute) and fragment:
            owner = base.attr
        else:
            continue
        framework = _RANK_ATTRIBUTES.get((owner, node.attr))
        if framework:
            found.add(framework)
    return found
