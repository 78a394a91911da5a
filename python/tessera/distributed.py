"""Process groups (MPI, NCCL, RCCL where built) and DistributedDataParallel.

Run under ``mpirun -n 2 python3 script.py``; ``init_process_group()`` picks the best backend.
"""
from . import _C

_d = _C.distributed
ProcessGroup = _d.ProcessGroup
available_backends = _d.available_backends
init_process_group = _d.init_process_group
is_initialized = _d.is_initialized
get_rank = _d.get_rank
get_world_size = _d.get_world_size
barrier = _d.barrier
all_reduce = _d.all_reduce
broadcast = _d.broadcast
DistributedDataParallel = _d.DistributedDataParallel
