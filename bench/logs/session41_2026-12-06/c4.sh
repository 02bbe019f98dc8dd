# call 4: the full GDN screen without contraction, first half of the variants (frozen chunked is every chunked variant's bitwise reference)
source _run/head.sh
step screen_gdn_a 460 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked,chunked_ahead,chunked_overlap,chunked_rec_pipe,chunked_rec,chunked_smprep --json $OUT/screen_gdn_a.json
tail -n 4 $OUT/screen_gdn_a.log
