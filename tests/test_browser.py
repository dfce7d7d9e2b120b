"""A real browser: JupyterLab on 127.0.0.1 in headless Chromium runs the quickstart, and the dashboard moves while
the blocking %%px training cell is still running."""
import json, os, re, secrets, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from conftest import ROOT, ours

CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'
SHOTS = ROOT / 'build' / 'browser'


def _need_browser():
    "Skip outside CI when Chromium or Playwright are missing; in CI they must be there"
    missing = [n for n, ok in (('chromium (apt-get install chromium)', os.path.exists(CHROMIUM)),
                               ('playwright (pip install playwright)', _has('playwright')),
                               ('jupyterlab (pip install jupyterlab)', _has('jupyterlab'))) if not ok]
    if missing:
        if os.environ.get('CI'): pytest.fail(f"CI must run the browser test, but these are missing: {missing}")
        pytest.skip(f"browser test needs {', '.join(missing)}")


def _has(mod):
    import importlib.util
    return importlib.util.find_spec(mod) is not None


def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def _notebook(cells):
    "A notebook of code cells with a kernelspec (nbdev_clean drops it)"
    return dict(nbformat=4, nbformat_minor=5, cells=[dict(cell_type='code', metadata={}, outputs=[], execution_count=None, source=c) for c in cells],
                metadata=dict(kernelspec=dict(name='python3', display_name='Python 3 (ipykernel)', language='python')))


