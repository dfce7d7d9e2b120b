"""Start-up cost growth past 8 engines, sketched with simulated engines: 8, 64, 256 and 1,024 of them.

Real engines cannot go that far here (each is a Python process with torch), so only the engines are simulated and every
other side is the libraries' own code. Three parts:

1. Registration with the real ipyparallel controller: started as `DDPCluster.start` starts it (`engines.ipp_cluster`:
   ddp_nb's `controller_main`, so `register_hearts_at_once` applies, 100 ms heartbeat), and a connected `ipyparallel.Client`.
   N simulated engines, spread over 2 processes, speak the engine side of ipyparallel 9's protocol
   (`ipyparallel/engine/app.py`): a DEALER per engine, its identity the engine's uuid, sends the signed
   `registration_request` to the registration socket; once the reply comes, the engine starts its heart, ipyparallel's
   own `Heart` (a C-level forwarder thread per engine, the engines of a process sharing one ZMQ context), which echoes
   the heart monitor's pings under the engine's identity. Nothing else of an engine runs: no kernel, no shell, control or
   iopub sockets (the hub does not wait for them), no heart monitor of its own. Timed from the first registration request
   sent to `engines.await_registration` returning (the client sees all N ids); the controller's CPU time over that span,
   per process (the hub, the heart monitor, the schedulers), and what the heartbeats cost it each second once all are in.
2. The process group's rendezvous through a real TCPStore: ddp_nb's `rank.open_store` runs in a process of its own (as
   on rank 0), and N threads of another process are the ranks (rank 0 a client too, here), each doing what
   `rank.init_group` does with the store: a `TCPStore` client (world size N), ddp_nb's `joined` key under the group's
   prefix, then either torch's store-based barrier (`distributed_c10d._store_based_barrier`, which `init_process_group`
   runs with TORCH_DIST_INIT_BARRIER=1 and `new_group` runs) or, up to 256 ranks, gloo's full-mesh address exchange as
   `ProcessGroupGloo` makes it through the store (`gloo/transport/tcp/context.cc`, checked against a real group's store
   calls: each rank sets one key of ~150 bytes + 8 per rank under the same prefixes, then waits for and gets every
   rank's key). Up to 64 ranks, real `ProcessGroupGloo` groups (a thread per rank, full mesh on loopback) as a check.
   Timed from the start signal until every rank is through; the store process's CPU time is the store server's work,
   the part that stays on one host. c10d looks up the store's address by reverse DNS on every connection; this
   machine's DNS is unreachable and concurrent lookups wait 5 s, so these processes run with RES_OPTIONS=use-vc, which
   makes a lookup fail at once.
3. ddp_nb's own work in the kernel, once per start over all engines, with fake engine facts (8 engines per host, 8 GPUs
   each): `group.plan_group` and `group.form_group` with their calls into the engines answered at once by a stub, and
   the collector plus a first dashboard frame for N ranks (`cl.dashboard()`, text mode).

    python -m benchmarks.startscale [--rounds 3] [--sizes 8 64 256 1024]
    python -m benchmarks.startscale --fast   # 8 and 64, one round (CI: the code runs; the numbers mean little)

Medians over rounds (sizes in rotating order); 'per added engine' is the increase between successive sizes divided by
the engines added; the growth exponent is that of the last step (1: linear, 2: quadratic)."""
import argparse, gc, io, json, math, os, queue, secrets, socket, subprocess, sys, threading, time, uuid
import psutil
from collections import deque
from types import SimpleNamespace
from benchmarks.common import ROOT, med, table

SIM_PROCS = 2  # processes the simulated engines are spread over
IDLE_S = 1.0  # seconds of heartbeats measured once every engine is registered
GLOO_MAX = 256  # the largest group whose gloo address exchange is run (N² gets of O(N) bytes: 1,024 takes minutes here)
REAL_GLOO_MAX = 64  # the largest real gloo group formed as a check
GLOO_PROBE = 512  # one gloo exchange this size, after the rounds, when the sizes go past it: 1,024's estimate starts there
PER_HOST = 8  # engines per host in the fake facts
TIMEOUT = 120  # seconds for any one step of a worker
PREFIX = 'abcd1234/'  # the group's key prefix in the store (`form_group` draws one per group)
# torch's workers: reverse lookups fail at once instead of waiting for an unreachable DNS; c10d's warnings quiet
TORCH_ENV = dict(RES_OPTIONS='use-vc', TORCH_CPP_LOG_LEVEL='ERROR', GLOO_SOCKET_IFNAME='lo')


