# triage eval (lint clean set): https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/training/training.py
# Licence: BSD-3-Clause (c) NVIDIA CORPORATION; the file below is unmodified.
# Copyright (c) 2025 NVIDIA CORPORATION & AFFILIATES. All rights reserved.

"""Pretrain utilities."""

# ``_TRAIN_START_TIME`` must be captured before the (expensive) imports below so
# that it reflects the true start time of the process.
import time

_TRAIN_START_TIME = time.time()  # The earliest we can measure the start time.

# Standard library.
import argparse
import copy
import dataclasses
import functools
import gc
import inspect
import logging
import math
import os
import sys
from collections import defaultdict
from contextlib import nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

# Third-party.
import torch
import torch.distributed

# Configure logging before importing first-party modules so that the MCore log
# filter is installed before those modules emit any records at import time.
from megatron.training.log_handler import CustomHandler

logging.basicConfig(handlers=[CustomHandler()], level=logging.INFO)

# ``_LEGACY_TRAIN_START_TIME`` is captured here, before the heavy first-party
# imports below, to preserve the historical "time to initialize megatron"
# measurement (kept for backwards compatibility).
_LEGACY_TRAIN_START_TIME = time.time()  # NOTE(asolergi-nv): Legacy timestamp

# First-party.
from megatron.core._rank_utils import safe_get_rank
from megatron.core import mpu, nccl_allocator, tensor_parallel
from megatron.core.datasets.data_schedule import HybridCPDataLoaderWrapper
from megatron.core.distributed import DistributedDataParallel as DDP
from megatron.core.distributed import (
    DistributedDataParallelConfig,
    TorchFullyShardedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.distributed.fsdp.mcore_fsdp_adapter import (
    FullyShardedDataParallel,
    FullyShardedDataParallelV1,
    FullyShardedDataParallelV2,
)
from megatron.core.enums import ModelType
from megatron.core.fp8_utils import correct_amax_history_if_needed
from megatron.core.full_cuda_graph import FullCudaGraphWrapper, get_shared_capture_stream
from megatron.core.inference.symmetric_memory import SymmetricMemoryManager
from megatron.core.inference.unified_memory import create_unified_mempool
from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
    is_gated_delta_net_variant,
    is_linear_attention_variant,
)
from megatron.core.msc_utils import maybe_msc
from megatron.core.num_microbatches_calculator import (
    destroy_num_microbatches_calculator,
    get_current_global_batch_size,
    get_current_running_global_batch_size,
    get_num_microbatches,
    update_num_microbatches,
)
from megatron.core.optimizer import (
    OptimizerConfig,
    ParamKey,
    get_megatron_optimizer,
    get_mup_config_overrides,
    get_standard_config_overrides,
)
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
from megatron.core.optimizer.layer_wise_optimizer import (
    LayerWiseDistributedOptimizer,
    tag_params_for_buffer_routing,
)
from megatron.core.optimizer.optimizer import param_group_identifier_keys
from megatron.core.optimizer.optimizer_cuda_graph import OptimizerCudaGraphWrapper
from megatron.core.optimizer.qk_clip import clip_qk
from megatron.core.optimizer_param_scheduler import (
    OptimizerParamScheduler,
    get_canonical_lr_for_logging,
)
from megatron.core.parallel_state import (
    create_all_gather_groups,
    destroy_global_memory_buffer,
    destroy_model_parallel,
    get_context_parallel_group,
    get_hybrid_data_context_parallel_groups,
    update_pg_timeout,
)
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator
from megatron.core.pipeline_parallel.utils import (
    is_pp_first_stage,
    is_pp_last_stage,
    is_vp_first_stage,
    is_vp_last_stage,
)
from megatron.core.process_groups_config import (
    MultiModuleProcessGroupCollection,
    ProcessGroupCollection,
)
from megatron.core.rerun_state_machine import (
    RerunDataIterator,
    RerunMode,
    destroy_rerun_state_machine,
    get_rerun_state_machine,
)
from megatron.core.resharding.refit import swap_model_weights
from megatron.core.transformer.cuda_graphs import TECudaGraphHelper
from megatron.core.transformer.experimental_attention_variant.dsa import DSAIndexerLossLoggingHelper
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.moe import upcycling_utils
from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker
from megatron.core.transformer.moe.paged_stash import PagedStashRunner
from megatron.core.transformer.moe.router_trace import get_moe_router_tracer, init_moe_router_tracer
from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper
from megatron.core.utils import (
    StragglerDetector,
    check_param_hashes_across_dp_replicas,
    configure_nvtx_profiling,
    get_attr_wrapped_model,
    get_batch_on_this_cp_rank,
    get_batch_on_this_tp_rank,
    get_model_config,
    get_pg_rank,
    get_pg_size,
    unwrap_model,
)
from megatron.training.checkpointing import (
    checkpoint_exists,
    get_loaded_iteration,
    load_checkpoint,
    save_checkpoint,
    save_grads,
)
from megatron.training.config import FaultInjectorConfig
from megatron.training.config.container import PretrainConfigContainer
from megatron.training.datasets.data_samplers import build_pretraining_data_loader
from megatron.training.initialize import (
    initialize_megatron,
    set_jit_fusion_options,
    write_args_to_tensorboard,
)
from megatron.training.utils import is_gtp_remat_active, is_hybrid_model

# Local.
from . import ft_integration, one_logger_utils
from .activation_logging import (
    disable_activation_logging,
    disable_tokens_per_expert_logging,
    enable_activation_logging,
    enable_tokens_per_expert_logging,
    save_activations,
    save_tokens_per_expert,
)
from .async_utils import maybe_finalize_async_save
from .dgrad_logging import disable_dgrad_logging, enable_dgrad_logging, save_dgrads
from .global_vars import (
    destroy_global_vars,
    get_args,
    get_energy_monitor,
    get_one_logger,
    get_signal_handler,
    get_telemetry,
    get_tensorboard_writer,
    get_timers,
    get_wandb_writer,
)
from .theoretical_memory_usage import report_theoretical_memory
from .utils import (
    append_to_progress_log,
    calc_params_l2_norm,
    check_adlr_autoresume_termination,
    is_last_rank,
    logical_and_across_model_parallel_group,
    print_rank_0,
    print_rank_last,
    reduce_max_stat_across_model_parallel_group,
    report_memory,
    to_empty_if_meta_device,
    update_use_dist_ckpt,
)

# Optional dependencies. Each is guarded so the module imports cleanly when the
# dependency is unavailable; the ``has_*``/``HAVE_*`` flags gate later usage.
try:
    from megatron.rl import rl_utils
    from megatron.rl.rl_profiling import (
        RL_LOGGABLE_TIMER_NAMES,
        initialize_rl_profiler,
        log_iteration_profile,
        shutdown_rl_profiler,
    )

    has_rl_utils = True
except ImportError:
    has_rl_utils = False

try:
    from modelopt.torch.distill.plugins.megatron import get_tensor_shapes_adjust_fn_for_distillation

    from megatron.post_training.utils import maybe_enable_modelopt

    has_nvidia_modelopt = True
except ImportError:
    has_nvidia_modelopt = False

try:
    from megatron.core.distributed import TorchFullyShardedDataParallel as torch_FSDP

    HAVE_FSDP2 = True
except ImportError:
    HAVE_FSDP2 = False

try:
    from torch_memory_saver import torch_memory_saver

    torch_memory_saver.hook_mode = "torch"
    HAVE_TORCH_MEMORY_SAVER = True
except ImportError:
    HAVE_TORCH_MEMORY_SAVER = False

# Module-level globals.
# Startup timestamps for tracking program initialization phases.
_STARTUP_TIMESTAMPS = {
    'slurm_job_start_time': None,  # Set by Slurm itself (SLURM_JOB_START_TIME env var)
    'launch_script_start': None,  # Set by the sbatch script, its own first line
    'launch_script_presrun': None,  # Set by the sbatch script, right before srun
    'program_start': None,  # Set by entry script before imports
    'main_entry': None,  # Set by entry script at start of __main__
    'pretrain_entry': None,  # Set at top of pretrain()
}

stimer = StragglerDetector()

# Per-iteration packed-sequence (THD) accumulator. The tensor holds TWO stats,
# both computed from the REAL ``cu_seqlens`` (i.e. unpadded sub-sequence lengths
# -- ``cu_seqlens_padded`` is intentionally ignored so that neither the
# per-chunk CP alignment padding nor any end-of-sequence padding is counted as
# useful work):
#   index 0 -> ``sum_i(L_i)``   (total real tokens; used for token-linear FLOPs:
#                               projections, MLP, MoE, MTP, logits)
#   index 1 -> ``sum_i(L_i**2)`` (used for core-attention FLOPs)
# Lives on GPU as fp64 so per-micro-batch updates run as fused kernels with
# no host sync; the only host sync happens once at ``consume`` time after a
# single 2-element all-reduce. ``_seqlen_stats_active`` flips to ``True`` the
# first time an update lands this iteration and is the gate that decides
# whether ``consume_*`` issues a collective at all -- unpacked BSHD runs
# never call ``update_*`` so the flag stays ``False`` and no collective fires.
_seqlen_stats_in_iteration: Optional[torch.Tensor] = None
_seqlen_stats_active: bool = False

# Only report memory for first 3 checkpoint saves.
num_checkpoints_memory_reported = 0
MAX_NUM_CHECKPOINTS_MEMORY_REPORTED = 3


def set_startup_timestamps(
    program_start=None,
    main_entry=None,
    launch_script_start=None,
    launch_script_presrun=None,
    slurm_job_start_time=None,
):
    """Set startup timestamps from the entry script.

    Call this after imports but before calling pretrain() to register
    the program start time and main entry time.

    Args:
        program_start: Timestamp captured at very start of program, before any imports.
        main_entry: Timestamp captured right after entering __main__ block.
        launch_script_start: Timestamp captured at the very top of the sbatch launch
            script, before any of its own setup work (mkdir, checkpoint symlinking,
            etc). Optional -- only meaningful if the launch script actually passes
            it through an env var; entry points that don't have no way to know this.
        launch_script_presrun: Timestamp captured by the launch script right before
            it invokes srun. The gap to program_start is container/scheduler
            overhead the launch script itself can't observe from inside Python.
        slurm_job_start_time: Slurm's own record of when the job was granted its
            allocation and started (SLURM_JOB_START_TIME env var, set by Slurm for
            every process in the job -- no cooperation from the launch script
            needed). Can be earlier than launch_script_start if there's
            prolog/scheduling overhead before the launch script's first line runs.
    """
    global _TRAIN_START_TIME, _STARTUP_TIMESTAMPS
    if program_start is not None:
        _TRAIN_START_TIME = program_start
        _STARTUP_TIMESTAMPS['program_start'] = program_start
    if main_entry is not None:
        _STARTUP_TIMESTAMPS['main_entry'] = main_entry
    if launch_script_start is not None:
        _STARTUP_TIMESTAMPS['launch_script_start'] = launch_script_start
    if launch_script_presrun is not None:
        _STARTUP_TIMESTAMPS['launch_script_presrun'] = launch_script_presrun
    if slurm_job_start_time is not None:
        _STARTUP_TIMESTAMPS['slurm_job_start_time'] = slurm_job_start_time


# OTel: module-level helpers imported once at startup.
try:
    from nemo.lens.state import is_span_group_enabled as _otel_sg_enabled
    from nemo.lens.helpers import managed_span as _otel_managed_span
    from nemo.lens.helpers import safe_set_span_attributes as _otel_safe_set_attrs
    from nemo.lens.helpers import trace_fn as _otel_trace_fn
except ImportError:
    from megatron.core.telemetry.fallbacks import is_span_group_enabled as _otel_sg_enabled
    from megatron.core.telemetry.fallbacks import managed_span as _otel_managed_span
    from megatron.core.telemetry.fallbacks import safe_set_span_attributes as _otel_safe_set_attrs
    from megatron.core.telemetry.fallbacks import trace_fn as _otel_trace_fn


# OTel: module-level state for the job-level spans -- module level rather than
# closures local to pretrain(), because train()'s own early-exit path (a few
# thousand lines away, a different function) needs to reach the same
# end-spans-then-shutdown sequence. Closures defined inside pretrain() aren't
# callable from there; these are.
#
# Structure (audit section L: NO run-long umbrellas). An incarnation emits a set of
# SEGMENTED traces rather than one tree, because a run-long root span is dead weight
# (its children live in their own traces anyway) and is LOST outright when a fault kill
# arrives before it can be ended and exported. There is deliberately no in-process
# 'workload' / 'megatron.pretrain' span: the authoritative run envelope is the
# reckoner's out-of-band slurm.job (from sacct), and every span here carries run
# identity (run_uuid / slurm.sluid / nvrx.cycle) on its RESOURCE attributes, which is
# what actually stitches the traces back together.
#
#   trace A: pre_startup            (top-level, fully backdated, CYCLE 0 / non-NVRx only:
#                                    SLURM_JOB_START_TIME -> launch_script_start, i.e. the
#                                    queue tail / prolog before our first line. Ends exactly
#                                    where the agent's nvrx.cold_start begins, so the two
#                                    tile instead of overlapping -- audit section K.)
#   trace B: megatron.startup       (own trace, fresh trace_id via an empty Context())
#            |- megatron.startup.launch_script   (backdated; plain-srun path only)
#            |- megatron.startup.container_load  (backdated; plain-srun path only)
#            |- megatron.startup.imports / .arg_parse / .inprocess_setup /
#            |  .in_job_setup / .initialize_megatron / .jit_fusion_options (backdated)
#            `- whatever runs live before train()'s loop (weight-hash check, sniff test,
#               cuda-graph setup) -- they attach to the current context
#   trace C_n: megatron.train       (one per checkpoint interval, each its own trace --
#              see _reroot_otel_interval; C_0 Links back to trace B, C_n Links to C_n-1)
#
# The launch_script/container_load children are only emitted when this process actually
# owns that window (the launch script passed presrun through AND we're not under NVRx,
# where nvrx.cold_start covers it -- see pretrain_hybrid.py). When they are emitted the
# startup trace is anchored at launch_script_start so they tile inside it; otherwise it
# is anchored at program_start.
_otel_startup_span = None
_otel_startup_span_ctx = None  # kept after the span ends, for the first interval's Link
_otel_ctx_module = None
_otel_startup_ctx_token = None
_otel_shutdown_done = False
# Trace segmentation: the steady-state loop is emitted as a series of megatron.train
# spans -- one per checkpoint interval -- instead of one run-long umbrella. Each is a
# compact [N iterations + checkpoint (+eval/sniff)] unit in its own trace, so it stays
# short and survives a fault-kill (it .end()s at the next boundary; a single umbrella
# only ends at loop exit, which a SIGKILL'd cycle never reaches). _otel_interval_span
# is the current block's root (a fresh trace_id, Linked back to the prior block -- and,
# for the first block, to this incarnation's megatron.startup trace);
# _otel_trace_interval_step is a dedicated per-loop counter (not
# `iteration`, which carries the resume offset) driving the save_interval-boundary
# re-root. Iterations/checkpoint/eval/sniff nest under it via _otel_managed_span.
_otel_interval_span = None
_otel_interval_ctx_token = None
_otel_trace_interval_step = 0
# Set once the atexit hook + SIGTERM handler have been installed, so a second
# pretrain() call in the same process can't stack duplicate registrations.
_otel_exit_hooks_installed = False


def _otel_telemetry_active():
    """True only when telemetry is initialized AND actually exporting.

    Gates the process-global side effects (the atexit hook, the SIGTERM handler) that
    exist purely to flush telemetry. With telemetry off there is nothing to flush, and
    installing them anyway would change the process's signal semantics -- a Python-level
    SIGTERM handler makes syscalls EINTR-restartable-through-Python and inserts us into
    the torchelastic/ft_launcher handler chain -- for a run that asked for none of it.

    Returns False both when nemo-lens is absent (get_telemetry() is None) and when it is
    present but disabled (the handle exists but is not exporting).
    """
    handle = get_telemetry()
    return handle is not None and bool(getattr(handle, 'is_exporting', False))


def _start_otel_job_spans(model_type, program_start):
    """Emit pre_startup and open this incarnation's megatron.startup trace.

    See the module comment above for the full picture. There are no run-long
    umbrella spans any more (audit section L): 'workload' and 'megatron.pretrain'
    used to wrap everything, but their children live in their own segmented traces,
    the goodput denominator is the reckoner's out-of-band slurm.job, and a run-long
    span is exactly the thing a fault SIGKILL destroys before it can be exported.
    So this function now does just two things:

      1. pre_startup -- fully backdated, top-level (emitted before any context is
         attached, so it roots its own trace). Only when the SLURM->launch-script gap
         is real; pretrain_hybrid.py suppresses it on NVRx restart cohorts.
      2. megatron.startup -- opened in an EMPTY Context() so it becomes the ROOT of a
         fresh trace instead of inheriting whatever is ambient, the same technique
         _reroot_otel_interval uses for the per-interval blocks. It uses the explicit
         span API (start_span + context.attach) rather than managed_span because it
         must stay open past the end of this function -- it closes in train(), just
         before the loop (see _end_otel_startup_span).

    Its backdated children (launch_script/container_load/imports/arg_parse/...) are
    already fully elapsed by the time we get here -- no tracer existed during imports
    and arg parsing, telemetry isn't initialized until parse_and_validate_args()
    returns -- so they are created-and-closed with explicit timestamps rather than
    being live spans; see _backdated_otel_span.
    """
    global _otel_startup_span, _otel_startup_span_ctx, _otel_ctx_module
    global _otel_startup_ctx_token

    if not _otel_sg_enabled('job'):
        return

    from opentelemetry import context as _otel_ctx, trace as _otel_trace
    from opentelemetry.context import Context as _OtelContext
    from nemo.lens.helpers import safe_set_span_attributes as _otel_set_attrs

    _otel_ctx_module = _otel_ctx
    _otel_tracer = get_telemetry().tracer

    launch_script_start = _STARTUP_TIMESTAMPS.get('launch_script_start')
    launch_script_presrun = _STARTUP_TIMESTAMPS.get('launch_script_presrun')
    slurm_job_start_time = _STARTUP_TIMESTAMPS.get('slurm_job_start_time')
    _program_start_ns = int(program_start * 1e9) if program_start is not None else None

    # pre_startup: the gap between Slurm marking the job started and our own launch
    # script's first line actually running -- queue tail / prolog scripts / node setup.
    # Kept as a COARSE fallback for when the out-of-band SLURM reckoner isn't available
    # (that reconstructs this authoritatively from sacct). Emitted here, before anything
    # is attached to the context, so it is a top-level span in its own trace.
    #
    # It ends at launch_script_start, which on cycle 0 is the sbatch script's first line
    # -- the exact instant the NVRx agent starts nvrx.cold_start -- so pre_startup and
    # cold_start TILE. (They used to overlap by the whole cold-start window because
    # pretrain_hybrid.py overrode launch_script_start with the worker-spawn stamp on
    # every cohort including cycle 0; that override is now restart-only. Audit sect. K.)
    # On restart cohorts pretrain_hybrid.py drops slurm_job_start_time entirely, so the
    # guard below skips pre_startup: the agent's restart tree owns that window instead.
    if (
        launch_script_start is not None
        and slurm_job_start_time is not None
        and slurm_job_start_time < launch_script_start
    ):
        _backdated_otel_span('pre_startup', slurm_job_start_time, launch_script_start)

    # Do we own the pre-Python launch window (launch script start -> interpreter up)?
    # Only on the plain-srun path: the launch script has to have passed its pre-srun
    # stamp through, AND we must not be under NVRx (where the agent's nvrx.cold_start /
    # restart-cycle spans already describe that window -- pretrain_hybrid.py signals
    # this by dropping presrun on every NVRx cohort). When we do own it, fold it into
    # the startup trace: anchor the trace at launch_script_start so launch_script and
    # container_load tile inside it ahead of imports. Otherwise the startup trace starts
    # at program_start, as before, and neither child is emitted.
    _fold_launch_phases = (
        launch_script_start is not None
        and launch_script_presrun is not None
        and program_start is not None
        and launch_script_start <= launch_script_presrun <= program_start
    )
    _startup_start_ns = (
        int(launch_script_start * 1e9) if _fold_launch_phases else _program_start_ns
    )

    # Empty Context() -> no parent -> megatron.startup roots its OWN trace.
    _otel_startup_span = _otel_tracer.start_span(
        "megatron.startup", context=_OtelContext(), start_time=_startup_start_ns
    )
    _otel_mark_goodput(_otel_startup_span)
    # model_type used to ride on megatron.pretrain; keep it on the startup root now that
    # the umbrella is gone, so it is still queryable per incarnation.
    _otel_set_attrs(_otel_startup_span, {'megatron.model_type': str(model_type)})
    try:
        _otel_startup_span_ctx = _otel_startup_span.get_span_context()
    except Exception:  # noqa: BLE001 -- telemetry must never break training
        _otel_startup_span_ctx = None
    _otel_startup_ctx_token = _otel_ctx.attach(_otel_trace.set_span_in_context(_otel_startup_span))

    if _fold_launch_phases:
        _backdated_otel_span(
            'megatron.startup.launch_script', launch_script_start, launch_script_presrun
        )
        _backdated_otel_span(
            'megatron.startup.container_load', launch_script_presrun, program_start
        )


def _otel_mark_goodput(span):
    """Mark a manually created span as a goodput boundary.

    The job/startup structural spans are created via the explicit start_span API
    (they must outlive the function that opens them), so they cannot pass
    attributes through a managed_span call and are stamped by hand instead.
    Absent this attribute a span is profiling-only, which is the default for
    everything except the resiliency-accounting boundaries.
    """
    try:
        span.set_attribute('is_goodput_span', True)
    except Exception:  # noqa: BLE001 -- telemetry must never break training
        pass


def _backdated_otel_span(name, start, end):
    """Record an already-elapsed phase as a closed span with explicit timestamps."""
    if not _otel_sg_enabled('job') or start is None or end is None:
        return
    _otel_tracer = get_telemetry().tracer
    _s = _otel_tracer.start_span(name, start_time=int(start * 1e9))
    _otel_mark_goodput(_s)
    _s.end(end_time=int(end * 1e9))


def _end_otel_startup_span():
    """End the megatron.startup trace root and detach its token.

    This closes (and therefore exports) the whole startup trace. Safe to call more
    than once -- the None check makes it idempotent, since it may run once explicitly
    inside train() (after the preamble, before the loop) and again later via
    _end_otel_job_spans() if that first call never happened (early crash).

    _otel_startup_span_ctx is deliberately NOT cleared: the first interval block Links
    back to the startup trace, and by then the span itself is gone.
    """
    global _otel_startup_span
    if _otel_startup_span is not None:
        try:
            if _otel_ctx_module is not None and _otel_startup_ctx_token is not None:
                _otel_ctx_module.detach(_otel_startup_ctx_token)
        except Exception:  # noqa: BLE001 -- telemetry must never break training
            pass
        try:
            _otel_startup_span.end()
        except Exception:  # noqa: BLE001
            pass
        _otel_startup_span = None


def _start_otel_train_span():
    """Prepare the steady-state training loop's tracing.

    The loop is emitted as one megatron.train span per checkpoint interval rather
    than a single umbrella span; see the trace-segmentation note at the top of this
    module for why. This just resets the per-interval counter; the first loop pass
    opens the first megatron.train interval.

    Called after _end_otel_startup_span() (so the startup trace is closed and detached;
    the interval blocks root their own traces regardless, and the first one Links back
    to the startup trace via the span context kept in _otel_startup_span_ctx).
    """
    global _otel_trace_interval_step
    if not _otel_sg_enabled('job'):
        return
    _otel_trace_interval_step = 0  # restart the per-interval trace counter for this loop


def _reroot_otel_interval():
    """Close the current interval span and open the next as a new megatron.train
    span in a new trace (empty context -> fresh trace_id). See the trace-segmentation
    note at the top of this module for why the loop is segmented this way.

    Each interval is Linked to the prior interval (a chain), and the FIRST interval of
    this incarnation is Linked to its megatron.startup trace instead -- so a backend can
    walk startup -> block -> block -> ... even though they are all separate traces. There
    is no run-long span to link to any more (audit section L); run identity
    (run_uuid/sluid/nvrx.cycle) rides the resource attrs on every span, which is the
    primary correlation key. Iterations/checkpoint/eval/sniff nest under the block
    because they use _otel_managed_span, which attaches to the current context."""
    global _otel_interval_span, _otel_interval_ctx_token
    if get_telemetry() is None or not _otel_sg_enabled('job'):
        return
    from opentelemetry import context as _octx, trace as _otr
    from opentelemetry.context import Context
    from opentelemetry.trace import Link
    prev = _otel_interval_span
    links = []
    try:
        if prev is not None:
            links.append(Link(prev.get_span_context()))
        elif _otel_startup_span_ctx is not None:
            # First block of this incarnation -> chain it to the startup trace.
            links.append(Link(_otel_startup_span_ctx))
    except Exception:  # noqa: BLE001
        links = []
    # Close the prior interval (detach its context, end the span) before opening the next.
    if prev is not None:
        try:
            if _otel_interval_ctx_token is not None:
                _octx.detach(_otel_interval_ctx_token)
        except Exception:  # noqa: BLE001
            pass
        try:
            prev.end()
        except Exception:  # noqa: BLE001
            pass
        _otel_interval_span = None
        _otel_interval_ctx_token = None
    try:
        sp = get_telemetry().tracer.start_span(
            'megatron.train', context=Context(), links=links
        )
        _otel_mark_goodput(sp)
        _otel_interval_span = sp
        _otel_interval_ctx_token = _octx.attach(_otr.set_span_in_context(sp))
    except Exception:  # noqa: BLE001
        _otel_interval_span = None
        _otel_interval_ctx_token = None


def _maybe_reroot_otel_interval():
    """Called once at the top of each training-loop pass. Re-roots the trace at each
    checkpoint-frequency boundary using a dedicated counter (so groups are clean
    save_interval-sized chunks regardless of the resume offset in `iteration`).
    save_interval<=0 (no checkpointing) -> never re-roots (single trace, as before)."""
    global _otel_trace_interval_step
    freq = getattr(get_args(), 'save_interval', None) or 0
    if freq > 0 and (_otel_trace_interval_step % freq == 0):
        _reroot_otel_interval()
    _otel_trace_interval_step += 1


def _end_otel_interval_span():
    """Close the final interval root (loop exit / teardown). Idempotent."""
    global _otel_interval_span, _otel_interval_ctx_token
    if _otel_interval_span is not None:
        try:
            from opentelemetry import context as _octx
            if _otel_interval_ctx_token is not None:
                _octx.detach(_otel_interval_ctx_token)
        except Exception:  # noqa: BLE001
            pass
        try:
            _otel_interval_span.end()
        except Exception:  # noqa: BLE001
            pass
        _otel_interval_span = None
        _otel_interval_ctx_token = None


def _end_otel_train_span():
    """Close the final megatron.train interval span. Idempotent -- called on
    train()'s normal return and via _end_otel_job_spans() on the sys.exit() path
    (before the telemetry shutdown, so the last block survives)."""
    _end_otel_interval_span()


def _end_otel_job_spans():
    """Close whatever is still open (the current interval block, and startup if a
    crash/early-exit skipped its normal end point), then flush+shutdown telemetry.

    Since the run-long umbrellas are gone (audit section L) this is a short list --
    which is the point: there is no longer a long-lived span that a fault SIGKILL can
    destroy in the window between "training died" and "exporter flushed".

    This is the single place that does all of this, and every exit path --
    pretrain()'s own normal completion, train()'s early-exit
    (--exit-interval/duration/signal, which calls sys.exit() directly from inside
    train(), never returning control to the rest of pretrain()), the uncaught-exception
    path, the hard-terminate SIGTERM handler, and the atexit fallback -- must call this
    same function rather than reimplementing the sequence. Ending the spans before
    shutdown() matters: shutdown() flushes and tears down the provider, so anything
    ended afterward has nowhere left to export into. Safe to call more than once (e.g.
    once from train()'s early exit, again via atexit) -- span-ending is idempotent via
    the None checks in the two helpers, and the shutdown() call is separately guarded
    so it only actually fires once.
    """
    global _otel_shutdown_done

    _end_otel_train_span()  # end innermost first (train() sys.exit() path)
    _end_otel_startup_span()

    if not _otel_shutdown_done:
        _otel_handle = get_telemetry()
        if _otel_handle is not None:
            _otel_handle.shutdown()
        _otel_shutdown_done = True


def destroy_global_state():
    destroy_global_vars()
    destroy_num_microbatches_calculator()
    destroy_global_memory_buffer()
    SymmetricMemoryManager.destroy()
    destroy_model_parallel()
    destroy_rerun_state_machine()


def print_datetime(string, override_timestamp=None):
    """Note that this call will sync across all ranks. Use override_timestamp if provided;
       otherwise use current timestamp."""
    torch.distributed.barrier()
    if override_timestamp is None:
        time_str = datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')
    else:
        time_str = datetime.fromtimestamp(override_timestamp).strftime('%Y-%m-%d %H:%M:%S.%f')
    print_rank_0(f'[{string}] datetime: {time_str} ')


