# call 2: the GDN bench with the contraction fix (fla from .whl in the same run), then the quick screen
source _run/head.sh
step bench_gdn 300 python3 bench/gdn.py --lengths 4096,32768,65536 --variants chunked,chunked_ahead --trials 5 --out $OUT/gdn --budget-s 260
grep -E "^\|" $OUT/bench_gdn.log | head -30
step screen_quick 250 python3 -m dflash2_numba.screen all --quick --no-timing --json $OUT/screen_quick.json
tail -n 15 $OUT/screen_quick.log
