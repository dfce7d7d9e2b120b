"""A compiled model kept warm: change the learning rate and run 10 steps of a `torch.compile`d digits model.

On a live ddp_nb cluster the compiled model stays on every rank: the compilation is paid once per session. A
launcher (torchrun) starts fresh processes and compiles again on every launch — from scratch when Inductor's
on-disk cache is cold, faster when it already holds the kernels (TORCHINDUCTOR_CACHE_DIR; Dynamo still traces).

    python -m benchmarks.compile_warm [--repeats 3]
    python -m torch.distributed.run --standalone --nproc_per_node=2 -m benchmarks.compile_warm --worker --lr 0.05 --out r.json"""
import argparse, json, os, shutil, subprocess, tempfile, time
from benchmarks.common import med, table, torchrun_cmd, ROOT

_job = {}


def build(lr: float = 0.1, batch: int = 32) -> float:
    "On a rank: build the compiled digits model (compile, then DDP), optimizer and fixed-size batches; the first step's seconds"
    import torch, torch.nn as nn
    from ddp_nb.context import rank_info
    from ddp_nb.train import wrap_model, seed_everything
    from ddp_nb.digits import digits_data
    ri = rank_info()
    seed_everything(0)
    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = wrap_model(torch.compile(net))
    X, y = digits_data().tensors
    X, y = X[ri.rank::ri.world_size], y[ri.rank::ri.world_size]
    n = len(X) // batch * batch  # equal batches only: a short one would be a new shape, a recompilation
    _job.update(model=model, opt=torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                batches=list(zip(X[:n].split(batch), y[:n].split(batch))), i=0)
    t0 = time.perf_counter(); _steps(1)
    return time.perf_counter() - t0


def _steps(n: int) -> float:
    "`n` training steps of the built job; the last loss"
    import torch.nn.functional as F
    m, opt, bs = _job['model'], _job['opt'], _job['batches']
    for _ in range(n):
        x, y = bs[_job['i'] % len(bs)]; _job['i'] += 1
        loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()


def iteration(lr: float, steps: int = 10) -> float:
    "On a rank with a built job: set the lr, run `steps` steps; the last loss"
    for g in _job['opt'].param_groups: g['lr'] = lr
    return _steps(steps)


def graphs() -> int:
    "Graphs Dynamo compiled in this process"
    from torch._dynamo.utils import counters
    return counters['stats']['unique_graphs']


def _torchrun(lr: float, cache: str, out: str) -> float:
    "Seconds for one torchrun launch of the worker with Inductor's cache in `cache`"
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'TORCHINDUCTOR_CACHE_DIR': cache}
    t0 = time.perf_counter()
    r = subprocess.run(torchrun_cmd(2, 'benchmarks.compile_warm', '--worker', '--lr', lr, '--out', out), cwd=ROOT,
                       capture_output=True, text=True, timeout=900, env=env)
    if r.returncode: raise RuntimeError(f"torchrun failed (exit {r.returncode}); its output ends with:\n{(r.stdout + r.stderr)[-3000:]}")
    return time.perf_counter() - t0


def run(repeats: int = 3, cold: bool = True) -> str:
    "The compile section, as markdown (cold=False skips the launches with an empty Inductor cache: each compiles from scratch)"
    from ddp_nb import DDPCluster
    from benchmarks import compile_warm as cw  # by module name (not __main__), so the ranks import these functions
    t, first = {}, {}
    with DDPCluster(n=2) as cl:
        first['ddp_nb'] = max(cl.run(cw.build, 0.05))  # compiled once, in the session's first cell
        t['ddp_nb (live cluster, compiled once)'] = []
        for i in range(repeats):
            t0 = time.perf_counter(); cl.run(cw.iteration, 0.05 + i * 1e-3)
            t['ddp_nb (live cluster, compiled once)'].append(time.perf_counter() - t0)
        assert cl.run(cw.graphs) == [1, 1], "the live cluster recompiled"
    tmp = tempfile.mkdtemp(prefix='ddp_nb-compile-')
    try:
        out = os.path.join(tmp, 'r.json')
        cold_t, firsts = [], []
        for i in range(repeats if cold else 0):
            cache = tempfile.mkdtemp(dir=tmp)  # a fresh, empty Inductor cache every launch
            cold_t.append(_torchrun(0.05 + i * 1e-3, cache, out)); firsts.append(json.load(open(out))['first'])
        if cold: t['torchrun, cold Inductor cache'] = cold_t
        first['cold'] = med(firsts)
        warm_cache = tempfile.mkdtemp(dir=tmp)
        _torchrun(0.05, warm_cache, out)  # fills the cache
        warm, firsts = [], []
        for i in range(repeats):
            warm.append(_torchrun(0.05 + i * 1e-3, warm_cache, out)); firsts.append(json.load(open(out))['first'])
        t['torchrun, warm Inductor cache'], first['warm'] = warm, med(firsts)
    finally: shutil.rmtree(tmp, ignore_errors=True)
    ours = med(t['ddp_nb (live cluster, compiled once)'])
    rows = [[k, f"{med(v) * 1e3:,.0f} ms", '1' if k.startswith('ddp_nb') else f"{med(v) / ours:,.0f}×"] for k, v in t.items()]
    return ("### 9. A compiled model kept warm: new learning rate + 10 training steps of a `torch.compile`d digits model, 2 ranks\n\n"
            f"Wall time from the caller, median of {repeats}. The live cluster compiled the model once, before the timed "
            f"runs (its first step took {first['ddp_nb']:.1f} s on the slower rank); every torchrun launch starts processes, "
            f"forms a group, builds and compiles the model (first step inside the workers: "
            + (f"{first['cold']:.1f} s with an empty Inductor cache, " if cold else "")
            + f"{first['warm']:.1f} s with a warm one), then runs the same 10 steps.\n\n"
            + table(['side', 'median', 'slower than ddp_nb by'], rows))


def worker(lr: float, out: str):
    "One torchrun worker: process group, build and compile, the iteration; rank 0 writes its first-step seconds"
    import torch.distributed as dist
    from benchmarks.workload import _init
    _init()
    first = build(lr)
    loss = iteration(lr)
    _job.clear()  # the DDP model holds the group: drop it before destroying the group
    dist.destroy_process_group()
    if int(os.environ.get('RANK', 0)) == 0:
        with open(out, 'w') as f: json.dump(dict(first=first, loss=loss), f)


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--no-cold', action='store_true', help='skip the launches with an empty Inductor cache')
    ap.add_argument('--worker', action='store_true')
    ap.add_argument('--lr', type=float, default=0.05)
    ap.add_argument('--out', default=None)
    a = ap.parse_args()
    if a.worker: worker(a.lr, a.out)
    else: print(run(a.repeats, cold=not a.no_cold))
