"""GPU step time: a ddp_nb rank vs `torchrun --nproc_per_node=1`, the same DDP-wrapped MLP on the same GPU (nccl).

    python -m benchmarks.gpu [--rounds 3] [--seconds 2] [--out FILE]      # "no GPU" where there is none
    as a torchrun worker: python -m benchmarks.gpu --worker --out FILE"""
import argparse, json, os, subprocess, tempfile, time
from pathlib import Path
from benchmarks.common import med, table, torchrun_cmd, machine, ROOT

# (MLP width, batch): from launch-bound (the Python and kernel-launch cost of a step shows) to compute-bound
CONFIGS = ((1024, 64), (4096, 1024), (8192, 4096))
HEAD = "### 7. GPU: ddp_nb vs `torchrun --nproc_per_node=1`"


def gpu_steps(configs, seconds: float = 2, seed: int = 0, digest_steps: int = 10) -> list:
    "On a rank with a CUDA device and a process group: for each (width, batch), ms per DDP step (CUDA events) and a weights digest"
    import hashlib, time, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dev = torch.device('cuda', torch.cuda.current_device())
    out = []
    for width, batch in configs:
        torch.manual_seed(seed)
        m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(dev),
                device_ids=[dev.index])
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        g = torch.Generator(device=dev).manual_seed(seed + dist.get_rank())
        x, y = torch.randn(batch, width, device=dev, generator=g), torch.randint(0, 10, (batch,), device=dev, generator=g)
        def step():
            loss = F.cross_entropy(m(x), y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        for _ in range(digest_steps): step()   # also the warm-up
        h = hashlib.sha256()
        for p in m.module.parameters(): h.update(p.detach().cpu().numpy().tobytes())
        torch.cuda.synchronize(dev); t = time.perf_counter()
        for _ in range(5): step()
        torch.cuda.synchronize(dev)
        steps = max(10, int(seconds / ((time.perf_counter() - t) / 5)))
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps): step()
        b.record(); b.synchronize()
        out.append(dict(width=width, batch=batch, steps=steps, ms=a.elapsed_time(b) / steps, digest=h.hexdigest()))
        m = opt = x = y = None   # free the GPU memory before the next size
        torch.cuda.empty_cache()
    return out


def timed_steps(width: int = 4096, batch: int = 768, blocks: int = 20, steps: int = 50, seed: int = 0) -> dict:
    "On a CUDA rank: alternating blocks of plain and StepTimer-timed DDP steps (CUDA events, a report per step); each block's wall ms per step"
    import time, torch, torch.nn as nn, torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_nb.timing import StepTimer
    dev = torch.device('cuda', torch.cuda.current_device())
    def build():
        torch.manual_seed(seed)
        m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(dev),
                device_ids=[dev.index])
        return m, torch.optim.SGD(m.parameters(), lr=1e-3)
    (m1, o1), (m2, o2) = build(), build()
    x, y = torch.randn(batch, width, device=dev), torch.randint(0, 10, (batch,), device=dev)
    timer = StepTimer(m2)
    def plain(n):
        for _ in range(n):
            loss = F.cross_entropy(m1(x), y); o1.zero_grad(set_to_none=True); loss.backward(); o1.step()
    def timed(n):
        for i, (xb, yb) in enumerate(timer.iter([(x, y)] * n)):
            with timer.step(i):
                loss = F.cross_entropy(m2(xb), yb); o2.zero_grad(set_to_none=True); loss.backward()
                with timer.optimizer(): o2.step()
    def clock(f):
        torch.cuda.synchronize(dev); t = time.perf_counter(); f(steps); torch.cuda.synchronize(dev)
        return (time.perf_counter() - t) / steps * 1e3
    plain(10); timed(10)
    pairs = [(clock(plain), clock(timed)) if i % 2 == 0 else tuple(reversed((clock(timed), clock(plain)))) for i in range(blocks)]
    timer.flush()
    last = dict(timer.steps[-1][1]) if timer.steps else {}
    return dict(width=width, batch=batch, steps=steps, pairs=pairs, kept=len(timer.steps), clock=timer.clock.kind, last=last)


