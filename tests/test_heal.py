"""Heal (issue #27), in a real Jupyter kernel with a 2-rank cluster: rank 1 is killed at ~40% of a `fit`,
`cl.restart()` replaces it and heals it from rank 0 (namespace, tensors over the process group, DDP re-wrapped), and
re-running the interrupted cell ends with weights bit-identical to a run never interrupted (`fit` has no checkpoint
folder: nothing is written or read); the new rank holds the user's variables; as many processes as before."""
import os, signal, time
import pytest
from kernel import COUNTER, cluster_kernel
from ddp_nb.host import pid_alive

MEASURED = {}

SETUP = r'''
import os, sys, time
from ddp_nb import DDPCluster
from ddp_nb.processes import cluster_procs
cl = DDPCluster(n=2).start()
'''

RANKS = r'''%%px
import hashlib, os, time
import torch.nn.functional as F
from ddp_nb.train import *
from ddp_nb.digits import digits_data, DigitsNet
def digest(m):
    h = hashlib.sha256()
    for p in m.parameters(): h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()
def make():
    seed_everything(0)
    model = wrap_model(DigitsNet())
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), ShardedLoader(digits_data(), global_batch_size=64)
def slow(out, y):  # a step long enough to be killed in the middle of
    time.sleep(0.04); return F.cross_entropy(out, y)
model, opt, loader = make()
fit(model, loader, opt, epochs=2, loss_fn=slow)
full = digest(model.module)   # the run never interrupted
model, opt, loader = make()
note, seen = {'who': 'user'}, [1, 2, 3]
'''


def kill(k, rank: int, limit: float = 10):
    "kill -9 the engine of `rank` and wait until it is gone (fails after `limit` s)"
    pid = k.value(f"cl.ranks[{rank}].pid")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + limit
    while pid_alive(pid): assert time.monotonic() < deadline, f"rank {rank}'s engine (pid {pid}) outlived SIGKILL"; time.sleep(0.01)


def kill_during(k, fit: str, step: int) -> str | None:
    "Run `fit` (a cell's code) on every rank without waiting; kill -9 rank 1 once rank 0 reported `step` of this run; the error the cell ended with (None: it went on)"
    run0 = k.value("cl._collector.ranks[0].run")   # the run before it on the dashboard
    k.ok(f"ar = cl.run({fit!r}, block=False)")
    deadline = time.monotonic() + 120
    while k.value(f"(lambda s: s.run > {run0} and (s.step or 0) >= {step})(cl._collector.ranks[0])") is not True:
        assert time.monotonic() < deadline, f"the fit did not reach step {step}"
        time.sleep(0.1)
    kill(k, 1)
    k.ok("try: ar.get(60)\nexcept Exception as e: failed = repr(e)\nelse: failed = None")
    return k.value("failed")


@pytest.fixture(scope='module')
def k():
    yield from cluster_kernel(SETUP + COUNTER, MEASURED, 'heal')


def test_kill_mid_fit_restart_heals_and_continues_bit_identical(k):
    k.ok(RANKS, timeout=300)
    n_procs = k.value("n_cluster_procs()")
    # kill rank 1 at ~40% of the fit (2 epochs of 24 steps): when rank 0 has reported step 19 of this run
    failed = kill_during(k, 'out = fit(model, loader, opt, epochs=2, loss_fn=slow)', 19)
    assert failed is not None, "the fit went on without rank 1"
    survived = k.value("cl.pull('(loader.fit_state[\"step\"], loader.batch)', rank=0)")
    assert 15 <= survived[0] <= 30, survived   # rank 0 lived through it, with its progress
    t0 = time.monotonic()
    out = k.ok("cl.restart()")
    MEASURED['restart + heal (s)'] = round(time.monotonic() - t0, 2)
    print(out)
    assert "rank 1 is a new engine, healed from rank 0 in " in out and 'DDP wrapped again on every rank: model' in out, out
    assert k.value("'torch' in sys.modules") is False, "the heal brought torch into the kernel (2 s of the restart)"
    # the new rank holds the user's variables, with its own rank
    assert k.value("cl.pull('(note, seen, rank, loader.sampler.rank, loader.fit_state[\"step\"])', rank=1)") == \
        [{'who': 'user'}, [1, 2, 3], 1, 1, survived[0]]
    k.ok("cl.run('out = fit(model, loader, opt, epochs=2, loss_fn=slow)')", timeout=300)
    res = k.value("[cl.pull('(out[\"step\"], digest(model.module) == full)', rank=r) for r in (0, 1)]")
    assert res == [[48, True], [48, True]], res   # bit-identical to the run never interrupted, on both ranks
    assert k.value("n_cluster_procs()") == n_procs




