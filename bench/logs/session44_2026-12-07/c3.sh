# call 3: the GDN sm_70 plans screened on the exact build (call 2's run passed its 330 s limit at 49 of 72 cases), cases in 6 processes
source _run/head.sh
export DFLASH2_EMULATE_CC=7.0
step screen_gdn_sm70 500 python3 -m dflash2_numba.screen gdn --no-timing --jobs 6 --json $OUT/screen_gdn_sm70.json
tail -n 3 $OUT/screen_gdn_sm70.log
