"""Run under mpirun -n 2 (the python-distributed ctest): all_reduce, broadcast and DDP from Python.
Not collected by pytest (its name does not start with test_)."""
import tessera as ts
ts.distributed.init_process_group()
r, w = ts.distributed.get_rank(), ts.distributed.get_world_size()
t = ts.full((3,), float(r + 1))
ts.distributed.all_reduce(t)
assert t.tolist() == [3.0] * 3, t
ts.manual_seed(r)  # different weights per rank: DDP broadcasts rank 0's
m = ts.nn.make_mlp()
ddp = ts.distributed.DistributedDataParallel(m)
x = ts.full((4, 1, 28, 28), float(r))
loss = ddp(x).sum()
loss.backward()
ddp.finish_gradient_sync()
g = m.parameters()[0].grad
ref = g.clone(); ts.distributed.broadcast(ref, 0)
assert (g - ref).abs().amax().item() == 0.0
print("rank", r, "ok", ts.distributed.available_backends())
