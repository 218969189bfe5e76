# source: https://github.com/alan-turing-institute/autocast/pull/386
# established (merged fix for #381): Lightning's trainer.save_checkpoint() ends in a barrier every
#   rank must enter; called inside `if trainer.is_global_zero:` it desynchronised the collectives and
#   the job hung at the end of fit until the NCCL watchdog fired.
# expect: TRG021
# (a minimal reconstruction of the pattern in the report)
import lightning as L


def run_training(model, datamodule, output_dir):
    trainer = L.Trainer(accelerator="gpu", devices=4, strategy="ddp", max_epochs=10)
    trainer.fit(model, datamodule=datamodule)
    if trainer.is_global_zero:
        trainer.save_checkpoint(f"{output_dir}/final.ckpt")
    return trainer
