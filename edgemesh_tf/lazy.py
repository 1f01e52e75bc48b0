"""Lazy package exports: a package's public names, each imported from its module on first use.

A package root that lists its names this way imports nothing when it is imported, so a process that
needs one module (a server, a forwarder) does not load TensorFlow or the rest of the package.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``exports`` maps each public name to the module under
    ``package`` that defines it (e.g. {"run_job": "runtime.job"}), or that holds it as a submodule
    ({"records": "core"}: ``core.records``); any other name is an AttributeError. A public name must
    not be a submodule's name of ``package`` itself: once that submodule is imported, Python sets the
    package's attribute to it and the name would mean the module."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError("module %r has no attribute %r" % (package, name))
        module = importlib.import_module(package + "." + exports[name])
        if not hasattr(module, name):
            return importlib.import_module(module.__name__ + "." + name)
        return getattr(module, name)
    return __getattr__
