"Shared helpers of the benchmarks: machine description, medians, markdown tables, a timed cell in a real kernel"
import os, platform, statistics, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def machine() -> str:
    "One line describing this machine"
    import torch, ipyparallel
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'
    return (f"{platform.node()}: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, ipyparallel {ipyparallel.__version__}, GPU: {gpu}")


def thread_cpu(pid='self') -> dict:
    "A process's threads (Linux; default this one's): native id -> (name, CPU seconds so far); {} elsewhere"
    # (schedstat counts nanoseconds; stat's utime + stime count 10 ms ticks)
    out = {}
    try: tids = os.listdir(f'/proc/{pid}/task')
    except OSError: return out
    for tid in tids:
        try:
            with open(f'/proc/{pid}/task/{tid}/comm') as c, open(f'/proc/{pid}/task/{tid}/schedstat') as t:
                out[int(tid)] = (c.read().strip(), int(t.read().split()[0]) / 1e9)
        except (OSError, ValueError): pass   # a thread that ended meanwhile, or a kernel without schedstat
    return out


def med(xs) -> float:
    "Median, or nan for no data"
    return statistics.median(xs) if xs else float('nan')


def table(head: list, rows: list) -> str:
    "A markdown table"
    out = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    return '\n'.join(out + ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows])


def torchrun_cmd(nproc: int, module: str, *args) -> list:
    "torchrun (as `python -m torch.distributed.run`) running `python -m module args` in each worker"
    return [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={nproc}', '-m', module, *map(str, args)]


def cell(k, code: str, timeout: float = 300) -> tuple:  # k: a `ddp_nb.kernel.Kernel`
    "Run a cell: (seconds from execute request to idle, its text output); raises with the error of a failed cell"
    dt, out, err, _ = k.run(code, timeout)
    if err is None and ('Traceback' in out or '❌' in out): err = out[-300:]  # magics that print their failure
    if err: raise RuntimeError(err.strip().splitlines()[-1][:300])
    return dt, out