def update_seqlen_stats_from_cu_seqlens(cu_seqlens):
    """Add ``sum(L_i)`` and ``sum(L_i ** 2)`` from one micro-batch's REAL ``cu_seqlens``.

    Args:
        cu_seqlens: 1-D ``int32`` tensor of cumulative REAL (unpadded) sequence
            lengths (``[0, L_1, L_1 + L_2, ...]``). Pass the unpadded
            ``cu_seqlens`` rather than ``cu_seqlens_padded`` so the FLOPs
            metric reports useful work only, not work on CP-alignment or
            end-of-sequence padding tokens.

    Every rank in the same data-parallel group sees the same ``cu_seqlens`` (it is
    broadcast across TP/CP/PP). The per-micro-batch reduction stays on device --
    no ``.item()`` -- so this is a fused kernel launch with no host sync. The
    ``_seqlen_stats_active`` flag is set so that ``consume_*`` knows to issue
    the all-reduce; BSHD callers that never invoke this function leave the
    flag at ``False`` and pay zero collective cost.
    """
    global _seqlen_stats_in_iteration, _seqlen_stats_active
    if cu_seqlens is None or cu_seqlens.numel() < 2:
        return
    # Pin the accumulator to the current CUDA device when available so the
    # eventual all-reduce can use NCCL even if a caller passed a CPU tensor
    # (e.g. unit tests). Production always supplies a CUDA tensor.
    if _seqlen_stats_in_iteration is None:
        device = (
            torch.device(f'cuda:{torch.cuda.current_device()}')
            if torch.cuda.is_available()
            else cu_seqlens.device
        )
        _seqlen_stats_in_iteration = torch.zeros(2, dtype=torch.float64, device=device)
    seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).to(
        device=_seqlen_stats_in_iteration.device, dtype=torch.float64
    )
    _seqlen_stats_in_iteration[0] += seqlens.sum()
    _seqlen_stats_in_iteration[1] += (seqlens * seqlens).sum()
    _seqlen_stats_active = True


def consume_seqlen_stats_in_iteration() -> Tuple[Optional[float], Optional[float]]:
    """Read, reset and globally reduce the per-iteration packed-sequence stats.

    Returns:
        ``(total_real_tokens, seqlen_squared_sum)`` summed across the whole
        global batch (all DP ranks combined) for packed (THD) iterations.
        Both are ``None`` if no update happened this iteration -- the BSHD
        path -- so the caller forwards them straight to
        ``num_floating_point_operations`` and takes its closed-form
        ``batch_size * seq_length`` / ``batch_size * seq_length ** 2`` defaults
        without paying for a collective.

        ``sum(L_i)`` and ``sum(L_i ** 2)`` are mathematically independent (you
        cannot derive one from the other), so both must be tracked. Computing
        them in tandem costs essentially nothing: the per-micro-batch updates
        fuse onto one device tensor and consume issues a single 2-element
        all-reduce.

    Sync cost: exactly ONE all-reduce of a 2-element ``float64`` tensor and ONE
    host sync (``tolist()``). Skipped entirely when the flag is ``False``.

    All ranks within one DP group accumulated identical values (``cu_seqlens`` is
    replicated across TP/CP/PP); the world all-reduce therefore overcounts by a
    factor of ``TP * CP * PP``, which we divide out.
    """
    global _seqlen_stats_in_iteration, _seqlen_stats_active
    if not _seqlen_stats_active:
        # BSHD path: never allocated the tensor; tell the caller to use the
        # closed-form defaults.
        return None, None
    t = _seqlen_stats_in_iteration
    if torch.distributed.is_initialized() and mpu.model_parallel_is_initialized():
        torch.distributed.all_reduce(t)
        tp_size = max(mpu.get_tensor_model_parallel_world_size(), 1)
        cp_size = max(mpu.get_context_parallel_world_size(), 1)
        pp_size = max(mpu.get_pipeline_model_parallel_world_size(), 1)
        dedup = tp_size * cp_size * pp_size
    else:
        # No model-parallel state -> treat as a single rank, no reduction.
        # This is the standalone unit-test path; production always initializes mpu.
        dedup = 1
    # Single host sync drains both stats at once.
    total_real_tokens, seqlen_squared_sum = t.tolist()
    # Reset for the next iteration. Keep the tensor allocated so subsequent
    # iterations reuse it without reallocating.
    t.zero_()
    _seqlen_stats_active = False
    return total_real_tokens / dedup, seqlen_squared_sum / dedup


def num_floating_point_operations(
    args,
    batch_size,
    seqlen_squared_sum_in_batch=None,
    total_real_tokens_in_batch=None,
):
    """Compute the number of floating-point operations for one global batch.

    Args:
        args: Megatron args (provides hidden size, num layers, seq length, ...).
        batch_size: Global batch size (samples per iteration). Only used to
            compute the default token counts for the BSHD path -- with THD
            both ``total_real_tokens_in_batch`` and ``seqlen_squared_sum_in_batch``
            are passed in explicitly and ``batch_size`` is irrelevant.
        seqlen_squared_sum_in_batch: ``sum_i(L_i ** 2)`` across all REAL
            (unpadded) sub-sequences in the global batch. Drives the
            core-attention L^2 FLOPs. For BSHD this equals
            ``batch_size * args.seq_length ** 2`` (the default when ``None``).
            For THD it is the actual ragged sum and is strictly less than the
            BSHD value, reflecting per-chunk causal masking AND the fact that
            padding tokens do not contribute to attention scores.
        total_real_tokens_in_batch: ``sum_i(L_i)``, the TOTAL REAL (unpadded)
            token count across the global batch. Drives all token-linear FLOPs
            (QKV+output projections, MLP, MoE, MTP norms/projs, logits). For
            BSHD this equals ``batch_size * args.seq_length`` (the default when
            ``None``). For THD it equals the real token count -- strictly less
            than ``batch_size * args.seq_length`` whenever the dataloader added
            CP-alignment padding or end-of-sequence padding, so neither kind of
            padding shows up in the reported FLOPs.
    """
    # Defaults: BSHD layout assumption (full causal mask, every sample length =
    # seq_length, no padding). For BSHD ``total_real_tokens = batch * s`` and
    # ``seqlen_squared_sum = batch * s^2`` recover the original closed-form.
    if seqlen_squared_sum_in_batch is None:
        seqlen_squared_sum_in_batch = batch_size * args.seq_length * args.seq_length
    if total_real_tokens_in_batch is None:
        total_real_tokens_in_batch = batch_size * args.seq_length

    def mlp_layer_flops(total_tokens, hidden_size, expansion=4.0, swiglu=False):
        """Calculate FLOPs for an MLP layer."""
        scale_factor = 3.0 / 2.0 if swiglu else 1.0
        return 4 * expansion * scale_factor * total_tokens * hidden_size**2

    def moe_layer_flops(total_tokens, hidden_size, moe_ffn_hidden_size,
                        shared_expert_ffn_hidden_size, num_experts_routed_to,
                        moe_latent_size=None, swiglu=False):
        """Calculate FLOPs for an MoE layer."""
        scale_factor = 3.0 / 2.0 if swiglu else 1.0
        if moe_latent_size is None:
            routed_flops = (4 * total_tokens * hidden_size *
                            moe_ffn_hidden_size * num_experts_routed_to * scale_factor)
        else:
            # Routed experts run on moe_latent_size.
            routed_flops = (4 * total_tokens * moe_latent_size *
                            moe_ffn_hidden_size * num_experts_routed_to * scale_factor)
            # Up proj and down proj.
            routed_flops += (4 * total_tokens * hidden_size * moe_latent_size)
        shared_flops = 4 * total_tokens * hidden_size * shared_expert_ffn_hidden_size * scale_factor
        return routed_flops + shared_flops

    def attn_layer_flops(
        total_tokens, seqlen_squared_sum, hidden_size, num_heads, gqa=True,
        gqa_groups=8, kv_channels=None,
    ):
        """Calculate FLOPs for an attention layer.

        Two parts:
          - Token-linear (QKV + output projections): scales with ``total_tokens``
            (= ``sum_i(L_i)``). Padding tokens are excluded by passing the real
            (unpadded) token count.
          - Core attention (``QK^T`` and ``softmax(QK^T) V``): scales with
            ``seqlen_squared_sum`` (= ``sum_i(L_i ** 2)``).
        """
        p = (kv_channels * num_heads / hidden_size) if kv_channels else 1
        g = gqa_groups if gqa else num_heads
        # 4 * total_tokens * h * p * (h + h*(g/n)): QKV + output projections (fwd*3, with FMA*2).
        # 2 * sum(L^2) * h * p: core attention (causal mask -> /2 cancels with FMA *2).
        return (
            4 * total_tokens * hidden_size * p
            * (hidden_size + hidden_size * (g / num_heads))
            + 2 * seqlen_squared_sum * hidden_size * p
        )

    def mamba_layer_flops(total_tokens, hidden_size, state_dim=16,
                          head_dim=64, num_groups=1, num_heads=128):
        """Calculate FLOPs for a Mamba layer."""
        # Note (rwaleffe): flops estimate for scan should be updated based on new SSD kernels,
        # but small percent of overall layer flops
        d_in = 2 * hidden_size
        if num_heads:
            nheads = num_heads
        else:
            nheads = d_in // head_dim
        return (
            (
                2
                * total_tokens
                * hidden_size
                * (2 * d_in + 2 * num_groups * state_dim + nheads)
            )  # in_proj
            + (7 * total_tokens * d_in * state_dim)  # scan
            + (2 * total_tokens * d_in * hidden_size)  # out_proj
        )

    def gated_delta_product_layer_flops(
        total_tokens,
        hidden_size,
        num_householder,
        state_dim=128,
        head_dim=64,
        num_groups=8,
        num_heads=None,
        conv_kernel_dim=4,
    ):
        """Calculate FLOPs for a Gated Delta Product (GDP) layer."""
        if num_heads is None:
            d_inner = 2 * hidden_size
            num_heads = d_inner // head_dim
        else:
            d_inner = num_heads * head_dim
        in_proj_dim = (
            d_inner * (1 + num_householder)
            + num_groups * state_dim * (1 + num_householder)
            + num_heads * (1 + num_householder)
        )
        conv_dim = d_inner * num_householder + num_groups * state_dim * (1 + num_householder)
        non_core_flops = 2 * total_tokens * (
            hidden_size * in_proj_dim
            + conv_kernel_dim * conv_dim
            + d_inner * hidden_size
        )
        # Best-case recurrent GDP core estimate. The FLA chunk kernel may do additional
        # score/solve/WY work, but this keeps the implementation-agnostic lower bound explicit.
        core_flops = (4 * num_householder + 3) * total_tokens * d_inner * state_dim
        return non_core_flops + core_flops

    def gdn_layer_flops(total_tokens, hidden_size,
                        qk_head_dim=128, v_head_dim=128,
                        num_qk_heads=16, num_v_heads=32,
                        conv_kernel_dim=4, use_gdn2=False):
        """Calculate FLOPs for a Gated Delta Net (GDN) layer."""
        qk_dim = qk_head_dim * num_qk_heads
        v_dim = v_head_dim * num_v_heads
        if use_gdn2:
            # GDN2 in_proj: hidden_size -> (4*qk_dim + 3*v_dim) for q, k, v, z, f, b, w
            in_proj_dim = 4 * qk_dim + 3 * v_dim
        else:
            # GDN in_proj: hidden_size -> (2*qk_dim + 2*v_dim + 2*num_v_heads)
            in_proj_dim = 2 * qk_dim + 2 * v_dim + 2 * num_v_heads
        return (
            2 * total_tokens * (
                # in_proj
                hidden_size * in_proj_dim
                # conv1d
                + conv_kernel_dim * (2 * qk_dim + v_dim)
                # gated delta rule: KK^T, VK^T, S(a(I-bKK^T)), and SQ
                + num_v_heads * (v_head_dim ** 2) * 4
                # out_proj: v_dim -> hidden_size
                + hidden_size * v_dim
            )
        )

    def hybrid_flops(total_tokens, seqlen_squared_sum, hidden_size,
                     num_attn_layers, num_mamba_layers, num_mlp_layers, num_moe_layers,
                     gdp_num_householder,
                     num_gdn_layers=0,
                     mamba_state_dim=128, mamba_head_dim=64,
                     mamba_num_groups=8, mamba_num_heads=128,
                     num_attn_heads=32, gqa=True,
                     gqa_groups=8, kv_channels=None,
                     mlp_expansion=4.0, swiglu=False,
                     moe_latent_size=None,
                     moe_ffn_hidden_size=2048, shared_expert_ffn_hidden_size=2048, num_experts_routed_to=1,
                     use_gated_delta_product=False,
                     gdn_qk_head_dim=128, gdn_v_head_dim=128,
                     gdn_num_qk_heads=16, gdn_num_v_heads=32,
                     gdn_conv_kernel_dim=4, gdn_use_gdn2=False,
                     vocab_size=256000, mtp_num_layers=0):
        """Calculate total FLOPs for the hybrid model."""
        mamba_flops = (
            gated_delta_product_layer_flops(total_tokens, hidden_size,
                                            gdp_num_householder,
                                            mamba_state_dim, mamba_head_dim,
                                            mamba_num_groups, mamba_num_heads)
            if use_gated_delta_product
            else mamba_layer_flops(total_tokens, hidden_size,
                                   mamba_state_dim, mamba_head_dim,
                                   mamba_num_groups, mamba_num_heads)
        )
        flops_fwd = (
                num_attn_layers * attn_layer_flops(total_tokens, seqlen_squared_sum,
                                                   hidden_size, num_attn_heads, gqa,
                                                   gqa_groups, kv_channels) +
                num_mlp_layers * mlp_layer_flops(total_tokens, hidden_size,
                                                 mlp_expansion, swiglu) +
                num_mamba_layers * mamba_flops +
                num_moe_layers * moe_layer_flops(total_tokens, hidden_size, moe_ffn_hidden_size,
                                                 shared_expert_ffn_hidden_size, num_experts_routed_to,
                                                 moe_latent_size, swiglu) +
                num_gdn_layers * gdn_layer_flops(total_tokens, hidden_size,
                                                  gdn_qk_head_dim, gdn_v_head_dim,
                                                  gdn_num_qk_heads, gdn_num_v_heads,
                                                  gdn_conv_kernel_dim, gdn_use_gdn2) +
                (2 * total_tokens * hidden_size * vocab_size * (1 + mtp_num_layers))  # logits computation
        )
        return flops_fwd * 3

    def transformer_flops():
        """Calculate FLOPs for a standard Transformer model."""
        # TODO(helenn/dnarayanan): Refactor this to reuse the helper methods.
        # Group Query Attention.
        if not args.group_query_attention:
            args.num_query_groups = args.num_attention_heads
        # MoE.
        if args.num_experts is None:
            # Every Transformer MLP is dense.
            num_dense_layers = args.num_layers
            num_moe_layers = 0
            num_experts_routed_to = 0
            last_layer_is_moe = 0
        else:
            # Calculate number of dense and MoE Transformer MLPs.
            if isinstance(args.moe_layer_freq, int):
                moe_layer_pattern = [
                    1 if (i % args.moe_layer_freq == 0) else 0 for i in range(args.num_layers)
                ]
            elif isinstance(args.moe_layer_freq, list):
                moe_layer_pattern = args.moe_layer_freq
            else:
                raise RuntimeError("Illegal --moe-layer-freq argument provided!")
            assert len(moe_layer_pattern) == args.num_layers, (
                f"Invalid length of moe_layer_pattern: {len(moe_layer_pattern)}, "
                f"expected {args.num_layers}, "
                f"current moe layer pattern: {args.moe_layer_freq}"
            )
            num_moe_layers = sum(moe_layer_pattern)  # Number of 1s in `moe_layer_pattern`.
            num_dense_layers = args.num_layers - num_moe_layers
            num_experts_routed_to = args.moe_router_topk
            last_layer_is_moe = moe_layer_pattern[-1]

        if args.mtp_num_layers is not None:
            mtp_num_layers = args.mtp_num_layers
            num_moe_layers += last_layer_is_moe * mtp_num_layers
            num_dense_layers += (1 - last_layer_is_moe) * mtp_num_layers
            num_layers = args.num_layers + mtp_num_layers
        else:
            mtp_num_layers = 0
            num_layers = args.num_layers

        moe_ffn_hidden_size = (
            args.moe_ffn_hidden_size
            if args.moe_ffn_hidden_size is not None
            else args.ffn_hidden_size
        )
        moe_latent_size = args.moe_latent_size
        shared_expert_ffn_hidden_size = (
            0
            if args.moe_shared_expert_intermediate_size is None
            else args.moe_shared_expert_intermediate_size
        )

        # - 3x: Each GEMM in the model needs to be performed 3 times (forward pass,
        #       backward wgrad [weight gradient], backward dgrad [data gradient]).
        forward_backward_expansion_factor = 3
        # - 2x: A GEMM of a m*n tensor with a n*k tensor requires 2mnk floating-point operations.
        fma_expansion_factor = 2
        # - 3x (SwiGLU enabled): h->2*ffn_h GEMM and ffn_h->h GEMM are stacked.
        # - 2x (SwiGLU disabled): h->ffn_h GEMM and ffn_h->h GEMM are stacked.
        ffn_expansion_factor = 3 if args.swiglu else 2

        # self_attn is split into a token-linear part (projections, multiplied by
        # ``batch_size * args.seq_length`` like all other token-linear work) and a
        # core-attention part (``QK^T`` and ``softmax(QK^T) V``) whose compute scales
        # with ``sum_i(L_i ** 2)`` instead of ``batch * seq^2``. With unpacked BSHD the
        # two are equal, so the BSHD result is unchanged. With THD/packed sequences
        # ``seqlen_squared_sum_in_batch`` is strictly smaller, reflecting the per-chunk
        # causal mask of packed attention.
        if args.multi_latent_attention:
            assert not args.group_query_attention
            '''
            Basic arithmetic
            let B is batch size, s is seq_len, h is embedding dim,
            for one self_attnetion block (prenorm is not included)
            qkv projection:  6Bsh^2
            attn:            2Bs^2h
            attn over value: 2Bs^2h
            oproj:           2Bsh^2

            references
            https://arxiv.org/abs/2305.10403
            https://arxiv.org/abs/2205.05198
            '''
            ## MLA
            if args.q_lora_rank is None:
                q_term = (
                    args.hidden_size
                    * args.num_attention_heads
                    * (args.qk_head_dim + args.qk_pos_emb_head_dim)
                )
            else:
                q_term = args.q_lora_rank * (
                    args.hidden_size
                    + args.num_attention_heads * (args.qk_head_dim + args.qk_pos_emb_head_dim)
                    + 1
                )
            # Token-linear part of MLA self-attention (lora projs, kv proj, RoPE, output proj).
            standard_self_attn_term = (
                forward_backward_expansion_factor
                * fma_expansion_factor
                * (
                    ## q lora + rope + q norm
                    q_term
                    ## kv lora + rope + kv norm
                    + args.kv_lora_rank
                    * (
                        args.hidden_size
                        + args.num_attention_heads * (args.qk_head_dim + args.v_head_dim)
                        + 1
                    )
                    + args.hidden_size * args.qk_pos_emb_head_dim
                    ## o proj
                    + (args.num_attention_heads * args.v_head_dim) * args.hidden_size
                )
            )
            # Core-attention (L^2) part: ``QK^T`` and ``(softmax(QK^T)) V``. The
            # ``/2`` accounts for the causal mask and the ``*2`` cancels it via FMA.
            standard_self_attn_core_term = (
                forward_backward_expansion_factor
                * fma_expansion_factor
                * (
                    args.num_attention_heads
                    * (args.qk_head_dim + args.qk_pos_emb_head_dim)
                    / 2
                    + args.num_attention_heads * args.v_head_dim / 2
                )
            )

        else:
            ## MHA or GQA
            query_projection_size = args.kv_channels * args.num_attention_heads
            key_projection_size = args.kv_channels * args.num_query_groups
            value_projection_size = args.kv_channels * args.num_query_groups
            gate_projection_size = query_projection_size if args.attention_output_gate else 0
            # Token-linear part of self-attention (QKV projection + output projection).
            standard_self_attn_term = (
                forward_backward_expansion_factor
                * fma_expansion_factor
                * (
                    ## qkv proj
                    args.hidden_size
                    * (
                        query_projection_size
                        + key_projection_size
                        + value_projection_size
                        + gate_projection_size
                    )
                    ## out proj
                    + query_projection_size
                    * args.hidden_size
                )
            )
            # Core-attention (L^2) part: ``QK^T`` and ``(softmax(QK^T)) V``.
            standard_self_attn_core_term = (
                forward_backward_expansion_factor
                * fma_expansion_factor
                * query_projection_size
                / 2  # causal mask (only half of the mask is non-zero)
                * 2  # QK^T and (QK^T)V
            )

        if is_linear_attention_variant(args.experimental_attention_variant):
            # Calculate number of dense and MoE Transformer MLPs.
            if isinstance(args.linear_attention_freq, int):
                linear_attention_pattern = [
                    # [1,1,...,1,0,1,1,...,1,0,...]
                    0 if ((i + 1) % args.linear_attention_freq == 0)
                    else 1 for i in range(num_layers)
                ]
            elif isinstance(args.linear_attention_freq, list):
                linear_attention_pattern = args.linear_attention_freq
                assert len(linear_attention_pattern) == num_layers, (
                    f"Invalid length of linear_attention_pattern: {len(linear_attention_pattern)}, "
                    f"expected {num_layers}, "
                    f"current linear attention pattern: {args.linear_attention_freq}"
                )
            elif args.linear_attention_freq is None:
                # This should be caught by config validation, but raise here as a safety check
                raise ValueError(
                    f"Linear attention type {args.experimental_attention_variant} is specified "
                    "but linear_attention_freq is None. "
                    "Please set linear_attention_freq to specify the LA/SDPA layer pattern."
                )
            else:
                raise ValueError(
                    f"Invalid linear_attention_freq: {type(args.linear_attention_freq)},"
                    f" {args.linear_attention_freq}"
                )
            num_linear_attention_layers = sum(linear_attention_pattern)
            num_standard_attention_layers = num_layers - num_linear_attention_layers

            if is_gated_delta_net_variant(args.experimental_attention_variant):
                # Calculate the FLOPs for the gated delta net attention.
                qk_head_dim = args.linear_key_head_dim
                v_head_dim = args.linear_value_head_dim
                num_qk_heads = args.linear_num_key_heads
                num_v_heads = args.linear_num_value_heads
                qk_dim = qk_head_dim * num_qk_heads
                v_dim = v_head_dim * num_v_heads
                if args.experimental_attention_variant == "gdn2":
                    # GDN2 in_proj: q, k, v, z, f, b, w
                    in_proj_dim = 4 * qk_dim + 3 * v_dim
                else:
                    in_proj_dim = 2 * qk_dim + 2 * v_dim + 2 * num_v_heads
                linear_self_attn_term = (
                    forward_backward_expansion_factor
                    * fma_expansion_factor
                    * (
                        ## in proj
                        args.hidden_size
                        * in_proj_dim
                        ## conv1d
                        + args.linear_conv_kernel_dim
                        * (2 * qk_dim + v_dim)
                        ## gated delta rule
                        + num_v_heads
                        * (v_head_dim ** 2)
                        * 4  # KK^T, VK^T, S(a(I-bKK^T)), and SQ
                        ## out proj
                        + args.hidden_size
                        * v_dim
                    )
                )
            else:
                raise ValueError(
                    "Invalid experimental_attention_variant: "
                    f"{args.experimental_attention_variant}"
                )
        else:
            num_linear_attention_layers = 0
            linear_self_attn_term = 0
            num_standard_attention_layers = num_layers

        # Token-linear self-attention work (projections + linear-attention variants).
        # Linear attention has no L^2 term, so it stays entirely token-linear.
        self_attn_term = (
            linear_self_attn_term * num_linear_attention_layers
            + standard_self_attn_term * num_standard_attention_layers
        )
        # Core attention (L^2) FLOPs per standard-attention layer.
        self_attn_core_term = standard_self_attn_core_term * num_standard_attention_layers

        # Token-linear FLOPs scale with the real (unpadded) token count.
        # For BSHD this falls back to ``batch_size * seq_length`` (no padding).
        total_floating_point_operations = (
            total_real_tokens_in_batch
            * (
                # MLP
                forward_backward_expansion_factor
                * fma_expansion_factor
                * args.hidden_size
                * (
                    # dense layer (deepseek v2, v3 style)
                    (args.ffn_hidden_size * ffn_expansion_factor)
                    * num_dense_layers
                    # routed experts
                    + (
                        (moe_ffn_hidden_size * num_experts_routed_to * ffn_expansion_factor)
                        if moe_latent_size is None
                        else (
                            (
                                moe_ffn_hidden_size
                                * num_experts_routed_to
                                * ffn_expansion_factor
                                * moe_latent_size
                                / args.hidden_size
                            )  # Routed experts run on moe_latent_size.
                            + 2 * moe_latent_size  # Up proj and down proj.
                        )
                    )
                    * num_moe_layers
                    # Shared Experts.
                    + (shared_expert_ffn_hidden_size * ffn_expansion_factor)
                    * num_moe_layers
                )
                # Self Attention (token-linear part).
                + self_attn_term
                # MTP norms and proj
                + forward_backward_expansion_factor
                * fma_expansion_factor
                * mtp_num_layers
                * (
                    # MTP eh norm + final nrom
                    3 * args.hidden_size
                    # MTH eh proj
                    + 2 * args.hidden_size * args.hidden_size
                )
                # Logit.
                + forward_backward_expansion_factor
                * fma_expansion_factor
                * args.hidden_size
                * args.padded_vocab_size
                * (mtp_num_layers + 1)  # MTP + final logit
            )
            # Self Attention (core L^2 part). For BSHD the default
            # ``seqlen_squared_sum_in_batch = batch_size * seq_length^2`` recovers the
            # original ``batch * seq^2 * Q_proj`` term; for THD this uses the actual
            # ragged ``sum(L_i^2)`` and so undercounts the BSHD figure correctly.
            + seqlen_squared_sum_in_batch * self_attn_core_term
        )
        return total_floating_point_operations

    def _uses_gated_delta_product_spec(args):
        """Return True when the selected hybrid stack spec swaps Mamba layers to GDP."""
        def _split_spec_part(part):
            return str(part).replace('[', ' ').replace(']', ' ').replace(',', ' ').split()

        spec = getattr(args, 'spec', None)
        if spec is None:
            return False
        if isinstance(spec, str):
            spec_parts = _split_spec_part(spec)
        else:
            spec_parts = []
            for part in spec:
                spec_parts.extend(_split_spec_part(part))
        if not spec_parts:
            return False
        return spec_parts[-1] in {'gdp_stack_spec', 'gated_delta_product_stack_spec'}

    # Main entrypoint for FLOPs calculation.
    if is_hybrid_model(args):
        # Calculate the number of each type of layer.
        from operator import itemgetter

        from megatron.core.models.hybrid.hybrid_layer_allocation import (
            Symbols,
            get_hybrid_layer_counts,
        )
        num_mamba_layers, num_gdn_layers, num_attn_layers, num_mlp_layers, num_moe_layers = (
            itemgetter(Symbols.MAMBA, Symbols.GDN, Symbols.ATTENTION, Symbols.MLP, Symbols.MOE)(
                get_hybrid_layer_counts(args.hybrid_layer_pattern)
            )
        )

        mtp_num_layers = args.mtp_num_layers
        if mtp_num_layers is None:
            mtp_num_layers = 0
        # Compute hybrid model FLOPs.
        return hybrid_flops(
            total_tokens=total_real_tokens_in_batch,
            seqlen_squared_sum=seqlen_squared_sum_in_batch,
            hidden_size=args.hidden_size,
            num_attn_layers=num_attn_layers,
            num_mamba_layers=num_mamba_layers,
            num_mlp_layers=num_mlp_layers,
            num_moe_layers=num_moe_layers,
            num_gdn_layers=num_gdn_layers,
            mamba_state_dim=args.mamba_state_dim,
            mamba_head_dim=args.mamba_head_dim,
            mamba_num_groups=args.mamba_num_groups,
            mamba_num_heads=args.mamba_num_heads,
            gdp_num_householder=args.gdp_num_householder,
            num_attn_heads=args.num_attention_heads,
            gqa=args.group_query_attention,
            gqa_groups=args.num_query_groups,
            kv_channels=args.kv_channels,
            mlp_expansion=args.ffn_hidden_size / args.hidden_size,
            swiglu=args.swiglu,
            use_gated_delta_product=_uses_gated_delta_product_spec(args),
            moe_latent_size=args.moe_latent_size,
            moe_ffn_hidden_size=(args.moe_ffn_hidden_size if args.moe_ffn_hidden_size is not None
                                 else args.ffn_hidden_size),
            shared_expert_ffn_hidden_size=(0 if args.moe_shared_expert_intermediate_size is None
                                           else args.moe_shared_expert_intermediate_size),
            num_experts_routed_to=args.moe_router_topk,
            gdn_qk_head_dim=args.linear_key_head_dim or 128,
            gdn_v_head_dim=args.linear_value_head_dim or 128,
            gdn_num_qk_heads=args.linear_num_key_heads or 16,
            gdn_num_v_heads=args.linear_num_value_heads or 32,
            gdn_conv_kernel_dim=args.linear_conv_kernel_dim or 4,
            gdn_use_gdn2=(args.experimental_attention_variant == "gdn2"),
            vocab_size=args.padded_vocab_size,
            mtp_num_layers=mtp_num_layers,
        )
    else:
        # Compute standard Transformer model FLOPs.
        return transformer_flops()


