# sourced by each call script: device facts, commit, clean tree
set -u
export PYTHONUNBUFFERED=1 DFLASH2_COMMIT=$(cat _run/COMMIT)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
cd _run/clean || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/device.txt
python3 -c "import numba, numba_cuda, numpy; print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'numpy', numpy.__version__)" | tee -a $OUT/device.txt
echo "tree $DFLASH2_COMMIT $(date -u +%FT%TZ)" | tee -a $OUT/device.txt
step() {  # step NAME TIMEOUT CMD...: run with a limit, log to $OUT/NAME.log, print rc, time and tail
  local name=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout $lim "$@" > $OUT/$name.log 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s)-t0 ))s: $*"; tail -n 4 $OUT/$name.log
}
