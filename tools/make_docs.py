"""Build the documentation site from nbs/ with Sphinx and myst-nb (Quarto, which `nbdev_docs` needs, cannot be
installed from the package index; `nbdev_docs` still works where Quarto exists).

Each notebook is processed into a copy under the source folder, never executed: `#| hide` cells dropped, `#|` lines
stripped, a `show_doc` cell added after every exported definition (nbdev's `add_show_docs`) and every `show_doc`
cell replaced by the markdown it renders (the signature and docments), evaluated in the notebook's module. Links are
rewritten for the site (`nbs/X.ipynb` in index.ipynb, files outside nbs/ to the repository). Sphinx then builds the
HTML with warnings as errors, and tools/check_links.py checks every internal link and anchor of the result.

`python tools/make_docs.py [--dir build/docs]` writes the site into build/docs/html/; exits 1 on a broken link or a
failed show_doc."""
import argparse, ast, importlib, re, shutil, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT/'tools')]

GROUPS = [('Library reference', r'0[0-8]'), ('Guide', r'09'), ('Tutorials', r'[1-9]\d')]  # by file name
HIDE = {'hide', 'hide_input'}
FENCE = re.compile(r'^(```|~~~)')


def groups(nbs=ROOT/'nbs') -> list:
    "The site's sections: (caption, [notebook paths in order]), index.ipynb apart"
    names = sorted(p for p in nbs.glob('*.ipynb') if p.name != 'index.ipynb')
    return [(cap, [p for p in names if re.match(pat + r'[a-z]?\d?_', p.name)]) for cap, pat in GROUPS]


def settings() -> dict:
    "settings.ini's [DEFAULT] section"
    from configparser import ConfigParser
    cfg = ConfigParser(delimiters=['=']); cfg.read(ROOT/'settings.ini', encoding='utf-8')
    return dict(cfg['DEFAULT'])


def repo_url(rel: str) -> str:
    "The repository's page for `rel`, a path from the repository root (with an optional #anchor)"
    s = settings()
    return f"{s['git_url']}/blob/{s['branch']}/{rel}"


def fix_link(url: str, base: Path) -> str:
    "A markdown link target as the site needs it: notebooks by their name, other repository files on the repository"
    if re.match(r'^[a-z][a-z0-9+.-]*:|^#|^/', url, re.I): return url
    path, _, anchor = url.partition('#')
    target = (base/path).resolve()
    try: rel = target.relative_to(ROOT)
    except ValueError: return url
    if rel.parts[:1] == ('nbs',) and len(rel.parts) == 2: return rel.parts[1] + (f'#{anchor}' if anchor else '')
    return repo_url(rel.as_posix() + (f'#{anchor}' if anchor else ''))


def outside_code(md: str, f) -> str:
    "`md` with `f` applied to its text outside code fences and code spans"
    out, fenced = [], False
    for line in md.split('\n'):
        if FENCE.match(line.lstrip()): fenced = not fenced
        elif not fenced: line = ''.join(p if p.startswith('`') else f(p) for p in re.split(r'(`[^`]*`)', line))
        out.append(line)
    return '\n'.join(out)


def fix_links(md: str, base: Path) -> str:
    "Every inline markdown link of `md` through `fix_link`, code spans and fences left alone"
    return outside_code(md, lambda t: re.sub(r'\]\(([^)\s]+)\)', lambda m: f'](' + fix_link(m.group(1), base) + ')', t))


def escape_html(md: str) -> str:
    "`<` outside code written as `&lt;`, so a docstring's `<name>` shows instead of being read as HTML"
    return outside_code(md, lambda t: t.replace('<', '&lt;'))


def clean_show_doc_md(md: str) -> str:
    "nbdev's show_doc markdown for a site that is not Quarto: no rule first, no Quarto link attributes, no `#LNone`"
    md = re.sub(r'^---\s*\n', '', md.lstrip())
    m = re.match(r'\s*\[source\]\(([^)]*?)(?:#LNone)?\)(?:\{[^}]*\})?\s*\n', md)
    if m: md = md[m.end():]
    md = escape_html(md).strip()
    if m: md = re.sub(r'^(#+ .*)$', lambda h: f'{h.group(1)}\n\n[source]({m.group(1)})', md, count=1, flags=re.M)
    return md + '\n'


