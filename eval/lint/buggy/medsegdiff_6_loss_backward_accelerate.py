# source: https://github.com/lucidrains/med-seg-diff-pytorch/pull/6
# established (merged): loss.backward() was used in an Accelerate loop where accelerator.backward(loss)
#   was needed.
# expect: TRG034
# (a minimal reconstruction of the pattern)
from accelerate import Accelerator


def main(diffusion, optimizer, dataloader, epochs):
    accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="fp16")
    diffusion, optimizer, dataloader = accelerator.prepare(diffusion, optimizer, dataloader)
    for epoch in range(epochs):
        for img, mask in dataloader:
            with accelerator.accumulate(diffusion):
                loss = diffusion(mask, img)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main(None, None, None, 1)
