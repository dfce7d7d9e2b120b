"""benchmarks/peers.py in its fast mode with ddp_nb only (cold, and after a kernel restart from a standby) (torchrun's row runs in `python -m benchmarks --fast`): every metric measured for ddp_nb in a real
kernel, each peer that is not installed here skipped with one line saying how to install it, the table's shape.
(The numbers are not checked: `python -m benchmarks.peers` measures them.)"""
import importlib.util, re, sys
import pytest
from conftest import ROOT, run, shown

PEERS = {'Monarch': 'monarch', 'jupyter-distributed': 'jupyter_distributed', 'nbdistributed': 'nbdistributed',
         'Accelerate `notebook_launcher`': 'accelerate'}
NUMBER = re.compile(r'^\d+(\.\d+)? (s|ms) \[\d+(\.\d+)? (s|ms)–\d+(\.\d+)? (s|ms)\] \(\d+\)$')   # median [min–max] (count)


@pytest.mark.timeout(400)
def test_peers_fast_ddp_nb_only(no_leftovers):
    r = run([sys.executable, '-m', 'benchmarks.peers', '--fast', '--peers-python', sys.executable, '--sides', 'ddp_nb'],
            cwd=ROOT, timeout=360)
    text = r.stdout
    assert '### 14. Peers' in text and f"the peers' kernels: `{sys.executable}`" in text, shown(r)
    lines = [l for l in text.splitlines() if l.startswith('|')]
    assert lines[0] == '| side | start | warm cell | iteration with state | replace a rank | repeated script |', shown(r)
    rows = {c[0]: c[1:] for l in lines[2:] for c in [[x.strip() for x in l.strip('|').split('|')]]}
    assert all(len(c) == 5 for c in rows.values()), shown(r)
    warm = 'ddp_nb, kernel restarted, `keep_warm`'   # (picked by 'ddp_nb' too: started from a standby)
    assert set(rows) == {'ddp_nb', warm, *PEERS}, shown(r)   # (torchrun left out by --sides: no row)
    assert all(NUMBER.match(c) for c in rows['ddp_nb'] + rows[warm]), rows                    # all five measured
    for name, mod in PEERS.items():   # one clear line each: not installed (and how), or left out by --sides
        why = rows[name][0]
        if importlib.util.find_spec(mod) is None:
            assert why.startswith(f"skipped: not installed on `{sys.executable}` (`pip install ") and 'torch==' in why, why
        else: assert why == 'not selected (`--sides`)', why
        assert rows[name][1:] == ['', '', '', ''], rows[name]
    assert 'failed' not in text, shown(r)
