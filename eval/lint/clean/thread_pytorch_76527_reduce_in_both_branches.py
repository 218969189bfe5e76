# triage eval (lint clean set): https://github.com/pytorch/pytorch/issues/76527
# Pasted in the issue (with gloo, a non-target rank also receives part of a `reduce` result); the
#   report establishes the difference is the backend's ("'nccl' backend has no this problem"): every
#   rank calls the same reduce, once in each branch of the rank test. Unmodified below this header.
import os
import torch
import torch.distributed as dist
from torch.multiprocessing import Process
os.environ['MASTER_ADDR'] = '127.0.0.1'
os.environ['MASTER_PORT'] = '29500'
backend = 'gloo'
dist.init_process_group(backend)
rank = dist.get_rank()
# simple dist
if rank == 0:
  print("pid is {}, rank is {}".format(os.getpid(), rank))
else:
  print("pid is {}, rank is {}".format(os.getpid(), rank))
if rank == 0:
  input = torch.tensor([[1, 2], [3, 4]], device="cpu")
else:
  input = torch.tensor([[4, 5], [6, 7]], device="cpu")

if rank == 0:
  dist.reduce(input, dst=0, async_op=False)
else:
  dist.reduce(input, dst=0, async_op=False)
print('Pid is ', os.getpid(), ', Rank ', rank, ', output is: ', input)
