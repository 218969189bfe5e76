# source: https://github.com/Lightning-AI/pytorch-lightning/issues/19780
# established by the thread's answer (awaelchli, a maintainer): "The use of `if fabric.global_rank == 0:
#   fabric.save(...)` is not correct. Can you please remove `if fabric.global_rank == 0`. Fabric already
#   makes sure to save correctly on the rank that should save"; the reporter: "Thanks, it worked!".
#   fabric.save must be called on every process (it synchronises the ranks).
# expect: TRG036
# (the user's code as the answer quotes it, unmodified below this header; the rest of the script is not
#   in the stored copy of the thread)
if fabric.global_rank == 0:
        fabric.save("state.pkl", state)
