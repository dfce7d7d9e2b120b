"""This round's features on the GPU (`make test-gpu`): the step breakdown timed with CUDA events (no added syncs),
collectives recorded by the flight recorder under nccl (DDP's C++ all-reduces too), FSDP2 with bf16 and CPU offload
and sharded checkpoints that resume bit-identically, a compiled model warm between calls, the merged profile with
CUDA kernels, and Lightning Fabric on a CUDA rank.

Skipped where no CUDA GPU is visible. One GPU: nccl at world size 1."""
import time
import pytest
import ipyparallel as ipp
from conftest import gpu_marks, one_gpu_rank

N_GPUS, pytestmark = gpu_marks()


@pytest.fixture(scope='module')
def cl(): yield from one_gpu_rank()


# ---------------------------------------------------------------- the step breakdown: CUDA events, no syncs

@ipp.interactive
def _timed_fit():
    import collections, os, time, warnings, torch
    from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit
    from ddp_nb.timing import StepTimer
    from ddp_nb.digits import digits_data, DigitsNet
    from ddp_nb.context import ctx
    from ddp_nb.report import connect
    addr, nonce, rank = ctx.reporter.addr, ctx.reporter.nonce, ctx.reporter.rank
    connect(addr, nonce, rank, interval=3600)   # the sender thread waits: its .item() of reported losses (off the training thread) would count too
    seed_everything(0)
    model = wrap_model(DigitsNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = ShardedLoader(digits_data(), batch_size=16, seed=0)
    fit(model, loader, opt, epochs=1, timing=True)   # warm-up (DDP rebuilds its buckets: a sync)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try:
            torch.cuda.synchronize(); t = time.perf_counter()
            fit(model, loader, opt, epochs=3, timing=True)   # epochs: until the loader has done 3 (two more)
            torch.cuda.synchronize(); wall = time.perf_counter() - t
        finally: torch.cuda.set_sync_debug_mode('default')
    ctx.reporter.flush(); connect(addr, nonce, rank)   # now the points go out
    where = collections.Counter(f"{os.path.basename(w.filename)}:{w.lineno}" for w in ws if 'synchroniz' in str(w.message))
    return dict(syncs=sum(where.values()), where=dict(where), steps=len(loader), wall_ms=wall * 1e3,
                clock=StepTimer(model).clock.kind)


def test_step_breakdown_uses_cuda_events_and_adds_no_sync(cl):
    r = cl.run(_timed_fit)[0]
    print(r)
    assert r['clock'] == 'cuda', r
    assert r['syncs'] < 2 * r['steps'] / 10, f"{r['syncs']} device syncs in {2 * r['steps']} timed steps, at {r['where']}"
    deadline = time.monotonic() + 10
    while True:   # every timed step's breakdown reached the notebook, and it adds up
        pts = [p for p in cl.history.records() if 't_step' in p and p['rank'] == 0]
        if len(pts) >= 3 * r['steps'] or time.monotonic() > deadline: break
        time.sleep(0.2)
    assert len(pts) >= 3 * r['steps'], (len(pts), r)
    last = pts[-r['steps']:]
    for p in last[:5]:
        parts = sum(v for k, v in p.items() if k.startswith('t_') and k != 't_step')
        assert abs(parts - p['t_step']) <= 0.05 * p['t_step'] + 0.05, p   # the phases tile the step
        assert p['t_compute'] > 0, p
    total = sum(p['t_step'] for p in pts[-2 * r['steps']:])
    assert 0.5 * r['wall_ms'] <= total <= 1.05 * r['wall_ms'], (total, r['wall_ms'])   # event times are the GPU's real time


# ---------------------------------------------------------------- collectives recorded under nccl

@ipp.interactive
def _some_collectives():
    import torch, torch.distributed as dist
    from ddp_nb.train import wrap_model
    t = torch.ones(1000, device=device); dist.all_reduce(t)
    u = torch.zeros(10, dtype=torch.int64, device=device); dist.broadcast(u, 0)
    m = wrap_model(torch.nn.Linear(32, 4))
    m(torch.randn(8, 32, device=device)).sum().backward()   # DDP's gradient all-reduce, issued from C++
    torch.cuda.synchronize()
    from ddp_nb.collectives import records
    return records(20)


def test_collectives_recorded_under_nccl(cl):
    recs = cl.run(_some_collectives)[0]
    ops = [(r['op'], r['shapes'], r['dtypes']) for r in recs]
    print(ops)
    assert ('allreduce', ['[1000]'], ['float32']) in ops or ('all_reduce', ['[1000]'], ['float32']) in ops, ops
    assert any(op == 'broadcast' and d == ['int64'] for op, _, d in ops), ops
    a = next(r for r in recs if r['shapes'] == ['[1000]'])
    assert a['state'] == 'done' and a['where'], a     # completed, with the user's source line
    tab = str(cl.collectives(last=10))
    assert '[1000]' in tab and 'broadcast' in tab, tab


# ---------------------------------------------------------------- FSDP2 on the GPU

@ipp.interactive
def _fsdp(folder, stop_after):
    import torch, torch.nn as nn
    from ddp_nb.train import seed_everything, ShardedLoader, fit
    from ddp_nb.sharded import shard_model, shard_summary, SHARDED
    from ddp_nb.digits import digits_data, param_digest
    def net(): return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    def job(**kw):
        seed_everything(0)
        m = shard_model(net(), wrap=(nn.Linear,), **kw)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3), ShardedLoader(digits_data(), batch_size=32, seed=0)
    m, o, l = job(mp_policy=torch.bfloat16); full = fit(m, l, o, epochs=3)
    ref = param_digest(m)
    m, o, l = job(mp_policy=torch.bfloat16); fit(m, l, o, epochs=3, ckpt_dir=folder, checkpointer=SHARDED, max_steps=stop_after)
    del m, o, l
    m, o, l = job(mp_policy=torch.bfloat16); r = fit(m, l, o, epochs=3, ckpt_dir=folder, checkpointer=SHARDED)
    resumed = param_digest(m)
    mo, oo, lo = job(offload=True); off = fit(mo, lo, oo, epochs=2)
    return dict(full=full['losses'], losses=r['losses'], ref=ref, resumed=resumed, resumed_from=r['resumed_from'],
                on=sorted({str(p.to_local().device) for p in m.parameters()}), param_dtype=str(next(m.parameters()).dtype),
                off_on=sorted({str(p.to_local().device) for p in mo.parameters()}), off_losses=off['losses'],
                rows=len(shard_summary(m)))


