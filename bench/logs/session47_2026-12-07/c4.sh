# call 4 (tree as COMMIT): call 3 again after ArrayArg keeps its pointer; the call-device tests and API files again
source _run/head.sh
PYTHONPATH=$PWD python3 ../device_check_cost.py 2>&1 | grep -v Warn | tee $OUT/device_check_cost.log
export DFLASH2_GPU=1
step tests_api 200 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_call_device_gpu.py tests/test_attention_validation.py tests/test_gdn_api.py tests/test_validation_strides_and_aliasing.py tests/test_streams_and_outputs.py tests/test_public_api.py tests/test_reliability_gpu.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_api.log | tail -n 12
