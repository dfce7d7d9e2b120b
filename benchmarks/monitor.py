"""Monitoring overhead: DDP training throughput with `report` every step vs without, and with the dashboard drawing.

    python -m benchmarks.monitor [--rounds 5] [--seconds 3]

Two gloo ranks train an MLP sized for ~3 ms and ~30 ms steps on this machine. Each round runs every side once, in
rotating order; the table gives median throughput ratios (on / off) and the report-to-dashboard latency."""
import argparse, time
from ddp_nb import DDPCluster
from benchmarks.common import med, table
from benchmarks.throughput import calibrate
from benchmarks.workload import mlp_steps


def run(rounds=5, seconds=3.0):
    "The monitoring-overhead section, as markdown"
    rows = []
    with DDPCluster(n=2) as cl:
        for target in (3, 30):
            width, ms = calibrate(cl, target)
            steps = max(20, int(seconds * 1000 / ms))
            t, lat, sides = {k: [] for k in ('off', 'on', 'dash')}, [], ['off', 'on', 'dash']
            for r in range(rounds):
                for side in sides[r % 3:] + sides[:r % 3]:
                    d = cl.dashboard(mode='widget') if side == 'dash' else None  # default redraw rate
                    t[side].append(min(r['sps'] for r in cl.run(mlp_steps, width, steps, 0, 3, side != 'off')))
                    if d is not None: time.sleep(0.3); lat += list(d.latencies); d.close()
            m = {k: med(v) for k, v in t.items()}
            l = f"{med(lat):.2f} s / {max(lat):.2f} s" if lat else 'n/a'
            rows.append([f"{ms:.1f} ms (MLP width {width})", f"{m['off']:.1f}", f"{m['on']:.1f}", f"{m['on'] / m['off']:.3f}",
                         f"{m['dash']:.1f}", f"{m['dash'] / m['off']:.3f}", l])
            print(f"monitor ~{target} ms: {rows[-1]}", flush=True)
    return ("### 5. Monitoring overhead: `report()` every step, and the dashboard drawing\n\n"
            f"2 gloo ranks, {rounds} rotating rounds of {seconds:g} s, medians of steps/s. The dashboard draws in this process, "
            "which shares the machine's cores with both ranks. `report` itself costs about a microsecond: differences in "
            "its column are noise.\n\n"
            + table(['step time', 'steps/s, no report', 'report every step', 'ratio (goal ≥ 0.98)', '+ dashboard drawing',
                     'ratio (goal ≥ 0.95)', 'report → widget latency, median / max (goal ≤ 0.5 s)'], rows))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--seconds', type=float, default=3.0, help='target length of one timed run')
    a = ap.parse_args(argv)
    print(run(a.rounds, a.seconds))


if __name__ == '__main__':
    main()
