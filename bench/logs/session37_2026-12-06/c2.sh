# call 2: the full attention screen (cache-scale cases new) and the full GDN screen of chunked_ahead
source _run/head.sh
step screen_attention 330 python3 -m dflash2_numba.screen attention --no-timing --json $OUT/screen_attention.json
step screen_gdn_ahead 240 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked_ahead --json $OUT/screen_gdn_ahead.json
