# source: https://github.com/ZettaAI/zetta_utils/commit/2c43566dedff071f4ca26d5132f59d7518620328
# established by the fix (PR #534 "DDP fixes": "each DDP device must perform the exact same set of
#   operations, otherwise you get `CollectiveFingerPrint` mismatches ... All devices must run the
#   TraceCallback once"): `ZettaDefaultTrainer.__init__` returns early on every rank but 0 and only then
#   appends `ConfigureTraceCallback`, so only rank 0 runs the callback's extra traced forwards during
#   validation; the fix appends it before the rank-0 return.
# expect: TRG036
# (the real file before the fix, unmodified below this header: ZettaAI/zetta_utils zetta_utils/training/lightning/trainers/default.py at 2c43566d^; licence: MIT)
from __future__ import annotations

import datetime
import importlib.metadata
import os
from typing import Any, Dict, List, Optional

import fsspec
import pytorch_lightning as pl
import torch
import typeguard
import wandb
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.strategies import ddp

from zetta_utils import builder, log
from zetta_utils.parsing import json

logger = log.get_logger("zetta_utils")
ONNX_OPSET_VERSION = 17
os.environ["MKL_THREADING_LAYER"] = "GNU"


"""
Separate function to work around the jit.trace memory leak
"""


def trace_and_save_model(
    args_packed,
):  # pragma: no cover # pylint: disable=broad-except, used-before-assignment
    model, trace_input, filepath, name = args_packed
    trace = torch.jit.trace(model, trace_input)
    filepath_jit = f"{filepath}.static-{torch.__version__}-{name}.jit"
    with fsspec.open(filepath_jit, "wb") as f:
        torch.jit.save(trace, f)
    try:
        filepath_onnx = f"{filepath}.static-{torch.__version__}-{name}.onnx"
        with fsspec.open(filepath_onnx, "wb") as f:
            filesystem = f.fs
            torch.onnx.export(model, trace_input, f, opset_version=ONNX_OPSET_VERSION)
        return None
    except Exception as e:
        filesystem.delete(filepath_onnx)
        return type(e).__name__, e.args[0]


@builder.register("ZettaDefaultTrainer")
class ZettaDefaultTrainer(pl.Trainer):  # pragma: no cover
    def __init__(
        self,
        experiment_name: str,
        experiment_version: str,
        *args,
        checkpointing_kwargs: Optional[dict] = None,
        progress_bar_kwargs: Optional[dict] = None,
        **kwargs,
    ):
        assert "callbacks" not in kwargs
        if "strategy" not in kwargs:
            kwargs["strategy"] = ddp.DDPStrategy(find_unused_parameters=False)

        if checkpointing_kwargs is None:
            checkpointing_kwargs = {}

        if progress_bar_kwargs is None:
            progress_bar_kwargs = {}

        if not os.environ.get("WANDB_MODE", None) == "offline":  # pragma: no cover
            api_key = os.environ.get("WANDB_API_KEY", None)
            wandb.login(key=api_key)

        kwargs["logger"] = False

        log_dir = os.path.join(
            kwargs.get("default_root_dir", os.getcwd()),
            experiment_name,
            f"{experiment_version}",
        )

        kwargs["callbacks"] = get_progress_bar_callbacks(
            **progress_bar_kwargs
        ) + get_checkpointing_callbacks(
            log_dir=log_dir,
            **checkpointing_kwargs,
        )

        super().__init__(*args, **kwargs)

        self.logger = WandbLogger(
            project=experiment_name,
            group=f"{experiment_name}.{experiment_version}",
            name=f"{experiment_version}",
            id=f"{experiment_version}.{self.global_rank}",
        )

        if self.global_rank != 0:
            return

        if self.logger and self.logger.experiment:
            this_dir = os.path.dirname(os.path.abspath(__file__))
            zetta_root_path = f"{this_dir}/../../.."
            self.logger.experiment.log_code(zetta_root_path)

        self.trace_configuration: Dict = {}

        def log_config(config):
            if experiment_version.startswith("tmp"):
                logger.info(
                    f"Not saving configuration for a temporary experiment {experiment_version}."
                )
            else:
                self.logger.experiment.config["training_configuration"] = config  # type: ignore
                logger.info("Saved training configuration.")

        self.log_config = log_config

        # self.callbacks will exist at runtime
        self.callbacks.append(ConfigureTraceCallback(self))  # type: ignore

        # Due to a bug in PL we're unable to use normal methods
        # to resume training with ckpt_path='last' when storing
        # checkpoints on GCP.
        self._ckpt_path = os.path.join(log_dir, "last.ckpt")

    @pl.utilities.rank_zero.rank_zero_only
    def save_checkpoint(
        self, filepath, weights_only: bool = False, storage_options: Optional[Any] = None
    ):  # pylint: disable=too-many-locals
        if filepath.startswith("./"):
            filepath = f"{self.default_root_dir}/{filepath[2:]}"
        super().save_checkpoint(filepath, weights_only, storage_options)

        regime = self.lightning_module
        for k, v in regime._modules.items():  # pylint: disable=protected-access
            if hasattr(v, "__built_with_spec"):
                model_spec = getattr(v, "__built_with_spec")  # pylint: disable=protected-access
                while "@type" in model_spec and model_spec["@type"] == "load_weights_file":
                    model_spec = model_spec["model"]

                spec = {
                    "@type": "load_weights_file",
                    "@version": importlib.metadata.version("zetta_utils"),
                    "model": model_spec,
                    "ckpt_path": filepath,
                    "component_names": [k],
                    "remove_component_prefix": True,
                    "strict": True,
                }
                spec_path = f"{filepath}.{k}.spec.json"
                with fsspec.open(spec_path, "w") as f:
                    json.dump(spec, f, indent=3)

        for name, val in self.trace_configuration.items():
            model = val["model"]
            trace_input = val["trace_input"]
            ctx = torch.multiprocessing.get_context("spawn")
            with ctx.Pool(processes=1) as pool:
                # See https://github.com/pytorch/pytorch/issues/35600
                res = pool.map(trace_and_save_model, [(model, trace_input, filepath, name)])[0]
            if res is not None:
                logger.warning(f"Exception while saving the model as ONNX: {res[0]}: {res[1]}")


