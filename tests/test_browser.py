"""A real browser: JupyterLab on 127.0.0.1 in headless Chromium runs the quickstart, and the dashboard moves while
the blocking %%px training cell is still running."""
import json, os, re, secrets, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from conftest import ROOT

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


@pytest.fixture
def lab(tmp_path):
    "JupyterLab on 127.0.0.1 with private config, data and runtime dirs, serving a copy of the quickstart"
    _need_browser()
    root = tmp_path / 'lab'; root.mkdir()
    nb = json.loads((ROOT / 'nbs' / '10_quickstart.ipynb').read_text())  # nbdev_clean drops the kernelspec: name one
    nb['metadata']['kernelspec'] = dict(name='python3', display_name='Python 3 (ipykernel)', language='python')
    (root / 'quickstart.ipynb').write_text(json.dumps(nb))
    settings = tmp_path / 'settings'  # every cell stays in the DOM (no windowing), and no news pop-up
    for name, cfg in (('notebook-extension/tracker', {'windowingMode': 'none'}),
                      ('apputils-extension/notification', {'fetchNews': 'false'})):
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


JS_STATE = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const train = cells.find(c => c.textContent.includes('sampler.set_epoch(epoch)'));
  const prompt = train ? (train.querySelector('.jp-InputPrompt') || {}).textContent || '' : '';
  const head = document.querySelector('.ddp-nb-header');
  const img = document.querySelector('.ddp-nb-dashboard img');
  const loads = [...document.querySelectorAll('.ddp-nb-load')].map(e => e.textContent);
  const last = cells.length ? (cells[cells.length - 1].querySelector('.jp-InputPrompt') || {}).textContent || '' : '';
  return {prompt, head: head ? head.textContent : null, img: img ? img.src : null, loads, last,
          errors: document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length};
}"""


def test_dashboard_moves_while_training_cell_runs(lab, no_leftovers):
    from playwright.sync_api import sync_playwright
    url, token = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / 'dashboard.png'
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[
            '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
            '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'])
        page = b.new_page(viewport={'width': 1300, 'height': 1000})
        page.goto(f'{url}/lab/tree/quickstart.ipynb?reset&token={token}')
        try:
            page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')", timeout=120_000)
            page.wait_for_function("() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'",
                                   timeout=120_000)
        except Exception:
            page.screenshot(path=str(SHOTS / 'not-ready.png')); raise
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited
        seen, shot_taken, t0 = [], False, time.time()
        while time.time() - t0 < 300:
            s = page.evaluate(JS_STATE)
            s['t'] = time.time() - t0
            seen.append(s)
            running = s['prompt'].strip().startswith('[*]')
            ep = re.search(r'epoch (\d+)', s['head'] or '')
            if running and ep and int(ep.group(1)) >= 8 and not shot_taken:  # mid-run, with a curve worth seeing
                page.locator('.ddp-nb-dashboard').scroll_into_view_if_needed()
                page.screenshot(path=str(shot)); shot_taken = True
            if re.match(r'\[\d+\]', s['last'].strip()): break  # the last cell (cl.stop()) has run
            time.sleep(0.1)
        if not shot_taken: page.screenshot(path=str(shot))
        b.close()
    print(f"\nscreenshot of the live dashboard: {shot}")
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
    assert shot.exists() and shot.stat().st_size > 10_000
