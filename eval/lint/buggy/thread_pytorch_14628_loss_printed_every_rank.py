# source: https://github.com/pytorch/pytorch/issues/14628
# established by the report's own output (closed, labelled distributed): "When I print the `loss.item()`
#   inside the training function, it prints the loss for every GPU and for every node" ("Loss in epoch 0"
#   twice with two GPUs): the prints run on every process; the answer is not in the stored copy.
# expect: TRG037
# (the training function as pasted, unmodified below this header)
def train(model, device, train_loader, optimizer,criteration, epochs):
    model.train()
    print("2 GPUs")
    print("GPU : ",args.local_rank)
    model = torch.nn.parallel.DistributedDataParallel(model,
                                                  device_ids=[args.local_rank],
                                                  output_device=args.local_rank)
    for epoch in range(epochs):
        LOSS = 0
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = criteration(output, target)
            loss.backward()
            optimizer.step()
            LOSS += loss.item()
        print("Loss in epoch", epoch," = ", LOSS/len(train_loader))

