# source: https://github.com/huggingface/transformers/pull/4659
# established (merged PR's discussion, with a reproduction by its author): BERT with gradient
#   checkpointing under DDP(find_unused_parameters=True) fails with "Expected to mark a variable ready
#   only once"; with find_unused_parameters=False it works.
# expect: TRG007
# (a minimal reconstruction of the reproduction in the thread)
import os

import torch
from transformers import BertConfig, BertForPreTraining

os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = "12355"
torch.distributed.init_process_group(backend="nccl", rank=0, world_size=1)

config = BertConfig.from_pretrained("bert-base-uncased")
model = BertForPreTraining.from_pretrained("bert-base-uncased", config=config).cuda()
model.gradient_checkpointing_enable()
model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
outputs = model(torch.tensor([[1, 2, 3]]).cuda())
outputs[0].sum().backward()
