"Benchmarks of ddp_nb against bare ipyparallel, torchrun, fork/spawn launchers and nbdistributed (`python -m benchmarks`)"
import atexit, os, shutil, tempfile
if 'IPYTHONDIR' not in os.environ:  # never the user's profile: a private one, which subprocesses inherit, removed at exit
    os.environ['IPYTHONDIR'] = _own = tempfile.mkdtemp(prefix='ddp_nb-bench-ipython-')
    atexit.register(shutil.rmtree, _own, True)
