"""GPU step time: a ddp_nb rank vs `torchrun --nproc_per_node=1`, the same DDP-wrapped MLP on the same GPU (nccl).

    python -m benchmarks.gpu [--rounds 3] [--windows 60] [--window-s 0.05] [--out FILE]      # "no GPU" where there is none
    python -m benchmarks.gpu --configs 0 --no-timer                        # the launch-bound row alone
    python -m benchmarks.gpu --explain [--out FILE] [--trace-dir DIR]      # where the smallest step's time goes, each side
    as a torchrun worker: python -m benchmarks.gpu --pair-worker | --worker --explain --out FILE [--trace FILE]
BENCH_GPU_REHEARSAL=1 runs it on CPU ranks (gloo), to check the code where there is no GPU."""
import argparse, gzip, json, os, subprocess, sys, tempfile, time
from pathlib import Path
from benchmarks.common import med, table, thread_cpu, torchrun_cmd, machine, ROOT

# (MLP width, batch): from launch-bound (the Python and kernel-launch cost of a step shows) to compute-bound
CONFIGS = ((1024, 64), (4096, 1024), (8192, 4096))
HEAD = "### 7. GPU: ddp_nb vs `torchrun --nproc_per_node=1`"


def timed_steps(width: int = 4096, batch: int = 768, blocks: int = 20, steps: int = 50, seed: int = 0) -> dict:
    "On a CUDA rank: alternating blocks of plain and StepTimer-timed DDP steps (CUDA events, a report per step); each block's wall ms per step"
    import time, torch, torch.nn as nn, torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddp_nb.timing import StepTimer
    dev = torch.device('cuda', torch.cuda.current_device())
    def build():
        torch.manual_seed(seed)
        m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(dev),
                device_ids=[dev.index])
        return m, torch.optim.SGD(m.parameters(), lr=1e-3)
    (m1, o1), (m2, o2) = build(), build()
    x, y = torch.randn(batch, width, device=dev), torch.randint(0, 10, (batch,), device=dev)
    timer = StepTimer(m2)
    def plain(n):
        for _ in range(n):
            loss = F.cross_entropy(m1(x), y); o1.zero_grad(set_to_none=True); loss.backward(); o1.step()
    def timed(n):
        for i, (xb, yb) in enumerate(timer.iter([(x, y)] * n)):
            with timer.step(i):
                loss = F.cross_entropy(m2(xb), yb); o2.zero_grad(set_to_none=True); loss.backward()
                with timer.optimizer(): o2.step()
    def clock(f):
        torch.cuda.synchronize(dev); t = time.perf_counter(); f(steps); torch.cuda.synchronize(dev)
        return (time.perf_counter() - t) / steps * 1e3
    plain(10); timed(10)
    pairs = [(clock(plain), clock(timed)) if i % 2 == 0 else tuple(reversed((clock(timed), clock(plain)))) for i in range(blocks)]
    timer.flush()
    last = dict(timer.steps[-1][1]) if timer.steps else {}
    return dict(width=width, batch=batch, steps=steps, pairs=pairs, kept=len(timer.steps), clock=timer.clock.kind, last=last)


