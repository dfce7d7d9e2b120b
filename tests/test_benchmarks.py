"The benchmarks run end to end in their reduced mode (numbers are not checked here: `python -m benchmarks` measures them)"
import os, sys
import pytest
from conftest import ROOT, run, shown


@pytest.mark.slow   # 6-10 minutes on 2 cores: `make test-slow`
@pytest.mark.timeout(1200)
def test_benchmarks_run(tmp_path, no_leftovers):
    out = tmp_path / 'results.md'
    r = run([sys.executable, '-m', 'benchmarks', '--fast', '--out', str(out)], cwd=ROOT, timeout=1100)
    text = out.read_text()
    for section in ('1. Training throughput', '2. Warm cell', '3. Iteration with state', '4. Start-up',
                    '5. Monitoring overhead', '6. Memory', '7. GPU', '8. Cooperative interrupts',
                    '9. A compiled model kept warm', '10. Naming collective desyncs', '11. Where the time goes',
                    '12. The collector and dashboard at scale', '13. Start-up cost growth', '14. Peers', '15. Heal a lost rank'):
        assert f'### {section}' in text, section
    assert "#### Where a warm cell's time goes" in text.split('### 3.')[0], text + shown(r)   # (in section 2)
    assert 'failed' not in text.split('### 2.')[0], text + shown(r)   # ddp_nb and torchrun must both run
    assert '| yes |' in text, text + shown(r)   # bit-identical to torchrun, even in the short run


@pytest.mark.slow   # about a minute on 2 cores
@pytest.mark.timeout(300)
def test_gpu_benchmark_rehearsal(tmp_path, no_leftovers):
    "The GPU benchmark's paired design runs on CPU ranks (gloo): a ddp_nb rank and a torchrun worker alive together, in turns"
    out = tmp_path / 'gpu.md'
    r = run([sys.executable, '-m', 'benchmarks.gpu', '--configs', '0', '--rounds', '1', '--windows', '2', '--no-timer',
             '--out', str(out)], cwd=ROOT, timeout=280, env=dict(os.environ, BENCH_GPU_REHEARSAL='1'))
    row = next(l for l in out.read_text().splitlines() if l.startswith('| MLP width 1024, batch 64 |'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert float(cells[1]) > 0 and float(cells[2]) > 0, row + shown(r)   # both sides timed their windows
    assert 0.2 < float(cells[5]) < 5, row + shown(r)   # and their CPU time per step, paired
    assert cells[-1] == 'yes', row + shown(r)   # the same weights after 10 steps on both sides


def test_benchmarks_leave_no_ipython_dir(tmp_path):
    "Importing the benchmarks makes a private IPython profile only when none is set, and removes it at exit"
    env = {k: v for k, v in os.environ.items() if k != 'IPYTHONDIR'} | dict(TMPDIR=str(tmp_path))
    code = "import os, benchmarks; print(os.environ['IPYTHONDIR']); assert os.path.isdir(os.environ['IPYTHONDIR'])"
    r = run([sys.executable, '-c', code], cwd=ROOT, env=env)
    assert r.stdout.strip().startswith(str(tmp_path / 'ddp_nb-bench-ipython-')), shown(r)
    r = run([sys.executable, '-c', code], cwd=ROOT, env=env | dict(IPYTHONDIR=str(tmp_path)))   # set: used as it is
    assert r.stdout.strip() == str(tmp_path), shown(r)
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())   # nothing left behind
