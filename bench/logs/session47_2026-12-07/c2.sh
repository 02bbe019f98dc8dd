# call 2: host time of the API per call with torch inputs, before (de061e5) and after (27c0600) the one-device checks, each tree twice in turn
source _run/head.sh
cd ..
for i in 1 2; do
  for tree in old clean; do
    PYTHONPATH=$PWD/$tree python3 call_overhead.py "$tree" 2>&1 | grep -v Warn | tee -a $OUT/call_overhead.log
  done
done
