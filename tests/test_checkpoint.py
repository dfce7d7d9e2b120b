"""Checkpoints survive the saving process being killed mid-write; bad checkpoints give errors that say what to do, and
fall back to the previous one; nothing in a checkpoint runs code when it loads"""
import os, pickle, shlex, shutil, signal, subprocess, sys, textwrap, time, warnings
from pathlib import Path
import ipyparallel as ipp
import pytest
import torch
import torch.nn as nn
from ddp_nb import DDPCluster
from ddp_nb.sharded import save_sharded, load_sharded
from ddp_nb.train import save_checkpoint, load_checkpoint, checkpoints, CheckpointError, UnsafeCheckpointError

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
def _empty(p): p.write_bytes(b'')
def _world_of_4(p):
    s = torch.load(p, weights_only=True); s['world_size'] = 4; s['ranks'] = s['ranks'] * 4; torch.save(s, p)
def _not_ours(p): torch.save({'weight': torch.ones(1)}, p)


@pytest.mark.parametrize('damage,says', [(_truncate, 'unreadable'), (_garbage, 'unreadable'), (_empty, 'is empty'),
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


class _Payload:
    "What a hostile checkpoint holds: unpickling it runs `touch MARKER`"
    def __init__(self, marker): self.marker = str(marker)
    def __reduce__(self): return (os.system, (f'touch {shlex.quote(self.marker)}',))


def test_no_readable_checkpoint_left_says_what_to_do(tmp_path):
    _two_checkpoints(tmp_path)
    for p in checkpoints(tmp_path): _empty(p)
    with warnings.catch_warnings(record=True) as ws, pytest.raises(CheckpointError, match='None of the 2 checkpoints') as e:
        warnings.simplefilter('always')
        load_checkpoint(tmp_path, nn.Linear(4, 2))
    assert 'move them out of the folder' in str(e.value)
    assert sorted(p.name for p in checkpoints(tmp_path) if any(p.name in str(w.message) for w in ws)) == \
        ['step-00000001.pt', 'step-00000002.pt'], "each skipped file must be named"


def test_single_checkpoint_that_would_run_code_is_refused_not_skipped(tmp_path):
    marker = tmp_path / 'MARKER'
    m = _two_checkpoints(tmp_path / 'run')
    save_checkpoint(tmp_path / 'run', m, step=3, extra={'x': _Payload(marker)})
    with pytest.raises(UnsafeCheckpointError, match='step-00000003.pt refers to posix.system'):
        load_checkpoint(tmp_path / 'run', nn.Linear(4, 2))
    assert not marker.exists(), "loading the checkpoint ran its payload"


# ---- sharded checkpoints (torch.distributed.checkpoint): in this process, a world of one without a process group

def _two_sharded(d):
    "Sharded checkpoints at steps 1 and 2 of a model whose weights differ between them; (model at 1, model at 2)"
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)); opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        m(torch.randn(3, 4)).sum().backward(); opt.step(); save_sharded(d, m, opt, step=1)
        one = {k: v.clone() for k, v in m.state_dict().items()}
        m(torch.randn(3, 4)).sum().backward(); opt.step(); save_sharded(d, m, opt, step=2)
    return one, {k: v.clone() for k, v in m.state_dict().items()}


def _fresh():
    m = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    return m, torch.optim.AdamW(m.parameters(), lr=5.0)


def _load(src, **kw):
    "load_sharded into a fresh model: (info, model, optimizer, warnings' messages)"
    m, opt = _fresh()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        info = load_sharded(src, m, opt, **kw)
    return info, m, opt, [str(w.message) for w in ws]


def _same(m, sd): return all(torch.equal(v, sd[k]) for k, v in m.state_dict().items())


def _half(p): p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