def get_start_time_from_progress_log():
    """
    Gets start time of earliest job with same world size. Also returns the number
    of floating-point operations completed in last saved checkpoint.
    """
    args = get_args()
    assert args.save is not None
    progress_log_filename = os.path.join(args.save, "progress.txt")

    # start_time is time when job with same world size started.
    # start_num_floating_point_operations is the number of floating-point operations
    # completed when this job started.
    # latest_num_floating_point_operations is the number of floating-point operations
    # completed in most recent saved checkpoint.
    start_time = None
    start_num_floating_point_operations = None
    latest_num_floating_point_operations = 0
    latest_num_floating_point_operations_uncommitted = None

    def _get_field(string, type):
        return type(string.split(': ')[1])

    with maybe_msc.open(progress_log_filename, 'r') as f:
        for line in f:
            line = line.strip()
            line_tokens = line.split('\t')
            world_size_in_line = _get_field(line_tokens[2], int)
            if line_tokens[3] == "Saved checkpoint":
                latest_num_floating_point_operations = _get_field(line_tokens[7], float)
            elif line_tokens[3] == "Saving async checkpoint":
                # Checkpoint hasn't committed yet, so store for now in a different variable.
                latest_num_floating_point_operations_uncommitted = _get_field(line_tokens[7], float)
            elif line_tokens[3] == "Saved async checkpoint":
                # Checkpoint has committed, so can update latest_num_floating_point_operations to
                # value from latest 'Saving async checkpoint' message.
                # Note: latest_num_floating_point_operations_uncommitted can be None if
                # save_checkpoint was called directly (without save_checkpoint_and_time),
                # which writes "Saved async checkpoint" but not "Saving async checkpoint".
                if latest_num_floating_point_operations_uncommitted is not None:
                    latest_num_floating_point_operations = latest_num_floating_point_operations_uncommitted
                    latest_num_floating_point_operations_uncommitted = None
            if world_size_in_line != args.world_size:
                # Re-start search if we see a different world size.
                start_time = None
                start_num_floating_point_operations = None
                continue
            if line_tokens[3] == "Starting job":
                if start_time is None:
                    start_time = line_tokens[0]
                    start_num_floating_point_operations = latest_num_floating_point_operations
    assert (
        start_time is not None and start_num_floating_point_operations is not None
    ), "Should have seen at least one 'Starting job' entry with same world_size"
    print_rank_0(f"megatron.training.get_start_time_from_progress_log: "
                 f"{start_time=}, {start_num_floating_point_operations=}")
    return datetime.strptime(start_time, '%Y-%m-%d %H:%M:%S'), start_num_floating_point_operations


def preprocess_common_state_dict(common_state_dict):
    import copy

    # Convert args key of type namespace to dictionary
    preprocessed_common_state_dict = copy.deepcopy(common_state_dict)
    preprocessed_common_state_dict['args'] = vars(preprocessed_common_state_dict['args'])
    # Remove rank and local rank from state dict if it exists, since they are expected to be different
    preprocessed_common_state_dict['args'].pop('local_rank', None)
    preprocessed_common_state_dict['args'].pop('rank', None)
    if (
        preprocessed_common_state_dict['args']['use_distributed_optimizer']
        and "optimizer" in preprocessed_common_state_dict
    ):
        def reorder_inner_param_groups(optimizer_state_dict):
            # When distributed optimizer loading, source param groups will be reordered,
            # so we reorder the param groups here to prevent warning.

            # Pop empty param_state.
            if "param_state" in optimizer_state_dict and not optimizer_state_dict["param_state"]:
                optimizer_state_dict.pop("param_state")

            # Reorder param groups.
            if "optimizer" not in optimizer_state_dict:
                return
            inner_optimizer = optimizer_state_dict["optimizer"]
            if "param_groups" not in inner_optimizer:
                return
            param_groups = inner_optimizer["param_groups"]
            # Treat missing and explicit None identifier values as equivalent.
            # Wrap each component so None never compares directly with floats or strings.
            def key_fn(pg):
                return [
                    (value is not None, value)
                    for value in (pg.get(key) for key in param_group_identifier_keys)
                ]
            param_groups.sort(key=key_fn)
            inner_optimizer["param_groups"] = param_groups

        optimizer_state_dict = preprocessed_common_state_dict['optimizer']
        if "optimizer" in optimizer_state_dict:
            # Only 1 optimizer in chained optimizer.
            reorder_inner_param_groups(optimizer_state_dict)
        else:
            # Multiple optimizers in chained optimizer.
            for i in range(len(optimizer_state_dict)):
                if i in optimizer_state_dict.keys():
                    reorder_inner_param_groups(optimizer_state_dict[i])

    return preprocessed_common_state_dict


def pretrain(
    cfg_container: PretrainConfigContainer,
    train_valid_test_dataset_provider,
    model_type,
    forward_step_func,
    model_provider=None,
    process_non_loss_data_func=None,
    get_embedding_ranks=None,
    get_position_embedding_ranks=None,
    non_loss_data_func=None,
    store=None,
    inprocess_call_wrapper: Optional[Any] = None,
    p2p_communicator: Optional[P2PCommunicator] = None,
    pg_collection: Optional[ProcessGroupCollection | MultiModuleProcessGroupCollection] = None,
    skip_model_parallel_init=False,
):
    """Main training program.

    This function will run the followings in the order provided:
        1) initialize Megatron.
        2) setup model, optimizer and lr schedule using the model_provider.
        3) call train_val_test_data_provider to get train/val/test datasets.
        4) train the model using the forward_step_func.

    Args:
        train_valid_test_dataset_provider: a function that takes the size of
            train/valid/test dataset and returns `train, valid, test` datasets.
        model_provider: a function that returns a vanilla version of the
            model. By vanilla we mean a simple model on cpu with no fp16 or ddp.
        model_type: an enum that specifies the type of model being trained.
        forward_step_func: a function that takes a `data iterator` and `model`,
            and returns a `loss` scalar with a dictionary with key:values being
            the info we would like to monitor during training, for example
            `lm-loss: value`. We also require that this function add
            `batch generator` to the timers class.
        process_non_loss_data_func: a function to post process outputs of the
            network. It can be used for dumping output tensors (e.g images) to
            tensorboard. It takes `collected data`(list of tensors),
            `current iteration index` and `tensorboard writer` as arguments.
        extra_args_provider: a function that takes a parser and adds arguments
            to it. It is used for programs to add their own arguments.
        args_defaults: a dictionary from argument-name to argument-value. It
            to set already parse arguments.
        get_embedding_ranks: a function that takes a list of ranks for a pipeline
            group and returns those ranks that should have word embeddings.
            For most models, these are the first and last pipeline stages.
            If None, defaults to returning the first and last pipeline stages.
        get_position_embedding_ranks: a function that takes a list of ranks for
            a pipeline group and returns those ranks that should have position
            embeddings. For most models, this is only the first pipeline stage.
            If None, defaults to returning only the first pipeline stage.
        non_loss_data_func (callable): A custom function to call during evaluation.
            It can run e.g. benchmarks.
        store: an optional instance of torch.distributed.Store, to be used by
            torch.distributed.init_process_group
        inprocess_call_wrapper: an optional instance of inprocess.CallWrapper,
            it is automatically injected when in-process restart is in use
    """
    # Capture timestamp right at top of pretrain, before initialize_megatron
    global _STARTUP_TIMESTAMPS
    _STARTUP_TIMESTAMPS['pretrain_entry'] = time.time()

    if inprocess_call_wrapper is not None:
        iteration = inprocess_call_wrapper.iteration
        store = torch.distributed.PrefixStore(str(iteration), store)

    timestamp_after_inprocess_setup = time.time()

    # Early fault tolerance setup - must be done before initialize_megatron
    # to enable monitoring of the initialization process
    ft_integration.setup()
    timestamp_after_in_job_setup = time.time()

    # Multimodal MiMo seeds each module's RNG in its builder; a plain collection seeds stock here.
    skip_random_seed = isinstance(pg_collection, MultiModuleProcessGroupCollection)

    # Initalize and get arguments, timers, and Tensorboard writer.
    initialize_megatron(
        get_embedding_ranks=get_embedding_ranks,
        get_position_embedding_ranks=get_position_embedding_ranks,
        store=store,
        skip_model_parallel_init=skip_model_parallel_init,
        skip_random_seed=skip_random_seed,
        seed_pp_group=getattr(pg_collection, "pp", None),
        seed_dp_group=getattr(pg_collection, "dp", None),
        seed_tp_group=getattr(pg_collection, "tp", None),
        seed_ep_group=getattr(pg_collection, "ep", None),
        seed_etp_group=getattr(pg_collection, "expt_tp", None),
    )

    timestamp_after_initialize_megatron = time.time()

    args = get_args()
    timers = get_timers()

    # OTel span setup (_start_otel_job_spans) is deferred until after
    # set_jit_fusion_options() below, where program_start/main_entry/pretrain_entry
    # and the other startup timestamps are all available -- see the block right
    # after those are extracted from _STARTUP_TIMESTAMPS.

    if args.fine_grained_activation_offloading:
        from megatron.core.pipeline_parallel.utils import set_ideal_affinity_for_current_gpu
        set_ideal_affinity_for_current_gpu()


    if cfg_container.logger.log_progress:
        append_to_progress_log(args.save, "Starting job")

    set_jit_fusion_options(tp_size=args.tensor_model_parallel_size)

    timestamp_after_set_jit_fusion_options = time.time()

    # Adjust the startup time so it reflects the global minimum.
    # This will be closer to what scheduler will see (outside of
    # image ... launches).
    program_start = _STARTUP_TIMESTAMPS.get('program_start')
    main_entry = _STARTUP_TIMESTAMPS.get('main_entry')
    pretrain_entry = _STARTUP_TIMESTAMPS.get('pretrain_entry')

    # OTel: emit the backdated pre_startup span and open this incarnation's
    # megatron.startup trace (its own trace_id -- there are no run-long umbrella spans;
    # see _start_otel_job_spans()'s docstring and the module comment above it for the
    # full picture and why these use the explicit span API and backdating instead of
    # managed_span). The megatron.startup.* spans below then nest inside that trace.
    # The per-interval megatron.train blocks are separate traces again, chained by
    # Links -- see _end_otel_startup_span(), called right before train()'s loop.
    _start_otel_job_spans(model_type, program_start)

    _backdated_otel_span('megatron.startup.imports', program_start, main_entry)
    _backdated_otel_span('megatron.startup.arg_parse', main_entry, pretrain_entry)
    _backdated_otel_span(
        'megatron.startup.inprocess_setup', pretrain_entry, timestamp_after_inprocess_setup
    )
    _backdated_otel_span(
        'megatron.startup.in_job_setup',
        timestamp_after_inprocess_setup,
        timestamp_after_in_job_setup,
    )
    _backdated_otel_span(
        'megatron.startup.initialize_megatron',
        timestamp_after_in_job_setup,
        timestamp_after_initialize_megatron,
    )
    _backdated_otel_span(
        'megatron.startup.jit_fusion_options',
        timestamp_after_initialize_megatron,
        timestamp_after_set_jit_fusion_options,
    )

    # Both hooks below exist ONLY to flush telemetry, and both are process-global side
    # effects, so they are installed only when telemetry is actually active. With it off
    # there is nothing to flush and Megatron must behave exactly as it does upstream --
    # in particular it must NOT grow a Python-level SIGTERM handler it never had, which
    # would change EINTR behaviour and splice us into the ft_launcher/torchelastic
    # handler chain. _otel_exit_hooks_installed keeps the installation itself idempotent.
    global _otel_exit_hooks_installed
    if _otel_telemetry_active() and not _otel_exit_hooks_installed:
        _otel_exit_hooks_installed = True

        # An atexit fallback in case pretrain() exits via unhandled exception --
        # ensures both spans still get ended and telemetry flushed. Idempotent, so
        # this doesn't double-flush if _end_otel_job_spans() already ran normally.
        import atexit
        atexit.register(_end_otel_job_spans)

        # atexit does NOT run on SIGTERM (CPython terminates without unwinding), and the
        # ft_launcher tears down ranks with SIGTERM-then-SIGKILL on a fault/restart -- so
        # without a SIGTERM handler, megatron.train (and the open span tree) leaks as a
        # never-exported span in exactly the faulted runs we care about.
        import signal as _signal

        _otel_prev_sigterm = _signal.getsignal(_signal.SIGTERM)
        # with --exit-signal-handler, SIGTERM means "finish the current iteration, save a final
        # checkpoint, then exit" (DistributedSignalHandler drain -> should_exit). We must not end
        # spans / shut down the provider in that case -- that truncates megatron.train and drops the
        # final-iteration + final-checkpoint spans; the normal should_exit path runs
        # _end_otel_job_spans. There we only bounded-flush so nothing already-ended is lost if
        # SIGKILL beats the drain.
        # For an immediate/hard terminate (SIG_DFL / ft hard kill) we end + export the tree now.
        _otel_graceful_drain = False
        try:
            _otel_graceful_drain = bool(getattr(get_args(), 'exit_signal_handler', False))
        except Exception:
            pass
        _otel_sigterm_fired = [False]  # re-entry guard so a 2nd SIGTERM can't re-enter shutdown()

        def _otel_force_flush():
            try:
                from opentelemetry import trace as _ot
                _prov = _ot.get_tracer_provider()
                if hasattr(_prov, 'force_flush'):
                    _prov.force_flush()
            except Exception:
                pass

        def _otel_sigterm_handler(signum, frame):
            if not _otel_sigterm_fired[0]:
                _otel_sigterm_fired[0] = True
                try:
                    if _otel_graceful_drain:
                        _otel_force_flush()      # graceful drain: flush only, keep provider alive
                    else:
                        _end_otel_job_spans()    # hard terminate: end + export the tree now
                except Exception:
                    pass
            # chain to whatever handler was already installed (ft/torchelastic drain, or default)
            if callable(_otel_prev_sigterm):
                _otel_prev_sigterm(signum, frame)
            elif _otel_prev_sigterm == _signal.SIG_DFL:
                _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            # SIG_IGN: previous handler ignored SIGTERM -> nothing more to do.

        try:
            _signal.signal(_signal.SIGTERM, _otel_sigterm_handler)
        except (ValueError, OSError):
            # Not the main thread / platform unsupported -> atexit remains the fallback.
            pass

    # Initialize program_start_global with a fallback value in case set_startup_timestamps() wasn't called
    program_start_global = _TRAIN_START_TIME
    if _STARTUP_TIMESTAMPS['program_start'] is not None:
        program_start_global = torch.tensor([_STARTUP_TIMESTAMPS['program_start']], dtype=torch.double, device='cuda')
        torch.distributed.all_reduce(program_start_global, op=torch.distributed.ReduceOp.MIN)
        program_start_global = program_start_global.item()
    set_startup_timestamps(program_start=program_start_global)

    global _LEGACY_TRAIN_START_TIME
    start_time_tensor = torch.tensor([_LEGACY_TRAIN_START_TIME], dtype=torch.double, device='cuda')
    torch.distributed.all_reduce(start_time_tensor, op=torch.distributed.ReduceOp.MIN)
    _LEGACY_TRAIN_START_TIME = start_time_tensor.item()

    # Capture megatron init end time (matches original time.time() placement)
    megatron_init_end = time.time()

    app_metrics = {}
    app_metrics['app_start_time'] = round(program_start_global * 1000.0)
    app_metrics['app_model_init_start_time'] = round(program_start_global * 1000.0)

    # Print basic megatron init time (using global min start)
    # NOTE(asolergi-nv): This is not entirely accurate, but we keep it for backwards compatibility.
    print_rank_0(
        'time to initialize megatron (seconds): {:.3f}'.format(megatron_init_end - _LEGACY_TRAIN_START_TIME)
    )

    # Note, not entirely accurate as rank 0 might not be the first or last to hit these timestamps
    print_datetime('after in-process setup and before initialize_megatron', timestamp_after_inprocess_setup)
    print_datetime('after in-job setup and before initialize_megatron', timestamp_after_in_job_setup)

    if program_start is not None and main_entry is not None and pretrain_entry is not None:
        # Inject startup deltas into timers
        startup_timers = {
            'startup-program-entry-spread': program_start - program_start_global, # Local program start timestamp vs the global earliest program start timestamp
            'startup-library-setup': main_entry - program_start, # Local library imports
            'startup-program-setup': pretrain_entry - main_entry, # Local __main__ entry to pretrain entry
            'startup-in-process-setup': timestamp_after_inprocess_setup - pretrain_entry, # Local in-process setup
            'startup-in-job-setup': timestamp_after_in_job_setup - timestamp_after_inprocess_setup, # Local in-job setup
            'startup-initialize-megatron': timestamp_after_initialize_megatron - timestamp_after_in_job_setup, # Local initialize megatron
            'startup-set-jit-fusion-options': timestamp_after_set_jit_fusion_options - timestamp_after_initialize_megatron, # Local set JIT fusion options
            'all-reduce-start-timestamps-tensor': megatron_init_end - timestamp_after_set_jit_fusion_options, # 2x All-reduce, first collective call
            'startup-megatron-init-local': megatron_init_end - pretrain_entry, # Local megatron init
            'startup-megatron-init-global': megatron_init_end - program_start_global, # Local megatron init vs the global earliest program start timestamp
        }
        for name, delta in startup_timers.items():
            timers(name, log_level=0).set_elapsed(delta)
        timers.log(list(startup_timers.keys()), barrier=True)

        # Print rank 0's absolute timestamps
        startup_timestamps = {
            'before library-setup': program_start,
            'after library-setup': main_entry,
            'before megatron-init': pretrain_entry,
        }
        for name, ts in startup_timestamps.items():
            ts_str = datetime.fromtimestamp(ts).strftime('%Y-%m-%d %H:%M:%S.%f')
            print_rank_0(f'[{name}] datetime: {ts_str}')

    print_datetime('after megatron is initialized')
    app_metrics['app_model_init_finish_time'] = one_logger_utils.get_timestamp_in_ms()

    # Track E2E metrics on pretrain start
    one_logger_utils.on_pretrain_start()

    # Context used for persisting some state between checkpoint saves.
    if cfg_container.checkpoint.non_persistent_ckpt_type == 'local':
        try:
            from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import (
                LocalCheckpointManager,
            )
            from nvidia_resiliency_ext.checkpointing.local.replication.group_utils import (
                GroupWrapper,
                parse_group_sequence,
            )
            from nvidia_resiliency_ext.checkpointing.local.replication.strategies import (
                CliqueReplicationStrategy,
            )
        except ModuleNotFoundError:
            raise RuntimeError(
                "The 'nvidia_resiliency_ext' module is required for local "
                "checkpointing but was not found. Please ensure it is installed."
            )

        if cfg_container.checkpoint.replication:
            repl_strategy = CliqueReplicationStrategy.from_replication_params(
                cfg_container.checkpoint.replication_jump, cfg_container.checkpoint.replication_factor
            )
        else:
            repl_strategy = None

        checkpointing_context = {
            'local_checkpoint_manager': LocalCheckpointManager(
                cfg_container.checkpoint.non_persistent_local_ckpt_dir, repl_strategy=repl_strategy
            )
        }
    else:
        checkpointing_context = {}

    # Model, optimizer, and learning rate.
    timers('model-and-optimizer-setup', log_level=0).start(barrier=True)
    with _otel_managed_span('model_init', 'megatron.startup.model_init', is_goodput_span=True):
        model, optimizer, opt_param_scheduler = setup_model_and_optimizer(
            model_type,
            model_provider_func=model_provider,
            checkpointing_context=checkpointing_context,
            cfg_container=cfg_container,
            # TODO (@maanug): temporary until initialize.py builds a pgcollection as bridge does.
            pg_collection=(
                pg_collection
                if pg_collection is not None
                else ProcessGroupCollection.use_mpu_process_groups()
            ),
        )
    timers('model-and-optimizer-setup').stop()
    print_datetime('after model, optimizer, and learning rate ' 'scheduler are built')
    model_cfg = get_model_config(model[0])

    # Build a separate inference model for RL if requested.
    inference_model = None
    if args.perform_rl_step:
        # RL inference doesn't support CP; when training uses CP>1, always build a
        # separate CP=1 inference model (CP ranks become extra DP replicas, dp*=cp).
        force_cp1_inference_model = args.context_parallel_size > 1
        if (
            args.rl_inference_tensor_model_parallel_size is not None
            or args.rl_inference_pipeline_model_parallel_size is not None
            or args.rl_inference_expert_model_parallel_size is not None
            or args.rl_inference_expert_tensor_model_parallel_size is not None
            or force_cp1_inference_model
        ):
            from megatron.core.inference.shards import build_inference_pg_collection

            print_rank_0(
                "Building separate RL inference model with custom parallelism: "
                f"TP={args.rl_inference_tensor_model_parallel_size}, "
                f"PP={args.rl_inference_pipeline_model_parallel_size}, "
                f"CP={1 if force_cp1_inference_model else None}, "
                f"EP={args.rl_inference_expert_model_parallel_size}, "
                f"ExptTP={args.rl_inference_expert_tensor_model_parallel_size}"
            )
            inference_pg_collection = build_inference_pg_collection(
                args.world_size,
                tp_size=args.rl_inference_tensor_model_parallel_size,
                pp_size=args.rl_inference_pipeline_model_parallel_size,
                cp_size=1 if force_cp1_inference_model else None,
                ep_size=args.rl_inference_expert_model_parallel_size,
                expt_tp_size=args.rl_inference_expert_tensor_model_parallel_size,
                use_tp_pp_dp_mapping=args.use_tp_pp_dp_mapping,
            )

            # Build an isolated inference config so training config remains unchanged
            inference_config = copy.deepcopy(model_cfg)
            if args.rl_inference_tensor_model_parallel_size is not None:
                inference_config.tensor_model_parallel_size = args.rl_inference_tensor_model_parallel_size
            if args.rl_inference_pipeline_model_parallel_size is not None:
                inference_config.pipeline_model_parallel_size = (
                    args.rl_inference_pipeline_model_parallel_size
                )
            if force_cp1_inference_model:
                inference_config.context_parallel_size = 1
            if args.rl_inference_expert_model_parallel_size is not None:
                inference_config.expert_model_parallel_size = (
                    args.rl_inference_expert_model_parallel_size
                )
            if args.rl_inference_expert_tensor_model_parallel_size is not None:
                inference_config.expert_tensor_parallel_size = (
                    args.rl_inference_expert_tensor_model_parallel_size
                )

            # Optionally allocate the RL inference model weights from a unified virtual memory (UVM)
            # mempool so we can prefetch weights to CPU when idle while keeping CUDA-graph-safe pointers.
            # Alternatively, use torch_memory_saver to offload the weights to CPU when idle.
            uvm_mempool = None
            uvm_level = args.rl_inference_model_unified_memory_level
            if uvm_level and uvm_level > 0:
                uvm_mempool = create_unified_mempool()

            # Determine which context manager to use for model allocation
            # Use torch_memory_saver if offloading is requested but UVM is not enabled
            use_torch_saver_for_inference_model = (
                args.rl_offload_inference_model_weights_when_idle
                and uvm_level == 0
                and HAVE_TORCH_MEMORY_SAVER
            )
            if use_torch_saver_for_inference_model:
                # Use torch_memory_saver for offloading - allocate within a tagged region
                model_alloc_ctx = torch_memory_saver.region(
                    tag="rl_inference_model", enable_cpu_backup=True
                )
            elif uvm_mempool is not None:
                model_alloc_ctx = torch.cuda.use_mem_pool(uvm_mempool)
            else:
                model_alloc_ctx = nullcontext()

            with model_alloc_ctx:
                inference_model = get_model(
                    model_provider,
                    model_type,
                    wrap_with_ddp=False,
                    pg_collection=inference_pg_collection,
                    config=inference_config,
                )
            inference_model[0].eval()

        # Validate: offloading flag requires a separate inference model
        if args.rl_offload_inference_model_weights_when_idle and inference_model is None:
            raise ValueError(
                "--rl-offload-inference-model-weights-when-idle requires a separate inference model. "
                "This flag is only useful when doing refit since the weights are shared with the training model."
            )

    # Data stuff. Dataset index / dataloader construction (GPTDataset/BlendedDataset
    # index building or loading from the cache) can be a multi-second chunk of
    # startup on its own -- the 'data_loading' span group exists exactly for this.
    # This shares scope with the existing perfetto-native trace_region; the two
    # tracing systems are independent.
    app_metrics['app_build_dataiters_start_time'] = one_logger_utils.get_timestamp_in_ms()
    timers('train/valid/test-data-iterators-setup', log_level=0).start(barrier=True)
    with _otel_managed_span('data_loading', 'megatron.startup.dataloader', is_goodput_span=True):
        if args.virtual_pipeline_model_parallel_size is not None:
            train_data_iterator = []
            valid_data_iterator = []
            test_data_iterator = []
            for vp_stage in range(len(model)):
                dataset_provider_parameters = inspect.signature(train_valid_test_dataset_provider).parameters
                assert "vp_stage" in dataset_provider_parameters, \
                    "vp_stage must be a kwarg in train_valid_test_dataset_provider when using virtual pipeline parallelism"
                vp_stage_train_valid_test_dataset_provider = \
                    functools.partial(train_valid_test_dataset_provider, vp_stage=vp_stage)
                if getattr(train_valid_test_dataset_provider, 'is_distributed', False):
                    vp_stage_train_valid_test_dataset_provider.is_distributed = True
                iterators = build_train_valid_test_data_iterators(
                    vp_stage_train_valid_test_dataset_provider
                )
                train_data_iterator.append(iterators[0])
                valid_data_iterator.append(iterators[1])
                test_data_iterator.append(iterators[2])
        else:
            train_data_iterator, valid_data_iterator, test_data_iterator = (
                build_train_valid_test_data_iterators(train_valid_test_dataset_provider)
            )
    timers('train/valid/test-data-iterators-setup').stop()
    print_datetime('after dataloaders are built')
    app_metrics['app_build_dataiters_finish_time'] = one_logger_utils.get_timestamp_in_ms()

    # Track if training is enabled. Can only be done once args.do_train is assigned after dataloader is built.
    one_logger_utils.track_config_flags(
        args.train_iters,
        cfg_container.validation.skip_train,
        args.do_train,
        args.do_valid,
        args.do_test,
        args.dataloader_type,
    )

    # Print setup timing.
    print_rank_0('done with setup ...')
    timers.log(['model-and-optimizer-setup', 'train/valid/test-data-iterators-setup'], barrier=True)

    one_logger = get_one_logger()
    one_logger and one_logger.log_metrics(app_metrics)

    wandb_writer = get_wandb_writer()
    if wandb_writer:
        # Add job name to the wandb config to make it easier to run more singleton dependency jobs.
        wandb_writer.config.update({'slurm_job_name': os.getenv("SLURM_JOB_NAME", "N/A")})

    # Initialize RL profiler if enabled
    if args.rl_profile:
        # Determine output directory: use rl_profile_dir, or save/profiles, or ./profiles
        profile_dir = getattr(args, 'rl_profile_dir', None)
        if profile_dir is None:
            if args.save:
                profile_dir = os.path.join(args.save, 'profiles')
            else:
                profile_dir = './profiles'

        # Generate run ID from job name or timestamp
        run_id = os.getenv("SLURM_JOB_ID", None)
        if run_id is None:
            run_id = datetime.now().strftime("%Y%m%d_%H%M%S")

        initialize_rl_profiler(
            output_dir=profile_dir,
            run_id=run_id,
            enabled=True,
            log_to_wandb=(wandb_writer is not None),
            log_to_tensorboard=(get_tensorboard_writer() is not None),
        )
        print_rank_0(f'[RLProfiler] Profiling enabled, output: {profile_dir}')

    # OTel: megatron.startup deliberately stays open into train() -- its
    # preamble (weight-hash check, sniff test, cuda-graph setup) is init, not
    # the loop, so it should parent to startup. train() ends startup and starts
    # megatron.train itself, right before its loop. If train() isn't called
    # (do_train False), _end_otel_job_spans() ends startup as an idempotent
    # fallback.

    if not cfg_container.validation.skip_train or (args.perform_rl_step and args.do_train):
        if cfg_container.validation.skip_train:
            print_rank_0('RL inference-only mode (--skip-train --perform-rl-step) ...')
        else:
            print_rank_0('training ...')

        iteration = 0
        args.curr_iteration = iteration
        if args.do_train and (args.train_iters or 0) > 0:
            try:
                iteration, num_floating_point_operations_so_far = train(
                    forward_step_func,
                    model,
                    optimizer,
                    opt_param_scheduler,
                    train_data_iterator,
                    valid_data_iterator,
                    process_non_loss_data_func,
                    model_cfg,
                    checkpointing_context,
                    non_loss_data_func,
                    inference_model,
                    p2p_communicator=p2p_communicator,
                    pg_collection=pg_collection,
                )
            except Exception:
                # OTel: an uncaught training exception (a real hardware/CUDA/NCCL
                # fault, or an injected fault) would skip the _end_otel_job_spans()
                # at the bottom of pretrain(), leaving the in-flight megatron.train block
                # unended -> unexported (only the graceful-SIGTERM and normal-exit paths
                # flush it today). End + flush the open spans here, then re-raise so the
                # process still dies exactly as before. Idempotent -> no double-flush.
                # (SystemExit from the exit-interval path is NOT caught here; it already
                # flushed before sys.exit(). SIGKILL is unrecoverable regardless.)
                _end_otel_job_spans()
                raise

        print_datetime('after training is done')

        if not cfg_container.validation.skip_train and cfg_container.checkpoint.save and iteration != 0 and iteration % cfg_container.checkpoint.save_interval != 0:
            save_checkpoint_and_time(
                iteration,
                model,
                optimizer,
                opt_param_scheduler,
                num_floating_point_operations_so_far,
                checkpointing_context,
                train_data_iterator=train_data_iterator
            )

        one_logger and one_logger.log_metrics(
            {'app_train_loop_finish_time': one_logger_utils.get_timestamp_in_ms()}
        )

    else:
        print_rank_0('skipping training (--skip-train is on) ...')

        iteration = args.iteration
        args.curr_iteration = iteration

    if args.do_valid:
        prefix = f'iteration {iteration} on validation set'
        if args.perform_rl_step:
            rl_eval_model = model
            rl_training_model = None
            if inference_model is not None:
                inf_core = unwrap_model(inference_model[0])
                # If separate inference and training models, swap training weights
                # back to the inference model for RL evaluation.
                rl_utils._maybe_prefetch_separate_inference_model_weights(inf_core, to_cpu=False)
                swap_model_weights(model, inference_model, args.refit_method)
                rl_eval_model = inference_model
                rl_training_model = model
            rl_utils.evaluate_and_print_results_rl(
                valid_data_iterator,
                rl_eval_model,
                optimizer,
                iteration,
                write_to_tensorboard=not cfg_container.validation.skip_train,
                training_model=rl_training_model,
            )
        else:
            evaluate_and_print_results(
                prefix, forward_step_func,
                valid_data_iterator, model,
                iteration, process_non_loss_data_func, model_cfg,
                verbose=True, write_to_tensorboard=not cfg_container.validation.skip_train,
                non_loss_data_func=non_loss_data_func,
                pg_collection=pg_collection, p2p_communicator=p2p_communicator
            )

    if args.do_test:
        prefix = f'iteration {iteration} on test set'
        evaluate_and_print_results(
            prefix,
            forward_step_func,
            test_data_iterator,
            model,
            iteration,
            process_non_loss_data_func,
            model_cfg,
            verbose=True,
            write_to_tensorboard=not cfg_container.validation.skip_train,
            non_loss_data_func=non_loss_data_func,
            pg_collection=pg_collection,
            p2p_communicator=p2p_communicator,
        )

    wandb_writer = get_wandb_writer()
    if wandb_writer:
        wandb_writer.finish()

    ft_integration.on_checkpointing_start()
    maybe_finalize_async_save(blocking=True, terminate=True)
    ft_integration.on_checkpointing_end(is_async_finalization=True)

    one_logger and one_logger.log_metrics(
        {'app_finish_time': one_logger_utils.get_timestamp_in_ms()}
    )

    if args.perform_rl_step:
        rl_utils.rl_inference_interface_shutdown()

    if getattr(args, 'gtp_remat_nccl_ub', False) or getattr(args, 'gtp_expert_remat_nccl_ub', False):
        from megatron.core.tensor_parallel.gtp_api import deregister_and_clear_gtp_symm_pools

        # Deregister the GTP symmetric-memory pools: windows left registered when the
        # process groups are destroyed make NCCL abort.
        deregister_and_clear_gtp_symm_pools()

    ft_integration.shutdown()
    one_logger_utils.finish()

    # OTel: close any still-open span (interval block / startup) and flush all pending
    # telemetry data.
    _end_otel_job_spans()


