"""The ranks' files (the stack dumps cl.where() reads, the collective records cl.collectives() reads) are private on a
shared machine: 0600, in this user's 0700 folder under the temporary folder (`processes.rank_dir`), never directly in
/tmp; they are gone once the cluster ends; a folder someone planted at that name is refused with a clear error.
(The owner watch and `ddp_nb cleanup` removing them after the kernel is killed: tests/test_orphans.py.)"""
import os, stat, sys, tempfile, time
from pathlib import Path
import pytest
from ddp_nb import DDPCluster, rank
from ddp_nb.processes import cluster_procs, rank_dir, rank_files
from conftest import run, shown


def mode(p) -> int: return stat.S_IMODE(os.lstat(p).st_mode)


def wait_for(cond, limit: float = 30, what: str = ''):
    "Poll `cond` until it is true; fail after `limit` seconds"
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"not within {limit}s: {what}"
        time.sleep(0.05)


def test_rank_files_are_private_and_go_with_the_cluster(no_leftovers):
    with DDPCluster(n=2) as cl:
        cid, d = cl.cluster_id, rank_dir()
        assert cl.run(rank.check_group) == [2, 2]  # an all-reduce (the module's function: ranks import it)
        cl.where(show=False)  # each rank appends its stacks to its stack file (SIGUSR1 -> faulthandler)
        want = {f"{cid}-{kind}-{r}.{ext}" for r in (0, 1) for kind, ext in (('stack', 'txt'), ('collectives', 'json'))}
        wait_for(lambda: want <= {f.name for f in rank_files(cid)}, what=f"the ranks' files {sorted(want)}")  # records: after a 1 s stall
        for r in (0, 1): wait_for(lambda: os.path.getsize(os.path.join(d, f"{cid}-stack-{r}.txt")) > 0, what=f"rank {r}'s stacks")
        files = rank_files(cid)
        print(f"\n{d} ({oct(mode(d))}): " + ', '.join(f"{f.name} {oct(mode(f))}" for f in files))
        assert os.path.isdir(d) and not os.path.islink(d) and os.lstat(d).st_uid == os.getuid() and mode(d) == 0o700
        assert d == os.path.join(tempfile.gettempdir(), f"ddp_nb-{os.getuid()}")
        for f in files:
            assert f.parent == Path(d) and mode(f) == 0o600 and f.lstat().st_uid == os.getuid(), (f, oct(mode(f)))
        assert not [f for f in os.listdir(tempfile.gettempdir()) if f.startswith(cid)]  # nothing straight in /tmp (as before)
    assert rank_files(cid) == [], rank_files(cid)  # the with block's exit (cl.stop()) removed them


def test_a_planted_folder_is_refused(tmp_path, monkeypatch, no_leftovers):
    "A symbolic link at the folder's name (to a folder its planter reads): the ranks refuse to write there, start says why"
    theirs = tmp_path / 'theirs'; theirs.mkdir(mode=0o777)
    planted = tmp_path / f"ddp_nb-{os.getuid()}"
    planted.symlink_to(theirs)
    monkeypatch.setenv('TMPDIR', str(tmp_path))  # the engines' temporary folder (they inherit this environment)
    monkeypatch.setattr(tempfile, 'tempdir', None)  # and this process's (tempfile caches it)
    assert tempfile.gettempdir() == str(tmp_path)
    cl = DDPCluster(n=2)
    try:
        with pytest.raises(Exception) as e: cl.start()
    finally: cl.stop()
    print(f"\nstart refused: {str(e.value)[:600]}")
    assert 'symbolic link' in str(e.value) and str(planted) in str(e.value) and 'TMPDIR' in str(e.value), str(e.value)
    assert list(theirs.iterdir()) == []  # nothing was written through the link


def test_a_client_that_exits_without_stop_leaves_no_files(no_leftovers):
    "The end of a process that never called cl.stop() (a kernel shut down, a script's end) ends its cluster and removes the files"
    code = "from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()\nprint(cl.cluster_id, flush=True)"
    r = run([sys.executable, '-c', code], timeout=240)
    cid = r.stdout.strip().splitlines()[-1]
    assert cid.startswith('ddp_nb-'), shown(r)
    assert cluster_procs(cid) == [] and rank_files(cid) == [], (cluster_procs(cid), rank_files(cid))
