"""ddp_nb against the tools a user would pick instead: PyTorch Monarch (an actor mesh), jupyter-distributed and
nbdistributed (notebook kernels on every rank), Accelerate's `notebook_launcher` (a launch per call), torchrun.

Five things a user does, each timed as the user sees it, in a real Jupyter kernel (request to idle), 2 CPU ranks on
gloo: start (until 2 ranks have a formed group and a first all_reduce returned; torch not yet imported in the kernel),
a warm cell (one all_reduce on every rank), iteration with state (new lr + 10 steps of a small DDP model kept on the
ranks), replacing a killed rank, a repeated unchanged torchrun script. Every side runs in the same run, in rotating
rounds (a fresh kernel for each side each round); medians and min-max. The rounds also time one `import torch` in a new
Python (`FLOOR`): every side's ranks pay one before their group forms, so each start is also said as a multiple of it.
Then ddp_nb's warm cell against Monarch's with both kernels up at once, in blocks of cells alternated between them
(`interleaved`), half of them with ddp_nb's kernel started first and half with Monarch's (`both_orders`: which kernel
was started first moves the ratio by 5–10% here, one way or the other from run to run): the machine's drift within a
run (±25% on 2 cores) falls on both, so their ratio is the one to trust.

The peers live in their own environment (torch must be the very same version as ddp_nb's): their kernels run on the
interpreter `BENCH_PEERS_PYTHON` names (default: this one); a peer that does not import there is skipped with one line
saying why.

    BENCH_PEERS_PYTHON=/work/peers-venv/bin/python python -m benchmarks.peers [--rounds 5] [--fast]"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, textwrap, time
from pathlib import Path
from benchmarks.common import cell, med, table, ROOT
from ddp_nb.kernel import Kernel

PEERS_PY = os.environ.get('BENCH_PEERS_PYTHON') or sys.executable

ALL_REDUCE = "t = torch.ones(1); dist.all_reduce(t); assert t.item() == 2"   # 2 ranks in the group, on every side
MODEL = """\
import torch, torch.nn.functional as F, torch.distributed as dist
torch.manual_seed(0)
X, Y = torch.randn(640, 64), torch.randint(0, 10, (640,))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
"""
STEPS = """\
for g in opt.param_groups: g['lr'] = {lr}
for i in range(10):
    loss = F.cross_entropy(model(X[i * 64:(i + 1) * 64]), Y[i * 64:(i + 1) * 64]); opt.zero_grad(); loss.backward(); opt.step()
