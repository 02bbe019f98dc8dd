# call 4: the quick screen of both families on the exact build (session 41's check of every package kernel built exact)
source _run/head.sh
step screen_quick 380 python3 -m dflash2_numba.screen all --quick --no-timing --json $OUT/screen_quick.json
tail -n 6 $OUT/screen_quick.log
