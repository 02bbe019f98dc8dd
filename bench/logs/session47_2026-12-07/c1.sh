# call 1 (tree 27c0600): one device a call -- the new gpu tests (two-GPU ones where two GPUs came), the API and stream test files, then the whole gpu-marked suite
source _run/head.sh
nvidia-smi -L | tee -a $OUT/device.txt
export DFLASH2_GPU=1
step call_device 240 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_call_device_gpu.py tests/test_call_device.py tests/test_dynshared_host.py
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" $OUT/call_device.log | cut -c1-200 | tail -n 30
step tests_api 200 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_attention_validation.py tests/test_gdn_api.py tests/test_validation_strides_and_aliasing.py tests/test_streams_and_outputs.py tests/test_public_api.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_api.log | tail -n 12
step gpu_suite 330 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs --durations 10 tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 12
