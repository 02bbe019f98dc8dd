# call 1: the tests owed since session 40's calls (exact_fp32 at DynShared's launch and _driver_set's compile, attn-ab), then the attention bench with its input sets and every register-tiled variant built without contraction
source _run/head.sh
python3 -c "import cuda.bindings, cuda.core; print('cuda.bindings', cuda.bindings.__version__, 'cuda.core', cuda.core.__version__)" 2>&1 | tee -a $OUT/device.txt
step tests_owed 150 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_exact_fp32.py tests/test_dynshared_host.py tests/test_profile_tools.py::test_attn_ab_rebuilds_give_the_registered_bytes
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/tests_owed.log | cut -c1-160
step bench_attention 360 python3 bench/attention.py --variants frozen,tiled,tiled_compact,tiled_wide,tiled_perm --out $OUT/attention --budget-s 320
grep -E "^\|" $OUT/bench_attention.log | head -40
