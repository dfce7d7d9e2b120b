"""From notebook to batch job (#28): a notebook's %%px cells, exported with `ddp_nb to-script`, give the notebook's
weights bit for bit under torchrun and under Slurm (sbatch -> srun -> torchrun, with fake Slurm commands on PATH);
report() writes the same numbers there; Horovod-style code (`from ddp_nb import horovod as hvd`) equals DDP. The
tutorials that train (quickstart, accumulation/AMP, checkpoint/resume, FSDP), exported (with `--set` for the folder
their kernel pushes), give their notebook run's weights bit for bit; cells flagged `#| cuda`/`#| multigpu` run on GPU
ranks and are skipped, said once, on CPU ranks."""
import json, os, re, stat, sys
from pathlib import Path
import pytest
from conftest import ROOT, ours, run, shown
from ddp_nb.to_script import check_cells, kernel_values, notebook_of, read_cells, to_script

START = "from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()"


def run_notebook(path, d):
    """The notebook, run as nbdev_test runs notebooks (a kernel, %%px cells through ddp_nb's magics); RUN_AS=notebook.
    From the repository, so that its settings.ini's test flags apply: cells flagged `#| cuda` or `#| multigpu` are skipped"""
    r = run([str(Path(sys.executable).parent / 'nbdev_test'), '--path', str(path), '--n_workers', '1'], check=False, cwd=ROOT,
            timeout=300, env={**os.environ, 'RUN_AS': 'notebook'})
    assert r.returncode == 0, shown(r)
    assert ours() == [], "the notebook left cluster processes behind"
    return r


