#!/usr/bin/env bash
# Wheels for `make test-gpu` on a GPU machine that has no package registry: run this where pip reaches PyPI, then
# take the git-ignored folder .whl/ along to the GPU machine (tools/test_gpu.sh installs from it, offline).
#
#   bash tools/gpu_wheels.sh            # resolve, download, keep what the GPU image lacks, then check that it installs
#   bash tools/gpu_wheels.sh --no-check # skip the install check
#
# The dependency closure of what the GPU suite needs is resolved by pip for CPython 3.12 on manylinux x86-64
# (the GPU image: Python 3.12, torch 2.11 + CUDA 13); the packages that image already has are then dropped.
# GPU_HAVE=FILE names that image's packages instead of the list below (one name a line; `pip list --format=freeze`
# output works). GPU_WHEELS_PYTHON=PATH picks the interpreter that runs pip (a Python 3.12 evaluates the
# dependencies' markers exactly as the GPU machine will; another version is told --python-version 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.whl
MAX_MIB=48   # the whole working tree that travels to the GPU machine is limited to 64 MiB
CHECK=1; [ "${1:-}" = --no-check ] && CHECK=0

# What the GPU suite imports there beyond the image: ddp_nb's requirements (settings.ini), nbdev 2 and its pins
# (nbdev_test), pytest. Packages the image has are resolved too (so the closure is consistent) and then dropped.
WANT=('ipyparallel>=8.6' 'pyzmq' 'orjson' 'ipywidgets' 'ipykernel' 'cloudpickle' 'psutil' 'matplotlib' 'nvidia-ml-py'
      'nbdev>=2.4.14,<3' 'execnb<0.2' 'fastcore<2' 'pytest' 'pytest-timeout')
IMPORTS='ipyparallel, zmq, orjson, ipywidgets, ipykernel, IPython, jupyter_client, traitlets, tornado, nbdev, execnb, fastcore, pytest, pytest_timeout'

# The GPU image's Python packages ('cuda' image, as read on 2026-11-17; see the device notes, KINDS.md)
IMAGE_HAS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
norm() { tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g'; }
if [ -n "${GPU_HAVE:-}" ]; then have=$(sed -E 's/[ =<>!~;[].*//' "$GPU_HAVE" | grep -v '^#' | norm | sort -u)
else have=$(echo $IMAGE_HAS | tr ' ' '\n' | norm | sort -u); fi

PY=${GPU_WHEELS_PYTHON:-}
if [ -z "$PY" ]; then for c in python3.12 python3; do if $c -c 'import pip' >/dev/null 2>&1; then PY=$c; break; fi; done; fi
[ -n "$PY" ] || { echo "gpu_wheels: no Python with pip found (set GPU_WHEELS_PYTHON)"; exit 1; }
ver=$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$ver" = 3.12 ] || echo "gpu_wheels: note: pip runs on Python $ver; dependency markers are evaluated for $ver, not 3.12"

tmp=$(mktemp -d -t ddp_nb-gpu-wheels-XXXXXX); trap 'rm -rf "$tmp"' EXIT
echo "== resolving and downloading the closure of: ${WANT[*]} (pip on $($PY -V 2>&1))"
$PY -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$tmp/all" \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 "${WANT[@]}" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
[ "${PIPESTATUS[0]}" = 0 ] || { echo "gpu_wheels: pip download failed"; exit 1; }

mkdir -p "$DEST" "$tmp/image"
rm -f "$DEST"/*.whl
for w in "$tmp"/all/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | norm)
  case "$name" in torch|triton|nvidia-*) mv "$w" "$tmp/image/"; continue;; esac   # never carried: the image's own
  if grep -qx "$name" <<<"$have"; then mv "$w" "$tmp/image/"; else cp "$w" "$DEST/"; fi
done
dups=$(ls "$DEST" | cut -d- -f1 | norm | sort | uniq -d)
[ -z "$dups" ] || { echo "gpu_wheels: two versions of: $dups"; exit 1; }
echo "== $DEST/: $(ls "$DEST" | wc -l) wheels the GPU image lacks"
ls -l "$DEST" | awk 'NR>1 {printf "  %-75s %7.1f KiB\n", $9, $5/1024}'
kib=$(du -sk "$DEST" | cut -f1)
echo "== total: $(awk "BEGIN {printf \"%.1f\", $kib/1024}") MiB (limit $MAX_MIB MiB); dropped as already in the image: $(ls "$tmp/image" | sed -E 's/-[0-9].*//' | tr '\n' ' ')"
[ "$kib" -le $((MAX_MIB * 1024)) ] || { echo "gpu_wheels: .whl/ is over $MAX_MIB MiB"; exit 1; }

# What the carried wheels ask of the image's packages: the image must satisfy these (versions there: pip list)
echo "== requirements the carried wheels place on packages the image provides:"
for w in "$DEST"/*.whl; do
  unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist:' | grep -v 'extra ==' | sed 's/^Requires-Dist: //' |
  while read -r req; do n=$(echo "$req" | sed -E 's/[ ;<>=!~(\[].*//' | norm)
    if grep -qx "$n" <<<"$have"; then echo "  $(basename "$w" | cut -d- -f1): $req"; fi; done || true
done | sort -u

[ $CHECK = 1 ] || exit 0
# The check, with no index: a Python 3.12 'image' (the dropped wheels of the same closure) plus .whl/ must satisfy
# every requirement, installed the two ways: resolved by pip, and as tools/test_gpu.sh does (--no-deps --target + PYTHONPATH)
if [ "$ver" != 3.12 ]; then echo "== install check skipped: it needs a Python 3.12 (GPU_WHEELS_PYTHON)"; exit 0; fi
echo "== install check (no index): Python 3.12 venv with the image's share of the closure, then .whl/"
export PIP_CONFIG_FILE=/dev/null; unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL   # nothing but these folders
$PY -m venv "$tmp/venv"; V="$tmp/venv/bin/python"
$V -m pip install -q --disable-pip-version-check --no-index --no-deps "$tmp"/image/*.whl
$V -m pip install -q --disable-pip-version-check --no-index --find-links "$DEST" "${WANT[@]}"
$V -m pip check
$V -c "import $IMPORTS; print('   resolved install: imports ok')"
"$tmp/venv/bin/nbdev_test" --help >/dev/null && echo "   nbdev_test runs"
$PY -m venv "$tmp/venv2"; V2="$tmp/venv2/bin/python"
$V2 -m pip install -q --disable-pip-version-check --no-index --no-deps "$tmp"/image/*.whl
$V2 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$tmp/site" "$DEST"/*.whl
PYTHONPATH="$tmp/site" $V2 -m pip check
PYTHONPATH="$tmp/site" $V2 -c "import $IMPORTS; print('   --target install (as test_gpu.sh does): imports ok')"
PYTHONPATH="$tmp/site" $V2 "$tmp/site/bin/nbdev_test" --help >/dev/null && echo "   nbdev_test from the --target install runs"
echo "== ok"
