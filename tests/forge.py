"""A hostile neighbour of a ddp_nb cluster: sends forged, garbage and oversized messages to a dashboard collector.

    python tests/forge.py ADDR [SECONDS]     prints one JSON line: how many messages it sent, of each kind

It knows the collector's address (any process can find a listening port) but not the cluster's secret. Its forged
batches are well-formed (`report.encode`) and carry a metric name that is an HTML payload; it also replays a header
of rank 0 with a string rank, floods with random bytes, and ends with one 64 MiB frame. The test that runs it asserts
that nothing it sent was taken, that the ranks' own reports still were, and that the kernel's memory stayed bounded."""
import json, os, random, sys, time
import zmq
from ddp_nb.report import encode

EVIL = "<img src=x onerror=\"document.title='pwned'\">"


def forged(i: int) -> list:
    "Messages a neighbour can make without the cluster's secret"
    good = encode(dict(rank=0, pid=1, host='h', busy=True, sid='forged', seq=i), [(time.time(), 10**9 + i, {EVIL: 1.0})])
    return [good,                                                   # a well-formed batch, unsigned
            os.urandom(32) + good,                                  # with a made-up signature
            encode(dict(rank='0', pid=1, host='h', busy=True), []),  # a string rank (froze the dashboard once)
            encode(dict(rank=0, pid=1, host='h', busy=True), [(time.time(), 0, {'loss': 0.})]),  # the step back to 0: a new run
            os.urandom(random.randint(1, 4096))]                    # noise


def main(addr: str, seconds: float = 2.0) -> dict:
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 5000); s.setsockopt(zmq.SNDTIMEO, 5000)
    s.connect(addr)
    sent, i, t_end = 0, 0, time.time() + seconds
    try:
        while time.time() < t_end:
            for m in forged(i): s.send(m); sent += 1
            i += 1
        big = ctx.socket(zmq.PUSH); big.setsockopt(zmq.LINGER, 5000); big.connect(addr)  # its own connection: the collector drops it
        big.send(b'x' * (64 * 2**20)); big.close()
    except zmq.Again: pass  # the collector stopped reading from us: that is fine too
    s.close(); ctx.term()
    return dict(sent=sent, big=1)


if __name__ == '__main__':
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0)), flush=True)