def torchrun(script, d, nproc=2, **env):
    return run([sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={nproc}', str(script)], cwd=d,
               timeout=300, env={**os.environ, 'RUN_AS': 'script', **env})


# ---- fake Slurm: sbatch reads the #SBATCH lines and runs the job here; srun checks its options and runs the command
SBATCH = r'''#!{python}
import json, os, re, subprocess, sys
path = sys.argv[-1]
opts = []
for line in open(path).read().split('\n')[1:]:
    if line.startswith('#SBATCH '): opts.append(line[8:].strip())
    elif line.strip() and not line.startswith('#'): break  # sbatch reads directives up to the first command
known = ('--job-name=', '--nodes=', '--ntasks-per-node=', '--gpus-per-node=', '--cpus-per-task=', '--output=', '--partition=', '--time=')
bad = [o for o in opts if not o.startswith(known)]
if bad: sys.exit(f"fake sbatch: unknown options {{bad}}")
o = dict(o[2:].split('=', 1) for o in opts)
json.dump(opts, open('sbatch-options.json', 'w'))
print("Submitted batch job 4242")
env = dict(os.environ, SLURM_JOB_ID='4242', SLURM_JOB_NUM_NODES=o['nodes'], SLURM_NNODES=o['nodes'],
           SLURM_JOB_NODELIST=os.uname().nodename, SLURM_CPUS_PER_TASK=o.get('cpus-per-task', '1'))
out = o['output'].replace('%x', o['job-name']).replace('%j', '4242')
with open(out, 'w') as f: sys.exit(subprocess.call(['bash', path], env=env, stdout=f, stderr=subprocess.STDOUT))
'''
SRUN = r'''#!{python}
import os, sys
args = sys.argv[1:]
opts = []
while args and args[0].startswith('-'): opts.append(args.pop(0))
open('srun-options.txt', 'w').write(' '.join(opts))
for want in (f"--nodes={{os.environ['SLURM_JOB_NUM_NODES']}}", '--ntasks-per-node=1', '--kill-on-bad-exit=1'):
    if want not in opts: sys.exit(f"fake srun: {{want}} missing from {{opts}}")
os.execvp(args[0], args)
'''
SCONTROL = r'''#!{python}
import sys
if sys.argv[1:3] != ['show', 'hostnames']: sys.exit(f"fake scontrol: {{sys.argv[1:]}}")
print('\n'.join(sys.argv[3].split(',')))
'''


def fake_slurm(d) -> dict:
    "A PATH with fake sbatch, srun and scontrol in front"
    b = Path(d) / 'bin'
    b.mkdir()
    for name, text in (('sbatch', SBATCH), ('srun', SRUN), ('scontrol', SCONTROL)):
        (b / name).write_text(text.format(python=sys.executable))
        (b / name).chmod(0o755)
    return dict(PATH=f"{b}{os.pathsep}{os.environ['PATH']}")


SMALL = [START,
         "md:## A notebook with every kind of cell",
         "%%px\nfrom ddp_nb.digits import digits_data, DigitsNet, make_loader\nimport torch.nn.functional as F\n"
         "torch.manual_seed(1)\nmodel = DDP(DigitsNet(32))\nopt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
         "loader = make_loader(digits_data(), 64, seed=1)\nlosses = []",
         "cl.dashboard()",  # a kernel cell: left out
         "%%rank 0\nprint(f'only rank {rank} of {world_size} prints this')",
         "%%px\nstep = 0\nfor epoch in range(2):\n    loader.sampler.set_epoch(epoch)\n    for x, y in loader:\n"
         "        loss = F.cross_entropy(model(x), y)\n        opt.zero_grad(); loss.backward(); opt.step()\n"
         "        report(step=step, loss=loss.detach(), epoch=epoch); losses.append(loss.item()); step += 1",
         "%%px\n#| skip-script\n%time interactive_only = True",  # IPython syntax, fine in the notebook, left out of the script
         "assert cl.run(lambda: len(losses)) == [24, 24]",  # runs code on the ranks from the kernel: noted in the script
         "%%rank 1:\nlast = losses[-1]",
         ]


HVD = '''import json, torch, torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_nb import horovod as hvd
from ddp_nb.digits import digits_data, DigitsNet, make_loader, param_digest
hvd.init()

def train(kind, epochs=2):
    torch.manual_seed(hvd.rank())  # different weights on each rank: DDP's and Horovod's broadcasts must fix that
    m = DigitsNet()
    loader = make_loader(digits_data(), 32, seed=0)
    if kind == 'ddp': model, opt = DDP(m), torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    else:
        model = m
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), named_parameters=m.named_parameters())
        hvd.broadcast_parameters(m.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad(); F.cross_entropy(model(x), y).backward(); opt.step()
    return param_digest(m)

r = hvd.rank()
print('RESULT', json.dumps(dict(ddp=train('ddp'), hvd=train('hvd'), size=hvd.size(), local=(hvd.local_rank(), hvd.local_size()),
      mean=hvd.allreduce(torch.tensor([float(r)])).item(), total=hvd.allreduce(torch.tensor([r + 1]), op=hvd.Sum).item(),
      gathered=hvd.allgather(torch.full((r + 1,), r)).tolist(), objects=hvd.allgather_object({'rank': r}),
      root=hvd.broadcast_object(f'from {r}', root_rank=1))))
hvd.shutdown()
'''



def result_cell(d, name, what="dict(digest=param_digest(model), losses=globals().get('losses'))") -> str:
    "A %%px cell that writes `what` (by default this rank's weight digest and `losses`) to d/<RUN_AS>-<name>-<rank>.json (RUN_AS: who ran it)"
    return ("%%px\nimport json, os, pathlib\nfrom ddp_nb.digits import param_digest\n"
            f"pathlib.Path(r'{d}', f\"{{os.environ['RUN_AS']}}-{name}-{{rank}}.json\").write_text(json.dumps({what}))")


def results(d, who, name) -> list:
    return [json.loads((Path(d) / f'{who}-{name}-{r}.json').read_text()) for r in (0, 1)]


def quickstart(d) -> dict:
    "The quickstart notebook with a result cell at its end"
    qs = json.loads((ROOT / 'nbs' / '10_quickstart.ipynb').read_text())
    return dict(qs, cells=qs['cells'] + notebook_of(result_cell(d, 'quickstart'))['cells'])


@pytest.fixture(scope='module')
def notebook(tmp_path_factory):
    """One notebook run on a DDPCluster, shared by the tests below (one cluster start, not three): the quickstart's %%px and
    %%rank cells, then the small notebook's cells, then the Horovod-style script through cl.run_script. Its folder."""
    d = tmp_path_factory.mktemp('notebook')
    assert ours() == [], "processes from an earlier test are still running"
    qs = [''.join(c['source']) for c in quickstart(d)['cells'] if c['cell_type'] == 'code']
    qs = [c for c in qs if read_cells(notebook_of(c))[0].kind in ('px', 'rank')]
    assert len(qs) == 5, "the quickstart's %%px and %%rank cells, and the result cell"
    (d / 'hvd_train.py').write_text(HVD)
    hvd = (f"outs = cl.run_script(r'{d / 'hvd_train.py'}', timeout=240)\n"
           "assert all(o['exit_code'] == 0 for o in outs), outs\n"
           "assert cl.view['dist.get_world_size()'] == [2, 2]  # the cluster's group is back\n"
           f"import json; open(r'{d / 'hvd.json'}', 'w').write(json.dumps([o['stdout'] for o in outs]))")
    (d / 'all.ipynb').write_text(json.dumps(notebook_of(START, *qs, *SMALL[1:], result_cell(d, 'small'), hvd, "cl.stop()")))
    run_notebook(d / 'all.ipynb', d)
    return d


def test_quickstart_as_a_slurm_job_is_bit_identical(notebook, tmp_path):
    "The quickstart's cells on a DDPCluster, and the quickstart exported and submitted with (fake) sbatch: same weights, same losses"
    (tmp_path / 'quickstart.ipynb').write_text(json.dumps(quickstart(notebook)))  # the whole notebook, kernel cells too
    res = to_script(tmp_path / 'quickstart.ipynb', tmp_path / 'train.py', slurm=True, gpus_per_node=0, procs_per_node=2, cpus_per_node=2)
    r = run(['sbatch', res['sbatch']], cwd=tmp_path, timeout=300, check=False, env={**os.environ, **fake_slurm(tmp_path), 'RUN_AS': 'script'})
    log = (tmp_path / 'train-4242.out').read_text() if (tmp_path / 'train-4242.out').exists() else ''
    assert r.returncode == 0, shown(r) + '\n--- job output ---\n' + log
    assert json.loads((tmp_path / 'sbatch-options.json').read_text())[:3] == ['--job-name=train', '--nodes=1', '--ntasks-per-node=1']
    assert '--cpus-per-task=2' in (tmp_path / 'srun-options.txt').read_text()
    nbr, scr = results(notebook, 'notebook', 'quickstart'), results(notebook, 'script', 'quickstart')
    assert nbr[0]['digest'] == nbr[1]['digest'] == scr[0]['digest'] == scr[1]['digest'], (nbr, scr)
    assert nbr[0]['losses'] == scr[0]['losses'] and len(scr[0]['losses']) == 60
    assert log.count('test accuracy on rank 0') == 1, log  # the %%rank 0 cell, on rank 0 only
    assert re.search(r"\[rank 0\] epoch 59 step 1439/1440 loss \S+", log), log  # report() on stdout: its last line


def test_rank_kernel_skip_and_report_cells_under_torchrun(notebook, tmp_path):
    "A notebook with %%rank, kernel-only and skip-script cells and report(): same weights and losses under torchrun, report() in JSON Lines"
    (tmp_path / 'small.ipynb').write_text(json.dumps(notebook_of(*SMALL, result_cell(notebook, 'small'), "cl.stop()")))
    res = to_script(tmp_path / 'small.ipynb')
    assert res['cells'] == dict(px=[3, 6, 10], rank=[5, 9], kernel=[1, 4, 8, 11], skip=[7]), res['cells']
    text = Path(res['script']).read_text()
    assert "if rank == 0:\n    print(" in text and "if rank in range(world_size)[1:]:\n    last = losses[-1]" in text
    assert "# %% cell 7 (tagged skip-script, left out)" in text and "it ran code on the ranks (cl.run)" in text
    r = torchrun(res['script'], tmp_path, DDP_NB_REPORT=f'jsonl={tmp_path}/logs')
    assert r.stdout.count('only rank 0 of 2 prints this') == 1, shown(r)
    nbr, scr = results(notebook, 'notebook', 'small'), results(notebook, 'script', 'small')
    assert nbr[0]['digest'] == nbr[1]['digest'] == scr[0]['digest'] == scr[1]['digest'], (nbr, scr)
    assert nbr == scr  # every rank's every loss, bit for bit
    for rank in (0, 1):
        recs = [json.loads(l) for l in (tmp_path / 'logs' / f'rank{rank}.jsonl').read_text().splitlines()]
        assert [x['step'] for x in recs] == list(range(24)) and {x['rank'] for x in recs} == {rank}
        assert [x['loss'] for x in recs] == scr[rank]['losses']  # what report() got is what the rank computed


def test_horovod_code_equals_ddp_in_run_script(notebook):
    "Horovod-style training (one changed import), run with cl.run_script on the live cluster: the weights DDP gives, bit for bit (world 2, SGD)"
    outs = json.loads((notebook / 'hvd.json').read_text())
    res = [json.loads(next(l for l in o.splitlines() if l.startswith('RESULT'))[7:]) for o in outs]
    assert res[0]['ddp'] == res[1]['ddp'] == res[0]['hvd'] == res[1]['hvd'], res
    for r, x in enumerate(res):
        assert (x['size'], x['local'], x['mean'], x['total']) == (2, [r, 2], 0.5, 3)
        assert (x['gathered'], x['objects'], x['root']) == ([0, 1, 1], [{'rank': 0}, {'rank': 1}], 'from 1')


def test_cli_writes_the_script_and_names_kernel_values(tmp_path, ddp_nb_bin):
    "ddp_nb to-script and python -m ddp_nb to-script: the files, or exit status 1 naming the cell that reads a pushed value"
    (tmp_path / 'nb.ipynb').write_text(json.dumps(notebook_of(*SMALL)))
    r = run([ddp_nb_bin, 'to-script', 'nb.ipynb', '-o', 'job.py', '--slurm', '--nodes', '2', '--gpus-per-node', '4'], cwd=tmp_path)
    assert 'Wrote job.py: 2 cell(s) for every rank, 2 for some ranks' in r.stdout, shown(r)
    sb = (tmp_path / 'job.sbatch').read_text()
    assert '#SBATCH --nodes=2' in sb and '#SBATCH --gpus-per-node=4' in sb and '--nproc-per-node=4' in sb
    run(['bash', '-n', 'job.sbatch'], cwd=tmp_path)
    compile((tmp_path / 'job.py').read_text(), 'job.py', 'exec')
    (tmp_path / 'bad.ipynb').write_text(json.dumps(notebook_of(START, "cl.push(lr=0.01)", "%%px\nopt = torch.optim.SGD([torch.zeros(1)], lr=lr)")))
    r = run([sys.executable, '-m', 'ddp_nb', 'to-script', 'bad.ipynb'], cwd=tmp_path, check=False)
    assert r.returncode == 1 and 'cell 3 (%%px: opt = torch.optim.SGD' in r.stderr and 'reads `lr`' in r.stderr, shown(r)
    assert '`lr` (pushed in cell 2, read in cell 3). Give each a plain value with --set NAME=VALUE' in r.stderr, shown(r)
    assert not (tmp_path / 'bad.py').exists()
    r = run([ddp_nb_bin, 'to-script', 'bad.ipynb', '--set', 'rl=0.01'], cwd=tmp_path, check=False)
    assert r.returncode == 1 and 'takes no value `rl` from the kernel: it takes `lr` (pushed in cell 2' in r.stderr, shown(r)
    run([ddp_nb_bin, 'to-script', 'bad.ipynb', '--set', 'lr=0.01'], cwd=tmp_path)
    assert "\nlr = 0.01\n" in (tmp_path / 'bad.py').read_text()


@pytest.mark.parametrize('name,taken', [('13_accumulation_amp', set()), ('16_checkpoint_resume', {'work'}), ('22_fsdp', {'work'})])
def test_training_tutorials_export_or_name_what_they_take_from_the_kernel(name, taken):
    "The tutorials that train: accumulation/AMP exports as it is; checkpoint/resume and FSDP read `work`, a folder the kernel pushed, and are told so; given it, nothing would run differently"
    cells = read_cells(ROOT / 'nbs' / f'{name}.ipynb')
    named = {m for ps in check_cells(cells).values() for p in ps for m in re.findall(r"reads `(\w+)`, which no exported cell defines \(the kernel pushed it", p)}
    assert named == taken == set(kernel_values(cells)), check_cells(cells)
    assert check_cells(cells, given=taken) == {}


# ---- the tutorials that train: the notebook run (nbdev_test) against its export under torchrun, bit for bit

def tutorial(name, d, what) -> Path:
    "The tutorial, with a result cell that writes `what` on every rank just before its last cell (which stops the cluster), saved in d"
    nb = json.loads((ROOT / 'nbs' / f'{name}.ipynb').read_text())
    assert 'cl.stop()' in ''.join(nb['cells'][-1]['source']), "the tutorial's last cell should stop the cluster"
    nb['cells'].insert(len(nb['cells']) - 1, notebook_of(result_cell(d, name, what))['cells'][0])
    (d / f'{name}.ipynb').write_text(json.dumps(nb))
    return d / f'{name}.ipynb'


def notebook_and_script(name, d, what, ddp_nb_bin, *args) -> tuple:
    "The tutorial run as a notebook, then exported with `ddp_nb to-script ... args` and run under torchrun (2 CPU ranks): (notebook's results, script's results, torchrun's stdout)"
    path = tutorial(name, d, what)
    run_notebook(path, d)
    r = run([ddp_nb_bin, 'to-script', str(path), '-o', 'train.py', *args], cwd=d)
    r = torchrun(d / 'train.py', d, DDP_NB_REPORT='none')
    return results(d, 'notebook', name), results(d, 'script', name), r.stdout


def test_accumulation_amp_tutorial_as_a_script_is_bit_identical(tmp_path, ddp_nb_bin):
    """13_accumulation_amp, all its %%px cells: the weights of the model trained with accum=4 (each rank's digest), that
    fit's losses, and the per-epoch losses of every train() run (fp32, bf16 autocast, fp16/bf16/PowerSGD compression):
    the notebook's and the script's, equal bit for bit. Its `#| cuda` cell (fp16 + GradScaler) is skipped in both here:
    by nbdev_test's flags in the notebook, by `ddp_nb.batch.gpu_cell` in the script, which says so once."""
    nbr, scr, out = notebook_and_script('13_accumulation_amp', tmp_path, "dict(model=param_digest(model), fit=r, fp32=fp32, bf16=bf16, compressed=compressed)", ddp_nb_bin)
    assert nbr == scr, (nbr, scr)
    assert nbr[0] == nbr[1] and nbr[0]['fit']['step'] == 12 and len(nbr[0]['compressed']) == 4   # DDP: every rank the same
    assert out.count('cell 19 (#| cuda) skipped: the ranks have no GPU (device cpu)') == 1, out


@pytest.mark.slow
def test_checkpoint_resume_tutorial_as_a_script_is_bit_identical(tmp_path, ddp_nb_bin):
    """16_checkpoint_resume kills its ranks on purpose, so its flow is no script: what exports is its one %%px cell,
    `resumed = run(work + '/crashed')`, with the `run` and `slow_loss` the kernel pushed (carried into the script) and
    `work` given with --set. In the notebook that call resumed from the checkpoint the killed run left; in the script,
    with an empty folder, it trains all 72 steps uninterrupted. Compared: each rank's weight digest, the per-epoch
    losses and the step count, equal bit for bit (the notebook itself asserts that its resumed run equals its
    uninterrupted reference, so this checks the script against both)."""
    (tmp_path / 'work').mkdir()
    nbr, scr, _ = notebook_and_script('16_checkpoint_resume', tmp_path, "resumed", ddp_nb_bin, '--set', f"work={tmp_path / 'work'}")
    assert all(x['resumed_from'] >= 20 for x in nbr) and all(x['resumed_from'] is None for x in scr), (nbr, scr)
    for x in nbr + scr: del x['resumed_from']
    assert nbr == scr and nbr[0] == nbr[1] and nbr[0]['step'] == 72, (nbr, scr)
    assert (tmp_path / 'work' / 'crashed').is_dir()   # the script's checkpoints went where --set said


@pytest.mark.slow
def test_fsdp_tutorial_as_a_script_is_bit_identical(tmp_path, ddp_nb_bin):
    """22_fsdp, all its %%px cells, `work` given with --set (a fresh folder: the notebook's was fresh too). Compared, per
    rank: the digest of the rank's own shards of the model trained 3 then 4 epochs (through a sharded checkpoint), of
    the model of the sharded save/resume section and of the one loaded from a DDP checkpoint; those runs' losses and
    steps; the test accuracies. Equal bit for bit between notebook and script; the shards differ between ranks."""
    (tmp_path / 'work').mkdir()
    what = ("dict(model=param_digest(model), m=param_digest(m), m2=param_digest(m2), r=r, r4=r4, r5=r5, acc=acc, "
            "acc_sharded=acc_sharded, from_ddp=from_ddp, identical=identical, same=same)")
    nbr, scr, _ = notebook_and_script('22_fsdp', tmp_path, what, ddp_nb_bin, '--set', f"work={tmp_path / 'work'}")
    assert nbr == scr, (nbr, scr)
    assert nbr[0]['model'] != nbr[1]['model'] and nbr[0]['r'] == nbr[1]['r'] and nbr[0]['identical'] and nbr[0]['same']


# ---- cells flagged for GPUs

GPU_NB = [START,
          "%%px\nx = 1",
          "%%px\n#| cuda\nt = torch.ones(1, device=device); dist.all_reduce(t)\nx = int(t.item())\nprint(f'cuda cell ran on rank {rank} ({device})')",
          "%%rank 0\n#| multigpu\nprint(f'multigpu cell ran on {world_size} GPU ranks')",
          "%%px\nprint(f'after them: x = {x} on rank {rank}')"]


def gpu_notebook_script(d, nproc, **env) -> str:
    "GPU_NB exported and run under torchrun: its stdout"
    (d / 'gpu.ipynb').write_text(json.dumps(notebook_of(*GPU_NB)))
    res = to_script(d / 'gpu.ipynb')
    assert res['gpu'] == {3: 'cuda', 4: 'multigpu'} and res['cells']['px'] == [2, 3, 5]
    return torchrun(res['script'], d, nproc=nproc, DDP_NB_REPORT='none', **env).stdout


def test_gpu_flagged_cells_are_skipped_on_cpu_ranks(tmp_path):
    "`#| cuda` and `#| multigpu` cells (nbdev's flags), exported and run on 2 CPU ranks: skipped, rank 0 says so once each, the cells after them run"
    out = gpu_notebook_script(tmp_path, 2, CUDA_VISIBLE_DEVICES='')
    assert out.count('cell 3 (#| cuda) skipped: the ranks have no GPU (device cpu)') == 1, out
    assert out.count('cell 4 (#| multigpu) skipped: the ranks have no GPU (device cpu)') == 1, out
    assert 'cell ran' not in out and [out.count(f'after them: x = 1 on rank {r}') for r in (0, 1)] == [1, 1], out


@pytest.mark.gpu
def test_gpu_flagged_cells_run_on_gpu_ranks(tmp_path):
    "The same script on GPU ranks (one per GPU, two at most): the `#| cuda` cell runs on every rank; `#| multigpu` where there are two"
    import torch
    n = min(torch.cuda.device_count(), 2)
    if n == 0: pytest.skip("no CUDA GPU visible: run the GPU suite on a GPU machine with `make test-gpu`")
    out = gpu_notebook_script(tmp_path, n)
    assert [out.count(f'cuda cell ran on rank {r} (cuda:{r})') for r in range(n)] == [1] * n, out
    assert [out.count(f'after them: x = {n} on rank {r}') for r in range(n)] == [1] * n, out
    assert out.count(f'multigpu cell ran on {n} GPU ranks') == (n == 2), out
    assert ('cell 4 (#| multigpu) skipped: it needs two or more GPU ranks, this world has 1' in out) == (n == 1), out
