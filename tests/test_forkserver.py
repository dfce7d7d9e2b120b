"""The fork server (ddp_nb.forkserver) with real engines: engines are its children, their exit statuses reach the kernel,
a forged request is refused, a killed server falls back to starting engines as before, random state is not shared, and
start/stop leaves no process, thread or file descriptor behind. Its warm copy (imports `LATER` while the server forks on,
then forks the next engines) with stand-in engines: requests are never held up by the import, exits are reported
whoever forked the engine, even after the copy is killed."""
import json, os, signal, socket, subprocess, sys, threading, time
import psutil, pytest
from conftest import ours
from ddp_nb import DDPCluster
from ddp_nb.forkserver import LATER, MAX_MSG, ForkServerError, encode, few_cores, fork_server
from ddp_nb.processes import cluster_procs


@pytest.fixture(autouse=True)
def _fork_server_on(monkeypatch):
    "These tests are about the fork server (on by default; on here whatever the environment says)"
    monkeypatch.setenv('DDP_NB_FORK_SERVER', '1')


def wait_until(cond, limit=30., what='condition'):
    "Poll `cond` until true; fail after `limit` s"
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {limit:g}s"
        time.sleep(0.05)


def parent(pid): return psutil.Process(pid).ppid()


def warm_copies(pid):
    "The warm copies among the children of fork server `pid`"
    return [c for c in psutil.Process(pid).children() if '--warm-copy' in c.cmdline()]


def forkers(srv):
    "The fork server's pid and its warm copy's (if it has one now): an engine's parent is one of them"
    return {srv.proc.pid, *(c.pid for c in warm_copies(srv.proc.pid))}


@pytest.fixture(scope='module')
def cl():
    assert ours() == [], "processes from an earlier test are still running"
    c = DDPCluster(n=2, fork_server=True).start()
    yield c
    cid = c.cluster_id
    c.stop()
    assert cluster_procs(cid) == [], "the cluster left processes behind"


def forged(srv, raw: bytes, rid: int, limit: float = 10.) -> dict:
    "Send `raw` on the server's channel as the kernel would and wait for the answer to request `rid`"
    with srv._send_lock: srv.sock.sendall(raw)
    deadline = time.monotonic() + limit
    with srv._cv:
        while rid not in srv._answers and time.monotonic() < deadline: srv._cv.wait(0.2)
        return srv._answers.pop(rid, None)


def test_engines_and_nannies_are_forked(cl):
    srv = fork_server(cl.cluster_id)
    assert srv is not None and srv.proc.poll() is None
    pids = cl.run(os.getpid)
    assert [parent(p) for p in pids] == [srv.proc.pid] * 2, "each engine is a child of the fork server"
    for p in pids:  # a separate process each, with its own session and its engine's command line
        assert os.getsid(p) == p
        assert 'processes import engine_main' in ' '.join(psutil.Process(p).cmdline())
        nannies = psutil.Process(p).children()
        assert any('ipyparallel.engine.nanny' in ' '.join(n.cmdline()) for n in nannies), nannies


def test_the_controller_is_forked_before_torch_where_cores_are_few(cl, monkeypatch):
    """Where cores are few (2 here), the controller is the fork server's child too, forked between its imports: its own
    command, its own session, and no torch in it (it never needs it); with more, it starts as its own Python, beside"""
    from ddp_nb.compat_ipp import controller_process
    assert few_cores() == (len(os.sched_getaffinity(0)) < 3)
    srv, ctl = fork_server(cl.cluster_id), controller_process(cl._ipp)
    assert ctl.ppid() == (srv.proc.pid if few_cores() else os.getpid()) and os.getsid(ctl.pid) == ctl.pid
    assert 'controller_main' in ' '.join(ctl.cmdline())
    assert not any('libtorch' in m.path for m in ctl.memory_maps()), "the controller was forked after torch's import"
    assert any('libtorch' in m.path for m in psutil.Process(cl.run(os.getpid)[0]).memory_maps())  # (the engines have it)
    monkeypatch.setattr('ddp_nb.engines.few_cores', lambda: not few_cores())  # the other way, whatever the cores
    with DDPCluster(n=1) as c:
        ctl = controller_process(c._ipp)
        assert ctl.ppid() == (os.getpid() if few_cores() else fork_server(c.cluster_id).proc.pid)
        # (the launcher that forks it where the server has the controller's app: a standby's, whatever the cores)
        assert type(c._ipp.controller).__name__ == 'ForkControllerLauncher'

        assert c.run('t = torch.ones(1); dist.all_reduce(t)\n_v = t.item()') is None and c.pull('_v') == 1.


