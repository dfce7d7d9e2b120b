"""The real-kernel harness of the tests: a Jupyter kernel as a user's notebook has (IPP_NONINTERACTIVE unset, so
`%%px` output streams), its cells run and their messages read until the kernel is idle again, always with a deadline."""
import json, os, queue, re, shutil, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r'\x1b\[[0-9;]*m')


class Kernel:
    "A Jupyter kernel on ipc sockets (files: no TCP port another process could take first), started in the repository"
    def __init__(self):
        from jupyter_client.manager import KernelManager
        env = {k: v for k, v in os.environ.items() if k != 'IPP_NONINTERACTIVE'}  # as a user's notebook runs
        self.dir = tempfile.mkdtemp(prefix='ddp_nb-kernel-')
        self.km = KernelManager(kernel_name='python3', transport='ipc', ip=os.path.join(self.dir, 'kernel'))
        self.km.start_kernel(cwd=str(ROOT), env=env)
        self.kc = self.km.client(); self.kc.start_channels(); self.kc.wait_for_ready(timeout=120)
        self.mid, self.t_int, self.streams = None, None, []

    def messages(self, code: str, timeout: float = 120, interrupt_after: float | None = None, at: dict | None = None,
                 interrupt_when: tuple | None = None):
        """Run a cell; yield (seconds since it was sent, message type, content) for each of its iopub messages until the
        kernel is idle (the cell fails the test past `timeout`). `interrupt_after`: press the stop button after that many
        seconds (`self.t_int` is when); `interrupt_when`: (test of the text streamed so far, seconds): press it that long
        after the test first passes; `at`: {seconds: callable} run while the cell runs. `self.mid` is the cell's id."""
        self.mid, t0, todo, self.t_int = self.kc.execute(code), time.monotonic(), dict(at or {}), None
        streamed, t_when = '', None
        while True:
            now = time.monotonic() - t0
            for t in [t for t in todo if t <= now]: todo.pop(t)()
            if interrupt_when is not None and t_when is None and interrupt_when[0](streamed): t_when = now + interrupt_when[1]
            if self.t_int is None and ((interrupt_after is not None and now > interrupt_after) or (t_when is not None and now > t_when)):
                self.km.interrupt_kernel(); self.t_int = time.monotonic()
            assert now < timeout, f"cell did not finish in {timeout}s: {code[:200]}"
            try: m = self.kc.get_iopub_msg(timeout=0.02)
            except queue.Empty: continue
            if m['parent_header'].get('msg_id') != self.mid: continue
            kind, c = m['msg_type'], m['content']
            if kind == 'status':
                if c['execution_state'] == 'idle': return
                continue
            if kind == 'stream': streamed += c['text']
            yield time.monotonic() - t0, kind, c

    def run(self, code: str, timeout: float = 120, interrupt_after: float | None = None, at: dict | None = None,
            interrupt_when: tuple | None = None) -> tuple:
        """Run a cell: (seconds to idle from its start, or from the interrupt; its output as text; the error or None;
        [(seconds, stream text)]). `self.streams`: [(seconds, 'stdout'|'stderr', text)] of the cell; `self.reply`: its
        execute_reply's content ('status' is 'error' for a failed cell even where no error output was shown)."""
        t0, out, msgs, err, self.streams = time.monotonic(), [], [], None, []
        for t, kind, c in self.messages(code, timeout, interrupt_after, at, interrupt_when):
            if kind == 'stream': out.append(c['text']); msgs.append((t, c['text'])); self.streams.append((t, c['name'], c['text']))
            elif kind == 'error': err = f"{c['ename']}: {c['evalue']}"; out.append('\n'.join(c['traceback']))
            elif kind in ('execute_result', 'display_data'): out.append(c['data'].get('text/plain', ''))
        took = time.monotonic() - (self.t_int or t0)
        self.reply = self.reply_to(self.mid)
        return took, ANSI.sub('', ''.join(out)), err, msgs

    def reply_to(self, mid: str, timeout: float = 10) -> dict:
        "The content of the execute_reply to request `mid` (the shell channel keeps every reply, in order: earlier ones are dropped)"
        while True:
            m = self.kc.get_shell_msg(timeout=timeout)
            if m['parent_header'].get('msg_id') == mid: return m['content']

    def ok(self, code: str, timeout: float = 300) -> str:
        "Run a cell that must succeed (the test fails with its output otherwise); its output"
        _, text, err, _ = self.run(code, timeout)
        assert err is None, f"{code[:300]}\n--- failed: {err}\n{text[-4000:]}"
        return text

    def value(self, expr: str, timeout: float = 300):
        "The value of `expr` in the kernel, through JSON (what JSON cannot carry arrives as its repr)"
        return json.loads(self.ok(f"import json as _j; print('@@' + _j.dumps({expr}, default=repr))", timeout).rsplit('@@', 1)[1])

    def close(self, stop: bool = True):
        "Stop the notebook's cluster `cl` if it has one (`stop`), then the kernel"
        try:
            if stop: self.run("try: cl.stop()\nexcept NameError: pass", timeout=60)
        finally:
            self.kc.stop_channels(); self.km.shutdown_kernel(now=True)
            shutil.rmtree(self.dir, ignore_errors=True)


def cluster_kernel(setup: str, measured: dict, name: str):
    """A fixture's body: a kernel that ran `setup` (which starts the notebook's cluster `cl`), yielded; then stopped,
    no cluster process left, and `measured` written to build/<name>.json and printed"""
    from conftest import ours
    assert ours() == [], "processes from an earlier test are still running"
    kern = Kernel()
    _, out, err, _ = kern.run(setup)
    assert err is None, out
    yield kern
    kern.close()
    deadline = time.monotonic() + 30
    while ours() and time.monotonic() < deadline: time.sleep(0.1)
    assert ours() == [], "processes left behind"
    (ROOT / 'build').mkdir(exist_ok=True)
    (ROOT / 'build' / f'{name}.json').write_text(json.dumps(measured, indent=1))
    print(json.dumps(measured, indent=1))
