"""Security defaults of a local cluster: every socket of its processes (controller, engines, nannies, the rank-0
rendezvous store, gloo) and of the kernel side (dashboard collector) is on loopback; the controller's connection files
(which hold the HMAC key) are readable by the owner only; the collector takes only batches signed by the cluster's ranks;
checkpoints load with weights_only=True."""
import io, json, os, re, stat, subprocess, sys, time
from pathlib import Path
import psutil
from ddp_nb import DDPCluster
from ddp_nb.processes import cluster_procs

LOOPBACK = {'127.0.0.1', '::1', '::ffff:127.0.0.1'}


def inet(pid):
    "TCP and UDP sockets of process `pid`"
    return psutil.Process(pid).net_connections(kind='inet')


def test_local_cluster_listens_and_talks_on_loopback_only(no_leftovers):
    with DDPCluster(n=2) as cl:
        procs = cluster_procs(cl.cluster_id)
        assert len(procs) >= 5
        socks = {p.pid: p.net_connections(kind='inet') for p in procs}
        listening = [(pid, c.laddr) for pid, cs in socks.items() for c in cs if c.status == psutil.CONN_LISTEN]
        assert len(listening) >= 10, listening  # controller queues, engines, nannies, store, gloo
        # every socket, listening or connected, TCP or UDP: nothing is bound to 0.0.0.0, :: or an external address
        off = [(pid, c) for pid, cs in socks.items() for c in cs if c.laddr.ip not in LOOPBACK or (c.raddr and c.raddr.ip not in LOOPBACK)]
        assert off == [], off
        # the rendezvous store listens on rank 0, on the port the cluster reports
        r0, r1 = cl.ranks[0].pid, cl.ranks[1].pid
        r0_listen = {c.laddr.port: c.laddr.ip for c in socks[r0] if c.status == psutil.CONN_LISTEN}
        assert r0_listen.get(cl.master_port) in LOOPBACK and cl.master_addr == '127.0.0.1'
        # gloo: the two ranks are connected directly (either may have dialled), not through the store, over loopback
        r1_listen = {c.laddr.port for c in socks[r1] if c.status == psutil.CONN_LISTEN}
        gloo = ([c for c in socks[r1] if c.raddr and c.raddr.port in set(r0_listen) - {cl.master_port}] +
                [c for c in socks[r0] if c.raddr and c.raddr.port in r1_listen])
        assert gloo and all(c.raddr.ip in LOOPBACK for c in gloo), (socks[r0], socks[r1])
        # the kernel side: the dashboard collector listens in this process, on loopback too
        mine = [c for c in inet(os.getpid()) if c.status == psutil.CONN_LISTEN]
        assert mine and all(c.laddr.ip in LOOPBACK for c in mine), mine
        print(f"\n{len(listening)} listening sockets in {len(procs)} cluster processes, all on loopback")


def test_connection_files_are_private(no_leftovers):
    with DDPCluster(n=1) as cl:
        (p,) = {q.environ()['IPP_PROFILE_DIR'] for q in cluster_procs(cl.cluster_id)}
        sec = Path(p) / 'security'
        assert stat.S_IMODE(sec.stat().st_mode) == 0o700
        files = sorted(sec.glob(f'ipcontroller-{cl.cluster_id}-*.json'))
        assert [f.name.rsplit('-', 1)[1] for f in files] == ['client.json', 'engine.json']
        assert all('"key"' in f.read_text() for f in files)  # they hold the key that signs every message
        modes = {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in files}
        assert set(modes.values()) == {'0o600'}, modes
        # no secret anywhere readable by others: whatever else is in the folder, the folder itself is 0700
        for f in sec.iterdir():
            if '"key"' in f.read_text(): assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


def test_checkpoints_load_with_weights_only():
    "Nothing read from a checkpoint is unpickled but by torch.load(weights_only=True) or sharded's restricted unpickler"
    files = {f.name: f.read_text() for f in (Path(__file__).parent.parent / 'ddp_nb').glob('*.py')}
    src = '\n'.join(files.values())
    loads = re.findall(r'torch\.load\(([^\n]*)', src)
    assert loads and all('weights_only=True' in a for a in loads), loads
    # unpickling elsewhere: torch's own flight-recorder dump (bytes from this process: compat_torch) and the kernel's
    # pushes and a heal's skeleton of a survivor's namespace (cloudpickled, over ipyparallel's authenticated channel:
    # rank, heal); checkpoints only through MetadataUnpickler
    unpickles = {(name, m) for name, s in files.items()
                 for m in re.findall(r'\b(?:cloudpickle|pickle|dill|marshal|shelve|joblib)\.(?:loads?|Unpickler|open)\b', s)}
    assert ('sharded.py', 'pickle.Unpickler') in unpickles, unpickles   # the scan sees what it looks for
    assert unpickles <= {('sharded.py', 'pickle.Unpickler'), ('compat_torch.py', 'pickle.loads'), ('rank.py', 'cloudpickle.loads'),
                         ('heal.py', 'pickle.Unpickler')}, unpickles
    # DCP reads through SafeReader and SafePlanner; its own reader (pickle.load of .metadata) only with trust=True
    dcp_loads = re.findall(r'dcp\.load\(([^\n]*)', src)
    assert dcp_loads and all('storage_reader=reader' in a and 'SafePlanner(reader)' in a for a in dcp_loads), dcp_loads
    readers = [l.strip() for l in src.splitlines() if re.search(r'(?<!class SafeReader\()dcp\.FileSystemReader\(', l)]
    assert readers and all('trust' in l for l in readers), readers


