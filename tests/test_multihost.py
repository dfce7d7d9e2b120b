"""Two hosts on one machine: two network namespaces joined by a veth pair.

Host A is this process's own namespace: the notebook side (this test), the controller listening on A's veth address
only, and two engines, all started by `ipcluster start` as a user would. Host B is a new network namespace with its own
UTS namespace (hostname `ddp-host-b`): two engines started there by hand with the controller's engine connection file
(`ipengine --file=...`). The notebook side then `DDPCluster.attach`es to the four engines.

Why attach and not ipyparallel's ssh launcher: there is no sshd here, and sshd drops the caller's environment, so a
test through it would mostly test sshd's configuration; attaching is also what every launcher ends in (engines
registering with the controller), and it is the path a Slurm job or engines started by hand take. The ssh launcher is
checked separately (`test_ssh_launcher_into_namespace`) with a stand-in for ssh that enters namespace B.

Shown: 4 ranks over 2 hosts with their torchrun variables, MASTER_ADDR = A's veth address, gloo on the veth
interface, no socket of the cluster listening on every interface, a DDP run ending with identical parameters on all
ranks, the death of host B's engines named as host B (engines killed; then, after `cl.restart()` with new engines
started in B, the whole of host B gone: engines and nannies), and the namespaces removed whatever happens.
Needs root (network namespaces); skipped with a message otherwise. Measured times go to build/multihost.json."""
import io, json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import psutil, pytest
from conftest import ROOT, ours, run
from ddp_nb import DDPCluster
from ddp_nb.processes import cluster_procs, kill_procs
from ddp_nb.core import make_cluster_id, name_ranks
from ddp_nb.supervise import RankFailure
from test_security import assert_untouched, attack

IF = 'ddpnb0'                          # the same interface name on both hosts: GLOO_SOCKET_IFNAME is then one name everywhere
A_IP, B_IP = '10.213.7.1', '10.213.7.2'  # a private /24 of the test's own, inside the sandbox
B_NAME = 'ddp-host-b'
MEASURED = {}


@pytest.fixture(scope='module', autouse=True)
def measured():
    yield
    if MEASURED:
        (ROOT / 'build').mkdir(exist_ok=True)
        (ROOT / 'build' / 'multihost.json').write_text(json.dumps(MEASURED, indent=1))
        print(json.dumps(MEASURED, indent=1))


def sh(*cmd, check=True):
    return run(cmd, check=check, timeout=120)


def _why_not():
    "Why network namespaces cannot be used here (None if they can)"
    if sys.platform != 'linux': return 'network namespaces are Linux only'
    if os.geteuid() != 0: return 'needs root to create network namespaces (run the test as root, e.g. in CI)'
    for tool in ('ip', 'unshare'):
        if shutil.which(tool) is None: return f"needs `{tool}` (iproute2 / util-linux)"
    return None


@pytest.fixture
def netns():
    "Namespace B joined to this one by a veth pair named IF on both ends; always removed"
    why = _why_not()
    if why: pytest.skip(f"multi-host namespace test skipped: {why}")
    ns = f"ddpnb-b-{os.getpid()}"
    r = sh('ip', 'netns', 'add', ns, check=False)
    if r.returncode: pytest.skip(f"multi-host namespace test skipped: `ip netns add` failed ({r.stderr.strip()}); needs CAP_SYS_ADMIN")
    try:
        sh('ip', 'link', 'add', IF, 'type', 'veth', 'peer', 'name', 'ddpnb0b', 'netns', ns)
        sh('ip', '-n', ns, 'link', 'set', 'ddpnb0b', 'name', IF)
        sh('ip', 'addr', 'add', f'{A_IP}/24', 'dev', IF); sh('ip', 'link', 'set', IF, 'up')
        sh('ip', '-n', ns, 'addr', 'add', f'{B_IP}/24', 'dev', IF); sh('ip', '-n', ns, 'link', 'set', IF, 'up')
        sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')  # lo starts down in a new namespace: the nanny and gloo's local pairs need it
        yield ns
    finally:
        sh('ip', 'netns', 'del', ns, check=False)  # takes the veth pair with it
        sh('ip', 'link', 'del', IF, check=False)
        assert IF not in sh('ip', '-o', 'link').stdout and ns not in sh('ip', 'netns', 'list').stdout


