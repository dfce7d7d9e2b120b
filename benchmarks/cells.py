"""Warm cells in a real Jupyter kernel: a trivial DDP cell (one all_reduce) from execute request to idle, on a live
ddp_nb cluster vs raw ipyparallel %%px (bare cluster + hand-written init) vs nbdistributed (if it is installed).

    python -m benchmarks.cells [--cells 30]"""
import argparse
from benchmarks.common import cell, med, table, ROOT
from ddp_nb.kernel import Kernel

CELL = "t = torch.ones(1); dist.all_reduce(t)"
SIDES = {
    'ddp_nb `%%px`': dict(
        setup=["from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()"],
        cell="%%px\n" + CELL, teardown="cl.stop()"),
    'raw ipyparallel `%%px`': dict(
        setup=["from benchmarks.startup import bare_start, bare_px\n_, c, rc = bare_start(2)\nbare_px(rc)"],
        cell="%%px\n" + CELL, teardown="rc.shutdown(hub=True, block=True); c.stop_cluster_sync()"),
    'nbdistributed `%%distributed`': dict(
        setup=["%load_ext nbdistributed", "%dist_init -n 2", "%%distributed\nimport torch, torch.distributed as dist"],
        cell="%%distributed\n" + CELL, teardown="%unload_ext nbdistributed", needs='nbdistributed'),   # graceful: `%dist_shutdown` runs
    # `pkill -f` on patterns ('worker.py', 'python.*worker', 'torch.*distributed') that end other programs' processes too
}


def run(cells: int = 30, rounds: int = 3) -> str:
    "The warm-cell section, as markdown"
    import importlib.util
    kernels, times, notes = {}, {k: [] for k in SIDES}, {}
    for name, s in SIDES.items():
        if s.get('needs') and importlib.util.find_spec(s['needs']) is None:
            notes[name] = f"not installed (`pip install {s['needs']}`)"; continue
        kernels[name] = k = Kernel(cwd=str(ROOT))   # as a user's kernel: %%px output streams
        try:
            for code in s['setup']: cell(k, code)
            cell(k, s['cell'])
        except Exception as e:
            notes[name] = f"failed: {str(e)[:120]}"
    try:
        for r in range(rounds):
            for name in [n for n in SIDES if n in kernels and n not in notes]:
                for _ in range(max(1, cells // rounds)): times[name].append(cell(kernels[name], SIDES[name]['cell'])[0])
    finally:
        for name, k in kernels.items():
            try: cell(k, SIDES[name]['teardown'], timeout=60)
            except Exception: pass
            k.close()
    raw = med(times['raw ipyparallel `%%px`'])
    rows = []
    for name in SIDES:
        if name in notes: rows.append([name, notes[name], '', '']); continue
        m = med(times[name])
        goal = ' (goal ≤ 1.2)' if name.startswith('ddp_nb') else ''
        rows.append([name, f"{m * 1e3:.1f} ms", f"{m / raw:.2f}{goal}", len(times[name])])
    return ("### 2. Warm cell: one all_reduce, timed in a real kernel from execute request to idle\n\n"
            f"Three kernels, each with its own 2-rank cluster, started as a user's (no IPP_NONINTERACTIVE: `%%px` output streams); {rounds} alternating rounds, medians.\n\n"
            + table(['side', 'median', 'ratio to raw `%%px`', 'cells'], rows))


if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--cells', type=int, default=30); a = ap.parse_args()
    print(run(a.cells))