def namespace(nb) -> dict:
    "What a notebook's show_doc cells see: its module (`#| default_exp`), `ddp_nb`'s names and `show_doc`"
    from nbdev.showdoc import show_doc
    import ddp_nb
    ns = {'ddp_nb': ddp_nb, **{k: getattr(ddp_nb, k) for k in getattr(ddp_nb, '__all__', [])}}
    src = '\n'.join(c.source for c in nb.cells if c.cell_type == 'code')
    m = re.search(r'^\s*#\|\s*default_exp\s+(\S+)', src, re.M)
    if m: ns.update(vars(importlib.import_module(f'ddp_nb.{m.group(1)}')))
    return {**ns, 'show_doc': show_doc}


def render_show_doc(source: str, ns: dict) -> str:
    "The markdown of the `show_doc(...)` calls in `source`, evaluated in `ns`"
    mds = []
    for node in ast.parse(source).body:
        res = eval(compile(ast.Expression(node.value), '<show_doc>', 'eval'), ns)
        if hasattr(res, '_repr_markdown_'): mds.append(clean_show_doc_md(res._repr_markdown_()))
    return '\n'.join(mds)


def public_methods(cls: ast.ClassDef) -> list:
    "The public methods defined in `cls`'s body (not properties): nbdev's show_doc shows the class alone"
    def prop(f): return any(re.search(r'property|\.setter$', ast.unparse(d)) for d in f.decorator_list)
    return [f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not f.name.startswith('_') and not prop(f)]


class add_method_docs:
    "A show_doc cell for every public method of each exported class, after the class's (added by `add_show_docs`)"
    def __init__(self, nb): self.nb = nb
    def __call__(self, cell): pass
    def begin(self): insert_method_docs(self.nb)


def documented(cell) -> bool:
    "An exported code cell whose definitions nbdev documents (as nbdev's `add_show_docs` picks them)"
    d = cell.directives_
    return cell.cell_type == 'code' and bool({'export', 'exports', 'exec_doc'} & d.keys()) and 'hide' not in d


def insert_method_docs(nb):
    "Insert the show_doc cells of `add_method_docs` into `nb`"
    from execnb.nbio import mk_cell
    code = [c.source for c in nb.cells if c.cell_type == 'code']
    shown = {m.group(1) for src in code for m in re.finditer(r'^show_doc\(([\w.]+)', src, re.M)}
    for cell in reversed([c for c in nb.cells if documented(c)]):
        try: tree = ast.parse(cell.source)
        except SyntaxError: continue
        names = [f'{c.name}.{m}' for c in tree.body if isinstance(c, ast.ClassDef) and not c.name.startswith('_')
                 for m in public_methods(c) if f'{c.name}.{m}' not in shown]
        nb.cells[cell.idx_ + 1:cell.idx_ + 1] = [mk_cell(f'show_doc({n})') for n in names]


def is_show_doc(cell) -> bool:
    "A code cell made only of `show_doc(...)` calls"
    if cell.cell_type != 'code' or not cell.source.strip(): return False
    try: body = ast.parse(cell.source).body
    except SyntaxError: return False
    def called(n): return isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and getattr(n.value.func, 'id', '')
    return all(called(n) == 'show_doc' for n in body)


class SiteCells:
    "The notebook's cells as the site shows them; show_doc failures collected in `errors`"
    def __init__(self, nb, name: str, base: Path): self.nb, self.name, self.base, self.errors = nb, name, base, []
    def begin(self): self.ns = namespace(self.nb)

    def __call__(self, cell):
        d = cell.directives_
        if HIDE & d.keys() or d.get('include:') == ['false']: del cell['source']; return
        if cell.cell_type == 'markdown': cell.source = self.markdown(cell.source); return
        if cell.cell_type != 'code': return
        if not cell.source.strip(): del cell['source']; return
        cell.outputs, cell.execution_count = [], None
        if is_show_doc(cell): self.show_doc(cell)

    def markdown(self, md: str) -> str:
        "A markdown cell with the README's generated parts filled and links fixed"
        if self.name == 'index.ipynb':
            from make_readme import GENERATED
            for mark, make in GENERATED.items(): md = md.replace(mark, make())
        return fix_links(md, self.base)

    def show_doc(self, cell):
        "The show_doc cell as the markdown it renders; left as code, and the error kept, where it fails"
        try: md = render_show_doc(cell.source, self.ns)
        except Exception as e:
            self.errors.append(f'{self.name}: {cell.source.strip()}: {type(e).__name__}: {e}'); return
        cell.cell_type, cell.source = 'markdown', md
        for k in ('outputs', 'execution_count'): cell.pop(k, None)