# ---- worker processes: JSON lines in, JSON lines out -------------------------------------------------------------

class Worker:
    "A child process of this module (`--worker ROLE ...`): one JSON line per request and per answer, each wait with a deadline"
    def __init__(self, role: str, *args, env: dict | None = None):
        self.p = subprocess.Popen([sys.executable, '-m', 'benchmarks.startscale', '--worker', role, *map(str, args)], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])),
                                       **(env or {})})
        self.role, self.pid, self.lines, self.err = role, self.p.pid, queue.Queue(), deque(maxlen=30)
        self.readers = [threading.Thread(target=_pump, args=(f, put), daemon=True, name=f'startscale-{role}')
                        for f, put in ((self.p.stdout, self.lines.put), (self.p.stderr, self.err.append))]
        for t in self.readers: t.start()

    def send(self, **msg):
        "Send one request"
        self.p.stdin.write(json.dumps(msg) + '\n'); self.p.stdin.flush()

    def answer(self, timeout: float = TIMEOUT) -> dict:
        "The next answer; fails with the worker's last error lines if none comes in time"
        try: line = self.lines.get(timeout=timeout)
        except queue.Empty: line = None
        out = json.loads(line) if line else None
        if out is None or 'error' in out:
            why = out['error'] if out is not None else f"no answer within {timeout:g}s" if line is None else 'it exited'
            raise RuntimeError(f"{self.role} worker (pid {self.pid}): {why}\n" + ''.join(list(self.err)[-10:]))
        return out

    def ask(self, timeout: float = TIMEOUT, **msg) -> dict:
        "Send one request and wait for its answer"
        self.send(**msg); return self.answer(timeout)

    def close(self, timeout: float = 10):
        "End the worker (its stdin closed: it exits), killed if it does not within `timeout` s; its readers joined"
        try: self.p.stdin.close()
        except OSError: pass
        try: self.p.wait(timeout)
        except subprocess.TimeoutExpired: self.p.kill(); self.p.wait(timeout)
        for t in self.readers: t.join(timeout)


def _pump(f, put):
    "Hand every line of `f` to `put` until it closes"
    for line in f: put(line)


def _serve(handle):
    "In a worker: answer each JSON request on stdin with `handle(request)`, as a JSON line, until stdin closes"
    for line in sys.stdin:
        try: out = handle(json.loads(line))
        except Exception as e: out = dict(error=f"{type(e).__name__}: {e}")
        print(json.dumps(out), flush=True)


def _cpu(pids) -> float:
    "CPU seconds (user + system) of the processes `pids` so far"
    return sum(sum(psutil.Process(p).cpu_times()[:2]) for p in pids)


# ---- part 1: registration with the real controller -----------------------------------------------------------------

def _engines_worker(conn: str, k: int):
    "Worker: `k` simulated engines of the controller whose engine connection file is `conn`, registering at 'go'"
    import zmq
    from jupyter_client.session import Session
    from ipyparallel import util
    with open(conn) as f: d = json.load(f)
    if hasattr(util, '_disable_session_extract_dates'): util._disable_session_extract_dates()  # (as the engine app)
    session = Session(key=d['key'].encode(), signature_scheme=d['signature_scheme'], packer=d['pack'], unpacker=d['unpack'])
    ctx = zmq.Context()
    ctx.MAX_SOCKETS = 4 * k + 64
    ids = [str(uuid.uuid4()) for _ in range(k)]  # an engine's uuid is its session id, and its sockets' identity
    regs = []
    for i in ids:
        s = ctx.socket(zmq.DEALER); s.IDENTITY = i.encode(); s.connect(f"{d['interface']}:{d['registration']}"); regs.append(s)
    state = dict(ctx=ctx, session=session, regs=regs, ids=ids, hearts=[])
    print(json.dumps(dict(ready=k)), flush=True)
    _serve(lambda m: _register(state))
    sys.stdout.flush(); os._exit(0)  # (the hearts' threads block in ZMQ: they end with the process)


