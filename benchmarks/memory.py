"""Memory: RSS of each engine after start and after training, against a bare Python process that imported torch.

    python -m benchmarks.memory"""
import subprocess, sys
from benchmarks.common import med, table


def _rss() -> int:
    import psutil
    return psutil.Process().memory_info().rss


def _train():
    from ddp_nb.digits import train
    return train(epochs=5)['digest']


def run() -> str:
    "The memory section, as markdown"
    from ddp_nb import DDPCluster
    with DDPCluster(n=2) as cl:
        start = cl.run(_rss)
        cl.run(_train)
        after = cl.run(_rss)
    bare = int(subprocess.run([sys.executable, '-c', 'import torch, psutil; print(psutil.Process().memory_info().rss)'],
                              capture_output=True, text=True, check=True).stdout)
    mb = lambda b: f"{b / 2**20:.0f} MB"
    rows = [['bare `python -c "import torch"`', mb(bare), '1.00'],
            ['ddp_nb engine after start (torch, process group, reporter)', mb(med(start)), f"{med(start) / bare:.2f}"],
            ['ddp_nb engine after 5 epochs of the digits job', mb(med(after)), f"{med(after) / bare:.2f}"]]
    return ("### 6. Memory per rank (RSS, median over 2 ranks)\n\n"
            "An engine also has a nanny process (~40 MB) and the cluster one controller (~40 MB unshared).\n\n"
            + table(['process', 'RSS', 'ratio to bare torch'], rows))


if __name__ == '__main__':
    print(run())
