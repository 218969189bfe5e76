# source: https://github.com/deepspeedai/DeepSpeed/issues/6995
# established (maintainer, confirmed by the reporter): the error came from loss.backward() on a
#   DeepSpeed model; calling model.backward(loss) resolved it.
# expect: TRG018
# (a minimal reconstruction of the pattern)
import deepspeed


def run(model, config, batches):
    model, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    for batch in batches:
        loss = model(batch).mean()
        loss.backward()
        model.step()
