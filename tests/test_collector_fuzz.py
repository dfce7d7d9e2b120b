"""Fuzz of the dashboard's report channel (#23): valid batches, made by a real `Reporter._batch` and `encode` (sparse
metrics, flags, errors, load, several runs in one batch), mutated thousands of ways (header fields given other types and
values, columns cut or extended, wrong `n`/`cols`/`back`, byte flips, the other byte order, extreme values that still
decode) and offered to a `Collector` signed with its own key (a buggy or hostile rank of the cluster: validation must
hold even then) and unsigned (a neighbour).

test_collector_fuzz, for every case: `_open` never raises, refuses in little CPU time and allocates nothing a header
claims; an unsigned message is never taken; a taken batch never makes `_fold`, `snapshot`, the dashboard's `frame` and
`text` (one rank and many), `warning_lines`, `progress` or `History.records` raise, and no '<' of what a rank sent
reaches the frame's HTML. The plot's own arithmetic runs every frame; matplotlib's axes one frame in REAL.
test_collector_thread_lives_on: the same through the collector's socket and thread. test_reporter_batches_are_always_taken:
whatever a training loop reports, the collector takes every batch. Seeded and clocked: the same bytes every run.
`FUZZ_CASES=20000 pytest tests/test_collector_fuzz.py`, or `python tests/test_collector_fuzz.py CASES SEED` (every kind
of failure, not only the first), fuzz longer."""
import contextlib, io, json, math, os, random, sys, time, tracemalloc
from array import array
from ddp_nb.report import MAX_BATCH, MAX_METRICS, MAX_NAME, MAX_POINTS, Reporter, clean_text, encode, report_key, sign
from ddp_nb.dashboard import Collector, Dashboard, Plot, progress, warning_lines

EVIL = "<x-evil onerror=alert(1)>"   # any '<x-evil' in a frame's HTML came from a rank unescaped
WORLD = 4
CASES = int(os.environ.get('FUZZ_CASES', 3000))
REAL = 150   # one frame in REAL is drawn with matplotlib's axes (0.1-0.5 s each)
NAMES = ['loss', 'acc', 'lr', 't_step', 't_comm', 't_data', 'total', 'epoch', 'samples', 'grad/layer.0', 'λ', EVIL, 'a' * MAX_NAME]
BAD_NAMES = ['', 'x' * (MAX_NAME + 1), 'bad\nname', '\x1b[31m']
STRINGS = ['', 'x', EVIL, 'x' * 301, 'x' * 100_000, '\x00\x1b[31m', '\u202e' + EVIL, '\ud800', '\U000e0001' * 50, 'a\nb', '1', 'NaN',
           'little', 'big', 'loss', 'gpu_note']
INTS = [0, 1, -1, 2, 7, 255, 4095, 4096, 4097, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 10**30, 10**400, 10**4000]
FLOATS = [0.0, -0.0, 0.5, -1.5, 1e-320, 1e300, 1e308, -1e308, 1.7976931348623157e308, math.nan, math.inf, -math.inf]


