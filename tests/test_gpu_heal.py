"""The fork server and heal on the GPU (`make test-gpu`): ranks forked from the warm fork server use CUDA (the server
imports torch, and its warm copy `LATER`'s inductor modules once idle, without making a CUDA context), a replacement
forked after that (by the copy) compiles on the GPU; heal moves a model and its optimizer between a CUDA rank and a CPU rank (gloo, one
GPU), both ways, onto the new rank's own device (the buffer through host memory: gloo cannot read a GPU's; the loader's
random generator and Adam's step counters stay on the CPU); and a resize keeps each staying rank on its device.

Skipped where no CUDA GPU is visible. (Heal over nccl needs two GPUs: nccl refuses two ranks on one.)"""
import os, signal, time
import pytest
import ipyparallel as ipp
from conftest import gpu_marks, ours
from ddp_nb import DDPCluster
from ddp_nb.forkserver import LATER, fork_server
from ddp_nb.host import pid_alive

N_GPUS, pytestmark = gpu_marks()


def _kill(c, rank, limit=10):
    "kill -9 the engine of `rank`; wait until it is gone"
    pid = c.ranks[rank].pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + limit
    while pid_alive(pid): assert time.monotonic() < deadline, f"rank {rank} (pid {pid}) outlived SIGKILL"; time.sleep(0.01)


@ipp.interactive
def _on_device(compile_too):
    import torch, torch.distributed as dist
    from ddp_nb import forkserver
    t = torch.ones(1, device=device); dist.all_reduce(t)
    r = dict(sum=t.item(), device=str(t.device), forked_with=list(forkserver.forked_with))
    if compile_too:   # inductor (imported by the server before the fork) compiles and runs on this rank's GPU
        f = torch.compile(lambda x: (x.sin() + 1).sum())
        r['compiled'] = round(f(torch.zeros(64, device=device)).item(), 3)
    return r


def test_forked_ranks_use_the_gpu_and_a_replacement_compiles_after_the_server_warmed():
    assert ours() == [], "processes from an earlier test are still running"
    t0 = time.monotonic()
    with DDPCluster(n=1, fork_server=True) as c:
        start_s = time.monotonic() - t0
        dev = c.ranks[0].device
        assert c.run(_on_device, False)[0] == dict(sum=1.0, device=dev, forked_with=[])
        srv = fork_server(c.cluster_id)
        assert srv is not None, "DDPCluster(fork_server=True) started no fork server"
        assert srv.wait_later(60) == list(LATER), srv.later   # its warm copy imports LATER once idle for IDLE_BEFORE_LATER s
        _kill(c, 0)
        t = time.monotonic(); c.restart(); replace_s = time.monotonic() - t
        assert c.run(_on_device, True, timeout=300)[0] == dict(sum=1.0, device=dev, forked_with=list(LATER), compiled=64.0)
    print(f"fork server on {dev}: start {start_s:.2f} s, replace {replace_s:.2f} s")
    assert ours() == [], "the cluster left processes behind"


SETUP = '''
import hashlib
from ddp_nb.train import seed_everything, wrap_model, ShardedLoader, fit
from ddp_nb.digits import digits_data, DigitsNet
seed_everything(0)
model = wrap_model(DigitsNet())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
loader = ShardedLoader(digits_data(), global_batch_size=64)
fit(model, loader, opt, epochs=1, scheduler=sched)
'''


@ipp.interactive
def _state():
    import hashlib, torch
    h = hashlib.sha256()
    for p in model.module.parameters(): h.update(p.detach().cpu().numpy().tobytes())
    moments = {str(v.device) for s in opt.state.values() for k, v in s.items() if k != 'step'}
    steps = {str(s['step'].device) for s in opt.state.values()}   # torch keeps Adam's step counters on the CPU
    return dict(digest=h.hexdigest(), params=sorted({str(p.device) for p in model.parameters()}), moments=sorted(moments),
                steps=sorted(steps),
                step=loader.fit_state['step'],
                lr=sched.get_last_lr(), rank=rank, sampler=loader.sampler.rank, on=str(device))


