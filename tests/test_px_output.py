"""Every line a rank prints in a `%%px` cell reaches the cell that printed it, labelled by its rank, in a real Jupyter
kernel that streams output (no IPP_NONINTERACTIVE), also after a restart (engine ids no longer equal ranks); bare
ipyparallel's `%%px` is the baseline. The counts go to build/px_output.json."""
import json, os, re, time
from conftest import ROOT, ours
from kernel import Kernel, ANSI, Frontend

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
    streams, displays, err = [], {}, None
    for _, kind, c in kern.messages(code, timeout):
        if kind == 'stream': streams.append(c['text'])
        elif kind in ('display_data', 'update_display_data', 'execute_result'):
            key = c.get('transient', {}).get('display_id') or f'anon{len(displays)}'
            displays[key] = c['data'].get('text/plain', '')
        elif kind == 'error': err = c['ename']
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
        took = []
        for i in range(3):
            mid, frames, _, err = watch(k, Frontend(), f"%%px\nimport time\nprint(f'first {{rank}} {i}')\ntime.sleep(2.5)")
            took.append(round(next(t for t, _, _, shown in frames if 'first' in shown), 3))  # (it streams as a display, re-sent whole)
        NUMBERS['bare ipyparallel %%px: first line of a cell, seconds (3 runs)'] = took
    finally:
        try: k.run("rc.shutdown(hub=True)\nc.stop_cluster_sync()", timeout=60)
        finally: k.close(stop=False)
    (ROOT / 'build').mkdir(exist_ok=True)
    (ROOT / 'build' / 'px_output.json').write_text(json.dumps(NUMBERS, indent=1))
    print(json.dumps(NUMBERS, indent=1))


# ---- Everything a notebook shows, live (issue 24, items 5-7): the iopub messages applied as a frontend applies them
import pytest

LIVE = {}  # numbers measured here, written to build/px_live.json


def watch(kern, front, code, timeout=120):
    "Run a cell, applying its messages to `front`; (cell id, [(seconds, message type, content, text shown after it)], seconds to idle, error)"
    frames, err, t0 = [], None, time.monotonic()
    for t, kind, c in kern.messages(code, timeout):
        if kind == 'error': err = f"{c['ename']}: {c['evalue']}"
        front.apply(kern.mid, kind, c)
        frames.append((t, kind, c, front.text(kern.mid)))
    return kern.mid, frames, time.monotonic() - t0, err


def seen_live(frames, took, steps, shows, margin=0.3) -> set:
    "The steps whose frame `shows(step, text shown)` while the cell still ran (`margin` s before its end)"
    return {i for t, _, _, shown in frames for i in steps if shows(i, shown) and t < took - margin}


def lines_of(text, rank):
    return [l for l in text.splitlines() if l.startswith(f'[rank {rank}]')]


@pytest.fixture(scope='module')
def kl():
    "A real kernel (streaming %%px output, no IPP_NONINTERACTIVE) with a 2-rank cluster, and its frontend"
    assert ours() == []
    k = Kernel()
    _, out, err, _ = k.run("from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()")
    assert err is None, out
    _, out, err, _ = k.run("%%px\nimport time, sys\nfrom IPython.display import display, update_display, clear_output", timeout=60)  # a first cell
    assert err is None, out
    yield k, Frontend()
    k.close()
    (ROOT / 'build').mkdir(exist_ok=True)
    (ROOT / 'build' / 'px_live.json').write_text(json.dumps(LIVE, indent=1))
    print(json.dumps(LIVE, indent=1))


def test_first_line_latency(kl):
    "The first line a cell prints shows within a fraction of a second (ipyparallel's %%px --stream: 0.2 s; ddp_nb held it 2 s)"
    k, front = kl
    took = []
    for i in range(3):  # (a cell longer than ipyparallel's 2 s, which held the first line until then)
        mid, frames, _, err = watch(k, front, f"%%px\nimport time\nprint(f'first {{rank}} {i}')\ntime.sleep(2.5)\nprint('last')")
        assert err is None, front.text(mid)
        first = next(t for t, _, _, shown in frames if '[rank 0] first' in shown or '[rank 1] first' in shown)
        took.append(round(first, 3))
    LIVE['first line of a %%px cell, seconds (3 runs)'] = took
    assert sorted(took)[1] < 1.5, took  # the goal (<= 0.3 s) is measured and reported, not asserted: the machine is shared


