# call 2: the sm_70 plans screened on the exact build (owed since session 40): attention, then gdn, cases in 4 processes; the combine-bound test where an H200 came
source _run/head.sh
export DFLASH2_EMULATE_CC=7.0
step screen_attention_sm70 280 python3 -m dflash2_numba.screen attention --no-timing --jobs 4 --json $OUT/screen_attention_sm70.json
tail -n 3 $OUT/screen_attention_sm70.log
step screen_gdn_sm70 330 python3 -m dflash2_numba.screen gdn --no-timing --jobs 4 --json $OUT/screen_gdn_sm70.json
tail -n 3 $OUT/screen_gdn_sm70.log
unset DFLASH2_EMULATE_CC
if grep -q H200 $OUT/device.txt; then
  step test_combine_bound 90 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs -m gpu tests/test_combine_bound_gpu.py
  grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/test_combine_bound.log | cut -c1-160
fi
