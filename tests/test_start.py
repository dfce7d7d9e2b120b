"""A start as a user has it: in a fresh Jupyter kernel, `DDPCluster(n=2).start()` leaves torch out of the kernel (the
engines import it, each in parallel: a torch object in a reply would make the kernel import it too, ~1-2 s on its
critical path), and says where its time went, phase by phase (`cl.start_phases`)."""
from kernel import Kernel

PHASES = ['set-up', 'controller', 'engines launched', 'registration', 'engine facts', 'process group', 'dashboard',
          'records and %%px']


def test_start_in_a_kernel_imports_no_torch_and_says_where_its_time_went(no_leftovers):
    k = Kernel()
    try:
        _, out, err, _ = k.run("import sys\nfrom ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()\n"
                               "print('torch' in sys.modules, [n for n, _ in cl.start_phases.items])\nprint(cl.start_phases)",
                               timeout=240)
        assert err is None, out
        first, trace = out.splitlines()[-2:]   # (the registration's progress line comes before them)
        assert first.endswith(f"False {PHASES}"), out
        assert trace.startswith('set-up ') and ' = ' in trace, out
        _, out, err, _ = k.run("%%px\nimport torch\nt = torch.ones(1); dist.all_reduce(t); print(int(t.item()))")
        assert err is None and out.count('2') >= 2, out   # the ranks have torch and the group
        assert k.value("'torch' in sys.modules") is False   # a %%px cell does not bring it into the kernel either
    finally:
        k.close()


def test_interrupting_the_first_cell_before_it_started_cancels_it_and_keeps_the_ranks(no_leftovers):
    """Stop pressed while the first cell still waits behind the ranks' own start-up work (their records' warm-up): the
    cell is cancelled where it had not started, and no rank is ended: the same engines, their group working"""
    k = Kernel()
    try:
        _, out, err, _ = k.run("from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()\n"
                               "pids = [r.pid for r in cl.ranks]", timeout=240)
        assert err is None, out
        took, out, err, _ = k.run("%%px\nimport time\ntime.sleep(20)\nprint('slept')", timeout=60, interrupt_after=0.2)
        assert err is None and 'slept' not in out and 'ended' not in out, out
        # (cancelled on a rank still warming up; interrupted on one that had just started the cell)
        assert 'had not started the cell (it was cancelled)' in out or 'was at cell line 2' in out, out
        assert 'kept its state and the process group is healthy' in out, out
        assert took < 20, took
        assert k.value("[r.pid for r in cl.ranks] == pids and cl.check()") is True   # the same engines, a working group
    finally:
        k.close()