def test_fsdp2_bf16_sharded_checkpoint_resumes_bit_identically_and_offload_trains(cl, tmp_path):
    r = cl.run(_fsdp, str(tmp_path / 'ckpt'), 60)[0]
    print(r)
    assert r['on'] == ['cuda:0'] and r['param_dtype'] == 'torch.float32', r   # fp32 master shards, bf16 compute
    assert r['full'][-1] < r['full'][0] / 2, r
    assert r['resumed_from'] == 60 and r['losses'] == r['full'] and r['resumed'] == r['ref'], r
    assert r['off_on'] == ['cpu'] and r['off_losses'][-1] < r['off_losses'][0], r   # CPUOffloadPolicy: shards in CPU memory
    assert r['rows'] == 6, r


# ---------------------------------------------------------------- torch.compile kept warm

@ipp.interactive
def _compiled():
    import time, torch, torch.nn as nn
    from ddp_nb.train import wrap_model, seed_everything
    seed_everything(0)
    net = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 10)).to(device)
    model = wrap_model(torch.compile(net))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device)
    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
        torch.cuda.synchronize(); return loss.item()
    t = time.perf_counter(); step(); first = time.perf_counter() - t
    times = []
    for _ in range(10):
        t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
    globals()['_warm_step'] = step
    return dict(first=first, next=sorted(times)[5])


@ipp.interactive
def _again():
    import time
    t = time.perf_counter(); _warm_step(); return time.perf_counter() - t


def test_compiled_model_stays_warm_between_calls(cl):
    r = cl.run(_compiled)[0]
    print(r)
    assert r['first'] > 20 * r['next'], r      # the first call compiles
    again = cl.run(_again)[0]                  # a later cell: the compiled code is still there
    assert again < max(10 * r['next'], 0.05), (again, r)


# ---------------------------------------------------------------- the merged profile holds the CUDA kernels

@ipp.interactive
def _profile_setup():
    import torch, torch.nn as nn
    from ddp_nb.train import wrap_model
    globals()['_pm'] = wrap_model(nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10)))
    globals()['_px'] = torch.randn(256, 512, device=device)

@ipp.interactive
def _profile_step():
    _pm(_px).sum().backward()


def test_merged_profile_holds_cuda_kernels(cl, tmp_path):
    cl.run(_profile_setup)
    p = cl.profile(_profile_step, steps=3, folder=str(tmp_path))
    print(p)
    evs = [e for e in p.trace['traceEvents'] if e.get('ph') == 'X']
    kernels = [e for e in evs if e.get('cat') == 'kernel']
    assert kernels, f"no CUDA kernel in the merged trace: {sorted({e.get('cat') for e in evs if e.get('cat')})}"
    assert {e['pid'] for e in kernels} == {0}, "the GPU's kernels belong to rank 0's process in the merged trace"
    steps = [e for e in evs if e['name'].startswith('ddp_nb::step ')]
    lo, hi = min(e['ts'] for e in steps), max(e['ts'] + e['dur'] for e in steps)
    inside = [e for e in kernels if lo - 1e3 <= e['ts'] <= hi + 50e3]
    assert len(inside) >= 0.9 * len(kernels), f"GPU kernels off the ranks' clock: {len(inside)} of {len(kernels)} inside [{lo}, {hi}] us"
    s = p.summary[0]
    assert s['steps'] == 3 and s['compute'] > 0 and 0 <= s['idle'] <= s['step'], s


# ---------------------------------------------------------------- Lightning Fabric on a CUDA rank

@ipp.interactive
def _fabric():
    import torch
    from lightning.fabric import Fabric
    from ddp_nb.fabric import fabric_ready
    fabric_ready()   # once per rank, as tutorial 25 shows (the engine looks interactive to Lightning)
    fab = Fabric(strategy='ddp', accelerator='cuda', devices=1)
    fab.launch()
    net = torch.nn.Linear(8, 2)
    m, o = fab.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    return dict(world=fab.world_size, device=str(fab.device), param=str(next(m.parameters()).device))


def test_fabric_runs_on_the_cuda_rank(cl):
    pytest.importorskip('lightning')
    r = cl.run(_fabric)[0]
    assert r == dict(world=1, device='cuda:0', param='cuda:0'), r