class HostB:
    "Engines started by hand in namespace B, with their own hostname"
    def __init__(self, ns, cluster_id):
        self.ns, self.cluster_id, self.procs = ns, cluster_id, []

    def start_engines(self, n, engine_file):
        env = {**os.environ, 'IPP_CLUSTER_ID': self.cluster_id}  # so that this test (and `ddp_nb cleanup`) finds them
        for _ in range(n):
            cmd = ['ip', 'netns', 'exec', self.ns, 'unshare', '--uts', 'sh', '-c',
                   f'hostname {B_NAME} && exec "$0" -m ipyparallel.engine --file="$1" --log-level=ERROR', sys.executable, engine_file]
            self.procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))

    def kill_all(self):
        "Host B goes down: every process there (engines and their nannies, which run in sessions of their own), at once"
        procs = []
        for p in self.procs:
            try: procs += [psutil.Process(p.pid)] + psutil.Process(p.pid).children(recursive=True)
            except psutil.Error: pass
        for act in ('suspend', 'kill'):  # every one frozen first: no nanny sees its engine die and tells the controller
            for q in procs:
                try: getattr(q, act)()
                except psutil.Error: pass
        for p in self.procs: p.wait(10)

    def sockets(self, pids):
        "Listening sockets of `pids`, seen from inside B (psutil reads the namespace of the process that asks)"
        code = ("import json, psutil, sys\nout = []\nfor pid in map(int, sys.argv[1:]):\n    try: cs = psutil.Process(pid).net_connections('inet')\n"
                "    except psutil.Error: continue\n    out += [[pid, c.laddr.ip, c.laddr.port] for c in cs if c.status == psutil.CONN_LISTEN]\nprint(json.dumps(out))")
        return json.loads(sh('ip', 'netns', 'exec', self.ns, sys.executable, '-c', code, *map(str, pids)).stdout)


def listening_here(pids):
    import psutil
    out = []
    for pid in pids:
        try: out += [(pid, c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections('inet') if c.status == psutil.CONN_LISTEN]
        except psutil.Error: pass
    return out


def start_engine_here(cluster_id, engine_file):
    "An engine started by hand on host A"
    subprocess.Popen([sys.executable, '-m', 'ipyparallel.engine', f'--file={engine_file}', '--log-level=ERROR'],
                     env={**os.environ, 'IPP_CLUSTER_ID': cluster_id}, start_new_session=True)


def wait_file(path, timeout=60):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout}s"
        time.sleep(0.1)


def train_cell(cl):
    "A %%px cell's worth of DDP training (digits, 2 epochs), supervised as %%px supervises it"
    ar = cl.view.execute("from ddp_nb.digits import train\nres = train(epochs=2, seed=0)", block=False)
    cl.supervise(ar)
    return cl.view['res']


def run_until_failure(cl, kill):
    "Run all-reduces on every rank, call `kill()` after 1 s, return (seconds from the kill to the error, the error)"
    ar = cl.view.execute("import time\nfor i in range(10**6): t = torch.ones(1); dist.all_reduce(t); time.sleep(0.005)", block=False)
    time.sleep(1.0)
    t_kill = time.monotonic(); kill()
    with pytest.raises(RankFailure) as ei: cl.supervise(ar)
    return time.monotonic() - t_kill, str(ei.value)


