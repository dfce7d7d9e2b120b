"tools/test_gpu.sh cannot pass without a GPU: it says so, exits 2 and records why (the GPU suite itself: tests/test_gpu.py)"
import json, os, sys
import pytest
from conftest import ROOT, run, shown


def test_gpu_suite_refuses_to_pass_without_a_gpu(tmp_path):
    import torch
    if torch.cuda.device_count(): pytest.skip("a GPU is visible here: `make test-gpu` runs the GPU suite")
    r = run(['bash', str(ROOT / 'tools' / 'test_gpu.sh')], check=False, timeout=120,
            env={**os.environ, 'GPU_PYTHON': sys.executable, 'GPU_BUILD': str(tmp_path)})
    assert r.returncode == 2, shown(r)
    assert 'NO GPU VISIBLE' in r.stdout and '=== machine' in r.stdout.splitlines()[0], shown(r)
    s = json.loads((tmp_path / 'summary.json').read_text())
    assert s['ok'] is False and s['machine']['gpus'] == 0 and [p['status'] for p in s['phases']] == ['no-gpu']
    assert 'NO GPU VISIBLE' in (tmp_path / 'log.txt').read_text()
