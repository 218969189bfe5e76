# source: https://github.com/jpata/particleflow/commit/f542ca4b11eb88edbebe0e2818891ca3b360c1ec
# established by the fix commit ('Fix multi-GPU DDP collectives: union diagnostic keys and bind NCCL device'): each spawned rank called `dist.init_process_group("nccl", ...)` without `torch.cuda.set_device` or `device_id` (batches and the DDP model were placed with `.to(rank)` by hand), so barriers ran on the current device, GPU 0 on every rank, and made NCCL contexts there; the fix calls `torch.cuda.set_device(rank)` and passes `device_id`. (The same commit also unions rank-dependent diagnostic keys before an all_reduce.)
# expect: TRG030
# (the real file before the fix, unmodified below this header: jpata/particleflow mlpf/model/training.py at the parent of f542ca4 (a6c34f3cbf7d); licence: Apache-2.0 (c) the particleflow authors)
"""
This script defines the training, validation, and testing workflow for the MLPF model.

The main entry point is `device_agnostic_run`, which handles CPU, single-GPU, and multi-GPU (DDP) training configurations.

The overall training flow is as follows:
1. `device_agnostic_run`: Sets up the environment and launches the `run` function for each process/GPU.
2. `run`: Initializes the process group, model, optimizer, data loaders, and learning rate scheduler. It then calls `train_all_steps` to begin the main training loop.
3. `train_all_steps`: The core training loop that iterates over training steps.
    - For each step, it calls `train_step` to perform a forward and backward pass.
    - Manages checkpointing, learning rate scheduling, and early stopping.
    - Periodically, it calls `_run_validation_cycle` to evaluate the model.
4. `_run_validation_cycle`:
    - Calls `evaluate` to compute validation loss.
    - Calls `run_test` to generate predictions on the test datasets.
    - Calls `make_plots` (from inference.py) to create performance plots.

Key Functions:
- `device_agnostic_run`: Entry point that manages device configuration (CPU/GPU/multi-GPU).
- `run`: Main function for a single process, responsible for setup and starting the training loop.
- `train_all_steps`: Orchestrates the entire training process over all steps.
- `train_step`: Executes a single training step (forward pass, loss calculation, backward pass, optimizer step).
- `evaluate`: Computes model performance and loss on the validation dataset.
- `model_step`: Performs a single forward pass through the model and computes the loss.
- `optimizer_step`: Executes the backward pass and updates model weights.
- `_log_and_checkpoint_step`: Handles logging and periodic checkpoint saving.
- `_run_validation_cycle`: Coordinates the validation, testing, and plotting process at regular intervals.
- `run_test`: Runs inference on a specified test dataset.
- `get_optimizer`: Utility to create an optimizer based on the configuration.
- `configure_model_trainable`: Utility to set specific model layers as trainable.
"""

import os
import os.path as osp
import time
import logging
from pathlib import Path
from tempfile import TemporaryDirectory
import gc
import tqdm
import yaml
import json
import numpy as np
from typing import Union
import sys
from packaging.version import Version

# comet needs to be imported before torch
from comet_ml import OfflineExperiment, Experiment  # noqa: F401, isort:skip

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.tensorboard import SummaryWriter

from mlpf.optimizers import get_optimizer
from mlpf.logger import _logger, _configLogger, log_smi, log_memory
from mlpf.model.utils import (
    unpack_predictions,
    unpack_target,
    load_checkpoint,
    save_checkpoint,
    save_HPs,
    get_lr_schedule,
    count_parameters,
    load_lr_schedule,
)
from mlpf.model.monitoring import (
    log_step_to_tensorboard,
    log_dataloader_to_tensorboard,
    log_open_files_to_tensorboard,
    log_gpu_utilization_to_tensorboard,
    log_gradients_to_tensorboard,
    log_residuals_to_tensorboard,
    collect_process_memory_metrics,
    collect_cuda_memory_metrics,
    log_diagnostics_to_tensorboard,
)
from mlpf.model.inference import make_plots, run_predictions
from mlpf.model.plots import validation_plots
from mlpf.model.mlpf import MLPF, configure_model_trainable
from mlpf.model.PFDataset import Collater, PFDataset, get_interleaved_dataloaders
from mlpf.model.losses import (
    REGRESSION_FEATURES,
    make_task_loss_weighter,
    mlpf_loss,
    particle_loss,
)
from mlpf.utils import create_comet_experiment
from mlpf.conf import INPUT_TYPE_LABELS, MLPFConfig, SOURCE_LABELS
from mlpf.jet_utils import get_jet_config


def _domain_label(source_id, input_type_id):
    source = SOURCE_LABELS.get(int(source_id), f"source{int(source_id)}")
    input_type = INPUT_TYPE_LABELS.get(int(input_type_id), f"input{int(input_type_id)}")
    return f"{source}_{input_type}"


def _event_domain_labels(batch):
    if batch.source_id is None or batch.input_type_id is None:
        return None
    source_ids = batch.source_id.detach().to("cpu").long().view(-1)
    input_type_ids = batch.input_type_id.detach().to("cpu").long().view(-1)
    return [_domain_label(source_id.item(), input_type_id.item()) for source_id, input_type_id in zip(source_ids, input_type_ids)]


def _log_batch_composition(batch, tensorboard_writer, step, prefix):
    if tensorboard_writer is None:
        return

    valid_counts = batch.mask.sum(dim=1).detach().to("cpu")
    tensorboard_writer.add_scalar(f"{prefix}/valid_elements_mean", valid_counts.float().mean().item(), step)
    tensorboard_writer.add_scalar(f"{prefix}/valid_elements_max", valid_counts.max().item(), step)

    if batch.ytarget is not None:
        target_counts = ((batch.ytarget[..., 0] != 0) & batch.mask).sum(dim=1).detach().to("cpu")
        tensorboard_writer.add_scalar(f"{prefix}/target_particles_mean", target_counts.float().mean().item(), step)
        tensorboard_writer.add_scalar(f"{prefix}/target_particles_max", target_counts.max().item(), step)

    domain_labels = _event_domain_labels(batch)
    if domain_labels is not None:
        for label in sorted(set(domain_labels)):
            tensorboard_writer.add_scalar(f"{prefix}/events/{label}", domain_labels.count(label), step)

    elemtypes = batch.X[..., 0][batch.mask].detach().to("cpu").long()
    for elemtype in torch.unique(elemtypes).tolist():
        tensorboard_writer.add_scalar(f"{prefix}/elements/elemtype_{int(elemtype)}", (elemtypes == elemtype).sum().item(), step)


def _add_accumulator(accum, key, value, count=1.0):
    if count <= 0:
        return
    if key not in accum:
        accum[key] = [torch.zeros((), device=value.device, dtype=torch.float32), torch.zeros((), device=value.device, dtype=torch.float32)]
    accum[key][0] += value.detach().to(torch.float32)
    accum[key][1] += torch.as_tensor(float(count), device=value.device, dtype=torch.float32)


