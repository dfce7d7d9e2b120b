"""The GPU path (`make test-gpu`, tools/test_gpu.sh): an nccl group on CUDA ranks, the quickstart's training, report()
without device syncs, fp16/bf16 autocast, checkpoints that resume on the GPU, SyncBatchNorm, a script run beside the nccl group
(cl.run_script), the error for more nccl ranks than GPUs (and the gloo fallback it suggests), and the dashboard's NVML load against nvidia-smi.

Skipped where no CUDA GPU is visible. One GPU is enough: nccl runs at world size 1 there."""
import json, os, subprocess, sys, time
import pytest
import ipyparallel as ipp
from conftest import gpu_marks, one_gpu_rank, ours, run
from ddp_nb import DDPCluster

N_GPUS, pytestmark = gpu_marks()


@pytest.fixture(scope='module')
def cl(): yield from one_gpu_rank()


# ---------------------------------------------------------------- the cluster on the GPU

def test_ddp_nb_counts_the_gpus_torch_sees():
    from ddp_nb.host import local_gpus
    assert local_gpus() == N_GPUS, (f"ddp_nb.cluster.local_gpus() = {local_gpus()} (it counts /proc/driver/nvidia/gpus) but torch "
                                    f"sees {N_GPUS}: DDPCluster() would pick the wrong backend and engine count here")
    c = DDPCluster()   # nothing starts until start()
    assert (c.n, c.backend) == (N_GPUS, 'nccl')


