"nbdev_test on notebooks that use %%px: a rank's error fails the notebook, and no cluster is left behind"
import json, os, subprocess, sys
from pathlib import Path
from conftest import ROOT, ours


def _nb(cells):
    return dict(nbformat=4, nbformat_minor=5, metadata={},
                cells=[dict(cell_type='code', source=c, metadata={}, outputs=[], execution_count=None, id=f'c{i}')
                       for i, c in enumerate(cells)])


def _nbdev_test(path):
    return subprocess.run([str(Path(sys.executable).parent / 'nbdev_test'), '--path', str(path), '--n_workers', '1'],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_px_error_on_one_rank_fails_the_notebook(tmp_path, no_leftovers):
    nb = tmp_path / 'bad.ipynb'
    nb.write_text(json.dumps(_nb(["from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()",
                                  "%%px\nif rank == 1: raise ValueError('rank one broke')",
                                  "cl.stop()"])))
    r = _nbdev_test(nb)
    assert r.returncode != 0, r.stdout + r.stderr
    assert 'rank one broke' in r.stdout + r.stderr
    assert ours() == [], "the failed notebook's cluster must be stopped when its process exits"


def test_px_cells_run_on_every_rank(tmp_path, no_leftovers):
    nb = tmp_path / 'good.ipynb'
    nb.write_text(json.dumps(_nb(["from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()",
                                  "%%px\nt = torch.ones(1); dist.all_reduce(t)",
                                  "assert cl.view['t.item()'] == [2.0, 2.0]\ncl.stop()"])))
    r = _nbdev_test(nb)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_in_sync_with_index():
    r = subprocess.run([sys.executable, str(ROOT / 'tools' / 'make_readme.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
