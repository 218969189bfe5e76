# triage eval (lint clean set): https://github.com/NVIDIA/apex/issues/88
# Pasted in the issue (asking how to use SyncBN); the thread's answer (mcarilli, a maintainer): "make
#   sure that all modifications to your model (including `model = apex.parallel.convert_syncbn_model(model)`)
#   are done before `model = DDP(model, delay_allreduce=True)` ... The way you've written it above should
#   be ok." Unmodified below this header.
import apex
model = apex.parallel.convert_syncbn_model(model)

from apex.parallel import DistributedDataParallel as DDP
model = DDP(model, delay_allreduce=True)
