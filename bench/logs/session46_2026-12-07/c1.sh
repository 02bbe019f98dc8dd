# call 1 (tree 6160c41): this session's API checks on a GPU; on an H200 also the attention bench and the combine-bound test (an H100 came)
source _run/head.sh
export DFLASH2_GPU=1
step tests_api 300 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_attention_validation.py tests/test_gdn_api.py tests/test_streams_and_outputs.py tests/test_validation_strides_and_aliasing.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_api.log | tail -n 8
step oom_probe 120 python3 ../oom_probe.py
cat $OUT/oom_probe.log
unset DFLASH2_GPU
if ! grep -q H200 $OUT/device.txt; then echo "not an H200: no bench"; exit 0; fi
step bench_attention 300 python3 bench/attention.py --variants frozen,tiled,tiled_compact,tiled_wide,tiled_perm --out $OUT/attention --budget-s 260
grep -E "^\|" $OUT/bench_attention.log | head -40
step test_combine_bound 120 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs -m gpu tests/test_combine_bound_gpu.py
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/test_combine_bound.log | cut -c1-160
