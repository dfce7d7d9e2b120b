"""Write README.md from nbs/index.ipynb (Quarto, which nbdev_readme needs, cannot be installed here).

Markdown cells are copied, code cells become ```python blocks, `#| hide` cells are dropped, directives stripped.
Five markers are filled from their sources: `<!-- generated: benchmarks -->` (the sections of benchmarks/results.md),
`<!-- generated: peers -->` (the medians of its peers section as a short table), `<!-- generated: gpu -->` (its GPU section's ratios in a line), `<!-- generated: timings -->` (where a start and a warm cell spend their time) and `<!-- generated: layout -->` (one row per library notebook: its module and the summary under its title).
`python tools/make_readme.py --check` exits 1 when README.md is out of date."""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def anchor(title: str) -> str:
    "GitHub's anchor for a markdown heading"
    return re.sub(r'[^\w\- ]', '', title.strip().lower()).replace(' ', '-')


def benchmarks(path=ROOT/'benchmarks'/'results.md') -> str:
    "The results file's machine and command lines, and one line of links to its sections"
    text = Path(path).read_text()
    head = [l.rstrip() for l in text.split('\n### ')[0].splitlines() if l.startswith(('Machine:', 'Command:'))]
    secs = re.findall(r'^### (.+)$', text, re.M)
    head = [h.split(' Only ratios')[0].rstrip() for h in head]  # (the notes after it stay in the results file)
    short = lambda t: re.split(r':| \(', t)[0]  # '1. Training throughput: ...' -> '1. Training throughput'
    links = ' · '.join(f"[{short(t)}](benchmarks/results.md#{anchor(t)})" for t in secs)
    return '\n'.join(['> ' + '\\\n> '.join(head), '', f"Sections: {links}."])


def section(path, n: int) -> str | None:
    "The text of section `n` of a results file (from its title on), or None"
    return next((s for s in Path(path).read_text().split('\n### ')[1:] if s.startswith(f'{n}. ')), None)


def table_rows(text: str) -> list:
    "The cells of every markdown table row in `text`"
    return [[c.strip() for c in l.strip().strip('|').split('|')] for l in text.splitlines() if l.startswith('|')]


def _short(cell: str) -> str:
    "A results cell for the README: the median of 'median [min–max] (n)', else its text up to the first reason"
    m = re.match(r'^(\d+(?:\.\d+)? (?:s|ms)) \[', cell)
    if m: return m.group(1) + (' (a launch)' if 'launch each' in cell else '')
    if cell.startswith('failed'): return 'failed (see results)'
    return re.split(r' \(|:', cell)[0]


def peers(path=ROOT/'benchmarks'/'results.md') -> str:
    "The medians of the results file's peers section (14) as a short table, linked to it"
    sec = section(path, 14)
    if sec is None: return '(the peers section is not in the results file yet: `python -m benchmarks.peers`)'
    title, rows = sec.splitlines()[0], table_rows(sec)
    out = ['| ' + ' | '.join(rows[0]) + ' |', '|' + '---|' * len(rows[0])]
    out += ['| ' + ' | '.join([r[0]] + [_short(c) for c in r[1:]]) + ' |' for r in rows[2:]]
    m = re.search(r"ddp_nb \*\*([\d.]+ ms)\*\*, Monarch \*\*([\d.]+ ms)\*\* \(\*\*([\d.]+×)\*\*", sec)
    pair = (f" A warm cell with ddp_nb's and Monarch's kernels up at once, blocks of cells alternated so that the "
            f"machine's drift falls on both: {m[1]} vs {m[2]} ({m[3]}).") if m else ''
    return '\n'.join(out + ['', f"Medians, 2 CPU ranks on gloo, from [{title.split(':')[0]}](benchmarks/results.md#{anchor(title)}) "
                             "(spread, counts, versions and how each is measured there)." + pair +
                             " Replace runs from the kill until a warm cell is served again, the heal included (DDP wrapped "
                             "again on the new rank): a rank forked once the fork server's idle copy has imported "
                             "torch.compile's modules (a few seconds after the start; a standby has them) needs no import; "
                             "one forked sooner imports `torch._dynamo` as DDP is wrapped."])