def update_train_iters(args):

    # For iteration-based training, we don't need to do anything
    if args.train_iters:
        return

    if args.step_batch_size_schedule is not None:
        # Sample based training with step batch size schedule.
        iterations = 0
        consumed_samples = 0
        while consumed_samples < args.train_samples:
            update_num_microbatches(consumed_samples, consistency_check=False)
            consumed_samples += get_current_global_batch_size()
            iterations += 1
        # Reset
        update_num_microbatches(0, consistency_check=False)
        args.train_iters = iterations
    else:
        # Constant batch size with sample-based training.
        args.train_iters = args.train_samples // args.global_batch_size

    print_rank_0(f'setting training iterations to {args.train_iters}')


def resolve_ddp_bucket_size(ddp_config, dp_cp_group, overlap_grad_reduce, num_parameters):
    """Resolve the absolute DDP grad-bucket size.

    With ``num_buckets`` set: ``num_parameters // num_buckets``; else if no explicit
    ``bucket_size``: ``max(40_000_000, 1_000_000 * dp_cp_size)``; if ``overlap_grad_reduce``
    is False: ``None`` (overrides the above).
    """
    if ddp_config.num_buckets is not None:
        bucket_size = num_parameters // ddp_config.num_buckets
    elif ddp_config.bucket_size is None:
        bucket_size = max(40000000, 1000000 * get_pg_size(dp_cp_group))
    else:
        bucket_size = ddp_config.bucket_size
    if not overlap_grad_reduce:
        bucket_size = None
    return bucket_size


def wrap_model_chunks_with_ddp(
    model_chunks,
    config,
    ddp_config,
    *,
    use_layer_wise_distributed_optimizer=False,
    use_layer_wise_param_layout=True,
    DP=DDP,
    pg_collection=None,
    bucket_sizes=None,
    disable_bucketing_per_chunk=None,
):
    """Wrap each model chunk in DDP, pre-computing per-chunk param layouts as needed.

    Centralises the DDP-wrapping wiring shared between :func:`get_model` and
    unit tests.

    For ``use_layer_wise_distributed_optimizer=True`` and ``use_layer_wise_param_layout=True``:
    forces ``ddp_config.use_distributed_optimizer=True`` (mutated in place; needed
    for reduce-scatter), and computes per-chunk shard-aligned layouts via
    :meth:`LayerWiseDistributedOptimizer.compute_full_param_layout`. With
    ``use_layer_wise_param_layout=False``, no layout is supplied and LayerWise falls back
    to its legacy ``allgather_params`` sync path.

    For non-layerwise with ``ddp_config.use_distributed_optimizer=True``:
    computes per-chunk byte-level layouts via
    :meth:`DistributedOptimizer.compute_full_param_layout`.

    Otherwise: no layouts are computed.

    Layouts are only computed when ``DP is DDP`` (i.e. the standard
    ``DistributedDataParallel``); FSDP variants don't accept
    ``full_param_layout``.

    Args:
        model_chunks: List of model chunks to wrap (un-DDP-wrapped).
        config: :class:`TransformerConfig`.
        ddp_config: :class:`DistributedDataParallelConfig`. Mutated in place when
            ``use_layer_wise_distributed_optimizer=True`` and ``use_layer_wise_param_layout=True``.
        use_layer_wise_distributed_optimizer: Whether the layerwise wiring runs.
        use_layer_wise_param_layout: When ``use_layer_wise_distributed_optimizer=True``,
            controls whether to compute and supply a shard-aligned param layout
            to DDP. ``False`` keeps LayerWise on its legacy sync path.
        DP: The DDP class to construct (``DistributedDataParallel`` or an FSDP
            variant).
        pg_collection: Optional :class:`ProcessGroupCollection`. When provided,
            forwarded to both standard DDP and FSDP variants, and used to source
            DP world sizes for layout computation.
        bucket_sizes: Optional per-chunk bucket size override; defaults to
            ``[ddp_config.bucket_size] * len(model_chunks)``.
        disable_bucketing_per_chunk: Optional per-chunk disable_bucketing flag;
            defaults to ``[False] * len(model_chunks)``.

    Returns:
        List of DDP-wrapped chunks.
    """
    n = len(model_chunks)
    if bucket_sizes is None:
        bucket_sizes = [ddp_config.bucket_size] * n
    if disable_bucketing_per_chunk is None:
        disable_bucketing_per_chunk = [False] * n

    # Compute per-chunk layouts (DDP only).
    per_chunk_layouts = [None] * n
    if DP is DDP:
        if use_layer_wise_distributed_optimizer and use_layer_wise_param_layout:
            ddp_config.use_distributed_optimizer = True
            compute_layout = LayerWiseDistributedOptimizer.compute_full_param_layout
            # Tag params so DDP buffer grouping routes LayerWise-managed matrices
            # (Muon's Newton-Schulz domain) to a shard-aligned buffer and routes
            # everything else (embeddings, biases, layernorm) to a separate
            # DistOpt-style buffer.
            tag_params_for_buffer_routing(model_chunks)
        elif not use_layer_wise_distributed_optimizer and ddp_config.use_distributed_optimizer:
            compute_layout = DistributedOptimizer.compute_full_param_layout
        else:
            compute_layout = None
        if compute_layout is not None:
            layout_pgs = (
                pg_collection
                if pg_collection is not None
                else ProcessGroupCollection.use_mpu_process_groups()
            )
            assert layout_pgs.dp_cp is not None, (
                "wrap_model_chunks_with_ddp requires a dp_cp process group to size "
                "the distributed-optimizer parameter layout"
            )
            # The distributed optimizer shards each bucket over the intra-instance group, which
            # is what DDP hands to the buffer as its data_parallel_group. Size the layout by that
            # same group, otherwise the layout reports more shards than the reduce-scatter uses
            # and the trailing shards of every bucket end up owned by no rank. intra_dp_cp is
            # the full dp_cp when num_distributed_optimizer_instances is 1, so this only differs
            # when there are several instances.
            intra_dp_cp_group = getattr(layout_pgs, "intra_dp_cp", None)
            intra_expt_dp_group = getattr(layout_pgs, "intra_expt_dp", None)
            data_parallel_world_size = get_pg_size(
                intra_dp_cp_group if intra_dp_cp_group is not None else layout_pgs.dp_cp
            )
            expert_data_parallel_world_size = get_pg_size(
                intra_expt_dp_group
                if intra_expt_dp_group is not None
                else getattr(layout_pgs, "expt_dp", None)
            )
            for i, (chunk, bucket_size) in enumerate(zip(model_chunks, bucket_sizes)):
                all_params = [p for p in chunk.parameters() if p.requires_grad]
                per_chunk_layouts[i] = compute_layout(
                    all_params,
                    bucket_size,
                    data_parallel_world_size,
                    ddp_config,
                    expert_data_parallel_world_size=expert_data_parallel_world_size,
                )

    # Wrap each chunk.
    wrapped = []
    for chunk, layout, disable_bucketing in zip(
        model_chunks, per_chunk_layouts, disable_bucketing_per_chunk
    ):
        chunk_kwargs = {}
        # TorchFSDP takes process_group, not pg_collection.
        if pg_collection is not None and not (HAVE_FSDP2 and DP is torch_FSDP):
            chunk_kwargs["pg_collection"] = pg_collection
        if layout is not None:
            chunk_kwargs["full_param_layout"] = layout
        wrapped.append(
            DP(
                config=config,
                ddp_config=ddp_config,
                module=chunk,
                disable_bucketing=disable_bucketing,
                **chunk_kwargs,
            )
        )
    return wrapped


def _freeze_all_model_chunks(model_list):
    """Freeze all parameters in a list of model chunks (for logits-saving runs)."""
    for model_module in model_list:
        model_module.requires_grad_(False)
        # Additionally freeze expert biases of routers
        for module in model_module.modules():
            if hasattr(module, "frozen_expert_bias"):
                module.frozen_expert_bias = True
    return model_list


def _forward_backward_grad_context(args):
    """Grad context for a train step's forward/backward pass.

    Returns a tuple of (grad_context, forward_only).
    grad_context is ``torch.no_grad()`` when all layers are frozen (e.g. teacher logits
    dumps), no parameter needs gradients, so there is no reason to build the
    autograd graph. Otherwise returns a no-op context.
    forward_only is True when all layers are frozen, False otherwise.
    """
    grad_context = torch.no_grad() if getattr(args, "freeze_all_layers", False) else nullcontext()
    forward_only = getattr(args, "freeze_all_layers", False)
    return grad_context, forward_only


def get_model(model_provider_func, model_type=ModelType.encoder_or_decoder, wrap_with_ddp=True, config=None, pg_collection=None):
    """Build the model."""
    args = get_args()
    args.model_type = model_type
    if pg_collection is None:
        pg_collection = ProcessGroupCollection.use_mpu_process_groups()

        if args.create_all_gather_group:
            timeout = timedelta(minutes=args.distributed_timeout_minutes) if args.distributed_timeout_minutes else None
            dp_cp_ag, expt_dp_ag = create_all_gather_groups(
                for_expert_parallelism=(args.expert_model_parallel_size > 1),
                timeout=timeout,
            )
            pg_collection.dp_cp_ag = dp_cp_ag
            pg_collection.expt_dp_ag = expt_dp_ag

            print_rank_0("> created all-gather process groups for AG/RS overlap")
            if expt_dp_ag is not None:
                print_rank_0(">   including expert parallelism AG group")

    if has_nvidia_modelopt:
        maybe_enable_modelopt(args)

    # Build model.
    def build_model():
        if (
            get_pg_size(pg_collection.pp) > 1
            and args.virtual_pipeline_model_parallel_size is not None
        ):
            model = []
            vp_size = args.virtual_pipeline_model_parallel_size
            for i in range(vp_size):
                # Set pre_process and post_process only after virtual rank is set.
                pre_process = is_pp_first_stage(pg_collection.pp) and is_vp_first_stage(
                    vp_stage=i, vp_size=vp_size
                )
                post_process = is_pp_last_stage(pg_collection.pp) and is_vp_last_stage(
                    vp_stage=i, vp_size=vp_size
                )
                this_model = model_provider_func(
                    pre_process=pre_process,
                    post_process=post_process,
                    vp_stage=i,
                    config=config,
                    pg_collection=pg_collection,
                )
                this_model.model_type = model_type
                this_model.vp_stage = i
                model.append(this_model)
        else:
            pre_process = is_pp_first_stage(pg_collection.pp)
            post_process = is_pp_last_stage(pg_collection.pp)
            model = model_provider_func(
                pre_process=pre_process,
                post_process=post_process,
                config=config,
                pg_collection=pg_collection,
            )
            model.model_type = model_type
        return model


    if args.init_model_with_meta_device:
        with torch.device('meta'):
            model = build_model()
    else:
        model = build_model()

    if not isinstance(model, list):
        model = [model]

    # For rare operations like post-training logits saving
    if args.freeze_all_layers:
        _freeze_all_model_chunks(model)

    # Set tensor model parallel attributes if not set.
    # Only parameters that are already tensor model parallel have these
    # attributes set for them. We should make sure the default attributes
    # are set for all params so the optimizer can use them.
    for model_module in model:
        for param in model_module.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)

    # Print number of parameters.
    num_parameters = sum(
        [sum([p.nelement() for p in model_module.parameters()]) for model_module in model]
    )
    if get_pg_rank(pg_collection.dp) == 0 and get_pg_rank(pg_collection.cp) == 0:
        print(
            ' > number of parameters on (tensor, gtp_weight_remat, pipeline) '
            'model parallel rank ({}, {}, {}): {}'.format(
                get_pg_rank(pg_collection.tp),
                get_pg_rank(pg_collection.gtp_remat),
                get_pg_rank(pg_collection.pp),
                num_parameters,
            ),
            flush=True,
        )

    # GPU allocation.
    # For FSDP2, we don't allocate GPU memory here. We allocate GPU memory
    # in the fully_shard function of FSDP2 instead.
    if (
        not (args.use_torch_fsdp2 and args.use_cpu_initialization)
        and not args.init_model_with_meta_device
    ):
        for model_module in model:
            model_module.cuda(torch.cuda.current_device())

    # Fp16 conversion.
    if args.fp16 or args.bf16:
        config = get_model_config(model[0])
        model = [Float16Module(config, model_module) for model_module in model]

    # Materialize tensors on meta device (GPU allocation) if not using FSDP2 and not using Megatron FSDP.
    if args.init_model_with_meta_device and not args.use_torch_fsdp2 and not args.use_megatron_fsdp:
        model = [to_empty_if_meta_device(model_module, device=torch.device("cuda")) for model_module in model]

    # Before TE2.x: The model_module.bfloat16()/model_module.half() above will call the inplace
    #               copy of TE's Float8Tensor, which will write an unwanted value (amax calculated
    #               from the current fp8 param) to its amax_history. The below function will correct
    #               the amax_history back.
    # After TE2.x: Below function is an empty function and does nothing.
    correct_amax_history_if_needed(model)

    if wrap_with_ddp:
        if args.use_torch_fsdp2:
            assert HAVE_FSDP2, "Torch FSDP2 requires torch>=2.4.0"
            DP = torch_FSDP
        elif args.use_megatron_fsdp:
            DP = FullyShardedDataParallel
        else:
            DP = DDP

        config = get_model_config(model[0])

        ddp_config = get_megatron_ddp_config(args)
        if not getattr(args, "use_torch_fsdp2", False):
            # In the Megatron FSDP and DDP use path, we need to initialize the bucket size.
            ddp_config.bucket_size = resolve_ddp_bucket_size(
                ddp_config,
                pg_collection.dp_cp,
                ddp_config.overlap_grad_reduce,
                num_parameters,
            )

        # Compute per-chunk bucket sizes / disable_bucketing flags. Bucketing is
        # disabled for non-first chunks, when overlap_param_gather_with_optimizer_step
        # is on, or for non-zero pipeline-parallel ranks.
        pp_rank = get_pg_rank(pg_collection.pp)
        per_chunk_disable_bucketing = [
            (chunk_idx > 0) or args.overlap_param_gather_with_optimizer_step
            for chunk_idx in range(len(model))
        ]
        per_chunk_bucket_sizes = [
            None if (disable or pp_rank > 0) else ddp_config.bucket_size
            for disable in per_chunk_disable_bucketing
        ]

        if config.cuda_graph_impl == "full_iteration":
            # DDP initialization must use the full-iteration capture stream so its retained
            # AccumulateGrad nodes do not reference a different, non-capturing stream.
            ddp_stream = get_shared_capture_stream()
        else:
            # Preserve a dedicated initialization stream for all other implementations.
            ddp_stream = torch.cuda.Stream()
        ddp_stream.wait_stream(torch.cuda.current_stream())

        with torch.cuda.stream(ddp_stream):
            model = wrap_model_chunks_with_ddp(
                model,
                config,
                ddp_config,
                use_layer_wise_distributed_optimizer=getattr(
                    args, 'use_layer_wise_distributed_optimizer', False
                ),
                use_layer_wise_param_layout=getattr(
                    args, 'use_layer_wise_param_layout', True
                ),
                DP=DP,
                pg_collection=pg_collection if args.use_megatron_fsdp else None,
                bucket_sizes=per_chunk_bucket_sizes,
                disable_bucketing_per_chunk=per_chunk_disable_bucketing,
            )
        # Ensure initialization-stream work completes before touching params on the default stream.
        torch.cuda.current_stream().wait_stream(ddp_stream)

        # Broadcast params from data parallel src rank to other data parallel ranks.
        if args.data_parallel_random_init:
            for model_module in model:
                model_module.broadcast_params()

    return model


def get_optimizer_param_scheduler(optimizer):
    """Build the learning rate scheduler."""
    args = get_args()

    # Iteration-based training.
    if args.train_iters:
        if args.lr_decay_iters is None:
            args.lr_decay_iters = args.train_iters
        lr_decay_steps = args.lr_decay_iters * args.global_batch_size
        wd_incr_steps = args.train_iters * args.global_batch_size
        wsd_decay_steps = None
        if args.lr_wsd_decay_iters is not None:
            wsd_decay_steps = args.lr_wsd_decay_iters * args.global_batch_size
        if args.lr_warmup_fraction is not None:
            lr_warmup_steps = args.lr_warmup_fraction * lr_decay_steps
        else:
            lr_warmup_steps = args.lr_warmup_iters * args.global_batch_size
    # Sample-based training.
    elif args.train_samples:
        # We need to set training iters for later use. Technically
        # we need to adjust the training samples too (due to last
        # batch being incomplete) but we leave it as is for now.
        update_train_iters(args)
        if args.lr_decay_samples is None:
            args.lr_decay_samples = args.train_samples
        lr_decay_steps = args.lr_decay_samples
        wd_incr_steps = args.train_samples
        wsd_decay_steps = args.lr_wsd_decay_samples
        if args.lr_warmup_fraction is not None:
            lr_warmup_steps = args.lr_warmup_fraction * lr_decay_steps
        else:
            lr_warmup_steps = args.lr_warmup_samples
    else:
        raise Exception('either train-iters or train-samples should be provided.')

    opt_param_scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=args.lr_warmup_init,
        max_lr=args.lr,
        min_lr=args.min_lr,
        lr_warmup_steps=lr_warmup_steps,
        lr_decay_steps=lr_decay_steps,
        lr_decay_style=args.lr_decay_style,
        start_wd=args.start_weight_decay,
        end_wd=args.end_weight_decay,
        wd_incr_steps=wd_incr_steps,
        wd_incr_style=args.weight_decay_incr_style,
        use_checkpoint_opt_param_scheduler=args.use_checkpoint_opt_param_scheduler,
        override_opt_param_scheduler=args.override_opt_param_scheduler,
        wsd_decay_steps=wsd_decay_steps,
        lr_wsd_decay_style=args.lr_wsd_decay_style,
    )

    return opt_param_scheduler


def get_megatron_optimizer_config(args: Any) -> OptimizerConfig:
    """Return a Megatron optimizer config object from Megatron's arguments."""

    kwargs = {}
    for f in dataclasses.fields(OptimizerConfig):
        if hasattr(args, f.name):
            kwargs[f.name] = getattr(args, f.name)
    config = OptimizerConfig(**kwargs)

    # Construct the appropriate config_overrides object. This default handles many cases, but
    #  can be added to as needed by the user, or replaced entirely with a custom override.
    config_overrides = get_standard_config_overrides(config=config)

    return config, config_overrides

def get_megatron_ddp_config(args: argparse.Namespace) -> DistributedDataParallelConfig:
    """Return an MCore DDPConfig from the argparse arguments."""

    if getattr(args, "use_torch_fsdp2", False):
        reshard_after_forward = getattr(args, "torch_fsdp2_reshard_after_forward", True)
        return TorchFullyShardedDataParallelConfig(reshard_after_forward=reshard_after_forward)
    else:
        kwargs = {}
        for f in dataclasses.fields(DistributedDataParallelConfig):
            if hasattr(args, f.name):
                kwargs[f.name] = getattr(args, f.name)
        kwargs["grad_reduce_in_fp32"] = args.accumulate_allreduce_grads_in_fp32
        kwargs["check_for_nan_in_grad"] = args.check_for_nan_in_loss_and_grad
        kwargs["check_for_large_grads"] = args.check_for_large_grads
        kwargs["num_buckets"] = args.ddp_num_buckets
        kwargs["bucket_size"] = args.ddp_bucket_size
        kwargs["pad_buckets_for_high_nccl_busbw"] = args.ddp_pad_buckets_for_high_nccl_busbw
        kwargs["reduce_scatter_with_fp32_accumulation"] = args.ddp_reduce_scatter_with_fp32_accumulation
        kwargs["param_name_patterns_for_fp32_local_accumulation"] = \
            tuple(args.ddp_param_name_patterns_for_fp32_local_accumulation)
        kwargs["average_in_collective"] = args.ddp_average_in_collective
        # Megatron-FSDP arguments.
        kwargs["megatron_fsdp_main_params_dtype"] = args.megatron_fsdp_main_params_dtype
        kwargs["megatron_fsdp_main_grads_dtype"] = args.megatron_fsdp_main_grads_dtype
        kwargs["megatron_fsdp_grad_comm_dtype"] = args.megatron_fsdp_grad_comm_dtype
        if args.use_megatron_fsdp and args.megatron_fsdp_version == 1:
            kwargs["megatron_fsdp_use_decoupled_grad"] = args.use_precision_aware_optimizer
        if args.use_megatron_fsdp and args.cuda_graph_impl != "none":
            # Run Megatron-FSDP in CUDA graph-safe mode. Avoids some graph-unsafe host-side
            # operations (such as pointer dereferencing) that can break CUDA graph replay.
            kwargs["megatron_fsdp_cuda_graph_mode"] = True
            if args.cuda_graph_impl == "full_iteration":
                # When using full-iteration CUDA graphs, Megatron-FSDP should not AG parameters
                # during start_param_sync(), which is called during the DistOpt.step(). This
                # causes an error when we wait() on a CUDA kernel launched in a stream beyond
                # the scope of the full-iter / FWD-BWD CUDA graph capture.
                kwargs["fsdp_all_gather_in_start_param_sync"] = False

        return DistributedDataParallelConfig(**kwargs)


