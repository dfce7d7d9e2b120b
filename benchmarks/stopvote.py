"""The price of cooperative interrupts: a training loop over a ShardedLoader with its per-batch stop vote (one
asynchronous all-reduce of one float on a side gloo group) vs the same loader with `stoppable=False`.

    python -m benchmarks.stopvote [--rounds 5] [--seconds 3]"""
import argparse
from ddp_nb import DDPCluster
from benchmarks.common import med, table
from benchmarks.throughput import calibrate
from benchmarks.workload import loader_steps


def run(rounds=5, seconds=3.0, targets=(3, 30)):
    "The stop-vote section, as markdown"
    rows = []
    with DDPCluster(n=2) as cl:
        for target in targets:
            width, ms = calibrate(cl, target)
            steps = max(20, int(seconds * 1000 / ms))
            t = {True: [], False: []}
            for r in range(rounds):
                for side in ((False, True) if r % 2 == 0 else (True, False)):
                    t[side].append(min(x['sps'] for x in cl.run(loader_steps, width, steps, side)))
            off, on = med(t[False]), med(t[True])
            rows.append([f"{ms:.1f} ms (MLP width {width})", f"{off:.1f}", f"{on:.1f}", f"{on / off:.3f}"])
            print(f"stopvote ~{target} ms: {rows[-1]}", flush=True)
    return ("### 8. Cooperative interrupts: the per-batch stop vote\n\n"
            f"2 gloo ranks, a loop over a `ShardedLoader`, {rounds} alternating rounds of {seconds:g} s, medians of steps/s.\n\n"
            + table(['step time', 'steps/s, stoppable=False', 'stoppable=True (default)', 'ratio (goal ≥ 0.98)'], rows))


if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--rounds', type=int, default=5); ap.add_argument('--seconds', type=float, default=3)
    a = ap.parse_args()
    print(run(a.rounds, a.seconds))
