# source: https://github.com/huggingface/accelerate/issues/2081
# established: multi-GPU training with evaluation on the main process only, through the prepared
#   model, gets stuck (maintainer: work started on one process without the others).
# expect: TRG036
# (a minimal reconstruction of the pattern in the report)
import torch
from accelerate import Accelerator


def run(model, optimizer, train_loader, test_loader, epochs):
    accelerator = Accelerator()
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    for epoch in range(epochs):
        model.train()
        for image, target in train_loader:
            loss = torch.nn.functional.cross_entropy(model(image), target)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            if accelerator.is_main_process:
                for image, target in test_loader:
                    pred = model(image.to(accelerator.device))