@ipp.interactive   # defined in a test module: resolved in the rank's namespace (device, dist, ...)
def _rank_facts():
    import os, torch, torch.distributed as dist
    t = torch.ones(1, device=device); dist.all_reduce(t)
    return dict(backend=dist.get_backend(), device=str(device), current=torch.cuda.current_device(), sum=t.item(),
                world=dist.get_world_size(), env={k: os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE')})


def test_nccl_group_on_the_gpu(cl):
    assert cl.backend == 'nccl' and cl.world_size == 1
    assert [r.device for r in cl.ranks] == ['cuda:0']
    f = cl.run(_rank_facts)[0]
    assert f == dict(backend='nccl', device='cuda:0', current=0, sum=1.0, world=1,
                     env=dict(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', LOCAL_WORLD_SIZE='1')), f


@ipp.interactive
def _train_digits(epochs, lr, batch_size, seed):
    from ddp_nb.digits import train
    return train(epochs, lr, batch_size, seed)

DIGITS = dict(epochs=3, lr=0.05, batch_size=16, seed=7)


def test_quickstart_digits_train_on_the_gpu(cl):
    r = cl.run(_train_digits, *DIGITS.values())[0]
    assert r['losses'][-1] < r['losses'][0] / 2, r['losses']
    assert r['accuracy'] > 0.85, r


def test_quickstart_digits_bit_identical_to_torchrun(cl, tmp_path):
    ours_ = cl.run(_train_digits, *DIGITS.values())[0]
    out = tmp_path / 'torchrun.json'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=1', '--no-python',
           sys.executable, '-c', 'from ddp_nb.cli import main; main()', 'train-digits', '--out', str(out)]
    cmd += [f"--{k.replace('_', '-')}={v}" for k, v in DIGITS.items()]
    threads = cl.view['torch.get_num_threads()'][0]
    run(cmd, timeout=180, env={**os.environ, 'OMP_NUM_THREADS': str(threads)})  # fails showing torchrun's output
    ref = json.loads(out.read_text())
    assert ref['losses'] == ours_['losses'], f"losses differ on the GPU: torchrun {ref['losses']}, ddp_nb {ours_['losses']}"
    assert ref['digest'] == ours_['digest'], "same losses, different weights"


# ---------------------------------------------------------------- report() and fit() add no device sync

@ipp.interactive
def _report_under_sync_check(steps):
    "Train on the GPU calling report(loss=cuda tensor) every step with torch's sync check set to 'error'; then a control"
    import torch, torch.nn as nn, torch.nn.functional as F
    from ddp_nb.context import ctx
    from ddp_nb.report import connect, report
    addr, nonce, rank = ctx.reporter.addr, ctx.reporter.nonce, ctx.reporter.rank
    connect(addr, nonce, rank, interval=3600)   # the sender thread waits: its .item() (off the training thread) would trip the check too
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(512, 64, device=device), torch.randint(0, 10, (512,), device=device)
    def step():
        loss = F.cross_entropy(model(x), y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        return loss.detach()
    for _ in range(3): step()
    torch.cuda.synchronize()
    out, prev = {}, torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode('error')
    try:
        try:
            for i in range(steps): report(step=i, sync_probe=step())
            out['error'] = None
        except RuntimeError as e: out['error'] = str(e)[:300]
        try: step().item(); out['control'] = None   # a real sync must trip the check, or the test proves nothing
        except RuntimeError as e: out['control'] = str(e)[:200]
    finally: torch.cuda.set_sync_debug_mode(prev)
    ctx.reporter.flush()                    # now the points go out (the sender's .item() outside the check)
    connect(addr, nonce, rank)                  # the usual 100 ms sender again
    return out


def test_report_of_a_cuda_tensor_adds_no_device_sync(cl):
    steps = 50
    out = cl.run(_report_under_sync_check, steps)[0]
    assert out['control'] and 'synchroniz' in out['control'], f"the sync check did not catch .item(): {out}"
    assert out['error'] is None, f"a device sync inside the training loop with report(): {out['error']}"
    deadline = time.monotonic() + 10
    while True:   # and every reported point arrived, with its value
        pts = [r for r in cl.history.records() if 'sync_probe' in r and r['rank'] == 0]
        if len(pts) >= steps or time.monotonic() > deadline: break
        time.sleep(0.2)
    assert sorted(r['step'] for r in pts)[-steps:] == list(range(steps)), pts[-3:]
    assert all(0 < r['sync_probe'] < 10 for r in pts[-steps:]), pts[-3:]


@ipp.interactive
def _fit_syncs():
    """Device syncs during fit() epochs (after a warm-up epoch), counted with torch's sync check in 'warn' mode (the Python
    thread's: a sync inside backward, on autograd's device thread, would print rather than count)"""
    import collections, os, warnings, torch
    from ddp_nb.context import ctx
    from ddp_nb.report import connect
    from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit
    from ddp_nb.digits import digits_data, DigitsNet
    addr, nonce, rank = ctx.reporter.addr, ctx.reporter.nonce, ctx.reporter.rank
    connect(addr, nonce, rank, interval=3600)
    seed_everything(0)
    model = wrap_model(DigitsNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = ShardedLoader(digits_data(), batch_size=16, seed=0)
    fit(model, loader, opt, epochs=1)   # warm-up: DDP's first iterations rebuild buckets (a sync)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try: r = fit(model, loader, opt, epochs=3)
        finally: torch.cuda.set_sync_debug_mode('default')
    ctx.reporter.flush(); connect(addr, nonce, rank)
    where = collections.Counter(f"{os.path.basename(w.filename)}:{w.lineno}" for w in ws if 'synchroniz' in str(w.message))
    return dict(syncs=sum(where.values()), where=dict(where), steps=2 * len(loader), losses=r['losses'])


def test_fit_adds_no_sync_per_step(cl):
    r = cl.run(_fit_syncs)[0]
    print(r)
    assert r['syncs'] < r['steps'] / 10, f"{r['syncs']} device syncs in {r['steps']} steps of fit(), at {r['where']}"


# ---------------------------------------------------------------- mixed precision

@ipp.interactive
def _amp_runs():
    import torch
    from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit, grad_scaler, amp_dtype, autocast
    from ddp_nb.digits import digits_data, DigitsNet
    import torch.nn.functional as F
    def job():
        seed_everything(0)
        model = wrap_model(DigitsNet())
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), ShardedLoader(digits_data(), global_batch_size=64, seed=0)
    def with_fit(amp):
        m, o, l = job(); return fit(m, l, o, epochs=4, amp=amp)['losses']
    def by_hand(dtype):   # the same loop as fit's, with the autocast type chosen (fit picks fp16 on CUDA)
        m, o, l = job(); sc, losses = grad_scaler(enabled=dtype is not None, dtype=dtype), []
        for _ in range(4):
            tot = torch.zeros(2, device=device)
            for x, y in l:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with autocast(enabled=dtype is not None, dtype=dtype): loss = F.cross_entropy(m(x), y)
                sc.scale(loss).backward(); sc.step(o); sc.update(); o.zero_grad(set_to_none=True)
                tot += torch.stack([loss.detach().float(), torch.ones((), device=device)])
            losses.append((tot[0] / tot[1]).item())
        return losses, sc.is_enabled()
    with autocast(): out16 = torch.nn.Linear(64, 10).to(device)(torch.randn(4, 64, device=device))
    with autocast(dtype=torch.bfloat16): outbf = torch.nn.Linear(64, 10).to(device)(torch.randn(4, 64, device=device))
    fp32_h, _ = by_hand(None)
    bf16, bf16_scaled = by_hand(torch.bfloat16)
    return dict(fp32=with_fit(False), fp16=with_fit(True), fp32_h=fp32_h, bf16=bf16, bf16_scaled=bf16_scaled,
                scaler_fp16=grad_scaler().is_enabled(), amp_dtype=str(amp_dtype(device)), out16=str(out16.dtype),
                outbf=str(outbf.dtype), bf16_ok=torch.cuda.is_bf16_supported())


def test_fp16_with_grad_scaler_and_bf16_train_within_tolerance(cl):
    r = cl.run(_amp_runs)[0]
    print(r)
    assert r['amp_dtype'] == 'torch.float16' and r['scaler_fp16'] and r['out16'] == 'torch.float16', r
    assert abs(r['fp16'][-1] - r['fp32'][-1]) < 0.05 * r['fp32'][-1], r      # fit(amp=True): fp16 + GradScaler within 5 %
    assert r['fp16'][-1] < r['fp16'][0] / 2, r
    assert r['bf16_ok'] and r['outbf'] == 'torch.bfloat16' and not r['bf16_scaled'], r   # bf16 needs no scaling
    assert abs(r['bf16'][-1] - r['fp32_h'][-1]) < 0.05 * r['fp32_h'][-1], r   # bf16 autocast within 5 %
    assert r['bf16'][-1] < r['bf16'][0] / 2, r


# ---------------------------------------------------------------- checkpoints on the GPU

@ipp.interactive
def _checkpoint_resume(folder, stop_after):
    import torch
    from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit, read_checkpoint, checkpoints
    from ddp_nb.digits import digits_data, DigitsNet, param_digest
    def job():
        seed_everything(0)
        model = wrap_model(DigitsNet())
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), ShardedLoader(digits_data(), batch_size=32, seed=0)
    m, o, l = job(); full = fit(m, l, o, epochs=3, amp=True)                  # uninterrupted (fp16: the GradScaler's state counts too)
    ref = param_digest(m)
    m, o, l = job(); fit(m, l, o, epochs=3, amp=True, ckpt_dir=folder, max_steps=stop_after)   # stops mid-epoch, checkpointed
    del m, o, l
    m, o, l = job(); r = fit(m, l, o, epochs=3, amp=True, ckpt_dir=folder)    # a fresh model, optimizer and loader resume
    st = read_checkpoint(checkpoints(folder)[0])
    return dict(ref=ref, resumed=param_digest(m), resumed_from=r['resumed_from'], full=full['losses'], losses=r['losses'],
                loaded_on=sorted({str(v.device) for v in st['model'].values()}), params_on=sorted({str(p.device) for p in m.parameters()}),
                momentum_on=sorted({str(s['momentum_buffer'].device) for s in o.state.values()}), device=str(device))


def test_checkpoint_saved_on_gpu_resumes_bit_identically(cl, tmp_path):
    r = cl.run(_checkpoint_resume, str(tmp_path / 'ckpt'), 60)[0]   # 47 batches an epoch: step 60 is inside the 2nd epoch
    assert r['resumed_from'] == 60, r
    assert r['loaded_on'] == ['cpu'], r   # read onto the CPU first (Adam's step counters stay there, as torch keeps them)...
    assert r['params_on'] == r['momentum_on'] == [r['device']], r   # ...then load_state_dict puts the rest where the parameters are
    assert r['losses'] == r['full'], r
    assert r['resumed'] == r['ref'], "resumed weights differ from the uninterrupted run's"


@ipp.interactive
def _adam_step_device(folder):
    import torch
    from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit, load_checkpoint
    from ddp_nb.digits import digits_data, DigitsNet
    seed_everything(0)
    m = wrap_model(DigitsNet()); o = torch.optim.AdamW(m.parameters(), foreach=True)   # not fused: torch keeps 'step' on the CPU
    fit(m, ShardedLoader(digits_data(), batch_size=256), o, epochs=1, ckpt_dir=folder)
    m2 = wrap_model(DigitsNet()); o2 = torch.optim.AdamW(m2.parameters(), foreach=True)
    load_checkpoint(folder, m2, o2)
    return dict(before=sorted({str(s['step'].device) for s in o.state.values()}), after=sorted({str(s['step'].device) for s in o2.state.values()}))


def test_resumed_adam_keeps_its_step_on_the_cpu(cl, tmp_path):
    r = cl.run(_adam_step_device, str(tmp_path / 'ckpt'))[0]
    assert r['before'] == ['cpu'], r          # torch's own placement, as saved
    assert r['after'] == r['before'], r       # and where a resumed optimizer must find it


# ---------------------------------------------------------------- SyncBatchNorm

@ipp.interactive
def _syncbn():
    import torch, torch.nn as nn, torch.nn.functional as F
    from ddp_nb.train import wrap_model, seed_everything
    def net(): return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    seed_everything(0); ref = net().to(device)
    seed_everything(0); m = wrap_model(net(), sync_bn=True)
    kinds = sorted({type(x).__name__ for x in m.module.modules()})
    x, y = torch.randn(32, 3, 16, 16, device=device), torch.randint(0, 10, (32,), device=device)
    opts, losses = [torch.optim.SGD(mod.parameters(), lr=0.1) for mod in (ref, m)], []
    for _ in range(20):
        ls = []
        for mod, opt in zip((ref, m), opts):
            opt.zero_grad(); loss = F.cross_entropy(mod(x), y); loss.backward(); opt.step(); ls.append(loss.item())
        losses.append(ls)
    bn_r, bn_m = ref[1], m.module[1]
    diff = max((a - b).abs().max().item() for a, b in zip(ref.parameters(), m.module.parameters()))
    stats = max((bn_r.running_mean - bn_m.running_mean).abs().max().item(), (bn_r.running_var - bn_m.running_var).abs().max().item())
    return dict(kinds=kinds, losses=losses, diff=diff, stats=stats, bn_device=str(bn_m.weight.device))


def test_syncbatchnorm_converts_and_trains_at_world_size_1(cl):
    r = cl.run(_syncbn)[0]
    assert 'SyncBatchNorm' in r['kinds'] and 'BatchNorm2d' not in r['kinds'], r['kinds']
    assert r['bn_device'] == 'cuda:0'
    assert r['losses'][-1][1] < r['losses'][0][1], r['losses']
    assert r['diff'] < 1e-5 and r['stats'] < 1e-5, r   # one rank: SyncBatchNorm is BatchNorm


def test_a_script_runs_beside_the_nccl_group_and_a_ddp_model_built_before_trains_after(cl, tmp_path):
    "cl.run_script on nccl: the script forms its own nccl group; the cluster's, set aside meanwhile, is the same after"
    script = tmp_path / 'nccl_script.py'
    script.write_text("import os, torch, torch.distributed as dist\n"
                      "dist.init_process_group('nccl', device_id=torch.device('cuda', int(os.environ['LOCAL_RANK'])))\n"
                      "t = torch.ones(4, device='cuda'); dist.all_reduce(t); assert t.sum().item() == 4 * dist.get_world_size()\n"
                      "dist.destroy_process_group()\n")
    cl.run("m = DDP(torch.nn.Linear(8, 2).to(device)); pg = dist.group.WORLD\n"
           "m(torch.ones(3, 8, device=device)).sum().backward()")
    assert [r['exit_code'] for r in cl.run_script(script)] == [0]
    cl.run("m(torch.ones(3, 8, device=device)).sum().backward(); torch.cuda.synchronize()")   # its group was not shut down
    assert cl.view['dist.group.WORLD is pg and m.process_group is pg'] == [True]


# ---------------------------------------------------------------- more ranks than GPUs

def test_more_nccl_ranks_than_gpus_says_what_works():
    before = {p.pid for p in ours()}   # the module's cluster (`cl`) may be running
    for kw in ({}, dict(backend='nccl')):
        with pytest.raises(ValueError) as e: DDPCluster(n=N_GPUS + 1, **kw)
        msg = str(e.value)
        assert f"only {N_GPUS} GPU(s)" in msg and f"n<={N_GPUS}" in msg and "backend='gloo'" in msg, msg
    assert {p.pid for p in ours()} == before, "the refused cluster started processes"


@ipp.interactive
def _gloo_facts():
    import torch.distributed as dist
    from ddp_nb.digits import train
    r = train(epochs=2, lr=0.05, batch_size=16, seed=0)
    return dict(backend=dist.get_backend(), device=str(device), losses=r['losses'])


def test_the_gloo_fallback_the_error_suggests_starts_and_trains():
    "DDPCluster(n=GPUs+1, backend='gloo'): the first ranks on their GPUs, the extra one on the CPU; DDP over gloo trains"
    with DDPCluster(n=N_GPUS + 1, backend='gloo') as c:
        assert [r.device for r in c.ranks] == [f'cuda:{i}' for i in range(N_GPUS)] + ['cpu']
        rs = c.run(_gloo_facts)
    assert {r['backend'] for r in rs} == {'gloo'}
    assert [r['device'] for r in rs] == [f'cuda:{i}' for i in range(N_GPUS)] + ['cpu']
    assert all(r['losses'][-1] < r['losses'][0] for r in rs), rs
    assert len({tuple(round(l, 4) for l in r['losses']) for r in rs}) == 1, rs   # the ranks report the same all-reduced losses


# ---------------------------------------------------------------- the dashboard's GPU load (NVML) vs nvidia-smi

def _smi(uuid):
    "nvidia-smi's view of the GPU `uuid`: MiB used/total (and reserved, where it reports it), utilisation %"
    def q(fields):
        r = subprocess.run(['nvidia-smi', f'--query-gpu=uuid,{fields}', '--format=csv,noheader,nounits'], capture_output=True, text=True, timeout=30)
        return {l.split(',')[0].strip(): [f.strip() for f in l.split(',')[1:]] for l in r.stdout.splitlines() if l.strip()} if r.returncode == 0 else {}
    base = q('memory.used,memory.total,utilization.gpu')
    assert uuid in base, f"nvidia-smi does not list {uuid}: {base}"
    used, total, util = map(float, base[uuid])
    res = q('memory.reserved').get(uuid, ['nan'])[0]
    return dict(used=used, total=total, util=util, reserved=float(res) if res.replace('.', '').isdigit() else None)


@ipp.interactive
def _gpu_uuid():
    import torch
    from ddp_nb.report import nvml_uuid
    return nvml_uuid(torch.cuda.get_device_properties(device).uuid).decode()


@ipp.interactive
def _busy(seconds):
    "Keep this rank's GPU busy for `seconds` from a thread (the engine stays free)"
    import threading, time, torch
    def spin():
        a = torch.randn(4096, 4096, device=device); t = time.time()
        while time.time() - t < seconds:
            for _ in range(20): a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize(device)
    th = threading.Thread(target=spin, daemon=True); th.start()
    globals()['_ddp_nb_busy'] = th


def _fresh_load(cl, after):
    "The rank's load as the dashboard got it, from a sample sent after `after` (time.time())"
    rs, deadline = cl._collector.ranks[0], time.monotonic() + 10
    while time.monotonic() < deadline:
        if rs.seen > after + 1.2 and 'gpu' in rs.load: return dict(rs.load)   # the engine samples its load every second
        time.sleep(0.1)
    raise AssertionError(f"no GPU load from rank 0 within 10 s: {rs.load}")


def test_dashboard_gpu_load_matches_nvidia_smi(cl):
    uuid = cl.run(_gpu_uuid)[0]
    load, smi = _fresh_load(cl, time.time()), _smi(uuid)
    mib = lambda b: b / 2**20
    assert abs(mib(load['gpu_total']) - smi['total']) <= 1, (load, smi)
    off = mib(load['gpu_mem']) - smi['used']
    why = (f"; nvidia-smi also reports {smi['reserved']:.0f} MiB reserved by the driver: NVML's v1 memory info counts it as used "
           "(nvmlDeviceGetMemoryInfo_v2 does not)") if smi['reserved'] and abs(off - smi['reserved']) < 64 else ''
    assert abs(off) <= 64, f"dashboard {mib(load['gpu_mem']):.0f} MiB used, nvidia-smi {smi['used']:.0f} MiB{why}"
    cl.run(_busy, 6)
    time.sleep(2)
    load, smi = _fresh_load(cl, time.time()), _smi(uuid)
    assert load['gpu'] >= 50 and smi['util'] >= 50 and abs(load['gpu'] - smi['util']) <= 40, (load, smi)
    cl.view.execute('_ddp_nb_busy.join(30)')


def test_each_rank_holds_a_context_on_its_own_gpu_only(cl):
    "After training and checkpointing (which touch every GPU's RNG), an engine's process is on its own GPU alone"
    uuid = cl.run(_gpu_uuid)[0]
    r = subprocess.run(['nvidia-smi', '--query-compute-apps=pid,gpu_uuid', '--format=csv,noheader'], capture_output=True, text=True, timeout=30)
    apps = [tuple(f.strip() for f in l.split(',')) for l in r.stdout.splitlines() if l.strip()]
    pid = str(cl.ranks[0].pid)
    if not any(p == pid for p, _ in apps): pytest.skip(f"nvidia-smi lists no process ids usable here (a PID namespace?): {apps}")
    assert {u for p, u in apps if p == pid} == {uuid}, apps