@pytest.mark.timeout(300)
def test_two_hosts_in_network_namespaces(netns, no_leftovers):
    cid = make_cluster_id(os.getpid(), 'mhost')
    ipdir = Path(os.environ['IPYTHONDIR'])
    engine_file = ipdir / 'profile_default' / 'security' / f'ipcontroller-{cid}-engine.json'
    b = HostB(netns, cid)
    t0 = time.monotonic()
    # host A: what a user types, with the controller on A's veth address only
    ipc = subprocess.Popen([sys.executable, '-m', 'ipyparallel.cluster', 'start', '-n', '2', f'--ip={A_IP}', f'--cluster-id={cid}',
                            '--delay=0', '--log-level=ERROR', '--Cluster.controller_args=--HeartMonitor.period=200',
                            '--Cluster.controller_args=--HeartMonitor.max_heartmonitor_misses=50'],  # as DDPCluster sets them
                           env={**os.environ, 'IPP_CLUSTER_ID': cid}, start_new_session=True)
    cl = None
    try:
        wait_file(engine_file)
        b.start_engines(2, str(engine_file))
        t_attach = time.monotonic()
        cl = DDPCluster.attach(cluster_id=cid, n=4, wait=120)
        MEASURED['4 ranks on 2 hosts: ipcluster start to DDP ready (s)'] = round(time.monotonic() - t0, 2)
        MEASURED['... of which DDPCluster.attach (s)'] = round(time.monotonic() - t_attach, 2)
        print(cl)

        # ranks grouped by host, the notebook's host first; local ranks within each host
        me = os.uname().nodename
        assert [(r.rank, r.host, r.local_rank) for r in cl.ranks] == [(0, me, 0), (1, me, 1), (2, B_NAME, 0), (3, B_NAME, 1)]
        cl.view.execute("import os, socket\nenv = {k: os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', "
                        "'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'GLOO_SOCKET_IFNAME', 'NCCL_SOCKET_IFNAME')}\n"
                        "facts = (socket.gethostname(), os.readlink('/proc/self/ns/net'))")
        env = cl.view['env']
        assert [(e['RANK'], e['LOCAL_RANK'], e['GROUP_RANK']) for e in env] == [('0', '0', '0'), ('1', '1', '0'), ('2', '0', '1'), ('3', '1', '1')]
        assert {(e['WORLD_SIZE'], e['LOCAL_WORLD_SIZE']) for e in env} == {('4', '2')}
        # MASTER_ADDR: A's veth address, which B reaches (never 127.0.0.1 across hosts); gloo and nccl on the veth
        assert cl.master_addr == A_IP and {e['MASTER_ADDR'] for e in env} == {A_IP}
        assert {e['MASTER_PORT'] for e in env} == {str(cl.master_port)}
        assert {(e['GLOO_SOCKET_IFNAME'], e['NCCL_SOCKET_IFNAME']) for e in env} == {(IF, IF)}
        # B really is another host: its own hostname and network namespace
        facts = cl.view['facts']
        assert facts[0] == facts[1] and facts[2] == facts[3] and facts[0] != facts[2] and facts[0][1] != facts[2][1]

        # what listens where: nothing of the cluster on every interface; the store on A's veth address; the collector too
        pids_a = [p.pid for p in cluster_procs(cid) if p.pid not in (ipc.pid,)] + [os.getpid()]
        pids_b = [r.pid for r in cl.ranks[2:]]
        la, lb = listening_here(pids_a), b.sockets(pids_b)
        wild = [s for s in la + [tuple(x) for x in lb] if s[1] in ('0.0.0.0', '::')]
        assert wild == [], wild
        assert (cl.ranks[0].pid, A_IP, cl.master_port) in la
        assert cl._collector.addr.startswith(f'tcp://{A_IP}:')
        assert {ip for _, ip, _ in lb} <= {B_IP, '127.0.0.1'} and B_IP in {ip for _, ip, _ in lb}  # B's gloo listens on its veth
        rows = {(r['what'].split()[0], r['host']): r['address'] for r in cl.network()}  # what the user is told, checked
        assert rows == {('ipyparallel', me): A_IP, ('rendezvous', me): f'{A_IP}:{cl.master_port}', ('gloo', me): f'{IF} {A_IP}',
                        ('gloo', B_NAME): f'{IF} {B_IP}', ('dashboard', me): cl._collector.addr.replace('tcp://', ''),
                        ('cell', me): ' '.join(f"127.0.0.1:{r.facts['route']}" for r in cl.ranks[:2])}, rows
        # a cell goes by the route to A's ranks (this notebook's host), through the controller to B's
        cl.view.execute("x = 1")
        served = cl.view["__import__('ddp_nb.route', fromlist=['_open'])._open['served']"]
        assert served[0] > 0 and served[1] > 0 and served[2:] == [0, 0], served
        MEASURED['listening sockets: host A (controller, engines, nannies, store, gloo, collector)'] = len(la)
        MEASURED['listening sockets: host B (engines, nannies, gloo)'] = len(lb)

        # the dashboard's view of the ranks: every rank reports, from its own host
        cl.view.execute("for i in range(20): report(step=i, loss=1.0 / (i + 1))")
        time.sleep(0.5)
        assert sorted({r['rank'] for r in cl.history.records()}) == [0, 1, 2, 3]
        assert cl._ranks.status() == {0: 'idle', 1: 'idle', 2: 'idle', 3: 'idle'}
        assert all(cl._collector.ranks[r].load.get('rss') for r in range(4))  # load sampled on each rank's own host
        dash = cl.dashboard(mode='text', out=io.StringIO())
        assert set(dash._statuses().values()) <= {'running', 'idle'}  # B's pids are not looked up on A (none 'dead')
        dash.close()

        # another machine on the network (a process in B's namespace that is no engine) forges batches to the collector
        rss0 = psutil.Process().memory_info().rss
        sent = attack(cl._collector.addr, 1.0, prefix=('ip', 'netns', 'exec', netns))
        assert_untouched(cl, sent, rss0)
        MEASURED['forged messages from the network refused (all of them)'] = sent['sent']

        # a DDP run over both hosts ends with bit-identical parameters on every rank
        t = time.monotonic()
        res = train_cell(cl)
        MEASURED['DDP digits, 2 epochs on 4 ranks over the veth (s)'] = round(time.monotonic() - t, 2)
        assert len({r['digest'] for r in res}) == 1, [r['digest'] for r in res]
        assert res[0]['losses'][-1] < res[0]['losses'][0]

        # cl.where(): stacks of ranks on this host; the others say why not, naming their host
        stacks = cl.where(show=False)
        assert 'on host ddp-host-b' in stacks[2] and 'on host ddp-host-b' in stacks[3]

        # host B's engines are killed (kill -9): named as host B
        took, msg = run_until_failure(cl, lambda: [os.kill(r.pid, signal.SIGKILL) for r in cl.ranks[2:]])
        print(msg)
        MEASURED["host B's engines killed: error naming host B (s)"] = round(took, 2)
        assert msg.startswith(f'Host {B_NAME}: every rank there (ranks 2, 3) ended'), msg
        assert took < 30, took
        # a rank of host A left waiting in the all-reduce for a partner that had failed (gloo cannot release it) is ended
        ended_a = [r for r, st in cl._ranks.status().items() if r < 2 and st == 'dead']
        assert f"cl.restart() replaces {name_ranks(ended_a + [2, 3])}" in msg, msg

        # recovery: engines started by hand where ranks were lost (host B, and A for an ended rank) replace them
        b.start_engines(2, str(engine_file))
        for _ in ended_a: start_engine_here(cid, engine_file)
        t = time.monotonic()
        cl.restart()
        MEASURED['restart with new engines started by hand on both hosts (s)'] = round(time.monotonic() - t, 2)
        assert [(r.rank, r.host, r.local_rank) for r in cl.ranks] == [(0, me, 0), (1, me, 1), (2, B_NAME, 0), (3, B_NAME, 1)]
        assert cl.check()
        for r in {0, 1} - set(ended_a): assert cl.pull('res', rank=r)['digest'] == res[0]['digest']  # a survivor kept its namespace
        if {0, 1} - set(ended_a):  # a new engine on host B is healed from a survivor on host A, over the gloo group
            assert cl.pull('res', rank=2)['digest'] == res[0]['digest']
        else: assert cl.pull("'res' in globals()", rank=2) is False  # no survivor: a new engine starts empty

        # the world grows onto host B: an engine started there by hand joins as rank 4, healed from rank 0; then it leaves
        b.start_engines(1, str(engine_file))
        t = time.monotonic()
        cl.resize(5)
        MEASURED['resize 4 → 5 with an engine started by hand on host B (s)'] = round(time.monotonic() - t, 2)
        assert [(r.rank, r.host, r.local_rank) for r in cl.ranks][2:] == [(2, B_NAME, 0), (3, B_NAME, 1), (4, B_NAME, 2)]
        assert cl.check() and cl.pull('rank', rank=4) == 4
        cl.resize(4)
        assert cl.world_size == 4 and cl.check()

        # then host B goes down whole (engines and nannies): the ranks there stop answering, named as host B
        took, msg = run_until_failure(cl, b.kill_all)
        print(msg)
        MEASURED["host B gone (engines and nannies killed): error naming host B (s)"] = round(took, 2)
        assert msg.startswith(f'Host {B_NAME} (ranks 2, 3) stopped answering'), msg
        assert took < 30, took
    finally:
        if cl is not None: cl.stop(shutdown=True)
        b.kill_all()
        try: os.killpg(ipc.pid, signal.SIGTERM); ipc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired): pass
        kill_procs(cluster_procs(cid), grace=1)


