"""The documentation site (`make docs`, tools/make_docs.py): every notebook a page, show_doc's signatures and docments
rendered, hidden cells and `#|` lines gone, no broken internal link or anchor, no script but the theme's, the tree
left as it was. One build (45-65 s on 2 shared cores) into a temporary folder, shared by the tests here."""
import json, re, subprocess, sys
from html import unescape
from pathlib import Path
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / 'tools'))
import check_links, make_docs  # noqa: E402  (the build itself runs in its own process: it imports every module)

NBS = sorted((ROOT / 'nbs').glob('*.ipynb'))
pytestmark = pytest.mark.filterwarnings('ignore::DeprecationWarning', 'ignore::PendingDeprecationWarning')


def git_status() -> str:
    "The repository's `git status --porcelain`, or '' outside a checkout"
    r = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=all'], cwd=ROOT, capture_output=True,
                       text=True)
    return r.stdout if r.returncode == 0 else ''


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    "(build folder, what it printed, git status before, after): tools/make_docs.py as `make docs` runs it, apart"
    pytest.importorskip('myst_nb', reason="the docs extra is not installed: pip install -e '.[docs]'")
    work, before = tmp_path_factory.mktemp('docs'), git_status()
    r = subprocess.run([sys.executable, str(ROOT / 'tools' / 'make_docs.py'), '--dir', str(work)], cwd=ROOT,
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, f'make_docs.py failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    return work, r.stdout + r.stderr, before, git_status()


def text(page: Path) -> str:
    "A page's text, tags removed"
    return unescape(re.sub(r'<[^>]+>', '', page.read_text()))


def test_every_notebook_has_a_page_in_notebook_order(site):
    html = site[0] / 'html'
    assert not [p.name for p in NBS if not (html / f'{p.stem}.html').exists()]
    captions = [c for c, _ in make_docs.groups()]
    assert captions == ['Library reference', 'Guide', 'Tutorials']
    nav = re.findall(r'<a class="reference internal" href="(\w+)\.html">', (html / 'index.html').read_text())
    order = [p.stem for _, nbs in make_docs.groups() for p in nbs]
    assert sorted(order) == sorted(p.stem for p in NBS if p.name != 'index.ipynb'), 'a notebook is in no section of the site'
    assert [n for n in dict.fromkeys(nav) if n in order] == order, 'the navigation is not in notebook order'


def test_show_doc_renders_signatures_and_docments(site):
    work, printed, _, _ = site
    assert 'show_doc failed' not in printed and ' 0 failed show_doc' in printed, printed[-3000:]
    page = work / 'html' / '02g_cluster.html'
    assert 'id="ddpcluster-start"' in page.read_text()
    t = text(page)
    assert 'def start()->DDPCluster:' in t and 'Start the engines, map them to ranks' in t
    core = text(work / 'html' / '00_core.html')
    assert 'def pick_backend(' in core and "# GPUs visible to each engine" in core, 'docments missing'


def test_hidden_cells_and_directives_stay_out(site):
    src = site[0] / 'src'
    for p in NBS:
        hidden = {''.join(l for l in c['source'] if not l.startswith('#|')).strip()
                  for c in json.loads(p.read_text())['cells'] if any(l.strip() == '#| hide' for l in c['source'])}
        shown = json.loads((src / p.name).read_text())['cells']
        code = [''.join(c['source']) for c in shown if c['cell_type'] == 'code']
        assert not [c for c in code if c.strip() and c.strip() in hidden - {''}], f'{p.name}: a #| hide cell is shown'
        assert not [c for c in code if re.search(r'^\s*#\|', c, re.M)], f'{p.name}: a #| line is shown'
        assert all(not c.get('outputs') for c in shown if c['cell_type'] == 'code'), f'{p.name}: outputs'


def test_no_broken_internal_links(site):
    html = site[0] / 'html'
    assert check_links.check_site(html) == []
    index = (html / 'index.html').read_text()
    for href in ['09_guide.html#the-dashboard', '10_quickstart.html', '09_guide.html#where-a-change-goes']:
        assert f'href="{href}"' in index, f'index.html does not link to {href}'


def test_no_script_but_the_themes(site):
    "Our pages load no remote script, and every inline one is the theme's (notebook outputs are not stored)"
    for page in (site[0] / 'html').rglob('*.html'):
        for attrs, body in re.findall(r'<script([^>]*)>(.*?)</script>', page.read_text(), re.S):
            src = re.search(r'src="([^"]*)"', attrs)
            if src: assert src.group(1).startswith('_static/') or src.group(1) == 'searchindex.js', src.group(1)
            else: assert 'document.body.dataset.theme' in body or not body.strip(), f'{page.name}: {body[:80]!r}'


def test_the_build_leaves_the_tree_as_it_was(site):
    _, _, before, after = site
    assert after == before
    assert not (ROOT / '_proc').exists()


def test_links_are_fixed_for_the_site():
    nbs = ROOT / 'nbs'
    assert make_docs.fix_link('nbs/09_guide.ipynb#the-dashboard', ROOT) == '09_guide.ipynb#the-dashboard'
    assert make_docs.fix_link('10_quickstart.ipynb', nbs) == '10_quickstart.ipynb'
    assert make_docs.fix_link('../benchmarks/results.md#x', nbs).endswith('/blob/main/benchmarks/results.md#x')
    assert make_docs.fix_link('https://example.org/a.ipynb', nbs) == 'https://example.org/a.ipynb'
    md = 'see `[a](nbs/b.ipynb)` and [a](nbs/b.ipynb)'
    assert make_docs.fix_links(md, ROOT) == 'see `[a](nbs/b.ipynb)` and [a](b.ipynb)'


def test_the_link_checker_names_what_is_broken(tmp_path):
    (tmp_path / 'a.html').write_text('<h1 id="top">A</h1><a href="b.html#nope">x</a><a href="#top">y</a>'
                                     '<a href="c.html">z</a><a href="https://example.org/">w</a>')
    (tmp_path / 'b.html').write_text('<h1 id="here">B</h1><a href="a.html#top">back</a>')
    broken = ['a.html: b.html#nope (no anchor #nope)', 'a.html: c.html (no such file)']
    assert check_links.check_site(tmp_path) == broken


def test_show_doc_markdown_is_cleaned_for_the_site():
    from nbdev.showdoc import show_doc
    import ddp_nb.core as core
    md = make_docs.render_show_doc('show_doc(pick_backend)', {**vars(core), 'show_doc': show_doc})
    assert md.startswith('### pick_backend\n\n[source](') and 'def pick_backend(' in md
    assert '{target=' not in md and '#LNone' not in md and not md.startswith('---')
    assert make_docs.escape_html('a <b> `<c>`\n```\n<d>\n```') == 'a &lt;b> `<c>`\n```\n<d>\n```'
