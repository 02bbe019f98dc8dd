# call 1 (short): tests/test_screen.py on a GPU, verbose, long tracebacks (session 38's unexplained failure)
# (_run/head.sh was bench/logs/session38_2026-12-06/head.sh, unchanged)
source _run/head.sh
export DFLASH2_GPU=1
step test_screen 230 python3 -m pytest -v -p no:cacheprovider -rfEs --tb=long -x tests/test_screen.py
grep -E "PASSED|FAILED|ERROR|SKIPPED" $OUT/test_screen.log | cut -c1-160
grep -nE "^E |Error" $OUT/test_screen.log | head -30
