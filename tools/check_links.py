"""Check every internal link of a built HTML site: the page (or file) it points to exists, and so does its #anchor.

External links (with a scheme, or starting with //) are not checked: there is no internet here.
`python tools/check_links.py _site` prints each broken link as `page: href (why)` and exits 1 if there is one."""
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    "The ids (anchors) a page defines and the links (href, src) it makes"
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ('id', 'name') if tag == 'a' else ('id',):
            if a.get(k): self.ids.add(a[k])
        for k in ('href', 'src'):
            if a.get(k) is not None and not (tag == 'link' and a.get('rel') in ('canonical',)): self.links.append(a[k])


def parse(path: Path) -> Page:
    "The parsed page at `path`"
    p = Page(); p.feed(path.read_text(encoding='utf-8', errors='replace')); p.close()
    return p


def is_external(href: str) -> bool:
    "A link that leaves the site: a scheme (http:, mailto:, data:, ...) or a network path"
    u = urlsplit(href)
    return bool(u.scheme) or href.startswith('//')


def target(page: Path, href: str, root: Path):
    "The file and anchor an internal `href` on `page` points to"
    u = urlsplit(href)
    path = (page.parent/unquote(u.path)).resolve() if u.path else page
    if path.is_dir(): path = path/'index.html'
    return path, unquote(u.fragment)


def check_site(root) -> list:
    "Every broken internal link under `root`, as 'page: href (why)'"
    root = Path(root).resolve()
    pages = {p: parse(p) for p in sorted(root.rglob('*.html'))}
    broken = []
    for page, parsed in pages.items():
        for href in parsed.links:
            if is_external(href) or not href: continue
            path, anchor = target(page, href, root)
            why = None
            if not path.exists(): why = 'no such file'
            elif root not in path.parents: why = 'outside the site'
            elif anchor and path.suffix == '.html' and anchor not in pages[path].ids: why = f'no anchor #{anchor}'
            if why: broken.append(f'{page.relative_to(root)}: {href} ({why})')
    return broken


if __name__ == '__main__':
    bad = check_site(sys.argv[1] if len(sys.argv) > 1 else '_site')
    for b in bad: print(b)
    print(f'{len(bad)} broken internal links')
    sys.exit(1 if bad else 0)