def test_heal_moves_model_and_optimizer_between_a_cuda_and_a_cpu_rank_both_ways(capsys):
    "gloo on one GPU: rank 0 on cuda:0, rank 1 on the CPU; each in turn is killed and healed from the other"
    assert ours() == [], "processes from an earlier test are still running"
    with DDPCluster(n=2, backend='gloo') as c:
        devs = [r.device for r in c.ranks]
        assert devs[0].startswith('cuda') and devs[1] == 'cpu', devs
        c.run(SETUP, timeout=300)
        for lost, survivor in ((0, 1), (1, 0)):
            before = c.run(_state)[survivor]
            _kill(c, lost)
            capsys.readouterr(); c.restart()
            out = capsys.readouterr().out
            assert f"rank {lost} is a new engine, healed from rank {survivor} in " in out, out
            s = c.run(_state)
            assert s[survivor] == before, "the survivor's state changed in the heal"
            healed = s[lost]
            assert healed['digest'] == before['digest'] and healed['step'] == before['step'] and healed['lr'] == before['lr'], (healed, before)
            assert (healed['rank'], healed['sampler'], healed['on']) == (lost, lost, devs[lost]), healed
            assert healed['params'] == healed['moments'] == [devs[lost]], healed   # on its own device, not the survivor's
            assert healed['steps'] == ['cpu'], healed
            c.run(f'out = fit(model, loader, opt, epochs={2 + lost}, scheduler=sched)', timeout=300)   # trains on, together
            ends = [c.pull('(out["step"], out["losses"][-1])', rank=r) for r in (0, 1)]
            assert ends[0] == ends[1] and ends[0][0] > before['step'], ends
    assert ours() == [], "the cluster left processes behind"


def test_resize_keeps_each_rank_on_its_own_device(capsys):
    "gloo on one GPU: rank 0 (cuda:0) leaves and rank 1 (CPU) becomes rank 0 on the CPU still; grown again, the new rank takes the free GPU, healed from the CPU rank"
    assert ours() == [], "processes from an earlier test are still running"
    with DDPCluster(n=2, backend='gloo') as c:
        assert [r.device for r in c.ranks] == ['cuda:0', 'cpu'], c.ranks
        c.run(SETUP, timeout=300)
        before = c.run(_state)[1]
        capsys.readouterr(); c.resize(drop=[0])
        assert "rank 1 is now rank 0" in capsys.readouterr().out
        assert [(r.device, r.local_rank) for r in c.ranks] == [('cpu', 1)], c.ranks   # its device, so its local rank, stays
        s = c.run(_state)[0]
        assert s == dict(before, rank=0, sampler=0), (s, before)   # the same state, on the CPU, under its new number
        c.run('out = fit(model, loader, opt, epochs=2, scheduler=sched)', timeout=300)
        mid = c.run(_state)[0]
        assert mid['step'] > before['step'], mid
        capsys.readouterr(); c.resize(2)
        assert "rank 1 is new, healed from rank 0" in capsys.readouterr().out
        assert [(r.device, r.local_rank) for r in c.ranks] == [('cpu', 1), ('cuda:0', 0)], c.ranks
        s = c.run(_state)
        assert s[0] == mid, (s[0], mid)
        assert (s[1]['digest'], s[1]['step'], s[1]['lr']) == (mid['digest'], mid['step'], mid['lr']), (s[1], mid)
        assert (s[1]['on'], s[1]['params'], s[1]['moments'], s[1]['rank'], s[1]['sampler']) == ('cuda:0', ['cuda:0'], ['cuda:0'], 1, 1), s[1]
        c.run('out = fit(model, loader, opt, epochs=3, scheduler=sched)', timeout=300)   # trains on, together
        ends = [c.pull('(out["step"], out["losses"][-1])', rank=r) for r in (0, 1)]
        assert ends[0] == ends[1] and ends[0][0] > mid['step'], ends
        assert c.check()
    assert ours() == [], "the cluster left processes behind"
