# call 3 (tree ce9fa75, inline): the whole gpu-marked suite on the API changes
source _run/head.sh; export DFLASH2_GPU=1; step gpu_suite 400 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs --durations 10 tests/; grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 12
