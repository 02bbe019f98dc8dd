# call 4 (tree ce9fa75, inline): the quick screen on a GPU, cases in four processes
source _run/head.sh; export DFLASH2_GPU=1; step screen_quick 330 python3 -m dflash2_numba.screen all --quick --no-timing --jobs 4 --json $OUT/screen_quick.json; tail -n 3 $OUT/screen_quick.log