def _until(cond, timeout=30, what='condition'):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond(): return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


TRAIN = "import time\nfor i in range(150):\n    report(step=i, loss=1 / (i + 1))\n    time.sleep(0.02)"


def attack(addr, seconds=2.0, prefix=()):
    "Run tests/forge.py against `addr` in another process (in a network namespace with `prefix`); what it sent"
    p = subprocess.run([*prefix, sys.executable, str(Path(__file__).parent / 'forge.py'), addr, str(seconds)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def assert_untouched(cl, sent, rss0, run0=0):
    "Nothing the forger sent was taken; the ranks' own reports were; the kernel's memory stayed bounded"
    col = cl._collector
    _until(lambda: col.dropped['foreign'] + col.dropped['invalid'] >= sent['sent'], what='every forged message counted')
    assert col.dropped['foreign'] == sent['sent'], (col.dropped, sent)   # none of it passed the signature check
    recs = cl.history.records()
    assert {k for r in recs for k in r} == {'run', 'rank', 'step', 'time', 'loss'} and {r['rank'] for r in recs} == set(range(cl.world_size))
    assert max(r['step'] for r in recs) < 10**9 and set(cl.history.runs()) == {run0}   # no forged step, no forged run
    assert psutil.Process().memory_info().rss - rss0 < 200 * 2**20   # a 64 MiB frame was refused unread
    buf = io.StringIO()
    d = cl.dashboard(mode='text', out=buf)
    text = d.text()
    d.close()
    assert f"ignored {sent['sent']:,} messages sent to the dashboard" in text and 'pwned' not in text, text


def test_collector_takes_only_the_clusters_ranks(no_leftovers):
    with DDPCluster(n=2) as cl:
        rss0 = psutil.Process().memory_info().rss
        ar = cl.view.execute(TRAIN, block=False)   # the ranks report while the neighbour attacks
        sent = attack(cl._collector.addr)
        ar.get(timeout=60)
        _until(lambda: all(cl._collector.ranks[r].step == 149 for r in (0, 1)), what="every rank's last step")
        assert_untouched(cl, sent, rss0)
        assert cl._collector.ranks[0].received == cl._collector.ranks[1].received == 150   # nothing of theirs lost
        print(f"\nforger: {sent['sent']:,} messages + one 64 MiB frame; refused {cl._collector.dropped}; "
              f"kernel RSS +{(psutil.Process().memory_info().rss - rss0) / 2**20:.0f} MB")


ROUTE_ATTACK = r'''
import json, sys, time, zmq
from jupyter_client.session import Session
port, marker = int(sys.argv[1]), sys.argv[2]
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.connect(f'tcp://127.0.0.1:{port}')
code = f"open({marker!r}, 'w').write('pwned')"
sent = 0
for key in (b'', b'guessed', b'0' * 64):   # unsigned, and signed with keys that are not the cluster's
    Session(key=key).send(s, 'execute_request', dict(code=code, silent=False)); sent += 1
for frames in ([b'garbage'], [b'<IDS|MSG>', b'', b'{', b'}'], [b'<IDS|MSG>'] + [b'x' * 100] * 5):
    s.send_multipart(frames); sent += 1
for _ in range(2000): s.send_multipart([b'<IDS|MSG>', b'sig', b'{}', b'{}', b'{}', b'{}']); sent += 1   # a flood
s.send(b'x' * (65 << 20)); sent += 1   # above the route's bound: the engine drops the connection unread
got = s.poll(2000)   # nothing comes back to a stranger
print(json.dumps(dict(sent=sent, answered=bool(got))))
'''


def test_cell_route_runs_only_the_clusters_cells(no_leftovers, tmp_path):
    "A neighbour on this host connects to a rank's cell route: nothing it sends runs, is answered or shows"
    marker = tmp_path / 'pwned'
    with DDPCluster(n=2) as cl:
        row = next(r for r in cl.network() if r['what'].startswith('cell routes'))
        ports = [int(a.rsplit(':', 1)[1]) for a in row['address'].split()]
        assert len(ports) == 2 and all(a.startswith('127.0.0.1:') for a in row['address'].split()), row
        pid = cl.ranks[0].pid
        rss0 = psutil.Process(pid).memory_info().rss
        p = subprocess.run([sys.executable, '-c', ROUTE_ATTACK, str(ports[0]), str(marker)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        sent = json.loads(p.stdout.strip().splitlines()[-1])
        assert sent['sent'] > 2000 and not sent['answered'], sent
        route = lambda what: cl.view[f"__import__('ddp_nb.route', fromlist=['_open'])._open[{what!r}]"]
        _until(lambda: route('dropped')[0] >= sent['sent'] - 1, what='every forged message counted')
        assert not marker.exists()
        assert psutil.Process(pid).memory_info().rss - rss0 < 200 * 2**20   # the 65 MiB message was refused unread
        # the ranks serve their notebook's cells as before, by the route; the neighbour's note shows once, not 2,000 times
        before = route('served')
        ar = cl.view.execute("t = torch.ones(1); dist.all_reduce(t); print('sum', t.item())", silent=False, block=True)
        assert [s.strip() for s in ar.stdout] == ['sum 2.0', 'sum 2.0'] and route('served') == [n + 1 for n in before]
        assert sum(o.count('message on the cell route was dropped') for o in ar.stderr) <= 1, ar.stderr
