"""Heal a lost rank vs restart + reload from a checkpoint, by model size (issue #27).

2 ranks, each holding a DDP-wrapped MLP of 10 square layers and SGD with momentum (one state tensor per parameter).
Rank 1 is killed with SIGKILL; the time runs from the kill until both ranks hold the model and optimizer again, wrapped
on the new group: `cl.restart()` (heal: from rank 0, tensors over the process group), against `cl.restart(heal=False)`
then every rank rebuilding the model and loading rank 0's checkpoint (written before the kill, not timed).

    python -m benchmarks.heal [--rounds 3] [--sizes 10e6,100e6]"""
import argparse, os, signal, tempfile, time
from benchmarks.common import med, table

WIDTHS = 10  # square Linear layers: a size of P parameters has width sqrt(P / 10)


def build(params: float, seed: int = 0) -> int:
    "On a rank: a DDP MLP of about `params` parameters and its SGD (stepped once), as `model` and `opt` in the namespace"
    import torch, torch.nn as nn
    from IPython import get_ipython
    from ddp_nb.train import wrap_model
    w = max(8, round((params / WIDTHS) ** 0.5))
    torch.manual_seed(seed)
    model = wrap_model(nn.Sequential(*[nn.Linear(w, w) for _ in range(WIDTHS)]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model(torch.randn(4, w)).sum().backward(); opt.step(); opt.zero_grad(set_to_none=True)
    get_ipython().user_ns.update(model=model, opt=opt)
    return sum(p.numel() for p in model.parameters())


def save(folder: str):
    "On every rank: rank 0 writes the checkpoint of `model` and `opt` (ddp_nb.train's, atomic)"
    from IPython import get_ipython
    from ddp_nb.train import save_checkpoint
    ns = get_ipython().user_ns
    save_checkpoint(folder, ns['model'], ns['opt'], 1)


def rebuild_and_load(params: float, folder: str) -> int:
    "On every rank: the model and optimizer built again, then loaded from the checkpoint in `folder`"
    from IPython import get_ipython
    from ddp_nb.train import load_checkpoint
    build(params)
    ns = get_ipython().user_ns
    return load_checkpoint(folder, ns['model'], ns['opt'])['step']


def state_digest() -> str:
    "On a rank: a digest of its model's weights and momentum buffers"
    import hashlib
    from IPython import get_ipython
    ns, h = get_ipython().user_ns, hashlib.sha256()
    for p in ns['model'].module.parameters():
        h.update(p.detach().numpy().tobytes()); h.update(ns['opt'].state[p]['momentum_buffer'].numpy().tobytes())
    return h.hexdigest()


def _kill(cl, rank: int, limit: float = 10):
    "SIGKILL the engine of `rank` and wait until it is gone (an error after `limit` s)"
    from ddp_nb.host import pid_alive
    pid = cl.ranks[rank].pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + limit
    while pid_alive(pid):
        if time.monotonic() > deadline: raise RuntimeError(f"rank {rank}'s engine (pid {pid}) outlived SIGKILL by {limit:g}s")
        time.sleep(0.005)


def run(rounds: int = 3, sizes=(10e6, 100e6)) -> str:
    "The heal section, as markdown"
    from ddp_nb import DDPCluster
    from benchmarks import heal as rank_side   # by name: the ranks import these functions
    rows, grow = [], []
    with DDPCluster(n=2) as cl, tempfile.TemporaryDirectory(prefix='ddp_nb-bench-heal-') as tmp:
        for size in sizes:
            t = {'heal': [], 'checkpoint': []}
            n, moved, mib, same = 0, [], 0., True
            for r in range(rounds):
                for side in (('heal', 'checkpoint') if r % 2 == 0 else ('checkpoint', 'heal')):
                    n = cl.run(rank_side.build, size)[0]
                    ref = cl.run(rank_side.state_digest)[0]
                    folder = os.path.join(tmp, f"{side}-{r}")
                    if side == 'checkpoint': cl.run(rank_side.save, folder)
                    t0 = time.perf_counter()
                    _kill(cl, 1)
                    if side == 'heal':
                        cl.restart()
                        h = cl._healed
                        moved.append(h['moved_s']); mib = h['nbytes'] / 2**20
                    else:
                        cl.restart(heal=False)
                        cl.run(rank_side.rebuild_and_load, size, folder)
                    t[side].append(time.perf_counter() - t0)
                    same &= set(cl.run(rank_side.state_digest)) == {ref}
                print(f"heal {n / 1e6:.0f}M round {r + 1}/{rounds}: " + ', '.join(f"{k} {v[-1]:.2f} s" for k, v in t.items()),
                      flush=True)
            h, c = med(t['heal']), med(t['checkpoint'])
            rows.append([f"{n / 1e6:.1f}M parameters ({mib:.0f} MiB of weights and momentum)", f"{h:.2f} s",
                         f"{med(moved):.2f} s ({mib / med(moved):.0f} MiB/s)" if moved and med(moved) > 0 else '',
                         f"{c:.2f} s", f"{c / h:.2f}×", 'yes' if same else '**no**'])
            # the world resized: 2 → 3 (rank 2 new, healed from rank 0) and back (rank 2 leaves)
            t, same = {'up': [], 'down': []}, True
            for r in range(rounds):
                cl.run(rank_side.build, size)
                ref = cl.run(rank_side.state_digest)[0]
                t0 = time.perf_counter(); cl.resize(3); t['up'].append(time.perf_counter() - t0)
                same &= set(cl.run(rank_side.state_digest)) == {ref}
                t0 = time.perf_counter(); cl.resize(2); t['down'].append(time.perf_counter() - t0)
                same &= set(cl.run(rank_side.state_digest)) == {ref}
                print(f"resize {n / 1e6:.0f}M round {r + 1}/{rounds}: 2 → 3 {t['up'][-1]:.2f} s, 3 → 2 {t['down'][-1]:.2f} s",
                      flush=True)
            grow.append([f"{n / 1e6:.1f}M parameters", f"{med(t['up']):.2f} s", f"{med(t['down']):.2f} s",
                         'yes' if same else '**no**'])
    return ("### 15. Heal a lost rank: restart + heal vs restart + reload from a checkpoint, 2 ranks\n\n"
            f"A DDP MLP of {WIDTHS} square layers and SGD with momentum on each rank; rank 1 killed with SIGKILL. Time from the "
            "kill until both ranks hold the model and optimizer again, wrapped on the new group: `cl.restart()` (rank 1 "
            "healed from rank 0, weights and momentum over the gloo group) against `cl.restart(heal=False)` and every rank "
            f"rebuilding the model and loading rank 0's checkpoint (written before the kill, not timed; nor are the steps lost since "
            f"it). {rounds} alternating "
            "rounds, medians. *Same state*: every rank's weights and momentum equal the state before the kill.\n\n"
            + table(['model', 'restart + heal', 'of which over the process group', 'restart + checkpoint reload',
                     'checkpoint / heal', 'same state'], rows)
            + "\n\nThe world resized, the same models: `cl.resize(3)` (a new engine, healed from rank 0, DDP wrapped again on "
              "every rank) and `cl.resize(2)` (rank 2 leaves, the group formed again); medians of the same rounds. *Same "
              "state*: every rank's weights and momentum after each resize equal those before.\n\n"
            + table(['model', '2 → 3 ranks', '3 → 2 ranks', 'same state'], grow))


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--sizes', default='10e6,100e6')
    a = ap.parse_args()
    print(run(a.rounds, tuple(float(s) for s in a.sizes.split(','))))
