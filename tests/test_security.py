"""Security defaults of a local cluster: every socket of its processes (controller, engines, nannies, the rank-0
rendezvous store, gloo) and of the kernel side (dashboard collector) is on loopback; the controller's connection files
(which hold the HMAC key) are readable by the owner only; checkpoints load with weights_only=True."""
import os, re, stat
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
    # pushes (cloudpickle over ipyparallel's authenticated channel: rank); checkpoints only through MetadataUnpickler
    unpickles = {(name, m) for name, s in files.items()
                 for m in re.findall(r'\b(?:cloudpickle|pickle|dill|marshal|shelve|joblib)\.(?:loads?|Unpickler|open)\b', s)}
    assert ('sharded.py', 'pickle.Unpickler') in unpickles, unpickles   # the scan sees what it looks for
    assert unpickles <= {('sharded.py', 'pickle.Unpickler'), ('compat_torch.py', 'pickle.loads'), ('rank.py', 'cloudpickle.loads')}, unpickles
    # DCP reads through SafeReader and SafePlanner; its own reader (pickle.load of .metadata) only with trust=True
    dcp_loads = re.findall(r'dcp\.load\(([^\n]*)', src)
    assert dcp_loads and all('storage_reader=reader' in a and 'SafePlanner(reader)' in a for a in dcp_loads), dcp_loads
    readers = [l.strip() for l in src.splitlines() if re.search(r'(?<!class SafeReader\()dcp\.FileSystemReader\(', l)]
    assert readers and all('trust' in l for l in readers), readers
