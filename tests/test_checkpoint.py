"Checkpoints survive the saving process being killed mid-write; bad checkpoints give errors that say what to do"
import os, signal, subprocess, sys, textwrap, time, warnings
from pathlib import Path
import pytest
import torch
import torch.nn as nn
from ddp_nb.train import save_checkpoint, load_checkpoint, checkpoints, CheckpointError

SAVER = textwrap.dedent("""
    import sys, torch, torch.nn as nn
    from ddp_nb.train import save_checkpoint
    folder = sys.argv[1]
    torch.manual_seed(0)
    model = nn.Linear(4096, 8192)                  # 134 MB: a save takes long enough to be killed in the middle
    save_checkpoint(folder, model, step=1)
    print('saved 1', flush=True)
    with torch.no_grad(): model.weight.add_(1)
    while True: save_checkpoint(folder, model, step=2)
""")


def _tmp_files(d): return list(Path(d).glob('.step-*.tmp-*'))


def test_sigkill_mid_save_keeps_the_previous_checkpoint(tmp_path):
    p = subprocess.Popen([sys.executable, '-c', SAVER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == 'saved 1'
        t0 = time.monotonic()
        while not any(f.stat().st_size > 2**20 for f in _tmp_files(tmp_path) if f.exists()):
            assert time.monotonic() - t0 < 60, "the second save never started writing"
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        p.kill(); p.wait()
    assert _tmp_files(tmp_path), "the kill should have landed mid-write, leaving a partial temporary file"
    assert [c.name for c in checkpoints(tmp_path)] == ['step-00000001.pt'], "a half-written file became a checkpoint"
    torch.manual_seed(0)
    want = nn.Linear(4096, 8192).weight.detach().clone()
    model = nn.Linear(4096, 8192)
    assert load_checkpoint(tmp_path, model)['step'] == 1
    assert torch.equal(model.weight.detach(), want), "the previous checkpoint did not load intact"
    save_checkpoint(tmp_path, nn.Linear(2, 2), step=3)        # the next save removes the dead saver's temporary file
    assert _tmp_files(tmp_path) == []


def _two_checkpoints(d):
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    save_checkpoint(d, m, step=1); save_checkpoint(d, m, step=2)
    return m


def _truncate(p): p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
def _garbage(p): p.write_bytes(os.urandom(1000))
def _world_of_4(p):
    s = torch.load(p, weights_only=True); s['world_size'] = 4; s['ranks'] = s['ranks'] * 4; torch.save(s, p)
def _not_ours(p): torch.save({'weight': torch.ones(1)}, p)


@pytest.mark.parametrize('damage,says', [(_truncate, 'unreadable'), (_garbage, 'unreadable'),
                                          (_world_of_4, 'saved by 4 ranks'), (_not_ours, 'not a ddp_nb checkpoint')])
def test_bad_checkpoint_names_the_problem_and_the_previous_one_still_loads(tmp_path, damage, says):
    m = _two_checkpoints(tmp_path)
    newest = checkpoints(tmp_path)[-1]
    damage(newest)
    with pytest.raises(CheckpointError, match=says) as e:
        load_checkpoint(newest, nn.Linear(4, 2))
    assert str(newest) in str(e.value)
    if says == 'saved by 4 ranks':   # readable, but resuming exactly needs the same world: exact=False loads the weights
        m2 = nn.Linear(4, 2)
        assert load_checkpoint(newest, m2, exact=False)['step'] == 2 and torch.equal(m2.weight, m.weight)
        return
    m2 = nn.Linear(4, 2)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        assert load_checkpoint(tmp_path, m2)['step'] == 1
    assert any(newest.name in str(w.message) for w in ws), "the skipped checkpoint must be named"
    assert torch.equal(m2.weight, m.weight)


def test_checkpoint_of_another_model(tmp_path):
    _two_checkpoints(tmp_path)
    with pytest.raises(CheckpointError, match='different model'):
        load_checkpoint(tmp_path, nn.Linear(5, 2))
