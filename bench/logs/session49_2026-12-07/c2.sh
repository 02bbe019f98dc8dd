# call 2 -- NEVER RAN (no device machine could be started in session 49, 23:05-00:37 UTC; device time short after refused starts: c1.sh never ran): the gpu-marked suite and the quick screen on tree a980aee
# (session 48's knob and session 49's test / bench / docstring / screen commits)
source _run/head.sh
step gpu_suite 190 env DFLASH2_GPU=1 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 8
step screen_quick 200 python3 -m dflash2_numba.screen all --quick --no-timing --jobs 4 --json $OUT/screen_quick.json
grep -E "checks|FAIL|passed" $OUT/screen_quick.log | tail -n 12
