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
    write_compiled(root / "onyx" / "proto" / "_file.py")
    return 0


def write_compiled(path: Path) -> None:
    """_file.py: the compiled schema that onyx/proto/__init__.py builds the classes from."""
    import os
    import subprocess

    # (the pure-Python implementation: the package then takes onyx_pb2 as generated, not the
    # old _file.py)
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    code = "from onyx.proto import onyx_pb2; print(repr(onyx_pb2.DESCRIPTOR.serialized_pb))"
    root = path.parents[2]
    data = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    head = path.read_text().split("SERIALIZED = ")[0]
    path.write_text(f"{head}SERIALIZED = {data}\n")


if __name__ == "__main__":
    raise SystemExit(main())
