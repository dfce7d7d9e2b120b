"""All benchmarks in one run, written to benchmarks/results.md (the README shows it).

    python -m benchmarks            # full run, ~10 minutes on 2 cores
    python -m benchmarks --fast     # reduced mode CI runs so the benchmarks cannot rot (numbers not meaningful)
    BENCH_PEERS_PYTHON=/path/to/peers-venv/bin/python python -m benchmarks   # section 14's peers from their own venv"""
import argparse, time
from pathlib import Path
from benchmarks.common import machine, HERE
from benchmarks import startup, throughput, cells, iteration, monitor, memory, stopvote, gpu, compile_warm, collectives, timing, scale, growth, peers


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--fast', action='store_true')
    ap.add_argument('--out', default=str(HERE / 'results.md'))
    a = ap.parse_args(argv)
    f = a.fast
    t0 = time.time()
    parts = [throughput.run(1, 0.3, (3, 30)) if f else throughput.run(5, 3, (3, 30, 300)),
             cells.run(3, 1) if f else cells.run(30, 3),
             iteration.run(1) if f else iteration.run(5),
             startup.run(1, 2, 3) if f else startup.run(5, 2, 30),
             monitor.run(1, 0.3) if f else monitor.run(5, 3),
             memory.run(),
             gpu.run(1, 0.3) if f else gpu.run(3, 2),
             stopvote.run(1, 0.3, (3,)) if f else stopvote.run(5, 3),
             compile_warm.run(1, cold=False) if f else compile_warm.run(3),
             collectives.run(1, 0.5) if f else collectives.run(3, 2),
             timing.run(1, 4) if f else timing.run(3, 20),
             scale.run(1, 1., (8, 64), extra=()) if f else scale.run(3, 5.),
             growth.run(1, (1, 2)) if f else growth.run(3, (1, 2, 4, 8)),
             peers.run(1, 2, 1, 1) if f else peers.run(3)]   # the peers' interpreter: $BENCH_PEERS_PYTHON
    head = (f"Machine: {machine()}  \nCommand: `python -m benchmarks{' --fast' if f else ''}` "
            f"({time.time() - t0:.0f} s, {time.strftime('%Y-%m-%d')}). Only ratios carry across machines and runs.\n\n")
    text = head + '\n\n'.join(parts) + '\n'
    Path(a.out).write_text(text)
    print(text)


if __name__ == '__main__':
    main()
