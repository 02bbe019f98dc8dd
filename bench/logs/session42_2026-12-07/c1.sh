# call 1: the exact-build tests owed since session 41 (every package kernel built exact wherever it is compiled), the attention bench (every variant, the batched combine, peers), and on an H200 the combine-bound test
source _run/head.sh
step tests_exact 200 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_exact_build.py tests/test_exact_fp32.py
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/tests_exact.log | cut -c1-160
step bench_attention 300 python3 bench/attention.py --variants frozen,tiled,tiled_compact,tiled_wide,tiled_perm --out $OUT/attention --budget-s 260
grep -E "^\|" $OUT/bench_attention.log | head -40
if grep -q H200 $OUT/device.txt; then
  step test_combine_bound 90 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs -m gpu tests/test_combine_bound_gpu.py
  grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/test_combine_bound.log | cut -c1-160
fi
