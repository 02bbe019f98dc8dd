# call 3: host time of the one-device pieces themselves (call 2's end-to-end figures varied 2x between rounds)
source _run/head.sh
PYTHONPATH=$PWD python3 ../device_check_cost.py 2>&1 | grep -v Warn | tee $OUT/device_check_cost.log
