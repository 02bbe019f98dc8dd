# call 4: initcheck of an attention variant, never run before (tiled_perm, the nine small cases; the script prints each case as it ends)
source _run/head.sh
SANITIZE_TOOLS=initcheck step san_attention_init 520 bash bench/sanitize.sh $OUT/san_attention_init --family attention --variants tiled_perm
grep -c '^attention' $OUT/san_attention_init/sanitize_initcheck.log
tail -n 5 $OUT/san_attention_init/sanitize_initcheck.log
