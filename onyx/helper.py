"""onnx.helper's authoring functions for onyx.ir (``from onyx import helper``); the code lives in
onyx/tools/helper.py."""

from .tools.helper import *  # noqa: F403
from .tools.helper import __all__  # noqa: F401
