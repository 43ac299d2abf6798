"""Regenerate onyx_pb2.py (and its .pyi) from onyx.proto with grpcio-tools' protoc.

    python onyx/proto/regen.py

Dev-time only (needs ``pip install grpcio-tools``); the generated files are committed. The
generated module is made independent of the exact protobuf runtime version (protoc pins the
runtime to its own version; onyx supports protobuf >= 5.26, whose builder API is the same).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main() -> int:
    from grpc_tools import protoc  # dev-time dependency

    root = Path(__file__).resolve().parents[2]
    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={root}",
        f"--pyi_out={root}",
        "onyx/proto/onyx.proto",
    ]
    rc = protoc.main(args)
    if rc != 0:
        print("protoc failed", file=sys.stderr)
        return rc
    out = root / "onyx" / "proto" / "onyx_pb2.py"
    text = out.read_text()
    text = text.replace("# NO CHECKED-IN PROTOBUF GENCODE\n", "")
    text = text.replace("from google.protobuf import runtime_version as _runtime_version\n", "")
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n", "", text)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
