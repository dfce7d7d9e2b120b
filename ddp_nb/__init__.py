__version__ = "0.1.0"

# `from ddp_nb import report` gives the function ranks call (the module stays `ddp_nb.report` in sys.modules)
from .report import report

__all__ = ['DDPCluster', 'report']

def __getattr__(name):
    "Import `DDPCluster` on first use"
    # (so engines and torchrun workers that import `ddp_nb.rank` skip ipyparallel's client)
    if name == 'DDPCluster':
        from .cluster import DDPCluster
        return DDPCluster
    raise AttributeError(f"module 'ddp_nb' has no attribute {name!r}")