def _register(st: dict) -> dict:
    "Send every engine's registration request, then start each engine's heart as its reply arrives: times and count"
    import zmq
    from ipyparallel.controller.heartmonitor import Heart
    t0 = time.monotonic()
    for s, i in zip(st['regs'], st['ids']): st['session'].send(s, 'registration_request', content=dict(uuid=i))
    poller, left = zmq.Poller(), set(st['regs'])
    for s in left: poller.register(s, zmq.POLLIN)
    deadline = time.monotonic() + TIMEOUT
    while left and time.monotonic() < deadline:
        for s, _ in poller.poll(100):
            _, msg = st['session'].feed_identities(s.recv_multipart())
            c = st['session'].deserialize(msg)['content']
            if c.get('status') != 'ok': raise RuntimeError(f"registration refused: {c.get('evalue', c)}")
            url = lambda key: f"{c['connection_info']['interface']}:{c['connection_info'][key]}"
            h = Heart(url('hb_ping'), url('hb_pong'), heart_id=s.IDENTITY)  # ipyparallel's own heart, as an engine starts it
            h.device.context_factory = lambda: st['ctx']  # (one context for the process's engines, not one each)
            h.start(); st['hearts'].append(h)
            poller.unregister(s); left.discard(s)
    return dict(first=t0, hearts=len(st['hearts']), left=len(left))


def _roles(procs, conn: dict) -> list:
    "Which part of the controller each process is: the hub (the controller's own process), the heart monitor (it listens for pongs), the schedulers"
    hb = lambda p: conn['hb_pong'] in {c.laddr.port for c in p.net_connections('tcp') if c.status == 'LISTEN'}
    return ['hub' if i == 0 else 'heart monitor' if hb(p) else 'schedulers' for i, p in enumerate(procs)]


def _by_role(procs, roles) -> dict:
    "CPU seconds so far of the controller's processes, summed per role"
    out = {}
    for p, r in zip(procs, roles): out[r] = out.get(r, 0.) + _cpu([p.pid])
    return out


def registration(n: int) -> dict:
    "One controller started as a DDPCluster starts it, `n` simulated engines registering: seconds and controller CPU"
    from ddp_nb.core import make_cluster_id
    from ddp_nb.engines import ipp_cluster, await_registration, stop_ipp
    from ddp_nb.compat_ipp import controller_process
    cid = make_cluster_id(os.getpid(), secrets.token_hex(3))
    c, rc, sims = ipp_cluster(0, cid, fork_server=False), None, []
    try:
        c.start_controller_sync()
        rc = c.connect_client_sync()
        path = os.path.join(c.profile_dir, 'security', f'ipcontroller-{cid}-engine.json')
        sims = [Worker('engines', path, k) for k in _split(n, SIM_PROCS)]
        for s in sims: s.answer(60)  # sockets connected
        ctl = controller_process(c)
        procs = [ctl] + ctl.children(recursive=True)
        with open(path) as f: roles = _roles(procs, json.load(f))
        c0 = _by_role(procs, roles)
        for s in sims: s.send(op='go')
        await_registration(rc, n, 30 + n / 10, bar=False)
        t1, c1 = time.monotonic(), _by_role(procs, roles)
        sent = [s.answer(60) for s in sims]
        time.sleep(IDLE_S)
        c2 = _by_role(procs, roles)
        assert len(rc.ids) == n and sum(a['hearts'] for a in sent) == n, f"{len(rc.ids)} of {n} engines registered"
        out = dict(wall=t1 - min(a['first'] for a in sent), idle=sum(c2.values()) - sum(c1.values()))
        out.update({r: c1[r] - c0[r] for r in c0})
        out['cpu'] = sum(c1.values()) - sum(c0.values())
        return out
    finally:
        for s in sims: s.close()
        if rc is not None: rc.close()
        stop_ipp(c, cid)


