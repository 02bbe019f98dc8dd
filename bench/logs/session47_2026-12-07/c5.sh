# call 5 -- NEVER RAN (every start refused 16:53-17:30 UTC, then too few device seconds): what it would have run
source _run/head.sh
export DFLASH2_GPU=1
step tests 150 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_call_device_gpu.py tests/test_streams_and_outputs.py tests/test_reliability_gpu.py tests/test_attention_validation.py tests/test_gdn_api.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests.log | tail -n 12
unset DFLASH2_GPU
PYTHONPATH=$PWD timeout 40 python3 ../device_check_cost.py 2>&1 | grep -v Warn | tee $OUT/device_check_cost.log