def gpu(path=ROOT/'benchmarks'/'results.md') -> str:
    "One line from the results file's GPU section (7): the paired-window ratio at each step size, and the GPU"
    sec = section(path, 7)
    rows = [r for r in table_rows(sec or '') if r[0].startswith('MLP')]
    m = re.search(r'GPU: ([^;\n]+);', sec or '')
    if not rows or m is None: return '(the GPU section is not in the results file yet: `python -m benchmarks.gpu` on a GPU)'
    title = sec.splitlines()[0]
    steps = ', '.join(f"{r[3].strip('*')} at {float(r[2]):.1f} ms" for r in rows)
    again = sec.split('#### The smallest step, run again')[1].split('####')[0] if 'run again' in sec else ''
    again = [r[4] for r in table_rows(again) if re.match(r'\d', r[4])]  # (its ratio column)
    return (f"On a GPU ({m.group(1)}, one rank on nccl) a DDP step in a ddp_nb rank against one in a torchrun worker, "
            f"timed in turns at the same moments: ratio {steps} (a launch-bound step to a compute-bound one"
            + (f"; the smallest step in {len(again)} runs: {', '.join(again)}" if again else '') + "), "
            + ('bit-identical weights' if all(r[-1] == 'yes' for r in rows) else '**weights differ**')
            + f"; [{title.split(':')[0]}](benchmarks/results.md#{anchor(title)}) says why figures taken at different moments "
            "swing at the smallest step.")


def timings(path=ROOT/'benchmarks'/'results.md') -> str:
    "Where a start (section 4's phases) and a warm cell (section 2's breakdown) spend their time, in a line each"
    s4, s2 = section(path, 4) or '', section(path, 2) or ''
    out = []
    phases = {r[0]: r[1] for r in table_rows(s4.split('spends its time')[1].split('\n\n')[1])
              if re.match(r'[\d.]+ s', r[1].strip('*'))} if 'spends its time' in s4 else {}
    if phases:
        out.append(f"- A start ({phases.get('**total**', '?').strip('*')} in [4. Start-up](benchmarks/results.md#"
                   f"{anchor(s4.splitlines()[0])})): " + ', '.join(f"{k} {v}" for k, v in phases.items() if k != '**total**')
                   + '. Most of it is the one import of torch, in the fork server the engines are forked from.')
    m = re.search(r"Where a warm cell's time goes\n\n.*?\(one clock: the same host\)\. (.+?)\.\n", s2, re.S)
    if m: out.append(f"- A warm `%%px` cell ([2. Warm cell](benchmarks/results.md#{anchor(s2.splitlines()[0])})): {m.group(1)}"
                     "; that section splits it into the hops to the ranks and back (by the cell route, and through ipyparallel's controller for comparison).")
    return '\n'.join(out) or '(the start-up and warm-cell breakdowns are not in the results file yet: `python -m benchmarks`)'


def layout(nbs=ROOT/'nbs') -> str:
    "A table of the library's notebooks: notebook, module, and the summary line under the notebook's title"
    rows = ['| notebook | module | what it holds |', '|---|---|---|']
    for p in sorted(nbs.glob('0*.ipynb')):
        cells = json.loads(p.read_text())['cells']
        mod = next((m.group(1) for c in cells for m in [re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)] if m), None)
        if mod is None: continue
        summary = next((l[1:].strip() for c in cells if c['cell_type'] == 'markdown' for l in ''.join(c['source']).splitlines() if l.startswith('>')), '')
        rows.append(f"| [{p.stem}](nbs/{p.name}) | `ddp_nb.{mod}` | {summary} |")
    return '\n'.join(rows)

GENERATED = {'<!-- generated: benchmarks -->': benchmarks, '<!-- generated: peers -->': peers, '<!-- generated: gpu -->': gpu, '<!-- generated: timings -->': timings, '<!-- generated: layout -->': layout}

def render(nb_path=ROOT/'nbs'/'index.ipynb') -> str:
    "README text for the notebook at `nb_path`"
    out = ['<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->']
    for c in json.loads(Path(nb_path).read_text())['cells']:
        src = ''.join(c['source'])
        lines = src.splitlines()
        if any(l.strip().replace(' ', '') in ('#|hide', '#|hide_input') for l in lines): continue
        body = '\n'.join(l for l in lines if not l.lstrip().startswith('#|')).strip('\n')
        if not body.strip(): continue
        if c['cell_type'] == 'markdown':
            for mark, make in GENERATED.items(): body = body.replace(mark, make())
        out.append(body if c['cell_type'] == 'markdown' else f"```python\n{body}\n```")
    return '\n\n'.join(out) + '\n'

if __name__ == '__main__':
    text, readme = render(), ROOT/'README.md'
    if '--check' in sys.argv:
        ok = readme.exists() and readme.read_text() == text
        print('README.md is in sync with nbs/index.ipynb' if ok else 'README.md is out of date: run python tools/make_readme.py')
        sys.exit(0 if ok else 1)
    readme.write_text(text)
