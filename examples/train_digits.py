"""A plain torchrun script: DDP on scikit-learn's handwritten digits, seeded, results as JSON.

Run it with torchrun:
    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 examples/train_digits.py --out result.json
or, unchanged, on the ranks of a running ddp_nb cluster (from a notebook):
    cl.run_script('examples/train_digits.py', '--out', 'result.json')

Rank 0 writes {"losses": [mean loss of every epoch over all ranks], "digest": sha256 of the final weights, ...}.
"""
import argparse, hashlib, json, os
import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  imported before any group exists: see the end of main()
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from ddp_nb.digits import digits_data, DigitsNet


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--epochs', type=int, default=5)
    p.add_argument('--lr', type=float, default=0.1)
    p.add_argument('--batch-size', type=int, default=32, help='per rank; the global batch is this times the world size')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default=None, help="JSON file for rank 0's results")
    return p.parse_args()


def weights_sha256(model):
    h = hashlib.sha256()
    for t in model.parameters(): h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    a = parse_args()
    local_rank = int(os.environ['LOCAL_RANK'])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device('cuda', local_rank)
    else: device = torch.device('cpu')
    dist.init_process_group('nccl' if device.type == 'cuda' else 'gloo')  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = DDP(DigitsNet().to(device), device_ids=[local_rank] if device.type == 'cuda' else None)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    ds = digits_data()
    sampler = DistributedSampler(ds, shuffle=True, seed=a.seed)  # a different shard on every rank
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler)

    losses = []
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        model.train()
        tot = torch.zeros(2, device=device)  # sum of losses, number of samples
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += torch.stack([loss.detach() * len(y), torch.tensor(float(len(y)), device=device)])
        dist.all_reduce(tot)
        losses.append((tot[0] / tot[1]).item())
        if rank == 0: print(f"epoch {epoch + 1}/{a.epochs}  loss {losses[-1]:.4f}", flush=True)

    digest = weights_sha256(model.module)
    if rank == 0 and a.out:
        with open(a.out, 'w') as f:
            json.dump(dict(losses=losses, digest=digest, world_size=world_size, threads=torch.get_num_threads()), f)
    # End the group for real before Python exits. Its gloo worker threads may still hold the last collective's
    # tensor (`tot`); if they let go of it while the interpreter is finalizing, the process aborts (SIGABRT).
    # Only the last reference to the group stops and joins them: DDP's reducer holds one (hence `del model`),
    # and torch.distributed.nn pins the group as a default argument if first imported while it exists (DDP
    # imports it), hence the import at the top.
    del model
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
