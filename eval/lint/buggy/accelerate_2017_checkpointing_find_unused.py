# source: https://github.com/huggingface/accelerate/issues/2017
# established (closed, labelled solved): gradient checkpointing cannot be used together with DDP's
#   find_unused_parameters; with both, the backward raised "Expected to mark a variable ready only
#   once ... has been marked as ready twice".
# expect: TRG007
# (a minimal reconstruction of the pattern in the report)
from accelerate import Accelerator, DistributedDataParallelKwargs
from transformers import Blip2ForConditionalGeneration


def main(loader, epochs):
    ddp_kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)
    accelerator = Accelerator(kwargs_handlers=[ddp_kwargs])
    model = Blip2ForConditionalGeneration.from_pretrained("Salesforce/blip2-opt-2.7b")
    model.gradient_checkpointing_enable()
    optimizer = None
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(epochs):
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main(None, 1)
