# note (2026-12-06, session 39): the logs' Command lines show --budget-s 150 (gdn.py) and 170 (attention.py); this copy was edited after the run
# call 3: GDN benchmark (fla wheels carried) and the attention benchmark with the batched combine on this card
source _run/head.sh
step bench_gdn 260 python3 bench/gdn.py --lengths 4096,32768,65536 --variants chunked,chunked_ahead --trials 5 --out $OUT/gdn --budget-s 200
step bench_attention 300 python3 bench/attention.py --variants frozen,tiled_perm --out $OUT/attention --budget-s 240