BOOM = r'''%%px
def _boom(): raise RuntimeError('this object cannot be rebuilt on another rank')
class Boom:
    "Pickles on the survivor; loading it on the new rank raises"
    def __reduce__(self): return (_boom, ())
trap, kept_here = Boom(), 7
'''


def test_a_failed_heal_says_so_and_leaves_a_usable_world(k):
    k.ok(BOOM)
    kill(k, 1)
    out = k.ok("cl.restart()")
    print(out)
    assert ('rank 1 is a new engine (state lost: the heal from rank 0 failed: healing failed on rank 1. Rank 1: '
            'RuntimeError: this object cannot be rebuilt on another rank)' in out and 're-run your setup cells' in out), out
    assert k.value("cl.check()") is True   # the new group works
    k.ok("cl.run('t = torch.ones(1); dist.all_reduce(t)')")
    assert k.value("[cl.pull('t.item()', rank=r) for r in (0, 1)]") == [2., 2.]
    assert k.value("cl.pull('kept_here', rank=0)") == 7   # the survivor kept its state
    k.ok("cl.run('del trap', ranks=[0])")   # (the new rank never had it)


def test_three_ranks_each_ranks_own_values_are_not_carried(k):
    k.ok("cl.stop()\ncl = DDPCluster(n=3).start()", timeout=300)
    k.ok("%%px\noffset, shared, w = 40 + rank, 'same', torch.arange(2000.)")
    kill(k, 1)
    out = k.ok("cl.restart()")
    print(out)
    assert 'healed from rank 0' in out and \
        'Not carried: offset (it differs between the survivors: each rank has its own): re-run' in out, out
    assert k.value("cl.pull('(shared, float(w.sum()), \"offset\" in globals(), rank)', rank=1)") == ['same', 1999000.0, False, 1]
    # the transfer went over a group of its own: rank 2, not part of it, issued as many collectives as ranks 0 and 1
    assert k.value("cl.check()") is True


RESIZE = r'''%%px
import torch, torch.nn.functional as F
from ddp_nb.train import *
from ddp_nb.digits import digits_data, DigitsNet
X, Y = digits_data().tensors
data = torch.utils.data.TensorDataset(X[:1472], torch.arange(1472) * 10 + Y[:1472])   # 23 global batches of 64
ids = []   # the samples this rank trained on (each label carries its sample's index)
def counted(out, y):
    ids.extend((y // 10).tolist()); return F.cross_entropy(out, y % 10)
def make():
    seed_everything(0)
    model = wrap_model(DigitsNet())
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), ShardedLoader(data, global_batch_size=64)
model, opt, loader = make()
fit(model, loader, opt, epochs=1, loss_fn=counted)
ref = [p.detach().clone() for p in model.module.parameters()]   # a whole epoch on 2 ranks, never resized
model, opt, loader = make()
'''


def phase(k, fit: str) -> list:
    "Run `fit` on every rank with each rank's record of samples cleared first: the samples each rank trained on"
    k.ok("cl.run('ids.clear()')")
    k.ok(f"cl.run({fit!r})", timeout=300)
    return k.value("cl.view['ids']")


