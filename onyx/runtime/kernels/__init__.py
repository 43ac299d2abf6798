"""Kernels, one module per operator family. Importing this package registers all of them."""

import importlib
import pkgutil


def _import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)


_import_all()