@pytest.mark.parametrize('name,damage,says', [
    ('meta.pt', _empty, 'is empty'), ('meta.pt', _truncate, 'unreadable'), ('meta.pt', _garbage, 'unreadable'),
    ('.metadata', _empty, 'is empty'), ('.metadata', _truncate, 'unreadable'), ('.metadata', _garbage, 'unreadable'),
    ('__0_0.distcp', _half, 'is truncated'), ('__0_0.distcp', Path.unlink, 'is missing'),
    ('rank-00000.pt', _empty, 'is empty'), ('rank-00000.pt', _garbage, 'unreadable')])
def test_damaged_sharded_checkpoint_falls_back_to_the_previous_one(tmp_path, name, damage, says):
    one, two = _two_sharded(tmp_path)
    assert _same(_load(tmp_path)[1], two)
    newest = tmp_path / 'step-00000002'
    damage(newest / name)
    with pytest.raises(CheckpointError, match=says) as e:
        _load(newest)
    assert f'{newest / name}' in str(e.value), "the error must name the damaged file"
    info, m, opt, ws = _load(tmp_path)
    assert info['step'] == 1 and _same(m, one), "the previous checkpoint did not load"
    assert opt.param_groups[0]['lr'] == 1e-2
    assert any(f'{newest / name}' in w for w in ws), f"the skipped file must be named in a warning: {ws}"


def test_no_sharded_checkpoint_left_says_what_to_do(tmp_path):
    _two_sharded(tmp_path)
    for s in (1, 2): _empty(tmp_path / f'step-0000000{s}' / 'meta.pt')
    with pytest.raises(CheckpointError, match='None of the 2 sharded checkpoints') as e:
        _load(tmp_path)
    assert 'move them out of the folder' in str(e.value)


def test_hostile_sharded_metadata_runs_nothing(tmp_path):
    marker = tmp_path / 'MARKER'
    one, _ = _two_sharded(tmp_path / 'run')
    newest = tmp_path / 'run' / 'step-00000002'
    (newest / '.metadata').write_bytes(pickle.dumps(_Payload(marker)))
    for src in (tmp_path / 'run', newest):   # a run's folder does not step back past it either
        with pytest.raises(UnsafeCheckpointError, match='refers to posix.system') as e:
            _load(src)
        assert f'{newest}/.metadata' in str(e.value) and 'trust=True' in str(e.value)
    assert not marker.exists(), "loading the checkpoint ran its payload"
    # trust=True reads as torch.distributed.checkpoint does: the payload runs (documented); what it returns is no index
    info, m, _, ws = _load(tmp_path / 'run', trust=True)
    assert marker.exists(), "trust=True should unpickle as DCP does"
    assert info['step'] == 1 and _same(m, one) and any(f'{newest}/.metadata is unreadable' in w for w in ws), ws


def test_hostile_sharded_item_runs_nothing(tmp_path):
    "DCP loads non-tensor items (an optimizer's lr) with torch.load(weights_only=False); load_sharded does not"
    marker = tmp_path / 'MARKER'
    _, two = _two_sharded(tmp_path)
    m, opt = _fresh(); m.load_state_dict(two)
    opt.param_groups[0]['lr'] = _Payload(marker)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore'); save_sharded(tmp_path, m, opt, step=3)
    assert not marker.exists()
    with pytest.raises(UnsafeCheckpointError, match=r'__0_0.distcp \(its item optim.param_groups.0.lr\) refers to posix.system'):
        _load(tmp_path)
    assert not marker.exists(), "loading the checkpoint ran its payload"
    m2, opt2 = _fresh(); before = {k: v.clone() for k, v in m2.state_dict().items()}
    with pytest.raises(UnsafeCheckpointError):
        load_sharded(tmp_path, m2, opt2)
    assert _same(m2, before) and opt2.param_groups[0]['lr'] == 5.0, "a refused checkpoint changed the model"
    info, _, opt3, _ = _load(tmp_path, trust=True)
    assert marker.exists() and info['step'] == 3 and opt3.param_groups[0]['lr'] == 0, "trust=True should load as DCP does"


