"""Iteration with state: change the learning rate and run 10 training steps of the digits model.

On a live ddp_nb cluster the model and data are already built on every rank; a launcher (fork, spawn, torchrun)
must start processes, form a process group and rebuild model and data on every launch.

    python -m benchmarks.iteration [--repeats 5]
    python -m benchmarks.iteration --launcher fork|spawn --repeats 5   (prints one JSON list of seconds)"""
import argparse, json, os, socket, subprocess, sys, time
from benchmarks.common import med, table, torchrun_cmd, ROOT


def _worker(rank: int, world: int, port: int, lr: float):
    "One launched rank: process group from the environment, build the job, 10 steps"
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=str(port), OMP_NUM_THREADS='1')
    import torch.distributed as dist
    from benchmarks.workload import _init, fresh_iteration
    _init(); fresh_iteration(lr)
    from ddp_nb.digits import job_end
    job_end(); dist.destroy_process_group()  # the DDP model first: alive, it pins the group and a gloo thread can abort the exit


def _port() -> int:
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def launcher_times(method: str, repeats: int) -> list:
    "Seconds for each of `repeats` launches with torch.multiprocessing's `method` (in this fresh process)"
    import torch.multiprocessing as mp
    import ddp_nb.digits  # imported before forking, as a notebook would have it: fork children inherit it
    ts = []
    for i in range(repeats):
        t0 = time.perf_counter()
        mp.start_processes(_worker, args=(2, _port(), 0.05 + i * 1e-3), nprocs=2, start_method=method, join=True)
        ts.append(time.perf_counter() - t0)
    return ts


def run(repeats: int = 5) -> str:
    "The iteration section, as markdown"
    from ddp_nb import DDPCluster
    from benchmarks.workload import fresh_iteration, digits_iteration
    t = {}
    with DDPCluster(n=2) as cl:
        cl.run(fresh_iteration, 0.05)  # built once, as in a notebook
        t['ddp_nb (live cluster)'] = []
        for i in range(repeats):
            t0 = time.perf_counter(); cl.run(digits_iteration, 0.05 + i * 1e-3); t['ddp_nb (live cluster)'].append(time.perf_counter() - t0)
    for m in ('fork', 'spawn'):
        r = subprocess.run([sys.executable, '-m', 'benchmarks.iteration', '--launcher', m, '--repeats', str(repeats)],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
        t[f'torch.multiprocessing {m}'] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else r.stderr[-200:]
    t['torchrun --standalone'] = []
    for i in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run(torchrun_cmd(2, 'benchmarks.workload', 'iterate', '--lr', 0.05 + i * 1e-3), cwd=ROOT,
                           capture_output=True, text=True, timeout=600, env={**os.environ, 'OMP_NUM_THREADS': '1'})
        if r.returncode: raise RuntimeError(f"torchrun failed (exit {r.returncode}); its output ends with:\n{(r.stdout + r.stderr)[-3000:]}")
        t['torchrun --standalone'].append(time.perf_counter() - t0)
    ours = med(t['ddp_nb (live cluster)'])
    goals = {'torch.multiprocessing fork': '> 1', 'torch.multiprocessing spawn': '≥ 20', 'torchrun --standalone': '≥ 40'}
    rows = []
    for k, v in t.items():
        if isinstance(v, str): rows.append([k, f'failed: {v}', '', '']); continue
        q = med(v) / ours
        g = goals.get(k)
        ok = '' if g is None else (' ✓' if q > float(g.split()[-1]) else ' (missed)')
        rows.append([k, f"{med(v) * 1e3:.0f} ms", '1' if g is None else f"{q:.1f}×", f"{g}{ok}" if g else ''])
    return ("### 3. Iteration with state: new learning rate + 10 training steps of the digits model, 2 ranks\n\n"
            f"Wall time from the caller, median of {repeats}. ddp_nb reuses the model, optimizer and loader built on its ranks; "
            "each launcher starts processes, forms a process group and rebuilds them every time (fork children inherit the "
            "imported torch and ddp_nb).\n\n"
            + table(['side', 'median', 'slower than ddp_nb by', 'goal'], rows))


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--launcher', choices=['fork', 'spawn'], default=None)
    a = ap.parse_args()
    if a.launcher: print(json.dumps(launcher_times(a.launcher, a.repeats)))
    else: print(run(a.repeats))
