#!/usr/bin/env bash
# The GPU suite (`make test-gpu`), for a machine with NVIDIA GPUs: the machine, then `pytest -m gpu tests/`, the GPU
# benchmark row (ddp_nb vs torchrun --nproc_per_node=1) and `nbdev_test --flags cuda` (plus multigpu with >= 2 GPUs)
# on the notebooks that have such cells. Fails when no GPU is visible, so it cannot pass vacuously.
#
# Without a package registry there, it installs the wheels in .whl/ (made by tools/gpu_wheels.sh where pip reaches
# PyPI) with --no-index --no-deps into a folder of its own, put on PYTHONPATH with the repository (nothing is
# installed into the machine's Python). Everything it prints goes to build/gpu/log.txt; build/gpu/summary.json has
# the machine and each phase's result; build/gpu/bench.md the benchmark; build/gpu/pytest.xml the test report.
# Each phase is time-limited and the whole stays within GPU_BUDGET_S (default 570 s).
#
#   GPU_PYTHON=python3        the interpreter that has torch with CUDA
#   GPU_PHASES="pytest bench notebooks"   the phases to run, in this order (also: explain, the profile of a small step)
#   GPU_TESTS="tests/"        what the pytest phase runs, in this order (files or node ids)
#   GPU_OUT=DIR               also copy build/gpu/* there at the end (e.g. a folder that is fetched back)
#   GPU_WHEELS=.whl           where the wheels are
#   GPU_BUILD=build/gpu       where the log and the summary go
#   GPU_REHEARSAL=1           on a machine without a GPU, run the phases anyway (they skip) to check this script;
#                             the exit status is still 2 (no GPU), so a rehearsal never passes
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${GPU_BUILD:-build/gpu}
mkdir -p "$OUT"; rm -rf "$OUT"/*
exec > >(tee "$OUT/log.txt") 2>&1
PY=${GPU_PYTHON:-python3}
PHASES=${GPU_PHASES:-pytest bench notebooks}
BUDGET=${GPU_BUDGET_S:-570}
SITE=${GPU_SITE:-/tmp/ddp_nb-gpu-site}
export PYTHONUNBUFFERED=1; unset IPP_NONINTERACTIVE  # as users run
export IPYTHONDIR="$(mktemp -d -t ddp_nb-gpu-ipython-XXXXXX)"   # private: our clusters are found (and cleaned) by it
: > "$OUT/phases.tsv"

finish() {  # summary.json from the machine facts and the phases; copy out; exit with $1
  local rc=$1
  "$PY" - "$OUT" "$rc" <<'EOF' || echo '{"ok": false, "error": "could not write the summary"}' > "$OUT/summary.json"
import json, sys, pathlib
out, rc = pathlib.Path(sys.argv[1]), int(sys.argv[2])
m = out / 'machine.json'
phases = [dict(zip(('phase', 'status', 'rc', 'seconds', 'limit_s'), l.split('\t'))) for l in (out / 'phases.tsv').read_text().splitlines() if l]
for p in phases: p['rc'], p['seconds'], p['limit_s'] = int(p['rc']), int(p['seconds']), int(p['limit_s'])
s = dict(ok=rc == 0, exit=rc, machine=json.loads(m.read_text()) if m.exists() else None, phases=phases)
(out / 'summary.json').write_text(json.dumps(s, indent=1))
print(json.dumps(s, indent=1))
EOF
  if [ -n "${GPU_OUT:-}" ]; then mkdir -p "$GPU_OUT" && cp -r "$OUT"/* "$GPU_OUT"/ 2>/dev/null; fi
  exit "$rc"
}
cleanup() {
  PYTHONPATH="${PYTHONPATH:-$ROOT}" "$PY" -c "from ddp_nb.cli import main; main(['cleanup', '--all', '--ipython-dir', '$IPYTHONDIR'])" >/dev/null 2>&1
  rm -rf "$IPYTHONDIR"
}
trap cleanup EXIT

# ---- the machine: printed first, so every log says what it ran on
echo "=== machine ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $(nproc) cores)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,utilization.gpu --format=csv || true
else echo "nvidia-smi: not found"; fi
"$PY" - "$OUT/machine.json" <<'EOF'
import json, os, platform, subprocess, sys
d = dict(python=platform.python_version(), executable=sys.executable, host=platform.node(), cores=os.cpu_count())
try:
    import torch
    d.update(torch=torch.__version__, cuda=torch.version.cuda, gpus=torch.cuda.device_count())
    d['gpu_names'] = [torch.cuda.get_device_name(i) for i in range(d['gpus'])]
    if d['gpus']: d['nccl'] = '.'.join(map(str, torch.cuda.nccl.version()))
except Exception as e: d.update(torch=None, gpus=0, torch_error=f"{type(e).__name__}: {e}")
try: d['driver'] = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'], capture_output=True, text=True, timeout=30).stdout.split('\n')[0].strip() or None
except Exception: d['driver'] = None
g = '/proc/driver/nvidia/gpus'   # what ddp_nb.cluster.local_gpus() counts
d['proc_driver_nvidia_gpus'] = len(os.listdir(g)) if os.path.isdir(g) else None
d['CUDA_VISIBLE_DEVICES'] = os.environ.get('CUDA_VISIBLE_DEVICES')
json.dump(d, open(sys.argv[1], 'w'), indent=1)
for k, v in d.items(): print(f"{k:>24}: {v}")
EOF
GPUS=$("$PY" -c "import json; print(json.load(open('$OUT/machine.json')).get('gpus') or 0)" 2>/dev/null || echo 0)
WHL=${GPU_WHEELS:-.whl}
if [ "${GPUS:-0}" -lt 1 ] && [ -n "${GPU_REHEARSAL:-}" ]; then
  echo "NO GPU VISIBLE. REHEARSAL: the phases run anyway (GPU tests skip); the exit status is 2 whatever they do."
elif [ "${GPUS:-0}" -lt 1 ]; then
  echo "NO GPU VISIBLE: torch.cuda.device_count() is 0 with $PY (or torch does not import). The GPU suite must run on a"
  echo "machine with an NVIDIA GPU and a CUDA build of torch; nothing was tested."
  printf 'machine\tno-gpu\t2\t0\t0\n' >> "$OUT/phases.tsv"
  finish 2
fi

# ---- what the image lacks: from .whl/, offline, into a folder of our own
echo "=== install"
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1; unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL
if ls "$WHL"/*.whl >/dev/null 2>&1; then
  rm -rf "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHL"/*.whl || { echo "installing $WHL/ failed"; finish 3; }
  echo "$(ls "$WHL"/*.whl | wc -l) wheels from $WHL/ installed into $SITE"
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
else
  echo "no $WHL/: using what $PY has (make it with tools/gpu_wheels.sh on a machine with a registry)"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c "import ipyparallel, zmq, ipykernel, nbdev, execnb, pytest, pytest_timeout, ddp_nb; print('imports ok: ddp_nb', ddp_nb.__version__, '· ipyparallel', ipyparallel.__version__, '· nbdev', nbdev.__version__)"; then
  echo "The GPU suite's packages do not import. Run tools/gpu_wheels.sh where pip reaches PyPI and bring .whl/ along."
  printf 'install\tfailed\t3\t0\t0\n' >> "$OUT/phases.tsv"
  finish 3
fi
"$PY" -m pip check 2>&1 | head -20 || true    # informational: the image's own packages may disagree among themselves
printf 'install\tok\t0\t%s\t0\n' "$SECONDS" >> "$OUT/phases.tsv"

failed=0
phase() {  # phase NAME LIMIT_S CMD... : time-limited, and never past the whole budget
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - SECONDS - 15)) t0=$SECONDS rc
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "=== $name: SKIPPED (the ${BUDGET}s budget is spent)"; printf '%s\tskipped\t0\t0\t0\n' "$name" >> "$OUT/phases.tsv"; failed=1; return 1
  fi
  echo "=== $name (limit ${limit}s)"
  timeout --kill-after=15 "$limit" "$@"; rc=$?
  local st=$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] || [ $rc = 137 ] && echo timeout || echo failed))
  echo "=== $name: $st (exit $rc) in $((SECONDS - t0))s"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$st" "$rc" "$((SECONDS - t0))" "$limit" >> "$OUT/phases.tsv"
  [ $rc = 0 ] || failed=1
  return $rc
}

flags=cuda; [ "$GPUS" -ge 2 ] && flags="cuda multigpu"
for p in $PHASES; do case $p in
  pytest) phase "pytest -m gpu ${GPU_TESTS:-tests/}" "${GPU_PYTEST_S:-420}" "$PY" -m pytest -m gpu ${GPU_TESTS:-tests/} -v -rA -p no:cacheprovider --timeout 240 \
            --junitxml "$OUT/pytest.xml" ;;
  bench) phase "benchmark: ddp_nb vs torchrun on the GPU" 330 "$PY" -m benchmarks.gpu --windows 40 --out "$OUT/bench.md" ;;
  explain) phase "where the smallest step's time goes, each side" 300 "$PY" -m benchmarks.gpu --explain --out "$OUT/explain.md" \
             --trace-dir "$OUT/traces" ;;
  notebooks)
    nbs=$("$PY" - "$flags" "$GPUS" <<'EOF'
import json, pathlib, re, sys
flags, gpus = set(sys.argv[1].split()), int(sys.argv[2])
for p in sorted(pathlib.Path('nbs').glob('*.ipynb')):
    cells = [''.join(c['source']) for c in json.loads(p.read_text())['cells'] if c['cell_type'] == 'code']
    if not any(flags & set(re.findall(r'^\s*#\|\s*(\w+)\s*$', s, re.M)) for s in cells): continue
    n = max([int(m) for s in cells for m in re.findall(r'DDPCluster\(n=(\d+)', s)] or [1])
    if n > gpus: print(f"skipped: {p} starts DDPCluster(n={n}): nccl needs {n} GPUs, this machine has {gpus}", file=sys.stderr)
    else: print(p)
EOF
)
    [ -z "$nbs" ] && { echo "=== notebooks: none to run with $GPUS GPU(s) (see the lines above)"; printf 'notebooks\tnone\t0\t0\t0\n' >> "$OUT/phases.tsv"; }
    for nb in $nbs; do phase "nbdev_test --flags '$flags' $nb" 150 nbdev_test --flags "$flags" --n_workers 1 --timing --path "$nb"; done ;;
  *) echo "unknown phase $p (GPU_PHASES: pytest bench notebooks explain)"; failed=1 ;;
esac; done

left=$("$PY" -c "
import os
from ddp_nb.processes import cluster_procs
def mine(p):
    try: return p.environ().get('IPYTHONDIR') == os.environ['IPYTHONDIR']
    except Exception: return False
print(len([p for p in cluster_procs() if mine(p)]))" 2>/dev/null)
echo "ddp_nb cluster processes still running after the GPU suite: ${left:-?}; total ${SECONDS}s"
[ "${GPUS:-0}" -lt 1 ] && { echo "REHEARSAL without a GPU: exit 2"; finish 2; }
finish $failed