def weird(rng, depth=0):
    "A JSON value of some type a header field does not expect (or does)"
    k = rng.random()
    if k < 0.3: return rng.choice(INTS)
    if k < 0.5: return rng.choice(FLOATS)
    if k < 0.7: return rng.choice(STRINGS)
    if k < 0.78: return rng.choice([None, True, False])
    if depth > 2: return []
    if k < 0.9: return [weird(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(['cpu', 'rss', 'gpu', 'gpu_mem', 'gpu_total', 'gpu_note', EVIL]): weird(rng, depth + 1) for _ in range(rng.randrange(4))}


def load(rng):
    "A load sample as an engine with or without a (readable) GPU takes it"
    d = dict(cpu=rng.choice([0., 12.5, 400.]), rss=rng.choice([0, 2**30, 2**50]))
    if rng.random() < 0.4: d.update(gpu=rng.choice([0., 99.]), gpu_mem=rng.choice([0, 2**34]), gpu_total=rng.choice([0, 2**37]))
    if rng.random() < 0.3: d['gpu_note'] = rng.choice(['no NVML', EVIL])
    return d


def value(rng):
    "What a training loop may pass to report(): mostly numbers, sometimes not"
    k = rng.random()
    if k < 0.75: return rng.uniform(-3, 3)
    return rng.choice([math.nan, math.inf, 'oops', EVIL, 10**400, True, None, 1e308, -1e308, 5e-324, 2**70])


def valid(rng, r) -> bytes:
    "One batch from a real Reporter: sparse metrics, flags, an error, load, and sometimes several runs"
    step = rng.choice([0, 10, 2**40, -5])
    for i in range(rng.choice([0, 1, 2, 3, 5, 10, 50, 300])):
        if rng.random() < 0.05: step = rng.choice([0, step - 3, -2**63, 2**63 - 1])   # a new run inside the batch
        names = rng.sample(NAMES, rng.randrange(1, 5)) + ([rng.choice(BAD_NAMES)] if rng.random() < 0.05 else [])
        r.report(step=rng.choice([step, step, step, None, 'x', 2**64, 1.5]) if rng.random() < 0.1 else step,
                 **{n: value(rng) for n in names})
        if rng.random() < 0.1: r.report_late(step - rng.choice([0, 1, 2, 5]), t_step=value(rng))   # a GPU timer's breakdown
        step += rng.choice([1, 1, 1, 0, 2])
    r.error = rng.choice([None, None, (CLOCK.time(), 'ValueError: ' + EVIL)])
    r.in_cell = rng.random() < 0.5
    if rng.random() < 0.5: r.last_load = 0.   # a load sample in this batch
    head, pts = r._batch()
    return encode(head, pts)


def paths(v, at=()):
    "Every place inside a JSON value: (key path)"
    yield at
    if isinstance(v, dict):
        for k, x in v.items(): yield from paths(x, at + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v): yield from paths(x, at + (i,))


def put(h, at, v):
    "`h` with the value at path `at` replaced by `v` (in place)"
    for k in at[:-1]: h = h[k]
    h[at[-1]] = v


def split(body: bytes) -> tuple:
    i = body.index(b'\n')
    return json.loads(body[:i]), body[i + 1:]


def join(h: dict, cols: bytes) -> bytes:
    return json.dumps(h).encode() + b'\n' + cols


def columns(h, cols):
    "The body's columns as arrays: steps, ts, then each metric's values (and indices), in order"
    out, at, n = [], 0, h['n']
    def take(code, k):
        nonlocal at
        a = array(code); a.frombytes(cols[at:at + 8 * k]); at += 8 * k; out.append(a)
    take('q', n); take('d', n)
    for _, some in h['cols']:
        if some is None: take('d', n)
        else: take('d', some); take('q', some)
    return out


def mutate(rng, body: bytes) -> bytes:
    "`body` changed one to three ways"
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        try: h, cols = split(body)
        except (ValueError, RecursionError): h, cols = None, b''
        if not isinstance(h, dict): h = None
        k, n = rng.randrange(15), (h.get('n') if h is not None and type(h.get('n')) is int else 1)
        if h is None or k == 0:   # raw bytes
            b = bytearray(body)
            for _ in range(rng.randrange(1, 4)):
                if b: b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            body = bytes(b)
        elif k == 1:   # any value anywhere in the header
            at = [p for p in paths(h) if p]
            if at: put(h, rng.choice(at), weird(rng)); body = join(h, cols)
        elif k == 2:   # a field removed, or an unknown one
            if rng.random() < 0.5 and h: h.pop(rng.choice(list(h)))
            else: h[rng.choice(['script', EVIL, 'Rank', ''])] = weird(rng)
            body = join(h, cols)
        elif k == 3:   # n that the columns do not have
            h['n'] = rng.choice([n + 1, n - 1, 0, MAX_POINTS, MAX_POINTS + 1, 2**31, -1])
            body = join(h, cols)
        elif k == 4:   # the columns' layout changed
            cs = h.get('cols') if isinstance(h.get('cols'), list) else []
            j = rng.randrange(5)
            if j == 0: cs.append([rng.choice([EVIL, 'new', 'loss']), rng.choice([None, 1, 0, -1, 10**6])])
            elif j == 1 and cs: cs.pop(rng.randrange(len(cs)))
            elif j == 2 and cs and isinstance(cs[-1], list) and cs[-1]: cs[-1][-1] = rng.choice([None, 1, 2, n, 0])
            elif j == 3: cs += [[f'm{i}', None] for i in range(MAX_METRICS + 1 - len(cs))]
            elif cs: rng.shuffle(cs)
            h['cols'] = cs; body = join(h, cols)
        elif k == 5:   # back that is not where steps go back
            h['back'] = rng.choice([[], [0], [1], [1, 1], [2, 1], list(range(1, 100)), [n], [n - 1]])
            if rng.random() < 0.5:   # late points that are none of the batch's
                h['late'] = rng.choice([[], [0], [-1], [1, 1], [2, 1], list(range(min(n, MAX_POINTS) + 2)), [n], [n - 1], 'x', [0.5]])  # (n: maybe a mutated one, 2**63)
            body = join(h, cols)
        elif k == 6:   # the other byte order: the same bytes read as other numbers
            h['order'] = 'big' if h.get('order') == 'little' else 'little'; body = join(h, cols)
        elif k == 7:   # columns cut short or extended
            cut = rng.choice([1, 7, 8, 16, rng.randrange(1, len(cols) + 2)])
            body = join(h, cols[:-cut] if rng.random() < 0.5 else cols + os.urandom(cut))
        elif k == 8:   # the header as text only: nesting, NaN tokens, repeated keys, no newline, nothing
            t = json.dumps(h)
            body = rng.choice([('[' * 100_000 + ']' * 100_000).encode(), b'{"rank":' + b'[' * 5000 + b']' * 5000 + b'}\n',
                               t.replace('"busy": true', '"busy": NaN').encode() + b'\n' + cols,
                               (t[:-1] + ', "rank": -1}').encode() + b'\n' + cols, t.encode(), b'', b'\n', b'{}\n',
                               t.encode() + b'\r\n' + cols, b'\xef\xbb\xbf' + t.encode() + b'\n' + cols])
        elif k in (9, 10, 11):   # the columns well formed, their numbers extreme: what decodes, and reaches the state
            try: arrs = columns(h, cols)
            except (KeyError, TypeError, ValueError): continue
            a = rng.choice(arrs)
            if not a: continue
            pool = INTS[:14] if a.typecode == 'q' else FLOATS
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(a))
                try: a[i] = rng.choice(pool if rng.random() < 0.7 else [a[0], a[-1]])
                except OverflowError: pass
            if rng.random() < 0.2: a[:] = array(a.typecode, [a[0]] * len(a))   # every point at one step (or time, or value)
            body = join(h, b''.join(x.tobytes() for x in arrs))
        elif k == 13:   # values of the right type, at their bounds and beyond: what a buggy rank may send
            f = rng.choice(['rank', 'pid', 't', 'every', 'dropped', 'stop_eta', 'seq', 'error', 'flags', 'load', 'host', 'sid'])
            num = lambda: rng.choice(INTS[:-2] + FLOATS)
            h[f] = {'error': lambda: [num(), rng.choice(STRINGS[:7])], 'host': lambda: rng.choice(STRINGS[:7] + ['h' * 256]),
                    'sid': lambda: rng.choice(['', EVIL, 's' * 64]),
                    'flags': lambda: [[rng.choice(INTS[:15]), rng.choice(NAMES + BAD_NAMES), rng.choice(STRINGS[:7])] for _ in range(rng.randrange(70))],
                    'load': lambda: {k: v for k, v in load(rng).items() if rng.random() < 0.8} if rng.random() < 0.5 else
                                    dict(load(rng), **{rng.choice(['cpu', 'rss', 'gpu', 'gpu_mem', 'gpu_total']): num()})}.get(f, num)()
            if f == 'rank' and rng.random() < 0.7: h[f] = rng.randrange(WORLD + 2)
            body = join(h, cols)
        elif k == 12:   # a huge claim in few bytes
            h.update(n=MAX_POINTS, cols=[[f'm{i}', None] for i in range(MAX_METRICS)], back=[]); body = join(h, cols[:64])
        else:   # the same batch, its values signed anew: a new reporter (sid), seq replayed or not
            h['sid'], h['seq'] = rng.choice([h.get('sid'), 'other', EVIL]), rng.choice([0, 1, h.get('seq', 0)])
            body = join(h, cols)
    return body


