"""Start-up and warm-cell benchmark: ddp_nb vs a bare ipyparallel cluster with a hand-written process group.

    python -m benchmarks.startup [--rounds 5] [--n 2]

Both sides use the same controller settings and run alternately in the same run; medians and ratios are reported
(only ratios carry across machines and runs). "Ready" means the process group is formed and checked by an all-reduce."""
import argparse, logging, os, socket, subprocess, time
import ipyparallel as ipp
from IPython.core.interactiveshell import InteractiveShell
from ddp_nb import DDPCluster
from benchmarks.common import med, table, torchrun_cmd, ROOT


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
                    controller_args=['--HeartMonitor.period=100', '--HeartMonitor.max_heartmonitor_misses=100'])
    rc = c.start_and_connect_sync()
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]  # the racy way people do it
    ars = [rc[i].apply_async(_hand_init, r, n, port) for r, i in enumerate(sorted(rc.ids))]
    assert [a.get(timeout=120) for a in ars] == [float(n)] * n
    return time.perf_counter() - t0, c, rc


def bare_px(rc):
    "Activate `%%px` on all of a bare cluster's engines, with torch and dist imported there"
    v = rc[:]; v.block = True; v.activate()
    v.execute('import torch, torch.distributed as dist')
    return v


def ddp_start(n, fork_server=None):
    "DDPCluster(n).start(); returns (seconds, cluster); the cluster's `start_phases` say where the time went"
    t0 = time.perf_counter()
    cl = DDPCluster(n=n, fork_server=fork_server).start()
    return time.perf_counter() - t0, cl


def replace_rank(cl, ip):
    "Seconds from `kill -9` of the last rank's engine to a replaced rank serving a cell again (`cl.restart()`, one all-reduce)"
    import contextlib, io, signal
    os.kill(cl._ranks.plan[-1].pid, signal.SIGKILL)
    deadline = time.monotonic() + 30  # as a user restarts: once the rank is seen dead
    while not cl._ranks.gone() and time.monotonic() < deadline: time.sleep(0.01)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()): cl.restart()
    ip.run_cell_magic('px', '', 't = torch.ones(1); dist.all_reduce(t)')
    return time.perf_counter() - t0


def phase_table(traces: list) -> str:
    "Median seconds of each start phase over `traces` (a start's `cl.start_phases.items` each), as markdown"
    names = list(dict.fromkeys(n for t in traces for n, _ in t))
    per = {n: [dict(t).get(n, 0.) for t in traces] for n in names}
    total = med([sum(s for _, s in t) for t in traces])
    return table(['phase', 'median', 'share'], [[n, f"{med(v):.2f} s", f"{med(v) / total:.0%}"] for n, v in per.items()]
                 + [['**total**', f"**{total:.2f} s**", '']])


def cell_times(run, k):
    "Seconds for each of k runs of `run`"
    out = []
    for _ in range(k):
        t = time.perf_counter(); run(); out.append(time.perf_counter() - t)
    return out


def torchrun_trivial(n):
    "Seconds for a trivial torchrun job: launch, form the group, one all_reduce, exit"
    t0 = time.perf_counter()
    subprocess.run(torchrun_cmd(n, 'benchmarks.workload', 'trivial'), check=True, cwd=ROOT, capture_output=True, timeout=300,
                   env={**os.environ, 'OMP_NUM_THREADS': '1'})
    return time.perf_counter() - t0


