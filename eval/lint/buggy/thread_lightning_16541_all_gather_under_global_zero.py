# source: https://github.com/Lightning-AI/pytorch-lightning/issues/16541
# established by the thread (labelled distributed/docs; the reporter: "`all_gather` and `is_global_zero`
#   make the program hang forever ... If `is_global_zero` is removed, it can finish successfully"):
#   self.all_gather is a collective, called here by the global-zero process only.
# expect: TRG021
# (the reproduction script as pasted, unmodified below this header up to its `if __name__ == "__main__":`
#   block, where the stored copy of the thread breaks off mid-line; that block is not reproduced)
import pytorch_lightning as thl
import torch as th
from torch.utils.data import Dataset, DataLoader, TensorDataset
import torch.nn.functional as F


class DummyModel(thl.LightningModule):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.fc = th.nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return self.fc(x)

    def configure_optimizers(self):
        return th.optim.Adam(self.parameters())

    def training_step(self, batch, idx):
        x, y = batch
        logits = self.forward(x)
        return F.binary_cross_entropy_with_logits(logits, y)

    def test_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self.fc(x)
        return  y_hat

    def test_epoch_end(self, outputs):
        if self.trainer.is_global_zero:
            outputs = self.all_gather(outputs)
            print(f"after gather, len = {len(outputs)}")
            return outputs
