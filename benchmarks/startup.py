"""Start-up and warm-cell benchmark: ddp_nb vs a bare ipyparallel cluster with a hand-written process group.

    python -m benchmarks.startup [--rounds 5] [--n 2] [--out benchmarks/results.md]

Both sides use the same controller settings and run alternately in the same run; medians and ratios are reported
(only ratios carry across machines and runs). "Ready" means the process group is formed and checked by an all-reduce."""
import argparse, logging, os, platform, socket, statistics, sys, tempfile, time
from pathlib import Path

os.environ.setdefault('IPP_NONINTERACTIVE', '1')
os.environ.setdefault('IPYTHONDIR', tempfile.mkdtemp(prefix='ddp_nb-bench-ipython-'))
import ipyparallel as ipp
from IPython.core.interactiveshell import InteractiveShell
from ddp_nb import DDPCluster


def _hand_init(rank, world_size, port):
    "What a user writes by hand on each engine: torchrun env, threads, init_process_group, a check"
    import os, torch, torch.distributed as dist
    from datetime import timedelta
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=str(port), GLOO_SOCKET_IFNAME='lo')
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
    dist.init_process_group('gloo', timeout=timedelta(seconds=60))
    t = torch.ones(1); dist.all_reduce(t)
    return t.item()


def bare_start(n):
    "Bare ipp.Cluster (same controller settings as DDPCluster) + hand-written process group; returns (seconds, cluster, client)"
    t0 = time.perf_counter()
    c = ipp.Cluster(n=n, delay=0, log_level=logging.ERROR,
                    controller_args=['--HeartMonitor.period=200', '--HeartMonitor.max_heartmonitor_misses=50'])
    rc = c.start_and_connect_sync()
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]  # the racy way people do it
    ars = [rc[i].apply_async(_hand_init, r, n, port) for r, i in enumerate(sorted(rc.ids))]
    assert [a.get(timeout=120) for a in ars] == [float(n)] * n
    return time.perf_counter() - t0, c, rc


def ddp_start(n):
    "DDPCluster(n).start(); returns (seconds, cluster)"
    t0 = time.perf_counter()
    cl = DDPCluster(n=n).start()
    return time.perf_counter() - t0, cl


def cell_times(run, k):
    "Seconds for each of k runs of `run`"
    out = []
    for _ in range(k):
        t = time.perf_counter(); run(); out.append(time.perf_counter() - t)
    return out


def machine():
    "One line describing this machine"
    import torch, ipyparallel
    return (f"{platform.node()}: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, ipyparallel {ipyparallel.__version__}, GPUs: {torch.cuda.device_count()}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--n', type=int, default=2)
    ap.add_argument('--cells', type=int, default=30, help='warm cell runs per round')
    ap.add_argument('--out', default=str(Path(__file__).parent / 'results.md'))
    a = ap.parse_args(argv)
    ip = InteractiveShell.instance()
    S = {k: [] for k in ('ddp', 'bare', 'ddp_cell', 'bare_cell')}
    for r in range(a.rounds):
        for side in (('ddp', 'bare') if r % 2 == 0 else ('bare', 'ddp')):
            if side == 'ddp':
                t, cl = ddp_start(a.n)
                S['ddp'].append(t)
                S['ddp_cell'] += cell_times(lambda: ip.run_cell_magic('px', '', 't = torch.ones(1); dist.all_reduce(t)'), a.cells)
                cl.stop()
            else:
                t, c, rc = bare_start(a.n)
                S['bare'].append(t)
                v = rc[:]; v.block = True; v.activate()
                v.execute('import torch, torch.distributed as dist')
                S['bare_cell'] += cell_times(lambda: ip.run_cell_magic('px', '', 't = torch.ones(1); dist.all_reduce(t)'), a.cells)
                rc.shutdown(hub=True, block=True); c.stop_cluster_sync(); rc.close()
            print(f"round {r+1}/{a.rounds} {side}: ready in {t:.2f}s", flush=True)
    med = {k: statistics.median(v) for k, v in S.items()}
    rows = [('start to process-group ready', f"{med['ddp']:.2f} s", f"{med['bare']:.2f} s", med['ddp'] / med['bare'], '≤ 1.0'),
            ('warm `%%px` all-reduce cell', f"{med['ddp_cell']*1e3:.1f} ms", f"{med['bare_cell']*1e3:.1f} ms", med['ddp_cell'] / med['bare_cell'], '≤ 1.2')]
    lines = [f"Machine: {machine()}  ",
             f"World size {a.n} (gloo), {a.rounds} alternating rounds, {a.cells} cells per round, medians. "
             f"Command: `python -m benchmarks.startup --rounds {a.rounds} --n {a.n}`", '',
             '| measure | ddp_nb | bare ipyparallel + hand-written init | ratio | goal |', '|---|---|---|---|---|']
    lines += [f"| {m} | {x} | {y} | {q:.2f} | {g} |" for m, x, y, q, g in rows]
    text = '\n'.join(lines) + '\n'
    Path(a.out).write_text(text)
    print(text)
    return med


if __name__ == '__main__':
    main()