def test_no_shared_random_state_and_seeding_unchanged(cl):
    fresh = cl.run('import random, numpy, torch\n_r = (random.random(), float(numpy.random.rand()), torch.rand(1).item())')
    draws = [cl.pull('_r', rank=r) for r in range(2)]
    assert len({d[0] for d in draws}) == 2 and len({d[1] for d in draws}) == 2 and len({d[2] for d in draws}) == 2, draws
    import random, numpy, torch
    random.seed(5); torch.manual_seed(5); numpy.random.seed(5)
    want = [random.random(), float(numpy.random.rand()), torch.rand(1).item()]
    cl.run('from ddp_nb.seeding import seed_everything\nseed_everything(5)\n'
           '_s = [random.random(), float(numpy.random.rand()), torch.rand(1).item()]')
    assert [cl.pull('_s', rank=r) for r in range(2)] == [want, want]


def test_threads_set_and_openmp_works_after_fork(cl):
    cl.run("import os, torch\n_t = (os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())")
    got = [cl.pull('_t', rank=r) for r in range(2)]
    assert all(e == str(t) and t >= 1 for e, t in got), got
    # a parallel region in a forked engine (OpenMP was loaded, never run, in the server): no hang
    cl.run('_m = float(torch.ones(256, 256).matmul(torch.ones(256, 256)).sum())', block=True, timeout=60)
    assert [cl.pull('_m', rank=r) for r in range(2)] == [256. ** 3] * 2


def test_forged_messages_are_refused(cl, tmp_path):
    srv = fork_server(cl.cluster_id)
    marker = tmp_path / 'ran'
    bad = dict(op='spawn', id=9001, argv=['/bin/sh', '-c', f'touch {marker}'], env={}, cwd=str(tmp_path),
               output_file=str(tmp_path / 'o.log'))
    got = forged(srv, encode(bad), 9001)
    assert got and got['op'] == 'refused' and 'engine command' in got['why'], got
    got = forged(srv, json.dumps({**bad, 'id': 9002, 'extra': 1}).encode(), 9002)
    assert got and got['op'] == 'refused', got
    assert forged(srv, b'\x80not json', -1)['op'] == 'refused'
    assert forged(srv, b' ' * (MAX_MSG + 1), -1)['op'] == 'refused'  # too long
    time.sleep(0.3)
    assert not marker.exists() and srv.proc.poll() is None, "nothing ran, and the server still serves"
    engines = [c for c in psutil.Process(srv.proc.pid).children(recursive=True) if 'engine_main' in ' '.join(c.cmdline())]
    assert len(engines) == 2, engines


def test_exit_status_reported_and_restart_forks(cl):
    srv = fork_server(cl.cluster_id)
    pid = cl._ranks.plan[1].pid
    os.kill(pid, signal.SIGKILL)
    assert srv.wait_exit(pid, 30) == -signal.SIGKILL
    assert cl._death(1, pid).startswith('killed by SIGKILL')
    cl.restart()
    new = cl.run(os.getpid, ranks=1)[0]
    assert new != pid and parent(new) in forkers(srv)
    assert cl.run('t = torch.ones(1); dist.all_reduce(t)\n_v = t.item()') is None and cl.pull('_v') == 2.
    # an engine that exits with a status of its own
    cl.run('import os, threading; threading.Timer(0.2, os._exit, [3]).start()', ranks=1)
    assert srv.wait_exit(new, 30) == 3
    wait_until(lambda: cl._ranks.gone() == [1], what='rank 1 seen gone')
    assert cl._death(1, new) == 'exited with status 3'
    cl.restart()


