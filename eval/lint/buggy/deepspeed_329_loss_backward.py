# source: https://github.com/deepspeedai/DeepSpeed/issues/329
# established (maintainer): loss.backward() instead of model_engine.backward(loss) skips the
#   gradient reduction, so each GPU trains its own model.
# expect: TRG018
# (a minimal reconstruction of the pattern)
import deepspeed
import torch


def train(args, model, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model_engine(x), y)
        loss.backward(retain_graph=True)
        model_engine.step()
