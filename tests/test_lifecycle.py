"Start, stop and failure paths of DDPCluster, counted in processes (and the test process's threads and descriptors)"
import logging, os, signal, threading, time
from collections import Counter
import psutil, pytest, zmq
from ddp_nb import DDPCluster
from ddp_nb.processes import cluster_procs


NOT_ASKED = 'not every engine (or the hub) said it exits'


def kept() -> tuple:
    "This process's threads (by name) and open file descriptors"
    zmq.Context.instance().socket(zmq.PUB).close()  # (zmq's shared context and its I/O thread live as long as the process)
    return sorted(t.name for t in threading.enumerate()), len(os.listdir('/proc/self/fd'))


def added(before: tuple, now: tuple) -> tuple:
    "What `now` has that `before` had not: (thread names, more descriptors); a thread of an earlier test may end meanwhile"
    return sorted((Counter(now[0]) - Counter(before[0])).elements()), now[1] - before[1]


def back_to(before: tuple, limit: float = 10) -> tuple:
    "What `kept()` has that `before` had not, once nothing (threads, or over 1 descriptor), or after `limit` s"
    # (zmq closes a closed socket's descriptor in its I/O thread, a moment later)
    deadline = time.monotonic() + limit
    while True:
        more = added(before, kept())
        if (not more[0] and more[1] <= 1) or time.monotonic() > deadline: return more
        time.sleep(0.1)


def test_stop_leaves_no_process(no_leftovers):
    threads, fds = kept()
    cl = DDPCluster(n=2).start()
    procs = cluster_procs(cl.cluster_id)
    # controller (+ its schedulers), 2 engines, 2 nannies
    assert len(procs) >= 5, [p.cmdline() for p in procs]
    engine_pids = [r.pid for r in cl.ranks]
    assert all(psutil.pid_exists(p) for p in engine_pids)
    # local engines start warm: torch is imported while they register (ddp_nb.processes)
    assert all('ddp_nb.processes import engine_main' in ' '.join(psutil.Process(p).cmdline()) for p in engine_pids)
    cl.stop()
    assert cluster_procs(cl.cluster_id) == []
    assert not any(psutil.pid_exists(p) for p in engine_pids)
    more = back_to((threads, fds))
    assert not more[0] and more[1] <= 1, f"the stop left threads {more[0]} and {more[1]} more descriptors"
    cl.stop()  # a second stop is a no-op


def test_with_block_that_raises_leaves_no_process(no_leftovers):
    with pytest.raises(ZeroDivisionError):
        with DDPCluster(n=2) as cl:
            cid = cl.cluster_id
            assert len(cluster_procs(cid)) >= 5
            1 / 0
    assert cluster_procs(cid) == []
    with pytest.raises(RuntimeError, match='was stopped'):
        cl.view
    assert cl.history.records() == []   # the history outlives the cluster (empty: nothing was reported)


def test_cell_error_on_one_rank_names_it(no_leftovers):
    import ipyparallel as ipp
    with DDPCluster(n=2) as cl:
        with pytest.raises(ipp.error.CompositeError) as e:
            cl.view.execute("if rank == 1: raise ValueError('bad batch on rank 1')")
        assert 'bad batch on rank 1' in str(e.value)
        # the ranks and their group are still usable afterwards
        assert cl.view['dist.get_world_size()'] == [2, 2]


def test_stopped_rank_is_named_within_timeout(no_leftovers):
    with DDPCluster(n=2, timeout=3) as cl:
        pid1 = cl.ranks[1].pid
        os.kill(pid1, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(RuntimeError, match=r'rank 1 did not answer'):
                cl.reform()
            assert time.monotonic() - t0 < 15
        finally:
            os.kill(pid1, signal.SIGCONT)


def test_stop_does_not_hang_on_a_stopped_engine(no_leftovers, caplog):
    "...nor leave the thread that asked it to exit (it waited for ever, with the client, its thread and sockets)"
    caplog.set_level(logging.DEBUG, logger='ddp_nb.engines')
    threads, fds = kept()
    cl = DDPCluster(n=2).start()
    os.kill(cl.ranks[1].pid, signal.SIGSTOP)   # registered, beating (C heartbeat thread is stopped too), never answers
    t0 = time.monotonic()
    cl.stop()
    assert time.monotonic() - t0 < 15
    assert cluster_procs(cl.cluster_id) == []
    more = back_to((threads, fds))
    assert not more[0] and more[1] <= 1, f"the stop left threads {more[0]} and {more[1]} more descriptors"
    assert NOT_ASKED in caplog.text


def test_two_clusters_side_by_side_do_not_collide(no_leftovers):
    with DDPCluster(n=1) as a, DDPCluster(n=1) as b:
        assert a.cluster_id != b.cluster_id
        assert a.master_port != b.master_port
        assert a.view['rank'] == [0] and b.view['rank'] == [0]
        assert {p.pid for p in cluster_procs(a.cluster_id)}.isdisjoint(p.pid for p in cluster_procs(b.cluster_id))


def test_store_and_gloo_listen_on_loopback_only(no_leftovers):
    with DDPCluster(n=2) as cl:
        for r in cl.ranks:
            for c in psutil.Process(r.pid).net_connections(kind='inet'):
                if c.status == psutil.CONN_LISTEN and c.laddr.port in (cl.master_port,):
                    assert c.laddr.ip in ('127.0.0.1', '::ffff:127.0.0.1'), c
        listeners = [c for r in cl.ranks for c in psutil.Process(r.pid).net_connections(kind='inet')
                     if c.laddr.port == cl.master_port and c.status == psutil.CONN_LISTEN]
        assert listeners, "rank 0's store is not listening on the port the cluster reports"