def _split(n: int, parts: int) -> list:
    "`n` in at most `parts` near-equal positive counts"
    parts = max(1, min(n, parts))
    return [n // parts + (i < n % parts) for i in range(parts)]


# ---- part 2: the process group's rendezvous through a real TCPStore --------------------------------------------------

def _store_worker():
    "Worker: rank 0's rendezvous store, opened by ddp_nb's own `rank.open_store` ('open') and dropped ('close')"
    from ddp_nb import rank
    import torch.distributed  # noqa: F401  (before the first request: its import is not part of a measurement)
    def handle(m):
        if m['op'] == 'open': return dict(port=rank.open_store('127.0.0.1', m['n'], TIMEOUT))
        rank.close_store(); gc.collect(); return dict(closed=True)
    print(json.dumps(dict(ready=True)), flush=True)
    _serve(handle)


def _ranks_worker():
    "Worker: N simulated ranks, a thread each, meeting through the store at 'port' ('ranks' requests)"
    import torch.distributed  # noqa: F401
    threading.stack_size(512 * 1024)  # (1,024 threads)
    print(json.dumps(dict(ready=True)), flush=True)
    _serve(lambda m: _ranks(m['n'], m['port'], m['mode'], m['start']))


def _ranks(n: int, port: int, mode: str, start: float) -> dict:
    "Run `n` ranks from `start` (time.monotonic): when the last one connected and the last one was through"
    go, release, times, errors = threading.Event(), threading.Event(), {}, []
    def one(r):
        go.wait()
        try: t1, t2, held = _rank(r, n, port, mode)
        except Exception as e: errors.append(f"rank {r}: {type(e).__name__}: {e}"); return
        times[r] = t1, t2
        release.wait(TIMEOUT)  # (all at once after: a gloo group ends faster while its peers end too)
        del held
    ts = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(n)]
    for t in ts: t.start()
    time.sleep(max(0., start - time.monotonic())); go.set()
    deadline = time.monotonic() + TIMEOUT
    while len(times) + len(errors) < n and time.monotonic() < deadline: time.sleep(0.01)
    release.set()
    for t in ts: t.join(max(1., deadline - time.monotonic()))
    if errors or len(times) < n: raise RuntimeError(errors[0] if errors else f"{n - len(times)} ranks did not finish in time")
    return dict(connect=max(a for a, _ in times.values()) - start, done=max(b for _, b in times.values()) - start)


def _rank(r: int, n: int, port: int, mode: str) -> tuple:
    "One rank: its store client, ddp_nb's joined key, then the barrier or gloo's exchange; (connected, through, what it holds)"
    from datetime import timedelta
    import torch.distributed as dist
    td = timedelta(seconds=TIMEOUT)
    c = dist.TCPStore('127.0.0.1', port, n, False, td)  # what `rank.init_group` opens (on rank 0 too, here)
    t1 = time.monotonic()
    s = dist.PrefixStore(PREFIX, c)
    s.set(f'ddp_nb/joined/{r}', str(os.getpid()))
    g = dist.PrefixStore('cpu/', dist.PrefixStore('0/', s))  # the default group's prefixes (`_new_process_group_helper`)
    pg = None
    if mode == 'barrier': dist.distributed_c10d._store_based_barrier(r, s, '0', n, td)
    elif mode == 'gloo': _gloo_exchange(dist.PrefixStore('0/', g), r, n)
    else: pg = dist.ProcessGroupGloo(g, r, n, td)  # a real group: its mesh connected on loopback
    return t1, time.monotonic(), (c, pg)


def _gloo_exchange(store, r: int, n: int):
    "gloo's full-mesh rendezvous through the store: set this rank's key, then wait for and get every rank's, in order"
    # (tcp::Context::createAndConnectAllPairs: hostname, device address (136 bytes), one 8-byte pair id per rank)
    store.set(str(r), b'\0' * (16 + len(socket.gethostname()) + 136 + 8 * n))
    for k in range(n):
        store.wait([str(k)]); store.get(str(k))


def rendezvous(store: Worker, ranks: Worker, n: int, mode: str) -> dict:
    "`n` ranks through a fresh store in `mode` ('barrier', 'gloo', 'real'): seconds to connect, to pass, store CPU"
    port = store.ask(op='open', n=n)['port']
    try:
        c0 = _cpu([store.pid])
        a = ranks.ask(TIMEOUT + 30, op='ranks', n=n, port=port, mode=mode, start=time.monotonic() + 0.2 + n / 2000)
        return dict(connect=a['connect'], done=a['done'], server=_cpu([store.pid]) - c0)
    finally: store.ask(op='close')


