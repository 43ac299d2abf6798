"""Digests of what the optimizer makes of each zoo model: a change meant to make optimization
cheaper must leave every one of them as it was.

    PYTHONHASHSEED=0 python scripts/optimized_digests.py OUT.json [--against OLD.json]

For every model of the realistic and the serving zoo (benchmarks/models), and each variant
(level, disabled passes, ``for_session``), the sha256 of ``serde.dumps(onyx.optimize(...))``;
with ``--against``, the keys whose digest differs from an earlier run's (exit status 1 if
any). Run both sides with the same PYTHONHASHSEED: a pass that iterates a set of strings makes
an order that varies by process otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onyx import serde  # noqa: E402
from onyx.optimizer import optimize  # noqa: E402

MODELS = ROOT / "benchmarks" / "models"
VARIANTS = [
    ("all", ()),
    ("basic", ()),
    ("extended", ("UnusedInitializerElimination",)),
    ("all", ("DeadCodeElimination",)),
    ("all", ("CommonSubexpressionElimination",)),
    ("all", ("ConstantFolding",)),
    ("all", ("NoopElimination", "ShapeFolding")),
]


def digests() -> dict[str, str]:
    out = {}
    for path in sorted(MODELS.glob("*.onnx")) + sorted((MODELS / "serving").glob("*.onnx")):
        model = serde.load(str(path))
        for level, disabled in VARIANTS:
            for for_session in (False, True):
                key = f"{path.relative_to(MODELS)} {level} {','.join(disabled)} {for_session}"
                try:
                    made = optimize(model, level, disabled, for_session=for_session)
                    out[key] = hashlib.sha256(serde.dumps(made)).hexdigest()
                except Exception as e:  # (an error is a result too: it must stay the same)
                    out[key] = f"error {type(e).__name__}"
        print(path.name, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="where to write the digests (JSON)")
    ap.add_argument("--against", help="an earlier run's JSON to compare with")
    args = ap.parse_args()
    found = digests()
    Path(args.out).write_text(json.dumps(found, indent=0))
    if args.against:
        old = json.loads(Path(args.against).read_text())
        differ = sorted(k for k in old.keys() | found.keys() if old.get(k) != found.get(k))
        print(f"{len(found)} digests, {len(differ)} differ")
        for key in differ:
            print("  " + key)
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
