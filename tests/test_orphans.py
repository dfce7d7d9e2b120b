"""No orphans: a cluster ends with its owner (client killed, kernel restarted or killed, failing notebook under
nbdev_test) unless it is persistent; `ddp_nb list` / `ddp_nb stop ID` find and end the persistent ones. The ranks'
files (private, in `processes.rank_dir()`) go with the cluster, or with `ddp_nb cleanup` when nothing was left to remove them.
Processes are counted by cluster id (IPP_CLUSTER_ID), never by name. Deadlines have a ≥3× margin over what was
measured on a loaded 2-core machine; the measured times are printed (pytest -s)."""
import json, os, signal, stat, subprocess, sys, tempfile, time
from pathlib import Path
from ddp_nb.processes import cluster_procs
from ddp_nb.core import cluster_owner
from ddp_nb.processes import cluster_files, rank_dir, rank_files
from conftest import run, shown
from kernel import Kernel

ROOT = Path(__file__).resolve().parent.parent
GONE_WITHIN = 10  # seconds: the goal; measured: well under 1 s (printed)

OWNER = """
import sys, time
from ddp_nb import DDPCluster
cl = DDPCluster(n=2, persistent={persistent}).start()
print(cl.cluster_id, flush=True)
if {persistent}: sys.exit(0)   # a persistent cluster outlives even a normal exit
time.sleep(600)
"""


def wait_gone(cid: str, limit: float = 30) -> float:
    "Seconds until no process of cluster `cid` is left (gives up after `limit`)"
    t0 = time.monotonic()
    while cluster_procs(cid) and time.monotonic() - t0 < limit: time.sleep(0.02)
    return time.monotonic() - t0


def start_owner(persistent=False):
    "A client process that starts a 2-rank cluster; returns (process, cluster id)"
    p = subprocess.Popen([sys.executable, '-c', OWNER.format(persistent=persistent)], stdout=subprocess.PIPE, text=True)
    cid = p.stdout.readline().strip()
    assert cid.startswith('ddp_nb-'), f"the client did not start a cluster: {cid!r}"
    return p, cid


def test_killed_client_takes_its_cluster_along(no_leftovers):
    p, cid = start_owner()
    procs = cluster_procs(cid)
    assert len(procs) >= 5, [q.cmdline() for q in procs]  # controller (+ schedulers), 2 engines, 2 nannies
    profile = procs[0].environ()['IPP_PROFILE_DIR']
    assert cluster_files(cid, profile)
    deadline = time.monotonic() + 10   # the ranks' files for cl.where() / cl.collectives() (a stack file each at once)
    while len(rank_files(cid)) < 2 and time.monotonic() < deadline: time.sleep(0.1)
    assert len(rank_files(cid)) >= 2, rank_files(cid)
    assert all(f.parent == Path(rank_dir()) and stat.S_IMODE(f.stat().st_mode) == 0o600 for f in rank_files(cid)), rank_files(cid)
    # one engine is stopped (as if stuck): it cannot watch, so the controller or the other engine must end it
    stuck = next(q for q in procs if 'processes import engine_main' in ' '.join(q.cmdline()))
    stuck.suspend()
    os.kill(p.pid, signal.SIGKILL); p.wait()
    dt = wait_gone(cid)
    print(f"\nclient SIGKILLed: its {len(procs)} cluster processes (one engine SIGSTOPped) gone after {dt:.2f}s")
    assert cluster_procs(cid) == [] and dt < GONE_WITHIN
    assert cluster_files(cid, profile) == []  # the watcher removed the connection files too
    assert rank_files(cid) == []              # and the ranks' files in this user's folder


def test_cleanup_removes_the_files_of_a_cluster_killed_whole(ddp_nb_bin, no_leftovers):
    "Owner and cluster SIGKILLed at once (the OOM killer, a job's end): nobody is left to remove the ranks' files but `ddp_nb cleanup`"
    p, cid = start_owner()
    deadline = time.monotonic() + 10
    while len(rank_files(cid)) < 2 and time.monotonic() < deadline: time.sleep(0.1)
    procs = cluster_procs(cid)
    for q in procs: q.suspend()  # no watcher may run: stopped first, then all killed
    os.kill(p.pid, signal.SIGKILL); p.wait()
    for q in procs: q.kill()
    assert wait_gone(cid) < GONE_WITHIN and cluster_procs(cid) == []
    left = rank_files(cid)
    assert len(left) >= 2 and all(f.parent == Path(rank_dir()) for f in left), left  # stayed behind
    old = Path(tempfile.gettempdir(), f"{cid}-stack-7.txt"); old.write_text('')  # as earlier versions left them, straight in /tmp
    r = _ddp_nb(ddp_nb_bin, 'cleanup', '--ipython-dir', os.environ['IPYTHONDIR'])
    assert r.returncode == 0, shown(r)
    assert rank_files(cid) == [] and not old.exists(), rank_files(cid)
    print(f"\nddp_nb cleanup removed {len(left) + 1} files of cluster {cid}, killed whole")


START_IN_KERNEL = "from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()"