# ---- part 3: ddp_nb's per-engine work in the kernel ------------------------------------------------------------------

def fake_facts(n: int) -> dict:
    "Engine id -> facts as `rank.engine_info` tells them, for `n` engines, `PER_HOST` to a host with 8 GPUs each"
    out = {}
    for i in range(n):
        h = i // PER_HOST
        ip = f"10.{h // 250}.{h % 250}.1"
        out[i] = dict(host=f"node{h:04d}", hostname=f"node{h:04d}", host_key=f"key-{h}", pid=1000 + i, n_gpus=8,
                      gpu_names=['NVIDIA H100 80GB HBM3'] * 8, n_cpus=64, python='3.11.7', torch='2.13.0', torch_cuda='12.8',
                      nvidia_driver=True, addrs={'lo': ['127.0.0.1'], 'eth0': [ip]}, addr=ip)
    return out


class StubRanks:
    "A `RankSet` whose calls into the engines answer at once: the facts, the store's port, rank 0's route; else None"
    ANSWERS = dict(open_store=29500, route_source='10.0.0.1')

    def __init__(self, facts: dict):
        self.rc = SimpleNamespace(ids=list(facts), _config={'interface': 'tcp://10.0.0.1'})
        self.facts, self.plan, self.me = facts, [], facts[0]['host_key']

    def call_engines(self, ids, fn, *args, **kwargs) -> dict:
        "Every engine's facts"
        return {i: self.facts[i] for i in ids}

    def call(self, fn, *args, ranks=None, each=None, **kwargs) -> dict:
        "rank -> the stub's answer for `fn`"
        rs = list(each) if each is not None else list(ranks) if ranks is not None else range(len(self.plan))
        return {r: self.ANSWERS.get(getattr(fn, '__name__', fn)) for r in rs}


def kernel_work(n: int) -> dict:
    "Seconds of ddp_nb's kernel-side work for `n` engines: plan_group, form_group, collector + first dashboard frame"
    from ddp_nb.group import plan_group, form_group, collector_host
    from ddp_nb.collector import Collector
    from ddp_nb.dashboard import Dashboard
    rs = StubRanks(fake_facts(n))
    t0 = time.perf_counter()
    plan_group(rs)
    t1 = time.perf_counter()
    form_group(rs, None, cluster_id='ddp_nb-1-abcdef')
    t2 = time.perf_counter()
    collector_host(rs)
    col = Collector('127.0.0.1', secrets.token_bytes(32), world=n)
    try:
        d = Dashboard(col, n, task_status=lambda: {r: 'idle' for r in range(n)}, mode='text', out=io.StringIO())
        d.text()
        t3 = time.perf_counter()
        d.close()
    finally: col.close()
    return dict(plan=t1 - t0, form=t2 - t1, dash=t3 - t2, total=t3 - t0)


# ---- the section -------------------------------------------------------------------------------------------------------

def growth(ns: list, ys: list, unit: float = 1e3) -> str:
    "The increase per added engine between successive sizes (in 1/`unit` of the values' unit), ' / '-separated"
    return ' / '.join(f"{unit * (b - a) / (m - k):+.2f}" for k, m, a, b in zip(ns, ns[1:], ys, ys[1:])
                      if not (math.isnan(a) or math.isnan(b))) or '–'


def exponent(ns: list, ys: list) -> float:
    "The growth exponent of the last step with data: log(y2/y1) / log(n2/n1)"
    pts = [(k, y) for k, y in zip(ns, ys) if y > 0 and not math.isnan(y)]
    if len(pts) < 2: return math.nan
    (k1, y1), (k2, y2) = pts[-2:]
    return math.log(y2 / y1) / math.log(k2 / k1)


def at(ns: list, ys: list, n: int) -> tuple:
    "(value at `n`, measured?): measured if `n` was run, else the last step's power law carried on to `n`"
    m = dict(zip(ns, ys))
    if n in m and not math.isnan(m[n]): return m[n], True
    pts = [(k, y) for k, y in zip(ns, ys) if not math.isnan(y)]
    if not pts: return math.nan, False
    k, y = pts[-1]
    e = exponent(ns, ys)
    return y * (n / k) ** (e if not math.isnan(e) else 1.), False


