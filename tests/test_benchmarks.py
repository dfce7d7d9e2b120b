"The benchmarks run in a reduced mode (their numbers are not checked here: `python -m benchmarks.startup` and `python -m benchmarks.monitor` measure them)"
import subprocess, sys
import pytest
from conftest import ROOT


@pytest.mark.parametrize('module,args,expect', [
    ('startup', ['--rounds', '1', '--cells', '3'], ['start to process-group ready', 'warm `%%px` all-reduce cell']),
    ('monitor', ['--rounds', '1', '--seconds', '0.3'], ['ms (MLP width', 'latency'])])
def test_benchmark_runs(module, args, expect, tmp_path, no_leftovers):
    out = tmp_path / f'{module}.md'
    r = subprocess.run([sys.executable, '-m', f'benchmarks.{module}', *args, '--out', str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert all(e in text for e in expect) and text.count('\n|') >= 3, text
