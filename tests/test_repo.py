"""The repository keeps its promises to a newcomer: CI runs the README's commands, error messages name extras and
make targets that exist, and every notebook opens in Jupyter without a kernel dialog."""
import configparser, json, re, shlex
from pathlib import Path
from conftest import ROOT


def readme_commands() -> list[str]:
    "The commands of the README's set-up block, comments dropped"
    text = (ROOT / 'README.md').read_text()
    block = re.search(r"## Set up[^\n]*\n+```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no '## Set up' section with a ```sh block"
    return [l.split('#')[0].strip() for l in block.group(1).splitlines() if l.split('#')[0].strip()]


def ci_commands() -> list[str]:
    "The commands .ci/run types, from its README_COMMANDS array"
    m = re.search(r"^README_COMMANDS=\((.*)\)$", (ROOT / '.ci' / 'run').read_text(), re.M)
    assert m, ".ci/run defines no README_COMMANDS=(...)"
    return shlex.split(m.group(1))


def test_ci_types_the_readme_commands():
    assert readme_commands() == ['make demo', 'make test']
    assert ci_commands() == readme_commands(), f"CI runs {ci_commands()}, the README shows {readme_commands()}"
    run = (ROOT / '.ci' / 'run').read_text()
    assert 'rm -rf .venv' in run.split('for cmd in')[1], "each README command must start from a fresh venv"


def extras() -> set[str]:
    "The extras setup.py declares"
    return set(re.findall(r"'(\w+)':\s*\w+_requirements", (ROOT / 'setup.py').read_text()))


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / 'Makefile').read_text(), re.M))


def test_messages_name_only_extras_and_targets_that_exist():
    texts = {p: p.read_text() for p in [*(ROOT / 'ddp_nb').glob('*.py'), ROOT / 'README.md', ROOT / 'Makefile']}
    named_extras = {(p.name, e) for p, t in texts.items() for e in re.findall(r"ddp_nb\[(\w+)\]", t)}
    named_targets = {(p.name, t_) for p, t in texts.items() for t_ in re.findall(r"`make ([\w-]+)", t)}
    assert named_extras, "expected the messages to name at least the demo extra"
    assert {e for _, e in named_extras} <= extras(), f"named but not declared in setup.py: {named_extras - {(p, e) for p, e in named_extras if e in extras()}}"
    assert {t for _, t in named_targets} <= make_targets(), f"named but not in the Makefile: {named_targets}"
    cfg = configparser.ConfigParser(); cfg.read(ROOT / 'settings.ini')
    assert 'scikit-learn' in cfg['DEFAULT']['demo_requirements']
    assert 'nvidia-ml-py' in cfg['DEFAULT']['requirements'].split()
    assert "'.[demo]'" in (ROOT / 'Makefile').read_text(), "make demo must install the demo extra"


def test_every_notebook_has_a_python3_kernelspec():
    for p in sorted((ROOT / 'nbs').glob('*.ipynb')):
        ks = json.loads(p.read_text())['metadata'].get('kernelspec', {})
        assert ks.get('name') == 'python3', f"{p.name} has no python3 kernelspec: JupyterLab would ask for a kernel"

PRIVATE_REACHES = re.compile(r"\.(_outstanding_dict|_engines|_config|_targets|_children|_really_apply|_NONINTERACTIVE|_fname|create_message_futures|iopub_callbacks"
                             r"|_get_sequence_number_for_group|_get_default_group|_world|_compress_hook|_reset_state|_execution_engine|_IS_INTERACTIVE|_MultiProcessingLauncher)\b"
                             r"|\.(_send|_query_stream|_handle_stranded_msgs|_return_exceptions)\b|'_return_exceptions'"
                             r"|\.showtraceback\s*=|\.process\s*=")

def test_private_reaches_only_in_compat():
    "Every private API of ipyparallel, IPython, torch or Accelerate that ddp_nb uses is reached through compat_ipp or compat_torch"
    found = [f"{p.name}:{i}: {l.strip()}" for p in sorted((ROOT / 'ddp_nb').glob('*.py'))
             if not p.name.startswith(('compat_', '_modidx'))
             for i, l in enumerate(p.read_text().splitlines(), 1) if PRIVATE_REACHES.search(l)]
    assert not found, "reach these through ddp_nb.compat_ipp / ddp_nb.compat_torch:\n" + '\n'.join(found)
    assert PRIVATE_REACHES.search((ROOT / 'ddp_nb' / 'compat_ipp.py').read_text())  # (the pattern finds them where they are)
    assert PRIVATE_REACHES.search((ROOT / 'ddp_nb' / 'compat_torch.py').read_text())


CHECK_LINE = re.compile(r"\b(assert|assert_close|test_eq|test_ne|test_close|test_fail)\b")

def _hidden(src:str) -> bool:
    "A `#| hide` among the cell's leading directives (after a `%%px` line, where a cell magic must come first)"
    for l in src.split('\n'):
        s = l.replace(' ', '')
        if l.startswith('%%'): continue
        if not s.startswith('#|'): return False
        if s == '#|hide': return True
    return False

def test_tutorials_show_no_walls_of_checks():
    "A tutorial's visible cells teach: checks beyond a few per cell go in a `#| hide` cell after it (nbdev_test runs it, the docs do not show it)"
    walls = []
    for p in sorted([*(ROOT / 'nbs').glob('1*.ipynb'), *(ROOT / 'nbs').glob('2*.ipynb')]):
        for i, c in enumerate(json.loads(p.read_text())['cells']):
            src = ''.join(c['source'])
            if c['cell_type'] != 'code' or _hidden(src): continue
            n = sum(bool(CHECK_LINE.search(l)) for l in src.split('\n') if not l.strip().startswith('#'))
            if n > 3: walls.append(f"{p.name} cell {i}: {n} assert/test_eq/assert_close lines")
    assert not walls, "move the checks into a `#| hide` cell right after the cell they check:\n" + '\n'.join(walls)
    assert _hidden('%%px\n#| hide\nassert x') and _hidden('#| hide\nassert x') and not _hidden('x = 1\n#| hide')
