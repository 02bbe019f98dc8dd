# call 1 -- NEVER RAN (no device machine could be started in session 49, 23:05-00:37 UTC): session 48's commits after its call 1 and session 49's test, bench and docstring commits (tree d9f31e4), on any GPU
# (the host has no cuda12 extra: its sm_70 ptxas tests skip by DFLASH2_SKIP_MISSING=1)
source _run/head.sh
export DFLASH2_GPU=1 DFLASH2_SKIP_MISSING=1
step tests_new 150 python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_gdn_knobs.py tests/test_readme_example.py tests/test_emulated_cc.py tests/test_hb_probes.py tests/test_gdn_api.py tests/test_profile_tools.py tests/test_run_requirements.py tests/test_public_api.py tests/test_bench_args.py tests/test_bench_failures.py tests/test_attention_validation.py tests/test_kernel_docstrings.py
grep -E "passed|failed|FAILED|ERROR" $OUT/tests_new.log | tail -n 12
step gpu_suite 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 --dist worksteal -rfEs tests/
grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_suite.log | tail -n 8
unset DFLASH2_GPU
step bench_gdn 100 python3 bench/gdn.py --lengths 65536 --variants chunked_ahead,chunked_rec_pipe --trials 5 --no-peers --out $OUT/gdn --budget-s 80
grep -E "/graph|rel L2|FMA|copy|graph" $OUT/bench_gdn.log | head -14
# (the attention bench's graph check is left to a later call: device time ran short)
