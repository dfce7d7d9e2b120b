"""Start-up cost growth: `DDPCluster(n=k, threads=1).start()` until the process group is formed and checked, for
k = 1, 2, 4, 8 engines on this machine, split into phases by timestamps taken in this process (the library's own
steps wrapped here, no library change).

    python -m benchmarks.growth [--rounds 3] [--ks 1 2 4 8]
    python -m benchmarks.growth --fast   # k = 1, 2, one round (CI: the code runs; the numbers mean little)

Phases: engines launched + registered (controller and engine processes started, `await_registration`), engine facts
read (`plan_group`: every engine imports torch and answers `engine_info`), collector made (the dashboard's `Collector`),
group formed and checked (`form_group`: store, torchrun env, `init_process_group`, a check, and each rank connecting to
the collector as it joins), magics (the cell route's set-up, `%%px` activated). The rounds rotate the order of k;
medians; the per-engine increment is the least-squares slope of the medians over k."""
import argparse, os, time
from contextlib import contextmanager
from IPython.core.interactiveshell import InteractiveShell
import ddp_nb.cluster as C
from ddp_nb import DDPCluster
from ddp_nb.ranks import RankSet
from benchmarks.common import med, table

PHASES = [('launch', 'engines launched + registered'), ('facts', 'engine facts read'), ('collector', 'collector made'),
          ('group', 'group formed + checked, ranks connected'), ('magics', 'magics')]
ENDS = {'launch': (C, 'await_registration'), 'facts': (C, 'plan_group'), 'collector': (C, 'Collector'),
        'group': (C, 'form_group'), 'magics': (C, 'activate')}  # the step whose return ends each phase
NOTES = {'Setting up the namespaces': "`rank.enter_cluster`: the names `%%px` cells see, the stack dump for `cl.where()`, and the "
                                      "collective recorder's first write, which pays torch's flight-recorder symbolizer start once per rank",
         'Reading engine facts': "`rank.engine_info`: torch imported (unless the warm start already did) and the engine's facts"}


def _timed(fn, note):
    "`fn`, calling `note(time.perf_counter() after it, its duration)` each time it returns"
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try: return fn(*args, **kwargs)
        finally: note(time.perf_counter(), time.perf_counter() - t)
    return wrapper


CALLS = ('call', 'call_engines')  # RankSet's ways into the ranks (a rank's own arguments: call(each=...))


@contextmanager
def instrumented(ends: dict, steps: list):
    "Wrap the steps of `DDPCluster.start` (`ENDS`) and the ranks' calls: phase -> end time into `ends`, (what, seconds) into `steps`"
    saved = [(o, n, getattr(o, n)) for o, n in ENDS.values()] + [(RankSet, n, getattr(RankSet, n)) for n in CALLS]
    try:
        for ph, (o, n) in ENDS.items(): setattr(o, n, _timed(getattr(o, n), lambda t, dt, ph=ph: ends.__setitem__(ph, t)))
        for n in CALLS:
            f = getattr(RankSet, n)
            def step(self, *a, _f=f, **kw):
                t = time.perf_counter()
                try: return _f(self, *a, **kw)
                finally: steps.append((kw.get('what') or '?', time.perf_counter() - t))
            setattr(RankSet, n, step)
        yield
    finally:
        for o, n, f in saved: setattr(o, n, f)


def phases(t0: float, ends: dict, t1: float) -> dict:
    "Seconds per phase (`PHASES`, each from the previous phase's end) and 'total', from the start time, the end times and the return time"
    out, prev = {}, t0
    for ph, _ in PHASES: out[ph], prev = ends[ph] - prev, ends[ph]
    out['total'] = t1 - t0
    return out


def one_start(k: int) -> tuple:
    "Start and stop one `DDPCluster(n=k, threads=1)`: (phase seconds, [(rank call, seconds)])"
    ends, steps = {}, []
    with instrumented(ends, steps):
        t0 = time.perf_counter()
        cl = DDPCluster(n=k, threads=1).start()
        t1 = time.perf_counter()
    try: assert cl.check(), f'the group of {k} ranks failed its check'
    finally: cl.stop()
    return phases(t0, ends, t1), steps


def slope(ks: list, ys: list) -> float:
    "Least-squares slope of ys over ks (seconds per engine); nan with fewer than 2 distinct ks"
    mk, my = sum(ks) / len(ks), sum(ys) / len(ys)
    den = sum((k - mk) ** 2 for k in ks)
    return sum((k - mk) * (y - my) for k, y in zip(ks, ys)) / den if den else float('nan')


def run(rounds=3, ks=(1, 2, 4, 8)):
    "The start-up growth section, as markdown"
    InteractiveShell.instance()  # the magics are registered, as in a notebook
    ks = list(ks)
    P = {k: [] for k in ks}
    S = {k: {} for k in ks}
    for r in range(rounds):
        for k in ks[r % len(ks):] + ks[:r % len(ks)]:
            p, steps = one_start(k)
            P[k].append(p)
            for what, dt in steps: S[k].setdefault(what, []).append(dt)
            print(f"round {r+1}/{rounds} k={k}: ready in {p['total']:.2f}s", flush=True)
    cols = [ph for ph, _ in PHASES] + ['total']
    m = {k: {c: med([p[c] for p in P[k]]) for c in cols} for k in ks}
    sl = {c: slope(ks, [m[k][c] for k in ks]) for c in cols}
    rows = [[k] + [f"{m[k][c]:.2f}" for c in cols] for k in ks]
    rows.append(['**slope** (s per engine)'] + [f"**{sl[c]:+.2f}**" for c in cols])
    whats = [w for w in S[ks[-1]] if w != '?']
    ssl = {w: slope(ks, [med(S[k].get(w, [])) for k in ks]) for w in whats}
    srows = [[w] + [f"{med(S[k].get(w, [])):.2f}" for k in ks] + [f"{ssl[w]:+.2f}"] for w in whats]
    steep = max(whats, key=lambda w: ssl[w]) if whats else None
    top = max((c for c in cols if c != 'total'), key=lambda c: sl[c])
    share = sl[top] / sl['total'] if sl['total'] > 0 else float('nan')
    name = dict(PHASES)[top]
    return (f"### 13. Start-up cost growth: 1 to {ks[-1]} engines\n\n"
            f"`DDPCluster(n=k, threads=1).start()` until the group is formed and checked, {rounds} rotating round(s), medians in "
            f"seconds, each phase from the end of the one before (timestamps taken around the library's own steps).\n\n"
            + table(['k'] + [dict(PHASES).get(c, c) for c in cols], rows)
            + f"\n\nEach engine adds **{sl['total']:.2f} s**; the steepest phase is *{name}* ({sl[top]:+.2f} s per engine"
              + (f", {share:.0%} of the slope" if 0 < share <= 1 else '') + "). The ranks' calls inside those phases (what each waited for):\n\n"
            + table(['call on the engines'] + [f"k={k}" for k in ks] + ['slope'], srows)
            + (f"\n\nThe steepest call is *{steep}* ({ssl[steep]:+.2f} s per engine)" + (f": {NOTES[steep]}" if steep in NOTES else '')
               + f". Work every rank does once, at the same moment: with more ranks than cores ({os.cpu_count()} here) the ranks "
               "queue for the cores, so it grows with the engines even though it runs in parallel." if steep else ''))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--ks', type=int, nargs='+', default=[1, 2, 4, 8])
    ap.add_argument('--fast', action='store_true', help='k = 1, 2, one round')
    a = ap.parse_args(argv)
    print(run(1, (1, 2)) if a.fast else run(a.rounds, a.ks))


if __name__ == '__main__':
    main()
