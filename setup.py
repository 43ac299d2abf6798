"""Build of the optional native kernels (onyx/runtime/native/*.c, one library).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler
is available the install goes on and onyx runs its numpy kernels (onyx.runtime.native says
which). It is a plain C library loaded with ctypes, so one build serves every Python version.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

flags = [] if sys.platform == "win32" else ["-O3", "-fvisibility=hidden", "-std=c99", "-pthread"]
link = [] if sys.platform == "win32" else ["-pthread"]


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class build_native(build_ext):  # noqa: N801  (a command's name)
    """build_ext whose failed build of an optional extension leaves no library behind: the
    extension is optional, so the install goes on, and a library kept from an earlier build
    (older sources, another ABI) would load and be called with this build's arguments. The
    build's own output is removed when it fails; the in-place copy (an editable install,
    ``build_ext --inplace``) when the build left no output to copy."""

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except BaseException:
            _remove(self.get_ext_fullpath(ext.name))
            raise

    def copy_extensions_to_source(self) -> None:
        # (self.inplace is set again here: get_ext_fullpath names the copy in the package)
        for ext in self.extensions:
            built = os.path.join(self.build_lib, self.get_ext_filename(ext.name))
            if ext.optional and not os.path.exists(built):
                _remove(self.get_ext_fullpath(ext.name))
        super().copy_extensions_to_source()


NATIVE_HEADERS = ("abi.h", "activation.h", "checks.h", "onyx.h")

setup(
    cmdclass={"build_ext": build_native},
    ext_modules=[
        Extension(
            "onyx.runtime.native._kernels",
            sources=[
                "onyx/runtime/native/abi.c",
                "onyx/runtime/native/gemm_i8.c",
                "onyx/runtime/native/depthwise.c",
                "onyx/runtime/native/elementwise.c",
                "onyx/runtime/native/conv_f32.c",
                "onyx/runtime/native/conv1d.c",
                "onyx/runtime/native/convtranspose.c",
                "onyx/runtime/native/resize.c",
                "onyx/runtime/native/rnn.c",
                "onyx/runtime/native/gemv.c",
                "onyx/runtime/native/rows.c",
                "onyx/runtime/native/norms.c",
                "onyx/runtime/native/trees.c",
                "onyx/runtime/native/window.c",
                "onyx/runtime/native/nbits.c",
                "onyx/runtime/native/attention.c",
                "onyx/runtime/native/gemm_f32.c",
                "onyx/runtime/native/nhwc.c",
                "onyx/runtime/native/nhwc_chain.c",
                "onyx/runtime/native/small_cnn.c",
                "onyx/runtime/native/winograd.c",
                "onyx/runtime/native/turn.c",
                "onyx/runtime/native/pool.c",
            ],
            depends=[f"onyx/runtime/native/{h}" for h in NATIVE_HEADERS],
            extra_compile_args=flags,
            extra_link_args=link,
            optional=True,
        )
    ],
)