"""
SCRIPT = ("import torch.distributed as dist\ndist.init_process_group('gloo')\n" + MODEL + STEPS.format(lr=0.05)
          + "del model, opt\ndist.destroy_process_group()\n")   # the DDP model first: alive, it pins the group

MONARCH_ACTOR = '''\
from monarch.actor import this_host, Actor, endpoint
from monarch.spmd import setup_torch_elastic_env
class Rank(Actor):
    "A rank: the process group, and the model kept between calls"
    @endpoint
    def init(self):
        import os, torch, torch.distributed as dist
        dist.init_process_group('gloo'); t = torch.ones(1); dist.all_reduce(t); assert t.item() == 2
        self.g = {}; return os.getpid()
    @endpoint
    def all_reduce(self):
        import torch, torch.distributed as dist
        t = torch.ones(1); dist.all_reduce(t); assert t.item() == 2
    @endpoint
    def build(self): exec(MODEL, self.g)
    @endpoint
    def steps(self, lr): exec(STEPS.format(lr=lr), self.g)
'''


def _launch(body: str, name: str, arg: str = '') -> str:
    "A notebook_launcher cell: a function that forms the group, runs `body`, leaves; launched on 2 processes"
    return (f"def {name}({arg}):\n    import torch, torch.distributed as dist\n    dist.init_process_group('gloo')\n"
            + textwrap.indent(body, '    ') + "\n    dist.destroy_process_group()\n"
            f"notebook_launcher({name}, {'(' + arg + ',), ' if arg else ''}num_processes=2)")


# Each side: kernel interpreter ('ddp_nb' or 'peers'), the module it needs, and its cells (None: not possible, and why)
SIDES = {
    'ddp_nb': dict(py='ddp_nb', needs='ddp_nb',
        start=["from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()"],
        warm="%%px\n" + ALL_REDUCE, state="%%px\n" + MODEL, iterate="%%px\n" + STEPS,
        pids="[r.pid for r in cl.ranks]", replace="cl.restart()",
        script="assert [r['exit_code'] for r in cl.run_script({path!r})] == [0, 0]", stop="cl.stop()"),
    # the same after a kernel restart: the previous kernel's idle fork server left a standby (`keep_warm`)
    'ddp_nb, kernel restarted, `keep_warm`': dict(py='ddp_nb', needs='ddp_nb', standby=True,
        start=["from ddp_nb import DDPCluster\ncl = DDPCluster(n=2, keep_warm=900).start()"],
        warm="%%px\n" + ALL_REDUCE, state="%%px\n" + MODEL, iterate="%%px\n" + STEPS,
        pids="[r.pid for r in cl.ranks]", replace="cl.restart()",
        script="assert [r['exit_code'] for r in cl.run_script({path!r})] == [0, 0]", stop="cl.stop()"),
    'Monarch': dict(py='peers', needs='monarch.actor', dist='torchmonarch',
        start=[f"MODEL, STEPS = {MODEL!r}, {STEPS!r}\n" + MONARCH_ACTOR
               + "procs = this_host().spawn_procs(per_host={'gpus': 2})\nsetup_torch_elastic_env(procs)\n"
                 "ranks = procs.spawn('rank', Rank)\npids = [p for _, p in ranks.init.call().get()]"],
        warm="ranks.all_reduce.call().get()", state="ranks.build.call().get()", iterate="ranks.steps.call({lr}).get()",
        replace=None, why_replace="not supported: a killed proc fails its mesh, and the unhandled fault interrupts the "
                    "controller (a KeyboardInterrupt, unless `monarch.actor.unhandled_fault_hook` drops it); a new mesh is a new start, state lost",
        script_setup="from monarch.spmd import SPMDActor\nsp = this_host().spawn_procs(per_host={'gpus': 2}).spawn('spmd', SPMDActor)",
        script="h, p = sp.slice(gpus=0).get_host_port.call_one(None).get()\nsp.main.call(h, p, [{path!r}]).get()",
        stop="procs.stop().get()"),
    'jupyter-distributed': dict(py='peers', needs='jupyter_distributed', dist='jupyter-distributed', kernel='jupyter_distributed',
        start=["import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n" + ALL_REDUCE],
        warm=ALL_REDUCE, state=MODEL, iterate=STEPS,
        replace=None, why_replace="not supported: a new process count or a kernel restart restarts the whole group (state lost)",
        script=None, why_script="no script runner (a cell's `!torchrun`: the torchrun row)", stop=None),
    'nbdistributed': dict(py='peers', needs='nbdistributed', dist='nbdistributed',
        start=["%load_ext nbdistributed", "%dist_init -n 2", "%%distributed\nimport torch, torch.distributed as dist\n" + ALL_REDUCE],
        warm="%%distributed\n" + ALL_REDUCE, state="%%distributed\n" + MODEL, iterate="%%distributed\n" + STEPS,
        replace=None, why_replace="not supported: `%dist_reset` + `%dist_init` restart the whole group (state lost)",
        script=None, why_script="no script runner",
        stop="%unload_ext nbdistributed"),   # its graceful stop: `%dist_shutdown` also runs `pkill -f` on patterns
        # ('worker.py', 'python.*worker', 'torch.*distributed') that end other programs' processes too
    'Accelerate `notebook_launcher`': dict(py='peers', needs='accelerate', dist='accelerate',
        start=["from accelerate import notebook_launcher\n" + _launch(ALL_REDUCE, 'first')],
        warm=_launch(ALL_REDUCE, 'cell'), state=None, launches=True,
        why_state="cannot keep state: each call is a new launch that rebuilds the model",
        iterate=_launch(MODEL + STEPS.replace('{lr}', 'lr') + 'del model, opt', 'iterate', 'lr').replace('(lr,),', '({lr},),'),
        replace=None, why_replace="not supported: no live ranks (max_restarts reruns a whole launch)",
        script=None, why_script="launches functions, not scripts", stop=None),
}


def peer_kernel(py: str, jd: bool, registry: str) -> Kernel:
    """A kernel on interpreter `py` in its activated environment (nbdistributed starts its workers as `python` from PATH),
    or jupyter-distributed's proxy kernel over 2 of them (`jd`; its registry file: `registry`)"""
    if not jd: return Kernel(cwd=str(ROOT), python=py, timeout=300)
    # what its server extension does when the notebook's Processes field is set to 2 (a kernel restart)
    return Kernel(cwd=str(ROOT), python=py, module='jupyter_distributed.kernel', interrupt_mode='message', timeout=300,
                  env=dict(JUPYTER_DISTRIBUTED_BASE_KERNEL='python3', JUPYTER_DISTRIBUTED_WORLD_SIZE='2',
                           JUPYTER_DISTRIBUTED_REGISTRY_FILE=registry, JUPYTER_DISTRIBUTED_CWD=str(ROOT)))


