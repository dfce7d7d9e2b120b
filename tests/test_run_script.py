"`cl.run_script` runs an unchanged torchrun script: bit-identical to torchrun, the cluster usable afterwards, failures named"
import json, os, sys
import pytest
from conftest import ROOT, run
from ddp_nb import DDPCluster
from ddp_nb.launch import ScriptError

EXAMPLE = ROOT / 'examples' / 'train_digits.py'
ARGS = ['--epochs', '3', '--lr', '0.05', '--batch-size', '16', '--seed', '7']


def _env(cl):
    "Every rank's environment, but the cluster's port (a new one after each group)"
    return cl.view['{k: v for k, v in __import__("os").environ.items() if k != "MASTER_PORT"}']


def _group_works(cl):
    cl.view.execute("t = torch.ones(1); dist.all_reduce(t)")
    return cl.view['t.item()'] == [2.0, 2.0] and cl.view['rank'] == [0, 1]


def test_run_script(tmp_path, capsys, no_leftovers):
    ours = tmp_path / 'ours.json'
    with DDPCluster(n=2) as cl:
        threads = cl.view['torch.get_num_threads()']
        env = _env(cl)
        res = cl.run_script(EXAMPLE, *ARGS, '--out', ours)
        assert [r['exit_code'] for r in res] == [0, 0]
        assert _group_works(cl), "the cluster's own group must be back"
        assert _env(cl) == env, "the script's environment must not stay"
        assert cl.view['torch.get_num_threads()'] == threads
        echoed = capsys.readouterr().out
        assert '[rank 0] epoch 3/3' in echoed, echoed

        bad = tmp_path / 'bad.py'  # rank 1 raises while rank 0 waits in an all-reduce
        bad.write_text("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                       "if dist.get_rank() == 1: raise ValueError('rank one broke')\ndist.all_reduce(torch.ones(1))\n")
        with pytest.raises(ScriptError, match=r'rank 1 failed first') as e:
            cl.run_script(bad, timeout=120)
        assert 'ValueError: rank one broke' in str(e.value) and 'bad.py", line 3' in str(e.value)
        assert _group_works(cl)

        early = tmp_path / 'early.py'  # rank 1 fails before it joins: rank 0 waits in the rendezvous
        early.write_text("import os, sys, torch.distributed as dist\nif os.environ['RANK'] == '1': sys.exit(4)\n"
                         "dist.init_process_group('gloo')\ndist.barrier()\n")
        with pytest.raises(ScriptError, match=r'rank 1 failed first') as e:
            cl.run_script(early, timeout=120)
        assert {r['rank']: r['exit_code'] for r in e.value.results}[1] == 4
        assert _group_works(cl)

        messy = tmp_path / 'messy.py'  # changes the process and exits 0 without destroying its group
        messy.write_text("import os, sys, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                         "os.environ['LEFT_BEHIND'] = '1'; os.chdir('/'); sys.argv.append('x'); sys.exit(0)\n")
        cwd = cl.view['__import__("os").getcwd()']
        assert [r['exit_code'] for r in cl.run_script(messy)] == [0, 0]
        assert cl.view['__import__("os").environ.get("LEFT_BEHIND")'] == [None, None]
        assert cl.view['__import__("os").getcwd()'] == cwd
        assert _group_works(cl)

        with pytest.raises(FileNotFoundError, match='No script at'): cl.run_script(tmp_path / 'missing.py')
    with pytest.raises(RuntimeError, match=r'call cl.start\(\)'): cl.run_script(EXAMPLE)

    ref = tmp_path / 'torchrun.json'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', str(EXAMPLE), *ARGS, '--out', str(ref)]
    run(cmd, timeout=300, env={**os.environ, 'OMP_NUM_THREADS': str(threads[0])})
    a, b = json.loads(ours.read_text()), json.loads(ref.read_text())
    assert a['losses'] == b['losses'], (a['losses'], b['losses'])  # exactly equal floats: bit-identical
    assert a['digest'] == b['digest'], "weights differ from torchrun's"
    assert a['threads'] == b['threads'] == threads[0]
    assert a['losses'][-1] < a['losses'][0]
