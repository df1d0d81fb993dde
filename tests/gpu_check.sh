#!/usr/bin/env bash
# GPU check, for a session lent a CUDA machine (the `device` tool), run from the repository
# root there. Everything else in tests/ runs the device tier on torch's CPU device; this
# runs the CUDA paths for real and measures one capture and one drain against torch's own
# copies. That machine's python3 holds a CUDA torch, numpy, h5py and xxhash but nothing
# can be fetched there: carry cachetools as a wheel, made here with
#   pip download --no-deps -d .gpu-wheels cachetools
# and run:  bash tests/gpu_check.sh   (with carry=[".gpu-wheels"]); results go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d)}
python3 -m pip install -q --no-deps --no-index --find-links .gpu-wheels cachetools
python3 -m pip install -q --no-deps --no-build-isolation -e .
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; \
print(torch.__version__, torch.cuda.get_device_name())" | tee "$out/device.txt"
set +e
TIERED_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_device.py \
    tests/test_roundtrip.py 2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
set -e
python3 - "$out/capture.json" <<'PY'
import json, sys, time
import torch
import tiered

n = 1 << 30  # 1 GiB of float32 on the GPU
src = torch.rand(n // 4, device="cuda")
dst = torch.empty_like(src)
pinned = torch.empty(n // 4, pin_memory=True)


def best(fn, repeat=5):
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times)


copy_d2d = best(lambda: dst.copy_(src))
copy_d2h = best(lambda: pinned.copy_(src))
cache = tiered.Cache([tiered.DeviceTier(2 * n), tiered.HostTier(2 * n)])
store = best(lambda: cache.store("x", src))
drain = best(lambda: (cache.store("x", src), cache.flush()))
back = best(lambda: cache.revisit("x", out=dst))
assert torch.equal(dst, src)
cache.close()
rows = {"gib": n / 2**30, "copy_d2d_s": copy_d2d, "store_s": store, "store_vs_copy": store / copy_d2d,
        "copy_d2h_pinned_s": copy_d2h, "store_and_drain_s": drain,
        "drain_vs_pinned_copy": (drain - store) / copy_d2h, "revisit_s": back}
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
exit "$rc"
