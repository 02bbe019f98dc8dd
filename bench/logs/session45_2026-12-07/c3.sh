# call 3: the whole gpu-marked suite on the exact build (not run whole since the GDN rounds; 39 tests), in 4 processes; then initcheck of chunked_ahead
source _run/head.sh
export DFLASH2_GPU=1
step gpu_suite 420 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs --durations 15 tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 12
SANITIZE_TOOLS=initcheck step san_gdn_init 150 bash bench/sanitize.sh $OUT/san_gdn_init --family gdn --variants chunked_ahead
