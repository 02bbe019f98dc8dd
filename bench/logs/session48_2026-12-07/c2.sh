# call 2 -- NEVER RAN (an H200 asked for from 19:41 to 20:31 UTC: four starts failed, three calls were refused without a try): what it would have run
source _run/head.sh
if ! grep -q H200 $OUT/device.txt; then echo "not an H200: nothing run"; exit 0; fi
step bench_attention 280 python3 bench/attention.py --variants frozen,tiled,tiled_compact,tiled_wide,tiled_perm --out $OUT/attention --budget-s 230
grep -E " graph " $OUT/bench_attention.log | head -40
step test_combine_bound 100 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs -m gpu tests/test_combine_bound_gpu.py
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" $OUT/test_combine_bound.log | cut -c1-160
step bench_gdn 215 python3 bench/gdn.py --lengths 4096,32768,65536 --variants chunked_ahead,chunked_rec_pipe --trials 5 --out $OUT/gdn --budget-s 190
grep -E "/graph|rel L2|FMA|copy" $OUT/bench_gdn.log | head -30
