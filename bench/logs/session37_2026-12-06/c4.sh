# call 4: the scratch-fill tests after the walk's fix; the full GDN screen of chunked_overlap
source _run/head.sh
export DFLASH2_GPU=1
step gpu_fill 200 python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_gdn_scratch_fill.py -m gpu
unset DFLASH2_GPU
step screen_gdn_overlap 240 python3 -m dflash2_numba.screen gdn --no-timing --variants chunked_overlap --json $OUT/screen_gdn_overlap.json
