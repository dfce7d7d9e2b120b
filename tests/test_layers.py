"""The floor plan holds: two stacks over a shared base, imports only look down, the kernel side never imports torch,
and calls into the engines go by reference. The layering rule itself is written in the README ("How the code is laid
out"); this test is that rule, executable."""
import ast, subprocess, sys
from pathlib import Path
from conftest import ROOT, run

# every module of ddp_nb: (side, floor). A module may import only modules on lower floors of its own side or of 'shared';
# the kernel side may also name rank-side functions (to send them by reference), never the other way round.
LAYERS = {
    'core': ('shared', 0), 'host': ('shared', 1), 'compare': ('shared', 1), 'postmortem': ('shared', 2), 'profile': ('shared', 1), 'collectives': ('shared', 3), 'compat_ipp': ('shared', 1), 'compat_torch': ('shared', 2), 'processes': ('shared', 2),
    'route': ('shared', 2),  # the cell route: the engine's end (rank side) and the notebook's (kernel side)
    'context': ('rank', 3), 'report': ('rank', 4), 'rank': ('rank', 5), 'scripts': ('rank', 6), 'timing': ('rank', 5), 'sharded': ('rank', 7), 'fabric': ('rank', 3), 'digits': ('rank', 7),
    'batch': ('rank', 6), 'horovod': ('rank', 7), 'to_script': ('kernel', 8),
    'seeding': ('rank', 4), 'stopping': ('rank', 4), 'wrap': ('rank', 4), 'loader': ('rank', 5), 'checkpoint': ('rank', 6),
    'train': ('rank', 7),  # fit; it re-exports the five parts below it
    'heal': ('rank', 6),  # a replaced rank's namespace from a survivor (`cl.restart`)
    'history': ('kernel', 5), 'plot': ('kernel', 5), 'collector': ('kernel', 6),  # the dashboard's parts (it re-exports them)
    'ranks': ('kernel', 8), 'engines': ('kernel', 8), 'outputs': ('kernel', 8), 'dashboard': ('kernel', 8), 'export': ('kernel', 8), 'group': ('kernel', 9), 'supervise': ('kernel', 9),
    'forkserver': ('kernel', 7),  # the kernel starts it; it runs engine_main in the engines it forks
    'magics': ('kernel', 10), 'launch': ('kernel', 10), 'cluster': ('kernel', 11), 'cli': ('kernel', 12),
    'kernel': ('kernel', 12),  # a Jupyter kernel driven from outside, for tests and benchmarks of notebooks: nothing imports it
}
LIGHT_RANK_SIDE = {'context', 'report', 'rank', 'scripts', 'timing'}  # rank-side modules the kernel may import at the top: no torch there
PKG = ROOT / 'ddp_nb'


def imports(path:Path, top_only:bool) -> set[str]:
    "ddp_nb modules `path` imports (at module level only, or anywhere)"
    tree, out = ast.parse(path.read_text()), set()
    nodes = tree.body if top_only else list(ast.walk(tree))
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.level == 1: out.add((n.module or '').split('.')[0] or next(a.name for a in n.names))
        elif isinstance(n, ast.ImportFrom) and (n.module or '').startswith('ddp_nb'):
            mod = n.module.split('.')[1] if '.' in n.module else None
            out |= {mod} if mod else {a.name for a in n.names if a.name in LAYERS}
        elif isinstance(n, ast.Import): out |= {a.name.split('.')[1] for a in n.names if a.name.startswith('ddp_nb.')}
    return out & set(LAYERS)


def test_every_module_has_a_place():
    mods = {p.stem for p in PKG.glob('*.py')} - {'__init__', '_modidx', '__main__'}
    assert mods == set(LAYERS), f"modules without a floor: {mods - set(LAYERS)}; floors without a module: {set(LAYERS) - mods}"


def test_imports_only_look_down():
    bad = []
    for m, (side, floor) in LAYERS.items():
        for d in imports(PKG / f'{m}.py', top_only=False):
            dside, dfloor = LAYERS[d]
            ok = dfloor < floor and (dside in ('shared', side) or (side == 'kernel' and dside == 'rank'))
            if not ok: bad.append(f"{m} ({side} {floor}) imports {d} ({dside} {dfloor})")
    assert not bad, "imports that run up or across:\n" + '\n'.join(bad)


def test_kernel_side_imports_only_light_rank_modules_at_the_top():
    heavy = {m: imports(PKG / f'{m}.py', top_only=True) & (set(k for k, (s, _) in LAYERS.items() if s == 'rank') - LIGHT_RANK_SIDE)
             for m, (side, _) in LAYERS.items() if side == 'kernel'}
    assert not any(heavy.values()), f"kernel-side modules that import torch-heavy rank modules at import time: {heavy}"


def test_no_calls_by_string_and_no_reaches_through_sys_modules():
    for p in PKG.glob('*.py'):
        text = p.read_text()
        assert "_engine('" not in text and '_engine("' not in text, f"{p.name} calls engine code by a string"
        assert "sys.modules.get('ddp_nb" not in text and 'sys.modules.get("ddp_nb' not in text, f"{p.name} reaches another module through sys.modules"


def test_the_kernel_side_never_imports_torch():
    code = ("import sys\nfrom ddp_nb import DDPCluster\nimport ddp_nb.cli, ddp_nb.launch, ddp_nb.magics, ddp_nb.supervise\n"
            "heavy = sorted(m for m in ('torch', 'sklearn', 'ipywidgets') if m in sys.modules)\nassert not heavy, heavy\nprint('light')")
    r = run([sys.executable, '-c', code], check=False, timeout=120)
    assert r.returncode == 0 and 'light' in r.stdout, r.stdout + r.stderr
