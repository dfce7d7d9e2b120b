"""Memory and idle CPU: RSS of each engine after start and after training, against a bare Python process that imported
torch; the CPU an idle engine and the controller use each second, by kind of thread, against a bare process idling in
a gloo group.

    python -m benchmarks.memory"""
import select, socket, subprocess, sys, time
from benchmarks.common import med, table, thread_cpu

# a bare process in a gloo group of one, idle: what torch itself costs each second (gloo's loop)
BARE = ("import sys, time, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:' + sys.argv[1], rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(1)); print('ready', flush=True); time.sleep(300)")
KINDS = ("ddp_nb's threads", 'ipyparallel and ipykernel', "ZMQ's IO threads", "torch's (gloo)")


def _rss() -> int:
    import psutil
    return psutil.Process().memory_info().rss


def _train():
    from ddp_nb.digits import train
    return train(epochs=5)['digest']


def _threads():
    "This rank's process id, and its Python threads' names by native id"
    import os, threading
    return os.getpid(), {t.native_id: t.name for t in threading.enumerate()}


def _kind(comm: str, name: str | None) -> str:
    "Which of `KINDS` a thread is, by its Python name (None: not a Python thread) or its system name"
    if name and name.startswith('ddp_nb-'): return KINDS[0]
    if comm.startswith('ZMQbg'): return KINDS[2]
    if comm.startswith(('gloo', 'pt_')): return KINDS[3]
    return KINDS[1]


def idle_cpu(cl, secs: float = 10) -> dict:
    "CPU ms a second over `secs` s of idling: each engine's by kind of thread, the controller's, a bare gloo process's"
    import psutil
    from ddp_nb.compat_ipp import controller_process
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    bare = subprocess.Popen([sys.executable, '-c', BARE, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        ready = select.select([bare.stdout], [], [], 120)[0]  # (a child that hangs must not hang the benchmarks)
        assert ready and bare.stdout.readline().strip() == 'ready', "the bare gloo process did not start within 120 s"
        ranks = cl.run(_threads)
        time.sleep(3)   # (a rank's report thread goes quiet 2 s after its last report, its recorder 1 s after its last collective)
        tree = lambda pid: [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]  # (a nanny; schedulers)
        pids = ({f'rank {r}': tree(pid) for r, (pid, _) in enumerate(ranks)}
                | {'controller': tree(controller_process(cl._ipp).pid), 'bare': [bare.pid]})
        look = lambda: {k: {tid: v for p in ps for tid, v in thread_cpu(p).items()} for k, ps in pids.items()}
        a = look(); t = time.monotonic(); time.sleep(secs); b = look(); dt = time.monotonic() - t
    finally: bare.kill(); bare.wait()
    names = {f'rank {r}': nm for r, (_, nm) in enumerate(ranks)}
    out = {}
    for k in pids:
        d = out[k] = dict.fromkeys(KINDS, 0.)
        for tid, (comm, s) in b[k].items():
            d[_kind(comm, names.get(k, {}).get(tid))] += (s - a[k].get(tid, (comm, 0.))[1]) / dt * 1e3
    return out


def run(idle_s: float = 10) -> str:
    "The memory and idle-CPU section, as markdown"
    from ddp_nb import DDPCluster
    with DDPCluster(n=2) as cl:
        start = cl.run(_rss)
        cpu = idle_cpu(cl, idle_s)
        cl.run(_train)
        after = cl.run(_rss)
    bare = int(subprocess.run([sys.executable, '-c', 'import torch, psutil; print(psutil.Process().memory_info().rss)'],
                              capture_output=True, text=True, check=True, timeout=120).stdout)
    mb = lambda b: f"{b / 2**20:.0f} MB"
    rows = [['bare `python -c "import torch"`', mb(bare), '1.00'],
            ['ddp_nb engine after start (torch, process group, reporter)', mb(med(start)), f"{med(start) / bare:.2f}"],
            ['ddp_nb engine after 5 epochs of the digits job', mb(med(after)), f"{med(after) / bare:.2f}"]]
    engines = [cpu[k] for k in cpu if k.startswith('rank')]
    per = {k: med([e[k] for e in engines]) for k in KINDS}
    tot = lambda d: sum(d.values())
    cells = lambda d: [f"{tot(d):.1f}"] + [f"{d[k]:.1f}" for k in KINDS]
    crow = [['ddp_nb engine and its nanny, idle (median of 2)'] + cells(per),
            ['the controller and its schedulers (for both engines)'] + cells(cpu['controller']),
            ['bare process in a gloo group of one, idle'] + cells(cpu['bare'])]
    return ("### 6. Memory and idle CPU per rank (RSS, median over 2 ranks)\n\n"
            "An engine also has a nanny process (~40 MB) and the cluster one controller (~40 MB unshared).\n\n"
            + table(['process', 'RSS', 'ratio to bare torch'], rows)
            + f"\n\nCPU time each second of an idle cluster (no cell running, nothing reported; {idle_s:g} s, after 3 s "
            "idle), in ms, by kind of thread (per-thread CPU from `/proc/<pid>/task/*/schedstat`). The engine's event "
            "loop wakes at each heartbeat (every 0.1 s: an engine registers at its first beat); torch's gloo loop wakes "
            "every 10 ms in any process in a gloo group.\n\n"
            + table(['process', 'CPU ms/s', *KINDS], crow)
            + f"\n\nAn idle engine: **{tot(per):.1f} ms of CPU a second** ({tot(per) / 10:.2f}% of a core), "
            f"{tot(per) / max(tot(cpu['bare']), 1e-9):.1f}× a bare process in a gloo group.")


if __name__ == '__main__':
    print(run())
