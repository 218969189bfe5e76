# source: https://github.com/pytorch/pytorch/issues/13826
# established by the report's own output (closed, labelled distributed): every process of `run(rank, size)`
#   takes `torch.device("cuda")`, the current device, which is GPU 0 in every process since nothing binds
#   the rank to a GPU; the run stops with "cuda runtime error (46) : all CUDA-capable devices are busy or
#   unavailable". The maintainers' answer is not in the stored copy.
# expect: TRG030
# (the function as pasted, unmodified below this header up to the DataLoader call, where the stored copy
#   of the thread breaks off mid-call; that call is not reproduced)
def run(rank, size):
    device = torch.device("cuda")
    dataset = datasets.MNIST('./data', train=True,
                             transform=transforms.Compose([
                                 transforms.ToTensor(),
                                 transforms.Normalize((0.1307,), (0.3081,))]))
    # from torch.utils.data.distributed import DistributedSampler
    train_sampler = DistributedSampler(dataset)
