# call 2: the quick screen under DFLASH2_GPU=1 with --jobs 4 (owed since session 43), the GDN scratch-fill test, and on an H200 the combine-bound test
source _run/head.sh
export DFLASH2_GPU=1
step screen_quick_jobs 330 python3 -m dflash2_numba.screen all --quick --no-timing --jobs 4 --json $OUT/screen_quick_jobs.json
step scratch_fill 120 python3 -m pytest -q -m gpu tests/test_gdn_scratch_fill.py -k chunked_ahead -rA
if grep -q H200 $OUT/device.txt; then
  step combine_bound 120 python3 -m pytest -q -m gpu tests/test_combine_bound_gpu.py -rA
fi