def test_kernel_restart_and_kill_end_the_cluster(no_leftovers):
    k = Kernel()  # as a user's kernel
    try:
        k.ok(START_IN_KERNEL, 180); cid = k.value("cl.cluster_id")
        assert len(cluster_procs(cid)) >= 5 and len(rank_files(cid)) >= 2
        t0 = time.monotonic()
        k.km.restart_kernel(now=False)  # what a notebook's "Restart kernel" does: ask, then kill after a grace period
        dt_restart = time.monotonic() - t0
        dt = wait_gone(cid)
        print(f"\nkernel restart returned after {dt_restart:.2f}s; cluster gone {dt:.2f}s later")
        assert cluster_procs(cid) == [] and dt < GONE_WITHIN
        assert rank_files(cid) == [], rank_files(cid)  # the ranks' files went with it

        k.connect(60)
        k.ok(START_IN_KERNEL, 180); cid = k.value("cl.cluster_id")
        n = len(cluster_procs(cid))
        assert len(rank_files(cid)) >= 2, rank_files(cid)  # a stack file per rank, made as the cluster started
        os.kill(cluster_owner(cid), signal.SIGKILL)  # the id names its owner: the kernel
        dt = wait_gone(cid)
        print(f"kernel SIGKILLed: its {n} cluster processes gone after {dt:.2f}s")
        assert cluster_procs(cid) == [] and dt < GONE_WITHIN
        assert rank_files(cid) == [], rank_files(cid)  # removed by the owner watch
    finally:
        k.close(stop=False)


def test_failing_notebook_under_nbdev_test_leaves_nothing(tmp_path, no_leftovers):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"from ddp_nb import DDPCluster\ncl = DDPCluster(n=1).start()\n"
                                          f"open({str(tmp_path / 'cid')!r}, 'w').write(cl.cluster_id)"),
                nbformat.v4.new_code_cell("raise ValueError('this notebook fails on purpose')")]
    nbformat.write(nb, tmp_path / 'fails.ipynb')
    nbdev_test = str(Path(sys.executable).parent / 'nbdev_test')
    # --n_workers 1: the notebook runs in a process-pool worker, where atexit does not run
    r = run([nbdev_test, '--path', str(tmp_path / 'fails.ipynb'), '--n_workers', '1'], check=False, cwd=ROOT, timeout=300)
    assert r.returncode != 0 and 'fails on purpose' in r.stderr, shown(r)
    cid = (tmp_path / 'cid').read_text()
    dt = wait_gone(cid)
    print(f"\nfailing notebook under nbdev_test: cluster gone {dt:.2f}s after nbdev_test returned")
    assert dt < GONE_WITHIN


def _ddp_nb(bin, *args):
    return run([bin, *args], check=False, timeout=120)


def test_persistent_cluster_outlives_its_client_until_stopped(ddp_nb_bin, no_leftovers):
    import ipyparallel as ipp
    ipd = os.environ['IPYTHONDIR']
    p, cid = start_owner(persistent=True)
    try:
        assert p.wait(60) == 0  # the client exited normally...
        time.sleep(2)
        procs = cluster_procs(cid)
        assert len(procs) >= 5  # ...and its cluster runs on
        r = _ddp_nb(ddp_nb_bin, 'list', '--json', '--ipython-dir', ipd)
        assert r.returncode == 0, shown(r)
        (c,) = [c for c in json.loads(r.stdout) if c['id'] == cid]
        assert c['persistent'] and not c['owner_alive'] and c['procs'] == len(procs) and c['owner'] == p.pid
        table = _ddp_nb(ddp_nb_bin, 'list', '--ipython-dir', ipd).stdout
        assert cid in table and 'gone' in table and 'yes' in table, table
        # it can be used again: connect a client to it by id
        rc = ipp.Client(cluster_id=cid, profile_dir=c['profile_dir'])
        try:
            rc.wait_for_engines(2, timeout=30)
            assert sorted(rc[:].apply_sync(os.getenv, 'RANK')) == ['0', '1']  # the ranks kept their state
        finally: rc.close()
        # cleanup leaves persistent clusters alone; stop ends them
        r = _ddp_nb(ddp_nb_bin, 'cleanup', '--ipython-dir', ipd)
        assert r.returncode == 0 and cid not in r.stdout and cluster_procs(cid), shown(r)
        t0 = time.monotonic()
        r = _ddp_nb(ddp_nb_bin, 'stop', cid)
        print(f"\nddp_nb stop {cid}: {r.stdout.strip()} in {time.monotonic() - t0:.2f}s")
        assert r.returncode == 0 and cid in r.stdout, shown(r)
        assert cluster_procs(cid) == [] and cluster_files(cid, c['profile_dir']) == []
        r = _ddp_nb(ddp_nb_bin, 'stop', cid)
        assert r.returncode == 1 and 'No running ddp_nb cluster' in r.stderr and 'ddp_nb list' in r.stderr, shown(r)
    finally:
        if p.poll() is None: p.kill()
        from ddp_nb.processes import kill_procs
        kill_procs(cluster_procs(cid))
