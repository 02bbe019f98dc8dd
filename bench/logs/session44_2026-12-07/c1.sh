# call 1: every other GDN variant timed without contraction (owed since session 40), fla from .whl in the same run
source _run/head.sh
step bench_gdn 570 python3 bench/gdn.py --lengths 4096,32768,65536 --variants chunked_ahead,chunked_overlap,chunked_rec_pipe,chunked_rec,chunked_smprep,chunked_split,chunked_pipe,chunked_ws,chunked_wsr,chunked_wsr_two_loop --trials 5 --out $OUT/gdn --budget-s 480
grep -A80 "^ceilings" $OUT/bench_gdn.log | head -80
