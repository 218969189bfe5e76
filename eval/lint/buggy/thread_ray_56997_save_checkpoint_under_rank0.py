# source: https://github.com/ray-project/ray/issues/56997
# established by the issue (labelled bug) and its merged fix (ray-project/ray#65838, "Save custom
#   Lightning checkpoints on all ranks"): the pasted example hangs, "because `trainer.save_checkpoint()`
#   actually calls `self.strategy.save_checkpoint()` and `self.strategy.barrier()` under the hood. So
#   `save_checkpoint()` needs to be outside `global_rank` guard."
# expect: TRG036
# (the code as pasted in the issue, unmodified below this header)
checkpoint = None
global_rank = ray.train.get_context().get_world_rank() == 0
if global_rank == 0 and should_checkpoint:
    # Save model checkpoint file to tmpdir
    ckpt_path = os.path.join(tmpdir, "ckpt.pt")
    trainer.save_checkpoint(ckpt_path, weights_only=False)

    checkpoint = Checkpoint.from_directory(tmpdir)

# Report to train session
ray.train.report(metrics=metrics, checkpoint=checkpoint)