def test_idle_server_imports_ahead_for_replacements(cl):
    "Once idle, the server imports what a rank's records import later: a replacement is forked with it, the first not"
    srv = fork_server(cl.cluster_id)
    assert srv.wait_later(90) == list(LATER) and srv.proc.poll() is None
    pid = cl._ranks.plan[1].pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(pid), what='the killed engine gone')
    cl.restart()
    cl.run('import ddp_nb.forkserver as _f; _w = list(_f.forked_with)')
    # (the first engines have none of them: the controller forked first imports its app itself)
    assert (cl.pull('_w', rank=0), cl.pull('_w', rank=1)) == ([], list(LATER))
    (copy,) = warm_copies(srv.proc.pid)   # the replacement was forked by the server's warm copy, which imported LATER
    assert parent(cl.run(os.getpid, ranks=1)[0]) == copy.pid
    assert cl.run('t = torch.ones(1); dist.all_reduce(t)\n_v = t.item()') is None and cl.pull('_v') == 2.


def test_killed_server_falls_back(cl, caplog):
    srv = fork_server(cl.cluster_id)
    old = cl.run(os.getpid)
    srv.proc.kill()
    wait_until(lambda: srv.gone.is_set(), what='the kernel noticing its fork server is gone')
    with pytest.raises(ForkServerError, match='is gone'): srv.spawn(['x'], {}, '.', '/tmp/x')
    assert all(psutil.pid_exists(p) for p in old), "the engines outlive their server (the cluster's stop ends them)"
    os.kill(old[1], signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(old[1]), what='the killed engine gone')
    assert cl._death(1, old[1]) == 'died (exit status unknown)'  # its status went with the server
    with caplog.at_level('WARNING', logger='ddp_nb.forkserver'): cl.restart()
    assert 'is gone' in caplog.text and 'starts without it' in caplog.text, caplog.text
    new = cl.run(os.getpid, ranks=1)[0]
    assert parent(new) == os.getpid(), "a replacement starts as before, a child of the kernel"
    cl.run('t = torch.ones(1); dist.all_reduce(t)')


def _threads_fds():
    return ({t.name for t in threading.enumerate() if t.name.startswith('ddp_nb-fork-server')},
            len(os.listdir('/proc/self/fd')))


def test_start_stop_leaks_nothing():
    DDPCluster(n=1).start().stop()  # (the first start opens what ipyparallel keeps for good)
    before = _threads_fds()
    for _ in range(2):
        c = DDPCluster(n=1).start()
        srv, cid = fork_server(c.cluster_id), c.cluster_id
        assert srv is not None
        c.stop()
        assert srv.proc.poll() is not None and fork_server(cid) is None and cluster_procs(cid) == []
    assert _threads_fds() == before


def test_a_fork_server_stopped_leaves_the_controller_running():
    """A fork server stopped while its cluster runs (an engine it could not fork) ends the engines it forked, never the
    controller: the cluster still serves, replaces the rank without it, and its stop leaves nothing"""
    from ddp_nb.compat_ipp import controller_process
    from ddp_nb.forkserver import stop_fork_server
    c = DDPCluster(n=1).start()
    try:
        ctl, cid = controller_process(c._ipp), c.cluster_id
        assert stop_fork_server(cid) and fork_server(cid) is None
        wait_until(lambda: c._ranks.gone() == [0], what='the forked engine ended with its server')
        assert ctl.is_running() and ctl.status() != psutil.STATUS_ZOMBIE, "the controller ended with the fork server"
        c.restart()
        new = c.run(os.getpid)[0]
        assert parent(new) == os.getpid() and c.run('t = torch.ones(1); dist.all_reduce(t)\n_v = t.item()') is None
    finally: c.stop()
    assert cluster_procs(cid) == [] and not ctl.is_running()