def setup_model_and_optimizer(
    model_type,
    model_provider_func=None,
    checkpointing_context=None,
    *,
    cfg_container: PretrainConfigContainer | None = None,
    pg_collection: ProcessGroupCollection | MultiModuleProcessGroupCollection | None = None,
):
    """Setup model and optimizer."""
    args = get_args()
    timers = get_timers()
    one_logger = get_one_logger()

    # Typically, --skip-train is the only thing needed to disable the optimizer.
    has_normal_optimizer = not args.skip_train
    # Even with --skip-train, RL still creates an optimizer unless --no-load-optim is set.
    has_rl_optimizer = args.perform_rl_step and not args.no_load_optim
    skip_optimizer = not (has_normal_optimizer or has_rl_optimizer)
    wrap_with_ddp = not skip_optimizer

    if has_nvidia_modelopt:
        maybe_enable_modelopt(args)

    def _build_model_wrapper(wrap_with_ddp: bool):
        if cfg_container is not None and getattr(cfg_container, "model", None) is not None:
            from megatron.training.utils import start_memory_history_recording

            start_memory_history_recording(cfg_container.profiling)

            cfg = cfg_container
            model_config = cfg.model
            builder_cls = model_config.get_builder_cls()
            builder = builder_cls(model_config)

            # Inject freeze_all_layers as a pre-wrap hook so DDP sees requires_grad=False
            # and skips grad-buffer allocation for all params (matching get_model behavior).
            if args.freeze_all_layers:
                model_config.pre_wrap_hooks.append(_freeze_all_model_chunks)

            return builder.build_distributed_models(
                pg_collection=pg_collection,
                ddp_config=cfg.ddp,
                overlap_param_gather_with_optimizer_step=cfg.optimizer.overlap_param_gather_with_optimizer_step,
                use_megatron_fsdp=cfg.dist.use_megatron_fsdp,
                use_torch_fsdp2=cfg.dist.use_torch_fsdp2,
                wrap_with_ddp=wrap_with_ddp,
                data_parallel_random_init=cfg.rng.data_parallel_random_init,
                use_layer_wise_distributed_optimizer=cfg.optimizer.use_layer_wise_distributed_optimizer,
                use_layer_wise_param_layout=getattr(args, 'use_layer_wise_param_layout', True),
            )
        else:
            assert model_provider_func is not None, "Must provide a model config via config_container or a model_provider_func."
            return get_model(model_provider_func, model_type, wrap_with_ddp=wrap_with_ddp, pg_collection=pg_collection)

    # Configure GTP weight-remat padding/loss reduction before model construction (pad
    # alignment governs how dim-0 shards are built). Placed here (not in get_model) so it
    # also covers the config-container builder path, which does not call get_model.
    if is_gtp_remat_active(args):
        from megatron.core.process_groups_config import resolve_gtp_remat_group
        from megatron.core.tensor_parallel.gtp_api import (
            configure_gtp_remat_from_recipe,
            register_gtp_symm_pool,
        )

        configure_gtp_remat_from_recipe(
            fp4=getattr(args, 'fp4', None) is not None,
            fp8_recipe=getattr(args, 'fp8_recipe', None),
            fp8=getattr(args, 'fp8', None) is not None,
            calculate_per_token_loss=getattr(args, 'calculate_per_token_loss', False),
            reduce_scatter_with_fp32_accumulation=getattr(
                args, 'gtp_remat_reduce_scatter_with_fp32_accumulation', False
            ),
        )

        if getattr(args, 'gtp_remat_nccl_ub', False):
            register_gtp_symm_pool(resolve_gtp_remat_group(pg_collection, is_expert=False))
        if getattr(args, 'gtp_expert_remat_nccl_ub', False):
            register_gtp_symm_pool(resolve_gtp_remat_group(pg_collection, is_expert=True))

    model = _build_model_wrapper(wrap_with_ddp)
    unwrapped_model = unwrap_model(model)

    # Classify each GTP param's prefetch chain after model build + DDP wrap, before the
    # first forward. Placed here (not in get_model) so it also covers the config-container
    # builder path.
    if is_gtp_remat_active(args):
        from megatron.core.tensor_parallel.gtp_api import classify_gtp_remat_chains

        classify_gtp_remat_chains(
            model,
            cuda_graph_modules=getattr(args, 'cuda_graph_modules', None),
            moe_shared_expert_overlap=getattr(args, 'moe_shared_expert_overlap', False),
            cuda_graph_impl=getattr(args, 'cuda_graph_impl', 'none'),
        )

    if args.logits_save_dir is not None and mpu.is_pipeline_last_stage():
        from megatron.training.distillation import LogitsSaverHooks

        logits_saver = LogitsSaverHooks(
            save_dir=args.logits_save_dir,
            k=args.logits_save_top_k,
            p=args.logits_save_top_p,
            min_k=args.logits_save_top_p_min_k,
            save_dtype=args.logits_save_dtype,
        )
        logits_saver.attach_hooks(unwrapped_model[-1])

    if args.logits_load_dir is not None and mpu.is_pipeline_last_stage():
        from megatron.training.distillation import StudentLogitsCapture

        student_logits_capture = StudentLogitsCapture()
        student_logits_capture.attach_hooks(unwrapped_model[-1])

    one_logger and one_logger.log_metrics({"app_build_optimzer_start_time": one_logger_utils.get_timestamp_in_ms()})
    if skip_optimizer:
        optimizer, opt_param_scheduler = None, None
        # In RL inference-only mode, train_iters must still be set despite having no optimizer.
        if args.perform_rl_step:
            update_train_iters(args)
    else:
        config, config_overrides = get_megatron_optimizer_config(args)
        config.timers = timers
        if getattr(args, "use_mup", False):
            model_config_source = (
                unwrapped_model[0] if isinstance(unwrapped_model, list) else unwrapped_model
            )
            model_config = get_model_config(model_config_source)
            mup_overrides = get_mup_config_overrides(
                config=config,
                mup_width_mult=model_config.mup_width_mult,
                optimizer_type=config.optimizer,
            )
            if mup_overrides:
                config_overrides = {**(config_overrides or {}), **mup_overrides}

        optimizer = get_megatron_optimizer(
            config,
            model,
            config_overrides=config_overrides,
            use_gloo_process_groups=args.use_gloo_process_groups,
            dump_param_to_param_group_map=args.dump_param_to_param_group_map,
        )
        opt_param_scheduler = get_optimizer_param_scheduler(optimizer)

    one_logger and one_logger.log_metrics({"app_build_optimzer_finish_time": one_logger_utils.get_timestamp_in_ms()})

    if args.moe_use_upcycling:
        torch.distributed.barrier()
        assert not checkpoint_exists(args.save), (
            "The upcycling destination directory already exists. "
            "Please check if --moe-use-upcycling is mistakenly enabled. "
            "Upcycling should only be set for the first run when converting the dense model. "
            "All subsequent runs should remove this flag. "
        )
        # before changing moe related global args, save them in local variables
        num_experts = args.num_experts
        expert_model_parallel_size = args.expert_model_parallel_size
        moe_ffn_hidden_size = args.ffn_hidden_size

        # set dense model related args in to global args before getting dense model
        args.num_experts = None
        args.expert_model_parallel_size = 1
        args.ffn_hidden_size = moe_ffn_hidden_size * args.moe_upcycling_granularity

        # get dense model
        dense_model_for_upcycling = _build_model_wrapper(wrap_with_ddp=True)

        # recover moe upcycling related args in global args before executing upcycling
        args.num_experts = num_experts
        args.expert_model_parallel_size = expert_model_parallel_size
        args.ffn_hidden_size = moe_ffn_hidden_size

        # execute upcycling
        _, args.num_floating_point_operations_so_far = upcycling_utils.load_and_upcycle_model(
            load_checkpoint,
            unwrapped_model,
            dense_model_for_upcycling,
            load_kwargs={
                'model': dense_model_for_upcycling,
                'optimizer': None,
                'opt_param_scheduler': None,
            },
        )
        args.iteration = 1
        save_checkpoint(
            args.iteration, model, None, None, args.num_floating_point_operations_so_far
        )
        torch.distributed.barrier()
        del dense_model_for_upcycling
        if (args.fp16 or args.bf16) and optimizer is not None:
            optimizer.reload_model_params()
        print_rank_0(f'Upcycled checkpoint saved to {args.save}')

    if (
        args.load is not None or args.pretrained_checkpoint is not None
    ) and not args.moe_use_upcycling:
        one_logger and one_logger.log_metrics(
            {'load_checkpoint_start_time': one_logger_utils.get_timestamp_in_ms()}
        )
        timers('load-checkpoint', log_level=0).start(barrier=True)
        with _otel_managed_span('load_checkpoint', 'megatron.checkpoint.load', is_goodput_span=True):

            ckpt_pgc = getattr(unwrapped_model[0], "pg_collection", None)
            args.iteration, args.num_floating_point_operations_so_far = load_checkpoint(
                model,
                optimizer,
                opt_param_scheduler,
                checkpointing_context=checkpointing_context,
                skip_load_to_model_and_opt=HAVE_FSDP2
                and getattr(args, "use_torch_fsdp2", False)
                and args.ckpt_format == "torch_dist",
                tp_group=ckpt_pgc.tp if ckpt_pgc is not None else None,
                pp_group=ckpt_pgc.pp if ckpt_pgc is not None else None,
                # Replica_id must match the save path (see save_checkpoint_and_time): use the
                # gtp_remat-inclusive group, not replicate dp_cp, or gtp_remat peers collide.
                dp_cp_group=getattr(ckpt_pgc, "dp_cp_gtp_remat", None),
                dp_group=ckpt_pgc.dp if ckpt_pgc is not None else None,
                expt_dp_group=ckpt_pgc.expt_dp if ckpt_pgc is not None else None,
                rng_state_key_prefix=getattr(unwrapped_model[0], "rng_state_key_prefix", ""),
            )
        # Barrier + min/max all-reduce right after the load. Unlike the checkpoint
        # SAVE (ragged writers -> cross-rank skew at timers.log), the fully-parallel
        # LOAD is uniform across ranks (~ms spread), so no meaningful skew
        # serializes here -- left unspanned; megatron.checkpoint.load covers the
        # (uniform) restart cost.
        timers('load-checkpoint').stop(barrier=True)
        timers.log(['load-checkpoint'])
        one_logger and one_logger.log_metrics(
            {
                'load_checkpoint_finish_time': one_logger_utils.get_timestamp_in_ms(),
                'load_checkpoint_time': timers('load-checkpoint').active_time(),
            }
        )
    else:
        args.iteration = 0
        args.num_floating_point_operations_so_far = 0

    # [ModelOpt]: Load the teacher checkpoint for ModelOpt distillation if applicable.
    # Import locally to prevent circular import: megatron.post_training.checkpointing
    # imports `get_args` from megatron.training at module scope.
    if has_nvidia_modelopt:
        from megatron.post_training.checkpointing import load_kd_teacher_checkpoint

        load_kd_teacher_checkpoint(model)

    # Validate that the world size can accommodate the current batch size.
    # This catches the case where GPUs were scaled up mid-training but the
    # current position in the batch size schedule yields a batch size that
    # is too small for the number of data-parallel replicas.
    num_microbatches = get_num_microbatches()
    current_global_batch_size = get_current_global_batch_size()
    data_parallel_size = (
        mpu.get_data_parallel_world_size()
        if mpu.model_parallel_is_initialized()
        else args.data_parallel_size
    )
    assert num_microbatches is not None and num_microbatches >= 1, (
        f'current global batch size ({current_global_batch_size}) is too small for '
        f'micro_batch_size ({args.micro_batch_size}) * data_parallel_size ({data_parallel_size}) = '
        f'{args.micro_batch_size * data_parallel_size}. The world size cannot accommodate the '
        f'batch size. This can happen when resuming with more GPUs than the current batch size '
        f'schedule entry supports.'
    )

    # get model without FP16 and/or DDP wrappers
    if (
        args.iteration == 0
        and len(unwrapped_model) == 1
        and hasattr(unwrapped_model[0], 'init_state_dict_from_bert')
    ):
        print_rank_0("Initializing ICT from pretrained BERT model")
        unwrapped_model[0].init_state_dict_from_bert()
        if args.fp16:
            optimizer.reload_model_params()

    # Convert checkpoint format.
    if args.ckpt_convert_format is not None:
        load_ckpt_format = args.ckpt_format
        args.ckpt_format = args.ckpt_convert_format
        args.save = os.path.join(args.ckpt_convert_save, args.ckpt_convert_format)
        update_use_dist_ckpt(args)

        save_checkpoint(
            args.iteration,
            model,
            optimizer,
            opt_param_scheduler,
            args.num_floating_point_operations_so_far,
            preprocess_common_state_dict_fn=preprocess_common_state_dict,
        )

        print_rank_0("> converted checkpoint: %s -> %s." % (load_ckpt_format, args.ckpt_format))
        torch.distributed.barrier()
        exit()

    return model, optimizer, opt_param_scheduler


def dummy_train_step(data_iterator):
    """Single dummy training step."""
    args = get_args()
    tp_rank = mpu.get_tensor_model_parallel_rank()
    has_cu_seqlens = getattr(args, 'sft', False) or getattr(args, 'dataloader_inter_document_masking', False)
    is_hybrid_cp = args.hybrid_context_parallel

    BATCH_KEYS = [
        "tokens", "labels", "loss_mask", "position_ids", "attention_mask",
        "cu_seqlens", "cu_seqlens_padded", "max_seqlen", "local_cp_size",
        "hybrid_cp_group",
    ]

    num_microbatches = get_num_microbatches()
    rerun_state_machine = get_rerun_state_machine()
    while rerun_state_machine.should_run_forward_backward(data_iterator):
        for _ in range(num_microbatches):
            # Re-use methods used in get_batch() from pretrain_{gpt, mamba}.py.
            batch = {}
            if tp_rank == 0:
                batch = next(data_iterator)
                for key in BATCH_KEYS:
                    batch[key] = batch[key].cuda(non_blocking=True) if key in batch and batch[key] is not None else None
            batch = get_batch_on_this_tp_rank(
                batch,
                broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
                broadcast_group=mpu.get_tensor_model_parallel_group(),
                has_cu_seqlens=has_cu_seqlens,
                is_hybrid_cp=is_hybrid_cp,
                create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
                cp_size=args.context_parallel_size,
                tp_rank=tp_rank,
                micro_batch_size=args.micro_batch_size,
                seq_length=args.seq_length,
                mtp_on_this_rank=False,
                pipeline_model_parallel_size=args.pipeline_model_parallel_size,
                is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
                is_pipeline_last_stage=mpu.is_pipeline_last_stage(),
            )
            batch = get_batch_on_this_cp_rank(
                batch,
                is_hybrid_cp=is_hybrid_cp,
                cp_group=get_context_parallel_group(),
                hybrid_cp_group_func=get_hybrid_data_context_parallel_groups,
            )


def train_step(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler, config, forward_backward_func, iteration=None, pg_collection: Optional[ProcessGroupCollection | MultiModuleProcessGroupCollection] = None, p2p_communicator: Optional[P2PCommunicator] = None):
    """Single training step.

    pg_collection: optional carrier forwarded to the schedule for the cross-grid case; None
        preserves the default behavior. Reductions source per-rank groups from the model.
    p2p_communicator: optional communicator forwarded to the schedule for cross-grid P2P; None
        preserves the default behavior.
    """
    args = get_args()
    timers = get_timers()

    # OTel: set up per-step sub-span support.
    _otel_step_tracer = None
    if _otel_sg_enabled('forward_backward') or _otel_sg_enabled('optimizer'):
        from nemo.lens.helpers import span_cm, safe_set_span_attributes as _otel_set_attrs
        _otel_step_tracer = get_telemetry().tracer

    rerun_state_machine = get_rerun_state_machine()
    save_params_in_this_iteration = (args.save_params_interval is not None and
                                     (iteration + 1) % args.save_params_interval == 0)
    save_activations_in_this_iteration = (args.save_activations_interval is not None and
                                          (iteration + 1) % args.save_activations_interval == 0)
    save_tpe_in_this_iteration = (args.save_tokens_per_expert_interval is not None and
                                  (iteration + 1) % args.save_tokens_per_expert_interval == 0)
    save_wgrads_in_this_iteration = (args.save_wgrads_interval is not None and
                                     (iteration + 1) % args.save_wgrads_interval == 0)
    save_dgrads_in_this_iteration = (args.save_dgrads_interval is not None and
                                     (iteration + 1) % args.save_dgrads_interval == 0)
    while rerun_state_machine.should_run_forward_backward(data_iterator):
        # Set grad to zero.
        for model_chunk in model:
            model_chunk.zero_grad_buffer()
            # If saving main_grads in this iteration, then all-reduce instead of reduce-scatter.
            model_chunk.force_all_reduce = save_wgrads_in_this_iteration
        optimizer.zero_grad()

        if has_nvidia_modelopt and getattr(args, "modelopt_enabled", False):
            # Distillation shape-adjust reads parallel_state; only for modelopt-enabled runs.
            adjust_tensor_shapes_fn = get_tensor_shapes_adjust_fn_for_distillation(
                model,
                seq_length=args.seq_length,
                micro_batch_size=args.micro_batch_size,
                decoder_seq_length=args.decoder_seq_length,
            )
        else:
            adjust_tensor_shapes_fn = None

        # For the mxfp8_param with reuse_grad_buf_for_mxfp8_param_ag and dp_ag_overlap,
        # we need to call the _copy_main_params_to_param_buffer() after the grad buffer
        # is zeroed by zero_grad_buffer() because param and grad buffer are shared.
        #
        # However, we should skip this on the first iteration when forward_pre_hook is disabled,
        # because:
        # 1. The first iteration's params are already in param.data (from init or checkpoint).
        # 2. Without forward_pre_hook, finish_param_sync() won't be called to zero the grad buffer,
        #    so the main grads will be polluted by the main params.
        #
        # Exception: when a full-iteration CUDA graph has been captured, the all-gather
        # and subsequent param_data zero are baked into the graph and replay
        # unconditionally. We must populate param_data so the replayed AG gathers
        # correct weights, even when forward pre-hooks are disabled.
        if args.reuse_grad_buf_for_mxfp8_param_ag and args.overlap_param_gather:
            # Check if forward_pre_hook is enabled by checking if hooks are registered.
            forward_pre_hook_enabled = len(model[0].remove_forward_pre_hook_handles) > 0
            full_cg_captured = FullCudaGraphWrapper.cuda_graph.get("training") is not None
            if forward_pre_hook_enabled or full_cg_captured:
                for optim_instance in optimizer.chained_optimizers:
                    if isinstance(optim_instance, DistributedOptimizer):
                        optim_instance._copy_main_params_to_param_buffer()

        # Forward pass.
        if save_activations_in_this_iteration:
            enable_activation_logging(model, args.save)
        if save_tpe_in_this_iteration:
            enable_tokens_per_expert_logging(model, args.save)
        if save_dgrads_in_this_iteration:
            enable_dgrad_logging(model, args.save)
        grad_context, forward_only = _forward_backward_grad_context(args)
        _fb_cm = (
            span_cm("megatron.train.iteration.forward_backward", tracer=_otel_step_tracer, num_microbatches=get_num_microbatches())
            if _otel_sg_enabled('forward_backward') and _otel_step_tracer is not None else nullcontext()
        )
        with grad_context, _fb_cm:
            losses_reduced = forward_backward_func(
                forward_step_func=forward_step_func,
                data_iterator=data_iterator,
                model=model,
                num_microbatches=get_num_microbatches(),
                seq_length=args.seq_length,
                micro_batch_size=args.micro_batch_size,
                decoder_seq_length=args.decoder_seq_length,
                forward_only=forward_only,
                adjust_tensor_shapes_fn=adjust_tensor_shapes_fn,
                force_all_reduce=save_wgrads_in_this_iteration,
                p2p_communicator=p2p_communicator,
                pg_collection=pg_collection,
            )
        if save_activations_in_this_iteration:
            save_activations(iteration + 1)
            disable_activation_logging()
        if save_tpe_in_this_iteration:
            save_tokens_per_expert(iteration + 1)
            disable_tokens_per_expert_logging()
        if save_dgrads_in_this_iteration:
            save_dgrads(iteration + 1)
            disable_dgrad_logging()

        # Advance the router tracer step if active.
        tracer = get_moe_router_tracer()
        if tracer is not None:
            tracer.advance_step(iteration)

        # Reset force_all_reduce field.
        for model_chunk in model:
            model_chunk.force_all_reduce = False

    def _save_state_dict(attr_name, label):
        # Collect state_dict of the given attribute for each parameter.
        state_dict = defaultdict(dict)
        for model_chunk_id, model_chunk in enumerate(model):
            model_chunk_name = f"model_chunk{model_chunk_id}"
            unwrapped_model_chunk = unwrap_model(model_chunk)
            for param_name, param in unwrapped_model_chunk.named_parameters():
                if getattr(param, attr_name, None) is not None:
                    tensor_on_cpu = getattr(param, attr_name).cpu()
                    state_dict[model_chunk_name][param_name] = tensor_on_cpu

        # iteration is 0-indexed, move to 1-indexed for checkpoint name and logging.
        save_grads(args.save, state_dict, iteration + 1, label)

    # Checkpoint wgrads with parameter names.
    if save_wgrads_in_this_iteration:
        _save_state_dict(attr_name="main_grad", label="wgrads")

    should_checkpoint, should_exit, exit_code = rerun_state_machine.should_checkpoint_and_exit()
    if should_exit:
        return {}, True, should_checkpoint, should_exit, exit_code, None, None, 0

    # Empty unused memory.
    if args.empty_unused_memory_level >= 1:
        torch.cuda.empty_cache()

    # Vision gradients.
    if args.vision_pretraining and args.vision_pretraining_type == "dino":
        unwrapped_model = unwrap_model(model[0])
        unwrapped_model.cancel_gradients_last_layer(args.curr_iteration)

    # Update parameters.

    timers('optimizer', log_level=1).start(barrier=args.barrier_with_L1_time)
    _opt_cm = (
        span_cm("megatron.train.iteration.optimizer", tracer=_otel_step_tracer)
        if _otel_sg_enabled('optimizer') and _otel_step_tracer is not None else nullcontext()
    )
    with _opt_cm as _opt_span:
        update_successful, grad_norm, num_zeros_in_grad = optimizer.step()
        if _opt_span is not None:
            _otel_set_attrs(_opt_span, {
                "megatron.update_successful": bool(update_successful),
            })

    # get max attention logit for logging and run clip_qk()
    # Part of MuonClip Optimizer step
    log_max_attention_logit = 0
    if args.qk_clip or args.log_max_attention_logit:
        log_max_attention_logit = clip_qk(model, log_max_only=not args.qk_clip)

    timers('optimizer').stop()

    # Checkpoint params with parameter names.
    if save_params_in_this_iteration:
        _save_state_dict(attr_name="data", label="params")

    # Reductions source per-rank groups from the model (encoder rank -> encoder groups).
    pg_collection = get_attr_wrapped_model(model[0], "pg_collection")
    if pg_collection is None:
        pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    for _required in ("mp", "pp", "dp_cp"):
        assert getattr(pg_collection, _required, None) is not None, (
            f"model pg_collection used by train_step must define {_required}"
        )
    mp_group = pg_collection.mp
    # gtp_remat-inclusive: the reported global per-token loss must cover gtp_remat peers' distinct
    # tokens (replicate dp_cp would report a 1/gtp_remat subsample -> per-step noisy). Display-only.
    dp_cp_group = getattr(pg_collection, 'dp_cp_gtp_remat', None) or pg_collection.dp_cp
    is_last_stage = is_pp_last_stage(pg_collection.pp)
    # when freezing sub-models we may have a mixture of successful and unsucessful ranks,
    # so we must gather across mp ranks
    update_successful = logical_and_across_model_parallel_group(update_successful, group=mp_group)
    # grad_norm and num_zeros_in_grad will be None on ranks without trainable params,
    # so we must gather across mp ranks
    grad_norm = reduce_max_stat_across_model_parallel_group(grad_norm, group=mp_group)
    if args.log_num_zeros_in_grad:
        num_zeros_in_grad = reduce_max_stat_across_model_parallel_group(
            num_zeros_in_grad, group=mp_group
        )

    # Vision momentum.
    if args.vision_pretraining and args.vision_pretraining_type == "dino":
        unwrapped_model = unwrap_model(model[0])
        unwrapped_model.update_momentum(args.curr_iteration)

    # Update learning rate.
    if update_successful:
        # data_parallel_size excludes the GTP-remat axis (it's folded into total_model_size at
        # arguments.py:446); each gtp-remat peer consumes a distinct microbatch, so multiply it
        # back in for the sample count.
        increment = (
            get_num_microbatches()
            * args.micro_batch_size
            * args.data_parallel_size
            * args.gtp_weight_remat_size
        )
        opt_param_scheduler.step(increment=increment)
        skipped_iter = 0
    else:
        skipped_iter = 1

    # Empty unused memory.
    if args.empty_unused_memory_level >= 2:
        torch.cuda.empty_cache()

    if is_last_stage and losses_reduced:
        # Average loss across microbatches.
        # Last stage may have no loss (e.g. MIMO encoder-grid ranks).
        loss_reduced = {}
        for key in losses_reduced[0].keys():
            val = [x[key].view(-1) for x in losses_reduced]
            if val[0].numel() == 2:
                # there is one dict per microbatch. in new reporting, we average
                # over the total number of tokens across the global batch.
                val = torch.vstack(val).sum(dim=0)
                torch.distributed.all_reduce(val, group=dp_cp_group)
                loss_reduced[key] = val[0] / val[1]
            elif val[0].numel() == 1:
                # legacy behavior, we average over the number of microbatches
                val = torch.cat(val).mean()
                loss_reduced[key] = val
            else:
                raise ValueError(f"Invalid value shape: {val[0].shape} for key {key}")
        return (
            loss_reduced,
            skipped_iter,
            should_checkpoint,
            should_exit,
            exit_code,
            grad_norm,
            num_zeros_in_grad,
            log_max_attention_logit,
        )
    return {}, skipped_iter, should_checkpoint, should_exit, exit_code, grad_norm, num_zeros_in_grad, log_max_attention_logit


