"""Monitoring overhead: DDP training throughput with `report` every step vs without, and with the dashboard drawing.

    python -m benchmarks.monitor [--rounds 5] [--out benchmarks/monitor.md]

Two gloo ranks train an MLP sized for ~3 ms and ~30 ms steps on this machine. Each round runs every side once, in
rotating order; the table gives median throughput ratios (on / off) and the report-to-dashboard latency."""
import argparse, os, statistics, tempfile, time
from pathlib import Path

os.environ.setdefault('IPYTHONDIR', tempfile.mkdtemp(prefix='ddp_nb-bench-ipython-'))
from ddp_nb import DDPCluster
from benchmarks.startup import machine


def _train(width, steps, mode):
    "On every rank: `steps` DDP steps of an MLP; report each step when mode != 'off'; returns seconds"
    import time, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_nb.report import report
    torch.manual_seed(0)
    m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x, y = torch.randn(64, width), torch.randint(0, 10, (64,))
    def step():
        loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step(); return loss
    for _ in range(5): step()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step()
        if mode != 'off': report(step=i, loss=loss.detach())
    dist.barrier()
    return time.perf_counter() - t0


def calibrate(cl, target_ms, widths=(64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072)):
    "The width whose step time is closest to `target_ms`, and that step time"
    best = None
    for w in widths:
        ms = max(cl.run(_train, w, 20, 'off')) / 20 * 1e3
        if best is None or abs(ms - target_ms) < abs(best[1] - target_ms): best = (w, ms)
        if ms > target_ms * 1.5: break
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--seconds', type=float, default=1.5, help='target length of one timed run')
    ap.add_argument('--out', default=str(Path(__file__).parent / 'monitor.md'))
    a = ap.parse_args(argv)
    rows = []
    with DDPCluster(n=2) as cl:
        for target in (3, 30):
            width, ms = calibrate(cl, target)
            steps = max(20, int(a.seconds * 1000 / ms))
            t = {k: [] for k in ('off', 'on', 'dash')}
            lat = []
            sides = ['off', 'on', 'dash']
            for r in range(a.rounds):
                for side in sides[r % 3:] + sides[:r % 3]:
                    d = cl.dashboard(mode='widget') if side == 'dash' else None  # default redraw rate
                    t[side].append(steps / max(cl.run(_train, width, steps, side)))
                    if d is not None: time.sleep(0.3); lat += list(d.latencies); d.close()
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append((target, width, ms, steps, med, lat))
            print(f"~{target} ms steps (width {width}, {ms:.1f} ms): {med}", flush=True)
    lines = [f"Machine: {machine()}  ",
             f"2 gloo ranks, {a.rounds} rotating rounds, medians of steps/s. Command: `python -m benchmarks.monitor --rounds {a.rounds} --seconds {a.seconds:g}`", '',
             '| step time | steps/s, no report | report every step | ratio (goal ≥ 0.98) | + dashboard drawing | ratio (goal ≥ 0.95) | report → widget latency, median / max (goal ≤ 0.5 s) |',
             '|---|---|---|---|---|---|---|']
    for target, width, ms, steps, med, lat in rows:
        l = f"{statistics.median(lat):.2f} s / {max(lat):.2f} s" if lat else 'n/a'
        lines.append(f"| {ms:.1f} ms (MLP width {width}) | {med['off']:.1f} | {med['on']:.1f} | {med['on']/med['off']:.3f} | "
                     f"{med['dash']:.1f} | {med['dash']/med['off']:.3f} | {l} |")
    text = '\n'.join(lines) + '\n'
    Path(a.out).write_text(text)
    print(text)


if __name__ == '__main__':
    main()