class CheapPlot(Plot):
    "The plot's own arithmetic (limits, logs, SVG paths) every frame; matplotlib's axes (0.1-0.5 s a layout) only in `REAL` frames"
    def _layout(self, data, logs):
        self.lines, self.lims, self.static = {(n, k): dict(color='C0', lw=1., alpha=1.) for n, lines in data.items() for k in lines}, {}, None
    def _render(self):
        for n, (x0, x1, y0, y1) in self.lims.items():   # what matplotlib's set_xlim, set_ylim and tickers need
            assert all(map(math.isfinite, (x0, x1, y0, y1, x1 - x0, y1 - y0))) and x1 > x0 and y1 > y0, (n, self.lims[n])
        self.boxes, self.static = {n: (40., 10., 500., 200.) for n, _ in self.lines}, '<svg></svg>'


def check_frame(d, snap, where):
    "The dashboard's HTML and text of `snap`, with nothing of the ranks' unescaped"
    html, info = d.frame(snap)
    assert '<x-evil' not in html, f"{where}: unescaped input in the frame: {html[html.index('<x-evil') - 200:][:400]}"
    return html


class Clock:
    "The time module, with a time() that advances 10 ms a call from a fixed start: batches and states are the same every run"
    def __init__(self, t: float = 1.8e9): self.t = t
    def time(self): self.t += 0.01; return self.t
    def __getattr__(self, k): return getattr(time, k)


