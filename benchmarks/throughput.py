"""Training throughput: ddp_nb's ranks vs torchrun's workers, same code, seeds and threads, steps of ~3, ~30, ~300 ms.

    python -m benchmarks.throughput [--rounds 3] [--seconds 3]"""
import argparse, json, os, subprocess, tempfile
from benchmarks.common import med, table, torchrun_cmd, ROOT
from benchmarks.workload import mlp_steps

WIDTHS = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 3584, 4096, 6144)


def calibrate(cl, target_ms: float) -> tuple:
    "(width, ms) of the MLP whose step time on this cluster is closest to `target_ms`"
    best = None
    for w in WIDTHS:
        n = max(3, min(20, int(200 / max(target_ms, 1))))
        ms = 1000 / cl.run(mlp_steps, w, n, 0, 1)[0]['sps']
        if best is None or abs(ms - target_ms) < abs(best[1] - target_ms): best = (w, ms)
        if ms > target_ms * 1.5: break
    return best


def torchrun_side(width: int, steps: int, threads: int) -> dict:
    "One torchrun launch of the same workload; its steps/s (timed inside the workers) and digest"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'r.json')
        subprocess.run(torchrun_cmd(2, 'benchmarks.workload', 'mlp', '--width', width, '--steps', steps, '--out', out),
                       check=True, cwd=ROOT, capture_output=True, timeout=600, env={**os.environ, 'OMP_NUM_THREADS': str(threads)})
        return json.load(open(out))


def run(rounds: int = 3, seconds: float = 3, targets=(3, 30, 300)) -> str:
    "The throughput section, as markdown"
    from ddp_nb import DDPCluster
    rows = []
    with DDPCluster(n=2) as cl:
        threads = cl.view['torch.get_num_threads()'][0]
        for target in targets:
            width, ms = calibrate(cl, target)
            steps = max(5, int(seconds * 1000 / ms))
            ours, theirs, same = [], [], True
            for r in range(rounds):
                for side in (('ddp_nb', 'torchrun') if r % 2 == 0 else ('torchrun', 'ddp_nb')):
                    if side == 'ddp_nb': a = cl.run(mlp_steps, width, steps)[0]; ours.append(a['sps'])
                    else: b = torchrun_side(width, steps, threads); theirs.append(b['sps'])
                same &= a['digest'] == b['digest']
            q = med(ours) / med(theirs)
            rows.append([f"{1000 / med(ours):.1f} ms (MLP width {width}, {steps} steps)", f"{med(ours):.1f}", f"{med(theirs):.1f}",
                         f"**{q:.3f}**" + ('' if q >= 0.98 else ' (missed)'), 'yes' if same else '**no**'])
            print(f"throughput ~{target} ms: {rows[-1]}", flush=True)
    return ("### 1. Training throughput: ddp_nb vs `torchrun --nproc_per_node=2`\n\n"
            f"Same MLP, data, seeds and threads ({threads} per rank); steps/s timed inside the ranks between barriers "
            f"(launch time excluded), {rounds} alternating rounds, medians.\n\n"
            + table(['step', 'ddp_nb steps/s', 'torchrun steps/s', 'ratio (goal ≥ 0.98)', 'bit-identical weights'], rows))


if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--rounds', type=int, default=3); ap.add_argument('--seconds', type=float, default=3)
    a = ap.parse_args(); print(run(a.rounds, a.seconds))
