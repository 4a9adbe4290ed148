#!/usr/bin/env bash
# Wheels for an offline GPU machine: what `make test` and `make report` install beyond the image's own packages.
#
#   bash tools/offline_wheels.sh [DIR]        # default .whl; then on the machine:
#   make test PIP_ARGS="--no-index --find-links DIR"
#
# The target is a CUDA image with Python PY_VERSION (3.12) on x86_64 Linux that already holds torch, triton,
# transformers, pandas and pytest-xdist. Their dependencies (IMAGE_HAS, each seen installed on such an image)
# are left out to keep the folder small; set IMAGE_HAS= to download everything.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
py_version=${PY_VERSION:-3.12}
IMAGE_HAS=${IMAGE_HAS-"certifi execnet idna iniconfig jinja2 markupsafe packaging pluggy psutil pygments pytest
pytest-xdist python-dateutil pyyaml setuptools tqdm typing-extensions tzdata wheel"}
python=${PYTHON:-python3}

# The report and dev extras' own requirements, read from pyproject.toml (the extras that name this project
# are expanded, transformers is the image's).
mapfile -t reqs < <("$python" - <<'PY'
import tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
reqs = [r for name in ("report", "dev") for r in extras[name] if not r.startswith("tileinfer")]
print("\n".join(r for r in reqs if not r.startswith("transformers")))
PY
)
mkdir -p "$dir"
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
           --platform manylinux_2_34_x86_64)
# nvtx 0.2.14: the smallest wheel whose NVTX domain has push_range (0.2.17's is four times its size)
"$python" -m pip download -q --only-binary=:all: --python-version "$py_version" "${platforms[@]}" -d "$dir" \
  "${reqs[@]}" "nvtx==0.2.14"
"$python" -m pip download -q --no-deps -d "$dir" "dflash==0.1.0"   # the DFlash reference, without its pins

normalize() { echo "$1" | tr 'A-Z_.' 'a-z--'; }
for whl in "$dir"/*.whl; do
  name=$(normalize "$(basename "$whl" | cut -d- -f1)")
  for have in $IMAGE_HAS; do
    if [[ "$name" == "$(normalize "$have")" ]]; then rm -f "$whl"; fi
  done
done
echo "$(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir"
