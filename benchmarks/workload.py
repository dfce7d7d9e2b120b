"""The workloads the benchmarks time, identical under ddp_nb, torchrun and the fork/spawn launchers.

As a torchrun worker: python -m benchmarks.workload {mlp|trivial|iterate} [options]"""
import argparse, hashlib, json, os, time


def mlp_job(width: int, seed: int = 0) -> tuple:
    "(model, step): a DDP-wrapped 3-layer MLP on this rank's fixed random batch; `step()` runs one SGD step and returns the loss"
    import torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(seed)
    m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    x, y = torch.randn(64, width, generator=g), torch.randint(0, 10, (64,), generator=g)
    def step():
        loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step(); return loss
    return m, step


def mlp_steps(width: int, steps: int, seed: int = 0, warmup: int = 3, report_every_step: bool = False) -> dict:
    "Time `steps` DDP steps of a 3-layer MLP on fixed random data in the current process group; steps/s and digest"
    from ddp_nb.report import report
    import torch.distributed as dist
    m, step = mlp_job(width, seed)
    for _ in range(warmup): step()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step()
        if report_every_step: report(step=i, loss=loss.detach())
    dist.barrier()
    dt = time.perf_counter() - t0
    h = hashlib.sha256()
    for p in m.module.parameters(): h.update(p.detach().numpy().tobytes())
    return dict(sps=steps / dt, digest=h.hexdigest())


def loader_steps(width: int, steps: int, stoppable: bool, seed: int = 0) -> dict:
    "Steps/s of the MLP of `mlp_steps` fed by a ShardedLoader, with or without its per-batch stop vote"
    import torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.utils.data import TensorDataset
    from ddp_nb.train import ShardedLoader, wrap_model
    torch.manual_seed(seed)
    m = wrap_model(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    n = (steps + 3) * 64 * dist.get_world_size()
    loader = ShardedLoader(TensorDataset(torch.randn(n, width), torch.randint(0, 10, (n,))), batch_size=64, stoppable=stoppable)
    it = iter(loader)
    for _ in range(3): x, y = next(it); F.cross_entropy(m(x), y).backward(); opt.step(); opt.zero_grad()  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for x, y in it: loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
    dist.barrier()
    return dict(sps=steps / (time.perf_counter() - t0))


def digits_iteration(lr: float, steps: int = 10) -> float:
    "On a rank with a built digits job (ddp_nb.digits.job_start): set the lr, run `steps` steps; returns the last loss"
    import ddp_nb.digits as d, torch.nn.functional as F
    job = d._job
    for g in job['opt'].param_groups: g['lr'] = lr
    it, loss = iter(job['loader']), None
    for _ in range(steps):
        try: x, y = next(it)
        except StopIteration: it = iter(job['loader']); x, y = next(it)
        loss = F.cross_entropy(job['model'](x), y); job['opt'].zero_grad(); loss.backward(); job['opt'].step()
    return loss.item()


def fresh_iteration(lr: float, steps: int = 10) -> float:
    "What a launcher must do every time: build the digits job, then the same iteration"
    import ddp_nb.digits as d
    d.job_start(lr=lr)
    return digits_iteration(lr, steps)


def _init():
    "Process group from torchrun's (or a launcher's) environment"
    import torch, torch.distributed as dist
    from datetime import timedelta
    import torch.distributed.nn  # noqa: F401  before the group exists (see examples/train_digits.py): else it pins the group at exit
    torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS', 1)))
    dist.init_process_group('gloo', timeout=timedelta(seconds=120))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('what', choices=['mlp', 'trivial', 'iterate'])
    ap.add_argument('--width', type=int, default=128)
    ap.add_argument('--steps', type=int, default=100)
    ap.add_argument('--lr', type=float, default=0.05)
    ap.add_argument('--out', default=None)
    a = ap.parse_args(argv)
    import torch, torch.distributed as dist
    _init()
    if a.what == 'mlp': r = mlp_steps(a.width, a.steps)
    elif a.what == 'iterate': r = dict(loss=fresh_iteration(a.lr))
    else:
        t = torch.ones(1); dist.all_reduce(t); r = dict(sum=t.item())
    import ddp_nb.digits as d
    d._job.clear()  # the DDP model holds the group: drop it so destroy joins gloo's threads while Python still runs
    dist.destroy_process_group()
    if a.out and int(os.environ.get('RANK', 0)) == 0:
        with open(a.out, 'w') as f: json.dump(r, f)


if __name__ == '__main__':
    main()
