# call 3 -- NEVER RAN (20:45 UTC: no new device machine lent for the rest of the session): what it would have run
source _run/head.sh
export DFLASH2_GPU=1
step tests_new 200 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_gdn_knobs.py tests/test_readme_example.py tests/test_emulated_cc.py tests/test_hb_probes.py tests/test_gdn_api.py tests/test_profile_tools.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_new.log | tail -n 12
step gpu_suite 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 8
unset DFLASH2_GPU
step bench_gdn 110 python3 bench/gdn.py --lengths 65536 --variants chunked_ahead,chunked_rec_pipe --trials 5 --no-peers --out $OUT/gdn --budget-s 90
grep -E "/graph|rel L2|FMA|copy" $OUT/bench_gdn.log | head -12
if grep -q H200 $OUT/device.txt; then
  step bench_attention 150 python3 bench/attention.py --variants frozen,tiled_perm --contexts 261888 --out $OUT/attention --budget-s 120
  grep -E " graph " $OUT/bench_attention.log | head -20
fi
