"""Deploy any pflax algorithm with Flower (https://flower.ai): the same three pure pieces of a round
(:class:`pflax.core.federated.RoundPieces`) split between a ``ServerApp`` and ``ClientApp`` nodes.

* :mod:`pflax.flower.protocol`: who computes what, and what travels (no Flower needed): the
  :class:`AppSpec` of a run, the :class:`Plan` derived from it, the server's :class:`Coordinator` and a
  client's :class:`ClientRuntime`.
* :mod:`pflax.flower.codec`: pytrees as named NumPy arrays, and back, without pickle.
* :mod:`pflax.flower.apps`: the Flower apps (``server_app``, ``client_app``) and two ways to run them
  in one process (``run_in_process``, ``simulate``); needs the ``flower`` extra
  (``pip install "pflax[flower]"``, ``flwr>=1.41,<1.42``).
* :mod:`pflax.flower.local`: a SuperLink and SuperNodes on this machine, for tests and the example.

The names of :mod:`pflax.flower.apps` are importable from here too, once ``flwr`` is installed.

>>> from pflax.flower import AppSpec
>>> AppSpec("fedpac", rounds=3).run_config()["algorithm"]
'fedpac'
"""
from __future__ import annotations

from .codec import CodecError, from_arrays, to_arrays
from .protocol import (AppSpec, ClientRuntime, Coordinator, DeploymentError, DirectoryRowStore, MemoryRowStore, Plan,
                       RowStore, row)

_APPS = ("server_app", "client_app", "run_in_process", "simulate", "load_client_data", "save_client_data",
         "to_record", "from_record", "ContextRowStore")

# The Flower-free names; those of `apps` (_APPS) resolve lazily, so `import *` works without flwr.
__all__ = ["AppSpec", "Plan", "Coordinator", "ClientRuntime", "DeploymentError", "RowStore", "MemoryRowStore",
           "DirectoryRowStore", "row", "CodecError", "to_arrays", "from_arrays"]


def __getattr__(name):
    if name in _APPS:
        try:
            from . import apps
        except ImportError as err:
            raise ImportError(f"pflax.flower.{name} needs Flower: pip install 'pflax[flower]' (flwr>=1.41,<1.42); "
                              f"{err}") from err
        return getattr(apps, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
