import atexit, os, shlex, shutil, signal, subprocess, sys, tempfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
if 'IPYTHONDIR' not in os.environ or not os.environ['IPYTHONDIR'].startswith(tempfile.gettempdir()):
    os.environ['IPYTHONDIR'] = tempfile.mkdtemp(prefix='ddp_nb-pytest-ipython-')  # never the user's profile
    atexit.register(shutil.rmtree, os.environ['IPYTHONDIR'], True)  # removed when pytest ends


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: minutes long (benchmarks end to end, long soaks); `make test` leaves them out, `make test-slow` runs them')
    config.addinivalue_line('markers', 'gpu: needs a CUDA GPU; skipped without one (`make test-gpu` runs them: tools/test_gpu.sh)')

from ddp_nb.processes import cluster_procs
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

def described(p) -> str:
    "'pid: command line' of a process, or 'pid: (ended)' when it ended while being looked at"
    try: return f"{p.pid}: {' '.join(p.cmdline())[:80]}"
    except Exception: return f"{p.pid}: (ended)"

def gpu_marks():
    "(GPUs torch sees, pytestmark for a GPU test module: marked gpu, skipped where no CUDA GPU is visible)"
    import torch   # only GPU modules pay for it
    n = torch.cuda.device_count()   # initialises the driver only: this process makes no CUDA context
    return n, [pytest.mark.gpu, pytest.mark.skipif(n == 0, reason="no CUDA GPU visible (torch.cuda.device_count() == 0): "
                                                                  "run the GPU suite on a GPU machine with `make test-gpu`")]


def one_gpu_rank():
    "A module's cluster: one nccl rank on cuda:0 (yielded), stopped after, leaving no process"
    from ddp_nb import DDPCluster
    assert ours() == [], "processes from an earlier test are still running"
    c = DDPCluster(n=1).start()
    yield c
    c.stop()
    assert ours() == [], "the GPU cluster left processes behind"



@pytest.fixture
def no_leftovers():
    "Fail a test that leaves cluster processes behind; clean them up either way"
    assert ours() == [], "processes from an earlier test are still running"
    yield
    left = [described(p) for p in ours()]   # (read before cleanup ends them)
    cleanup(everything=True, ipython_dir=os.environ["IPYTHONDIR"])
    assert left == [], f"left behind: {left}"


@pytest.fixture
def ddp_nb_bin():
    "The ddp_nb console script of this environment"
    p = Path(sys.executable).parent / 'ddp_nb'
    assert p.exists(), "ddp_nb is not installed in this environment: pip install -e ."
    return str(p)


def shown(r, limit: int = 20_000) -> str:
    "A finished subprocess for an assertion message: its command, exit status and the ends of its stdout and stderr"
    def tail(x):
        x = x.decode(errors='replace') if isinstance(x, bytes) else (x or '')
        return x if len(x) <= limit else f'[... {len(x) - limit} characters left out ...]\n' + x[-limit:]
    cmd = r.args if isinstance(r.args, str) else shlex.join(map(str, r.args))
    return f"$ {cmd}\nexit status {r.returncode}\n--- stdout ---\n{tail(r.stdout)}\n--- stderr ---\n{tail(r.stderr)}"


def run(cmd, *, check: bool = True, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd)` for tests: its output captured as text, and shown (with `shown`) when the test fails.
    check: fail the test unless it exits 0. A process that runs past `timeout` is killed with its process group
    (what it started too: torchrun's workers, a cluster's engines), and the test fails with what it had printed.
    Assert on the result with the output as the message: `assert 'x' in r.stdout, shown(r)`."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
    try: out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass
        try: out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired as e:  # something that left the group still holds the pipes
            p.kill(); out, err = e.stdout, e.stderr
        pytest.fail(f"ran past its {timeout} s limit (killed):\n" + shown(subprocess.CompletedProcess(cmd, p.wait(), out, err)))
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check and r.returncode != 0: pytest.fail("a subprocess failed:\n" + shown(r))
    return r