def _fmt(x: float, d: int = 2) -> str:
    "`x` with `d` decimals, '–' for no data"
    return '–' if math.isnan(x) else f"{x:.{d}f}"


def _rotated(sizes: list, r: int) -> list:
    "The sizes in round `r`'s order"
    return sizes[r % len(sizes):] + sizes[:r % len(sizes)]


def _keywise(xs: list) -> dict:
    "key -> median of the dicts `xs` (they share their keys)"
    return {k: med([x[k] for x in xs]) for k in xs[0]}


def _medians(runs: dict) -> dict:
    "size -> key -> median over rounds (nan where a size was not run)"
    return {n: _keywise(xs) if xs else {} for n, xs in runs.items()}


def _col(m: dict, ns: list, key: str) -> list:
    "One measure's medians by size (nan where not run)"
    return [m[n].get(key, math.nan) if m.get(n) else math.nan for n in ns]


def measure(rounds: int, sizes: list) -> tuple:
    "Every part's runs: ({size: [registration]}, {(mode, size): [rendezvous]}, {size: [kernel work]}, gloo's probe or None)"
    reg = {n: [] for n in sizes}
    rdv = {(mode, n): [] for mode in ('barrier', 'gloo', 'real') for n in sizes}
    ker = {n: [] for n in sizes}
    kernel_work(8)  # (imports, first calls: not part of the growth)
    store, ranks = Worker('store', env=TORCH_ENV), Worker('ranks', env=TORCH_ENV)
    try:
        store.answer(); ranks.answer()  # torch imported in both
        rendezvous(store, ranks, 8, 'barrier')  # (first calls: not part of the growth)
        for r in range(rounds):
            for n in _rotated(sizes, r):
                reg[n].append(registration(n))
                print(f"round {r + 1}/{rounds} {n} engines: registered in {reg[n][-1]['wall']:.2f}s", flush=True)
                for mode, top in (('barrier', math.inf), ('gloo', GLOO_MAX), ('real', REAL_GLOO_MAX)):
                    if n <= top: rdv[mode, n].append(rendezvous(store, ranks, n, mode))
                print(f"round {r + 1}/{rounds} {n} ranks: store barrier passed in {rdv['barrier', n][-1]['done']:.2f}s", flush=True)
                ker[n].append(med_of(kernel_work, n, 5))
        probe = rendezvous(store, ranks, GLOO_PROBE, 'gloo') if max(sizes) > GLOO_PROBE > GLOO_MAX else None
    finally:
        store.close(); ranks.close()
    return reg, rdv, ker, probe


def med_of(fn, n: int, times: int) -> dict:
    "Key-wise median of `times` calls of `fn(n)`, each after a garbage collection (the last part's objects are not its)"
    xs = []
    for _ in range(times): gc.collect(); xs.append(fn(n))
    return _keywise(xs)


def run(rounds: int = 3, sizes=(8, 64, 256, 1024)) -> str:
    "The sketch of start-up growth to 1,024 simulated engines, as markdown (nests under section 13)"
    ns = sorted(sizes)
    t0 = time.monotonic()
    reg, rdv, ker, probe = measure(rounds, ns)
    R, K = _medians(reg), _medians(ker)
    D = {mode: _medians({n: rdv[mode, n] for n in ns}) for mode in ('barrier', 'gloo', 'real')}
    secs = time.monotonic() - t0
    return '\n\n'.join([_intro(rounds, ns, secs), _part1(R, ns), _part2(D, ns, probe), _part3(K, ns),
                       _summary(R, D, K, ns, probe)])


def _intro(rounds: int, ns: list, secs: float) -> str:
    "The section's heading and what it measured"
    return ("#### Sketch: 64 to 1,024 simulated engines\n\n"
            f"The parts of a start that grow with the engines, measured with simulated engines against the libraries' own code "
            f"(`benchmarks/startscale.py`: its docstring says how each side is simulated), {', '.join(f'{n:,}' for n in ns)} "
            f"engines, {rounds} round(s) in rotating order, medians; {os.cpu_count()} cores, the simulated engines and ranks on "
            f"the same cores as the controller and the store ({secs:.0f} s in all). Per added engine: the increase between "
            "successive sizes over the engines added (one figure per step, in order); exponent: the growth of the last step "
            "(1 linear, 2 quadratic).")


