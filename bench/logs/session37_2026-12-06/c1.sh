# call 1: the owed API tests and the gpu-marked suites past session 36's first 20
source _run/head.sh
export DFLASH2_GPU=1
step api 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gdn_input_layouts.py tests/test_special_values.py
step gpu_a 200 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_reliability_gpu.py tests/test_streams_and_outputs.py "tests/test_gdn_gpu.py::test_production_shape_against_fp64[chunked-32768]" "tests/test_gdn_gpu.py::test_production_shape_against_fp64[chunked-65536]"
step gpu_b 230 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_gdn_scratch_fill.py
