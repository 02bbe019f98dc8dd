# call 5: the changed test files again on a GPU, with the rotated-input-sets test fixed (call 4 stopped at its failure)
source _run/head.sh
export DFLASH2_GPU=1
step tests_changed 190 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_bench_failures.py tests/test_bench_args.py tests/test_combine_batched_sim.py tests/test_screen.py tests/test_attention_variants_sim.py tests/test_gdn_variants_sim.py