def _part1(R: dict, ns: list) -> str:
    "Part 1's table: registration"
    keys = ['wall', 'cpu', 'hub', 'heart monitor', 'schedulers', 'idle']
    cols = {k: _col(R, ns, k) for k in keys}
    rows = [[f"{n:,}"] + [_fmt(cols[k][i]) for k in keys] for i, n in enumerate(ns)]
    rows.append(['**per added engine** (ms)'] + [growth(ns, cols[k]) for k in keys])
    rows.append(['**exponent**, last step'] + [_fmt(exponent(ns, cols[k])) for k in keys])
    return ("**1. Registration with the real controller.** From the first registration request to `await_registration` "
            "returning; the controller's CPU seconds over that span, per process; then the heartbeats' cost once every "
            "engine is in (CPU seconds per second, 100 ms heartbeat).\n\n"
            + table(['engines', 'registered in (s)', 'controller CPU (s)', 'hub', 'heart monitor', 'schedulers',
                     'heartbeats (CPU s/s)'], rows))


def _gloo(D: dict, ns: list, probe: dict | None, key: str) -> tuple:
    "(sizes, values) of gloo's exchange, the probe included"
    pts = sorted([(n, y) for n, y in zip(ns, _col(D['gloo'], ns, key)) if not math.isnan(y)]
                 + ([(GLOO_PROBE, probe[key])] if probe else []))
    return [n for n, _ in pts], [y for _, y in pts]


def _part2(D: dict, ns: list, probe: dict | None) -> str:
    "Part 2's table: the rendezvous"
    b, g, r = D['barrier'], D['gloo'], D['real']
    spec = [(b, 'connect'), (b, 'done'), (b, 'server'), (g, 'done'), (g, 'server'), (r, 'done')]
    cols = [_col(m, ns, k) for m, k in spec]
    rows = [[f"{n:,}"] + [_fmt(c[i], 3) for c in cols] for i, n in enumerate(ns)]
    rows.append(['**per added engine** (ms)'] + [growth(ns, c) for c in cols])
    rows.append(['**exponent**, last step'] + [_fmt(exponent(ns, c)) for c in cols])
    return ("**2. The process group's rendezvous through a real TCPStore.** From the start signal; every rank a thread of one "
            "process, the store in another (its CPU: the store server's work, which stays on rank 0's host). Gloo's exchange "
            f"is run up to {GLOO_MAX} ranks, a real gloo group up to {REAL_GLOO_MAX}.\n\n"
            + table(['ranks', 'all connected (s)', 'store barrier passed (s)', 'store CPU (s)', 'gloo exchange done (s)',
                     'store CPU (s)', 'real gloo group (s)'], rows)
            + ('' if probe is None else
               f"\n\nGloo's exchange at {GLOO_PROBE} ranks, one run after the rounds (the step the estimate for 1,024 starts "
               f"from): done in {probe['done']:.2f} s, store CPU {probe['server']:.2f} s; exponents of that step "
               f"{exponent(*_gloo(D, ns, probe, 'done')):.2f} and {exponent(*_gloo(D, ns, probe, 'server')):.2f}."))


def _part3(K: dict, ns: list) -> str:
    "Part 3's table: the kernel's own work"
    keys = ['plan', 'form', 'dash', 'total']
    cols = {k: _col(K, ns, k) for k in keys}
    rows = [[f"{n:,}"] + [_fmt(1e3 * cols[k][i]) for k in keys] for i, n in enumerate(ns)]
    rows.append(['**per added engine** (µs)'] + [growth(ns, cols[k], 1e6) for k in keys])
    rows.append(['**exponent**, last step'] + [_fmt(exponent(ns, cols[k])) for k in keys])
    return ("**3. ddp_nb's work in the kernel.** Fake facts, 8 engines per host; the calls into the engines answered at "
            "once (median of 5 calls per round, each after a garbage collection).\n\n"
            + table(['engines', 'plan_group (ms)', 'form_group, kernel side (ms)',
                     'collector + first dashboard frame (ms)', 'total (ms)'], rows))


