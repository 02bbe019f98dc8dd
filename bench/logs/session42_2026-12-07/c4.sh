source _run/head.sh
step tests_jobs 150 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_screen.py -k "jobs or usage_errors"
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/tests_jobs.log | cut -c1-160
