# call 1: the benchmarks after review 741b3cd at every length / context (fla wheels carried)
source _run/head.sh
step bench_gdn 300 python3 bench/gdn.py --lengths 4096,32768,65536 --variants chunked,chunked_ahead --trials 5 --out $OUT/gdn --budget-s 260
step bench_attention 290 python3 bench/attention.py --variants frozen,tiled_perm --out $OUT/attention --budget-s 250