@typeguard.typechecked
def get_checkpointing_callbacks(
    log_dir: str,
    backup_every_n_secs: int = 900,
    update_every_n_secs: int = 60,
) -> List[pl.callbacks.Callback]:  # pragma: no cover
    result = [
        pl.callbacks.ModelCheckpoint(
            dirpath=log_dir,
            train_time_interval=datetime.timedelta(seconds=backup_every_n_secs),
            save_top_k=-1,
            save_last=False,
            monitor=None,
            filename="{epoch}-{step}-backup",
        ),
        pl.callbacks.ModelCheckpoint(
            dirpath=log_dir,
            train_time_interval=datetime.timedelta(seconds=update_every_n_secs),
            save_top_k=1,
            save_last=True,
            monitor=None,
            filename="{epoch}-{step}-current",
        ),
    ]  # type: List[pl.callbacks.Callback]
    return result


@typeguard.typechecked
def get_progress_bar_callbacks() -> List[pl.callbacks.Callback]:  # pragma: no cover
    result = [pl.callbacks.RichProgressBar()]  # type: List[pl.callbacks.Callback]
    return result


@typeguard.typechecked
class ConfigureTraceCallback(pl.callbacks.Callback):  # pragma: no cover
    def __init__(self, trainer: pl.Trainer) -> None:
        self.trainer = trainer
        self.pl_module = trainer.lightning_module

    @staticmethod
    def wrap_forward(pl_module: pl.LightningModule, name: str, trace_configuration: Dict) -> None:
        model = pl_module.get_submodule(name)
        setattr(model, "__forward__", model.forward)

        def wrapped_forward(*args, **kwargs):
            trace_configuration[name] = {"model": model, "trace_input": args}
            return getattr(model, "__forward__")(*args, **kwargs)

        setattr(model, "forward", wrapped_forward)

    @staticmethod
    def unwrap_forward(pl_module: pl.LightningModule, name: str) -> None:
        model = pl_module.get_submodule(name)
        wrapped_forward = model.forward
        model.forward = getattr(model, "__forward__")
        delattr(model, "__forward__")
        del wrapped_forward

    def on_validation_batch_start(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if hasattr(self.trainer, "trace_configuration") and not self.trainer.trace_configuration:
            input_to_trace = batch
            models_to_trace = [name for name, _ in pl_module.named_children()]
            trace_configuration = {}  # type: Dict[str, Dict[str, Any]]
            for name in models_to_trace:
                ConfigureTraceCallback.wrap_forward(pl_module, name, trace_configuration)
            pl_module.validation_step(input_to_trace, 0)
            for name in models_to_trace:
                ConfigureTraceCallback.unwrap_forward(pl_module, name)
            self.trainer.trace_configuration = trace_configuration
