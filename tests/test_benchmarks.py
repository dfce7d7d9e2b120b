"The benchmarks run (their numbers are not checked here: they are measured by `python -m benchmarks.startup`)"
import os, subprocess, sys
from conftest import ROOT


def test_startup_benchmark_runs(tmp_path, no_leftovers):
    out = tmp_path / 'results.md'
    r = subprocess.run([sys.executable, '-m', 'benchmarks.startup', '--rounds', '1', '--cells', '3', '--out', str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert 'start to process-group ready' in text and 'warm `%%px` all-reduce cell' in text


def test_monitor_benchmark_runs(tmp_path, no_leftovers):
    out = tmp_path / 'monitor.md'
    r = subprocess.run([sys.executable, '-m', 'benchmarks.monitor', '--rounds', '1', '--seconds', '0.3', '--out', str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert text.count('| ') > 10 and 'ms (MLP width' in text and 'latency' in text