CLOCK = Clock()


class Stats(dict):
    def count(self, k): self[k] = self.get(k, 0) + 1


@contextlib.contextmanager
def quiet():
    "The collector says once, on stderr, what it dropped: not here"
    with contextlib.redirect_stderr(io.StringIO()): yield


def one(col, d, big, body, where, st, other, case):
    "One case: `body` offered unsigned and signed; what is taken, folded and drawn"
    for m in (body, os.urandom(32) + body, sign(other, body)) if case % 5 == 0 else (body,):   # unsigned: a neighbour's
        n0 = col.dropped['foreign']
        assert col._open(m) is None and col.dropped['foreign'] == n0 + 1, f"{where}: an unsigned message was taken"
    m = sign(col.key, body)
    mem = case % 7 == 0
    if mem: tracemalloc.start()
    t0 = time.thread_time()   # CPU time: a busy machine does not make it look slow
    with quiet():
        try: b = col._open(m)
        except Exception as e: raise AssertionError(f"{where}: _open raised {type(e).__name__}: {e}; body {body[:300]!r}") from e
    dt = time.thread_time() - t0
    if mem:
        peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        st['peak'] = max(st['peak'], peak - 4 * len(m))   # beyond the arrays of the message itself
    if b is None:
        st.count('refused')
        st['slow'] = sorted(st['slow'] + [(dt, case, body)], key=lambda x: -x[0])[:3]   # timed again at the end: noise is not cost
        return
    st.count('taken')
    with col.lock:
        try: col._fold(b, CLOCK.time())
        except Exception as e: raise AssertionError(f"{where}: _fold raised {type(e).__name__}: {e}; body {body[:300]!r}") from e
    try:
        snap = col.snapshot()
        warning_lines(snap); warning_lines(snap, compact=True); progress(snap.current())
        d.text(snap); big.text(big.snapshot(series=True))
        st['escaped'] += '&lt;x-evil' in check_frame(d, snap, where); st.count('frames')
        if case % 5 == 0: check_frame(big, big.snapshot(), where); col.history.records()
    except AssertionError: raise
    except Exception as e:
        import traceback
        raise AssertionError(f"{where}: drawing a taken batch raised {type(e).__name__}: {e}; body {body[:300]!r}\n"
                             f"{traceback.format_exc()}") from e


def timed(f) -> float:
    "CPU seconds of this thread that f() took"
    t0 = time.thread_time(); f(); return time.thread_time() - t0


def bodies(seed: int, cases: int):
    "(case, message body): valid batches of a real Reporter, most of them mutated; the same every run (under `clocked`)"
    rng, r = random.Random(seed), None
    try:
        for case in range(cases):
            if case % 100 == 0:   # a new reporter now and then
                if r is not None: r.close()
                r = Reporter('tcp://127.0.0.1:9', b'k' * 32, rank=rng.randrange(WORLD), interval=3600)   # never sends: _batch is ours
                r.load, r.pid, r.host, r.sid = (lambda: load(rng)), 4242, 'host-a', f'sid{case:05d}'   # the same bytes every run
            if rng.random() < 0.3: r.rank = rng.randrange(WORLD)
            body = valid(rng, r)
            yield case, (mutate(rng, body) if rng.random() < 0.85 else body)
    finally:
        if r is not None: r.close()


