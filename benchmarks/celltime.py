"""Where a warm `%%px` cell's time goes, 1 and 2 ranks: the kernel's own round trip, ddp_nb's `%%px` layer, and
the hops to the ranks and back (by the cell route, and through ipyparallel's controller), read from ipyparallel's own
timestamps.

    python -m benchmarks.celltime [--cells 30]"""
import argparse, json
from benchmarks.common import cell, med, table, ROOT
from ddp_nb.kernel import Kernel

CODE = "t = torch.ones(1); dist.all_reduce(t)"
# run in the kernel, after the cluster started: each hop's median over `n` cells, in ms
PROBE = r'''
import json, time, statistics as _st
from dateutil.parser import isoparse as _iso
def _d(x): return _iso(x) if isinstance(x, str) else x
def _hops(n, controller=False):
    from ddp_nb.compat_ipp import wrap_view_socket
    from ddp_nb.route import RouteSocket
    if controller: wrap_view_socket(cl._view, lambda s: s.controller)  # (ipyparallel's way, for this measurement)
    try: return _timed(n)
    finally:
        if controller: wrap_view_socket(cl._view, lambda s: RouteSocket(cl._route, s))
def _timed(n):
    sent, run, back, total = [], [], [], []
    for _ in range(n):
        t = time.perf_counter(); ar = cl._view.execute(CODE, silent=False, block=False); ar.get(); ar.wait_for_output()
        total.append(time.perf_counter() - t)
        mds = ar._metadata if isinstance(ar._metadata, list) else [ar._metadata]
        md = [{k: _d(m[k]) for k in ('submitted', 'started', 'completed', 'received')} for m in mds]
        sent.append(max((m['started'] - m['submitted']).total_seconds() for m in md))
        run.append(max((m['completed'] - m['started']).total_seconds() for m in md))
        back.append(max((m['received'] - m['completed']).total_seconds() for m in md))
    sh = get_ipython(); t = time.perf_counter()
    for _ in range(n): sh.run_cell_magic('px', '', CODE)
    px = (time.perf_counter() - t) / n
    def _cell(code, n):
        import time, IPython
        sh = IPython.get_ipython(); t = time.perf_counter()
        for _ in range(n): sh.run_cell(code, store_history=False, silent=False)
        return (time.perf_counter() - t) / n
    cell = max(cl._view.apply_sync(_cell, CODE, n))   # (on every rank at once: the cell is a collective)
    return {k: round(1e3 * v, 2) for k, v in dict(sent=_st.median(sent), run=_st.median(run), back=_st.median(back),
                                                   view=_st.median(total), px=px, cell=cell).items()}
'''


def _measure(n_ranks: int, cells: int) -> dict:
    "One kernel with its own cluster of `n_ranks`: request → idle of a `pass` cell and of the `%%px` cell, and the hops"
    k = Kernel(cwd=str(ROOT))
    try:
        cell(k, f"from ddp_nb import DDPCluster\ncl = DDPCluster(n={n_ranks}).start()\nCODE = {CODE!r}")
        cell(k, "%%px\n" + CODE)
        cell(k, PROBE)
        cell(k, "_hops(3)")   # warm
        passes = [cell(k, "pass")[0] for _ in range(cells)]
        pxs = [cell(k, "%%px\n" + CODE)[0] for _ in range(cells)]
        h = json.loads(cell(k, "print(json.dumps(_hops(%d)))" % cells)[1].strip().splitlines()[-1])
        ctl = json.loads(cell(k, "print(json.dumps(_hops(%d, controller=True)))" % cells)[1].strip().splitlines()[-1])
        h.update({f'{k}_ctl': v for k, v in ctl.items()})
        cell(k, "cl.stop()")
    finally: k.close()
    return dict(h, kernel=1e3 * med(passes), cell_px=1e3 * med(pxs))


def run(cells: int = 30, sizes=(1, 2)) -> str:
    "Section 2's breakdown, as markdown"
    m = {n: _measure(n, cells) for n in sizes}
    def row(label, key, note=''):
        return [label] + [f"{m[n][key]:.1f} ms" for n in sizes] + [note]
    rows = [row('a `%%px` cell, request → idle (as in the table above)', 'cell_px'),
            row('a `pass` cell in the same kernel: Jupyter\'s own round trip', 'kernel', 'every side of section 14 pays it'),
            row('the `%%px` call inside the kernel', 'px', "ddp_nb's magic, supervision and output over ipyparallel's execute"),
            row('of it, ipyparallel\'s execute and output, sent → answer received', 'view', 'by the cell route'),
            row('sent → a rank starts it (kernel → engine)', 'sent', 'the slowest rank'),
            row('the rank runs it (its kernel\'s `do_execute`)', 'run', ''),
            row('of which IPython runs the cell itself (`run_cell`, with ddp_nb\'s hooks)', 'cell', ''),
            row('answer → received by the kernel (engine → kernel)', 'back', ''),
            row('the same execute through ipyparallel\'s controller instead, sent → answer received', 'view_ctl',
                'ipyparallel\'s way: every request and reply relayed, the engine\'s busy, input and idle messages'),
            row('sent → a rank starts it (kernel → controller → engine)', 'sent_ctl', ''),
            row('the rank runs it (ipykernel\'s execute request)', 'run_ctl', ''),
            row('answer → received by the kernel (engine → controller → kernel)', 'back_ctl', '')]
    over = {n: m[n]['cell_px'] - m[n]['kernel'] for n in sizes}
    return ("#### Where a warm cell's time goes\n\n"
            f"One kernel and cluster per size, {cells} cells each, medians; the hops from ipyparallel's own timestamps "
            "(one clock: the same host). "
            + ', '.join(f"{n} rank{'s' if n > 1 else ''}: {over[n]:.1f} ms per cell over the kernel's own round trip"
                        for n in sizes) + ".\n\n"
            + table(['', *[f"{n} rank{'s' if n > 1 else ''}" for n in sizes], ''], rows))


if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--cells', type=int, default=30); a = ap.parse_args()
    print(run(a.cells))
