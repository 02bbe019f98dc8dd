# call 3: call 2's first group again without serial (that group ran past 285 s), then serial alone
source _run/head.sh
step screen_gdn_a 290 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked_split,chunked_pipe,chunked_ws,chunked_wsr --json $OUT/screen_gdn_a.json
step screen_gdn_serial 240 python3 -m dflash2_numba.screen gdn --no-timing --variants serial --json $OUT/screen_gdn_serial.json
