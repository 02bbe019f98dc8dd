# call 5: the benchmarks after their failure rules (accuracy of the timed plans, the peers' graph
# check, the fla graph under inference mode, rotated GDN input sets at 4096)
source _run/head.sh
step bench_gdn 150 python3 bench/gdn.py --lengths 4096,65536 --variants chunked_ahead --trials 5 --out $OUT/gdn --budget-s 110
step bench_attention 100 python3 bench/attention.py --contexts 32768 --variants tiled_perm --trials 5 --out $OUT/attention --budget-s 70
