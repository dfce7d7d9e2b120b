"ddp_nb's ranks and torchrun's workers, same code and seeds: bit-identical results"
import json, os, sys
import ipyparallel as ipp
from conftest import run
from ddp_nb import DDPCluster


@ipp.interactive  # defined in a test module, which the engines cannot import
def _train(epochs, lr, batch_size, seed):
    from ddp_nb.digits import train
    return train(epochs, lr, batch_size, seed)


def test_bit_identical_to_torchrun(tmp_path, ddp_nb_bin, no_leftovers):
    args = dict(epochs=3, lr=0.05, batch_size=16, seed=7)
    with DDPCluster(n=2) as cl:
        threads = cl.view['torch.get_num_threads()']
        ours = cl.run(_train, *args.values())
    assert ours[0]['digest'] == ours[1]['digest'], "ranks disagree"
    out = tmp_path / 'torchrun.json'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', '--no-python', ddp_nb_bin,
           'train-digits', '--epochs', '3', '--lr', '0.05', '--batch-size', '16', '--seed', '7', '--out', str(out)]
    run(cmd, timeout=300, env={**os.environ, 'OMP_NUM_THREADS': str(threads[0])})
    ref = json.loads(out.read_text())
    assert ref['losses'] == ours[0]['losses']
    assert ref['digest'] == ours[0]['digest']
    assert ref['losses'][-1] < ref['losses'][0]