@contextlib.contextmanager
def clocked():
    "report, the collector and the dashboard read the time from CLOCK"
    CLOCK.t, mods = 1.8e9, [sys.modules[f'ddp_nb.{m}'] for m in ('report', 'collector', 'dashboard')]
    for m in mods: m.time = CLOCK
    try: yield
    finally:
        for m in mods: m.time = time


def run(cases: int, seed: int = 23, failures: dict | None = None) -> Stats:
    "Fuzz `cases` batches; the first failure raises, or with `failures` (a dict), the first of each kind is kept there"
    st = Stats(peak=0, escaped=0, slow=[], dropped=dict(foreign=0, invalid=0, replayed=0))
    other = report_key(b'not the secret', b'nonce')
    col = None
    def close():
        col.close()
        for k, v in col.dropped.items(): st['dropped'][k] += v
    with clocked():
        try:
            for case, body in bodies(seed, cases):
                if case % 100 == 0:   # a fresh collector now and then: states of every kind, never a huge one
                    if col is not None: close()
                    col = Collector(secret=b'the secret', world=WORLD, tick=0.01)   # closed in 10 ms
                    col.listeners.clear()   # the checks below draw; the collector's thread does not
                    d, big = (Dashboard(col, WORLD, mode='text', out=io.StringIO(), many=m) for m in (16, 2))
                    for x in (d, big): x.close()   # no listener: frames drawn here only
                    plots = dict(cheap=(CheapPlot(), CheapPlot()), real=(d.plot, big.plot))
                where = f"case {case} (seed {seed})"
                d.plot, big.plot = plots['cheap' if case % REAL else 'real']
                if failures is None: one(col, d, big, body, where, st, other, case)
                else:
                    try: one(col, d, big, body, where, st, other, case)
                    except AssertionError as e:
                        c = e.__cause__
                        tb = c.__traceback__ if c is not None else e.__traceback__
                        while tb.tb_next: tb = tb.tb_next
                        failures.setdefault((type(c).__name__, tb.tb_frame.f_code.co_filename.split('/')[-1], tb.tb_lineno), str(e)[:600])
            with quiet():   # the slowest refusals, each the best of 5: CPU seconds
                ms = [sign(col.key, b) for _, _, b in st['slow']]
                st['refused_max'] = max(min(timed(lambda: col._open(m)) for _ in range(5)) for m in ms)
            st['slow'] = [(round(dt, 4), case, len(b)) for dt, case, b in st['slow']]
        finally:
            if col is not None: close()
    return st


class Capture:
    "A reporter's socket that keeps what it is given"
    def __init__(self): self.sent = []
    def send(self, m, flags=0): self.sent.append(m)
    def close(self): pass


class NoFloat:
    def __float__(self): raise ZeroDivisionError('lazy')
    def __str__(self): raise RuntimeError('no str either')