def run(rounds=5, n=2, cells=30):
    "The start-up section (and the in-process warm cell), as markdown"
    ip = InteractiveShell.instance()
    S = {k: [] for k in ('ddp', 'popen', 'bare', 'torchrun', 'ddp_cell', 'bare_cell', 'phases', 'popen_phases',
                         'replace', 'popen_replace')}
    sides = ['ddp', 'popen', 'bare', 'torchrun']
    for r in range(rounds):
        for side in sides[r % 4:] + sides[:r % 4]:
            if side in ('ddp', 'popen'):  # local engines forked from the fork server, or each a new Python (Popen)
                t, cl = ddp_start(n, fork_server=side == 'ddp')
                S['phases' if side == 'ddp' else 'popen_phases'].append(cl.start_phases.items)
                if side == 'ddp':
                    S['ddp_cell'] += cell_times(lambda: ip.run_cell_magic('px', '', 't = torch.ones(1); dist.all_reduce(t)'), cells)
                S['replace' if side == 'ddp' else 'popen_replace'].append(replace_rank(cl, ip))
                cl.stop()
            elif side == 'bare':
                t, c, rc = bare_start(n)
                bare_px(rc)
                S['bare_cell'] += cell_times(lambda: ip.run_cell_magic('px', '', 't = torch.ones(1); dist.all_reduce(t)'), cells)
                rc.shutdown(hub=True, block=True); c.stop_cluster_sync(); rc.close()
            else: t = torchrun_trivial(n)
            S[side].append(t)
            print(f"round {r+1}/{rounds} {side}: ready in {t:.2f}s", flush=True)
    m = {k: med(v) for k, v in S.items() if 'phases' not in k}
    rows = [['`DDPCluster(n=2, fork_server=True).start()`', f"{m['ddp']:.2f} s", '1.00', ''],
            ['the same, `fork_server=False` (each engine a new Python, as before)', f"{m['popen']:.2f} s",
             f"{m['ddp'] / m['popen']:.2f}", 'ddp_nb ≤ 1.0' + (' ✓' if m['ddp'] <= m['popen'] else ' (missed)')],
            ['bare `ipp.Cluster(n=2)` (same controller settings) + hand-written `init_process_group`', f"{m['bare']:.2f} s",
             f"{m['ddp'] / m['bare']:.2f}", 'ddp_nb ≤ 1.0' + (' ✓' if m['ddp'] <= m['bare'] else ' (missed)')],
            ['trivial `torchrun --standalone` job (launch, group, all_reduce, exit)', f"{m['torchrun']:.2f} s",
             f"{m['ddp'] / m['torchrun']:.2f}", 'stretch: ddp_nb ≤ 1.0' + (' ✓' if m['ddp'] <= m['torchrun'] else ' (missed)')]]
    cell = [['ddp_nb `%%px`', f"{m['ddp_cell'] * 1e3:.1f} ms", f"{m['ddp_cell'] / m['bare_cell']:.2f}", '≤ 1.2'],
            ['raw ipyparallel `%%px`', f"{m['bare_cell'] * 1e3:.1f} ms", '1.00', '']]
    return (f"### 4. Start-up: until the process group is formed and checked ({n} ranks)\n\n"
            f"{rounds} rotating rounds, medians.\n\n"
            + table(['side', 'median', 'ddp_nb / side', 'goal'], rows)
            + "\n\nWhere `DDPCluster(n=2, fork_server=True).start()` spends its time (`cl.start_phases`, medians): the fork server "
              "is started first, and imports ipyparallel's engine, then torch, once, while the kernel makes "
              "ipyparallel's Cluster (*set-up*); *controller* waits for the server to fork it, between its two imports, "
              "and for its start (it imports its own app, beside the server's torch import); "
              "then the kernel imports what its first calls to the engines need (*client imports*); "
              "*engines launched* waits for the server's imports, then its forks; "
              "*registration* is the forked engines' own start until the controller has them (at their first heartbeat); "
              "the rest is the first calls: the engines' facts, the dashboard's collector, the process group (each rank "
              "connecting to the collector as it joins), the cell route.\n\n"
            + phase_table(S['phases'])
            + "\n\nThe same with `fork_server=False` (each engine a new Python, its torch imported in the background):\n\n"
            + phase_table(S['popen_phases'])
            + "\n\nA replaced rank: `kill -9` of one engine, then `cl.restart()` and a cell with one all-reduce (medians):\n\n"
            + table(['side', 'median', 'goal'], [['fork server', f"{m['replace']:.2f} s", '≤ 0.5 s'
                                                  + (' ✓' if m['replace'] <= 0.5 else ' (missed)')],
                                                 ['`fork_server=False`', f"{m['popen_replace']:.2f} s", '']])
            + f"\n\nThe same clusters' warm all-reduce `%%px` cell, run in-process by IPython ({cells} cells a round):\n\n"
            + table(['side', 'median', 'ratio', 'goal'], cell))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--n', type=int, default=2)
    ap.add_argument('--cells', type=int, default=30, help='warm cell runs per round')
    a = ap.parse_args(argv)
    print(run(a.rounds, a.n, a.cells))


if __name__ == '__main__':
    main()