def probe(py: str) -> dict:
    "{'python': version, 'torch': version, module: version or 'error: ...'} on interpreter `py`"
    mods = {s['needs']: s.get('dist', 'ddp_nb') for s in SIDES.values()} | {'ipykernel': 'ipykernel'}
    code = textwrap.dedent(f"""\
        import importlib, importlib.metadata as md, json, platform
        out = {{'python': platform.python_version()}}
        try: import torch; out['torch'] = torch.__version__
        except Exception as e: out['torch'] = 'error: ' + repr(e)[:200]
        for mod, dist in {mods!r}.items():
            try: importlib.import_module(mod)
            except ModuleNotFoundError as e: out[mod] = 'missing: ' + str(e)[:200]; continue
            except BaseException as e: out[mod] = 'error: ' + (type(e).__name__ + ': ' + str(e))[:300]; continue
            try: out[mod] = md.version(dist)
            except Exception: out[mod] = 'unknown version'
        print('@@' + json.dumps(out))""")
    r = subprocess.run([py, '-c', code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    if '@@' not in r.stdout: return {'python': f"error: {(r.stderr or r.stdout)[-300:]}"}
    return json.loads(r.stdout.rsplit('@@', 1)[1])


def _kill(pid: int):
    "kill -9 a rank, and wait until it is gone"
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        try: os.kill(pid, 0); time.sleep(0.05)
        except ProcessLookupError: return


def standby_waiting(py: str):
    "A standby fork server waits, as the previous kernel's idle server leaves it with `keep_warm` (untimed: a kernel that does so)"
    from ddp_nb.forkserver import standbys
    if standbys(): return
    k = Kernel(cwd=str(ROOT), python=py, timeout=300)
    try:
        cell(k, "import time\nfrom ddp_nb import DDPCluster\nfrom ddp_nb.forkserver import standbys\n"
                "cl = DDPCluster(n=2, keep_warm=900).start()\nt = time.monotonic()\n"
                "while not standbys() and time.monotonic() - t < 60: time.sleep(0.1)\ncl.stop()")
        if not standbys(): raise RuntimeError("no standby fork server after 60 s")
    finally: k.close()


def side_round(name: str, s: dict, py: str, T: dict, cells: int, iters: int, scripts: int, path: str, r: int):
    "One round of one side in a fresh kernel: every metric it has, appended to T[metric]"
    jd = s.get('kernel') == 'jupyter_distributed'
    if s.get('standby'): standby_waiting(py)
    t0 = time.perf_counter()
    k = peer_kernel(py, jd, os.path.join(os.path.dirname(path), f'registry-{r}.json'))   # (next to the script, in the run's folder)
    try:
        start = time.perf_counter() - t0 if jd else 0.   # its start is a kernel (re)start with 2 rank kernels
        for c in s['start']: start += cell(k, c)[0]
        T['start'].append(start)
        started = time.perf_counter()
        cell(k, s['warm'])   # one untimed: warm means after a first cell
        T['warm'] += [cell(k, s['warm'])[0] for _ in range(cells)]
        if s.get('state'): cell(k, s['state']); cell(k, s['iterate'].format(lr=0.05))   # built once and run once, as in a notebook
        T['iterate'] += [cell(k, s['iterate'].format(lr=0.05 + (r * iters + i) * 1e-3))[0] for i in range(iters)]
        if s.get('script'):
            if s.get('script_setup'): cell(k, s['script_setup'])
            T['script'] += [cell(k, s['script'].format(path=path))[0] for _ in range(scripts)]
        if s.get('replace'):
            pids = json.loads(cell(k, f"import json; print('@@' + json.dumps({s['pids']}))")[1].rsplit('@@', 1)[1])
            T['kill_after'].append(time.perf_counter() - started)   # (what a replace takes depends on it: see `run`'s text)
            _kill(pids[1])
            T['replace'].append(cell(k, s['replace'])[0] + cell(k, s['warm'])[0])   # until it serves cells again
        if s.get('stop'): cell(k, s['stop'], timeout=120)
    finally:
        left = k.close()   # (it waits until every process of the kernel has ended)
        if left: print(f"{name}: still running after its kernel closed: {left}", flush=True)


def interleaved(a: str, b: str, pys: dict, blocks: int = 16, n: int = 25) -> dict:
    """Warm cells of sides `a` and `b`, both kernels up at once (`a`'s started first), in blocks of `n` alternated
    (`a` first in even blocks): the machine's drift falls on both. {side: [seconds]}, 'meds': {side: [block medians]}"""
    ks, T, med_of = {}, {a: [], b: []}, {a: [], b: []}
    try:
        for name in (a, b):
            s = SIDES[name]; k = ks[name] = peer_kernel(pys[name], False, '')
            for c in s['start']: cell(k, c)
            for _ in range(30): cell(k, s['warm'])   # warm: past the first cells
        for i in range(blocks):
            for name in ((a, b) if i % 2 == 0 else (b, a)):
                ts = [cell(ks[name], SIDES[name]['warm'])[0] for _ in range(n)]
                T[name] += ts; med_of[name].append(med(ts))
    finally:
        for name, k in ks.items():
            try:
                if SIDES[name].get('stop'): cell(k, SIDES[name]['stop'], timeout=120)
            finally: k.close()
    T['meds'] = med_of
    return T


def both_orders(a: str, b: str, pys: dict, blocks: int = 16, n: int = 25) -> list:
    "`interleaved` twice, `a`'s kernel started first, then `b`'s (a kernel started second ran 5-12% slower here): [T, T]"
    return [interleaved(a, b, pys, blocks // 2, n), interleaved(b, a, pys, blocks - blocks // 2, n)]


def torchrun_round(py: str, T: dict, scripts: int, path: str):
    "`torchrun --standalone --nproc_per_node=2 script` from the shell (or a `!` cell), timed to its exit"
    for _ in range(scripts):
        t0 = time.perf_counter()
        r = subprocess.run([py, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', path], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        if r.returncode: raise RuntimeError(f"torchrun exit {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
        T['script'].append(time.perf_counter() - t0)


FLOOR = 'import torch'   # the pseudo-side of the start's floor: one `import torch, torch.distributed` in a new Python


def floor_round(py: str, T: dict):
    "One `import torch, torch.distributed` in a new Python on `py`: what every side's start pays at least once"
    t0 = time.perf_counter()
    subprocess.run([py, '-c', 'import torch, torch.distributed'], check=True, capture_output=True, timeout=300)
    T['start'].append(time.perf_counter() - t0)


def _fmt(xs: list, unit: str = 's') -> str:
    "median [min–max] (n)"
    if not xs: return ''
    f = (lambda v: f"{v * 1e3:.0f} ms") if unit == 'ms' else (lambda v: f"{v:.2f} s")
    return f"{f(med(xs))} [{f(min(xs))}–{f(max(xs))}] ({len(xs)})"


def _picked(name: str, sides: list | None) -> bool:
    "Is side `name` among `sides` (None: all; a side is named by the start of its name, any case)"
    return sides is None or any(name.lower().startswith(x.lower()) for x in sides if x)


METRICS = ['start', 'warm', 'iterate', 'replace', 'script']


def run(rounds: int = 5, cells: int = 10, iters: int = 3, scripts: int = 3, peers_python: str | None = None,
        sides: list | None = None, blocks: tuple = (16, 25)) -> str:
    "The peers section, as markdown (`sides`: names to run, default all, 'torchrun' included)"
    py = peers_python or PEERS_PY
    ours, theirs = probe(sys.executable), probe(py)
    notes, active = {}, {}
    for name, s in SIDES.items():
        got = (ours if s['py'] == 'ddp_nb' else theirs)
        v = got.get(s['needs'], got.get('python', ''))
        if str(v).startswith('missing'):
            notes[name] = f"skipped: not installed on `{py}` (`pip install {s.get('dist')} torch=={ours.get('torch', '').split('+')[0]}`)"
        elif str(v).startswith('error'):
            notes[name] = f"skipped: does not import on `{py}`: {v[7:]}"
        elif s['py'] == 'peers' and str(theirs.get('ipykernel', 'missing')).startswith(('missing', 'error')):
            notes[name] = f"skipped: no ipykernel on `{py}` to run its kernel (`pip install ipykernel`)"
        elif s['py'] == 'peers' and theirs.get('torch') != ours.get('torch'):
            notes[name] = f"skipped: torch {theirs.get('torch')} on `{py}`, not {ours.get('torch')} as ddp_nb's"
        elif not _picked(name, sides): notes[name] = "not selected (`--sides`)"
        else: active[name] = (sys.executable if s['py'] == 'ddp_nb' else py)
    T = {n: {m: [] for m in METRICS + ['kill_after']} for n in list(SIDES) + ['torchrun', FLOOR]}
    d = tempfile.mkdtemp(prefix='ddp_nb-peers-script-')
    path = os.path.join(d, 'train.py'); Path(path).write_text(SCRIPT)
    order = list(active) + [n for n in ('torchrun', FLOOR) if _picked(n, sides)]
    pair = None
    try:
        for r in range(rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                if name in notes: continue
                t0 = time.perf_counter()
                try:
                    if name == 'torchrun': torchrun_round(sys.executable, T[name], scripts, path)
                    elif name == FLOOR: floor_round(sys.executable, T[name])
                    else: side_round(name, SIDES[name], active[name], T[name], cells, iters, scripts, path, r)
                except Exception as e:
                    notes[name] = f"failed: {type(e).__name__}: {str(e)[:300]}"
                print(f"round {r + 1}/{rounds} {name}: {time.perf_counter() - t0:.1f} s"
                      + (f" ({notes[name]})" if name in notes else ''), flush=True)
        both = 'ddp_nb' in active and 'Monarch' in active and 'ddp_nb' not in notes and 'Monarch' not in notes
        pair = both_orders('ddp_nb', 'Monarch', active, *blocks) if both else None   # (`blocks`: how many, cells each)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        from ddp_nb.forkserver import stop_standbys
        stop_standbys()
    rows = []
    for name in order + [n for n in SIDES if n not in order]:
        s, t = SIDES.get(name, {}), T[name]
        if name in notes and not any(t.values()): rows.append([name, notes[name], '', '', '', '']); continue
        if name == 'torchrun':
            rows.append(['`torchrun --standalone --nproc_per_node=2`', 'a launch per script', '', '', '', _fmt(t['script'])]); continue
        if name == FLOOR:
            rows.append(["`import torch` in a new Python (a cold start's floor)", _fmt(t['start']), '', '', '', '']); continue
        launch = ' (a launch each)' if s.get('launches') else ''
        it = _fmt(t['iterate'], 'ms') + (' (a launch each: rebuilds the model)' if s.get('launches') and t['iterate'] else '')
        rows.append([name, _fmt(t['start']), _fmt(t['warm'], 'ms') + (launch if t['warm'] else ''), it,
                     _fmt(t['replace']) if s.get('replace') else s.get('why_replace', ''),
                     _fmt(t['script']) if s.get('script') else s.get('why_script', '')])
    failed = [f"- {n}: {notes[n]}" for n in order if n in notes]
    vers = ', '.join(f"{k} {v}" for k, v in theirs.items() if not str(v).startswith(('missing', 'error')))
    return ("### 14. Peers: ddp_nb vs Monarch, jupyter-distributed, nbdistributed, Accelerate's `notebook_launcher`, torchrun\n\n"
            f"2 CPU ranks on gloo, each side in a fresh real Jupyter kernel every round (request to idle), {rounds} rotating "
            f"round{'s' * (rounds > 1)}; median [min–max] (count). Start: until 2 ranks have a formed group and a first all_reduce returned, "
            "torch not yet imported in the kernel (jupyter-distributed: its kernel restart with 2 rank kernels, then "
            "`init_process_group`; Monarch: `spawn_procs(per_host={'gpus': 2})`, `setup_torch_elastic_env`, an actor whose "
            "endpoint forms the group). Warm cell: one all_reduce on every rank, after a first one. Iteration: new lr + 10 "
            "steps of a small DDP MLP kept on the ranks (built and run once before). Replace: kill -9 rank 1, then until a warm cell is served again "
            + (f"(here the kill lands {_fmt(T['ddp_nb']['kill_after'])} after the start returned. " if T['ddp_nb']['kill_after'] else "(")
            + "A replacement of ddp_nb's "
            "includes the heal, which wraps DDP again, and DDP's constructor imports torch._dynamo: a rank forked after "
            "its fork server's warm copy has imported torch.compile's modules (it starts once the server has been idle 1 s, "
            "about 1.5 s on these 2 cores) has them; one forked before, by the server at once, imports torch._dynamo itself, "
            "about 1 s more). Script: the same "
            "unchanged torchrun script again (ddp_nb: `cl.run_script`; Monarch: `SPMDActor.main` on a live mesh). "
            "'ddp_nb, kernel restarted': the kernel before it ran a cluster with `keep_warm`, whose idle fork server left "
            "a standby (torch imported); the start forks its fork server and controller from it. "
            "ddp_nb sets each rank's torch threads to cores / ranks; the peers' ranks keep torch's default (every core, "
            "in each rank). nbdistributed is stopped with `%unload_ext` (its `%dist_shutdown` runs `pkill -f` on "
            "patterns that match other programs' processes).\n\n"
            f"ddp_nb's kernel: `{sys.executable}` (torch {ours.get('torch')}); the peers' kernels: `{py}` ({vers}).\n\n"
            + table(['side', 'start', 'warm cell', 'iteration with state', 'replace a rank', 'repeated script'], rows)
            + _floor_line(T)
            + (_pair_line(pair) if pair else '')
            + ('\n\n' + '\n'.join(failed) if failed else ''))


def _floor_line(T: dict) -> str:
    "Each side's start as a multiple of one torch import in the same run (nothing where either was not measured)"
    if not T[FLOOR]['start']: return ''
    f = med(T[FLOOR]['start'])
    starts = [f"{n} {med(T[n]['start']) / f:.2f}×" for n in SIDES if T[n]['start']]
    return ('' if not starts else
            f"\n\nStart against its floor: every side's ranks import torch before their group forms (ddp_nb's once, in "
            f"its fork server, with the cyclic GC off; a standby imported it before the start), so a cold start takes "
            f"about one `import torch, torch.distributed` in a new Python ({f:.2f} s here) at least. Each side's start "
            f"as a multiple of it: "
            + ', '.join(starts) + '.')


def _pair_line(Ts: list) -> str:
    "The interleaved warm cells (`both_orders`), as a paragraph"
    d, m = [x for T in Ts for x in T['ddp_nb']], [x for T in Ts for x in T['Monarch']]
    wins = sum(x < y for T in Ts for x, y in zip(T['meds']['ddp_nb'], T['meds']['Monarch']))
    blocks = sum(len(T['meds']['ddp_nb']) for T in Ts)
    first, second = (med(T['ddp_nb']) / med(T['Monarch']) for T in Ts)
    return (f"\n\nWarm cell, interleaved: both kernels up at once (ddp_nb's and Monarch's, as above), {len(d)} cells each in "
            f"blocks alternated between them, so that the machine's drift (±25% within minutes on these 2 cores) falls on "
            f"both; half the blocks with ddp_nb's kernel started first, half with Monarch's (which kernel was started "
            f"first moves the ratio by 5–10% here): ddp_nb **{med(d) * 1e3:.2f} ms**, Monarch **{med(m) * 1e3:.2f} ms** "
            f"(**{med(d) / med(m):.2f}×**; {first:.2f}× with ddp_nb's kernel started first, {second:.2f}× second; "
            f"ddp_nb's block median the lower in {wins} of {blocks} blocks).")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--fast', action='store_true', help='1 round, few cells (numbers not meaningful)')
    ap.add_argument('--peers-python', default=None, help='interpreter of the peers (default: $BENCH_PEERS_PYTHON or this one)')
    ap.add_argument('--sides', default=None, help=f"comma-separated, of: {', '.join(SIDES)}, torchrun (default: all)")
    a = ap.parse_args(argv)
    sides = None if a.sides is None else [x.strip() for x in a.sides.split(',')]
    print(run(1, 2, 1, 1, a.peers_python, sides, blocks=(2, 3)) if a.fast else run(a.rounds, peers_python=a.peers_python, sides=sides))


if __name__ == '__main__':
    main()