def _accumulate_domain_losses_and_stats(batch, ytarget, ypred, regression_weights, accum):
    domain_labels = _event_domain_labels(batch)
    if domain_labels is None:
        return

    valid_base = batch.mask.bool()
    for label in sorted(set(domain_labels)):
        event_mask = torch.tensor([event_label == label for event_label in domain_labels], device=batch.X.device, dtype=torch.bool)
        valid = valid_base & event_mask.unsqueeze(-1)
        if not valid.any():
            continue

        particle_targets = {
            "cls_id": ytarget["cls_id"][valid],
            **{feature: ytarget[feature][valid] for feature in REGRESSION_FEATURES},
        }
        particle_predictions = {
            "cls_binary": ypred["cls_binary"][valid],
            "cls_id_onehot": ypred["cls_id_onehot"][valid],
            **{feature: ypred[feature][valid] for feature in REGRESSION_FEATURES},
        }
        losses = particle_loss(particle_targets, particle_predictions, batch.X[..., 1][valid], regression_weights)
        for loss_name, loss_value in losses.items():
            _add_accumulator(accum, f"diagnostic/loss/{label}/{loss_name}", loss_value)

        is_particle = particle_targets["cls_id"] != 0
        _add_accumulator(accum, f"diagnostic/composition/{label}/events", torch.as_tensor(float(event_mask.sum()), device=batch.X.device))
        _add_accumulator(accum, f"diagnostic/composition/{label}/valid_elements", torch.as_tensor(float(valid.sum()), device=batch.X.device))
        _add_accumulator(accum, f"diagnostic/composition/{label}/target_particles", torch.as_tensor(float(is_particle.sum()), device=batch.X.device))
        if not is_particle.any():
            continue

        for feature in ("pt", "energy"):
            target = particle_targets[feature][is_particle].to(torch.float32)
            prediction = torch.nan_to_num(particle_predictions[feature][is_particle].to(torch.float32))
            residual = prediction - target
            count = float(target.numel())
            _add_accumulator(accum, f"diagnostic/regression/{label}/{feature}_target_mean", target.sum(), count=count)
            _add_accumulator(accum, f"diagnostic/regression/{label}/{feature}_pred_mean", prediction.sum(), count=count)
            _add_accumulator(accum, f"diagnostic/regression/{label}/{feature}_residual_mean", residual.sum(), count=count)
            _add_accumulator(accum, f"diagnostic/regression/{label}/{feature}_residual_abs_mean", residual.abs().sum(), count=count)
            _add_accumulator(accum, f"diagnostic/regression/{label}/{feature}_residual_rms", (residual**2).sum(), count=count)


def _finalize_diagnostics(accum, world_size):
    finalized = {}
    for key, (value_sum, count_sum) in accum.items():
        if world_size > 1:
            torch.distributed.all_reduce(value_sum)
            torch.distributed.all_reduce(count_sum)
        if count_sum.item() <= 0:
            continue
        value = value_sum / count_sum
        if key.endswith("_residual_rms"):
            value = torch.sqrt(torch.clamp(value, min=0.0))
        finalized[key] = value.cpu().item()
    return finalized


def _get_task_loss_weighter(model):
    model_module = model.module if hasattr(model, "module") else model
    return getattr(model_module, "task_loss_weighter", None)


def _format_task_diagnostic(task_diagnostic):
    if not task_diagnostic:
        return ""
    return " | ".join(
        f"{name}: {value:.4f}" for name, value in sorted(task_diagnostic.items())
    )


def _format_compact_diagnostic(values, keys):
    if not values:
        return ""
    parts = []
    for key in keys:
        value = values.get(key)
        if value is None and key.startswith(("max_", "mean_", "min_")):
            value = values.get(key.split("_", 1)[1])
        if value is not None:
            parts.append(f"{key}: {value:.4f}")
    return " | ".join(parts)


def _format_compact_memory(values):
    if not values:
        return ""
    parts = []
    for key in ["rss_MB", "uss_MB", "child_rss_MB", "allocated_MB", "reserved_MB", "inactive_split_MB"]:
        value = values.get(key)
        if value is not None:
            parts.append(f"{key}: {value:.1f}")
    return " | ".join(parts)


def _sync_cuda(device_type):
    if device_type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def _record_phase_time(timings, phase, start_time, device_type):
    _sync_cuda(device_type)
    end_time = time.perf_counter()
    timings[phase] = end_time - start_time
    return end_time


def _record_phase_time_if_enabled(timings, phase, start_time, device_type, enabled):
    if enabled:
        return _record_phase_time(timings, phase, start_time, device_type)
    return time.perf_counter()


def _collect_step_memory(rank, prefix, diagnostics):
    if diagnostics is None:
        return
    cpu_metrics = collect_process_memory_metrics()
    diagnostics["memory_cpu"].update({f"{prefix}_{key}": value for key, value in cpu_metrics.items()})

    device = rank if isinstance(rank, int) else None
    cuda_metrics = collect_cuda_memory_metrics(device)
    diagnostics["memory_cuda"].update({f"{prefix}_{key}": value for key, value in cuda_metrics.items()})


def _summarize_distributed_diagnostics(local_diagnostics, rank, world_size):
    summarized = {}
    for group, values in local_diagnostics.items():
        if not isinstance(values, dict):
            continue
        summarized[group] = dict(values)
        if world_size <= 1:
            continue
        numeric_items = [(key, value) for key, value in values.items() if isinstance(value, (int, float))]
        if not numeric_items:
            continue
        local_values = torch.tensor([value for _, value in numeric_items], device=rank, dtype=torch.float64)
        sum_values = local_values.clone()
        max_values = local_values.clone()
        min_values = local_values.clone()
        torch.distributed.all_reduce(sum_values, op=torch.distributed.ReduceOp.SUM)
        torch.distributed.all_reduce(max_values, op=torch.distributed.ReduceOp.MAX)
        torch.distributed.all_reduce(min_values, op=torch.distributed.ReduceOp.MIN)
        mean_values = sum_values / world_size
        for idx, (key, _) in enumerate(numeric_items):
            summarized[group][f"mean_{key}"] = mean_values[idx].item()
            summarized[group][f"max_{key}"] = max_values[idx].item()
            summarized[group][f"min_{key}"] = min_values[idx].item()
    return summarized


def _current_step_memory_summary(diagnostics):
    cpu = diagnostics.get("memory_cpu", {})
    cuda = diagnostics.get("memory_cuda", {})
    return {
        "rss_MB": cpu.get("max_train_step_end_rss_MB", cpu.get("train_step_end_rss_MB")),
        "uss_MB": cpu.get("max_train_step_end_uss_MB", cpu.get("train_step_end_uss_MB")),
        "child_rss_MB": cpu.get("max_train_step_end_child_rss_MB", cpu.get("train_step_end_child_rss_MB")),
        "allocated_MB": cuda.get("max_train_step_end_allocated_MB", cuda.get("train_step_end_allocated_MB")),
        "reserved_MB": cuda.get("max_train_step_end_reserved_MB", cuda.get("train_step_end_reserved_MB")),
        "inactive_split_MB": cuda.get("max_train_step_end_inactive_split_MB", cuda.get("train_step_end_inactive_split_MB")),
    }


def model_step(batch, model, loss_fn, regression_weights):
    _logger.debug(f"model_step X={batch.X.shape}")
    ypred_raw = model(batch.X, batch.mask)
    ypred = unpack_predictions(ypred_raw)
    ytarget = unpack_target(batch.ytarget, model)

    loss_opt, losses_detached, task_loss_diagnostics = loss_fn(
        ytarget, ypred, batch, regression_weights, _get_task_loss_weighter(model)
    )
    return loss_opt, losses_detached, task_loss_diagnostics, ypred_raw, ypred, ytarget


