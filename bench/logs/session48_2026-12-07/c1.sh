# call 1 (tree as COMMIT): session 47's owed check of the commits after its call 4 -- the API / stream / call-device files, the whole gpu-marked suite, the device check's host cost  [../device_check_cost.py: bench/logs/session47_2026-12-07/device_check_cost.py, unchanged, copied into _run]
source _run/head.sh
nvidia-smi -L | tee -a $OUT/device.txt
PYTHONPATH=$PWD timeout 60 python3 ../device_check_cost.py 2>&1 | grep -v Warn | tee $OUT/device_check_cost.log
export DFLASH2_GPU=1
step tests_api 200 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_call_device_gpu.py tests/test_call_device.py tests/test_dynshared_host.py tests/test_attention_validation.py tests/test_gdn_api.py tests/test_validation_strides_and_aliasing.py tests/test_streams_and_outputs.py tests/test_public_api.py tests/test_reliability_gpu.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_api.log | tail -n 12
step gpu_suite 300 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs --durations 10 tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 12
