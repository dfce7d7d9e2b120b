"""The tests' real kernel: `ddp_nb.kernel.Kernel` (a Jupyter kernel as a user's notebook has, IPP_NONINTERACTIVE unset,
so `%%px` output streams) started in the repository, and the body of a fixture that gives a test one with a cluster."""
import json, time
from pathlib import Path
from ddp_nb.kernel import ANSI, Frontend, Kernel as _Kernel

ROOT = Path(__file__).resolve().parent.parent
STOP = "try: cl.stop()\nexcept NameError: pass"
# kernel code: `n_cluster_procs()`, how many processes the notebook's cluster `cl` has once its fork server has its
# warm copy (forked once the server is idle): the same count before and after a step, unless the step left one behind
COUNTER = '''
def n_cluster_procs():
    from ddp_nb.forkserver import fork_server
    from ddp_nb.processes import cluster_procs
    srv = fork_server(cl.cluster_id)
    assert srv is None or srv.wait_later(60) is not None, "no warm copy within 60 s"
    return len(cluster_procs(cl.cluster_id))
'''


class Kernel(_Kernel):
    "A kernel started in the repository; `close` stops the notebook's cluster `cl` if any (`stop`), then kills it"
    def __init__(self): super().__init__(cwd=str(ROOT))

    def close(self, stop: bool = True) -> list: return super().close(STOP if stop else None, now=True)


def cluster_kernel(setup: str, measured: dict, name: str):
    """A fixture's body: a kernel that ran `setup` (which starts the notebook's cluster `cl`), yielded; then stopped,
    no cluster process left, and `measured` written to build/<name>.json and printed"""
    from conftest import ours
    assert ours() == [], "processes from an earlier test are still running"
    kern = Kernel()
    _, out, err, _ = kern.run(setup)
    assert err is None, out
    yield kern
    kern.close()
    deadline = time.monotonic() + 30
    while ours() and time.monotonic() < deadline: time.sleep(0.1)
    assert ours() == [], "processes left behind"
    (ROOT / 'build').mkdir(exist_ok=True)
    (ROOT / 'build' / f'{name}.json').write_text(json.dumps(measured, indent=1))
    print(json.dumps(measured, indent=1))
