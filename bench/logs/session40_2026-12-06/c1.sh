# call 1: the contraction fix on a GPU (probe: package / package_lto / numba_default), the exact-fp32 tests, then the attention bench with the fix
# (_run/head.sh was bench/logs/session38_2026-12-06/head.sh, unchanged)
source _run/head.sh
python3 -c "import cuda.bindings, cuda.core; print('cuda.bindings', cuda.bindings.__version__, 'cuda.core', cuda.core.__version__)" 2>&1 | tee -a $OUT/device.txt
step fma_probe 120 python3 bench/fma_contraction_probe.py --out $OUT
grep -A3 '"package\|"numba_default\|nvvm' $OUT/fma_probe.log | head -40
step exact_fp32 150 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_exact_fp32.py
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/exact_fp32.log | cut -c1-160
step bench_attention 290 python3 bench/attention.py --variants frozen,tiled_perm --out $OUT/attention --budget-s 250
grep -E "^\|" $OUT/bench_attention.log | head -30