FAKE_SSH = """#!/bin/sh
# A stand-in for ssh: `ssh [options] HOST COMMAND...` runs COMMAND on HOST, which is namespace B for {b_ip} (with its
# own hostname) and this namespace otherwise; like sshd, it gives COMMAND a fresh environment, not the caller's.
while :; do case "$1" in -p|-o|-i|-l|-F) shift 2;; -*) shift;; *) break;; esac; done
host=${{1#*@}}; shift
if [ "$host" = "{b_ip}" ]; then pre="ip netns exec {ns} unshare --uts"; name={b_name}; else pre=""; name=""; fi
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" SHELL=/bin/bash $pre sh -c 'if [ -n "$0" ]; then hostname "$0"; fi; exec bash -c "$1"' "$name" "$*"
"""
FAKE_SCP = """#!/bin/sh
# A stand-in for scp between hosts that share one filesystem: host: prefixes are dropped
while :; do case "$1" in -P|-o|-i|-F) shift 2;; -*) shift;; *) break;; esac; done
src=${1#*:}; dst=${2#*:}
[ "$src" -ef "$dst" ] || cp "$src" "$dst"
"""


@pytest.mark.timeout(240)
def test_ssh_launcher_into_namespace(netns, no_leftovers, tmp_path):
    "DDPCluster(engines='ssh', hosts=[A, B]) through ipyparallel's ssh launcher, with ssh replaced by a stand-in that enters B"
    from traitlets.config import Config
    ssh, scp = tmp_path / 'ssh', tmp_path / 'scp'
    ssh.write_text(FAKE_SSH.format(b_ip=B_IP, ns=netns, b_name=B_NAME)); scp.write_text(FAKE_SCP)
    ssh.chmod(0o755); scp.chmod(0o755)
    c = Config()
    c.SSHLauncher.ssh_cmd, c.SSHLauncher.scp_cmd = [str(ssh)], [str(scp)]
    t0 = time.monotonic()
    # n=None: one engine per GPU on each host, counted there over ssh (no GPU here: 2 CPU engines each);
    # env: what the engines need, since ssh does not pass this process's environment; the controller's address is
    # found from the route to the hosts (A's veth address)
    cl = DDPCluster(engines='ssh', hosts=[A_IP, B_IP], env={'PYTHONPATH': str(ROOT), 'IPYTHONDIR': os.environ['IPYTHONDIR']}, config=c)
    assert cl.ipp_kwargs['controller_ip'] == A_IP
    try:
        cl.start()
        MEASURED['ssh launcher: 4 ranks on 2 hosts started (s)'] = round(time.monotonic() - t0, 2)
        me = os.uname().nodename
        assert cl.per_host == {A_IP: 2, B_IP: 2}
        assert [(r.rank, r.host, r.local_rank) for r in cl.ranks] == [(0, me, 0), (1, me, 1), (2, B_NAME, 0), (3, B_NAME, 1)]
        assert cl.master_addr == A_IP and set(cl.view['__import__("os").environ["MASTER_ADDR"]']) == {A_IP}
        assert set(cl.view['__import__("ddp_nb").__file__']) == {str(ROOT / 'ddp_nb' / '__init__.py')}  # env= reached them
        cl.view.execute("t = torch.tensor([float(rank)]); dist.all_reduce(t)")
        assert cl.view['t.item()'] == [6.0] * 4
    finally:
        cl.stop()
    time.sleep(1)
    assert [p for p in ours()] == []