def test_reporter_batches_are_always_taken():
    "Whatever a training loop reports, every batch its reporter sends is one the collector takes: none refused, none too big"
    import numpy as np
    rng, E = random.Random(5), '\U0001F600'   # 12 bytes of JSON a character: the biggest headers
    col = Collector(secret=b'the secret', world=WORLD)
    r = Reporter('tcp://127.0.0.1:9', col.key, rank=3, interval=3600)
    r.load_interval = 0.   # a load sample in every batch: the same random draws every run
    real, r.sock = r.sock, Capture()
    real.close()
    names = NAMES + BAD_NAMES + [E * MAX_NAME, f'{E}' * 3, 'x' * MAX_NAME] + [f'{i:03d}' + E * (MAX_NAME - 3) for i in range(MAX_METRICS + 9)]
    values = [0.5, -1e308, math.nan, math.inf, 10**400, 'oops', E * 50, None, NoFloat(), np.float32(2.5), np.int64(7), True, 2**70]
    steps = [None, 0, 5, 2**53 + 1, 2**63 - 1, -2**63, 2**63, 10**400, -1.5, 'x', np.int64(2**62), np.float64(1e20), NoFloat()]
    calls = 0
    try:
        for burst in range(40):
            for _ in range(rng.choice([1, 10, 100, 2000])):
                k = rng.choice([1, 2, 5, 40]) if burst % 10 else MAX_METRICS + 9   # beyond MAX_METRICS: flagged, not sent
                r.report(step=rng.choice(steps) if rng.random() < 0.2 else None, **{n: rng.choice(values) for n in rng.sample(names, k)})
                calls += 1
            r.error = rng.choice([None, (1e9, clean_text(E * 400 + '\n' + EVIL))])
            r.in_cell, r.dropped, r.last_load = rng.random() < 0.5, rng.choice([0, 2**62]), 0.
            r.load = lambda: dict(load(rng), gpu_note=clean_text(E * 400))
            r.flush()
        r.report(step=0, loss=1.)
        for _ in range(100_000): r.report(loss=1.)   # a backlog of 100,000 points: several batches
        r.flush()
        assert r.sock.sent and r.dropped in (0, 2**62)
        with quiet():
            for m in r.sock.sent:
                assert len(m) <= MAX_BATCH + 32, len(m)   # the collector's ZMQ_MAXMSGSIZE
                assert col._open(m) is not None, col.errors
        points = sum(json.loads(m[32:m.index(b'\n', 32)])['n'] for m in r.sock.sent)
        assert 100_001 < points <= calls + 100_001, (points, calls)
        print(f"\n{calls + 100_000:,} reports in {len(r.sock.sent)} batches, the biggest {max(map(len, r.sock.sent)):,} bytes: all taken")
    finally:
        r.close(); col.close()


def test_collector_fuzz():
    t0 = time.perf_counter()
    st = run(CASES)
    print(f"\n{CASES:,} cases in {time.perf_counter() - t0:.1f} s: {st}")
    assert st.get('taken', 0) > CASES // 10 and st.get('refused', 0) > CASES // 10, st   # both sides of every check were exercised
    assert st['escaped'] > 0 and all(st['dropped'].values()), st   # hostile names reached frames (escaped); refusals of every kind
    assert st['refused_max'] < 0.05, st   # CPU seconds (1.6 MB refused in 15 ms): a refusal is cheap, whatever the batch claims
    assert st['peak'] < 2 * MAX_BATCH, st   # bytes: nothing a header claims is allocated before the message's bytes are counted


def test_collector_thread_lives_on():
    "Signed hostile messages through the collector's own socket: its thread drops them, and still takes the next rank's batch"
    import zmq
    hostile = [b'[' * 100_000 + b']' * 100_000, b'{"rank": ' + b'[' * 5000 + b']' * 5000 + b'}\n',   # RecursionError ended the thread
               encode(dict(rank=0, pid=1, host='h', busy=True, t=10**400), [])]                      # and OverflowError
    col = Collector(secret=b'the secret', world=WORLD)
    zc = zmq.Context(); s = zc.socket(zmq.PUSH); s.setsockopt(zmq.LINGER, 0); s.connect(col.addr)
    try:
        with clocked(), quiet():
            for m in hostile + [b for _, b in bodies(7, 300) if len(b) <= MAX_BATCH]:   # bigger frames close the connection (test_security)
                s.send(sign(col.key, m))
            s.send(sign(col.key, encode(dict(rank=0, pid=1, host='h', busy=True, sid='last', seq=0), [(1., 123_456_789, {'loss': 1.})])))
            deadline = time.monotonic() + 120   # one connection: the last batch is taken after every other
            while time.monotonic() < deadline and getattr(col.ranks.get(0), 'step', None) != 123_456_789 and col._thread.is_alive():
                time.sleep(0.05)
        assert col._thread.is_alive(), f"the collector's thread ended: {col.errors}"
        assert col.ranks[0].step == 123_456_789 and col.dropped['invalid'] >= len(hostile), col.dropped
    finally:
        s.close(); zc.term(); col.close()


if __name__ == '__main__':   # python tests/test_collector_fuzz.py CASES SEED: every kind of failure, not only the first
    t0, failures = time.perf_counter(), {}
    print(run(int(sys.argv[1]) if len(sys.argv) > 1 else CASES, int(sys.argv[2]) if len(sys.argv) > 2 else 23, failures),
          f"{time.perf_counter() - t0:.1f} s")
    for k, v in failures.items(): print(k, v, sep='\n  ', end='\n\n')
