"""Build of the optional native kernels (onyx/runtime/native/*.c, one library).

Everything else is declared in pyproject.toml. The extension is optional: where no C compiler
is available the install goes on and onyx runs its numpy kernels (onyx.runtime.native says
which). It is a plain C library loaded with ctypes, so one build serves every Python version.
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3", "-fvisibility=hidden", "-std=c99", "-pthread"]
link = [] if sys.platform == "win32" else ["-pthread"]

setup(
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
            depends=[
                f"onyx/runtime/native/{h}" for h in ("abi.h", "activation.h", "checks.h", "onyx.h")
            ],
            extra_compile_args=flags,
            extra_link_args=link,
            optional=True,
        )
    ]
)
