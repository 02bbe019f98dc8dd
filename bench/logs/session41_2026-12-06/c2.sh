# call 2: the quick screen on a GPU (both families, no timing), owed since session 38
source _run/head.sh
step screen_quick 520 python3 -m dflash2_numba.screen all --quick --no-timing --json $OUT/screen_quick.json
tail -n 6 $OUT/screen_quick.log
