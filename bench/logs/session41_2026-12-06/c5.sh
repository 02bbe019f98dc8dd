# call 5: the full GDN screen without contraction, second half of the variants (frozen chunked is every chunked variant's bitwise reference)
source _run/head.sh
step screen_gdn_b 460 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked_split,chunked_pipe,chunked_ws,chunked_wsr,chunked_wsr_two_loop,serial --json $OUT/screen_gdn_b.json
tail -n 4 $OUT/screen_gdn_b.log
