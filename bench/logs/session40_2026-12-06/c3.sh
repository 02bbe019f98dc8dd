# call 3: the test files changed after session 39's calls, under DFLASH2_GPU=1 (the quick-screen command test deselected: the quick screen alone runs past 250 s here)
source _run/head.sh
export DFLASH2_GPU=1
step tests_owed 330 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_gpu_host_semantics.py tests/test_validation_strides_and_aliasing.py tests/test_simulator_patches.py tests/test_screen.py --deselect tests/test_screen.py::test_quick_screen_command_passes
grep -E "FAILED|ERROR" $OUT/tests_owed.log | cut -c1-220 | head -30
tail -n 3 $OUT/tests_owed.log
