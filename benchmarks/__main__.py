"""All benchmarks in one run, written to benchmarks/results.md (the README shows it).

    python -m benchmarks            # full run, ~10 minutes on 2 cores
    python -m benchmarks --fast     # reduced mode CI runs so the benchmarks cannot rot (numbers not meaningful)
    BENCH_PEERS_PYTHON=/path/to/peers-venv/bin/python python -m benchmarks   # section 14's peers from their own venv"""
import argparse, time, traceback
from pathlib import Path
from benchmarks.common import machine, HERE
from benchmarks import (startup, throughput, cells, celltime, iteration, monitor, memory, stopvote, gpu, compile_warm, collectives, timing,
                        scale, growth, startscale, peers, heal)


def _section(run) -> str:
    "A section's text, or the line that says it failed (with the traceback on stderr)"
    try: return run()
    except Exception as e:
        traceback.print_exc()
        return f"### (a section failed: {type(e).__name__}: {e})"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--fast', action='store_true')
    ap.add_argument('--out', default=str(HERE / 'results.md'))
    a = ap.parse_args(argv)
    f = a.fast
    t0 = time.time()
    runs = [lambda: throughput.run(1, 0.3, (3, 30)) if f else throughput.run(5, 3, (3, 30, 300)),
            lambda: cells.run(3, 1) if f else cells.run(30, 3),
            lambda: celltime.run(3, (1,)) if f else celltime.run(30),
            lambda: iteration.run(1) if f else iteration.run(5),
            lambda: startup.run(1, 2, 3) if f else startup.run(5, 2, 30),
            lambda: monitor.run(1, 0.3) if f else monitor.run(5, 3),
            lambda: memory.run(),
            lambda: gpu.run(1, 3) if f else gpu.run(3, 20),
            lambda: stopvote.run(1, 0.3, (3,)) if f else stopvote.run(5, 3),
            lambda: compile_warm.run(1, cold=False) if f else compile_warm.run(3),
            lambda: collectives.run(1, 0.5) if f else collectives.run(3, 2),
            lambda: timing.run(1, 4) if f else timing.run(3, 20),
            lambda: scale.run(1, 1., (8, 64), extra=()) if f else scale.run(3, 5.),
            lambda: growth.run(1, (1, 2)) if f else growth.run(3, (1, 2, 4, 8)),
            lambda: startscale.run(1, (8, 64)) if f else startscale.run(3),   # (13's sketch: 64 to 1,024 simulated engines)
            lambda: peers.run(1, 2, 1, 1, blocks=(2, 3)) if f else peers.run(5),   # the peers' interpreter: $BENCH_PEERS_PYTHON (5 rounds: Monarch's start here is ~1.25 s or ~1.85 s)
            lambda: heal.run(1, (1e6,)) if f else heal.run(3)]
    parts = []
    for run in runs:  # a section that fails says so; the others still run and are written
        parts.append(_section(run))
        Path(a.out).with_suffix('.partial.md').write_text('\n\n'.join(parts) + '\n')
    head = (f"Machine: {machine()}  \nCommand: `python -m benchmarks{' --fast' if f else ''}` "
            f"({time.time() - t0:.0f} s, {time.strftime('%Y-%m-%d')}). Only ratios carry across machines and runs. "
            "ddp_nb's modules are compiled to bytecode first, as an install has them.\n\n")
    text = head + '\n\n'.join(parts) + '\n'
    failed = [p for p in parts if p.startswith('### (a section failed')]
    if failed:  # the last good results stay; this run's sections are in the partial file
        raise SystemExit(f"{len(failed)} section(s) failed; {a.out} is unchanged, this run is in "
                         f"{Path(a.out).with_suffix('.partial.md')}: " + '; '.join(failed))
    Path(a.out).write_text(text)
    Path(a.out).with_suffix('.partial.md').unlink(missing_ok=True)
    print(text)

if __name__ == '__main__':
    main()
