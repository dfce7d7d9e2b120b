__version__ = "0.1.0"

__all__ = ['DDPCluster']

def __getattr__(name):
    "Import `DDPCluster` on first use, so engines and torchrun workers that import `ddp_nb.engine` skip ipyparallel's client"
    if name == 'DDPCluster':
        from .cluster import DDPCluster
        return DDPCluster
    raise AttributeError(f"module 'ddp_nb' has no attribute {name!r}")