def test_a_start_that_fails_in_set_up_leaves_no_server():
    """The fork server is started before ipyparallel's Cluster is made: a Cluster that cannot be made (a bad option)
    ends it too, with its reader thread and channel"""
    before = _threads_fds()
    kids = {p.pid for p in psutil.Process().children()}
    with pytest.raises(Exception, match='profile_dir'): DDPCluster(n=1, profile_dir=12345).start()
    assert {p.pid for p in psutil.Process().children()} - kids == set() and _threads_fds() == before


def test_switch_off(monkeypatch):
    c = DDPCluster(n=1, fork_server=False).start()
    try:
        assert fork_server(c.cluster_id) is None and parent(c.run(os.getpid)[0]) == os.getpid()
    finally: c.stop()
    monkeypatch.setenv('DDP_NB_FORK_SERVER', '0')
    c = DDPCluster(n=1).start()
    try: assert fork_server(c.cluster_id) is None
    finally: c.stop()


# A "kernel" that starts a cluster, as a restarted notebook does: its own process, its own cluster
KERNEL = r'''
import json, os, sys, time
import torch.distributed  # (only to read the cluster's all_reduce below: the ranks have torch anyway)
from ddp_nb import DDPCluster
from ddp_nb.forkserver import fork_server, standbys
from ddp_nb.processes import cluster_procs
before = {p.pid for p in standbys(os.environ['IPYTHONDIR'])}
cl = DDPCluster(n=2, keep_warm=float(sys.argv[1])).start()
srv = fork_server(cl.cluster_id)
new = []
if sys.argv[2] == 'leave':  # wait until the idle server has left its standby
    deadline = time.monotonic() + 60
    while not new and time.monotonic() < deadline:
        time.sleep(0.1); new = [p for p in standbys(os.environ['IPYTHONDIR']) if p.pid not in before]
    new = [(p.pid, [c.laddr for c in p.net_connections('unix') if c.laddr.endswith('.sock')]) for p in new]
cl.view.execute("t = torch.ones(1); dist.all_reduce(t)", block=True)
import psutil
from ddp_nb.compat_ipp import controller_process
print(json.dumps(dict(cid=cl.cluster_id, server=srv.pid, server_parent=psutil.Process(srv.pid).ppid(), me=os.getpid(),
                      controller_parent=controller_process(cl._ipp).ppid(), parents=cl.view.apply_sync(os.getppid), later=srv.later,
                      sum=cl.view['int(t.item())'], found=sorted(p.pid for p in cluster_procs(cl.cluster_id)),
                      standbys=[p.pid for p in standbys(os.environ['IPYTHONDIR'])], new=new,
                      phases={k: round(v, 2) for k, v in cl.start_phases.items})), flush=True)
if sys.argv[2] == 'die': os.kill(os.getpid(), 9)  # the kernel killed: its owner watches end the cluster
cl.stop()
'''


def kernel(tmp_path, warm: float, then: str = 'stop', **env) -> dict:
    "Run `KERNEL` in a process of its own (as a restarted notebook's kernel): what it saw"
    import sys
    from conftest import run
    f = tmp_path / 'kernel.py'; f.write_text(KERNEL)
    r = run([sys.executable, str(f), str(warm), then], timeout=180, env={**os.environ, **env}, check=then != 'die')
    return json.loads(r.stdout.strip().splitlines()[-1])


def socket_of(p) -> str:
    "The socket a standby listens on"
    (path,) = [c.laddr for c in p.net_connections('unix') if c.laddr.endswith('.sock')]
    return path


