#!/usr/bin/env bash
# The test command (`make test`): sync checks, every notebook, then tests/. Each phase is timed and time-limited.
# `make test-slow` (tools/test.sh --slow): only the tests marked slow (the benchmarks end to end, long soaks).
set -uo pipefail
cd "$(dirname "$0")/.."
export IPYTHONDIR="$(mktemp -d -t ddp_nb-ipython-XXXXXX)"   # private: our clusters are found (and cleaned) by it
unset IPP_NONINTERACTIVE  # tests run as a user's notebook does; a test that needs it sets it for itself
export PYTHONUNBUFFERED=1
cleanup() { ddp_nb cleanup --all --ipython-dir "$IPYTHONDIR"; rm -rf "$IPYTHONDIR"; }
trap cleanup EXIT
failed=0
phase() {  # phase NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name"
  timeout --kill-after=30 "$limit" "$@"; local rc=$?
  echo "=== $name: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - t0))s"
  [ $rc = 0 ] || failed=1
  return $rc
}
in_sync() {  # nbdev_export / nbdev_clean / README must leave the tree as committed
  nbdev_export && nbdev_clean && python tools/make_readme.py || return 1
  if git rev-parse --git-dir >/dev/null 2>&1; then
    local dirty; dirty=$(git status --porcelain -- ddp_nb nbs README.md)
    [ -z "$dirty" ] || { echo "Not in sync with nbs/ (run nbdev_export, nbdev_clean, python tools/make_readme.py and commit):"; echo "$dirty"; git diff --stat; return 1; }
  else echo "(not a git checkout: sync not checked)"; fi
}
if [ "${1:-}" = --slow ]; then
  phase "pytest tests/ (marked slow)" 3600 python -m pytest tests -v -p no:cacheprovider --timeout 1200 -ra -m slow --durations=0
else
  phase "nbdev_export, nbdev_clean and README change nothing" 300 bash -c "$(declare -f in_sync); in_sync"
  phase "nbdev_test (all notebooks, one at a time)" 1500 nbdev_test --n_workers 1 --timing
  # (a guard against a hang, not a budget: 1,260-1,400 s on these 2 cores, beside one CPU hog; past 1,800 s beside two.
  # The phases' limits add up to 70 min, under CI's 90 with the installs, demo and docs.)
  phase "pytest tests/" 2400 python -m pytest tests -v -p no:cacheprovider --timeout 300 -ra -m "not slow" --durations=25
fi
ls build/browser/dashboard-*.png >/dev/null 2>&1 && echo "browser test screenshots of the dashboard: $(ls $PWD/build/browser/dashboard-*.png | tr "\n" " ")"
left=$(python -c "import sys; from ddp_nb.cli import clusters; print(sum(c['procs'] for c in clusters(sys.argv[1])))" "$IPYTHONDIR")
echo "ddp_nb cluster processes the tests left running (their IPYTHONDIR): $left"
[ "$left" = 0 ] || failed=1
exit $failed
