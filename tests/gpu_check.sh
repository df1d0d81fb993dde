#!/usr/bin/env bash
# GPU check, for a session lent a CUDA machine (the `device` tool), run from the repository
# root there. Everything else in tests/ runs the device tier on torch's CPU device; this
# runs the tier tests with the device tier on CUDA, the CUDA-only tests, the RTM with its
# wavefields on the GPU, tests/gpu_measure.py (capture / drain / revisit against torch's own
# copies) and `tiered bench adjoint --device cuda` (GPU snapshots, 6.25 GiB of history).
#
# That machine's python3 holds a CUDA torch, numpy, h5py and xxhash, but nothing can be
# fetched there. Make the wheels here, then run with carry=[".gpu-wheels"]:
#   rm -rf .gpu-wheels && python -m build -q --wheel --outdir .gpu-wheels . &&
#   pip download -q --no-deps --only-binary=:all: -d .gpu-wheels \
#       cachetools==8.0.2 checkpoint_schedules==1.0.4
#   bash tests/gpu_check.sh            # results (pytest log, JSON) go to $OUT
# The tests run from a copy of tests/ outside the checkout, against the wheel, as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$(mktemp -d)}
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .gpu-wheels/*.whl
export PYTHONPATH=$site PYTHONUNBUFFERED=1
work=$(mktemp -d)
cp -r tests "$work/tests"
printf '[pytest]\naddopts = -ra --strict-markers\nmarkers =\n    slow: longer tests\n' \
    > "$work/pytest.ini"
cd "$work"
python3 -c "import tiered, torch; assert torch.cuda.is_available(), 'no CUDA device'; \
print(torch.__version__, torch.cuda.get_device_name(), tiered.__file__)" | tee "$out/device.txt"
set +e
TIERED_TEST_DEVICE=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider \
    tests/test_device.py tests/test_roundtrip.py tests/test_adjoint.py tests/test_borrow.py \
    tests/test_rtm.py tests/test_units.py tests/test_prefetch.py \
    tests/test_bench_adjoint.py::test_device_rows_on_torch_tensors \
    2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
timeout 180 python3 tests/gpu_measure.py "$out/measure.json" --gib 1 2>&1 | tee "$out/measure.log"
mrc=${PIPESTATUS[0]}
bench=$root/.gpu-bench  # on the checkout's disk: /tmp may be memory-backed
mkdir -p "$bench"
df -T /tmp "$bench" | tee "$out/df.txt"
timeout 300 python3 -m tiered.cli bench adjoint --device cuda --n 2048 --nt 400 --rounds 2 \
    --workdir "$bench" --json "$out/adjoint-cuda.json" 2>&1 | tee "$out/adjoint-cuda.log"
brc=${PIPESTATUS[0]}
set -e
echo "pytest rc=$rc measure rc=$mrc bench rc=$brc (from $root)"
[ "$rc" -eq 0 ] && [ "$mrc" -eq 0 ] && [ "$brc" -eq 0 ]