def test_display_updates_in_place(kl):
    "display(..., display_id=True) + .update() and update_display(display_id=...) move in place per rank, live; a later cell updates them too"
    k, front = kl
    code = ("%%px\nimport time\nfrom IPython.display import display, update_display\n"
            "h = display(f'rank {rank} step 0', display_id=True)\ndisplay(f'rank {rank} fixed 0', display_id='fixed')\n"
            "for i in range(1, 8):\n    time.sleep(0.25); h.update(f'rank {rank} step {i}')\n"
            "update_display(f'rank {rank} fixed 1', display_id='fixed')")
    mid, frames, took, err = watch(k, front, code)
    text = front.text(mid)
    assert err is None, text
    for r in (0, 1):
        assert text.count(f'rank {r} step 7') == 1 and f'rank {r} fixed 1' in text and f'rank {r} fixed 0' not in text, text
        assert not any(f'rank {r} step {i}' in text for i in range(7)), text
        seen = seen_live(frames, took, range(1, 7), lambda i, shown: f"rank {r} step {i}'" in shown)
        assert len(seen) >= 3, (r, seen)  # intermediate frames arrived while the cell ran
    LIVE['display updates: frames of rank 0 seen while running (of 6)'] = len(seen)
    mid2, _, _, err = watch(k, front, "%%px\nupdate_display(f'rank {rank} fixed 2', display_id='fixed')")
    assert err is None and all(f'rank {r} fixed 2' in front.text(mid) for r in (0, 1)), front.text(mid)  # the earlier cell's display


def test_clear_output_redraws_each_rank(kl):
    "clear_output(wait=True) + print in a loop: each rank's latest frame, redrawn in place, live"
    k, front = kl
    code = ("%%px\nimport time\nfrom IPython.display import clear_output\n"
            "for i in range(8):\n    clear_output(wait=True); print(f'rank {rank} frame {i}'); time.sleep(0.2)")
    mid, frames, took, err = watch(k, front, code)
    text = front.text(mid)
    assert err is None, text
    for r in (0, 1):
        assert lines_of(text, r) == [f'[rank {r}] rank {r} frame 7'], text
        seen = seen_live(frames, took, range(7), lambda i, shown: f'rank {r} frame {i}' in shown, margin=0.2)
        assert len(seen) >= 3, (r, seen)


def test_carriage_return_progress_in_place(kl):
    "A '\\r' progress line (tqdm in a terminal): one line per rank, moving in place, its last state kept; lines after it below"
    k, front = kl
    code = ("%%px\nimport sys, time\nfor i in range(16):\n    sys.stderr.write(f'\\rrank {rank} {i}/15'); sys.stderr.flush(); time.sleep(0.1)\n"
            "sys.stderr.write('\\n'); print(f'rank {rank} done')")
    mid, frames, took, err = watch(k, front, code)
    text = front.text(mid)
    assert err is None, text
    for r in (0, 1):
        assert lines_of(text, r) == [f'[rank {r}] rank {r} 15/15', f'[rank {r}] rank {r} done'], text
        seen = seen_live(frames, took, range(15), lambda i, shown: f'rank {r} {i}/15\n' in shown)
        assert len(seen) >= 3, (r, seen)
    updates = sum(kind == 'update_display_data' for _, kind, _, _ in frames)
    LIVE["'\\r' progress: 16 steps x 2 ranks drawn with display updates"] = updates
    assert updates <= 2 * 16 + 2, updates  # at most one redraw per step and rank (throttled to 10 a second)


