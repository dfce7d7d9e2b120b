"nbdev_test on notebooks that use %%px: a rank's error fails the notebook, and no cluster is left behind"
import json, sys
import pytest
from pathlib import Path
from conftest import ROOT, ours, run, shown


def _nb(cells):
    return dict(nbformat=4, nbformat_minor=5, metadata={},
                cells=[dict(cell_type='code', source=c, metadata={}, outputs=[], execution_count=None, id=f'c{i}')
                       for i, c in enumerate(cells)])


def _nbdev_test(path):
    return run([str(Path(sys.executable).parent / 'nbdev_test'), '--path', str(path), '--n_workers', '1'],
               check=False, cwd=ROOT, timeout=300)


START = "from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()"


@pytest.mark.parametrize('cells,fails,says', [
    ([START, "%%px\nif rank == 1: raise ValueError('rank one broke')", "cl.stop()"], True, 'rank one broke'),
    ([START, "%%px\nt = torch.ones(1); dist.all_reduce(t)", "assert cl.view['t.item()'] == [2.0, 2.0]\ncl.stop()"], False, '')],
    ids=['error-on-one-rank-fails-the-notebook', 'px-cells-run-on-every-rank'])
def test_px_cells_under_nbdev_test(cells, fails, says, tmp_path, no_leftovers):
    nb = tmp_path / 'nb.ipynb'
    nb.write_text(json.dumps(_nb(cells)))
    r = _nbdev_test(nb)
    assert (r.returncode != 0) == fails, shown(r)
    assert says in r.stdout + r.stderr, shown(r)
    assert ours() == [], "a notebook's cluster must be stopped when its process exits, failed or not"


def test_readme_in_sync_with_index():
    run([sys.executable, str(ROOT / 'tools' / 'make_readme.py'), '--check'], timeout=120)
