"""A start as a user has it: in a fresh Jupyter kernel, `DDPCluster(n=2).start()` leaves torch out of the kernel (the
engines import it, each in parallel: a torch object in a reply would make the kernel import it too, ~1-2 s on its
critical path), and says where its time went, phase by phase (`cl.start_phases`)."""
from kernel import Kernel

PHASES = ['set-up', 'controller', 'client imports', 'engines launched', 'registration', 'engine facts', 'dashboard', 'process group', 'cell route', '%%px']


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
        # the registration bar, a widget that hides itself, leaves no stale count in what the notebook keeps
        assert 'Engines registered' not in k.shown(), k.shown()
        _, out, err, _ = k.run("%%px\nimport torch\nt = torch.ones(1); dist.all_reduce(t); print(int(t.item()))")
        assert err is None and out.count('2') >= 2, out   # the ranks have torch and the group
        assert k.value("'torch' in sys.modules") is False   # a %%px cell does not bring it into the kernel either
        # each engine's output file holds what went wrong, not a log line per cell, and no torch deprecation warning
        # of ddp_nb's making (read afresh: `launcher_output` is ipyparallel's first read of it, kept)
        k.ok("from ddp_nb.compat_ipp import engine_launchers")
        logs = "[open(l.output_file).read() for l in engine_launchers(cl._ipp)]"
        before = k.value(logs)
        for _ in range(20): assert k.run("%%px\nx = 1").error is None
        after = k.value(logs)
        assert len(after) == 2 and after == before, after
        assert not any('Handling execute_request' in o or 'TORCH_NCCL_TRACE_BUFFER_SIZE' in o for o in after), after
        # the ranks started without ipyparallel's client and cluster (`compat_ipp.lazy_package`); a cell that uses the
        # package has all of it
        _, out, err, _ = k.run("%%px\nimport sys\nprint('client', 'ipyparallel.client.client' in sys.modules)\n"
                               "import ipyparallel\nfrom ipyparallel import Reference\nprint(ipyparallel.__version__ == "
                               "__import__('importlib.metadata').metadata.version('ipyparallel'), callable(ipyparallel.bind_kernel))")
        assert err is None and out.count('client False') == 2 and out.count('True True') == 2, out
    finally:
        k.close()



def test_stop_pressed_while_a_cell_waits_behind_the_engines_own_work_cancels_it_and_ends_no_rank(no_leftovers):
    """The stop button while the cell has not started on rank 1 (its engine's main thread is busy with work of its
    own, outside any request: here a 6-s callback on its event loop, run as soon as the request before it ended): rank 0 is interrupted in the cell, rank 1's copy
    is cancelled before it starts (a signal would have missed it, and the rank would have been ended as stuck)"""
    k = Kernel()
    try:
        _, out, err, _ = k.run("from ddp_nb import DDPCluster\ncl = DDPCluster(n=2).start()\n"
                               "pids = [r.pid for r in cl.ranks]", timeout=240)
        assert err is None, out
        k.ok("cl.run('import asyncio, time; asyncio.get_running_loop().call_soon(time.sleep, 6)', ranks=[1])")
        took, out, err, _ = k.run("%%px\nimport time\ntime.sleep(20)\nprint('slept')", timeout=60, interrupt_after=1)
        assert err is None and 'slept' not in out and 'ended' not in out, out
        assert ('interrupted: rank 0 was at cell line 2: time.sleep(20); rank 1 had not started the cell (it was '
                'cancelled) — every rank kept its state and the process group is healthy') in out, out
        assert took < 15, took   # rank 1 answers the abort once its 6 s of own work end
        assert k.value("[r.pid for r in cl.ranks] == pids and cl.check()") is True   # the same engines, a working group
    finally:
        k.close()