@pytest.fixture
def no_standby():
    "No standby of this session's before the test, none after it (ended either way)"
    from ddp_nb.forkserver import standbys, stop_standbys
    ipd = os.environ['IPYTHONDIR']
    assert standbys(ipd) == []
    yield ipd
    stop_standbys(ipd)


def test_a_standby_serves_the_next_kernel_warm_and_ends_when_idle(tmp_path, no_standby):
    from ddp_nb.forkserver import standbys, stop_standbys
    a = kernel(tmp_path, 60, 'leave')   # the first kernel: a cold start; its idle server leaves a standby
    assert a['sum'] == [2, 2] and a['server_parent'] == a['me'] and all(p == a['server'] for p in a['parents']), a
    assert len(a['standbys']) == 1 and a['new'][0][0] == a['standbys'][0], a
    (sb,) = standbys(no_standby)
    assert sb.pid == a['standbys'][0] and sb.pid != a['server'] and cluster_procs(a['cid']) == []  # its cluster is gone, not it
    env = sb.environ()
    assert 'IPP_CLUSTER_ID' not in env and sb.pid not in [p.pid for p in cluster_procs()], sorted(env)  # nobody's cluster
    b = kernel(tmp_path, 60)   # the next kernel: its server is forked by the standby, warm (torch and LATER imported)
    print(f"\nstart, cold: {a['phases']}\nstart, from the standby: {b['phases']}")
    assert b['sum'] == [2, 2] and b['later'] == list(LATER), b
    assert b['server_parent'] == sb.pid and all(p == b['server'] for p in b['parents']) and b['standbys'] == [sb.pid], b
    assert b['controller_parent'] == b['server'], b  # the controller too (from a new server only where cores are few)
    assert a['controller_parent'] == (a['server'] if few_cores() else a['me']), a
    # the server the standby forked shows its cluster's environment: it and its engines are found as the cluster's
    assert b['server'] in b['found'] and all(p in b['found'] for p in b['parents']), b
    assert sb.is_running() and cluster_procs(b['cid']) == []   # the cluster stopped, leaving no process; the standby waits on
    # another environment (threads read at import) is another key: that kernel starts cold, and leaves its own
    c = kernel(tmp_path, 2, 'leave', OMP_NUM_THREADS='1')
    (other, (path,)), = c['new']
    assert c['server_parent'] == c['me'] and other != sb.pid and path != socket_of(sb), c
    # that one waits 2 s: it ends by itself, and takes its socket with it
    wait_until(lambda: not psutil.pid_exists(other) and not os.path.exists(path), 30, 'the idle standby ending')
    assert stop_standbys(no_standby) == 1 and not sb.is_running()


def test_a_standby_answers_only_this_user_and_a_hello_it_can_read(tmp_path, no_standby):
    import socket
    from ddp_nb.forkserver import standbys
    from ddp_nb.processes import rank_dir
    kernel(tmp_path, 60, 'leave')
    (sb,) = standbys(no_standby)
    path = [socket_of(sb)]
    assert oct(os.stat(path[0]).st_mode & 0o777) == '0o600' and os.path.dirname(path[0]) == rank_dir(), path
    if os.getuid() == 0:  # another user cannot even reach it (its folder is 0700)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try: s.connect(path[0]); code = 1
                except PermissionError: code = 0
            finally: os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0, "another user connected to the standby"
    for raw in (b'not json', encode(dict(op='spawn', id=1, argv=[], env={}, cwd='/', output_file='/x')),
                encode(dict(op='hello', env={'A=B': 'c'})), b'x' * (MAX_MSG + 1)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path[0]); s.sendall(raw); s.settimeout(15)
        got = [s.recv(MAX_MSG + 1)]
        while got[-1]: got.append(s.recv(MAX_MSG + 1))   # until the server it forked ends
        s.close()
        assert json.loads(got[0])['op'] == 'failed' and got[-1] == b'', got
    wait_until(lambda: sb.children() == [], 10, "the refused servers ending")
    assert sb.is_running(), "a bad hello ended the standby"
    b = kernel(tmp_path, 60, 'die')  # it still serves the next kernel; that one is killed (-9) with its cluster running
    assert b['later'] == list(LATER) and b['sum'] == [2, 2] and b['controller_parent'] == b['server'], b
    wait_until(lambda: cluster_procs(b['cid']) == [], 60, "the killed kernel's cluster ending (owner watches)")
    assert sb.is_running() and sb.children() == []  # the standby waits on


