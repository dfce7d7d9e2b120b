"Benchmarks of ddp_nb against bare ipyparallel, torchrun, fork/spawn launchers and nbdistributed (`python -m benchmarks`)"
import os, tempfile
os.environ.setdefault('IPYTHONDIR', tempfile.mkdtemp(prefix='ddp_nb-bench-ipython-'))  # never the user's profile