def training_log(
    loss_dict,
    total_loss_dict,
    learning_rate: float | None,
    iteration,
    loss_scale,
    report_memory_flag,
    skipped_iter,
    grad_norm,
    params_norm,
    num_zeros_in_grad,
    max_attention_logit,
    pg_collection=None,
    is_first_iteration=False,
    seqlen_squared_sum_in_batch: float | None = None,
    total_real_tokens_in_batch: float | None = None,
):
    """Log training information such as losses, timing, ...."""
    args = get_args()
    timers = get_timers()
    writer = get_tensorboard_writer()
    wandb_writer = get_wandb_writer()
    one_logger = get_one_logger()
    energy_monitor = get_energy_monitor()

    # On first iteration, log stats but don't reset accumulators so normal interval stats remain accurate.
    should_reset = not is_first_iteration

    # Advanced, skipped, and Nan iterations.
    advanced_iters_key = 'advanced iterations'
    skipped_iters_key = 'skipped iterations'
    nan_iters_key = 'nan iterations'
    # Advanced iterations.
    if not skipped_iter:
        total_loss_dict[advanced_iters_key] = total_loss_dict.get(advanced_iters_key, 0) + 1
    else:
        if advanced_iters_key not in total_loss_dict:
            total_loss_dict[advanced_iters_key] = 0
    # Skipped iterations.
    total_loss_dict[skipped_iters_key] = total_loss_dict.get(skipped_iters_key, 0) + skipped_iter
    # Update losses and set nan iterations
    got_nan = False
    for key in loss_dict:
        if not skipped_iter:
            total_loss_dict[key] = (
                total_loss_dict.get(key, torch.tensor([0.0], dtype=torch.float, device='cuda'))
                + loss_dict[key]
            )
        else:
            value = loss_dict[key].float().sum().item()
            is_nan = value == float('inf') or value == -float('inf') or value != value
            got_nan = got_nan or is_nan
    total_loss_dict[nan_iters_key] = total_loss_dict.get(nan_iters_key, 0) + int(got_nan)

    # Logging.
    timers_to_log = []
    if args.timing_log_level >= 1:
        timers_to_log.extend([
            'forward-backward',
            'layernorm-grads-all-reduce',
            'embedding-grads-all-reduce',
            'all-grads-sync',
            'params-all-gather',
            'optimizer-copy-to-main-grad',
            'optimizer-unscale-and-check-inf',
            'optimizer-clip-main-grad',
            'optimizer-count-zeros',
            'optimizer-inner-step',
            'optimizer-copy-main-to-model-params',
            'optimizer',
        ])
    if args.timing_log_level >= 2:
        timers_to_log.extend([
            'batch-generator',
            'forward-compute',
            'backward-compute',
            'forward-recv',
            'forward-send',
            'backward-recv',
            'backward-send',
            'forward-send-forward-recv',
            'forward-send-backward-recv',
            'backward-send-forward-recv',
            'backward-send-backward-recv',
            'forward-backward-send-forward-backward-recv',
        ])
    # Add timers from RL loop if needed.
    if args.perform_rl_step:
        timers_to_log.extend(RL_LOGGABLE_TIMER_NAMES)

    # Calculate batch size. data_parallel_size excludes the GTP-remat axis (it's folded into
    # total_model_size at arguments.py:446); each gtp-remat peer consumes a distinct microbatch,
    # so multiply it back in for the global sample count.
    batch_size = (
        args.micro_batch_size
        * args.data_parallel_size
        * args.gtp_weight_remat_size
        * get_num_microbatches()
    )

    # Track app tag & app tag ID
    one_logger_utils.track_app_tag(batch_size, args.world_size, args.seq_length)

    total_iterations = total_loss_dict[advanced_iters_key] + total_loss_dict[skipped_iters_key]

    # learning rate will be None on ranks without trainable params, so we must gather across mp ranks
    _lr_mp_group = pg_collection.mp if pg_collection is not None else None
    learning_rate: float | None = reduce_max_stat_across_model_parallel_group(
        learning_rate, group=_lr_mp_group
    )
    if learning_rate is None and args.freeze_all_layers:
        learning_rate = 0.0
    # Tensorboard values.
    if writer and (iteration % args.tensorboard_log_interval == 0):
        if wandb_writer:
            wandb_writer.log({'samples vs steps': args.consumed_train_samples}, iteration)
        if learning_rate is not None:
            writer.add_scalar('learning-rate', learning_rate, iteration)
            writer.add_scalar('learning-rate vs samples', learning_rate, args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({'learning-rate': learning_rate}, iteration)
        if args.skipped_train_samples > 0:
            writer.add_scalar('skipped-train-samples', args.skipped_train_samples, iteration)
            if wandb_writer:
                wandb_writer.log({'skipped-train-samples': args.skipped_train_samples}, iteration)
        writer.add_scalar('batch-size', batch_size, iteration)
        writer.add_scalar('batch-size vs samples', batch_size, args.consumed_train_samples)
        if wandb_writer:
            wandb_writer.log({'batch-size': batch_size}, iteration)
        # Log bins for packed mode
        if has_rl_utils and args.rl_use_sequence_packing:
            packing_metrics = rl_utils.get_sequence_packing_tensorboard_metrics(args)
            for metric_name, metric_value in packing_metrics.items():
                writer.add_scalar(metric_name, metric_value, iteration)
            if wandb_writer and packing_metrics:
                wandb_writer.log(packing_metrics, iteration)
        for key in loss_dict:
            writer.add_scalar(key, loss_dict[key], iteration)
            writer.add_scalar(key + ' vs samples', loss_dict[key], args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({key: loss_dict[key]}, iteration)
        if args.log_loss_scale_to_tensorboard:
            writer.add_scalar('loss-scale', loss_scale, iteration)
            writer.add_scalar('loss-scale vs samples', loss_scale, args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({'loss-scale': loss_scale}, iteration)
        if args.log_world_size_to_tensorboard:
            writer.add_scalar('world-size', args.world_size, iteration)
            writer.add_scalar('world-size vs samples', args.world_size, args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({'world-size': args.world_size}, iteration)
        if grad_norm is not None:
            writer.add_scalar('grad-norm', grad_norm, iteration)
            writer.add_scalar('grad-norm vs samples', grad_norm, args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({'grad-norm': grad_norm}, iteration)
        if num_zeros_in_grad is not None:
            writer.add_scalar('num-zeros', num_zeros_in_grad, iteration)
            writer.add_scalar(
                'num-zeros vs samples', num_zeros_in_grad, args.consumed_train_samples
            )
            if wandb_writer:
                wandb_writer.log({'num-zeros': num_zeros_in_grad}, iteration)
        if params_norm is not None:
            writer.add_scalar('params-norm', params_norm, iteration)
            writer.add_scalar('params-norm vs samples', params_norm, args.consumed_train_samples)
            if wandb_writer:
                wandb_writer.log({'params-norm': params_norm}, iteration)
        if args.perform_rl_step:
            grpo_collection_iteration = iteration // (args.grpo_iterations * ( ( args.grpo_samples_per_iteration )// args.global_batch_size ))
            writer.add_scalar('grpo_collection_iteration', grpo_collection_iteration, iteration)
            if wandb_writer:
                wandb_writer.log({'grpo_collection_iteration': grpo_collection_iteration}, iteration)
        if args.log_memory_to_tensorboard:
            mem_stats = torch.cuda.memory_stats()
            writer.add_scalar(
                "mem-reserved-bytes", mem_stats["reserved_bytes.all.current"], iteration
            )
            writer.add_scalar(
                "mem-allocated-bytes", mem_stats["allocated_bytes.all.current"], iteration
            )
            writer.add_scalar(
                "mem-max-allocated-bytes", mem_stats["allocated_bytes.all.peak"], iteration
            )
            writer.add_scalar("mem-allocated-count", mem_stats["allocation.all.current"], iteration)
        if args.log_max_attention_logit:
            writer.add_scalar('max_attention_logit', max_attention_logit, iteration)
            if wandb_writer:
                wandb_writer.log({'max_attention_logit': max_attention_logit}, iteration)
    # Log MoE metrics.
    moe_log_string = ""
    if args.num_experts is not None:
        moe_loss_scale = 1 / get_num_microbatches()
        track_names = []
        if "aux_loss" in args.moe_router_load_balancing_type:
            track_names.append("load_balancing_loss")
        if "seq_aux_loss" in args.moe_router_load_balancing_type:
            track_names.append("seq_load_balancing_loss")
        if "global_aux_loss" in args.moe_router_load_balancing_type:
            track_names.append("global_load_balancing_loss")
        if args.moe_z_loss_coeff is not None:
            track_names.append("z_loss")

        if is_hybrid_model(args):
            from megatron.core.models.hybrid.hybrid_layer_allocation import (
                Symbols,
                parse_hybrid_pattern,
            )

            parsed_pattern = parse_hybrid_pattern(args.hybrid_layer_pattern)
            main_pattern = parsed_pattern.main_pattern or ""
            mtp_pattern = parsed_pattern.mtp_pattern or ""
            main_moe_layers = main_pattern.count(Symbols.MOE)
            mtp_moe_layers_per_depth = mtp_pattern.count(Symbols.MOE)
            if parsed_pattern.mtp_num_depths > 0 and mtp_moe_layers_per_depth > 0:
                mtp_moe_layers = (
                    mtp_moe_layers_per_depth
                    if args.mtp_use_repeated_layer
                    else mtp_moe_layers_per_depth * parsed_pattern.mtp_num_depths
                )
            else:
                mtp_moe_layers = 0
            num_moe_layers = main_moe_layers + mtp_moe_layers
        else:
            if args.moe_layer_freq is None:
                moe_layer_pattern = [1] * args.num_layers
            elif isinstance(args.moe_layer_freq, int):
                moe_layer_pattern = [
                    1 if (i % args.moe_layer_freq == 0) else 0 for i in range(args.num_layers)
                ]
            elif isinstance(args.moe_layer_freq, list):
                moe_layer_pattern = args.moe_layer_freq
            else:
                raise ValueError(f"Invalid moe_layer_freq: {args.moe_layer_freq}")
            main_moe_layers = sum(moe_layer_pattern)
            mtp_moe_layers = 0
            if args.mtp_num_layers and moe_layer_pattern[-1]:
                mtp_moe_layers = 1 if args.mtp_use_repeated_layer else args.mtp_num_layers
            num_moe_layers = main_moe_layers + mtp_moe_layers

        layers = args.num_layers + (args.mtp_num_layers or 0)

        moe_log_string = get_moe_metrics_tracker().report(
            loss_scale=moe_loss_scale,
            iteration=iteration,
            writer=writer,
            wandb_writer=wandb_writer,
            per_layer_logging=args.moe_per_layer_logging,
            force_initialize=True,
            track_names=track_names,
            num_layers=layers,
            num_moe_layers=num_moe_layers,
            moe_layer_freq=args.moe_layer_freq,
            pg_collection=pg_collection,
            total_loss_dict=total_loss_dict,
        )

    # Log MTP metrics.
    if args.mtp_num_layers is not None:
        mtp_loss_scale = 1 / get_num_microbatches()
        MTPLossLoggingHelper.track_mtp_metrics(
            mtp_loss_scale, iteration, writer, wandb_writer, total_loss_dict
        )

    # Track sparse attention indexer loss.
    if args.dsa_indexer_loss_coeff is not None and args.dsa_indexer_loss_coeff > 0:
        indexer_loss_scale = 1 / get_num_microbatches()
        DSAIndexerLossLoggingHelper.track_indexer_metrics(
            loss_scale=indexer_loss_scale,
            iteration=iteration,
            writer=writer,
            wandb_writer=wandb_writer,
            total_loss_dict=total_loss_dict,
        )

    # Dump memory snapshot and print metrics to stdout.
    if iteration % args.log_interval == 0 or is_first_iteration:
        should_prof_rank = (args.profile_ranks == [] or safe_get_rank() in args.profile_ranks)  # [] is all ranks
        if args.record_memory_history and (should_prof_rank or torch.distributed.get_backend() == 'fake'):
            rank = safe_get_rank()
            base, ext = os.path.splitext(args.memory_snapshot_path)
            snapshot_filename = f"{base}_{rank}{ext}"
            torch.cuda.memory._dump_snapshot(snapshot_filename)

        elapsed_time = timers('interval-time').elapsed(barrier=True, reset=should_reset)
        elapsed_time_per_iteration = elapsed_time / total_iterations

        throughput = num_floating_point_operations(
            args,
            batch_size,
            seqlen_squared_sum_in_batch=seqlen_squared_sum_in_batch,
            total_real_tokens_in_batch=total_real_tokens_in_batch,
        ) / (elapsed_time_per_iteration * 10**12 * args.world_size)

        one_logger_utils.track_e2e_metrics(args.log_throughput, throughput)

        # We log to stdout after the first iteration (controlled by `is_first_iteration`)
        # to document initialization overhead. Log statistics to TensorBoard and
        # WandB according to the regular schedule.
        if args.log_timers_to_tensorboard and not is_first_iteration:
            if writer:
                writer.add_scalar('iteration-time', elapsed_time_per_iteration, iteration)
            if wandb_writer:
                wandb_writer.log({'iteration-time': elapsed_time_per_iteration}, iteration)
        log_string = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')}]"
        log_string += ' iteration {:8d}/{:8d} |'.format(iteration, args.train_iters)
        log_string += ' consumed samples: {:12d} |'.format(args.consumed_train_samples)
        if has_rl_utils and args.rl_use_sequence_packing:
            log_string += rl_utils.get_sequence_packing_log_info(args)
        if args.skipped_train_samples > 0:
            log_string += ' skipped samples: {:12d} |'.format(args.skipped_train_samples)
        log_string += ' elapsed time per iteration (ms): {:.1f} |'.format(
            elapsed_time_per_iteration * 1000.0
        )
        if args.log_throughput:
            log_string += f' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'
            if args.log_timers_to_tensorboard:
                if writer:
                    writer.add_scalar('throughput', throughput, iteration)
                if wandb_writer:
                    wandb_writer.log({'throughput': throughput}, iteration)
        if args.log_energy:
            energy = (energy_monitor.lap() / total_iterations) / args.world_size
            power = energy / elapsed_time_per_iteration
            log_string += f' energy per GPU (J/iter/GPU): {energy:.1f} |'
            log_string += f' power per GPU (W/GPU): {power:.1f} |'
            if writer:
                writer.add_scalar('iter-energy/gpu', energy, iteration)
                writer.add_scalar('power/gpu', power, iteration)
            if wandb_writer:
                wandb_writer.log({'iter-energy/gpu': energy}, iteration)
                wandb_writer.log({'power/gpu': power}, iteration)
        # Decoupled_learning_rate should be not None only on first and last pipeline stage.
        if learning_rate is not None:
            log_string += f' learning rate: {learning_rate:.6E} |'
        log_string += f' global batch size: {batch_size:5d} |'

        # OTel: snapshot the accumulator state BEFORE it is torn down. The loop directly
        # below zeroes each loss tensor when should_reset, and the should_reset block
        # further down zeroes advanced/skipped/nan_iters -- so anything read after that
        # point sees 0.0 loss and 0 skipped iterations on EVERY export, which is exactly
        # what the metrics emission (further below, where the other emission inputs like
        # `throughput` are in scope) used to do. Take the values here and emit them there.
        # The .item() is a device sync, so it stays inside the telemetry guard and is not
        # paid at all when telemetry is off -- the same guard the emission itself uses.
        _otel_telemetry_log = get_telemetry()
        _otel_loss_snapshot = None
        _otel_skipped_iters_snapshot = 0
        if _otel_telemetry_log is not None and _otel_telemetry_log.is_exporting:
            _meta_keys = (advanced_iters_key, skipped_iters_key, nan_iters_key)
            _loss_keys = [k for k in total_loss_dict if k not in _meta_keys]
            if _loss_keys:
                _otel_loss_snapshot = total_loss_dict[_loss_keys[0]].item() / float(
                    max(1, total_loss_dict.get(advanced_iters_key, 1))
                )
            _otel_skipped_iters_snapshot = int(total_loss_dict.get(skipped_iters_key, 0))

        for key in total_loss_dict:
            if key not in [advanced_iters_key, skipped_iters_key, nan_iters_key]:
                avg = total_loss_dict[key].item() / float(
                    max(1, total_loss_dict[advanced_iters_key])
                )
                if avg >= 0.0:
                    log_string += ' {}: {:.6E} |'.format(key, avg)
                if should_reset:
                    total_loss_dict[key] = torch.tensor([0.0], dtype=torch.float, device='cuda')
        if args.num_experts is not None and moe_log_string:
            log_string += moe_log_string
        log_string += f' loss scale: {loss_scale:.1f} |'
        if grad_norm is not None:
            log_string += f' grad norm: {grad_norm:.3f} |'
        if num_zeros_in_grad is not None:
            log_string += f' num zeros: {num_zeros_in_grad} |'
        if params_norm is not None:
            log_string += f' params norm: {params_norm:.3f} |'
        log_string += ' number of skipped iterations: {:3d} |'.format(
            total_loss_dict[skipped_iters_key]
        )
        log_string += ' number of nan iterations: {:3d} |'.format(total_loss_dict[nan_iters_key])

        # RL token throughput metrics.
        if args.perform_rl_step:
            log_string += rl_utils.log_rl_throughput_metrics(
                args, batch_size, elapsed_time_per_iteration, iteration, wandb_writer,
            )

        if should_reset:
            total_loss_dict[advanced_iters_key] = 0
            total_loss_dict[skipped_iters_key] = 0
            total_loss_dict[nan_iters_key] = 0
        print_rank_last(log_string)

        # OTel: emit training metrics at log interval (export rank only). Loss and
        # skipped-iteration counts come from the snapshot taken above, before the
        # accumulators were reset; everything else is still live at this point.
        if _otel_telemetry_log is not None and _otel_telemetry_log.is_exporting:
            from megatron.core.telemetry.training_metrics import record_training_metrics
            _avg_loss = _otel_loss_snapshot
            _tokens_per_sec = (
                batch_size * args.seq_length / elapsed_time_per_iteration
                if elapsed_time_per_iteration > 0 else None
            )
            _mem_gb = torch.cuda.max_memory_allocated() / (1024 ** 3) if torch.cuda.is_available() else None
            record_training_metrics(
                meter=_otel_telemetry_log.meter,
                step_duration_ms=elapsed_time_per_iteration * 1000.0,
                loss=_avg_loss,
                throughput_tflops=throughput if args.log_throughput else None,
                grad_norm=grad_norm,
                learning_rate=learning_rate,
                skipped_iters=_otel_skipped_iters_snapshot,
                tokens_per_sec=_tokens_per_sec,
                memory_allocated_gb=_mem_gb,
            )

        reported_memory_in_this_iteration = False
        if report_memory_flag:
            # Report memory after optimizer state has been initialized.
            if torch.distributed.get_rank() == 0:
                num_microbatches = get_num_microbatches()
                report_theoretical_memory(args, num_microbatches=num_microbatches, verbose=True)
            report_memory(
                f'(after {iteration} iterations)',
                process_group=pg_collection.dp if pg_collection is not None else None,
            )
            reported_memory_in_this_iteration = True
            loaded_iteration = max(get_loaded_iteration() or 0, 0)
            if iteration > (loaded_iteration + 1):
                # Make sure the memory after the second iteration is reported to include optimizer state memory.
                report_memory_flag = False
        if args.log_memory_interval is not None and iteration % args.log_memory_interval == 0 and \
            not reported_memory_in_this_iteration:
            report_memory(
                f'(after {iteration} iterations)',
                process_group=pg_collection.dp if pg_collection is not None else None,
            )
        # Log RL profiling data if enabled (must be before timers.log which resets timers).
        # Token throughput metrics are read from RLRuntimeState automatically.
        if args.rl_profile:
            log_iteration_profile(
                iteration=iteration,
                timers=timers,
                elapsed_time_ms=elapsed_time_per_iteration * 1000.0,
                throughput_tflops=throughput if args.log_throughput else None,
                global_batch_size=batch_size,
                wandb_writer=wandb_writer,
                tb_writer=writer,
            )

        # Write timers to wandb, don't reset the counts.
        if args.log_timers_to_tensorboard:
            timers.write(timers_to_log, writer, iteration, normalizer=args.log_interval, reset=False)
            timers.write(timers_to_log, wandb_writer, iteration, normalizer=args.log_interval, reset=False)
        # Log timers to stdout
        timers.log(timers_to_log, normalizer=args.log_interval, reset=should_reset)

    return report_memory_flag


def compute_throughputs_and_append_to_progress_log(iteration, num_floating_point_operations_so_far):
    args = get_args()
    if args.save is None:
        return

    # Compute job throughput.
    # args.num_floating_point_operations_so_far keeps track of floating-point operations
    # completed at the start of job.
    global _TRAIN_START_TIME
    job_throughput = (
        num_floating_point_operations_so_far - args.num_floating_point_operations_so_far
    ) / ((time.time() - _TRAIN_START_TIME) * 10**12 * args.world_size)

    # Compute cumulative throughput since jobs of this world size were launched.
    # `get_start_time_from_progress_log` returns start time and number of floating-point
    # operations of first job of this world size.
    start_time, start_num_floating_point_operations = get_start_time_from_progress_log()
    elapsed_time = (datetime.now() - start_time).total_seconds()
    cumulative_throughput = (
        num_floating_point_operations_so_far - start_num_floating_point_operations
    ) / (elapsed_time * 10**12 * args.world_size)

    tokens_so_far = args.consumed_train_samples * args.seq_length
    saved_ckpt_prefix = 'Saving async checkpoint' if args.async_save else 'Saved checkpoint'
    append_to_progress_log(
        args.save,
        f"{saved_ckpt_prefix}\tIteration: {iteration}\t"
        f"Job throughput: {job_throughput:.1f} TFLOP/s/GPU\t"
        f"Cumulative throughput: {cumulative_throughput:.1f} TFLOP/s/GPU\t"
        f"Floating-point operations: {num_floating_point_operations_so_far:.2e}\t"
        f"Tokens (in billions): {tokens_so_far / 10**9:.2f}"
    )


def _assert_param_gather_overlap_model(model_chunk):
    """Assert that a model chunk implements the parameter-gather overlap lifecycle."""
    # MimoModel is a composite wrapper rather than a DDP instance, but delegates this
    # interface to its active inner DDP modules.
    required_methods = (
        'enable_forward_pre_hook',
        'disable_forward_pre_hook',
        'start_param_sync',
    )
    missing_methods = [
        method_name
        for method_name in required_methods
        if not callable(getattr(model_chunk, method_name, None))
    ]
    assert not missing_methods, (
        f'{type(model_chunk).__name__} does not support parameter-gather overlap; '
        f'missing callable methods: {", ".join(missing_methods)}'
    )


def enable_forward_pre_hook(model_chunks):
    for model_chunk in model_chunks:
        _assert_param_gather_overlap_model(model_chunk)
        model_chunk.enable_forward_pre_hook()


def disable_forward_pre_hook(model_chunks, optimizer=None, param_sync=True):
    if param_sync and optimizer is not None:
        optimizer.prepare_model_params_for_param_sync()
    for model_chunk in model_chunks:
        _assert_param_gather_overlap_model(model_chunk)
        model_chunk.disable_forward_pre_hook(param_sync=param_sync)


def force_param_sync(model_chunks, optimizer=None) -> None:
    if optimizer is not None:
        optimizer.prepare_model_params_for_param_sync()
    for model_chunk in model_chunks:
        _assert_param_gather_overlap_model(model_chunk)
        model_chunk.start_param_sync(force_sync=True)


def save_checkpoint_and_time(
    iteration,
    model,
    optimizer,
    opt_param_scheduler,
    num_floating_point_operations_so_far,
    checkpointing_context,
    non_persistent_ckpt=False,
    train_data_iterator=None,
):
    args = get_args()
    timers = get_timers()
    energy_monitor = get_energy_monitor()

    # OTel: single goodput span parenting ALL exposed (main-thread) checkpoint
    # cost -- the total wall-clock the training loop is blocked on the checkpoint:
    # pre-save buffer free, state-dict generation, the async dispatch, AND the
    # post-save cross-rank skew wait at timers.log. Everything below nests under
    # it (megatron.func.save_checkpoint_and_time, megatron.checkpoint.save,
    # timers_log, post_save_barrier). start_span + context attach (not a `with`)
    # so the whole body isn't re-indented; ended explicitly at the function end.
    _exposed_save_span = None
    _exposed_save_token = None
    if _otel_sg_enabled('checkpoint'):
        from opentelemetry import context as _octx, trace as _otr
        _exposed_save_span = get_telemetry().tracer.start_span('megatron.checkpoint.exposed_save')
        _otel_mark_goodput(_exposed_save_span)
        _exposed_save_span.set_attribute('megatron.iteration', iteration)
        _exposed_save_token = _octx.attach(_otr.set_span_in_context(_exposed_save_span))
    try:

        # Synchronize forward pre-hook state before checkpoint save to avoid race conditions
        if should_disable_forward_pre_hook(args):
            force_param_sync(model, optimizer=optimizer)

        # Stop timer to get accurate train interval time and exclude checkpointing duration
        timers('interval-time').stop()
        energy_monitor.pause()

        # Log E2E metrics before save-checkpoint
        one_logger_utils.track_e2e_metrics()
        # Free overlap param-gather buffers so that the async checkpoint worker
        # process has enough GPU headroom for D2H tensor transfers.
        with _otel_managed_span('checkpoint', 'megatron.checkpoint.reclaim_memory', is_goodput_span=True):
            for model_chunk in model:
                if hasattr(model_chunk, 'free_overlap_buffers'):
                    model_chunk.free_overlap_buffers()

        # timer.log() reports the min & max time. We do not need a barrier here.
        timer_key = 'save-checkpoint-non-persistent' if non_persistent_ckpt else 'save-checkpoint'
        timers(timer_key, log_level=0).start(barrier=False)

        # Resolve checkpoint groups from this rank's module PGC; None for stock runs
        # falls back to the mpu groups inside save_checkpoint (byte-identical).
        ckpt_pgc = getattr(unwrap_model(model)[0], "pg_collection", None)
        tp_group = getattr(ckpt_pgc, "tp", None) if ckpt_pgc is not None else None
        pp_group = getattr(ckpt_pgc, "pp", None) if ckpt_pgc is not None else None
        dp_group = getattr(ckpt_pgc, "dp", None) if ckpt_pgc is not None else None
        # Replica_id needs the gtp_remat-inclusive group (dp_cp_gtp_remat), not replicate dp_cp.
        dp_cp_group = getattr(ckpt_pgc, "dp_cp_gtp_remat", None) if ckpt_pgc is not None else None
        expt_dp_group = getattr(ckpt_pgc, "expt_dp", None) if ckpt_pgc is not None else None
        # Per-grid rng key namespace set by a multi-grid model; '' for stock single-grid.
        rng_state_key_prefix = getattr(unwrap_model(model)[0], "rng_state_key_prefix", "")

        global num_checkpoints_memory_reported, MAX_NUM_CHECKPOINTS_MEMORY_REPORTED
        should_report_memory = num_checkpoints_memory_reported < MAX_NUM_CHECKPOINTS_MEMORY_REPORTED

        if should_report_memory:
            # Track memory before checkpoint save.
            report_memory(f"(before save_checkpoint for iteration {iteration})", process_group=dp_group)

        # Save checkpoint.
        with _otel_managed_span('checkpoint', 'megatron.checkpoint.save', is_goodput_span=True, **{'megatron.iteration': iteration}):
            save_checkpoint(
                iteration,
                model,
                optimizer,
                opt_param_scheduler,
                num_floating_point_operations_so_far,
                checkpointing_context,
                non_persistent_ckpt=non_persistent_ckpt,
                train_data_iterator=train_data_iterator,
                preprocess_common_state_dict_fn=preprocess_common_state_dict,
                tp_group=tp_group,
                pp_group=pp_group,
                dp_cp_group=dp_cp_group,
                dp_group=dp_group,
                expt_dp_group=expt_dp_group,
                rng_state_key_prefix=rng_state_key_prefix,
            )

            # Stop timer and compute time elapsed to save checkpoint. Stop timer before timers.log() call as it resets the timer.
            # Since timer.log() reports the min & max time, we do not need a barrier here.
            timers(timer_key).stop(barrier=False)
            save_checkpoint_duration = timers(timer_key).elapsed(reset=False)
        if should_report_memory:
            # Track memory after checkpoint save.
            with _otel_managed_span('checkpoint', 'megatron.checkpoint.report_memory', is_goodput_span=True):
                report_memory(f"(after save_checkpoint for iteration {iteration})", process_group=dp_group)
        num_checkpoints_memory_reported += 1

        if args.fp8:
            # Run garbage collection after checkpoint saving to free memory from
            # dequantized bf16 tensors that were temporarily created during fp8
            # model checkpoint saving.
            with _otel_managed_span('checkpoint', 'megatron.checkpoint.gc_collect', is_goodput_span=True):
                gc.collect()

        # timers.log reports min & max across ranks -> a collective. Sitting right
        # after the per-rank-imbalanced save (and outside the save spans), it's a
        # prime spot for the fast ranks to serialize waiting for the slowest saver.
        with _otel_managed_span('step', 'megatron.checkpoint.timers_log', is_goodput_span=True):
            timers.log([timer_key])

        # Log E2E metrics after save-checkpoint
        one_logger_utils.track_e2e_metrics()

        one_logger_utils.on_save_checkpoint_end(save_checkpoint_duration, iteration, args.async_save)

        if args.log_progress and not non_persistent_ckpt:
            compute_throughputs_and_append_to_progress_log(
                iteration, num_floating_point_operations_so_far
            )

        # Recover timing
        energy_monitor.resume()
        # Interval-time timer restarts with an explicit GLOBAL BARRIER -- the first
        # hard sync after the checkpoint. If the skew didn't already serialize at
        # timers.log above, it serializes HERE: fast ranks block for the slowest
        # saver. Outside every save span, so it read as the dark post-checkpoint gap.
        timers('interval-time', log_level=0).start(barrier=True)

        # OTel: close the exposed-save goodput span that parents all of the above.
    finally:
        if _exposed_save_span is not None:
            from opentelemetry import context as _octx
            _octx.detach(_exposed_save_token)
            _exposed_save_span.end()


def _run_gpu_sniff_test(tag, span_name='megatron.train.sniff_test'):
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.training.gpu_sniff_test import run_gpu_sniff_test

    # Two call sites with distinct span names (span_name): the once-at-start
    # 'megatron.startup.sniff_test' run in train()'s preamble, and the periodic
    # --gpu-sniff-test-interval 'megatron.train.sniff_test' runs in the step
    # loop. The tag attribute additionally records which invocation this is.
    with _otel_managed_span('job', span_name, is_goodput_span=True, **{'megatron.sniff_test.tag': tag}):
        pg_collection = ProcessGroupCollection.use_mpu_process_groups(
            required_pgs=['ep', 'dp', 'tp'],
        )
        print_datetime(f'running GPU sniff test ({tag})')
        timers = get_timers()
        timers('gpu-sniff-test', log_level=0).start(barrier=True)
        run_gpu_sniff_test(tag, pg_collection=pg_collection)
        timers('gpu-sniff-test').stop(barrier=True)
    timers.log(['gpu-sniff-test'])
    print_datetime(f'finished GPU sniff test ({tag})')


def post_training_step_callbacks(
    model,
    optimizer,
    opt_param_scheduler,
    iteration,
    prof,
    num_floating_point_operations_since_last_log_event,
    nsys_nvtx_context = None,
):
    """Run all post-training-step functions (e.g., FT heartbeats, GC)."""
    args = get_args()

    # Bring CPU and GPU back in sync if on right iteration.
    if args.train_sync_interval and iteration % args.train_sync_interval == 0:
        torch.cuda.synchronize()

    # Straggler detector.
    if iteration % args.log_interval == 0 and args.log_straggler:
        # Use FLOPs accumulated since last log event and then reset the counter
        stimer.report(num_floating_point_operations_since_last_log_event, args.log_interval)
        num_floating_point_operations_since_last_log_event = 0.0

    # Check weight hash across DP replicas.
    if (
        args.check_weight_hash_across_dp_replicas_interval is not None
        and iteration % args.check_weight_hash_across_dp_replicas_interval == 0
    ):
        if should_disable_forward_pre_hook(args):
            disable_forward_pre_hook(model, optimizer=optimizer)
        assert check_param_hashes_across_dp_replicas(
            model, cross_check=True
        ), "Parameter hashes not matching across DP replicas"
        torch.distributed.barrier()
        print_rank_0(f">>> Weight hashes match after {iteration} iterations...")
        if should_disable_forward_pre_hook(args):
            enable_forward_pre_hook(model)

    # Autoresume.
    if args.adlr_autoresume and (iteration % args.adlr_autoresume_interval == 0):
        check_adlr_autoresume_termination(iteration, model, optimizer, opt_param_scheduler)

    # Profiling.
    if (
        args.profile
        and iteration == args.profile_step_end
        and (len(args.profile_ranks) == 0 or
             torch.distributed.get_rank() in args.profile_ranks)
    ):
        # Disable NVTX range when profiling ends.
        if args.nvtx_ranges:
            configure_nvtx_profiling(False)
        if args.use_pytorch_profiler:
            assert prof is not None
            prof.stop()
            if prof.execution_trace_observer is not None:
                prof.execution_trace_observer.unregister_callback()
        else:
            torch.cuda.check_error(torch.cuda.cudart().cudaProfilerStop())
            if nsys_nvtx_context is not None:
                nsys_nvtx_context.__exit__(None, None, None)

    # GPU sniff test.
    if (
        args.gpu_sniff_test_interval is not None
        and iteration % args.gpu_sniff_test_interval == 0
    ):
        _run_gpu_sniff_test(f'iteration {iteration:7d}')

    # Manual garbage collection. With --manual-gc the interpreter's automatic
    # collector is off; this synchronous full collection is the only GC. With
    # manual_gc_interval=0 (the common case) it never fires.
    if args.manual_gc:
        if args.manual_gc_interval != 0 and iteration % args.manual_gc_interval == 0:
            with _otel_managed_span('step', 'megatron.train.gc_collect', is_goodput_span=True):
                gc.collect()

    # Return updated FLOPs accumulator so caller can persist the reset
    return num_floating_point_operations_since_last_log_event


def checkpoint_and_decide_exit(
    model,
    optimizer,
    opt_param_scheduler,
    iteration,
    num_floating_point_operations_so_far,
    checkpointing_context,
    train_data_iterator,
):
    """Save checkpoint and decide whether to exit based on arguments (e.g., if
    --exit-duration-in-mins is set). Actual exit happens in main training loop
    based on the return value of this function."""
    args = get_args()
    timers = get_timers()

    # Exit based on signal handler.
    saved_checkpoint = False
    if args.exit_signal_handler:
        signal_handler = get_signal_handler()
        if any(signal_handler.signals_received()):
            if args.save:
                save_checkpoint_and_time(
                    iteration,
                    model,
                    optimizer,
                    opt_param_scheduler,
                    num_floating_point_operations_so_far,
                    checkpointing_context,
                    train_data_iterator=train_data_iterator,
                )
            print_datetime('exiting program after receiving SIGTERM.')

            return True

    # Regular save (persistent and non-persistent).
    if args.save and args.save_interval and iteration % args.save_interval == 0:
        save_checkpoint_and_time(
            iteration,
            model,
            optimizer,
            opt_param_scheduler,
            num_floating_point_operations_so_far,
            checkpointing_context,
            train_data_iterator=train_data_iterator,
        )
        saved_checkpoint = True

    elif (
        args.save
        and args.non_persistent_save_interval
        and iteration % args.non_persistent_save_interval == 0
    ):
        save_checkpoint_and_time(
            iteration,
            model,
            optimizer,
            opt_param_scheduler,
            num_floating_point_operations_so_far,
            checkpointing_context,
            non_persistent_ckpt=True,
            train_data_iterator=train_data_iterator,
        )
        saved_checkpoint = True

    # Exit based on duration.
    if args.exit_duration_in_mins:
        train_time = (time.time() - _TRAIN_START_TIME) / 60.0
        done_cuda = torch.tensor(
            [train_time > args.exit_duration_in_mins], dtype=torch.int, device='cuda'
        )
        # MAX all-reduce so every rank makes the SAME exit decision despite each
        # reading its own wall-clock (a determinism guarantee, not a sync point).
        # ~0.1ms and left unspanned: the GPU is already drained by here, and the
        # real post-checkpoint wait is the cross-rank save skew at timers.log.
        torch.distributed.all_reduce(done_cuda, op=torch.distributed.ReduceOp.MAX)
        done = done_cuda.item()
        if done:
            if args.save and not saved_checkpoint:
                save_checkpoint_and_time(
                    iteration,
                    model,
                    optimizer,
                    opt_param_scheduler,
                    num_floating_point_operations_so_far,
                    checkpointing_context,
                    train_data_iterator=train_data_iterator,
                )
            print_datetime(f'exiting program after {train_time} minutes')

            return True

    # Exit based on iterations.
    if (
        args.exit_interval
        and iteration % args.exit_interval == 0
    ) or (
        args.phase_transition_iterations
        and iteration in args.phase_transition_iterations
    ):
        if args.save and not saved_checkpoint:
            save_checkpoint_and_time(
                iteration,
                model,
                optimizer,
                opt_param_scheduler,
                num_floating_point_operations_so_far,
                checkpointing_context,
                train_data_iterator=train_data_iterator,
            )
        print_datetime(f'exiting program at iteration {iteration}')

        return True

    return False


def train(
    forward_step_func,
    model,
    optimizer,
    opt_param_scheduler,
    train_data_iterator,
    valid_data_iterator,
    process_non_loss_data_func,
    config,
    checkpointing_context,
    non_loss_data_func,
    inference_model=None,
    p2p_communicator: Optional[P2PCommunicator] = None,
    pg_collection: Optional[ProcessGroupCollection | MultiModuleProcessGroupCollection] = None,
):
    """Training function: run train_step desired number of times, run validation, checkpoint.

    p2p_communicator: optional communicator forwarded to the schedule for cross-grid P2P; None
        preserves the default behavior.
    pg_collection: optional carrier forwarded to the schedule for the cross-grid case; None
        preserves the default behavior.
    """
    args = get_args()
    timers = get_timers()

    fault_injector_kwargs = {}
    for f in dataclasses.fields(FaultInjectorConfig):
        if hasattr(args, f.name):
            fault_injector_kwargs[f.name] = getattr(args, f.name)
    fault_injector_config = FaultInjectorConfig(**fault_injector_kwargs)

    _maybe_raise_workload_exception = None
    if (
        fault_injector_config.fault_injector_ranks is not None
        or fault_injector_config.fault_injector_num_ranks is not None
    ):
        from megatron.core.fault_injector import (
            maybe_raise_workload_exception as _maybe_raise_workload_exception,
        )
        from megatron.core.fault_injector import (
            setup_fault_injection,
            should_setup_fault_injection_at_iteration,
            should_setup_fault_injection_at_start,
        )

        if should_setup_fault_injection_at_start(fault_injector_config):
            setup_fault_injection(fault_injector_config)

    if args.perform_rl_step:
        assert has_rl_utils, "RL cannot run without the megatron.rl package"

    # Additional variable initialization for RL training
    if args.perform_rl_step:
        if args.skip_train:
            # In inference-only mode, use current weights as reference.
            print_rank_0("> RL inference-only: using current weights as reference.")
            ref_state_dict = {
                k: (v.cpu() if v is not None else v) for k, v in model[0].state_dict().items()
            }
        else:
            print_rank_0("> Loading pretrained checkpoint for reference weights in RL training...")
            load, finetune, no_load_optim = args.load, args.finetune, args.no_load_optim
            args.no_load_optim = True

            # Load pretrained checkpoint
            args.load = None
            args.finetune = True
            load_checkpoint(
                    model,
                    None,  # Don't load optimizer state
                    None,  # Don't load scheduler state
                    checkpointing_context=checkpointing_context,
                    skip_load_to_model_and_opt=HAVE_FSDP2
                    and getattr(args, "use_torch_fsdp2", False)
                    and args.ckpt_format == "torch_dist",
                )
            ref_state_dict = {k: (v.cpu() if v is not None else v) for k, v in model[0].state_dict().items()}

            # Reload RL training checkpoint weights
            args.load = load
            args.finetune = finetune
            print_rank_0("> Reloading RL training checkpoint...")
            load_checkpoint(
                    model,
                    None,
                    None,
                    checkpointing_context=checkpointing_context,
                    skip_load_to_model_and_opt=HAVE_FSDP2
                    and getattr(args, "use_torch_fsdp2", False)
                    and args.ckpt_format == "torch_dist",
                )

            args.no_load_optim = no_load_optim

    lang_pgc = (
        pg_collection.get_language_model_collection()
        if isinstance(pg_collection, MultiModuleProcessGroupCollection)
        and pg_collection.has_language_model()
        else None
    )

    def _dp_world_size():
        # Full DP x gtp_remat degree (num_microbatches spans the full data-distribution axis).
        gtp_remat = args.gtp_weight_remat_size
        if lang_pgc is not None:
            return lang_pgc.dp.size() * gtp_remat
        if mpu.model_parallel_is_initialized():
            return mpu.get_data_parallel_world_size()
        # args.data_parallel_size is the language (llm) dp on all ranks (set in validate_args) and
        # excludes gtp_remat, so scale by gtp_remat to span the full data-distribution axis.
        return args.data_parallel_size * gtp_remat

    # IMPORTANT FIX: For RL training, reinitialize the microbatch calculator with the correct configuration
    if args.perform_rl_step:
        print_rank_0("> Reinitializing microbatch calculator for GRPO training...")
        from megatron.core.num_microbatches_calculator import (
            destroy_num_microbatches_calculator,
            init_num_microbatches_calculator,
        )

        # First destroy the existing calculator
        destroy_num_microbatches_calculator()
        # Then initialize with the correct perform_rl_step=True context
        init_num_microbatches_calculator(
            rank=args.rank,
            global_batch_size=args.global_batch_size,
            micro_batch_size=args.micro_batch_size,
            data_parallel_size=_dp_world_size(),
            decrease_batch_size_if_needed=args.decrease_batch_size_if_needed,
            step_batch_size_schedule=args.step_batch_size_schedule,
            seq_length=args.seq_length,
        )
        print_rank_0(f"> GRPO training: num_microbatches set to {get_num_microbatches()}")

    energy_monitor = get_energy_monitor()
    one_logger = get_one_logger()

    if args.hybrid_context_parallel:
        train_data_iterator = iter(HybridCPDataLoaderWrapper(train_data_iterator, config))

    if args.run_workload_inspector_server:
        try:
            import threading

            from workload_inspector.utils.webserver import run_server

            threading.Thread(
                target=run_server, daemon=True, args=(torch.distributed.get_rank(),)
            ).start()
        except ModuleNotFoundError:
            print_rank_0("workload inspector module not found.")

    # Write args to tensorboard
    write_args_to_tensorboard()

    # Turn on training mode which enables dropout.
    for model_module in model:
        model_module.train()

    model_pg_collection = get_attr_wrapped_model(model[0], "pg_collection")

    # Tracking loss.
    total_loss_dict = {}

    # Iterations.
    iteration = args.iteration
    # Make sure rerun_state_machine has the right iteration loaded from checkpoint.
    rerun_state_machine = get_rerun_state_machine()
    if rerun_state_machine.current_iteration != iteration:
        print_rank_0(f"Overwriting rerun_state_machine.current_iteration from "
                     f"{rerun_state_machine.current_iteration} to {iteration}...")
        rerun_state_machine.current_iteration = iteration

    # Track E2E metrics at the start of training.
    one_logger_utils.on_train_start(
        iteration=iteration,
        consumed_train_samples=args.consumed_train_samples,
        train_samples=args.train_samples,
        seq_length=args.seq_length,
        train_iters=args.train_iters,
        save=args.save,
        async_save=args.async_save,
        log_throughput=args.log_throughput,
        num_floating_point_operations_so_far=args.num_floating_point_operations_so_far,
    )

    num_floating_point_operations_so_far = args.num_floating_point_operations_so_far

    # Setup some training config params.
    config.grad_scale_func = optimizer.scale_loss if optimizer is not None else None
    config.timers = timers
    if isinstance(
        model[0], (FullyShardedDataParallelV1, FullyShardedDataParallelV2, DDP)
    ) and args.overlap_grad_reduce:
        assert config.no_sync_func is None, (
            'When overlap_grad_reduce is True, config.no_sync_func must be None; '
            'a custom no_sync_func is not supported when overlapping grad-reduce'
        )
        config.no_sync_func = [model_chunk.no_sync for model_chunk in model]
        if len(model) == 1:
            config.no_sync_func = config.no_sync_func[0]
        if args.align_grad_reduce:
            config.grad_sync_func = [model_chunk.start_grad_sync for model_chunk in model]
            if len(model) == 1:
                config.grad_sync_func = config.grad_sync_func[0]
    if args.overlap_param_gather and args.align_param_gather:
        config.param_sync_func = [model_chunk.start_param_sync for model_chunk in model]
        if len(model) == 1:
            config.param_sync_func = config.param_sync_func[0]
    # Preserve a builder-installed finalize hook; only default it when unset.
    if config.finalize_model_grads_func is None:
        config.finalize_model_grads_func = finalize_model_grads

    if args.log_energy:
        energy_monitor.setup()
        energy_monitor.resume()

    timers('interval-time', log_level=0).start(barrier=True)
    print_datetime('before the start of training step')

    # GPU sniff test at start of training.
    if args.gpu_sniff_test_interval is not None:
        _run_gpu_sniff_test('before training', span_name='megatron.startup.sniff_test')

    # Initialize router trace if requested.  The tracer attaches forward hooks
    # to all TopKRouter modules and writes one JSONL record per (iteration,
    # layer).  advance_step() is called at the end of each train_step().
    if getattr(args, 'moe_routing_trace_path', None):
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        max_steps = getattr(args, 'moe_routing_trace_max_training_iters', None) or args.train_iters
        init_moe_router_tracer(
            output_dir=args.moe_routing_trace_path,
            max_steps=max_steps,
            rank=rank,
            training_mode=True,
            capture_hidden_states=getattr(args, 'moe_routing_trace_capture_hidden_states', False),
            capture_logits=getattr(args, 'moe_routing_trace_capture_logits', False),
            dump_router_weights=getattr(args, 'moe_routing_trace_dump_weights', False),
        )
        get_moe_router_tracer().register_hooks(model)

    report_memory_flag = True
    pre_hook_enabled = False
    should_exit = False
    exit_code = 0
    is_first_iteration = True

    if args.manual_gc:
        # Disable the default garbage collector and perform the collection manually.
        # This is to align the timing of garbage collection across ranks.
        assert (
            args.manual_gc_interval >= 0
        ), 'Manual garbage collection interval should be larger than or equal to 0'
        gc.disable()
        gc.collect()

    # Singleton initialization of straggler detector.
    if args.log_straggler:
        global stimer
        world = torch.distributed.get_world_size()
        rank = torch.distributed.get_rank()
        mmcnt = args.straggler_minmax_count
        stimer.configure(
            world,
            rank,
            mmcnt=mmcnt,
            enabled=not args.disable_straggler_on_startup,
            port=args.straggler_ctrlr_port,
        )
    num_floating_point_operations_since_last_log_event = 0.0

    num_microbatches = get_num_microbatches()
    eval_duration = 0.0
    eval_iterations = 0
    # Wrap forward_backward_func for Full iteration CUDA graph
    forward_backward_func = get_forward_backward_func(
        schedule_pg_collection=pg_collection
    )
    if args.cuda_graph_impl == "full_iteration":
        forward_backward_func = FullCudaGraphWrapper(
            forward_backward_func,
            cuda_graph_warmup_steps=args.cuda_graph_warmup_steps,
            use_single_mempool=config.cuda_graph_use_single_mempool,
        )
    # Wrap forward_backward_func for overflow handling with moe_expert_rank_capacity_factor
    if args.moe_expert_rank_capacity_factor is not None:
        copy_main_params = args.reuse_grad_buf_for_mxfp8_param_ag and args.overlap_param_gather
        forward_backward_func = PagedStashRunner(
            config,
            copy_main_params,
            model,
            optimizer,
            forward_backward_func,
        )
    if args.optimizer_cuda_graph:
        optimizer.step = OptimizerCudaGraphWrapper(
            optimizer.step,
            cuda_graph_warmup_steps=args.cuda_graph_warmup_steps,
            use_single_mempool=config.cuda_graph_use_single_mempool,
        )

    def get_e2e_base_metrics():
        """Get base metrics values for one-logger to calculate E2E tracking metrics."""
        num_floating_point_operations_since_current_train_start = (
            num_floating_point_operations_so_far - args.num_floating_point_operations_so_far
        )
        return {
            'iteration': iteration,
            'train_duration': timers('interval-time').active_time(),
            'eval_duration': eval_duration,
            'eval_iterations': eval_iterations,
            'total_flops_since_current_train_start': num_floating_point_operations_since_current_train_start,
            'num_floating_point_operations_so_far': num_floating_point_operations_so_far,
            'consumed_train_samples': args.consumed_train_samples,
            'world_size': args.world_size,
            'seq_length': args.seq_length,
        }

    # Cache into one-logger for callback.
    if one_logger:
        with one_logger.get_context_manager():
            one_logger.store_set('get_e2e_base_metrics', get_e2e_base_metrics)

    prof = None
    nsys_nvtx_context = None # reference to context for nsys profiling, so it can be cleaned up
    if (
        args.profile
        and (len(args.profile_ranks) == 0 or
             torch.distributed.get_rank() in args.profile_ranks)
        and args.use_pytorch_profiler
    ):
        if args.pytorch_profiler_collect_chakra:
            et_dir = Path(f"{args.tensorboard_dir}/../chakra")
            et_dir.mkdir(parents=True, exist_ok=True)
            et = torch.profiler.ExecutionTraceObserver().register_callback(f"{et_dir}/rank-{torch.distributed.get_rank()}.json.gz")
        else:
            et = None
        def trace_handler(p):
            profile_dir = Path(f"{args.tensorboard_dir}/../torch_profile")
            profile_dir.mkdir(parents=True, exist_ok=True)
            p.export_chrome_trace(f"{profile_dir}/rank-{torch.distributed.get_rank()}.json.gz")
        prof = torch.profiler.profile(
            schedule=torch.profiler.schedule(
                wait=max(args.profile_step_start - 1, 0),
                warmup=1 if args.profile_step_start > 0 else 0,
                active=args.profile_step_end - args.profile_step_start,
                repeat=1,
            ),
            on_trace_ready=trace_handler,
            record_shapes=args.pytorch_profiler_collect_shapes,
            with_stack=args.pytorch_profiler_collect_callstack,
            execution_trace_observer=et,
        )
        prof.start()

    start_iteration = iteration
    # Disable forward pre-hook to start training to ensure that errors in checkpoint loading
    # or random initialization don't propagate to all ranks in first all-gather (which is a
    # no-op if things work correctly).
    if should_disable_forward_pre_hook(args):
        disable_forward_pre_hook(model, param_sync=False)
        # Also remove param_sync_func temporarily so that sync calls made in
        # `forward_backward_func` are no-ops.
        param_sync_func = config.param_sync_func
        config.param_sync_func = None
        pre_hook_enabled = False
    # Also, check weight hash across DP replicas to be very pedantic. This hashes
    # every parameter and all-reduces across DP replicas + a barrier -- it's
    # typically the dominant cost of the train() preamble, so it gets its own
    # span (parented to megatron.startup, still open here).
    if args.check_weight_hash_across_dp_replicas_interval is not None:
        with _otel_managed_span('job', 'megatron.startup.weight_hash_check', is_goodput_span=True):
            assert check_param_hashes_across_dp_replicas(
                model, cross_check=True
            ), "Parameter hashes not matching across DP replicas"
            torch.distributed.barrier()
        print_rank_0(f">>> Weight hashes match after {iteration} iterations...")

    # Initialize CUDA Graphs helper.
    if args.cuda_graph_impl == "transformer_engine":
        cuda_graph_helper = TECudaGraphHelper(
            model=model,
            config=config,
            seq_length=args.seq_length,
            micro_batch_size=args.micro_batch_size,
            optimizers=[optimizer],
        )

    # OTel: everything above in train() (the preamble: weight-hash check, sniff
    # test, cuda-graph helper init) was init and parented to megatron.startup, which
    # stayed open through it. Close startup now; the steady-state loop below is
    # emitted as one megatron.train span per interval (see
    # _reroot_otel_interval), not one umbrella. _start_otel_train_span just arms the
    # per-interval counter; the first loop pass opens the first block.
    _end_otel_startup_span()
    _start_otel_train_span()

    # Run training iterations till done.
    buffered_rollouts = None
    while iteration < args.train_iters:
        # At each checkpoint-interval boundary, re-root into a new trace so this
        # pass's iteration + (this interval's) checkpoint/eval/sniff form one compact
        # trace instead of accreting into a run-long one. Must be the first thing in
        # the pass so everything below nests under the current interval root.
        _maybe_reroot_otel_interval()
        if (args.profile
            and (len(args.profile_ranks) == 0 or
                 torch.distributed.get_rank() in args.profile_ranks)):
            # Enable NVTX range when profiling starts and nvtx_ranges is set.
            if iteration == args.profile_step_start and args.nvtx_ranges:
                configure_nvtx_profiling(True)
            if args.use_pytorch_profiler:
                prof.step()
            elif iteration == args.profile_step_start:
                torch.cuda.check_error(torch.cuda.cudart().cudaProfilerStart())
                if args.record_shapes:
                    nsys_nvtx_context = torch.autograd.profiler.emit_nvtx(record_shapes=args.record_shapes)
                    nsys_nvtx_context.__enter__()

        # Fault-tolerance heartbeat at the top of the loop -- uninstrumented
        # main-thread work that sits in the post-checkpoint gap alongside the
        # exit-duration barrier.
        with _otel_managed_span('checkpoint', 'megatron.checkpoint.ft_heartbeat', is_goodput_span=True):
            ft_integration.on_checkpointing_start()
        # Non-blocking finalize of the *previous* async checkpoint, on the
        # training critical path -- this is the "exposed" cost the async save
        # imposes back on the loop (the flip side of the background write span
        # on the worker), and shows up as a per-iteration gap near checkpoint
        # boundaries. Cheap most iterations, blocks when finalizing.
        with _otel_managed_span('checkpoint', 'megatron.checkpoint.save.finalize', is_goodput_span=True):
            maybe_finalize_async_save(blocking=False)
        ft_integration.on_checkpointing_end(is_async_finalization=True)
        # Update the timeout for all process groups after initialization
        # We update the timeout after the first successful iteration,
        # which takes longer than others usually
        if args.distributed_timeout_seconds_after_init is not None and iteration == start_iteration+1:
            # TODO: some dynamic timeout setting is required
            # based on the iteration time considering interval-based steps (e.g. eval, checkpoint)
            # e.g. timeout for normal iterations vs timeout for iterations with checkpoint
            # this timeout is triggered when there's no collective communication
            # for the duration of timeout
            update_pg_timeout(timedelta(seconds=args.distributed_timeout_seconds_after_init))
        # Update number of microbatches first without consistency check to decide if a
        # checkpoint should be saved. If the number of microbatches is different
        # from the previous iteration, save a checkpoint. Then run consistency check
        # to make sure training configuration is still valid.
        # Standard microbatch update (sequence packing overrides this in rl_utils.py)
        update_num_microbatches(args.consumed_train_samples, consistency_check=False, verbose=True)
        # Skip automatic checkpoint on microbatch changes when sequence packing is active
        # as it intentionally reconfigures microbatches
        if get_num_microbatches() != num_microbatches and iteration != 0:
            if args.rl_use_sequence_packing:
                print_rank_0(
                    f"[Sequence Packing] Skipping automatic checkpoint at iteration {iteration} "
                    f"(microbatch change: {num_microbatches} -> {get_num_microbatches()})"
                )
            else:
                assert get_num_microbatches() > num_microbatches, (
                    f"Number of microbatches should not decrease; "
                    f"going from {num_microbatches} to {get_num_microbatches()}"
                )
                if args.save is not None:
                    save_checkpoint_and_time(
                        iteration,
                        model,
                        optimizer,
                        opt_param_scheduler,
                        num_floating_point_operations_so_far,
                        checkpointing_context,
                        train_data_iterator=train_data_iterator,
                    )
        num_microbatches = get_num_microbatches()
        update_num_microbatches(args.consumed_train_samples, consistency_check=True, verbose=True)

        # Capture CUDA Graphs. One-off, at the warmup-step boundary -- the actual
        # graph capture (create_cudagraphs) is a notable one-time cost worth its
        # own span, distinct from the megatron.train.iteration spans around it.
        if (
            args.cuda_graph_impl == "transformer_engine"
            and not cuda_graph_helper.capture_finished()
            and iteration - start_iteration == args.cuda_graph_warmup_steps
        ):
            with _otel_managed_span(
                'job', 'megatron.train.cuda_graph_capture', is_goodput_span=True, **{'megatron.iteration': iteration}
            ):
                if args.cuda_graph_warmup_steps > 0 and should_disable_forward_pre_hook(args):
                    disable_forward_pre_hook(model, param_sync=False)
                cuda_graph_helper.create_cudagraphs()
                if args.cuda_graph_warmup_steps > 0 and should_disable_forward_pre_hook(args):
                    enable_forward_pre_hook(model)
                    cuda_graph_helper.cuda_graph_set_manual_hooks()

        # Completely skip iteration if needed.
        if (iteration + 1) in args.iterations_to_skip:
            # Dummy train_step to fast forward train_data_iterator.
            dummy_train_step(train_data_iterator)
            if iteration == start_iteration:
                start_iteration = iteration + 1
            iteration += 1
            batch_size = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_samples += batch_size
            args.skipped_train_samples += batch_size
            continue

        args.curr_iteration = iteration
        # For GRPO, we keep the data for a few epochs. DeepSeekMath paper calls this number $\mu$.
        # It is similar to a PPO epoch.

        if args.perform_rl_step:
            if optimizer is None:
                # Release stale CUDA cached memory before inference.
                torch.cuda.empty_cache()
            with torch.no_grad():
                train_data_iterator = rl_utils.get_grpo_data_iterator(
                    model, inference_model, optimizer, iteration, ref_state_dict,
                    grpo_iterations=args.grpo_iterations,
                    grpo_prompts_per_step=args.grpo_prompts_per_step,
                    grpo_group_size=args.grpo_group_size,
                    global_batch_size=args.global_batch_size,
                    sequence_packing=args.rl_use_sequence_packing,
                    buffered_rollouts=buffered_rollouts,
                    is_correction=args.rl_inference_logprobs_is_correction,
                    optimizer_is_on_cpu=args.rl_offload_optimizer_during_inference,
                )
                # Buffered rollouts are used as a state container for setups when
                # we use previously-generated data for an update.
                buffered_rollouts = train_data_iterator

        if args.skip_train:
            # RL inference-only mode: skip gradient updates, just collect rollouts.
            loss_dict = {}
            skipped_iter = 0
            should_checkpoint = False
            should_exit = False
            exit_code = 0
            grad_norm = 0.0
            num_zeros_in_grad = 0
            max_attention_logit = None
            _step_span = None
        else:
            # OTel: dedicated span for the first iteration actually executed in this
            # process (post checkpoint-resume, post iteration-skip) — not iteration 1,
            # just the first one that runs. Kept separate from the per-step span below
            # since it captures one-off warmup costs (compilation, CUDA graph capture,
            # prefetch) that steady-state iterations don't pay.
            _first_iter_span_cm = (
                _otel_managed_span(
                    'first_iteration', 'megatron.train.first_iteration', is_goodput_span=True,
                    **{'megatron.iteration': iteration},
                )
                if is_first_iteration
                else nullcontext()
            )
            # OTel: optional per-step span wrapping the real train_step.
            with _first_iter_span_cm, _otel_managed_span('step', 'megatron.train.iteration', is_goodput_span=True, **{'megatron.iteration': iteration}) as _step_span:
                ft_integration.on_training_step_start()
                (
                    loss_dict,
                    skipped_iter,
                    should_checkpoint,
                    should_exit,
                    exit_code,
                    grad_norm,
                    num_zeros_in_grad,
                    max_attention_logit,
                ) = train_step(
                    forward_step_func, train_data_iterator, model, optimizer, opt_param_scheduler, config, forward_backward_func, iteration=iteration,
                    pg_collection=pg_collection,
                    p2p_communicator=p2p_communicator,
                )
                ft_integration.on_training_step_end()
                if _maybe_raise_workload_exception is not None and iteration != start_iteration:
                    _maybe_raise_workload_exception()
                # Fault delay timing can start at the end of iteration N. Self-firing faults
                # (signals, GIL, GPU) may then manifest in iteration N or N+1 depending on the
                # configured delay; workload-exception faults manifest on a later poll.
                if _maybe_raise_workload_exception is not None and should_setup_fault_injection_at_iteration(
                    fault_injector_config, iteration
                ):
                    setup_fault_injection(fault_injector_config)
                if _step_span is not None:
                    _otel_safe_set_attrs(
                        _step_span, {'megatron.skipped': bool(skipped_iter)}
                    )
        if should_checkpoint:
            save_checkpoint_and_time(
                iteration,
                model,
                optimizer,
                opt_param_scheduler,
                num_floating_point_operations_so_far,
                checkpointing_context,
                train_data_iterator=train_data_iterator,
            )
        if should_exit:
            break

        # Enable forward pre-hooks after first set of forward and backward passes.
        # When running in fp16, skip all NaN iterations until steady-state loss scaling value
        # is reached.
        if iteration == start_iteration:
            if skipped_iter:
                # Only enable forward pre-hook after a training step has successfully run. Relevant
                # for fp16 codepath where first XX iterations are skipped until steady-state loss
                # scale value is reached.
                start_iteration = iteration + 1
            else:
                # Enable forward pre-hook after training step has successfully run. All subsequent
                # forward passes will use the forward pre-hook / `param_sync_func` in
                # `forward_backward_func`. One-time (iteration == start_iteration)
                # param-gather pre-hook re-enable -- runs between the train_step
                # and train_log spans on the first iteration only, which is
                # exactly the ~1.8s post-first-iteration gap.
                if should_disable_forward_pre_hook(args):
                    with _otel_managed_span('first_iteration', 'megatron.train.forward_pre_hook', is_goodput_span=True):
                        enable_forward_pre_hook(model)
                    config.param_sync_func = param_sync_func
                    pre_hook_enabled = True
                    # Set the manual hooks here since it's not set right after the capturing.
                    if (
                        args.cuda_graph_impl == "transformer_engine"
                        and args.cuda_graph_warmup_steps == 0
                    ):
                        assert (
                            cuda_graph_helper.capture_finished()
                        ), "CUDA Graph capture should have been finished."
                        cuda_graph_helper.cuda_graph_set_manual_hooks()

        iteration += 1

        # If requested, manually register FSDP communication buffers after a short warmup.
        if (
            getattr(args, "fsdp_manual_registration", False)
            and getattr(args, "nccl_ub", False)
            and getattr(args, "use_megatron_fsdp", False)
            and iteration ==  start_iteration + 1
        ):
            for model_chunk in model:
                if isinstance(
                    model_chunk, (FullyShardedDataParallelV1, FullyShardedDataParallelV2)
                ) and getattr(
                    model_chunk.ddp_config, "fsdp_manual_registration", False
                ):
                    param_and_grad_buffer = getattr(model_chunk, "param_and_grad_buffer", None)
                    if param_and_grad_buffer is not None:
                        param_and_grad_buffer.manual_buffer_registration()

        if args.perform_rl_step and args.rl_use_sequence_packing:
            iteration_sequences = rl_utils.get_iteration_sequence_count(args)
            # Track bins separately for packed mode
            bin_count = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_bins += bin_count
        else:
            batch_size = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            iteration_sequences = batch_size

        # Update consumed samples (always means sequences now)
        args.consumed_train_samples += iteration_sequences

        # Use iteration_sequences as batch_size for floating point operations
        batch_size = iteration_sequences

        num_skipped_samples_in_batch = (
            get_current_global_batch_size() - get_current_running_global_batch_size()
        )
        if args.decrease_batch_size_if_needed:
            assert num_skipped_samples_in_batch >= 0
        else:
            assert num_skipped_samples_in_batch == 0
        args.skipped_train_samples += num_skipped_samples_in_batch
        # Drain the per-iteration packed-sequence stats so the FLOPs computation
        # reflects THD per-chunk causal attention AND excludes padding tokens
        # from token-linear work. Returns ``(None, None)`` for unpacked BSHD
        # runs (no collective issued), letting ``num_floating_point_operations``
        # fall back to its closed-form defaults.
        total_real_tokens_in_batch, seqlen_squared_sum_in_batch = (
            consume_seqlen_stats_in_iteration()
        )
        num_floating_point_operations_in_batch = num_floating_point_operations(
            args,
            batch_size,
            seqlen_squared_sum_in_batch=seqlen_squared_sum_in_batch,
            total_real_tokens_in_batch=total_real_tokens_in_batch,
        )
        num_floating_point_operations_so_far += num_floating_point_operations_in_batch
        num_floating_point_operations_since_last_log_event += num_floating_point_operations_in_batch

        # OTel: super-span over the whole post-step REPORTING block (loss-scale
        # sync, param-norm reduction, throughput/tensorboard/wandb logging). One
        # goodput span that captures ALL the exposed reporting overhead --
        # including the loss_scale.item() device sync and misc bookkeeping that
        # would otherwise be dark -- WITHOUT instrumenting each line. params_norm
        # and train.log nest under it; its own uninstrumented time is the blank
        # you'd otherwise see. start_span + attach (no re-indent); closed after
        # training_log below.
        _report_span = None
        _report_token = None
        if _otel_sg_enabled('step'):
            from opentelemetry import context as _octx, trace as _otr
            _report_span = get_telemetry().tracer.start_span('megatron.train.iteration_report')
            _otel_mark_goodput(_report_span)
            _report_token = _octx.attach(_otr.set_span_in_context(_report_span))
        try:

            # Logging.
            if optimizer is not None and not optimizer.is_stub_optimizer:
                # First .item() after the train_step: a device sync draining the
                # iteration's pending GPU queue (captured under iteration_report).
                loss_scale = optimizer.get_loss_scale().item()
            else:
                loss_scale = 1.0
            params_norm = None

            if args.log_params_norm:
                # Cross-rank param L2 norm (--log-params-norm): a full-model reduction
                # + all-reduce that BLOCKS the training loop -- exposed goodput cost
                # (~1.5s cold on the first iteration, ~10ms steady). Kept as a real
                # cost span (it stalls the critical path), unlike passive monitors.
                with _otel_managed_span('step', 'megatron.train.params_norm', is_goodput_span=True):
                    params_norm = calc_params_l2_norm(model)
            if optimizer is not None:
                learning_rate = get_canonical_lr_for_logging(optimizer.param_groups)
            else:
                learning_rate = None
            # Per-iteration logging (throughput calc, tensorboard/wandb writes) --
            # uninstrumented per-iteration overhead outside the train_step span.
            with _otel_managed_span('step', 'megatron.train.log', is_goodput_span=True):
                report_memory_flag = training_log(
                    loss_dict,
                    total_loss_dict,
                    learning_rate,
                    iteration,
                    loss_scale,
                    report_memory_flag,
                    skipped_iter,
                    grad_norm,
                    params_norm,
                    num_zeros_in_grad,
                    max_attention_logit,
                    pg_collection=model_pg_collection,
                    is_first_iteration=is_first_iteration,
                    seqlen_squared_sum_in_batch=seqlen_squared_sum_in_batch,
                    total_real_tokens_in_batch=total_real_tokens_in_batch,
                )
            # OTel: close the iteration-report super-span (parents params_norm + log;
            # its own uninstrumented time is the loss_scale sync + FLOPs bookkeeping).
        finally:
            if _report_span is not None:
                from opentelemetry import context as _octx
                _octx.detach(_report_token)
                _report_span.end()
        is_first_iteration = False

        # Evaluation.
        if args.eval_interval and iteration % args.eval_interval == 0 and args.do_valid \
                and (args.start_eval_at_iter is None or iteration >= args.start_eval_at_iter):
            if args.log_energy:
                energy_monitor.pause()
            timers('interval-time').stop()
            if should_disable_forward_pre_hook(args):
                disable_forward_pre_hook(model, optimizer=optimizer)
                pre_hook_enabled = False
            if args.manual_gc and args.manual_gc_eval:
                # Collect all objects.
                gc.collect()
            prefix = f'iteration {iteration}'
            timers('eval-time', log_level=0).start(barrier=True)
            if args.perform_rl_step:
                rl_eval_model = model
                rl_training_model = None
                # If separate inference and training models, swap training weights
                # back to the inference model for RL evaluation.
                if inference_model is not None:
                    inf_core = unwrap_model(inference_model[0])
                    rl_utils._maybe_prefetch_separate_inference_model_weights(
                        inf_core, to_cpu=False
                    )
                    swap_model_weights(model, inference_model, args.refit_method)
                    rl_eval_model = inference_model
                    rl_training_model = model
                rl_utils.evaluate_and_print_results_rl(
                    valid_data_iterator,
                    rl_eval_model,
                    optimizer,
                    iteration,
                    write_to_tensorboard=True,
                    training_model=rl_training_model,
                )
            else:
                evaluate_and_print_results(prefix, forward_step_func,
                                       valid_data_iterator, model,
                                       iteration, process_non_loss_data_func,
                                       config, verbose=False, write_to_tensorboard=True,
                                       non_loss_data_func=non_loss_data_func,
                                       pg_collection=pg_collection,
                                       p2p_communicator=p2p_communicator)

            eval_duration += timers('eval-time').elapsed()
            eval_iterations += sum(args.eval_iters) if isinstance(args.eval_iters, list) else args.eval_iters
            timers('eval-time').stop()
            one_logger_utils.track_e2e_metrics()

            if args.manual_gc and args.manual_gc_eval:
                # Collect only the objects created and used in evaluation.
                gc.collect(generation=0)
            if should_disable_forward_pre_hook(args):
                enable_forward_pre_hook(model)
                pre_hook_enabled = True
            timers('interval-time', log_level=0).start(barrier=True)
            if args.log_energy:
                energy_monitor.resume()
            if args.num_experts is not None:
                get_moe_metrics_tracker().clear()

        # Miscellaneous post-training-step functions (e.g., FT heartbeats, GC).
        # Some of these only happen at specific iterations. Capture updated FLOPs accumulator
        # (it is reset inside the callback after logging).
        num_floating_point_operations_since_last_log_event = post_training_step_callbacks(
            model,
            optimizer,
            opt_param_scheduler,
            iteration,
            prof,
            num_floating_point_operations_since_last_log_event,
            nsys_nvtx_context,
        )

        # Checkpoint and decide whether to exit.
        should_exit = checkpoint_and_decide_exit(
            model,
            optimizer,
            opt_param_scheduler,
            iteration,
            num_floating_point_operations_so_far,
            checkpointing_context,
            train_data_iterator,
        )
        if should_exit:
            break

    # Early-exit paths (exit-duration / exit-interval / signal handler) sys.exit()
    # below before the normal-path logging, so record the train-loop finish time here.
    if should_exit:
        one_logger and one_logger.log_metrics(
            {'app_train_loop_finish_time': one_logger_utils.get_timestamp_in_ms()}
        )

    # Destroy CUDA Graphs.
    if args.cuda_graph_impl == "transformer_engine" and cuda_graph_helper.graphs_created():
        cuda_graph_helper.delete_cuda_graphs()

    # Call OptimizerCudaGraph destructor to destroy optimizer CUDA graph
    if args.optimizer_cuda_graph:
        del optimizer.step

    one_logger_utils.track_e2e_metrics()

    # Flush TensorBoard, WandB writers and one-logger.
    writer = get_tensorboard_writer()
    if writer:
        writer.flush()

    # Close out pre-hooks if using distributed optimizer and overlapped param gather.
    if pre_hook_enabled:
        disable_forward_pre_hook(model, optimizer=optimizer)

    ft_integration.on_checkpointing_start()
    # This will finalize all unfinalized async request and terminate a persistent
    # async worker if persistent ckpt worker is enabled. Exposed TERMINATE cost:
    # the trainer BLOCKS here until the final async checkpoint is durably written
    # (the worker drains) -- a defense cost on the exit path that otherwise reads
    # as dark/unobserved time (it runs after the last iteration, before shutdown).
    with _otel_managed_span('checkpoint', 'megatron.checkpoint.exit_finalize', is_goodput_span=True):
        maybe_finalize_async_save(blocking=True, terminate=True)
    ft_integration.on_checkpointing_end(is_async_finalization=True)

    if args.log_energy:
        energy_monitor.lap()
        total_energy = energy_monitor.get_total()
        print_rank_0(f"Total training energy (GPU): {total_energy / 1e6:.3f} MJ")
        energy_monitor.shutdown()

    # Shutdown RL profiler and export summary
    if args.rl_profile:
        shutdown_rl_profiler()

    # If any exit conditions (signal handler, duration, iterations) have been reached, exit.
    if should_exit:
        # Deregister NCCL user-buffer memory pools before exit.
        # Without this, ProcessGroupNCCL's destructor calls abort() which uses
        # ncclCommDeregister on handles created by ncclCommWindowRegister,
        # causing "NCCL WARN Deregister: Could not find handle" and a crash.
        torch.distributed.barrier()
        if getattr(args, 'gtp_remat_nccl_ub', False) or getattr(args, 'gtp_expert_remat_nccl_ub', False):
            from megatron.core.tensor_parallel.gtp_api import deregister_and_clear_gtp_symm_pools

            # Deregister the GTP symmetric-memory pools: windows left registered when the
            # process groups are destroyed make NCCL abort.
            deregister_and_clear_gtp_symm_pools()

        for model_module in model:
            if isinstance(model_module, DDP):
                for buf in model_module.buffers + model_module.expert_parallel_buffers:
                    if getattr(buf, 'nccl_mem_pool', None) is not None:
                        nccl_allocator.deregister_mem_pool(buf.nccl_mem_pool, buf.data_parallel_group)
        one_logger and one_logger.log_metrics(
            {'app_finish_time': one_logger_utils.get_timestamp_in_ms()}
        )
        wandb_writer = get_wandb_writer()
        if wandb_writer:
            wandb_writer.finish()
        ft_integration.shutdown()
        one_logger_utils.finish()
        if args.perform_rl_step:
            rl_utils.rl_inference_interface_shutdown()
        # This sys.exit() bypasses the rest of pretrain() -- including its normal
        # _end_otel_job_spans() call -- so the open megatron.train interval block (and
        # megatron.startup, if it somehow never closed) would otherwise only get ended
        # later via the atexit fallback, which runs AFTER a bare shutdown() here already
        # tore down the provider (nothing left to export into). _end_otel_job_spans()
        # ends the spans first, then shuts down, so it must be this call, not a
        # standalone get_telemetry().shutdown().
        _end_otel_job_spans()
        sys.exit(exit_code)

    # OTel: normal loop completion -- end the final megatron.train interval block here
    # so it doesn't bleed into pretrain()'s post-train eval/test. Those now root their
    # own traces (there is no umbrella left to parent them). The sys.exit() path above
    # ends the block via _end_otel_job_spans() instead.
    _end_otel_train_span()

    return iteration, num_floating_point_operations_so_far


@_otel_trace_fn('evaluate', 'megatron.evaluate')
def evaluate(
    forward_step_func,
    data_iterator,
    model,
    process_non_loss_data_func,
    config,
    verbose=False,
    non_loss_data_func=None,
    eval_iters=None,
    pg_collection=None,
    p2p_communicator=None,
):
    """Evaluation."""
    args = get_args()
    timers = get_timers()

    timers('evaluate', log_level=0).start(barrier=True)

    # Turn on evaluation mode which disables dropout.
    for model_module in model:
        model_module.eval()

    # Disable result validation during evaluation
    rerun_state_machine = get_rerun_state_machine()
    rerun_mode = rerun_state_machine.get_mode()
    rerun_state_machine.set_mode(RerunMode.DISABLED)

    total_loss_dict = {}

    # make validation batch size independent from training batch size
    eval_batch_size = args.eval_global_batch_size
    eval_micro_batch_size = args.eval_micro_batch_size
    # data_parallel_size excludes the GTP-remat axis (it's folded into total_model_size at
    # arguments.py:446); each gtp-remat peer consumes a distinct microbatch, so include it in the
    # global sample breadth we divide out to recover the microbatch count.
    eval_num_microbatches = eval_batch_size // (
        eval_micro_batch_size * args.data_parallel_size * args.gtp_weight_remat_size
    )
    forward_backward_func = get_forward_backward_func(schedule_pg_collection=pg_collection)
    # Reductions source per-rank groups from the model (encoder rank -> encoder groups).
    eval_pgc = get_attr_wrapped_model(model[0], "pg_collection")
    if eval_pgc is None:
        eval_pgc = ProcessGroupCollection.use_mpu_process_groups()
    # gtp_remat-inclusive, mirroring train_step: gtp_remat peers hold distinct micro-batches, so
    # the reduction must cover every distinct-data rank. Reducing over the replicate dp_cp would
    # average a 1/gtp_remat subsample of the eval batch (768 sequences read, 12 averaged at
    # dp=6/gtp_remat=64) while consumed_valid_samples still books the full eval_batch_size.
    eval_dp_cp_group = getattr(eval_pgc, 'dp_cp_gtp_remat', None) or eval_pgc.dp_cp
    if args.cuda_graph_impl == "full_iteration":
        forward_backward_func = FullCudaGraphWrapper(
            forward_backward_func,
            cuda_graph_warmup_steps=args.cuda_graph_warmup_steps,
            use_single_mempool=config.cuda_graph_use_single_mempool,
        )
    # Wrap forward_backward_func for overflow handling with moe_expert_rank_capacity_factor
    if args.moe_expert_rank_capacity_factor is not None:
        copy_main_params = args.reuse_grad_buf_for_mxfp8_param_ag and args.overlap_param_gather
        forward_backward_func = PagedStashRunner(
            config,
            copy_main_params,
            model,
            None,
            forward_backward_func,
        )

    if has_nvidia_modelopt and getattr(args, "modelopt_enabled", False):
        # [ModelOpt]: Pipeline-parallel Distillation stacks student and teacher tensors
        adjust_tensor_shapes_fn = get_tensor_shapes_adjust_fn_for_distillation(
            model,
            seq_length=args.seq_length,
            micro_batch_size=eval_micro_batch_size,
            decoder_seq_length=args.decoder_seq_length,
        )
    else:
        adjust_tensor_shapes_fn = None

    if eval_iters is None:
        eval_iters = args.eval_iters

    with torch.no_grad():
        iteration = 0
        if verbose:
            print_rank_0(f'Evaluating on {eval_iters * eval_batch_size} samples')
        while iteration < eval_iters:
            iteration += 1
            if verbose:
                print_rank_0(f'Evaluating iter {iteration}/{eval_iters}')

            # Don't care about timing during evaluation
            config.timers = None
            ft_integration.on_eval_step_start()
            with _otel_managed_span('evaluate', 'megatron.evaluate.step',
                                    **{'megatron.eval_iteration': iteration}):
                loss_dicts = forward_backward_func(
                    forward_step_func=forward_step_func,
                    data_iterator=data_iterator,
                    model=model,
                    num_microbatches=eval_num_microbatches,
                    seq_length=args.seq_length,
                    micro_batch_size=eval_micro_batch_size,
                    decoder_seq_length=args.decoder_seq_length,
                    forward_only=True,
                    adjust_tensor_shapes_fn=adjust_tensor_shapes_fn,
                    pg_collection=pg_collection,
                    p2p_communicator=p2p_communicator,
                )
            ft_integration.on_eval_step_end()
            config.timers = get_timers()

            # Empty unused memory
            if args.empty_unused_memory_level >= 1:
                torch.cuda.empty_cache()

            if is_pp_last_stage(eval_pgc.pp) and loss_dicts:
                # Reduce across processes.
                for key in loss_dicts[0].keys():
                    if key not in total_loss_dict:
                        total_loss_dict[key] = torch.tensor([0.0, 0.0], dtype=torch.float, device='cuda')
                    val = [x[key].view(-1) for x in loss_dicts]

                    if val[0].numel() == 2:
                        if args.sft:
                            # normalize over micro batch instead of global
                            val = torch.vstack(val)
                            val = val[:, 0] / val[:, 1].clamp(min=1)
                            val = val.mean()
                            torch.distributed.all_reduce(val, group=eval_dp_cp_group)
                            val /= torch.distributed.get_world_size(group=eval_dp_cp_group)
                            total_loss_dict[key][0] += val
                            total_loss_dict[key][1] += 1
                        else :
                            val = torch.vstack(val).sum(dim=0)
                            torch.distributed.all_reduce(val, group=eval_dp_cp_group)
                            total_loss_dict[key] += val
                    elif val[0].numel() == 1:
                        val = torch.cat(val).sum()
                        total_loss_dict[key][0] += val
                        total_loss_dict[key][1] += len(loss_dicts)
                    else:
                        raise ValueError(f"Invalid value shape: {val[0].shape} for key {key}")

            args.consumed_valid_samples += eval_batch_size

            if args.exit_duration_in_mins:
                train_time = (time.time() - _TRAIN_START_TIME) / 60.0
                done_cuda = torch.tensor(
                    [train_time > args.exit_duration_in_mins], dtype=torch.int, device='cuda'
                )
                torch.distributed.all_reduce(done_cuda, op=torch.distributed.ReduceOp.MAX)
                done = done_cuda.item()
                if done:
                    rerun_state_machine.set_mode(rerun_mode)
                    print_rank_0('Exiting during evaluation, timelimit reached')
                    return None, None, True

        collected_non_loss_data = None
        if non_loss_data_func is not None:
            collected_non_loss_data = non_loss_data_func(model)
        elif process_non_loss_data_func is not None and is_last_rank():
            collected_non_loss_data = forward_backward_func(
                forward_step_func=forward_step_func,
                data_iterator=data_iterator,
                model=model,
                num_microbatches=eval_num_microbatches,
                seq_length=args.seq_length,
                micro_batch_size=eval_micro_batch_size,
                decoder_seq_length=args.decoder_seq_length,
                forward_only=True,
                collect_non_loss_data=True,
                pg_collection=pg_collection,
                p2p_communicator=p2p_communicator,
            )

    # Move model back to the train mode.
    for model_module in model:
        model_module.train()

    for key in total_loss_dict:
        numerator, denominator = total_loss_dict[key]
        total_loss_dict[key] = numerator / denominator

    timers('evaluate').stop()
    timers.log(['evaluate'])

    rerun_state_machine.set_mode(rerun_mode)


    # OTel: set eval_iters on the active span started by the @_otel_trace_fn decorator.
    # get_current_span() always returns a NonRecordingSpan (no-op) when no span is active,
    # so this is safe whether or not the group is enabled or the decorator fell back to no-op.
    try:
        from opentelemetry import trace as _ot
        _ot.get_current_span().set_attribute(
            'megatron.eval_iters', eval_iters if eval_iters is not None else 0
        )
    except Exception:  # noqa: BLE001 — OTel must never crash evaluation
        pass

    return total_loss_dict, collected_non_loss_data, False


def evaluate_and_print_results(
    prefix,
    forward_step_func,
    data_iterator,
    model,
    iteration,
    process_non_loss_data_func,
    config,
    verbose=False,
    write_to_tensorboard=True,
    non_loss_data_func=None,
    pg_collection=None,
    p2p_communicator=None,
):
    """Helper function to evaluate and dump results on screen."""
    args = get_args()
    if write_to_tensorboard:
        writer = get_tensorboard_writer()
    else:
        writer = None

    wandb_writer = get_wandb_writer()

    data_iterators = data_iterator if args.multiple_validation_sets else [data_iterator]

    if not args.multiple_validation_sets:
        eval_iters = [args.eval_iters]
    else:
        eval_iters = args.eval_iters

    if args.full_validation:
        assert len(eval_iters) == len(data_iterators)

        # with full validation we need to distribute eval_iters to all ranks
        if mpu.get_tensor_model_parallel_rank() == 0:
            eval_iters = torch.tensor(args.eval_iters, dtype=torch.long, device='cuda')
        else:
            eval_iters = torch.tensor([0] * len(eval_iters), dtype=torch.long, device='cuda')
        torch.distributed.broadcast(eval_iters, 0)
        eval_iters = eval_iters.tolist()
        args.eval_iters = eval_iters[0] if not args.multiple_validation_sets else eval_iters
    elif not args.multiple_validation_sets:
        eval_iters = [args.eval_iters]
    else:
        eval_iters = args.eval_iters

    if args.validation_set_names:
        assert args.multiple_validation_sets, \
            "--validation-set-names requires --multiple-validation-sets"
        assert len(args.validation_set_names) == len(data_iterators), \
            f"Number of --validation-set-names ({len(args.validation_set_names)}) must match " \
            f"the number of validation datasets ({len(data_iterators)})"

    for index, (iterator, iterations) in enumerate(zip(data_iterators, eval_iters)):
        suffix = ""
        if args.multiple_validation_sets:
            if args.validation_set_names:
                suffix = f"-{args.validation_set_names[index]}"
            else:
                suffix = f"-{index}"
        total_loss_dict, collected_non_loss_data, timelimit = evaluate(
            forward_step_func,
            iterator,
            model,
            process_non_loss_data_func,
            config,
            verbose,
            non_loss_data_func,
            eval_iters=iterations,
            pg_collection=pg_collection,
            p2p_communicator=p2p_communicator,
        )
        # Timelimit hit during evaluation
        if timelimit:
            return
        string = f' validation{suffix} loss at {prefix} | '
        for key in total_loss_dict:
            string += '{} value: {:.6E} | '.format(key, total_loss_dict[key].item())
            ppl = math.exp(min(20, total_loss_dict[key].item()))
            string += '{} PPL: {:.6E} | '.format(key, ppl)
            if writer:
                writer.add_scalar('{} validation{}'.format(key, suffix), total_loss_dict[key].item(), iteration)
                writer.add_scalar(
                    '{} validation{} vs samples'.format(key, suffix),
                    total_loss_dict[key].item(),
                    args.consumed_train_samples,
                )
                if args.log_validation_ppl_to_tensorboard:
                    writer.add_scalar('{} validation{} ppl'.format(key, suffix), ppl, iteration)
                    writer.add_scalar(
                        '{} validation{} ppl vs samples'.format(key, suffix), ppl, args.consumed_train_samples
                    )
                if wandb_writer and is_last_rank():
                    wandb_writer.log(
                        {'{} validation{}'.format(key, suffix): total_loss_dict[key].item()}, iteration
                    )

        if process_non_loss_data_func is not None and writer and is_last_rank():
            process_non_loss_data_func(collected_non_loss_data, iteration, writer)

        length = len(string) + 1
        print_rank_last('-' * length)
        print_rank_last(string)
        print_rank_last('-' * length)


def cyclic_iter(iterable):
    while True:
        iterator = iter(iterable)
        count = 0
        for x in iterator:
            count += 1
            yield x
        if count == 0:
            # No data was yielded, the iterable is empty
            raise RuntimeError(
                "cyclic_iter: iterable produced no data. "
                "This may indicate the validation dataloader is empty or eval_iters is incorrectly set. "
                "Check that your validation dataset has data and that the dataloader is properly configured."
            )


def get_train_valid_test_num_samples():
    """Train/valid/test num samples."""

    args = get_args()

    # Number of train/valid/test samples.
    if args.train_samples:
        train_samples = args.train_samples
    else:
        train_samples = args.train_iters * args.global_batch_size
    if args.full_validation:
        eval_samples = None
    else:
        if args.skip_train:
            eval_iters = args.eval_iters
        else:
            assert args.train_iters is not None
            total_eval_points = args.train_iters // args.eval_interval + 1
            if args.start_eval_at_iter is not None:
                skipped_eval_points = args.start_eval_at_iter // args.eval_interval
                total_eval_points = max(0, total_eval_points - skipped_eval_points)
            eval_iters = total_eval_points * args.eval_iters
        eval_samples = eval_iters * getattr(args, 'eval_global_batch_size', args.global_batch_size)
    test_samples = args.eval_iters * getattr(args, 'eval_global_batch_size', args.global_batch_size)

    # Get train_samples in current phase.
    if args.phase_transition_iterations:
        phase_transition_samples = [0] + [t * args.global_batch_size for t in args.phase_transition_iterations] + [args.train_samples]
        current_sample = args.iteration * args.global_batch_size
        last_transition_sample = max(s for s in phase_transition_samples if s <= current_sample)
        next_transition_sample = min(s for s in phase_transition_samples if s > current_sample)
        train_samples_in_current_phase = next_transition_sample - last_transition_sample
    else:
        train_samples_in_current_phase = train_samples

    return (train_samples_in_current_phase, eval_samples, test_samples)


def build_train_valid_test_datasets(build_train_valid_test_datasets_provider, train_valid_test_num_samples=None):
    """Build pretraining datasets."""
    if train_valid_test_num_samples is None:
        train_valid_test_num_samples = get_train_valid_test_num_samples()
    print_rank_0(' > datasets target sizes (minimum size):')
    print_rank_0('    train:      {}'.format(train_valid_test_num_samples[0]))
    print_rank_0('    validation: {}'.format(train_valid_test_num_samples[1]))
    print_rank_0('    test:       {}'.format(train_valid_test_num_samples[2]))
    return build_train_valid_test_datasets_provider(train_valid_test_num_samples)


def build_train_valid_test_data_loaders(build_train_valid_test_datasets_provider):
    """Build pretraining data loaders."""

    args = get_args()

    (train_dataloader, valid_dataloaders, test_dataloader) = (None, None, None)

    print_rank_0('> building train, validation, and test datasets ...')

    # Backward compatibility, assume fixed batch size.
    if args.iteration > 0 and args.consumed_train_samples == 0:
        assert (
            args.train_samples is None
        ), 'Only backward compatiblity support for iteration-based training'

        args.consumed_train_samples = args.iteration * args.global_batch_size
    if args.iteration > 0 and args.consumed_valid_samples == 0:
        if args.train_samples is None:
            effective_start = args.start_eval_at_iter if args.start_eval_at_iter is not None else 0
            skipped_intervals = effective_start // args.eval_interval
            args.consumed_valid_samples = (
                max(0, args.iteration // args.eval_interval - skipped_intervals)
                * args.eval_iters
                * getattr(args, 'eval_global_batch_size', args.global_batch_size)
            )

    # Get consumed train samples in this phase.
    if args.phase_transition_iterations:
        last_transition = max(iteration for iteration in (0, *args.phase_transition_iterations) if iteration <= args.iteration)
        consumed_train_samples_in_current_phase = (args.iteration - last_transition) * args.global_batch_size
    else:
        consumed_train_samples_in_current_phase = args.consumed_train_samples

    # Rely on distributed-aware core datasets, temporary
    is_distributed = getattr(build_train_valid_test_datasets_provider, "is_distributed", False)

    # Construct the data pipeline
    if is_distributed or mpu.get_tensor_model_parallel_rank() == 0:

        # Build datasets and dataloders.
        if args.perform_rl_step:
            # we don't need to build any dataloaders for RL training
            train_dataloader = None
            valid_dataloaders = None
            test_dataloader = None
            do_train = (args.train_iters or 0) > 0
            do_valid = (args.full_validation or args.eval_iters > 0)
            do_test = False

        else:
            # Build datasets.
            train_ds, valid_ds, test_ds = build_train_valid_test_datasets(build_train_valid_test_datasets_provider)
            valid_ds = [valid_ds] if not isinstance(valid_ds, list) else valid_ds
            if args.skip_train:
                train_dataloader = None
            else:
                train_dataloader = build_pretraining_data_loader(train_ds, consumed_train_samples_in_current_phase)
            valid_dataloaders = []
            for valid_d in valid_ds:
                if args.skip_train or args.full_validation:
                    valid_dataloaders.append(build_pretraining_data_loader(valid_d, 0))
                else:
                    if args.multiple_validation_sets:
                        # TODO(bnorick): for multiple validation sets without full validation, args.consumed_valid_samples is not
                        # correct and needs to be calculated/set per validation set
                        raise NotImplementedError("--multiple-validation-sets currently requires --full-validation")
                    valid_dataloaders.append(build_pretraining_data_loader(valid_d, args.consumed_valid_samples))
            if not args.multiple_validation_sets:
                assert len(valid_dataloaders) == 1
            test_dataloader = build_pretraining_data_loader(test_ds, 0)
            do_train = train_dataloader is not None and (args.skip_train or args.train_iters > 0)
            do_valid = valid_dataloaders is not None and (args.full_validation or args.eval_iters > 0)
            do_test = test_dataloader is not None and (args.full_validation or args.eval_iters > 0)

        flags = torch.tensor(
            [int(do_train), int(do_valid), int(do_test)], dtype=torch.long, device='cuda'
        )
    else:
        flags = torch.tensor([0, 0, 0], dtype=torch.long, device='cuda')

    torch.distributed.broadcast(flags, 0)

    args.do_train = getattr(args, "do_train", False) or flags[0].item()
    args.do_valid = getattr(args, "do_valid", False) or flags[1].item()
    args.do_test = getattr(args, "do_test", False) or flags[2].item()
    return train_dataloader, valid_dataloaders, test_dataloader


def build_train_valid_test_data_iterators(build_train_valid_test_datasets_provider):
    """Build pretraining data iterators."""

    args = get_args()

    # Build loaders.
    train_dataloader, valid_dataloaders, test_dataloader = build_train_valid_test_data_loaders(
        build_train_valid_test_datasets_provider
    )

    # Build iterators.
    dl_type = args.dataloader_type
    assert dl_type in ['single', 'cyclic', 'external']

    def _get_iterator(dataloader_type, dataloader):
        """Return dataset iterator."""
        if dataloader_type == "single":
            return RerunDataIterator(iter(dataloader))
        elif dataloader_type == "cyclic":
            return RerunDataIterator(iter(cyclic_iter(dataloader)))
        elif dataloader_type == "external":
            # External dataloader is passed through. User is expected to define how to iterate.
            if isinstance(dataloader, list):
                return [RerunDataIterator(d) for d in dataloader]
            else:
                return RerunDataIterator(dataloader)
        else:
            raise RuntimeError("unexpected dataloader type")

    if train_dataloader is not None:
        train_data_iterator = _get_iterator(dl_type, train_dataloader)
    else:
        train_data_iterator = None

    if valid_dataloaders is not None:
        # when using full validation, we need to override eval iters with the
        # MAX length across DP ranks so all ranks run the same number of steps
        if args.full_validation:
            if args.multiple_validation_sets:
                if valid_dataloaders[0] is None:
                    args.eval_iters = [None] * len(valid_dataloaders)
                else:
                    local_eval_iters = [len(dl) for dl in valid_dataloaders]
                    eval_iters_tensor = torch.tensor(local_eval_iters, dtype=torch.long, device='cuda')
                    torch.distributed.all_reduce(
                        eval_iters_tensor,
                        op=torch.distributed.ReduceOp.MAX,
                        group=mpu.get_data_parallel_group(with_context_parallel=True),
                    )
                    args.eval_iters = eval_iters_tensor.tolist()
            else:
                local_eval_iters = len(valid_dataloaders[0])
                eval_iters_tensor = torch.tensor([local_eval_iters], dtype=torch.long, device='cuda')
                torch.distributed.all_reduce(
                    eval_iters_tensor,
                    op=torch.distributed.ReduceOp.MAX,
                    group=mpu.get_data_parallel_group(with_context_parallel=True),
                )
                args.eval_iters = eval_iters_tensor.item()

        if args.multiple_validation_sets:
            if valid_dataloaders[0] is None:
                valid_data_iterators = [None] * len(valid_dataloaders)
            else:
                valid_dl_type = "cyclic" if args.full_validation else dl_type
                valid_data_iterators = [
                    _get_iterator(valid_dl_type, dl) for dl in valid_dataloaders
                ]
        elif valid_dataloaders[0] is not None:
            valid_dl_type = "cyclic" if args.full_validation else dl_type
            valid_data_iterators = _get_iterator(valid_dl_type, valid_dataloaders[0])
        else:
            valid_data_iterators = None
    else:
        valid_data_iterators = None

    if test_dataloader is not None:
        test_data_iterator = _get_iterator(dl_type, test_dataloader)
    else:
        test_data_iterator = None

    return train_data_iterator, valid_data_iterators, test_data_iterator


def should_disable_forward_pre_hook(args):
    """Block forward pre-hook for certain configurations."""
    # Typically, --skip-train is the only thing needed to disable the optimizer.
    has_normal_optimizer = not args.skip_train
    # Even with --skip-train, RL still creates an optimizer unless --no-load-optim is set.
    has_rl_optimizer = args.perform_rl_step and not args.no_load_optim
    # The forward pre-hooks are part of the distributed optimizer's overlapped param-gather;
    # so in order to disable them, we must check that the optimizer actually exists.
    has_optimizer = has_normal_optimizer or has_rl_optimizer
    return (
        not args.use_megatron_fsdp
        and has_optimizer
        and (
            args.use_distributed_optimizer
            or getattr(args, 'use_layer_wise_distributed_optimizer', False)
        )
        and args.overlap_param_gather
    )