def worker_result(how: str, cmd: list, env: dict) -> object:
    "Run a worker command `cmd` (its `--out` placeholder OUT filled in) with `env`; what it wrote there, or an error with its output"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'r.json')
        r = subprocess.run([out if a == 'OUT' else a for a in cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        if r.returncode: raise RuntimeError(f"{how} failed ({r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
        return json.load(open(out))


# ---- paired windows: both sides alive at once, taking turns on the GPU
_PAIR = {}   # on a rank (ddp_nb engine or torchrun worker): the model, optimizer and batch pair_window steps


def mlp_step(width: int, batch: int, seed: int = 0) -> tuple:
    "On a rank: a DDP-wrapped 3-layer MLP, its SGD and one batch on the rank's device; (step function, model, device)"
    import time, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    cuda = torch.cuda.is_available()   # False only in the CPU rehearsal (BENCH_GPU_REHEARSAL=1), which checks this code
    dev = torch.device('cuda', torch.cuda.current_device()) if cuda else torch.device('cpu')
    torch.manual_seed(seed)
    m = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to(dev),
            device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(seed + dist.get_rank())
    x, y = torch.randn(batch, width, device=dev, generator=g), torch.randint(0, 10, (batch,), device=dev, generator=g)
    def step(phases: dict | None = None):   # phases: add each phase's CPU wall time there (no sync)
        t = time.perf_counter(); loss = F.cross_entropy(m(x), y); t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True); loss.backward(); t2 = time.perf_counter(); opt.step()
        if phases is not None:
            phases['forward'] += t1 - t; phases['backward'] += t2 - t1; phases['optimizer'] += time.perf_counter() - t2
    return step, m, dev


def pair_build(width: int, batch: int, seed: int = 0) -> dict:
    "On a rank: build a config's model (`mlp_step`), keep it for pair_window; the weights digest after 10 steps"
    import hashlib, torch
    _PAIR.clear()
    if torch.cuda.is_available(): torch.cuda.empty_cache()
    step, m, dev = mlp_step(width, batch, seed)
    for _ in range(10): step()
    h = hashlib.sha256()
    for p in m.module.parameters(): h.update(p.detach().cpu().numpy().tobytes())
    _PAIR.update(step=step, dev=dev, cuda=dev.type == 'cuda')
    pair_window(40)   # warm-up
    return dict(digest=h.hexdigest(), step_ms=pair_window(5)[0])


def pair_window(steps: int) -> list:
    "On a rank: `steps` steps of the kept model; [ms per step by CUDA events (wall time in the CPU rehearsal), the process's CPU ms per step]"
    import time, torch
    step, dev = _PAIR['step'], _PAIR['dev']
    if not _PAIR['cuda']:
        t, c = time.perf_counter(), time.process_time()
        for _ in range(steps): step()
        return [(time.perf_counter() - t) / steps * 1e3, (time.process_time() - c) / steps * 1e3]
    torch.cuda.synchronize(dev)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    c = time.process_time()   # every thread of the rank: Python's, autograd's, nccl's, ddp_nb's and the engine's
    a.record()
    for _ in range(steps): step()
    b.record(); b.synchronize()
    return [a.elapsed_time(b) / steps, (time.process_time() - c) / steps * 1e3]


def worker_group():
    "In a torchrun (or bare) worker: nccl on its LOCAL_RANK's GPU, gloo in the CPU rehearsal"
    import torch, torch.distributed as dist
    from datetime import timedelta
    if torch.cuda.is_available():
        dev = torch.device('cuda', int(os.environ.get('LOCAL_RANK', 0)))
        torch.cuda.set_device(dev)
        dist.init_process_group('nccl', timeout=timedelta(seconds=120), device_id=dev)
    else: dist.init_process_group('gloo', timeout=timedelta(seconds=120))


def pair_worker():
    "A torchrun worker serving the driver: a JSON request a line on stdin (build or window), a 'PAIR <json>' line back"
    import torch.distributed as dist
    worker_group()
    try:
        for line in sys.stdin:
            q = json.loads(line)
            r = pair_build(*q['build']) if 'build' in q else pair_window(q['window'])
            print('PAIR ' + json.dumps(r), flush=True)
    finally: dist.destroy_process_group()


class TorchrunSide:
    "A live `torchrun --nproc_per_node=1` worker (pair_worker) answering build and window requests, each within a deadline"
    def __init__(self):
        import queue, threading
        self.p = subprocess.Popen(torchrun_cmd(1, 'benchmarks.gpu', '--pair-worker'), cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.q, self.lines = queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith('PAIR '): self.q.put(json.loads(line[5:]))
            else: self.lines.append(line)
        self.q.put(None)

    def ask(self, timeout: float = 120, **req) -> object:
        "Send one request; its answer, or an error with the worker's output when none comes within `timeout` s"
        import queue
        self.p.stdin.write(json.dumps(req) + '\n'); self.p.stdin.flush()
        try: r = self.q.get(timeout=timeout)
        except queue.Empty: r = None
        if r is None: raise RuntimeError(f"the torchrun worker did not answer {req} in {timeout} s: {''.join(self.lines)[-2000:]}")
        return r

    def close(self):
        "End the worker (stdin closed: it leaves its loop), killing it after 60 s"
        self.p.stdin.close()
        try: self.p.wait(60)
        except subprocess.TimeoutExpired: self.p.kill(); self.p.wait(10)


def paired(configs, rounds: int = 3, windows: int = 60, window_s: float = 0.05) -> dict:
    "Each round a new ddp_nb cluster (n=1) and a new torchrun worker, alive together; per config, windows alternate between them"
    from ddp_nb import DDPCluster
    from benchmarks import gpu as rank_side   # imported by name, so a rank keeps _PAIR between calls
    res = {c: dict(ours=[], theirs=[], ratios=[], cpu=[], digests=set()) for c in configs}
    for r in range(rounds):
        theirs = TorchrunSide()
        try:
            with DDPCluster(n=1) as cl:
                for c in configs:
                    a, t = cl.run(rank_side.pair_build, *c)[0], theirs.ask(build=list(c))
                    res[c]['digests'] |= {a['digest'], t['digest']}
                    steps = max(5, round(window_s * 1e3 / t['step_ms']))
                    for w in range(windows):
                        ours_first = (r + w) % 2 == 0
                        x = cl.run(rank_side.pair_window, steps)[0] if ours_first else theirs.ask(window=steps)
                        y = theirs.ask(window=steps) if ours_first else cl.run(rank_side.pair_window, steps)[0]
                        (o, oc), (th, tc) = (x, y) if ours_first else (y, x)
                        res[c]['ours'].append(o); res[c]['theirs'].append(th); res[c]['ratios'].append(o / th)
                        res[c]['cpu'].append(oc / tc)
                    print(f"gpu round {r + 1}/{rounds}, width {c[0]}: ddp_nb {med(res[c]['ours'][-windows:]):.3f} ms, "
                          f"torchrun {med(res[c]['theirs'][-windows:]):.3f} ms, ratio {med(res[c]['ratios'][-windows:]):.3f} "
                          f"(CPU per step {med(res[c]['cpu'][-windows:]):.3f})",
                          flush=True)
        finally: theirs.close()
    return res


def run(rounds: int = 3, windows: int = 60, configs=CONFIGS, timer: bool = True, window_s: float = 0.05) -> str:
    "The GPU section, as markdown (the last GPU run's section, or 'not measured', without a GPU)"
    import torch
    if not (torch.cuda.is_available() or os.environ.get('BENCH_GPU_REHEARSAL')):
        last = Path(ROOT) / 'benchmarks' / 'results_gpu.md'
        return last.read_text().rstrip() if last.exists() else f"{HEAD}\n\nNot measured in this run: this machine has no GPU."
    # A launch-bound step's time varies by ±20% from one process to the next and from one second to the next: both
    # sides stay alive together and take turns, so each pair of windows sees the same machine at the same time.
    res = paired(configs, rounds, windows, window_s)
    rows = []
    for (w, b), v in res.items():
        q = sorted(v['ratios'])
        m = med(q)
        rows.append([f"MLP width {w}, batch {b}", f"{med(v['ours']):.3f}", f"{med(v['theirs']):.3f}",
                     f"**{m:.3f}**" + ('' if 0.98 <= m <= 1.02 else ' (missed)'), f"{q[len(q) // 4]:.3f}–{q[3 * len(q) // 4]:.3f}",
                     f"{med(v['cpu']):.3f}", 'yes' if len(v['digests']) == 1 else '**no**'])
    if timer:
        from ddp_nb import DDPCluster
        with DDPCluster(n=1) as cl: tc = [cl.run(timed_steps)[0] for _ in range(rounds)]
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU rehearsal'
    return (f"{HEAD}\n\n{name}, torch {torch.__version__} (CUDA {torch.version.cuda}), one rank on nccl. The same DDP-wrapped "
            "3-layer MLP, seeds and data (on the GPU) on both sides. Each round starts a new ddp_nb cluster and a new "
            "`torchrun --nproc_per_node=1` worker; both stay alive and take turns on the GPU, a window of steps each "
            f"(about {window_s:g} s, timed by CUDA events), {windows} windows a side per model, {rounds} rounds. The ratio is ddp_nb's "
            "window over the torchrun window next to it: median and middle half over every pair (goal 0.98–1.02); the CPU "
            "ratio is the same over the processes' CPU time per step (all their threads). Weights compared after 10 steps.\n\n"
            + table(['model', 'ddp_nb ms/step', 'torchrun ms/step', 'ratio (paired windows)', 'middle half of the pairs',
                     'CPU per step (paired)', 'bit-identical weights'], rows)
            + ("\n\n" + timer_section(tc) if timer else ''))


def timer_section(res: list) -> str:
    "The StepTimer-on-the-GPU rows, as markdown"
    rows, costs = [], []
    for i, r in enumerate(res):
        ps = r['pairs']
        q = [t / a for a, t in ps]
        costs.append(med(q) - 1)
        rows.append([str(i + 1), f"MLP width {r['width']}, batch {r['batch']}; {len(ps)} × 2 blocks of {r['steps']}",
                     f"{med([a for a, _ in ps]):.3f}", f"{med([t for _, t in ps]):.3f}", f"**{med(q) - 1:+.2%}**",
                     f"{r['clock']}; last step: " + ', '.join(f"{k} {v:.2f}" for k, v in r['last'].items())])
    c = med(costs)
    return ("**The per-step breakdown (StepTimer, issue #16) on the GPU**: the same rank alternates blocks of plain DDP steps and "
            "timed ones (`timer.iter`, `timer.step`, `timer.optimizer`, the autograd hooks timing DDP's all-reduce wait, CUDA "
            "events read only once ready, and a report per step to the notebook), each block between two synchronisations. "
            f"Median cost **{c:+.2%}** of a step (goal ≤ +2%: {'met' if c <= 0.02 else 'missed'}).\n\n"
            + table(['round', 'steps', 'plain ms/step', 'timed ms/step', 'cost (median of block pairs)', 'clock; what it reported (ms)'], rows))


# ---- where the launch-bound step's time goes, on each side (issue #26: the 1-rank ratio 0.798 at the smallest step)
def threads_per_step(before: dict, after: dict, steps: int) -> dict:
    "CPU ms a step between two `common.thread_cpu` reads, as this thread ('python'), autograd's threads and all the others"
    import threading
    me, out = threading.get_native_id(), dict(python=0., autograd=0., other=0.)
    for tid, (name, s) in after.items():
        k = 'python' if tid == me else 'autograd' if name.startswith('pt_autograd') else 'other'
        out[k] += (s - before.get(tid, (name, 0.))[1]) / steps * 1e3
    return out


def side_facts() -> dict:
    "What in this process can change a launch-bound step's CPU time: threads, affinity, env, tracing, GC, allocator"
    import gc, os, sys, threading, torch   # (imports here: a rank runs this function in its own namespace)
    keys = ('OMP_', 'MKL_', 'KMP_', 'GOMP_', 'TORCH', 'PYTORCH', 'NCCL_', 'CUDA_', 'LOCAL_', 'RANK', 'WORLD', 'MASTER',
            'GROUP_', 'ROLE_', 'PYTHON', 'LD_PRELOAD', 'MALLOC')
    env = {k: v for k, v in os.environ.items() if k.startswith(keys)}
    return dict(pid=os.getpid(), cores=len(os.sched_getaffinity(0)), nice=os.nice(0), torch_threads=torch.get_num_threads(),
                interop_threads=torch.get_num_interop_threads(), py_threads=sorted(t.name for t in threading.enumerate()),
                trace=repr(sys.gettrace()), profile=repr(sys.getprofile()), switch_interval=sys.getswitchinterval(),
                gc=dict(enabled=gc.isenabled(), threshold=gc.get_threshold(), tracked=len(gc.get_objects())),
                grad=torch.is_grad_enabled(), anomaly=torch.is_anomaly_enabled(), deterministic=torch.are_deterministic_algorithms_enabled(),
                tf32=torch.backends.cuda.matmul.allow_tf32, env=env)


def explain_steps(width: int = 1024, batch: int = 64, steps: int = 300, prof_steps: int = 30, seed: int = 0,
                  trace: str | None = None) -> dict:
    "On a rank: one launch-bound config, timed by GPU events, by the CPU (no sync: the launch loop), per phase, and by the profiler"
    import time, torch
    from torch.profiler import profile, ProfilerActivity
    step, m, dev = mlp_step(width, batch, seed)
    cuda = dev.type == 'cuda'
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    for _ in range(50): step()
    sync()
    if cuda: a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); a.record()
    t0, c0, th0 = time.perf_counter(), time.thread_time(), thread_cpu()
    for _ in range(steps): step()
    launch_ms, cpu_ms = (time.perf_counter() - t0) / steps * 1e3, (time.thread_time() - c0) / steps * 1e3
    if cuda: b.record(); b.synchronize()
    threads = threads_per_step(th0, thread_cpu(), steps)   # (the drain after the loop is 0.1 ms: the GPU never holds it back)
    gpu_ms = a.elapsed_time(b) / steps if cuda else launch_ms
    phases = dict(forward=0., backward=0., optimizer=0.)
    for _ in range(steps): step(phases)   # CPU wall per phase (no sync: what the Python thread spends enqueueing)
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(prof_steps): step()
        sync()
    if trace: prof.export_chrome_trace(trace)
    ops = []
    for e in prof.key_averages():
        dev_us = getattr(e, 'self_device_time_total', None)
        if dev_us is None: dev_us = getattr(e, 'self_cuda_time_total', 0)
        ops.append(dict(name=e.key, calls=e.count / prof_steps, self_cpu_us=e.self_cpu_time_total / prof_steps,
                        self_gpu_us=dev_us / prof_steps))
    ops.sort(key=lambda o: -o['self_cpu_us'])
    return dict(width=width, batch=batch, steps=steps, gpu_ms=gpu_ms, launch_ms=launch_ms, cpu_ms=cpu_ms, threads_ms=threads,
                phases_ms={k: v / steps * 1e3 for k, v in phases.items()}, ops=ops[:40],
                cpu_us_total=sum(o['self_cpu_us'] for o in ops), gpu_us_total=sum(o['self_gpu_us'] for o in ops))


def explained_worker(out: str, trace: str | None = None):
    "A bare or torchrun worker for --explain: nccl on LOCAL_RANK's GPU (gloo in the rehearsal), explain_steps, rank 0 writes the result"
    import torch.distributed as dist
    worker_group()
    try: r = dict(explain_steps(trace=trace), facts=side_facts())
    finally: dist.destroy_process_group()
    if int(os.environ.get('RANK', 0)) == 0: Path(out).write_text(json.dumps(r))


def explained_side(how: str, env: dict | None = None, trace: str | None = None) -> dict:
    "explain_steps in a torchrun worker (how='torchrun') or a bare `python -m` process given the torchrun variables (how='bare')"
    import socket
    args = ['--worker', '--explain', '--out', 'OUT'] + (['--trace', trace] if trace else [])
    e = dict(os.environ, **(env or {}))
    if how == 'torchrun': return worker_result(how, torchrun_cmd(1, 'benchmarks.gpu', *args), e)
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    e.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', LOCAL_WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    return worker_result(how, [sys.executable, '-m', 'benchmarks.gpu', *args], e)


def explain(rounds: int = 3, trace_dir: str | None = None) -> str:
    "Where the smallest config's step time goes on each side, and which difference between the sides accounts for it (markdown)"
    import re, torch
    if not (torch.cuda.is_available() or os.environ.get('BENCH_GPU_REHEARSAL')): return "No GPU: --explain needs one."
    from ddp_nb import DDPCluster
    from benchmarks import gpu as rank_side   # by name: a rank resolves mlp_step there
    tr = (lambda name: os.path.join(trace_dir, re.sub(r'\W+', '_', name).strip('_') + '.json')) if trace_dir else (lambda name: None)
    if trace_dir: os.makedirs(trace_dir, exist_ok=True)
    res = {}
    with DDPCluster(n=1) as cl:
        ours = cl.run(side_facts)[0]
        same = {k: ours['env'][k] for k in ('OMP_NUM_THREADS', 'TORCH_FR_BUFFER_SIZE', 'TORCH_NCCL_TRACE_BUFFER_SIZE') if k in ours['env']}
        sides = [('ddp_nb', None, None), ('torchrun', 'torchrun', None), ('bare python', 'bare', None),
                 ("torchrun, ddp_nb's threads", 'torchrun', {'OMP_NUM_THREADS': same['OMP_NUM_THREADS']}),
                 ("torchrun, ddp_nb's env", 'torchrun', same)]
        for r in range(rounds):
            for name, how, env in (sides if r % 2 == 0 else sides[::-1]):
                t = tr(name) if r == 0 else None
                res.setdefault(name, []).append(dict(cl.run(rank_side.explain_steps, trace=t)[0], facts=cl.run(side_facts)[0]) if how is None
                                                else explained_side(how, env, t))
            print(f"explain round {r + 1}/{rounds}: " + ', '.join(f"{k} {v[-1]['gpu_ms']:.3f} ms" for k, v in res.items()), flush=True)
    for f in Path(trace_dir or '.').glob('*.json') if trace_dir else ():   # the traces, gzipped (chrome://tracing and Perfetto read them)
        with open(f, 'rb') as i, gzip.open(f"{f}.gz", 'wb') as o: o.write(i.read())
        f.unlink()
    return explain_section(res, same)


def explain_section(res: dict, same: dict) -> str:
    "The --explain results as markdown: a row per side, then the profiler's top ops side by side and the facts that differ"
    rows = []
    base = med([r['gpu_ms'] for r in res['torchrun']])
    for name, rs in res.items():
        g = med([r['gpu_ms'] for r in rs])
        ph = {k: med([r['phases_ms'][k] for r in rs]) for k in ('forward', 'backward', 'optimizer')}
        rows.append([name, f"{g:.3f}", f"**{g / base:.3f}**", f"{med([r['launch_ms'] for r in rs]):.3f}",
                     f"{med([r['cpu_ms'] for r in rs]):.3f}",
                     ' / '.join(f"{med([r['threads_ms'][k] for r in rs]):.3f}" for k in ('python', 'autograd', 'other')),
                     ' / '.join(f"{v:.3f}" for v in ph.values()),
                     f"{med([r['cpu_us_total'] for r in rs]) / 1e3:.3f}", f"{med([r['gpu_us_total'] for r in rs]) / 1e3:.3f}"])
    a, t = res['ddp_nb'][0], res['torchrun'][0]
    top = {o['name']: o for o in a['ops']}
    theirs = {o['name']: o for o in t['ops']}
    names = sorted(set(top) | set(theirs), key=lambda n: -abs(top.get(n, {}).get('self_cpu_us', 0) - theirs.get(n, {}).get('self_cpu_us', 0)))[:15]
    ops = [[f"`{n}`", f"{top.get(n, {}).get('calls', 0):.0f}", f"{top.get(n, {}).get('self_cpu_us', 0):.1f}",
            f"{theirs.get(n, {}).get('self_cpu_us', 0):.1f}", f"{top.get(n, {}).get('self_gpu_us', 0):.1f}",
            f"{theirs.get(n, {}).get('self_gpu_us', 0):.1f}"] for n in names]
    fa, ft = a['facts'], t['facts']
    diff = [[f"`{k}`", f"`{fa.get(k)}`", f"`{ft.get(k)}`"] for k in sorted(set(fa) | set(ft)) if k not in ('env', 'pid') and fa.get(k) != ft.get(k)]
    diff += [[f"env `{k}`", f"`{fa['env'].get(k)}`", f"`{ft['env'].get(k)}`"] for k in sorted(set(fa['env']) | set(ft['env']))
             if fa['env'].get(k) != ft['env'].get(k)]
    return ("#### Where the smallest step's time goes (`python -m benchmarks.gpu --explain`)\n\n"
            f"MLP width {a['width']}, batch {a['batch']}: {a['steps']} steps a measurement, {len(res['ddp_nb'])} alternating rounds, "
            "medians. *launch* is the Python thread's wall time per step with no synchronisation (what enqueueing a step costs); "
            "*thread CPU* its CPU time; *CPU by thread* the CPU time a step of the Python thread, the autograd engine's threads "
            "(the backward pass, which the Python thread waits for) and every other thread of the process; the phases are CPU "
            "wall times; profiler totals are self times summed over every op. "
            f"ddp_nb's env given to torchrun in the last row: {same}.\n\n"
            + table(['side', 'GPU-event ms/step', 'vs torchrun', 'launch ms/step', 'thread CPU ms/step',
                     'CPU by thread: Python / autograd / other ms',
                     'forward / backward / optimizer ms', 'profiler CPU ms/step', 'profiler GPU ms/step'], rows)
            + "\n\nThe ops whose CPU time differs most (first round, µs per step):\n\n"
            + table(['op', 'calls/step', 'ddp_nb CPU µs', 'torchrun CPU µs', 'ddp_nb GPU µs', 'torchrun GPU µs'], ops)
            + "\n\nWhat differs between the two processes:\n\n" + table(['fact', 'ddp_nb rank', 'torchrun worker'], diff))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--windows', type=int, default=60, help="windows of steps a side, per model and round")
    # short windows, many of them: a pair's ratio spreads ±15% at the launch-bound step whatever the window's length
    ap.add_argument('--window-s', type=float, default=0.05, help="seconds of steps a window (at least 5 steps)")
    ap.add_argument('--out', default=None)
    ap.add_argument('--worker', action='store_true')
    ap.add_argument('--explain', action='store_true')
    ap.add_argument('--trace-dir', default=None)
    ap.add_argument('--trace', default=None)   # a worker's profiler trace file
    ap.add_argument('--configs', default=None, help="indices into CONFIGS, e.g. '0' (the launch-bound one); default all")
    ap.add_argument('--no-timer', action='store_true', help="leave out the StepTimer rows")
    ap.add_argument('--pair-worker', action='store_true')
    a = ap.parse_args(argv)
    configs = tuple(CONFIGS[int(i)] for i in a.configs.split(',')) if a.configs else CONFIGS
    if a.pair_worker: return pair_worker()
    if a.worker: return explained_worker(a.out, a.trace)
    t0 = time.time()
    text = (explain(a.rounds, a.trace_dir) if a.explain else
            run(a.rounds, a.windows, configs, timer=not a.no_timer, window_s=a.window_s))
    text = f"Machine: {machine()}  \nCommand: `python -m benchmarks.gpu` ({time.time() - t0:.0f} s, {time.strftime('%Y-%m-%d')}).\n\n{text}\n"
    if a.out: Path(a.out).write_text(text)
    print(text)


if __name__ == '__main__':
    main()
