"""Loaded at Python's start in every process `topolab train` starts (this folder leads their
PYTHONPATH): once the script imports torch, registers the ``topolab`` backend and notes in
``rank-<RANK>.init`` of the results folder that the script called init_process_group (the
driver waits a bounded time for every rank's note). Then runs the sitecustomize this one
hides, if any (Debian ships one)."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _installed(module) -> None:
    """torch.distributed has finished importing: register, and wrap init_process_group."""
    if not module.is_available():
        return
    from topolab_torch import protocol
    from topolab_torch.backend import register

    register()
    original = module.init_process_group

    def init_process_group(*args, **kwargs):
        folder = os.environ.get(protocol.ENV_DIR)
        if folder:
            backend = kwargs.get("backend", args[0] if args else None)
            record = {"backend": str(backend), "pid": os.getpid()}
            protocol.append_record(protocol.rank_file(folder, int(os.environ.get("RANK", "0")), "init"), record)
        return original(*args, **kwargs)

    init_process_group.__doc__ = original.__doc__
    init_process_group.__wrapped__ = original
    module.init_process_group = init_process_group


class _AfterTorchDistributed(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``torch.distributed`` so `_installed` runs
    right after the module's own code."""

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def run(module):
            exec_module(module)
            _installed(module)

        loader.exec_module = run
        return spec


if os.environ.get("TOPOLAB_TRAIN_DIR"):
    sys.meta_path.insert(0, _AfterTorchDistributed())

# the sitecustomize this one hides (a later entry of sys.path)
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
