# triage eval (lint clean set): https://github.com/facebookresearch/detr/issues/544
# Pasted in the issue (asking whether a seed that differs per rank, set before the model is built, gives
#   each DDP replica different weights); the thread's answer: "All the parameters are forced to be same
#   when DDP instantiated" (DDP broadcasts rank 0's state at construction), so this part is right. The
#   snippet comes from detr's main.py, which clean/ already holds whole. Unmodified below this header.
"""starts from main.py line 347"""
# fix the seed for reproducibility
seed = args.seed + dist.get_rank()
torch.manual_seed(seed)
np.random.seed(seed)
random.seed(seed)
# torch.set_deterministic(True)
torch.use_deterministic_algorithms(True)

# Build the model
model, criterion, weight_dict = build_model(args)
model.to(device)
