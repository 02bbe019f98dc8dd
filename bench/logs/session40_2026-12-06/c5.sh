# call 5: the rest of tests/test_gdn_variants_sim.py under DFLASH2_GPU=1 (call 4 stopped at its limit inside test_fp16_output_and_state)
source _run/head.sh
export DFLASH2_GPU=1
step tests_gdn_rest 240 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_gdn_variants_sim.py -k "not test_fp32_output_and_state and not test_twelve_column_plan"
grep -E "FAILED|ERROR" $OUT/tests_gdn_rest.log | cut -c1-220 | head -20
tail -n 2 $OUT/tests_gdn_rest.log
