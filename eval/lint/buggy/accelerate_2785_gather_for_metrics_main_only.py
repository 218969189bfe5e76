# source: https://github.com/huggingface/accelerate/issues/2785
# established (closed; the reporter found the cause): the script hung in gather_for_metrics(), which
#   every process must call, because the evaluation that called it ran under
#   `if accelerator.is_main_process:`; moving it out of the branch fixed the hang.
# expect: TRG021
# (a minimal reconstruction of the pattern in the report)
import torch
from accelerate import Accelerator
from torchvision.models import resnet18


def main(trainloader, testloader, epochs):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = resnet18().to(accelerator.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, trainloader, testloader = accelerator.prepare(model, optimizer, trainloader, testloader)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        model.train()
        for images, targets in trainloader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(images), targets)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        if accelerator.is_main_process:
            model.eval()
            correct = 0
            for images, targets in testloader:
                with torch.no_grad():
                    preds = model(images).argmax(dim=-1)
                preds, targets = accelerator.gather_for_metrics((preds, targets))
                correct += (preds == targets).sum().item()
            accelerator.print(f"epoch {epoch}: {correct} correct")


if __name__ == "__main__":
    main(None, None, 1)
