# call 5 (passed inline as the run command): initcheck of every attention variant
source _run/head.sh; SANITIZE_TOOLS=initcheck step san_attention_init_all 540 bash bench/sanitize.sh $OUT/san_attention_init_all --family attention; grep -c '^attention' $OUT/san_attention_init_all/sanitize_initcheck.log; tail -n 3 $OUT/san_attention_init_all/sanitize_initcheck.log