def optimizer_step(model, loss_opt, optimizer, lr_schedule, scaler):
    # Clear gradients
    for param in model.parameters():
        param.grad = None

    # Backward pass and optimization
    _logger.debug(f"optimizer_step scale={scaler.get_scale():.2E}")
    scaler.scale(loss_opt).backward()
    scaler.step(optimizer)
    scaler.update()
    if lr_schedule:
        # ReduceLROnPlateau scheduler should only be updated after each validation step
        if not isinstance(lr_schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            lr_schedule.step()


def train_step(
    rank: Union[int, str],
    world_size: int,
    model: MLPF,
    optimizer,
    batch,
    lr_schedule,
    step: int,
    regression_weights,
    tensorboard_writer=None,
    comet_experiment=None,
    comet_step_freq=None,
    tensorboard_step_freq=100,
    checkpoint_dir="",
    device_type="cuda",
    dtype=torch.float32,
    scaler=None,
    loader_state_dict={},
):
    """Run one training step

    Args:
        rank: Device rank (GPU id or 'cpu')
        world_size: Number of devices being used
        model: The neural network model
        optimizer: The optimizer
        batch: Training batch
        lr_schedule: Learning rate scheduler
        step: Current step number
        tensorboard_writer: TensorBoard writer object
        comet_experiment: Comet.ml experiment object
        comet_step_freq: How often to log to comet
        tensorboard_step_freq: How often to log to TensorBoard
        checkpoint_dir: Directory to save checkpoints
        device_type: 'cuda' or 'cpu'
        dtype: Torch dtype for computations

    Returns:
        dict: Dictionary of step losses
    """
    log_this_step = step % tensorboard_step_freq == 0
    diagnostics = {
        "time": {},
        "memory_cpu": {},
        "memory_cuda": {},
        "batch": {},
        "gc": {},
    } if log_this_step else {}
    phase_start = time.perf_counter()
    if world_size > 1:
        dist.barrier()
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "pre_step_barrier", phase_start, device_type, log_this_step)

    model.train()
    step_loss = {}

    if log_this_step:
        _collect_step_memory(rank, "train_step_start", diagnostics)
        diagnostics["gc"].update({f"start_gen{idx}": float(value) for idx, value in enumerate(gc.get_count())})
        diagnostics["batch"]["num_batch"] = float(batch.X.shape[0])
        diagnostics["batch"]["padded_elements"] = float(batch.X.shape[1])
        diagnostics["batch"]["num_elems"] = float(batch.mask.sum().detach().cpu().item())
        diagnostics["batch"]["valid_elements_mean"] = diagnostics["batch"]["num_elems"] / max(diagnostics["batch"]["num_batch"], 1.0)
        diagnostics["batch"]["valid_elements_max"] = float(batch.mask.sum(dim=1).detach().max().cpu().item())

    phase_start = time.perf_counter()
    batch = batch.to(rank, non_blocking=True)
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "batch_to_device", phase_start, device_type, log_this_step)
    if log_this_step:
        _collect_step_memory(rank, "after_batch_to_device", diagnostics)

    phase_start = time.perf_counter()
    with torch.autocast(device_type=device_type, dtype=dtype, enabled=device_type == "cuda"):
        _logger.debug(f"model_step X={batch.X.shape}")
        ypred_raw = model(batch.X, batch.mask)
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "forward", phase_start, device_type, log_this_step)
    if log_this_step:
        _collect_step_memory(rank, "after_forward", diagnostics)

    phase_start = time.perf_counter()
    with torch.autocast(device_type=device_type, dtype=dtype, enabled=device_type == "cuda"):
        ypred = unpack_predictions(ypred_raw)
        ytarget = unpack_target(batch.ytarget, model)
        loss_opt, loss, task_loss_diagnostics = mlpf_loss(
            ytarget, ypred, batch, regression_weights, _get_task_loss_weighter(model)
        )
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "loss", phase_start, device_type, log_this_step)
    if log_this_step:
        _collect_step_memory(rank, "after_loss", diagnostics)

    phase_start = time.perf_counter()
    for param in model.parameters():
        param.grad = None
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "zero_grad", phase_start, device_type, log_this_step)

    _logger.debug(f"optimizer_step scale={scaler.get_scale():.2E}")
    scaler.scale(loss_opt).backward()
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "backward", phase_start, device_type, log_this_step)
    if log_this_step:
        _collect_step_memory(rank, "after_backward", diagnostics)

    scaler.step(optimizer)
    scaler.update()
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "optimizer_step", phase_start, device_type, log_this_step)

    if lr_schedule:
        if not isinstance(lr_schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            lr_schedule.step()
    phase_start = _record_phase_time_if_enabled(diagnostics.get("time", {}), "scheduler_step", phase_start, device_type, log_this_step)
    if log_this_step:
        _collect_step_memory(rank, "after_optimizer", diagnostics)

    # Accumulate losses
    for loss_name in loss:
        if loss_name not in step_loss:
            step_loss[loss_name] = 0.0
        step_loss[loss_name] += loss[loss_name]

    # Log step metrics
    if tensorboard_writer is not None and log_this_step:
        phase_start = time.perf_counter()
        log_open_files_to_tensorboard(tensorboard_writer, step)
        log_gpu_utilization_to_tensorboard(tensorboard_writer, step)
        log_step_to_tensorboard(batch, loss["Total"], lr_schedule, tensorboard_writer, step)
        log_dataloader_to_tensorboard(loader_state_dict, tensorboard_writer, step)
        _log_batch_composition(batch, tensorboard_writer, step, "diagnostic/train_batch")
        log_gradients_to_tensorboard(model, tensorboard_writer, step)
        log_residuals_to_tensorboard(model, tensorboard_writer, step)
        phase_start = _record_phase_time(diagnostics["time"], "tensorboard_logging", phase_start, device_type)
        phase_start = time.perf_counter()
        tensorboard_writer.flush()
        _record_phase_time(diagnostics["time"], "tensorboard_flush", phase_start, device_type)

    if comet_experiment is not None and (step % comet_step_freq == 0):
        phase_start = time.perf_counter()
        comet_experiment.log_metrics(loss, prefix="train", step=step)
        comet_experiment.log_metric("learning_rate", lr_schedule.get_last_lr(), step=step)
        _record_phase_time(diagnostics["time"], "comet_logging", phase_start, device_type)

    # Average losses across steps
    num_steps = torch.tensor(1.0, device=rank, dtype=torch.float32)
    if world_size > 1:
        phase_start = time.perf_counter()
        torch.distributed.all_reduce(num_steps)
        _record_phase_time_if_enabled(diagnostics.get("time", {}), "num_steps_all_reduce", phase_start, device_type, log_this_step)

    for loss_name in step_loss:
        _logger.debug(f"train_step {loss_name}={step_loss[loss_name]}")
        if world_size > 1:
            phase_start = time.perf_counter()
            torch.distributed.all_reduce(step_loss[loss_name])
            if log_this_step:
                diagnostics["time"][f"loss_{loss_name}_all_reduce"] = time.perf_counter() - phase_start
        step_loss[loss_name] = step_loss[loss_name].cpu().item() / num_steps.cpu().item()

    if log_this_step:
        _collect_step_memory(rank, "train_step_end", diagnostics)
        diagnostics["gc"].update({f"end_gen{idx}": float(value) for idx, value in enumerate(gc.get_count())})

    if world_size > 1:
        phase_start = time.perf_counter()
        dist.barrier()
        _record_phase_time_if_enabled(diagnostics.get("time", {}), "post_step_barrier", phase_start, device_type, log_this_step)
    _logger.debug(f"train_step reduced {step_loss}")

    if log_this_step:
        diagnostics = _summarize_distributed_diagnostics(diagnostics, rank, world_size)
    if log_this_step and ((rank == 0) or (rank == "cpu")):
        log_diagnostics_to_tensorboard(tensorboard_writer, diagnostics, step, prefix="diagnostic/train_step")

    return step_loss, task_loss_diagnostics, diagnostics


def compute_particle_quality_metrics(batch, ypred_particles, ytarget):
    sum_pt_true_list = []
    sum_pt_pred_list = []
    sum_e_true_list = []
    sum_e_pred_list = []
    n_true_list = []
    n_pred_list = []

    for ev_idx in range(batch.X.shape[0]):
        mask_ev = batch.mask[ev_idx].bool()
        if not mask_ev.any():
            continue

        # True particles in this event (cls_id > 0)
        cls_id_true = ytarget["cls_id"][ev_idx][mask_ev]
        is_true_part = cls_id_true > 0
        if is_true_part.any():
            pt_true = (torch.exp(ytarget["pt"][ev_idx][mask_ev]) * batch.X[ev_idx, mask_ev, 1])[is_true_part]
            e_true = (torch.exp(ytarget["energy"][ev_idx][mask_ev]) * batch.X[ev_idx, mask_ev, 5])[is_true_part]
            sum_pt_true = pt_true.sum().item()
            sum_e_true = e_true.sum().item()
            n_true = is_true_part.sum().item()
        else:
            sum_pt_true = 0.0
            sum_e_true = 0.0
            n_true = 0

        # Predicted particles in this event (cls_id > 0)
        cls_id_pred = ypred_particles["cls_id"][ev_idx][mask_ev]
        is_pred_part = cls_id_pred > 0
        if is_pred_part.any():
            pt_pred = ypred_particles["pt"][ev_idx][mask_ev][is_pred_part]
            e_pred = ypred_particles["energy"][ev_idx][mask_ev][is_pred_part]
            sum_pt_pred = pt_pred.sum().item()
            sum_e_pred = e_pred.sum().item()
            n_pred = is_pred_part.sum().item()
        else:
            sum_pt_pred = 0.0
            sum_e_pred = 0.0
            n_pred = 0

        sum_pt_true_list.append(sum_pt_true)
        sum_pt_pred_list.append(sum_pt_pred)
        sum_e_true_list.append(sum_e_true)
        sum_e_pred_list.append(sum_e_pred)
        n_true_list.append(n_true)
        n_pred_list.append(n_pred)

    metrics = {
        "sum_pt_true": float(np.mean(sum_pt_true_list)),
        "sum_pt_pred": float(np.mean(sum_pt_pred_list)),
        "sum_e_true": float(np.mean(sum_e_true_list)),
        "sum_e_pred": float(np.mean(sum_e_pred_list)),
        "n_true": float(np.mean(n_true_list)),
        "n_pred": float(np.mean(n_pred_list)),
    }

    metrics["ratio_sum_pt"] = metrics["sum_pt_pred"] / (metrics["sum_pt_true"] + 1e-6)
    metrics["ratio_sum_e"] = metrics["sum_e_pred"] / (metrics["sum_e_true"] + 1e-6)

    return metrics


def print_event_table(batch, ytarget, ypred_particles, config):
    import pandas as pd
    from tabulate import tabulate
    from mlpf.conf import CLASS_LABELS
    import numpy as np

    # We only print the first event in the batch (index 0)
    mask = batch.mask[0].bool().cpu()
    valid_indices = torch.nonzero(mask).squeeze(1).numpy()

    X = batch.X[0].cpu().numpy()

    # Target values
    tgt_cls = ytarget["cls_id"][0].cpu().numpy()
    tgt_pt_raw = ytarget["pt"][0].cpu().numpy()
    tgt_eta = ytarget["eta"][0].cpu().numpy()
    tgt_sin_phi = ytarget["sin_phi"][0].cpu().numpy()
    tgt_cos_phi = ytarget["cos_phi"][0].cpu().numpy()
    tgt_energy_raw = ytarget["energy"][0].cpu().numpy()

    # Prediction values
    pred_cls = ypred_particles["cls_id"][0].cpu().numpy()
    pred_pt = ypred_particles["pt"][0].cpu().numpy()
    pred_eta = ypred_particles["eta"][0].cpu().numpy()
    pred_phi = ypred_particles["phi"][0].cpu().numpy() if "phi" in ypred_particles else np.zeros_like(pred_pt)
    pred_energy = ypred_particles["energy"][0].cpu().numpy()
    pred_beta = ypred_particles["oc_beta"][0, :, 0].cpu().numpy() if "oc_beta" in ypred_particles else np.zeros_like(pred_pt)

    # Class names mapping
    dataset_name = config.dataset.value if hasattr(config.dataset, "value") else config.dataset
    class_names = CLASS_LABELS.get(dataset_name, ["none", "chhad", "nhad", "gamma", "ele", "mu"])

    rows = []
    for idx in valid_indices:
        hit_type = X[idx, 0]
        hit_pt = X[idx, 1]
        hit_eta = X[idx, 2]
        hit_phi = np.arctan2(X[idx, 3], X[idx, 4])
        hit_energy = X[idx, 5]

        t_cls = int(tgt_cls[idx])
        t_cls_name = class_names[t_cls] if t_cls < len(class_names) else str(t_cls)

        # calculate physical target values
        t_pt = np.exp(tgt_pt_raw[idx]) * hit_pt if t_cls > 0 else 0.0
        t_eta = tgt_eta[idx] if t_cls > 0 else 0.0
        t_phi = np.arctan2(tgt_sin_phi[idx], tgt_cos_phi[idx]) if t_cls > 0 else 0.0
        t_energy = np.exp(tgt_energy_raw[idx]) * hit_energy if t_cls > 0 else 0.0

        p_cls = int(pred_cls[idx])
        p_cls_name = class_names[p_cls] if p_cls < len(class_names) else str(p_cls)

        p_pt = pred_pt[idx]
        p_eta = pred_eta[idx]
        p_phi = pred_phi[idx]
        p_energy = pred_energy[idx]
        p_beta = pred_beta[idx]

        rows.append(
            {
                "idx": idx,
                "hit_type": int(hit_type),
                "hit_pt": hit_pt,
                "hit_eta": hit_eta,
                "hit_phi": hit_phi,
                "hit_energy": hit_energy,
                "tgt_cls": t_cls_name,
                "tgt_pt": t_pt,
                "tgt_eta": t_eta,
                "tgt_phi": t_phi,
                "tgt_energy": t_energy,
                "pred_cls": p_cls_name,
                "pred_pt": p_pt,
                "pred_eta": p_eta,
                "pred_phi": p_phi,
                "pred_energy": p_energy,
                "pred_beta": p_beta,
            }
        )

    df = pd.DataFrame(rows)
    table_str = tabulate(df, headers="keys", tablefmt="pipe", showindex=False)
    print("\n=== EVENT HITS / TARGET / PREDICTION TABLE ===")
    print(table_str)
    print("==============================================\n")


def evaluate(
    rank: Union[int, str],
    world_size: int,
    model: MLPF,
    valid_loader,
    step: int,
    config: MLPFConfig,
    tensorboard_writer=None,
    comet_experiment=None,
    outdir=None,
    device_type="cuda",
    dtype=torch.float32,
):
    """Run one evaluation step

    Args:
        rank: Device rank (GPU id or 'cpu')
        world_size: Number of devices being used
        model: The neural network model
        valid_loader: Validation data loader
        step: Current step number
        config: Configuration object
        tensorboard_writer: TensorBoard writer object
        comet_experiment: Comet.ml experiment object
        outdir: Output directory path
        device_type: 'cuda' or 'cpu'
        dtype: Torch dtype for computations

    Returns:
        dict: Dictionary of evaluation losses
    """

    if world_size > 1:
        dist.barrier()

    model.eval()
    eval_loss = {}
    diagnostic_accum = {}

    # Only show progress bar on rank 0
    is_interactive = ((world_size <= 1) or (rank == 0)) and sys.stdout.isatty()
    assert len(valid_loader) > 0
    iterator = enumerate(valid_loader)
    if is_interactive:
        iterator = tqdm.tqdm(iterator, total=len(valid_loader), desc=f"Step {step} eval loop on rank={rank}")

    for ival, batch in iterator:
        batch = batch.to(rank, non_blocking=True)

        with torch.autocast(device_type=device_type, dtype=dtype, enabled=device_type == "cuda"):
            with torch.no_grad():
                _, loss, _, ypred_raw, ypred, ytarget = model_step(
                    batch,
                    model,
                    mlpf_loss,
                    config.regression_loss_weights.model_dump(),
                )

                model_module = model.module if hasattr(model, "module") else model
                ypred_particles = model_module.predict_particles(batch.X, batch.mask)

                if ival == 0 and (rank == 0 or rank == "cpu"):
                    print_event_table(batch, ytarget, ypred_particles, config)

                if config.validation_diagnostics_batches > 0 and ival < config.validation_diagnostics_batches:
                    _accumulate_domain_losses_and_stats(
                        batch,
                        ytarget,
                        ypred,
                        config.regression_loss_weights.model_dump(),
                        diagnostic_accum,
                    )

        # Save validation plots for first batch
        if (rank == 0 or rank == "cpu") and ival == 0 and config.make_plots:
            validation_plots(batch, ypred_raw, ytarget, ypred, tensorboard_writer, step, outdir)

        # Accumulate losses
        for loss_name in loss:
            if loss_name not in eval_loss:
                eval_loss[loss_name] = 0.0
            eval_loss[loss_name] += loss[loss_name]

    # Average losses across steps
    num_steps = torch.tensor(float(len(valid_loader)), device=rank, dtype=torch.float32)
    if world_size > 1:
        torch.distributed.all_reduce(num_steps)

    for loss_name in eval_loss:
        if world_size > 1:
            torch.distributed.all_reduce(eval_loss[loss_name])
        eval_loss[loss_name] = eval_loss[loss_name].cpu().item() / num_steps.cpu().item()

    eval_loss.update(_finalize_diagnostics(diagnostic_accum, world_size))

    if world_size > 1:
        dist.barrier()

    return eval_loss


def _log_and_checkpoint_step(
    rank,
    world_size,
    step,
    model,
    optimizer,
    lr_schedule,
    losses_train,
    task_loss_diagnostics,
    tensorboard_writer_train,
    comet_experiment,
    checkpoint_freq,
    checkpoint_dir,
    train_loader,
    valid_loader,
    train_sampler,
    valid_sampler,
    num_patience,
    tensorboard_step_freq,
):
    """Helper function to log training information and save periodic checkpoints."""

    log_this_step = step % tensorboard_step_freq == 0

    # Log training losses to TensorBoard and CometML on the main process
    if log_this_step and ((rank == 0) or (rank == "cpu")):
        log_start = time.perf_counter()
        # Log training losses
        for loss, value in losses_train.items():
            tensorboard_writer_train.add_scalar(f"step/loss_{loss}", value, step)
        if task_loss_diagnostics:
            for diagnostic_name, diagnostic_values in task_loss_diagnostics.items():
                for task, value in diagnostic_values.items():
                    tensorboard_writer_train.add_scalar(
                        f"step/task_{diagnostic_name}_{task}", value, step
                    )

        tensorboard_writer_train.add_scalar("diagnostic/log_and_checkpoint/time_tensorboard_logging", time.perf_counter() - log_start, step)

    if comet_experiment:
        comet_start = time.perf_counter()
        comet_experiment.log_metrics(losses_train, prefix="step_train_loss", step=step)
        if log_this_step and ((rank == 0) or (rank == "cpu")):
            tensorboard_writer_train.add_scalar("diagnostic/log_and_checkpoint/time_comet_logging", time.perf_counter() - comet_start, step)

    # Save a periodic checkpoint
    if checkpoint_freq and (step % checkpoint_freq == 0):
        if (rank == 0) or (rank == "cpu"):
            checkpoint_start = time.perf_counter()
            extra_state = {
                "step": step,
                "optimizer_state_dict": optimizer.state_dict(),
                "lr_schedule_state_dict": lr_schedule.state_dict(),
                "train_loader_state_dict": train_loader.state_dict(),
                "valid_loader_state_dict": valid_loader.state_dict(),
            }

            checkpoint_path = (Path(checkpoint_dir) / f"checkpoint-{step:02d}.pth").resolve()
            _logger.info("saving checkpoint {}".format(checkpoint_path))
            save_checkpoint(checkpoint_path, model, optimizer, extra_state)
            if log_this_step:
                tensorboard_writer_train.add_scalar("diagnostic/log_and_checkpoint/time_checkpoint_save", time.perf_counter() - checkpoint_start, step)

            # Clean up old checkpoints, keeping the last num_patience
            cleanup_start = time.perf_counter()
            checkpoints = sorted(Path(checkpoint_dir).glob("checkpoint-*.pth"), key=os.path.getmtime)
            for i in range(len(checkpoints) - num_patience):
                _logger.info("removing old checkpoint {}".format(checkpoints[i]))
                os.remove(checkpoints[i])
            if log_this_step:
                tensorboard_writer_train.add_scalar("diagnostic/log_and_checkpoint/time_checkpoint_cleanup", time.perf_counter() - cleanup_start, step)

    if log_this_step and ((rank == 0) or (rank == "cpu")):
        tensorboard_writer_train.flush()


def _run_validation_cycle(
    rank,
    world_size,
    model,
    optimizer,
    lr_schedule,
    valid_loader,
    step,
    num_steps,
    losses_train,
    best_val_loss,
    stale_steps,
    outdir,
    config: MLPFConfig,
    device_type,
    dtype,
    tensorboard_writer_valid,
    comet_experiment,
    checkpoint_dir,
    train_time,
    t0_initial,
    use_ray,
    train_loader,
    valid_sampler,
    train_sampler,
):
    """Run the validation, testing, and plotting cycle."""

    _logger.info(f"Running validation on rank{rank}")
    valid_loader.reset()

    # Run validation
    log_memory("evaluate_start", rank, tensorboard_writer_valid, step)
    losses_valid = evaluate(
        rank=rank,
        world_size=world_size,
        model=model,
        valid_loader=valid_loader,
        step=step,
        config=config,
        tensorboard_writer=tensorboard_writer_valid,
        comet_experiment=comet_experiment,
        outdir=outdir,
        device_type=device_type,
        dtype=dtype,
    )
    log_memory("evaluate_end", rank, tensorboard_writer_valid, step)
    valid_time = time.time() - train_time - t0_initial
    total_time = time.time() - t0_initial

    # Update learning rate scheduler that depends on validation loss
    if lr_schedule and isinstance(lr_schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
        lr_schedule.step(losses_valid["Total"])

    # Log validation metrics to CometML
    if comet_experiment:
        comet_experiment.log_metrics(losses_valid, prefix="step_valid_loss", step=step)
        comet_experiment.log_metric("learning_rate", lr_schedule.get_last_lr(), step=step)

    # All subsequent actions are only done on the main process
    if (rank == 0) or (rank == "cpu"):
        # Save the best model checkpoint if validation loss improves
        if losses_valid["Total"] < best_val_loss:
            best_val_loss = losses_valid["Total"]
            stale_steps = 0
        else:
            stale_steps += 1

        # Log validation losses to TensorBoard
        for loss, value in losses_valid.items():
            tensorboard_writer_valid.add_scalar(f"step/loss_{loss}", value, step)

        # Save step statistics to a JSON file
        history_path = Path(outdir) / "history"
        history_path.mkdir(parents=True, exist_ok=True)
        stats = {
            "train": losses_train,
            "valid": losses_valid,
            "step_train_time": train_time,
            "step_valid_time": valid_time,
            "step_total_time": total_time,
        }
        with open(f"{history_path}/step_{step}.json", "w") as f:
            json.dump(stats, f)

        # Calculate and log ETA
        steps_remaining = num_steps - step
        time_per_step = (time.time() - t0_initial) / step
        eta = steps_remaining * time_per_step / 60

        # Log a summary of the validation step
        _logger.info(
            f"VALIDATION | Step={step}/{num_steps} | "
            f"Train Loss={losses_train['Total']:.4f} | "
            f"Valid Loss={losses_valid['Total']:.4f} | "
            f"Stale={stale_steps} | "
            f"ETA={eta:.1f}m"
        )

        tensorboard_writer_valid.flush()

    # Run inference and plotting on test datasets for this step
    testdir_name = f"_step_{step}"
    log_memory("run_test_start", rank, tensorboard_writer_valid, step)
    for sample in config.enabled_test_datasets:
        run_test(rank, world_size, config, outdir, model, sample, testdir_name, dtype)
    log_memory("run_test_end", rank, tensorboard_writer_valid, step)

    plot_metrics_sample = {}
    if (rank == 0) or (rank == "cpu"):
        log_memory("make_plots_start", rank, tensorboard_writer_valid, step)
        for sample in config.enabled_test_datasets:
            plot_metrics = make_plots(outdir, sample, config.dataset, testdir_name, config.ntest)
            plot_metrics_sample[sample] = plot_metrics
            # Log key jet metrics to TensorBoard and CometML
            for k in ["med", "iqr", "match_frac"]:
                metric_name = f"step/{sample}/jet_ratio/jet_ratio_target_to_pred_pt/{k}"
                metric_value = plot_metrics["jet_ratio"]["jet_ratio_target_to_pred_pt"][k]
                tensorboard_writer_valid.add_scalar(metric_name, metric_value, step)
                if comet_experiment:
                    comet_experiment.log_metric(metric_name, metric_value, step=step)
                # Add jet metrics to the JSON log file
                with open(f"{history_path}/step_{step}.json", "r+") as f:
                    data = json.load(f)
                    data.update({metric_name: metric_value})
                    f.seek(0)
                    json.dump(data, f)
                    f.truncate()
        log_memory("make_plots_end", rank, tensorboard_writer_valid, step)

    # Ray-specific reporting and checkpointing
    if use_ray:
        import ray

        metrics = {
            "loss": losses_train["Total"],
            "val_loss": losses_valid["Total"],
            "step": step,
            "training_iteration": ((step - 1) // config.val_freq) + 1,
            **{f"train_{k}": v for k, v in losses_train.items()},
            **{f"valid_{k}": v for k, v in losses_valid.items()},
        }
        if (rank == 0) or (rank == "cpu"):
            with TemporaryDirectory() as temp_checkpoint_dir:
                extra_state = {
                    "step": step,
                    "optimizer_state_dict": optimizer.state_dict(),
                    "lr_schedule_state_dict": lr_schedule.state_dict(),
                    "train_loader_state_dict": train_loader.state_dict(),
                    "valid_loader_state_dict": valid_loader.state_dict(),
                }
                for sample in plot_metrics_sample.keys():
                    for metric in ["iqr", "match_frac"]:
                        metric_name = f"step/{sample}/jet_ratio/jet_ratio_target_to_pred_pt/{metric}"
                        metrics[metric_name] = plot_metrics_sample[sample]["jet_ratio"]["jet_ratio_target_to_pred_pt"][metric]
                    metrics[f"step/{sample}/jet_ratio/jet_ratio_target_to_pred_pt/combined"] = (
                        metrics[f"step/{sample}/jet_ratio/jet_ratio_target_to_pred_pt/iqr"]
                        - metrics[f"step/{sample}/jet_ratio/jet_ratio_target_to_pred_pt/match_frac"]
                    )
                save_checkpoint(Path(temp_checkpoint_dir) / "checkpoint.pth", model, optimizer, extra_state)
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(temp_checkpoint_dir))
        else:
            ray.train.report(metrics)

    gc.collect()
    if device_type == "cuda":
        torch.cuda.empty_cache()

    return best_val_loss, stale_steps


def train_all_steps(
    rank,
    world_size,
    model,
    optimizer,
    train_loader,
    valid_loader,
    num_steps,
    patience,
    outdir,
    config: MLPFConfig,
    trainable="all",
    dtype=torch.float32,
    start_step=1,
    lr_schedule=None,
    use_ray=False,
    checkpoint_freq=None,
    comet_experiment=None,
    comet_step_freq=None,
    val_freq=None,
    checkpoint_dir: str = "",
    train_sampler=None,
    valid_sampler=None,
):
    """Main training loop that handles all steps and validation"""
    _logger.info(f"Starting training from step {start_step} to {num_steps} on rank {rank} of {world_size}")
    assert len(train_loader) > 0

    # Per-worker setup
    np.seterr(divide="ignore", invalid="ignore")

    # Setup TensorBoard writers on the main process
    if (rank == 0) or (rank == "cpu"):
        tensorboard_writer_train = SummaryWriter(f"{outdir}/runs/train")
        tensorboard_writer_valid = SummaryWriter(f"{outdir}/runs/valid")
    else:
        tensorboard_writer_train = None
        tensorboard_writer_valid = None

    device_type = "cuda" if isinstance(rank, int) else "cpu"
    t0_initial = time.time()

    # Early stopping setup
    stale_steps = 0
    best_val_loss = float("inf")

    scaler = torch.amp.GradScaler()
    _logger.info("Creating train_iterator")
    train_iterator = iter(train_loader)
    _logger.info("Created train_iterator")

    # Use tqdm for progress bar only on the main process in an interactive session
    is_interactive = ((world_size <= 1) or (rank == 0)) and sys.stdout.isatty()
    iterator = range(start_step, num_steps + 1)
    if is_interactive:
        iterator = tqdm.tqdm(iterator, initial=start_step, total=num_steps, desc=f"Training on rank={rank}")

    # loop over the dataset
    for step in iterator:
        log_this_step = step % config.tensorboard_step_freq == 0
        step_start_time = time.time()

        # Get next training batch
        _logger.debug(f"Getting batch for step {step}")
        batch = next(train_iterator)
        data_load_time = time.time() - step_start_time
        _logger.debug(f"Got batch for step {step} rank={rank} batch={batch.X.shape}")

        # Run a single training step
        model_forward_start = time.time()
        log_memory("train_step_start", rank, tensorboard_writer_train if log_this_step else None, step)
        losses_train, task_loss_diagnostics, step_diagnostics = train_step(
            rank=rank,
            world_size=world_size,
            model=model,
            optimizer=optimizer,
            batch=batch,
            lr_schedule=lr_schedule,
            step=step,
            tensorboard_writer=tensorboard_writer_train,
            comet_experiment=comet_experiment,
            comet_step_freq=comet_step_freq,
            tensorboard_step_freq=config.tensorboard_step_freq,
            checkpoint_dir=checkpoint_dir,
            device_type=device_type,
            dtype=dtype,
            scaler=scaler,
            loader_state_dict=train_loader.state_dict()["loader_state_dict"],
            regression_weights=config.regression_loss_weights.model_dump(),
        )
        log_memory("train_step_end", rank, tensorboard_writer_train if log_this_step else None, step)
        model_forward_time = time.time() - model_forward_start
        train_time = time.time() - step_start_time

        step_time_summary = step_diagnostics.get("time", {}) if step_diagnostics else {}
        step_memory_summary = _current_step_memory_summary(step_diagnostics) if step_diagnostics else {}
        if tensorboard_writer_train is not None and log_this_step:
            tensorboard_writer_train.add_scalar("step/time_data_load", data_load_time, step)
            tensorboard_writer_train.add_scalar("step/time_model_forward", model_forward_time, step)
            tensorboard_writer_train.add_scalar("step/time_train_total", train_time, step)

        # Log a brief training status periodically on the main process
        if log_this_step:
            # Get the current learning rate, handling the case of multiple parameter groups
            current_lr = lr_schedule.get_last_lr()[0]
            train_loss_components = " | ".join(
                f"{loss_name}: {loss_value:.4f}"
                for loss_name, loss_value in sorted(losses_train.items())
                if loss_name != "Total"
            )
            diagnostics = task_loss_diagnostics or {}
            task_weight_components = _format_task_diagnostic(
                diagnostics.get("weight", {})
            )
            task_log_var_components = _format_task_diagnostic(
                diagnostics.get("log_var", {})
            )
            task_weighted_loss_components = _format_task_diagnostic(
                diagnostics.get("weighted_loss", {})
            )
            _logger.info(
                f"Step {step}/{num_steps} rank{rank} | "
                f"Train Loss: {losses_train['Total']:.4f} | "
                f"Train Loss Components: {train_loss_components} | "
                f"Task Weights: {task_weight_components} | "
                f"Task LogVars: {task_log_var_components} | "
                f"Task Weighted Losses: {task_weighted_loss_components} | "
                f"LR: {current_lr:.2e} | "
                f"DataLoad Time: {data_load_time:.4f}s | "
                f"Model Forward Time: {model_forward_time:.4f}s | "
                f"Phase Times: {_format_compact_diagnostic(step_time_summary, ['max_pre_step_barrier', 'max_batch_to_device', 'max_forward', 'max_loss', 'max_backward', 'max_optimizer_step', 'max_tensorboard_logging', 'max_tensorboard_flush', 'max_post_step_barrier'])} | "
                f"Memory: {_format_compact_memory(step_memory_summary)}"
            )

            # check smi status
            log_smi(rank)

        # Synchronize all processes at the end of the step
        if world_size > 1:
            dist.barrier()

        # Log training info and save periodic checkpoint immediately after training
        _log_and_checkpoint_step(
            rank,
            world_size,
            step,
            model,
            optimizer,
            lr_schedule,
            losses_train,
            task_loss_diagnostics,
            tensorboard_writer_train,
            comet_experiment,
            checkpoint_freq,
            checkpoint_dir,
            train_loader,
            valid_loader,
            train_sampler,
            valid_sampler,
            config.patience,
            config.tensorboard_step_freq,
        )

        # Run validation, testing, and plotting cycle at specified frequency, or at the last step
        if (step % val_freq == 0) or (step == num_steps):
            best_val_loss, stale_steps = _run_validation_cycle(
                rank,
                world_size,
                model,
                optimizer,
                lr_schedule,
                valid_loader,
                step,
                num_steps,
                losses_train,
                best_val_loss,
                stale_steps,
                outdir,
                config,
                device_type,
                dtype,
                tensorboard_writer_valid,
                comet_experiment,
                checkpoint_dir,
                train_time,
                t0_initial,
                use_ray,
                train_loader,
                valid_sampler,
                train_sampler,
            )

        # Check for early stopping
        if stale_steps > patience:
            _logger.info(f"Stopping early due to stale steps: {stale_steps} > {patience}")
            break

    # End of training loop
    _logger.info(f"Training completed. Total time on device {rank}: {(time.time() - t0_initial)/60:.3f}min")

    # Clean up TensorBoard writers
    if (rank == 0) or (rank == "cpu"):
        tensorboard_writer_train.close()
        tensorboard_writer_valid.close()


def run_test(rank, world_size, config: MLPFConfig, outdir, model, sample, testdir_name, dtype):
    batch_size = config.test_dataset[sample].batch_size * config.gpu_batch_multiplier
    version = config.test_dataset[sample].version

    split_configs = config.test_dataset[sample].splits
    _logger.info("split_configs={}".format(split_configs))

    dataset = []

    ntest = None
    split_configs_to_use = list(split_configs)
    if config.ntest is not None:
        if config.ntest < len(split_configs_to_use):
            split_configs_to_use = split_configs_to_use[: config.ntest]
        ntest = max(1, config.ntest // len(split_configs_to_use))

    for split_config in split_configs_to_use:
        ds = PFDataset(
            config.data_dir,
            f"{sample}/{split_config}:{version}",
            "test",
            num_samples=ntest,
            pad_to_multiple=config.pad_to_multiple_elements,
            max_open_readers=config.max_open_readers,
        ).ds
        dataset.append(ds)
    ds = torch.utils.data.ConcatDataset(dataset)

    if (rank == 0) or (rank == "cpu"):
        _logger.info(f"test_dataset: {sample}, {len(ds)}", color="blue")

    if world_size > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(ds)
    else:
        sampler = torch.utils.data.RandomSampler(ds)

    vals_for_test = ["X", "ytarget", "ytarget_pt_orig", "ytarget_e_orig", "ycand", "genjets", "targetjets"]

    # pythia branch was introduced for cms in version 2.8.0
    if sample.startswith("cms_") and version and Version(version) >= Version("2.8.0"):
        vals_for_test += ["pythia"]

    test_loader = torch.utils.data.DataLoader(
        ds,
        batch_size=batch_size,
        collate_fn=Collater(vals_for_test, ["genmet"]),
        sampler=sampler,
        num_workers=config.num_workers,
        prefetch_factor=config.prefetch_factor,
        # pin_memory=use_cuda,
        # pin_memory_device="cuda:{}".format(rank) if use_cuda else "",
    )

    if not osp.isdir(f"{outdir}/preds{testdir_name}/{sample}"):
        if (rank == 0) or (rank == "cpu"):
            os.system(f"mkdir -p {outdir}/preds{testdir_name}/{sample}")

    _logger.info(f"Running predictions on {sample}")
    torch.cuda.empty_cache()

    jetdef, jet_ptcut, jet_match_dr = get_jet_config(config.dataset)

    device_type = "cuda" if isinstance(rank, int) else "cpu"
    with torch.autocast(device_type=device_type, dtype=dtype, enabled=device_type == "cuda"):
        run_predictions(
            world_size,
            rank,
            model,
            test_loader,
            sample,
            outdir,
            jetdef,
            jet_ptcut=jet_ptcut,
            jet_match_dr=jet_match_dr,
            dir_name=testdir_name,
        )
    if world_size > 1:
        dist.barrier()  # block until all workers finished executing run_predictions()


def run(rank: int | str, world_size: int, config: MLPFConfig, outdir: str, logfile: str, loglevel: int = logging.INFO):
    # per-rank log
    _configLogger("mlpf", rank, filename=f"{logfile}.{rank}", loglevel=loglevel)

    use_cuda = rank != "cpu"

    dtype = getattr(torch, config.dtype)
    _logger.info("configured dtype={} for autocast".format(dtype))

    if world_size > 1:
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        dist.init_process_group("nccl", rank=int(rank), world_size=world_size)  # (nccl should be faster than gloo)

    checkpoint_dir = Path(outdir) / "checkpoints"
    if (rank == 0) | (rank == "cpu"):
        checkpoint_dir.mkdir(parents=True, exist_ok=True)

    start_step = 1
    lr_schedule = None
    checkpoint = None

    # load a pre-trained checkpoint (continue an aborted training or fine-tune)
    _logger.info("Instantiating model")
    model = MLPF(config)
    model.task_loss_weighter = make_task_loss_weighter(
        config.regression_loss_weights.model_dump()
    )
    _logger.info("Instantiated model")

    _logger.info("Moving model to device rank={}".format(rank))
    model = model.to(torch.device(rank))
    _logger.info("Moved model to device rank={}".format(rank))

    configure_model_trainable(model, config.model.trainable, True)
    for param in model.task_loss_weighter.parameters():
        param.requires_grad = True

    optimizer = get_optimizer(model, config)
    lr_schedule = get_lr_schedule(config, optimizer, config.num_steps)

    if config.load:
        checkpoint = torch.load(config.load, map_location=torch.device(rank))
        start_step = checkpoint["extra_state"]["step"] + 1

        missing_keys, strict = [], True
        for k in model.state_dict().keys():
            shp0 = model.state_dict()[k].shape
            try:
                shp1 = checkpoint["model_state_dict"][k].shape
            except KeyError:
                missing_keys.append(k)
                continue
            if shp0 != shp1:
                raise Exception("shape mismatch in {}, {}!={}".format(k, shp0, shp1))

        if len(missing_keys) > 0:
            _logger.warning(f"The following parameters are missing in the checkpoint file {missing_keys}", color="red")
            missing_task_loss_weight_keys = [
                key for key in missing_keys if key.startswith("task_loss_weighter.")
            ]
            missing_non_task_loss_weight_keys = [
                key for key in missing_keys if not key.startswith("task_loss_weighter.")
            ]
            if missing_task_loss_weight_keys and not missing_non_task_loss_weight_keys:
                _logger.warning("Task loss weights missing from checkpoint; initializing them from config", color="bold")
                strict = False
            elif config.relaxed_load:
                _logger.warning("Optimizer checkpoint will not be loaded", color="bold")
                strict = False
            else:
                _logger.warning("Use option --relaxed-load if you insist to ignore the missing parameters")
                raise KeyError

        _logger.info("Loaded model weights from {}".format(config.load), color="bold")
        _logger.info(f"Restoring training from step {start_step}")

        load_lr_schedule(lr_schedule, checkpoint, start_step=start_step)
        model, optimizer = load_checkpoint(checkpoint, model, optimizer, strict)

    if config.compile:
        _logger.info("Compiling model")
        model = torch.compile(model)

    if world_size > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        _logger.info("Configured model for SyncBatchNorm rank={}".format(rank))
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        _logger.info("Configured model for DistributedDataParallel rank={}".format(rank))

    trainable_params, nontrainable_params, table = count_parameters(model)
    _logger.info(str(table))
    _logger.info(model)
    _logger.info(f"Trainable parameters: {trainable_params}")
    _logger.info(f"Non-trainable parameters: {nontrainable_params}")
    _logger.info(f"Total parameters: {trainable_params + nontrainable_params}")
    _logger.info(table.to_string(index=False))

    if config.train:
        if (rank == 0) or (rank == "cpu"):
            save_HPs(config, model, outdir)  # save config and hyperparameters
            _logger.info("Creating experiment dir {}".format(outdir))
            _logger.info(f"Model directory {outdir}", color="bold")

        if config.comet:
            comet_experiment = create_comet_experiment(config.comet_name, comet_offline=config.comet_offline, outdir=outdir)
            if comet_experiment is not None:
                comet_experiment.set_name(f"rank_{rank}_{Path(outdir).name}")
                comet_experiment.log_parameter("run_id", Path(outdir).name)
                comet_experiment.log_parameter("world_size", world_size)
                comet_experiment.log_parameter("rank", rank)
                comet_experiment.log_parameters(config.model_dump(mode="json"), prefix="config:")
                comet_experiment.set_model_graph(model)
                comet_experiment.log_parameter(trainable_params, "trainable_params")
                comet_experiment.log_parameter(nontrainable_params, "nontrainable_params")
                comet_experiment.log_parameter(trainable_params + nontrainable_params, "total_trainable_params")
                comet_experiment.log_code("mlpf/model/training.py")
                comet_experiment.log_code("mlpf/model/mlpf.py")
                comet_experiment.log_code("mlpf/model/utils.py")
                comet_experiment.log_code("mlpf/pipeline.py")
                # save overridden config, then log to comet
                config_filename = "overridden_config.yaml"
                with open((Path(outdir) / config_filename), "w") as file:
                    yaml.dump(config.model_dump(mode="json"), file)
                comet_experiment.log_code(str(Path(outdir) / config_filename))
        else:
            comet_experiment = None

        _logger.info("Getting dataloaders")
        loaders, samplers = get_interleaved_dataloaders(
            world_size,
            rank,
            config,
            use_cuda,
            use_ray=False,
        )
        _logger.info("Got dataloaders")

        if config.load and checkpoint:
            train_loader = loaders["train"]
            valid_loader = loaders["valid"]
            if not config.sampler_from_scratch:
                if "train_loader_state_dict" in checkpoint["extra_state"]:
                    train_loader.load_state_dict(checkpoint["extra_state"]["train_loader_state_dict"])
                if "valid_loader_state_dict" in checkpoint["extra_state"]:
                    valid_loader.load_state_dict(checkpoint["extra_state"]["valid_loader_state_dict"])

        for split in loaders.keys():
            _logger.info("loader split={} rank={} len={}".format(split, rank, len(loaders[split])))

        train_all_steps(
            rank,
            world_size,
            model,
            optimizer,
            loaders["train"],
            loaders["valid"],
            config.num_steps,
            config.patience,
            outdir,
            config,
            trainable=config.model.trainable,
            dtype=dtype,
            start_step=start_step,
            lr_schedule=lr_schedule,
            use_ray=False,
            checkpoint_freq=config.checkpoint_freq,
            comet_experiment=comet_experiment,
            comet_step_freq=config.comet_step_freq,
            val_freq=config.val_freq,
            checkpoint_dir=str(checkpoint_dir),
            train_sampler=samplers["train"],
            valid_sampler=samplers["valid"],
        )

    if not config.train and config.test:
        _logger.info("Entering test step block (train=False, test=True)")
        testdir_name = "_test"
        for sample in config.enabled_test_datasets:
            run_test(rank, world_size, config, outdir, model, sample, testdir_name, dtype)

        if (rank == 0) or (rank == "cpu"):
            for sample in config.enabled_test_datasets:
                make_plots(outdir, sample, config.dataset, testdir_name, config.ntest)

    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


# Run either single GPU or single-node multi-GPU using pytorch DDP
def device_agnostic_run(config: MLPFConfig, world_size, outdir, loglevel: int = logging.INFO):
    if config.train:
        logfile = f"{outdir}/train.log"
    else:
        logfile = f"{outdir}/test.log"
    _configLogger("mlpf", 0, filename=logfile, loglevel=loglevel)

    if config.gpus:
        assert (
            world_size <= torch.cuda.device_count()
        ), f"--gpus is too high (specified {world_size} gpus but only {torch.cuda.device_count()} gpus are available)"

        torch.cuda.empty_cache()
        if world_size > 1:
            _logger.info(f"Will use torch.nn.parallel.DistributedDataParallel() and {world_size} gpus", color="purple")
            for rank in range(world_size):
                _logger.info(torch.cuda.get_device_name(rank), color="purple")

            _logger.info("Spawning DDP processes")
            mp.spawn(
                run,
                args=(world_size, config, outdir, logfile, loglevel),
                nprocs=world_size,
                join=True,
            )
        elif world_size == 1:
            rank = 0
            _logger.info(f"Will use single-gpu: {torch.cuda.get_device_name(rank)}", color="purple")
            _logger.info(f"Calling run(rank={rank}, world_size={world_size}, ...)")
            run(rank, world_size, config, outdir, logfile, loglevel)

    else:
        rank = "cpu"
        _logger.info("Will use cpu", color="purple")
        run(rank, world_size, config, outdir, logfile, loglevel)
