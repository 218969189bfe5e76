# source: https://github.com/gty111/gLLM/commit/d872eb2d4fd2605c5c40f8f4a43eec1f7c3e06ef
# established by the fix commit ("Fix torch.cuda.set_device", PR #54): receive buffers were
#   allocated on `cuda:{dist.get_rank()}` and the worker called
#   `set_device(f'cuda:{self.pp_rank}')`, global (pipeline) ranks used as GPU indices, wrong on
#   any node after the first; the fix uses the local rank in both files.
# expect: TRG003
# (the real file before the fix, unmodified below this header: gty111/gLLM gllm/dist_utils.py at e2e9851ae2af; licence: Apache-2.0 (c) gLLM authors)
import torch.distributed as dist
import torch

from logger import logger

def send_tensor(tensor:torch.Tensor, dst):
    tensor_shape = list(tensor.shape)
    # send dim
    dist.send_object_list([len(tensor_shape)],dst)
    # send shape
    dist.send_object_list(tensor_shape,dst)
    # send tensor
    dist.send(tensor,dst)
    
def recv_tensor(dtype, src):
    # recv dim
    dim = [None]
    dist.recv_object_list(dim,src)
    # recv shape
    tensor_shape = [None for _ in range(dim[0])]
    dist.recv_object_list(tensor_shape,src)
    # recv tensor
    tensor = torch.zeros(torch.Size(tensor_shape),dtype=dtype,device=f'cuda:{dist.get_rank()}')
    dist.recv(tensor,src)
    return tensor

def send_pp_data(output, dst):
    if type(output) == tuple:
        assert len(output) == 2
        dist.isend(output[0],dst)
        dist.isend(output[1],dst)
    else:
        dist.isend(output,dst)

def recv_pp_data(src, dtype, shape, has_residual):
    hidden_states = torch.zeros(torch.Size(shape),dtype=dtype,device=f'cuda:{dist.get_rank()}')
    if has_residual:
        residual = hidden_states.clone().detach()
        hidden_states_future = dist.irecv(hidden_states,src)
        residual_future = dist.irecv(residual,src)
        return hidden_states_future, residual_future, hidden_states, residual
    else:
        hidden_states_future = dist.irecv(hidden_states,src)
        return hidden_states_future, hidden_states
    
def send_obj_list(obj_list, dst):
    dist.send_object_list(obj_list, dst=dst)
    
def recv_obj_list(obj_list, src):
    dist.recv_object_list(obj_list, src=src)

_PP_RANK=0
_LOCAL_RANK=0
_PP_SIZE=1
_ASSIGNED_LAYERS=None

def get_pp_rank():
    return _PP_RANK

def get_local_rank():
    return _LOCAL_RANK

def get_pp_size():
    return _PP_SIZE

def get_assigned_layers():
    return _ASSIGNED_LAYERS

def init_dist(pp_size, local_rank, pp_rank, master_addr, master_port, assigned_layers):
    global _PP_RANK, _PP_SIZE, _ASSIGNED_LAYERS, _LOCAL_RANK
    _PP_RANK = pp_rank
    _LOCAL_RANK = local_rank
    _PP_SIZE = pp_size
    _ASSIGNED_LAYERS = assigned_layers
    dist.init_process_group(init_method=f'tcp://{master_addr}:{master_port}', 
                        backend='nccl', world_size=pp_size, rank=pp_rank)

def get_pp_layers(num_layers):
    if _ASSIGNED_LAYERS is None:
        num_layers_pp = num_layers // get_pp_size()
        
        if get_pp_size() <= 4 or num_layers % get_pp_size() != 0:
            num_layers_pp += 1

        if get_pp_rank() != get_pp_size() - 1:
            assigned_layers = num_layers_pp * get_pp_rank(), num_layers_pp * (get_pp_rank()+1)
        else:
            assigned_layers = num_layers_pp * get_pp_rank(), num_layers
    else:
        total_assigned_layers = [int(i) for i in _ASSIGNED_LAYERS.split(',')]
        assert len(total_assigned_layers) == get_pp_size() and sum(total_assigned_layers) == num_layers
        assigned_layers = [sum(total_assigned_layers[:get_pp_rank()]), sum(total_assigned_layers[:get_pp_rank()+1])]
    
    if get_pp_size() > 1:
        logger.info('Assigned layers: (%3d,%3d) #total: %2d'%
                    (
                        assigned_layers[0],
                        assigned_layers[1]-1,
                        assigned_layers[1]-assigned_layers[0]
                    ))
    
    return assigned_layers
