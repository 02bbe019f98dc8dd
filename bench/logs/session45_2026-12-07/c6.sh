# call 6 (passed inline as the run command): initcheck of every GDN variant
source _run/head.sh; SANITIZE_TOOLS=initcheck step san_gdn_init_all 480 bash bench/sanitize.sh $OUT/san_gdn_init_all --family gdn; grep -c '^gdn' $OUT/san_gdn_init_all/sanitize_initcheck.log; tail -n 2 $OUT/san_gdn_init_all/sanitize_initcheck.log | cut -c1-600