def _summary(R: dict, D: dict, K: dict, ns: list, probe: dict | None) -> str:
    "What grows how, and what a start at 1,024 engines would spend in these parts"
    N = 1024
    # (what it takes here, and the work that stays on one host whatever the hosts: controller, store, kernel)
    (gn, gw), (_, gc_) = _gloo(D, ns, probe, 'done'), _gloo(D, ns, probe, 'server')
    parts = [('registration', ns, _col(R, ns, 'wall'), _col(R, ns, 'cpu'), 'controller CPU'),
             ('the store barrier', ns, _col(D['barrier'], ns, 'done'), _col(D['barrier'], ns, 'server'), 'store CPU'),
             ("gloo's address exchange", gn, gw, gc_, 'store CPU'),
             ("ddp_nb's kernel work", ns, _col(K, ns, 'total'), _col(K, ns, 'total'), 'in the kernel')]
    lin = [name for name, xs, _, one, _ in parts if exponent(xs, one) <= 1.3]
    fast = [f"{name} (exponent {exponent(xs, one):.1f})" for name, xs, _, one, _ in parts if exponent(xs, one) > 1.3]
    said, total = [], 0.
    for name, xs, wall, one, what in parts:
        (w, ok), (c, _) = at(xs, wall, N), at(xs, one, N)
        total += w
        said.append(f"{name} {w:.2f} s here ({what} {c:.2f} s)" + ('' if ok else ', carried on from the last step measured'))
    idle = at(ns, _col(R, ns, 'idle'), N)[0]
    return ("Judged by the work that stays on one host (the controller's CPU, the store's CPU, the kernel's time), over the "
            f"last step: about linear: {', '.join(lin) or 'none'}; faster than linear: {', '.join(fast) or 'none'}. Wall "
            "times here include the simulated side (a heart thread per engine, a client thread per rank) on the same 2 "
            "cores, so they grow faster than that work where it is light. Registration grows faster than the engines "
            "because ipyparallel's hub does work over all engines for each one: `Hub.register_engine` checks the new uuid "
            "against every pending registration, and `Hub._save_engine_state` rewrites the JSON file of all registered "
            "engines at each registration (profiled at 1,024 engines while writing this: about a million traitlets reads "
            "from those two loops, 1,024 files written; a file's open costs ~1 ms in this sandbox, less on a plain Linux "
            "host); the heart monitor answers a pong per engine every 100 ms, during registration and after. Gloo's "
            "exchange is quadratic in store requests (every rank waits for and gets every rank's key) and cubic in bytes "
            "(every key holds a pair id per rank), all served by rank 0's one store thread; the store's CPU is that of this "
            "sandbox (gVisor), whose system calls cost more than a plain host's.\n\n"
            f"At 1,024 engines these parts would spend: {'; '.join(said)}: about {total:.0f} s in all here, gloo's exchange "
            f"most of it; after registration the heartbeats keep {idle:.2f} CPU s per second of the controller busy. Not "
            "simulated: the engine processes' own start (a Python process with torch each, on many hosts at that size), "
            "the per-engine calls over ipyparallel (`RankSet.call`: reading the facts, setting up the ranks, forming the "
            "group, connecting the dashboard's reporters), gloo's TCP connections between every pair of ranks, and the "
            "network between hosts.")


def main(argv=None):
    "The command line (and the workers' entry: `--worker ROLE ...`)"
    if argv is None: argv = sys.argv[1:]
    if argv[:1] == ['--worker']:
        role, args = argv[1], argv[2:]
        if role == 'engines': return _engines_worker(args[0], int(args[1]))
        return _store_worker() if role == 'store' else _ranks_worker()
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--sizes', type=int, nargs='+', default=[8, 64, 256, 1024])
    ap.add_argument('--fast', action='store_true', help='8 and 64 engines, one round')
    a = ap.parse_args(argv)
    print(run(1, (8, 64)) if a.fast else run(a.rounds, a.sizes))


if __name__ == '__main__':
    main()