def test_tqdm_in_px(kl):
    "tqdm's terminal bar: one bar per rank in place; tqdm.auto's notebook bar: its widget shown at once, its updates forwarded live"
    k, front = kl
    mid, frames, took, err = watch(k, front, "%%px\nfrom tqdm import tqdm\nimport time\nfor i in tqdm(range(30), desc=f'rank {rank}'): time.sleep(0.04)")
    text = front.text(mid)
    assert err is None, text
    for r in (0, 1):
        bars = [l for l in lines_of(text, r) if f'rank {r}:' in l]
        assert len(bars) == 1 and '30/30' in bars[0], text
        seen = seen_live(frames, took, range(1, 30), lambda i, shown: f'| {i}/30 [' in shown and f'[rank {r}] rank {r}:' in shown)
        assert len(seen) >= 2, (r, seen)
    mid, frames, took, err = watch(k, front, "%%px\nfrom tqdm.auto import tqdm\nimport time\nfor i in tqdm(range(30)): time.sleep(0.05)")
    assert err is None, front.text(mid)
    widgets = [t for t, kind, c, _ in frames if kind == 'display_data' and 'application/vnd.jupyter.widget-view+json' in c['data']]
    comms = [t for t, kind, _, _ in frames if kind == 'comm_msg']
    assert len(widgets) == 2 and widgets[-1] < 1.5, widgets  # shown at once (was 2 s)
    assert comms and min(comms) < took - 0.5, (comms[:3], took)  # the bars' updates reach the frontend while the cell runs
    LIVE['tqdm.auto widget bars shown after, seconds'] = [round(t, 3) for t in widgets]


SCRIPT = '''import time, torch.distributed as dist
from tqdm.auto import tqdm
dist.init_process_group('gloo')
r = dist.get_rank()
bar = tqdm(range(20), desc=f'train rank {r}')
for i in bar:
    time.sleep(0.05)
    if i % 5 == 4: bar.write(f"{{'loss': {1 / (i + 1):.3f}, 'step': {i + 1}, 'rank': {r}}}")
bar.close()
dist.destroy_process_group()
'''


def test_run_script_progress_bars(kl, tmp_path):
    "cl.run_script of a tqdm.auto script shows what torchrun shows in a terminal: a text bar per rank moving in place, the loss lines"
    k, front = kl
    (tmp_path / 'train.py').write_text(SCRIPT)
    mid, frames, took, err = watch(k, front, f"_ = cl.run_script({str(tmp_path / 'train.py')!r})")
    text = front.text(mid)
    assert err is None, text
    for r in (0, 1):
        bars = [l for l in lines_of(text, r) if f'train rank {r}:' in l]
        assert len(bars) == 1 and '20/20' in bars[0], text
        assert sum(f"'rank': {r}}}" in l for l in lines_of(text, r)) == 4, text  # the loss lines
        seen = seen_live(frames, took, range(1, 20), lambda i, shown: f'| {i}/20 [' in shown and f'train rank {r}:' in shown)
        assert len(seen) >= 2, (r, seen)


def test_transformers_trainer_progress(kl, tmp_path):
    "🤗 Trainer in a %%px cell: its notebook progress bar and loss table (a display updated by id) move while it trains"
    pytest.importorskip('transformers')
    k, front = kl
    code = f'''%%px
import time, torch
from transformers import Trainer, TrainingArguments
class M(torch.nn.Module):
    def __init__(s): super().__init__(); s.l = torch.nn.Linear(4, 1)
    def forward(s, x, y):
        time.sleep(0.1)
        return {{'loss': torch.nn.functional.mse_loss(s.l(x).squeeze(-1), y)}}
torch.manual_seed(0)
ds = [{{'x': torch.randn(4), 'y': torch.randn(())}} for _ in range(128)]
args = TrainingArguments(output_dir={str(tmp_path)!r}, per_device_train_batch_size=4, max_steps=16, logging_steps=4, report_to=[],
                         save_strategy='no', use_cpu=True, disable_tqdm=False)
Trainer(model=M(), args=args, train_dataset=ds).train()'''
    mid, frames, took, err = watch(k, front, code, timeout=240)
    text = front.text(mid)
    assert err is None, text
    htmls = [(t, c['data']['text/html']) for t, kind, c, _ in frames if kind in ('display_data', 'update_display_data') and 'text/html' in c.get('data', {})]
    assert htmls, text
    final = [o for o in front.cells[mid]['outs'] if o['kind'] == 'display' and 'text/html' in o['data']]
    assert any('16/16' in o['data']['text/html'] and 'Training Loss' in o['data']['text/html'] for o in final), [o['data']['text/html'][:300] for o in final]
    steps = {m for t, h in htmls for m in re.findall(r'\[ ?(\d+)/16', h) if t < took - 0.5}
    assert len(steps) >= 3, steps  # the bar moved while it trained
    LIVE["Trainer's notebook bar: steps seen while training (of 16)"] = sorted(map(int, steps))
