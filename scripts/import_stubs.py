"""Import a framework's pure-Python modules from its source tree without installing it (the bench_*_host.py timing
scripts): the named top-level packages and module prefixes resolve to MagicMock modules, so GPU kernels, model
loaders and other heavy imports are never executed, while everything else is the framework's own code."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
from collections.abc import Iterable
from unittest import mock


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta-path finder for `top` packages (whole) and `prefixes` (a module and its submodules)."""

    def __init__(self, top: Iterable[str] = (), prefixes: Iterable[str] = ()):
        self.top, self.prefixes = frozenset(top), tuple(prefixes)

    def find_spec(self, name, path, target=None):
        stub = name.split(".")[0] in self.top or any(name == p or name.startswith(p + ".") for p in self.prefixes)
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if stub else None

    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__, m.__spec__, m.__name__ = [], spec, spec.name
        return m

    def exec_module(self, module):
        pass