def toctree(sections) -> str:
    "The hidden toctrees that make the site's navigation, one per section, in notebook order"
    return '\n\n'.join(f"```{{toctree}}\n:caption: {cap}\n:hidden:\n\n" + '\n'.join(p.stem for p in nbs) + '\n```'
                       for cap, nbs in sections if nbs)


def process(path: Path, dest: Path, sections) -> list:
    "Write the site's copy of the notebook at `path` into `dest`; returns its show_doc failures"
    from execnb.nbio import read_nb, write_nb, mk_cell
    from nbdev.process import NBProcessor
    from nbdev.processors import populate_language, add_show_docs, hide_line
    nb = read_nb(path)
    site = SiteCells(nb, path.name, ROOT if path.name == 'index.ipynb' else path.parent)
    NBProcessor(nb=nb, procs=[populate_language, hide_line, add_method_docs, add_show_docs, site]).process()
    if path.name == 'index.ipynb': nb.cells.append(mk_cell(toctree(sections), 'markdown'))
    for i, c in enumerate(nb.cells):
        for k in [k for k in c if k.endswith('_') or k == 'has_sd']: c.pop(k)
        c['id'] = f'cell-{i}'
    nb.metadata = {'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'},
                   'language_info': {'name': 'python', 'pygments_lexer': 'ipython3'}}
    write_nb(nb, dest/path.name)
    return site.errors


def prepare(src: Path) -> list:
    "The processed notebooks in `src` (emptied first); returns every show_doc failure"
    if src.exists(): shutil.rmtree(src)
    src.mkdir(parents=True)
    sections, errors = groups(), []
    for p in [ROOT/'nbs'/'index.ipynb'] + [p for _, nbs in sections for p in nbs]: errors += process(p, src, sections)
    return errors


def sphinx(work: Path) -> int:
    "Sphinx's HTML build of `work`/src into `work`/html with docs/conf.py, warnings as errors"
    from sphinx.cmd.build import build_main
    if (work/'html').exists(): shutil.rmtree(work/'html')
    return build_main(['-b', 'html', '-q', '-W', '--keep-going', '-E', '-j', 'auto', '-c', str(ROOT/'docs'),
                       '-d', str(work/'doctrees'), str(work/'src'), str(work/'html')])


def build(work) -> tuple:
    "The site built in `work`/html (sources in `work`/src, myst-nb's folder beside); (show_doc failures, exit code)"
    work = Path(work).resolve()
    errors = prepare(work/'src')
    return errors, sphinx(work)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--dir', default=str(ROOT/'build'/'docs'), help='the build folder; the site is its html/')
    a = ap.parse_args(argv)
    t0, work = time.time(), Path(a.dir).resolve()
    errors, rc = build(work)
    for e in errors: print(f'show_doc failed: {e}', file=sys.stderr)
    if rc:
        print(f'sphinx-build failed (exit {rc}): its warnings above name the page ({work/"src"}/X.ipynb is '
              'nbs/X.ipynb as the site shows it)', file=sys.stderr)
        return 1
    from check_links import check_site
    broken = check_site(work/'html')
    for b in broken: print(f'broken link: {b}', file=sys.stderr)
    print(f'docs: {work/"html"/"index.html"} in {time.time() - t0:.0f}s; {len(errors)} failed show_doc, '
          f'{len(broken)} broken internal links')
    return 1 if errors or broken else 0


if __name__ == '__main__': sys.exit(main())
