# source: https://github.com/Lightning-AI/pytorch-lightning/issues/20536
# established by the thread's answer (lantiga, a maintainer): "The issue arises because the two ranks
#   diverge, specifically because make_dataset returns `None` on rank 1": rank 0 returns from inside
#   `if fabric.global_rank == 0:` and never reaches `fabric.barrier()`, which the other ranks wait in.
# expect: TRG021
# (the user's method as the answer quotes it, below this header; the full script is
#   not in the stored copy of the thread; dedented by the quote's four spaces so that it parses)
def make_dataset(self, x, y):
    if fabric.global_rank == 0:
        # In actual program, there is some I/O so I used barrier
        dataset = TensorDataset(x, y)
        return dataset
    fabric.barrier()  # <- this will never be reached on rank 0, also the make_dataset function will return None on rank 1 
