"The ddp_nb command: demo end to end, and cleanup of clusters whose owner died"
import json, os, signal, subprocess, sys, time
from conftest import ours, run, shown


def test_demo_writes_results(tmp_path, ddp_nb_bin, no_leftovers):
    out = tmp_path / 'demo'
    r = run([ddp_nb_bin, 'demo', '--epochs', '3', '--out', str(out)], timeout=300)
    assert 'epoch   3/3' in r.stdout and str(out) in r.stdout, shown(r)
    res = json.loads((out / 'results.json').read_text())
    assert res['world_size'] == 2 and res['backend'] == 'gloo'
    assert len(res['losses']) == 3 and res['final_loss'] < res['losses'][0]
    assert (out / 'loss.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert (out / 'losses.csv').read_text().splitlines()[0] == 'epoch,loss'


def test_demo_bad_input(ddp_nb_bin, tmp_path):
    r = run([ddp_nb_bin, 'demo', '--n', '0', '--out', str(tmp_path)], check=False, timeout=60)
    assert r.returncode != 0 and 'at least 1' in r.stderr, shown(r)


OWNER = """
import sys, time
from traitlets.config import Config
from ddp_nb import DDPCluster
# ipyparallel's own commands run no owner watch (ddp_nb.processes): killing this process orphans the cluster
cfg = Config(LocalControllerLauncher=dict(controller_cmd=[sys.executable, '-m', 'ipyparallel.controller']),
             LocalEngineSetLauncher=dict(engine_cmd=[sys.executable, '-m', 'ipyparallel.engine']))
cl = DDPCluster(n=2, config=cfg).start()
print(cl.cluster_id, flush=True)
time.sleep(600)
"""


def test_cleanup_stops_cluster_of_a_killed_owner(ddp_nb_bin, no_leftovers):
    p = subprocess.Popen([sys.executable, '-c', OWNER], stdout=subprocess.PIPE, text=True)
    cid = p.stdout.readline().strip()
    assert cid.startswith('ddp_nb-'), cid
    os.kill(p.pid, signal.SIGKILL); p.wait()
    time.sleep(1)
    orphans = [q for q in ours() if q.environ().get('IPP_CLUSTER_ID') == cid]
    assert len(orphans) >= 5, "expected the killed owner's cluster to be orphaned (nothing watches its owner)"
    r = run([ddp_nb_bin, 'cleanup', '--ipython-dir', os.environ['IPYTHONDIR']], timeout=60)
    assert cid in r.stdout, shown(r)
    assert [q for q in ours() if q.is_running()] == []
