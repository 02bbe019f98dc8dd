# call 3: the full attention screen without contraction (every GPU screen before session 40 ran contracted builds)
source _run/head.sh
step screen_attention 440 python3 -m dflash2_numba.screen attention --no-timing --json $OUT/screen_attention.json
tail -n 4 $OUT/screen_attention.log
