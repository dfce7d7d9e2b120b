"""Every line a rank prints in a `%%px` cell reaches the cell that printed it, labelled by its rank, in a real Jupyter
kernel that streams output (no IPP_NONINTERACTIVE), also after a restart (engine ids no longer equal ranks); bare
ipyparallel's `%%px` is the baseline. The counts go to build/px_output.json."""
import json, os, queue, re, time
from conftest import ROOT, ours
from test_faults import Kernel, ANSI

RUNS, LINES = 50, 5  # per phase: 50 runs x 2 ranks x 5 lines = 500 lines; ddp_nb has two phases (before/after a restart)
LINE = re.compile(r'^(?:\[rank (\d+)\] )?.*?run (\d+) rank (\d+) line (\d+)$')
NUMBERS = {}


def cell(run):
    "A cell whose ranks finish at different times (which one is late changes each run), printing several lines each"
    return ("%%px\nimport time\n"
            f"time.sleep(0.03 * ((rank + {run}) % 2) + 0.002 * ({run} % 3))\n"
            f"for i in range({LINES}): print(f'run {run} rank {{rank}} line {{i}}')")


def shown(kern, code, timeout=120):
    "Run a cell; the text a frontend ends up showing: stream text, plus the last version of each display (by display id)"
    mid, t0 = kern.kc.execute(code), time.monotonic()
    streams, displays, err = [], {}, None
    while True:
        assert time.monotonic() - t0 < timeout, 'cell did not finish'
        try: m = kern.kc.get_iopub_msg(timeout=0.05)
        except queue.Empty: continue
        if m['parent_header'].get('msg_id') != mid: continue
        kind, c = m['msg_type'], m['content']
        if kind == 'stream': streams.append(c['text'])
        elif kind in ('display_data', 'update_display_data', 'execute_result'):
            key = c.get('transient', {}).get('display_id') or f'anon{len(displays)}'
            displays[key] = c['data'].get('text/plain', '')
        elif kind == 'error': err = c['ename']
        elif kind == 'status' and c['execution_state'] == 'idle': break
    return ANSI.sub('', ''.join(streams) + '\n' + '\n'.join(displays.values())), err


def count(kern, runs, labelled):
    "Run the printing cell for `runs`; (lines delivered once with the right rank label, lines printed, a sample of what was wrong)"
    got, bad = set(), []
    for run in runs:
        text, err = shown(kern, cell(run))
        assert err is None, text
        for l in text.splitlines():
            m = LINE.match(l.strip())
            if not m or int(m[2]) != run: continue
            label, rank = m[1], int(m[3])
            key = (run, rank, int(m[4]))
            if (labelled and (label is None or int(label) != rank)) or key in got: bad.append(l); continue
            got.add(key)
    return len(got), 2 * LINES * len(runs), bad[:5]


def test_every_line_arrives_labelled_by_rank():
    assert ours() == []
    k = Kernel()
    try:
        _, out, err, _ = k.run("import ddp_nb\nprint(ddp_nb.__file__)\nfrom ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()")
        assert err is None, out
        assert os.path.realpath(out.strip().splitlines()[0]).startswith(str(ROOT)), out  # this checkout's ddp_nb
        got, printed, bad = count(k, range(RUNS), labelled=True)
        NUMBERS['ddp_nb %%px: lines delivered with their rank label / printed'] = [got, printed]
        _, out, err, _ = k.run("cl.restart('all')\nprint({r.rank: r.engine_id for r in cl.ranks})")
        assert err is None, out
        ids = eval(out.strip().splitlines()[-1])
        assert ids != {0: 0, 1: 1}, ids  # engine ids are no longer the ranks
        got2, printed2, bad2 = count(k, range(RUNS, 2 * RUNS), labelled=True)
        NUMBERS[f'ddp_nb %%px after cl.restart (engine ids {ids}): delivered / printed'] = [got2, printed2]
        text, err = shown(k, "%%px\nimport time\nfor i in range(3): print(f'slow {rank} {i}', flush=True); time.sleep(1.2)")
        live = [l for l in text.splitlines() if l.startswith('[rank ')]
        assert err is None and sorted(live) == sorted(f'[rank {r}] slow {r} {i}' for r in (0, 1) for i in range(3)), text
    finally:
        k.close()
    assert (got, bad) == (printed, []) and (got2, bad2) == (printed2, []), (got, printed, bad, got2, printed2, bad2)


def test_bare_ipyparallel_baseline():
    "The same cells through bare ipyparallel's %%px (labels are engine ids there): the number to compare with"
    k = Kernel()
    try:
        _, out, err, _ = k.run("import ipyparallel as ipp, logging\n"
                               "c = ipp.Cluster(n=2, log_level=logging.ERROR)\nrc = c.start_and_connect_sync()\n"
                               "rc.wait_for_engines(2)\nv = rc[:]\nv.block = True\nv.activate()\n"
                               "for i, e in enumerate(sorted(rc.ids)): rc[e]['rank'] = i", timeout=180)
        assert err is None, out
        got, printed, bad = count(k, range(RUNS), labelled=False)
        NUMBERS['bare ipyparallel %%px: lines delivered / printed'] = [got, printed]
    finally:
        try: k.run("rc.shutdown(hub=True)\nc.stop_cluster_sync()", timeout=60)
        finally: k.kc.stop_channels(); k.km.shutdown_kernel(now=True)
    (ROOT / 'build').mkdir(exist_ok=True)
    (ROOT / 'build' / 'px_output.json').write_text(json.dumps(NUMBERS, indent=1))
    print(json.dumps(NUMBERS, indent=1))
