"""Kernels, one module per operator family. Importing a module registers its kernels; the
registry imports the modules an op needs (``_index.py``) when it is first looked up."""

import importlib


def load(name: str) -> None:
    """Import the kernel module ``name`` (relative to this package, e.g. "conv", "ml.tree")."""
    importlib.import_module(f"{__name__}.{name}")


def load_all() -> None:
    """Import every kernel module (registering every kernel)."""
    import pkgutil  # (here: a session that needs a few modules does not list them)

    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)