# The server loop with stand-ins: the import ahead takes `SLOW` s (a sleep), an engine sleeps until it is killed
HARNESS = r'''
import os, socket, sys, time
import ddp_nb.forkserver as f
f.IDLE_BEFORE_LATER = 0.3
def later():
    if os.environ['SLOW'] == 'fail': raise ImportError('a module it could not import')
    time.sleep(float(os.environ['SLOW'])); return []
def engine(req, close):
    try:
        f._forked(close); os.setsid(); f.set_cmdline(req['argv'])
        while True: time.sleep(1)
    finally: os._exit(0)
f._warm_later, f._child = later, engine
f._serve(socket.socket(fileno=int(sys.argv[1])))
'''


def harness(slow):
    "`HARNESS` started as a kernel starts its server, its import ahead taking `slow` s ('fail': failing): (the process, the kernel's end)"
    from ddp_nb.forkserver import ENV_ROOM, ROOM_ENV, ForkServer
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p = subprocess.Popen([sys.executable, '-c', HARNESS, str(b.fileno()), ' ' * 300], pass_fds=[b.fileno()],
                         env={**os.environ, 'SLOW': str(slow), ROOM_ENV: ' ' * ENV_ROOM}, start_new_session=True)
    b.close()
    return p, ForkServer({}, sock=a, timeout=10)


def stand_ins():
    "The stand-in engines still running"
    out = []
    for q in psutil.process_iter():
        try:
            if '--stand-in' in q.cmdline(): out.append(q)
        except psutil.Error: pass
    return out


def test_the_warm_copy_imports_while_the_server_forks(tmp_path):
    from ddp_nb.forkserver import ENGINE_CMD
    p, srv = harness(6)
    def spawn(): return srv.spawn(ENGINE_CMD + ['--stand-in'], {}, str(tmp_path), str(tmp_path / 'e.log'))
    try:
        assert srv.ready.wait(30)
        first = spawn()
        assert parent(first) == p.pid
        wait_until(lambda: warm_copies(p.pid), 10, 'the idle server forking its warm copy')
        (copy,) = warm_copies(p.pid)
        during = spawn()   # asked while the copy imports: the server forks it at once, without waiting for the import
        assert parent(during) == p.pid and srv.later is None and copy.is_running()
        assert srv.wait_later(30) == []   # the copy says it has imported ahead
        after = spawn()    # the copy forks it; what it says passes through the server
        assert parent(after) == copy.pid
        os.kill(after, signal.SIGKILL)
        assert srv.wait_exit(after, 10) == -signal.SIGKILL
        orphan = spawn()
        assert parent(orphan) == copy.pid
        copy.kill(); copy.wait(10)   # the copy dies first: its engine is handed to the server, which reports its exit
        wait_until(lambda: parent(orphan) == p.pid, 10, 'the orphaned engine handed to the server')
        os.kill(orphan, signal.SIGKILL)
        assert srv.wait_exit(orphan, 10) == -signal.SIGKILL
        os.kill(first, signal.SIGTERM)
        assert srv.wait_exit(first, 10) == -signal.SIGTERM
        last = spawn()     # the copy is gone: the server forks again
        assert parent(last) == p.pid
        left = [during, last]
    finally:
        srv.close()   # (asks it to stop: it ends its engines and exits)
        p.wait(10)
    assert not any(psutil.pid_exists(e) for e in left) and stand_ins() == []


