"Benchmarks of ddp_nb against bare ipyparallel, torchrun, fork/spawn launchers and nbdistributed (`python -m benchmarks`)"
import atexit, os, shutil, tempfile
if 'IPYTHONDIR' not in os.environ:  # never the user's profile: a private one, which subprocesses inherit, removed at exit
    os.environ['IPYTHONDIR'] = _own = tempfile.mkdtemp(prefix='ddp_nb-bench-ipython-')
    atexit.register(shutil.rmtree, _own, True)
# ddp_nb's modules compiled to bytecode, as an install has them: pip compiles a package's modules when it installs it,
# and an editable install writes them at its first import, unless PYTHONDONTWRITEBYTECODE is set (as on the machine the
# results come from), when every process (kernel, fork server, engines) would compile them again: ~0.1 s of each start
import compileall as _compileall, importlib.util as _util
_spec = _util.find_spec('ddp_nb')
if _spec is not None and _spec.origin: _compileall.compile_dir(os.path.dirname(_spec.origin), quiet=1)
