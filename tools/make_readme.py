"""Write README.md from nbs/index.ipynb (Quarto, which nbdev_readme needs, cannot be installed here).

Markdown cells are copied, code cells become ```python blocks, `#| hide` cells are dropped, directives stripped.
`python tools/make_readme.py --check` exits 1 when README.md is out of date."""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def render(nb_path=ROOT/'nbs'/'index.ipynb') -> str:
    "README text for the notebook at `nb_path`"
    out = ['<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->']
    for c in json.loads(Path(nb_path).read_text())['cells']:
        src = ''.join(c['source'])
        lines = src.splitlines()
        if any(l.strip().replace(' ', '') in ('#|hide', '#|hide_input') for l in lines): continue
        body = '\n'.join(l for l in lines if not l.lstrip().startswith('#|')).strip('\n')
        if not body.strip(): continue
        out.append(body if c['cell_type'] == 'markdown' else f"```python\n{body}\n```")
    return '\n\n'.join(out) + '\n'

if __name__ == '__main__':
    text, readme = render(), ROOT/'README.md'
    if '--check' in sys.argv:
        ok = readme.exists() and readme.read_text() == text
        print('README.md is in sync with nbs/index.ipynb' if ok else 'README.md is out of date: run python tools/make_readme.py')
        sys.exit(0 if ok else 1)
    readme.write_text(text)
