"The benchmarks run end to end in their reduced mode (numbers are not checked here: `python -m benchmarks` measures them)"
import sys
from conftest import ROOT, run, shown


def test_benchmarks_run(tmp_path, no_leftovers):
    out = tmp_path / 'results.md'
    r = run([sys.executable, '-m', 'benchmarks', '--fast', '--out', str(out)], cwd=ROOT, timeout=900)
    text = out.read_text()
    for section in ('1. Training throughput', '2. Warm cell', '3. Iteration with state', '4. Start-up',
                    '5. Monitoring overhead', '6. Memory', '7. GPU', '8. Cooperative interrupts',
                    '9. A compiled model kept warm', '10. Naming collective desyncs', '11. Where the time goes',
                    '12. The collector and dashboard at scale', '13. Start-up cost growth'):
        assert f'### {section}' in text, section
    assert 'failed' not in text.split('### 2.')[0], text + shown(r)   # ddp_nb and torchrun must both run
    assert '| yes |' in text, text + shown(r)   # bit-identical to torchrun, even in the short run
