# call 6: tests/test_screen.py::test_quick_screen_command_passes under DFLASH2_GPU=1 (owed since session 38)
source _run/head.sh
step test_quick_screen 370 env DFLASH2_GPU=1 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_screen.py::test_quick_screen_command_passes
tail -n 3 $OUT/test_quick_screen.log