def _serve(tmp_path, notebooks, theme=None):
    "JupyterLab on 127.0.0.1 with private config, data and runtime dirs, serving `notebooks` ({name: notebook}) in `theme`; yields (url, token)"
    _need_browser()
    root = tmp_path / 'lab'; root.mkdir()
    for name, nb in notebooks.items(): (root / name).write_text(json.dumps(nb))
    settings = tmp_path / 'settings'  # every cell stays in the DOM (no windowing), and no news pop-up
    for name, cfg in (('notebook-extension/tracker', {'windowingMode': 'none'}),
                      ('apputils-extension/notification', {'fetchNews': 'false'})) + ((('apputils-extension/themes', {'theme': theme}),) if theme else ()):
        f = settings / '@jupyterlab' / f'{name}.jupyterlab-settings'
        f.parent.mkdir(parents=True, exist_ok=True); f.write_text(json.dumps(cfg))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, 'JUPYTER_CONFIG_DIR': str(tmp_path / 'cfg'), 'JUPYTER_RUNTIME_DIR': str(tmp_path / 'rt'),
           'JUPYTERLAB_SETTINGS_DIR': str(settings), 'JUPYTERLAB_WORKSPACES_DIR': str(tmp_path / 'ws'),
           'PATH': f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop('IPP_NONINTERACTIVE', None)  # a real frontend: errors display as in a user's notebook
    log = open(tmp_path / 'lab.log', 'w')
    p = subprocess.Popen([sys.executable, '-m', 'jupyter', 'lab', '--no-browser', '--ServerApp.ip=127.0.0.1',
                          f'--ServerApp.port={port}', f'--IdentityProvider.token={token}', f'--ServerApp.root_dir={root}',
                          '--LabApp.expose_app_in_browser=True', '--ServerApp.port_retries=0']
                         + (['--allow-root'] if os.geteuid() == 0 else []),
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f'http://127.0.0.1:{port}'
    for _ in range(120):
        if p.poll() is not None: break
        try: urllib.request.urlopen(f'{url}/api/status?token={token}', timeout=1); break
        except Exception: time.sleep(0.5)
    else:
        p.kill(); pytest.fail('JupyterLab did not start: ' + (tmp_path / 'lab.log').read_text()[-2000:])
    yield url, token
    p.terminate()
    try: p.wait(30)
    except subprocess.TimeoutExpired: p.kill(); p.wait()
    deadline = time.monotonic() + 60  # the notebook's kernel ended with JupyterLab: its cluster's owner watch ends the cluster
    while ours() and time.monotonic() < deadline: time.sleep(0.2)  # (seconds on a busy machine): the next test starts clean


@pytest.fixture
def lab(tmp_path):
    "JupyterLab serving a copy of the quickstart, with a printing %%px cell before its last cell"
    nb = json.loads((ROOT / 'nbs' / '10_quickstart.ipynb').read_text())
    nb['metadata']['kernelspec'] = _notebook([])['metadata']['kernelspec']
    nb['cells'].insert(len(nb['cells']) - 1, dict(cell_type='code', metadata={}, outputs=[], execution_count=None, source=PX_CELL))
    yield from _serve(tmp_path, {'quickstart.ipynb': nb})


def _browser(pw):
    "Headless Chromium, as the tests drive it"
    return pw.chromium.launch(executable_path=CHROMIUM, args=[
        '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'])


def _open(page, url, token, name):
    "Open notebook `name` in JupyterLab and wait for its kernel"
    page.goto(f'{url}/lab/tree/{name}?reset&token={token}')
    try:
        page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')", timeout=120_000)
        page.wait_for_function("() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'",
                               timeout=120_000)
    except Exception:
        page.screenshot(path=str(SHOTS / f'not-ready-{name}.png')); raise


PX_RUNS, PX_LINES = 50, 3
PX_CELL = f"""# PX_OUTPUT_CHECK: a printing %%px cell, {PX_RUNS} times, the ranks finishing at different times
for i in range({PX_RUNS}):
    get_ipython().run_cell_magic('px', '', f"import time\\nfor j in range({PX_LINES}):\\n    time.sleep(0.01 * rank)\\n    print(f'run {{i}} line {{{{j}}}} of rank {{{{rank}}}}')")
"""

JS_PX_OUTPUT = """() => {
  const cell = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].find(c => c.textContent.includes('PX_OUTPUT_CHECK'));
  return cell ? [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText).join('\\n') : null;
}"""


JS_STATE = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const train = cells.find(c => c.textContent.includes('set_epoch(') || c.textContent.includes('train_epoch(model'));
  const prompt = train ? (train.querySelector('.jp-InputPrompt') || {}).textContent || '' : '';
  const dash = document.querySelector('.ddp-nb-dashboard');
  const head = document.querySelector('.ddp-nb-header');
  const img = document.querySelector('.ddp-nb-dashboard img.ddp-nb-plot');
  const rows = [...document.querySelectorAll('.ddp-nb-rank')];
  const loads = [...document.querySelectorAll('.ddp-nb-load')].map(e => e.textContent);
  const last = cells.length ? (cells[cells.length - 1].querySelector('.jp-InputPrompt') || {}).textContent || '' : '';
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; };
  return {prompt, head: head ? head.textContent : null, head_step: head ? head.dataset.step : null,
          img: img ? img.src.length + ':' + img.src.slice(-64) : null, loads, last,
          plot: img ? {...img.dataset, natural: [img.naturalWidth, img.naturalHeight], shown: [img.clientWidth, img.clientHeight],
                       dpr: window.devicePixelRatio, format: img.src.slice(5, 18)} : null,
          table: rows.map(r => ({rank: r.dataset.rank, status: r.dataset.status,
                                 step: (r.querySelector('.ddp-nb-step') || {dataset: {}}).dataset.step})),
          cols: rows.length ? [...rows[0].children].map(box) : [],
          head_rows: document.querySelectorAll('.ddp-nb-dashboard .ddp-nb-ranks th').length,
          waiting: dash ? (dash.textContent.match(/waiting for report/g) || []).length : 0,
          errors: document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length};
}"""


def _agree(s):
    "Header, table and plot of one sampled frame: (header step, the table's slowest step, the plot's last step), and the plot's limits"
    steps = [int(r['step']) for r in s['table'] if r['step']]
    p = s['plot']
    return (int(s['head_step']), min(steps) if steps else None, int(p['lastStep'])), p


def _check_frame(s):
    "The frame agrees with itself, and the plot's last point lies inside its axes, which end near the last step"
    steps, p = _agree(s)
    assert steps[0] == steps[1] == steps[2], f"header, table and plot disagree on the step: {steps} in {s}"
    x0, x1, y0, y1, lx, ly = (float(p[k]) for k in ('x0', 'x1', 'y0', 'y1', 'lastX', 'lastY'))
    assert x0 <= lx <= x1 and y0 <= ly <= y1, f"the plot's last point ({lx}, {ly}) is outside its axes {p}"
    assert x1 - x0 <= 1.3 * (float(p['maxStep']) - x0) + 1.01, f"the x axis runs far ahead of the data: {p}"


def _shot(page, name):
    "Screenshot of the dashboard as shown, into build/browser/"
    path = SHOTS / name
    page.locator('.ddp-nb-dashboard').screenshot(path=str(path))
    return path


def test_dashboard_moves_while_training_cell_runs(lab, no_leftovers):
    from playwright.sync_api import sync_playwright
    url, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = {}
    with sync_playwright() as pw:
        b = _browser(pw)
        page = b.new_page(viewport={'width': 1300, 'height': 1000})
        _open(page, url, token, 'quickstart.ipynb')
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited
        seen, t0, changes, after = [], time.time(), set(), None
        while time.time() - t0 < 300:
            s = page.evaluate(JS_STATE)
            s['t'] = time.time() - t0
            seen.append(s)
            running = s['prompt'].strip().startswith('[*]')
            if running and s['plot']: changes.add(s['img'])
            if running and len(changes) >= 2 and 'during' not in shots:  # mid-run, with a curve worth seeing
                shots['during'] = _shot(page, 'dashboard-during.png'); seen.append({**page.evaluate(JS_STATE), 't': time.time() - t0})
            done = re.match(r'\[\d+\]', s['prompt'].strip())
            if done and after is None and s['table'] and all(r['status'] == 'idle' for r in s['table']):
                shots['after'] = _shot(page, 'dashboard-after.png'); after = page.evaluate(JS_STATE)
            if re.match(r'\[\d+\]', s['last'].strip()): break  # the last cell (cl.stop()) has run
            time.sleep(0.1)
        page.wait_for_timeout(500)
        final = page.evaluate(JS_STATE)
        px_text = page.evaluate(JS_PX_OUTPUT)
        shots['stopped'] = _shot(page, 'dashboard-stopped.png')
        if 'during' not in shots: page.screenshot(path=str(SHOTS / 'dashboard-during.png'))
        b.close()
    for k, p in shots.items(): print(f"\nscreenshot of the dashboard ({k}): {p}")
    if os.environ.get("DDP_NB_DEBUG"): [print(s) for s in seen[::5]]
    during = [s for s in seen if s['prompt'].strip().startswith('[*]') and s['head']]
    states = []
    for s in during:
        key = (s['head'], s['img'])
        if not states or states[-1] != key: states.append(key)
    assert len(states) >= 4, f"dashboard changed {len(states) - 1} times while the training cell ran: {during[-3:]}"
    losses = [float(m.group(1)) for h, _ in states for m in [re.search(r'loss ([0-9.e+-]+)', h)] if m]
    assert len(losses) >= 3 and losses[-1] < losses[0], losses
    loads = next(s['loads'] for s in reversed(during) if s['loads'])
    assert len(loads) == 2 and all(('CPU' in l and '%' in l) or 'GPU' in l for l in loads), loads
    assert re.match(r'\[\d+\]', seen[-1]['last'].strip()), "the quickstart did not run to its end in the browser"
    # every frame the browser showed while training agrees with itself: header, table and plot at one step
    framed = [s for s in during if s['plot'] and s['head_step']]
    assert len(framed) >= 3, during[-3:]
    for s in framed: _check_frame(s)
    assert all(s['waiting'] <= 1 for s in seen), "'waiting for report(...)' shown twice"
    # crisp: the plot is vector (SVG), drawn at whatever size the browser shows it
    p = framed[-1]['plot']
    print(f"plot: {p['format']}, intrinsic {p['natural']} css px, shown at {p['shown']} css px x DPR {p['dpr']}")
    assert p['format'] == 'image/svg+xml' and p['shown'][0] >= 600, p
    # the table's columns do not collide: each cell ends before the next begins, and they stay put between states
    cols = framed[-1]['cols']
    assert all(a[1] <= b[0] + 0.5 for a, b in zip(cols, cols[1:])), cols
    # after the training cell: the last frame shows where the run ended, still in agreement
    assert after is not None, "no frame with every rank idle after the training cell"
    _check_frame(after)
    assert after['cols'] == cols, (after['cols'], cols)
    # after cl.stop(): every rank stopped, no load
    assert [r['status'] for r in final['table']] == ['stopped', 'stopped'], final['table']
    assert final['loads'] == ['—', '—'] and 'cluster stopped' in final['head'], final
    for p in shots.values(): assert p.exists() and p.stat().st_size > 5_000, p
    # every line every rank printed in a %%px cell reached the browser, labelled by its rank
    assert px_text is not None, "the printing %%px cell has no output in the browser"
    got = re.findall(r'^\[rank (\d+)\] run (\d+) line (\d+) of rank (\d+)$', px_text, re.M)
    want = {(str(r), str(i), str(j), str(r)) for i in range(PX_RUNS) for j in range(PX_LINES) for r in range(2)}
    print(f"%%px lines shown in the browser: {len(set(got) & want)} of {len(want)}")
    assert set(got) == want and len(got) == len(want), (len(got), sorted(want - set(got))[:10], px_text[-2000:])



EVIL = "<img src=x onerror=\"window.pwned = 1; document.title = 'pwned'\">"
HOSTILE = [
    "from ddp_nb import DDPCluster\ncl = DDPCluster(n=1).start()\ncl.dashboard(every=0.1)",
    "%%px\n" + f"report(step=0, loss=1.0, **{{{EVIL!r}: 2.0}})\nreport(step=1, loss=0.5, **{{{EVIL!r}: 1.0}})",
    f"import subprocess, sys, time\nforger = subprocess.run([sys.executable, {str(Path(__file__).parent / 'forge.py')!r}, "
    "cl._collector.addr, '1'], capture_output=True, text=True, timeout=120)\nprint('forger:', forger.stdout, forger.stderr[-300:])\ntime.sleep(1.5)",
    "cl.stop()",
]
JS_HOSTILE = r"""() => {
  const dash = document.querySelector('.ddp-nb-dashboard');
  const last = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].pop();
  return {pwned: window.pwned === 1 || document.title === 'pwned', text: dash ? dash.textContent : null,
          imgs: dash ? dash.querySelectorAll('img').length : 0, plots: dash ? dash.querySelectorAll('img.ddp-nb-plot').length : 0,
          th: dash ? [...dash.querySelectorAll('th')].map(t => t.textContent) : [],
          dark: document.body.dataset.jpThemeLight === 'false',
          filter: dash && dash.querySelector('img.ddp-nb-plot') ? getComputedStyle(dash.querySelector('img.ddp-nb-plot')).filter : null,
          status: dash && dash.querySelector('[data-st]') ? getComputedStyle(dash.querySelector('[data-st]')).color : null,
          done: last ? /\[\d+\]/.test((last.querySelector('.jp-InputPrompt') || {}).textContent || '') : false};
}"""


def test_hostile_names_and_forged_messages_run_no_script(tmp_path, no_leftovers):
    "A metric name that is HTML, reported by a rank, and a neighbour's forged batches: shown as text, no script runs; in the dark theme"
    from playwright.sync_api import sync_playwright
    SHOTS.mkdir(parents=True, exist_ok=True)
    for url, token in _serve(tmp_path, {'hostile.ipynb': _notebook(HOSTILE)}, theme='JupyterLab Dark'):
        with sync_playwright() as pw:
            b = _browser(pw)
            page = b.new_page(viewport={'width': 1300, 'height': 900})
            _open(page, url, token, 'hostile.ipynb')
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            t0, s = time.time(), {}
            while time.time() - t0 < 180:
                s = page.evaluate(JS_HOSTILE)
                if s['done'] and s['text'] and 'ignored' in s['text']: break
                time.sleep(0.2)
            page.wait_for_timeout(500)
            s = page.evaluate(JS_HOSTILE)
            _shot(page, 'dashboard-hostile-dark.png')
            b.close()
    print(f"\nwhat the dashboard showed: {s}")
    assert s['done'], f"the hostile notebook did not run to its end: {s}"
    assert not s['pwned'], "a script ran in the page"
    assert s['imgs'] == s['plots'] == 1, s   # the plot, and no image the payload would have made
    assert EVIL in s['th'], s['th']   # the name shown as the text it is
    assert re.search(r"ignored [\d,]+ messages sent to the dashboard", s['text']), s['text']
    # readable in the dark theme: the plot's white inverted, the statuses in brighter colours
    assert s['dark'] and 'invert' in (s['filter'] or '') and s['status'] == 'rgb(145, 152, 161)', s
