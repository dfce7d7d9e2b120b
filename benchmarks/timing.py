"""Cost of StepTimer (issue #16): DDP steps of ~3 ms with and without the per-step breakdown (marks, all-reduce
hook, report of t_data/t_compute/t_comm/t_opt/t_step), on a 2-rank cluster.

    python -m benchmarks.timing [--rounds 7] [--seconds 2]"""
import argparse, time
from benchmarks.common import med, table
from benchmarks.throughput import calibrate


def timed_steps(width: int, steps: int, timed: bool, seed: int = 0, warmup: int = 3) -> float:
    "Steps/s of the MLP of `mlp_steps` on fixed data, each step with (timed=True) or without a StepTimer"
    import time, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_nb.timing import StepTimer
    torch.manual_seed(seed)
    m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    data = [(torch.randn(64, width, generator=g), torch.randint(0, 10, (64,), generator=g))] * (steps + warmup)
    timer = StepTimer(m) if timed else None
    def plain(batches):
        for x, y in batches:
            loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
    def with_timer(batches):
        for i, (x, y) in enumerate(timer.iter(batches)):
            with timer.step(i):
                loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward()
                with timer.optimizer(): opt.step()
    loop = with_timer if timed else plain
    loop(data[:warmup])
    dist.barrier()
    t0 = time.perf_counter()
    loop(data[warmup:])
    dist.barrier()
    return steps / (time.perf_counter() - t0)


def run(rounds: int = 7, seconds: float = 2, target_ms: float = 3) -> str:
    "The StepTimer cost section, as markdown"
    from ddp_nb import DDPCluster
    with DDPCluster(n=2) as cl:
        width, ms = calibrate(cl, target_ms)
        steps = max(5, int(seconds * 1000 / ms))
        sps = {False: [], True: []}
        for r in range(rounds):
            for timed in ((False, True) if r % 2 == 0 else (True, False)):
                sps[timed].append(cl.run(timed_steps, width, steps, timed)[0])
    q = [t / p for p, t in zip(sps[False], sps[True])]
    rows = [[f"{1000 / med(sps[False]):.2f} ms (MLP width {width}, {steps} steps)", f"{med(sps[False]):.1f}", f"{med(sps[True]):.1f}",
             f"**{med(sps[True]) / med(sps[False]):.3f}**", f"{min(q):.3f}–{max(q):.3f}",
             'met' if med(sps[True]) / med(sps[False]) >= 0.98 else 'missed']]
    return ("### StepTimer cost: DDP steps with the per-step breakdown vs without\n\n"
            f"2 ranks, {rounds} alternating rounds, steps/s timed inside the ranks between barriers, medians. "
            "Timed: `timer.iter` + `timer.step` + `timer.optimizer`, the all-reduce comm hook, and a report per step.\n\n"
            + table(['step', 'plain steps/s', 'timed steps/s', 'ratio (goal ≥ 0.98)', 'per-round ratios', 'goal'], rows))


if __name__ == '__main__':
    from benchmarks.timing import run  # ranks get `timed_steps` by reference, not as __main__'s
    ap = argparse.ArgumentParser(); ap.add_argument('--rounds', type=int, default=7); ap.add_argument('--seconds', type=float, default=2)
    a = ap.parse_args(); print(run(a.rounds, a.seconds))
