"""Which calls communicate across ranks: the collectives of torch.distributed (and DeepSpeed's and
Accelerate's copies), torch_xla and Horovod, the wrappers' methods that run one (`accelerator.
wait_for_everyone`, Lightning's `trainer.save_checkpoint`, an FSDP model's forward), and helpers
of other modules named like one. Certain ones are errors when only some ranks reach them; the
others (a DDP model's forward, `accelerator.save_state`) may communicate, depending on the setup.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from triage.core.lint.context import Context
from triage.core.lint.patterns import kwarg_true
from triage.core.lint.script import Call, dotted

DIST_COLLECTIVES = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "all_gather_coalesced",
        "_all_gather_base",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
        "new_group",
        "new_subgroups",
    }
)
_DIST_MODULES = ("torch.distributed", "deepspeed.comm", "accelerate.utils", "torch_xla")
_XLA = frozenset({"rendezvous", "mesh_reduce"})
_HOROVOD = frozenset(
    {
        "allreduce",
        "allreduce_",
        "grouped_allreduce",
        "allgather",
        "allgather_object",
        "alltoall",
        "join",
        "barrier",
        "broadcast",
        "broadcast_",
        "broadcast_object",
        "broadcast_parameters",
        "broadcast_optimizer_state",
    }
)
_STATE_DICT_COLLECTIVES = frozenset(
    {
        "get_state_dict",
        "get_model_state_dict",
        "get_optimizer_state_dict",
        "full_optim_state_dict",
        "optim_state_dict",
    }
)
_ACCELERATOR_CERTAIN = frozenset(
    {"wait_for_everyone", "gather", "gather_for_metrics", "reduce", "pad_across_processes"}
)
_FABRIC_CERTAIN = frozenset({"barrier", "all_reduce", "all_gather", "broadcast"})
_ACCELERATOR_MAYBE = frozenset({"save_state", "load_state", "get_state_dict", "save_model"})
# Context managers that let rank 0 go first (YOLOv5's `torch_distributed_zero_first`, Accelerate's
# `main_process_first`): a barrier on the way in for the other ranks and on the way out for rank 0.
IN_TURN = frozenset(
    {"main_process_first", "local_main_process_first", "torch_distributed_zero_first", "zero_first"}
)
_HELPER_TAILS = frozenset(
    {
        "barrier",
        "synchronize",
        "all_reduce",
        "allreduce",
        "all_gather",
        "all_reduce_mean",
        "reduce_dict",
        "reduce_mean",
        "reduce_tensor",
        "all_gather_object",
        "broadcast",
        "wait_for_everyone",
        "sync_across_processes",
    }
)


@dataclass(frozen=True)
class Communication:
    """A call that communicates: what to call it in a message, and whether it certainly does."""

    node: ast.Call
    label: str  # "barrier()", "the FSDP-wrapped `model`"
    certain: bool
    name: str  # the key pairs are matched on


def communication(ctx: Context, call: Call) -> Communication | None:
    """Whether (and how surely) this call runs a collective."""
    name, tail = call.name, call.tail
    if tail in DIST_COLLECTIVES and name.startswith(_DIST_MODULES):
        grouped = (
            call.kwarg("group") is not None
            and dotted(call.kwarg("group") or ast.Name("")) != "dist.group.WORLD"
        )
        return Communication(call.node, f"{tail}()", not grouped, name)
    if (tail in _XLA and name.startswith("torch_xla")) or (tail in _HOROVOD and name.startswith("horovod")):
        return Communication(call.node, f"{tail}()", True, name)
    if tail in _STATE_DICT_COLLECTIVES and name.startswith("torch.distributed"):
        if _sharded_later(ctx, call):
            return None
        return Communication(call.node, f"{tail}()", True, name)
    if name.startswith("torch.distributed.checkpoint") and tail in (
        "save",
        "load",
        "save_state_dict",
        "load_state_dict",
    ):
        return Communication(call.node, f"torch.distributed.checkpoint.{tail}()", True, name)
    wrappers = ctx.wrappers
    if call.receiver is not None and wrappers.is_accelerator(call):
        if tail in _ACCELERATOR_CERTAIN:
            return Communication(call.node, f"accelerator.{tail}()", True, f"accelerator.{tail}")
        if tail in _ACCELERATOR_MAYBE:
            return Communication(call.node, f"accelerator.{tail}()", False, f"accelerator.{tail}")
    receiver_kind = wrappers.kind(call.receiver, call.scope)
    receiver = dotted(call.receiver) if call.receiver is not None else ""
    lightning = "lightning" in ctx.script.frameworks
    if lightning and receiver_kind is None and receiver.rsplit(".", 1)[-1] in ("trainer", "fabric"):
        receiver_kind = "lightning_trainer" if receiver.endswith("trainer") else "fabric"
    if receiver_kind == "fabric" and tail in _FABRIC_CERTAIN:
        return Communication(call.node, f"fabric.{tail}()", True, f"fabric.{tail}")
    if receiver_kind == "fabric" and tail in ("save", "load"):
        return Communication(call.node, f"fabric.{tail}()", False, f"fabric.{tail}")
    if lightning and receiver == "self" and tail == "all_gather":
        return Communication(call.node, "self.all_gather()", True, "self.all_gather")
    if tail == "save_checkpoint" and receiver_kind in ("lightning_trainer", "deepspeed"):
        what = "Lightning's trainer" if receiver_kind == "lightning_trainer" else "the DeepSpeed engine's"
        return Communication(call.node, f"{what} save_checkpoint()", True, f"{receiver_kind}.save_checkpoint")
    if tail == "barrier" and dotted(call.receiver or ast.Name("")).endswith("strategy"):
        return Communication(call.node, "strategy.barrier()", True, "strategy.barrier")
    if tail == "state_dict" and receiver_kind in ("fsdp", "fsdp2"):
        return Communication(call.node, "the FSDP model's state_dict()", False, "fsdp.state_dict")
    if tail == "compute" and _synced_metric(ctx, call):
        text = dotted(call.receiver or ast.Name("")) or "metric"
        what = f"{text}.compute() (a torchmetrics metric: it all-gathers its state from every process)"
        return Communication(call.node, what, False, "torchmetrics.compute")
    if tail == "log" and kwarg_true(call, "sync_dist"):
        return Communication(call.node, "self.log(..., sync_dist=True)", False, "log")
    own_kind = wrappers.kind(call.node.func, call.scope)
    if own_kind is not None:
        return forward(call, own_kind)
    if tail in IN_TURN and ctx.script.local_function(call.node) is None:
        return Communication(
            call.node, f"{name or tail}() (rank 0 first: barriers on entry and exit)", True, tail
        )
    if (
        tail in _HELPER_TAILS
        and not name.startswith("torch.")
        and ctx.script.local_function(call.node) is None
        and ("." in name or name in ctx.script.imports)
    ):
        return Communication(call.node, f"{name}()", False, name)
    return None


def forward(call: Call, kind: str) -> Communication | None:
    """Calling a wrapped model runs its forward: FSDP's always gathers, DDP's may broadcast."""
    text = dotted(call.node.func) or "model"
    if kind in ("fsdp", "fsdp2"):
        return Communication(
            call.node, f"the FSDP-wrapped `{text}` (its forward all-gathers parameters)", True, text
        )
    if kind == "ddp":
        return Communication(
            call.node, f"the DDP-wrapped `{text}` (its forward broadcasts buffers)", False, text
        )
    if kind == "deepspeed":
        return Communication(
            call.node, f"the DeepSpeed engine `{text}` (ZeRO-3 all-gathers in forward)", False, text
        )
    if kind == "prepared":
        return Communication(call.node, f"the Accelerate-prepared `{text}` (a DDP/FSDP wrapper)", False, text)
    return None


def _synced_metric(ctx: Context, call: Call) -> bool:
    """`fid = FrechetInceptionDistance(...)` in this scope (or `self.fid = ...` anywhere): a
    torchmetrics metric's compute() gathers every process's state once a process group is up,
    unless it was built with `sync_on_compute=False` or its own `dist_sync_fn`."""
    receiver = dotted(call.receiver) if call.receiver is not None else ""
    if not receiver:
        return False
    for built in ctx.script.call_list:
        if not built.name.startswith("torchmetrics."):
            continue
        statement = ctx.script.statement_of(built.node)
        if not isinstance(statement, ast.Assign) or receiver not in {dotted(t) for t in statement.targets}:
            continue
        if not receiver.startswith("self.") and built.scope is not call.scope:
            continue
        switched_off = built.kwarg("sync_on_compute")
        if built.kwarg("dist_sync_fn") is not None:
            return False
        return not (isinstance(switched_off, ast.Constant) and switched_off.value is False)
    return False


_SHARDERS = ("fully_shard", "FullyShardedDataParallel", "FSDP")


def _sharded_later(ctx: Context, call: Call) -> bool:
    """`full = get_model_state_dict(model)` on rank 0, then `fully_shard(model)` (composer's
    sync_module_states): the model is not sharded yet, so reading its state dict is local."""
    model = dotted(call.node.args[0]) if call.node.args else ""
    return bool(model) and any(
        other.scope is call.scope
        and other.node.lineno > call.node.lineno
        and any(part in other.tail for part in _SHARDERS)
        and model in {dotted(a) for a in other.node.args}
        for other in ctx.script.call_list
    )
