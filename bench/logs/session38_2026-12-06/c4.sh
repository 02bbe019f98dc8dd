# call 4: the quick matrices (their new cases) and the test files changed since session 37's call 4, on a GPU
source _run/head.sh
step screen_quick 150 python3 -m dflash2_numba.screen all --quick --no-timing --json $OUT/screen_quick.json
export DFLASH2_GPU=1
step tests_changed 220 python3 -m pytest -q -p no:cacheprovider -rfEs -x tests/test_bench_failures.py tests/test_bench_args.py tests/test_combine_batched_sim.py tests/test_screen.py tests/test_attention_variants_sim.py tests/test_gdn_variants_sim.py
