#!/usr/bin/env bash
# Session 36 GPU validation of sessions 34-35 host-side changes. One device call.
set -u
export PYTHONUNBUFFERED=1 DFLASH2_COMMIT=$(cat _run/COMMIT); cd _run/clean || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
python3 -c "import numba, numba_cuda, numpy; print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'numpy', numpy.__version__)" | tee -a $OUT/device.txt
t0=$(date +%s)
DFLASH2_GPU=1 timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_attention_validation.py \
  tests/test_attention_sim.py::test_device_arrays_in_device_arrays_out \
  tests/test_gdn_prefill.py::test_device_arrays_and_stream tests/test_gdn_api.py \
  tests/test_gdn_input_layouts.py tests/test_streams_and_outputs.py tests/test_special_values.py > $OUT/api_tests.log 2>&1; echo "api tests rc=$? $(( $(date +%s)-t0 ))s"; tail -n 4 $OUT/api_tests.log
t0=$(date +%s)
DFLASH2_GPU=1 timeout 290 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/ > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s)-t0 ))s"; tail -n 4 $OUT/gpu_tests.log
