# call 2: the full GDN screen of the other variants on the matrix (varlen with empty sequences, fp32 h0 no-l2 new since session 35)
source _run/head.sh
step screen_gdn_a 285 python3 -m dflash2_numba.screen gdn --no-timing --variants serial,chunked_split,chunked_pipe,chunked_ws,chunked_wsr --json $OUT/screen_gdn_a.json
step screen_gdn_b 285 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked_smprep,chunked_wsr_two_loop,chunked_rec,chunked_rec_pipe --json $OUT/screen_gdn_b.json