def test_the_warm_copy_ends_with_its_server(tmp_path):
    from ddp_nb.forkserver import ENGINE_CMD
    p, srv = harness(0)
    try:
        assert srv.ready.wait(30)
        assert srv.wait_later(30) is not None
        (copy,) = warm_copies(p.pid)
        eng = srv.spawn(ENGINE_CMD + ['--stand-in'], {}, str(tmp_path), str(tmp_path / 'e.log'))
        assert parent(eng) == copy.pid
    finally:
        srv.close()
        p.wait(10)
    wait_until(lambda: not copy.is_running() and stand_ins() == [], 10, 'the copy and its engine ending')


def test_a_server_stopped_while_its_copy_imports_ends_at_once(tmp_path):
    p, srv = harness(30)
    assert srv.ready.wait(30)
    wait_until(lambda: warm_copies(p.pid), 10, 'the idle server forking its warm copy')
    (copy,) = warm_copies(p.pid)
    t = time.monotonic(); srv.close(); p.wait(10)
    assert time.monotonic() - t < 15 and not copy.is_running()   # (not after the copy's 30 s import)


def test_a_failed_copy_leaves_the_server_forking(tmp_path):
    from ddp_nb.forkserver import ENGINE_CMD
    p, srv = harness('fail')   # the copy's imports fail: it says why and ends; the server says nothing was imported ahead
    try:
        assert srv.ready.wait(30) and srv.wait_later(30) == []
        wait_until(lambda: warm_copies(p.pid) == [], 10, 'the failed copy gone')
        eng = srv.spawn(ENGINE_CMD + ['--stand-in'], {}, str(tmp_path), str(tmp_path / 'e.log'))
        assert parent(eng) == p.pid and srv.failure is None   # (the copy's failure is the server's log line, not the server's)
    finally:
        srv.close()
        p.wait(10)
    assert stand_ins() == []


def test_what_the_kernel_tells_later_the_server_and_its_copy_show(tmp_path):
    """The kernel starts the server before ipyparallel has chosen the profile folder, and tells it then: the server
    shows it (as `ddp_nb cleanup` and `cluster_processes` read it), so does its warm copy, told later; a malformed
    one is refused and changes nothing"""
    from ddp_nb.forkserver import ENGINE_CMD, ROOM_ENV
    p, srv = harness(0.5)
    def shown(pid): return psutil.Process(pid).environ()
    try:
        srv.tell_env({'IPP_PROFILE_DIR': str(tmp_path)})
        assert srv.ready.wait(30)
        wait_until(lambda: shown(p.pid).get('IPP_PROFILE_DIR') == str(tmp_path), 10, 'the server showing the folder')
        assert ROOM_ENV not in shown(p.pid) and shown(p.pid)['SLOW'] == '0.5'   # (the room is used, the rest kept)
        assert srv.wait_later(30) == []
        (copy,) = warm_copies(p.pid)
        assert shown(copy.pid)['IPP_PROFILE_DIR'] == str(tmp_path)   # (forked after: it has it)
        srv.tell_env({'DDP_NB_TOLD_LATER': 'yes'})
        wait_until(lambda: all(shown(q).get('DDP_NB_TOLD_LATER') == 'yes' for q in (p.pid, copy.pid)), 10,
                   'the server and its copy showing what was told after the copy was made')
        got = forged(srv, encode(dict(op='env', env={'A': 1})), -1)
        assert got is not None and got['op'] == 'refused' and 'env must map names to strings' in got['why'], got
        assert 'A' not in shown(p.pid)
        eng = srv.spawn(ENGINE_CMD + ['--stand-in'], {}, str(tmp_path), str(tmp_path / 'e.log'))
        assert parent(eng) == copy.pid   # (it serves on)
    finally:
        srv.close()
        p.wait(10)
    assert stand_ins() == []