def test_resize_2_3_2_mid_epoch_each_sample_once_and_the_same_weights(k):
    k.ok("cl.stop()\ncl = DDPCluster(n=2).start()", timeout=300)
    k.ok(RESIZE, timeout=300)
    n_procs = k.value("n_cluster_procs()")
    seen = phase(k, "fit(model, loader, opt, epochs=1, loss_fn=counted, max_steps=8)")   # 8 steps on 2 ranks
    assert [len(s) for s in seen] == [8 * 32, 8 * 32]
    t0 = time.monotonic()
    out = k.ok("cl.resize(3)")
    MEASURED['resize 2 → 3 (s)'] = round(time.monotonic() - t0, 2)
    print(out)
    assert out.startswith('Resized from 2 to 3 ranks in ') and 'rank 2 is new, healed from rank 0' in out, out
    assert 'loader (re-sharded over 3 ranks, global batch 64 kept)' in out, out
    assert k.value("cl.check()") is True
    assert k.value("[cl.pull('__import__(\"ddp_nb.context\", fromlist=[\"ctx\"]).ctx.reporter.rank', rank=r) for r in range(3)]") == [0, 1, 2]
    grown = phase(k, "fit(model, loader, opt, epochs=1, loss_fn=counted, max_steps=16)")   # 8 steps on 3 ranks
    assert [len(s) for s in grown] == [8 * 22, 8 * 21, 8 * 21], [len(s) for s in grown]   # 64 = 22 + 21 + 21
    assert k.value("cl.pull('loader.weight', rank=0)") == 22 * 3 / 64
    t0 = time.monotonic()
    out = k.ok("cl.resize(drop=[1])")   # rank 1 leaves, rank 2 becomes rank 1
    MEASURED['resize 3 → 2 (s)'] = round(time.monotonic() - t0, 2)
    print(out)
    assert 'rank 1 left; rank 2 is now rank 1;' in out and 'DDP wrapped again on every rank: model' in out, out
    # every rank reports to the dashboard under its number now (rank 1 reconnected as it joined the new group)
    assert k.value("[cl.pull('__import__(\"ddp_nb.context\", fromlist=[\"ctx\"]).ctx.reporter.rank', rank=r) for r in range(2)]") == [0, 1]
    # it keeps its local rank: on a GPU host that is its device, where its model and optimizer live
    assert k.value("[(r.local_rank, r.local_world_size) for r in cl.ranks]") == [[0, 2], [2, 2]]
    assert k.value("cl.pull('(local_rank, __import__(\"os\").environ[\"LOCAL_RANK\"])', rank=1)") == [2, '2']
    rest = phase(k, "fit(model, loader, opt, epochs=1, loss_fn=counted)")   # the 7 steps left of the epoch
    assert [len(s) for s in rest] == [7 * 32, 7 * 32]
    every = sorted(i for part in (seen, grown, rest) for s in part for i in s)
    assert every == list(range(1472)), "a sample was skipped or seen twice across the resizes"
    # the same steps as the run never resized, up to the order of floating-point sums (the split differs)
    diff = k.value("[cl.pull('max((p - q).abs().max().item() for p, q in zip(model.module.parameters(), ref))', rank=r) "
                "for r in (0, 1)]")
    MEASURED['resize: max |weight - fixed-size run|'] = max(diff)
    assert max(diff) < 1e-5, diff
    assert k.value("cl.pull('[loader.epoch, loader.fit_state[\"step\"]]', rank=1)") == [1, 23]
    assert k.value("n_cluster_procs()") == n_procs


FSDP = r'''%%px
import tempfile, time, torch, torch.nn as nn, torch.nn.functional as F
from ddp_nb.train import seed_everything, ShardedLoader, fit
from ddp_nb.digits import digits_data
from ddp_nb.sharded import shard_model, SHARDED
class Block(nn.Module):
    def __init__(self, d): super().__init__(); self.lin = nn.Linear(d, d)
    def forward(self, x): return x + F.relu(self.lin(x))
def build():
    seed_everything(0)
    model = shard_model(nn.Sequential(nn.Linear(64, 32), Block(32), nn.Linear(32, 10)), wrap=(Block,))
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3), ShardedLoader(digits_data(), global_batch_size=64)
def whole(m): return torch.cat([p.full_tensor().flatten() for p in m.parameters()])
def slow(out, y): time.sleep(0.04); return F.cross_entropy(out, y)
model, opt, loader = build()
fit(model, loader, opt, epochs=1, loss_fn=slow)
full = whole(model)   # the run never interrupted
model, opt, loader = build()
'''


def test_fsdp2_shards_cannot_heal_the_restart_falls_back_to_the_last_sharded_checkpoint(k):
    k.ok("cl.stop()\ncl = DDPCluster(n=2).start()\nimport tempfile\nckpt = tempfile.mkdtemp(prefix='ddp_nb-heal-fsdp-')\n"
         "cl.push(ckpt=ckpt)", timeout=300)
    k.ok(FSDP, timeout=300)
    kill_during(k, 'out = fit(model, loader, opt, epochs=1, loss_fn=slow, ckpt_dir=ckpt, ckpt_every=5, checkpointer=SHARDED)', 12)
    out = k.ok("cl.restart()")
    print(out)
    assert ("model, opt are sharded (FSDP2): no rank holds rank 1's shards (FSDP2 keeps no replica; HSDP would), and "
            "every rank's shards are bound to the old group. Falling back to the last sharded checkpoint (step ") in out, out
    assert any(f"(step {s} in {k.value('ckpt')})" in out for s in (10, 15)), out   # (the newest, as rank 0 saw it)
    assert "re-run the cells that build model, opt on every rank, then the fit cell: every rank resumes from there." in out, out
    assert "Not carried" not in out, out   # (the sharded names are said once, with the way back)
    # the way back, as the line says: build on every rank, re-run fit
    k.ok("%%px\nmodel, opt, _ = build()\nout = fit(model, loader, opt, epochs=1, loss_fn=slow, ckpt_dir=ckpt, ckpt_every=5, "
         "checkpointer=SHARDED)\nsame = torch.equal(whole(model), full)", timeout=300)
    res = k.value("cl.view['(out[\"step\"], out[\"resumed_from\"], same)']")
    assert res[0] == res[1] and res[0][0] == 24 and res[0][1] in (10, 15) and res[0][2] is True, res
    k.ok("import shutil; shutil.rmtree(ckpt)")
