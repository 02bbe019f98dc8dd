# call 3 -- NEVER RAN (no device machine could be started in session 49, 23:05-00:37 UTC; 224 s of device time left after six refused starts): the gpu-marked suite alone, on tree a980aee
source _run/head.sh
step gpu_suite 190 env DFLASH2_GPU=1 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 8
