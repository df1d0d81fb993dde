#!/usr/bin/env bash
# The CPU adjoint benchmark (`tiered bench adjoint`, numpy wavefields, every peer) on a
# machine with more cores than CI's two: the machine the `device` tool lends (16 cores, its
# own disk), where the drain and prefetch lanes get cores of their own instead of sharing
# the solver's. Run from the repository root there, with carry=[".gpu-wheels"] made here:
#   rm -rf .gpu-wheels && python -m build -q --wheel --outdir .gpu-wheels . &&
#   pip download -q --no-deps --only-binary=:all: -d .gpu-wheels \
#       cachetools==8.0.2 checkpoint_schedules==1.0.4 &&
#   pip wheel -q --no-deps -w .gpu-wheels pyrevolve==2.2.8 contexttimer==0.3.3
# (pyrevolve builds a C extension for this machine's Python; where the lent machine's
# Python differs, its rows are left out and the log says so.) Results go to $OUT; the
# whole script stops by BUDGET_S seconds (default 540), each stage getting what is left.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$(mktemp -d)}
end=$((SECONDS + ${BUDGET_S:-540}))
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    .gpu-wheels/tiered-*.whl .gpu-wheels/cachetools-*.whl .gpu-wheels/checkpoint_schedules-*.whl
rows=""
if ! python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" \
        .gpu-wheels/pyrevolve-*.whl .gpu-wheels/contexttimer-*.whl; then
    echo "pyrevolve wheel does not fit this Python: its rows left out" | tee "$out/note.txt"
    rows="--rows in-memory,schedules-multistage-numpy,tiered-reverse,tiered-reverse-dense,tiered-multistage"
fi
export PYTHONPATH=$site PYTHONUNBUFFERED=1
{ nproc; python3 -V; lscpu | grep -E "Model name|^CPU\(s\)"; free -g; df -T /tmp "$root"; } \
    2>&1 | tee "$out/machine.txt"
bench=$root/.gpu-bench  # on the checkout's disk: /tmp may be memory-backed
mkdir -p "$bench"
stage() {  # name, limit in seconds, then the bench's arguments
    local name=$1 limit=$2 left=$((end - SECONDS))
    shift 2
    ((left < limit)) && limit=$left
    ((limit < 20)) && { echo "$name: no time left"; return; }
    echo "== $name (up to $limit s)"
    # shellcheck disable=SC2086
    timeout "$limit" python3 -m tiered.cli bench adjoint --workdir "$bench" \
        --json "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log"
}
stage adjoint-4 330 --rounds 2 $rows
stage adjoint-1 150 --rounds 2 --substeps 1 \
    --rows in-memory,tiered-reverse,tiered-reverse-dense
stage adjoint-8 120 --rounds 1 --substeps 8 --rows in-memory,tiered-reverse
echo "done in $SECONDS s"
