import os, sys, tempfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
if 'IPYTHONDIR' not in os.environ or not os.environ['IPYTHONDIR'].startswith(tempfile.gettempdir()):
    os.environ['IPYTHONDIR'] = tempfile.mkdtemp(prefix='ddp_nb-pytest-ipython-')  # never the user's profile
os.environ.setdefault('IPP_NONINTERACTIVE', '1')


def pytest_configure(config):
    config.addinivalue_line('markers', 'gpu: needs a CUDA GPU; skipped without one (`make test-gpu` runs them: tools/test_gpu.sh)')

from ddp_nb.cluster import cluster_procs
from ddp_nb.cli import cleanup


def ours():
    "Live processes of ddp_nb clusters started under this test session's IPYTHONDIR"
    d = os.path.realpath(os.environ['IPYTHONDIR'])
    out = []
    for p in cluster_procs():
        try:
            if os.path.realpath(p.environ().get('IPYTHONDIR', '')) == d: out.append(p)
        except Exception: pass
    return out


@pytest.fixture
def no_leftovers():
    "Fail a test that leaves cluster processes behind; clean them up either way"
    assert ours() == [], "processes from an earlier test are still running"
    yield
    left = ours()
    cleanup(everything=True, ipython_dir=os.environ["IPYTHONDIR"])
    assert left == [], f"left behind: {[(p.pid, ' '.join(p.cmdline())[:80]) for p in left]}"


@pytest.fixture
def ddp_nb_bin():
    "The ddp_nb console script of this environment"
    p = Path(sys.executable).parent / 'ddp_nb'
    assert p.exists(), "ddp_nb is not installed in this environment: pip install -e ."
    return str(p)
