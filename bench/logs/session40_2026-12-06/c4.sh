# call 4: with contraction off, the frozen kernels against their numpy emulations on a GPU, then the variant test files (owed since session 38)
source _run/head.sh
export DFLASH2_GPU=1
step tests_emulate 150 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_attention_emulate_sim.py tests/test_gdn_prefill.py
grep -E "FAILED|ERROR" $OUT/tests_emulate.log | cut -c1-220 | head -20
tail -n 2 $OUT/tests_emulate.log
step tests_variants 300 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_attention_variants_sim.py tests/test_gdn_variants_sim.py
grep -E "FAILED|ERROR" $OUT/tests_variants.log | cut -c1-220 | head -20
tail -n 2 $OUT/tests_variants.log