def test_sharded_index_cannot_point_outside_its_folder(tmp_path):
    _two_sharded(tmp_path / 'run')
    newest = tmp_path / 'run' / 'step-00000002'
    md = pickle.loads((newest / '.metadata').read_bytes())   # our own file: this test trusts it
    for info in md.storage_data.values(): info.relative_path = '../../outside.distcp'
    shutil.copy(newest / '__0_0.distcp', tmp_path / 'outside.distcp')
    (newest / '.metadata').write_bytes(pickle.dumps(md))
    with pytest.raises(UnsafeCheckpointError, match="points at '../../outside.distcp', outside its folder"):
        _load(tmp_path / 'run')


# ---- on a real two-rank cluster

@ipp.interactive  # defined in a test module, which the engines cannot import
def _sharded_rank(action, folder):
    "'save': train and save steps 1 and 2, returning this rank's shards at each; 'load': into a fresh model"
    import warnings, torch, torch.nn as nn, torch.nn.functional as F
    from ddp_nb.sharded import shard_model, save_sharded, load_sharded
    torch.manual_seed(0 if action == 'save' else 9)
    m = shard_model(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)), wrap=(nn.Linear,))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    def shards(): return [p.to_local().detach().clone() for p in m.parameters()]
    if action == 'save':
        g, out = torch.Generator().manual_seed(1), []
        for step in (1, 2):
            F.mse_loss(m(torch.randn(16, 8, generator=g)), torch.zeros(16, 4)).backward(); opt.step(); opt.zero_grad()
            save_sharded(folder, m, opt, step=step); out.append(shards())
        return out
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        try: info = load_sharded(folder, m, opt, exact=action != 'loose')
        except Exception as e: return dict(error=type(e).__name__, message=str(e))
    return dict(step=info['step'], shards=shards(), warnings=[str(w.message) for w in ws],
                whole=[p.full_tensor() for p in m.parameters()])   # a collective: every rank calls it


def test_sharded_checkpoints_on_two_ranks(tmp_path, no_leftovers):
    "Every rank gets rank 0's decision: a refusal (no rank left waiting), a fall-back, or the checkpoint, bit for bit"
    folder, marker, keep = tmp_path / 'run', tmp_path / 'MARKER', tmp_path / 'keep'
    newest = folder / 'step-00000002'
    with DDPCluster(n=2) as cl:
        def on_ranks(*args): return dict(enumerate(cl.run(_sharded_rank, *args, timeout=180)))
        saved = on_ranks('save', str(folder))            # rank -> [its shards at step 1, at step 2]
        shutil.copytree(newest, keep)
        (newest / '.metadata').write_bytes(pickle.dumps(_Payload(marker)))
        for r in on_ranks('load', str(folder)).values():
            assert r.get('error') == 'UnsafeCheckpointError' and f'{newest}/.metadata refers to posix.system' in r['message'], r
        assert not marker.exists(), "loading the checkpoint ran its payload"
        shutil.rmtree(newest); shutil.copytree(keep, newest)
        _half(newest / '__1_0.distcp')                   # rank 1's shards cut short
        got = on_ranks('load', str(folder))
        for rank, r in got.items():
            assert r.get('step') == 1 and all(map(torch.equal, r['shards'], saved[rank][0])), (rank, r)
        assert any(f'{newest}/__1_0.distcp is truncated' in w for w in got[0]['warnings']), got[0]['warnings']
        shutil.rmtree(newest); shutil.copytree(keep, newest)
        for rank, r in on_ranks('load', str(folder)).items():
            assert r.get('step') == 2 and all(map(torch.equal, r['shards'], saved[rank][1])), (rank, r)
        # a world of one's checkpoint on two ranks (exact=False): rank 1 has no rank file of its own and needs none
        torch.manual_seed(5)
        plain = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)); popt = torch.optim.AdamW(plain.parameters())
        plain(torch.randn(2, 8)).sum().backward(); popt.step()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore'); save_sharded(tmp_path / 'one', plain, popt, step=5)
        for rank, r in on_ranks('loose', str(tmp_path / 'one')).items():
            assert r.get('step') == 5 and all(map(torch.equal, r['whole'], plain.parameters())), (rank, r)
