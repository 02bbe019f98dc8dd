# call 2 (short): the rest of tests/test_screen.py and the session-38 GPU-behaviour tests on a GPU
# (_run/head.sh was bench/logs/session38_2026-12-06/head.sh, unchanged)
source _run/head.sh
export DFLASH2_GPU=1
step tests_new 120 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_exact_fp32.py tests/test_simulator_patches.py tests/test_gpu_host_semantics.py tests/test_validation_strides_and_aliasing.py
grep -E "FAILED|ERROR" $OUT/tests_new.log | cut -c1-200
tail -n 2 $OUT/tests_new.log
step test_screen_rest 150 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_screen.py --deselect tests/test_screen.py::test_screen_catches_wrong_variants
grep -E "FAILED|ERROR" $OUT/test_screen_rest.log | cut -c1-200
tail -n 2 $OUT/test_screen_rest.log
