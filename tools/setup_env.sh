#!/usr/bin/env bash
# Create or reuse the project's virtual environment and install what `make report` / `make test` need.
# A torch already installed (e.g. a GPU image's) is used as it is; otherwise the CPU build is installed.
# Offline machines: PIP_ARGS="--no-index --find-links .whl" installs from carried wheels.
set -euo pipefail
venv=${VENV:-.venv}
extras=${1:-dev}
if [ "$extras" = dev ] && [ -x "${TILEINFER_CHROMIUM:-/usr/bin/chromium}" ]; then
  extras=dev,browser   # the JupyterLab browser test runs only where Debian's chromium is installed
fi
python=${PYTHON:-python3}
read -r -a pip_args <<< "${PIP_ARGS:-}"

if [ ! -x "$venv/bin/python" ]; then
  if "$python" -c "import torch" 2>/dev/null; then
    # Keep the machine's own torch and triton: the venv sees this interpreter's site-packages through a
    # .pth, which also works where python3 is itself a venv (--system-site-packages would see its base).
    "$python" tools/base_venv.py "$venv" >/dev/null
  else
    "$python" -m venv "$venv"
  fi
fi
py="$venv/bin/python"
stamp="$venv/.tileinfer-$extras"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi
# Never replace a torch or triton the environment already has.
constraints="$venv/.tileinfer-constraints.txt"
"$py" - > "$constraints" <<'PY'
from importlib import metadata
for name in ("torch", "triton"):
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
PY
pip_args+=(-c "$constraints")
if ! "$py" -c "import torch" 2>/dev/null; then
  # The CPU wheel declares no triton; 3.6 is what the GPU image pairs with torch 2.11, and its
  # interpreter needs numpy < 2.3.
  "$py" -m pip install "${pip_args[@]}" "torch==2.13.0" "triton==3.6.0" "numpy<2.3"
fi
"$py" -c "import triton" 2>/dev/null || "$py" -m pip install "${pip_args[@]}" "triton==3.6.0" "numpy<2.3"
# The editable install builds with the environment's own setuptools where it can make wheels by itself
# (70.1 on; a GPU image's, untouched); an older one (Python 3.11's venv) builds in isolation instead.
build_args=(--no-build-isolation)
"$py" -c "import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split('.')[:2])) < (70, 1))" \
  2>/dev/null || build_args=()
"$py" -m pip install "${pip_args[@]}" "${build_args[@]}" -e ".[$extras]"
if [[ "$extras" = dev* ]]; then
  # The public DFlash reference: its pinned requirements are not needed to import its model.
  "$py" -c "import dflash" 2>/dev/null || "$py" -m pip install "${pip_args[@]}" --no-deps "dflash==0.1.0"
fi
touch "$stamp"