def torchrun_side(configs, seconds: float) -> list:
    "One `torchrun --nproc_per_node=1` launch timing every config"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'r.json')
        r = subprocess.run(torchrun_cmd(1, 'benchmarks.gpu', '--worker', '--seconds', seconds, '--out', out), cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        if r.returncode: raise RuntimeError(f"torchrun failed ({r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
        return json.load(open(out))


def worker(seconds: float, out: str):
    "A torchrun worker: nccl on its LOCAL_RANK's GPU, the configs timed, rank 0 writes the result"
    import torch, torch.distributed as dist
    from datetime import timedelta
    dev = torch.device('cuda', int(os.environ.get('LOCAL_RANK', 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group('nccl', timeout=timedelta(seconds=120), device_id=dev)
    try: r = gpu_steps(CONFIGS, seconds)
    finally: dist.destroy_process_group()
    if int(os.environ.get('RANK', 0)) == 0: Path(out).write_text(json.dumps(r))


def run(rounds: int = 3, seconds: float = 2) -> str:
    "The GPU section, as markdown ('not measured' without a GPU)"
    import torch
    if not torch.cuda.is_available():  # the last GPU run's section (make test-gpu on a lent machine), where there is one
        last = Path(ROOT) / 'benchmarks' / 'results_gpu.md'
        return last.read_text().rstrip() if last.exists() else f"{HEAD}\n\nNot measured in this run: this machine has no GPU."
    from ddp_nb import DDPCluster
    ours, theirs = [], []
    with DDPCluster(n=1) as cl:
        assert cl.backend == 'nccl', cl
        for r in range(rounds):
            for side in (('ddp_nb', 'torchrun') if r % 2 == 0 else ('torchrun', 'ddp_nb')):
                if side == 'ddp_nb': ours.append(cl.run(gpu_steps, CONFIGS, seconds)[0])
                else: theirs.append(torchrun_side(CONFIGS, seconds))
            print(f"gpu round {r + 1}/{rounds}: ddp_nb {[round(c['ms'], 3) for c in ours[-1]]} ms, "
                  f"torchrun {[round(c['ms'], 3) for c in theirs[-1]]} ms", flush=True)
        tc = [cl.run(timed_steps)[0] for _ in range(rounds)]
    rows = []
    for i, (w, b) in enumerate(CONFIGS):
        a, t = med([o[i]['ms'] for o in ours]), med([o[i]['ms'] for o in theirs])
        same = {o[i]['digest'] for o in ours + theirs}
        rows.append([f"MLP width {w}, batch {b}", f"{a:.3f}", f"{t:.3f}", f"**{a / t:.3f}**" + ('' if a / t <= 1.02 else ' (missed)'),
                     'yes' if len(same) == 1 else '**no**'])
    return (f"{HEAD}\n\n{torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA {torch.version.cuda}), one rank on nccl. "
            f"Same DDP-wrapped 3-layer MLP, seeds and data (on the GPU) on both sides; a step's time from CUDA events over about "
            f"{seconds:g} s of steps after a warm-up, launch excluded; {rounds} alternating rounds, medians. Weights compared after "
            "10 steps.\n\n" + table(['model', 'ddp_nb ms/step', 'torchrun ms/step', 'ratio (goal ≤ 1.02)', 'bit-identical weights'], rows)
            + "\n\n" + timer_section(tc))


def timer_section(res: list) -> str:
    "The StepTimer-on-the-GPU rows, as markdown"
    rows, costs = [], []
    for i, r in enumerate(res):
        ps = r['pairs']
        q = [t / a for a, t in ps]
        costs.append(med(q) - 1)
        rows.append([str(i + 1), f"MLP width {r['width']}, batch {r['batch']}; {len(ps)} × 2 blocks of {r['steps']}",
                     f"{med([a for a, _ in ps]):.3f}", f"{med([t for _, t in ps]):.3f}", f"**{med(q) - 1:+.2%}**",
                     f"{r['clock']}; last step: " + ', '.join(f"{k} {v:.2f}" for k, v in r['last'].items())])
    c = med(costs)
    return ("**The per-step breakdown (StepTimer, issue #16) on the GPU**: the same rank alternates blocks of plain DDP steps and "
            "timed ones (`timer.iter`, `timer.step`, `timer.optimizer`, the autograd hooks timing DDP's all-reduce wait, CUDA "
            "events read only once ready, and a report per step to the notebook), each block between two synchronisations. "
            f"Median cost **{c:+.2%}** of a step (goal ≤ +2%: {'met' if c <= 0.02 else 'missed'}).\n\n"
            + table(['round', 'steps', 'plain ms/step', 'timed ms/step', 'cost (median of block pairs)', 'clock; what it reported (ms)'], rows))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--seconds', type=float, default=2)
    ap.add_argument('--out', default=None)
    ap.add_argument('--worker', action='store_true')
    a = ap.parse_args(argv)
    if a.worker: return worker(a.seconds, a.out)
    t0 = time.time()
    text = run(a.rounds, a.seconds)
    text = f"Machine: {machine()}  \nCommand: `python -m benchmarks.gpu` ({time.time() - t0:.0f} s, {time.strftime('%Y-%m-%d')}).\n\n{text}\n"
    if a.out: Path(a.out).write_text(text)
    print(text)


if __name__ == '__main__':
    main()
