"""A real driver out-of-memory error is told apart (is_out_of_memory) and named (memory_named)."""
import sys
sys.path.insert(0, ".")
import numpy as np
import dflash2_numba  # noqa: F401  (numpy shim before numba)
from dflash2_numba._compat import cuda
from dflash2_numba._arrays import is_out_of_memory, memory_named
import dflash2_numba as d2

try:
    cuda.device_array(2 ** 46, np.uint8)
    print("64 TiB allocated?!")
except Exception as exc:  # noqa: BLE001
    print("raw:", type(exc).__name__, str(exc)[:160], "| is_out_of_memory:", is_out_of_memory(exc))
try:
    with memory_named("x", "a probe"):
        cuda.device_array(2 ** 46, np.uint8)
except ValueError as exc:
    print("named:", str(exc)[:200])
try:
    d2.AttentionWorkspace(batch=2 ** 14, q_len=8, heads=64, head_dim=256, splits=4096)
except ValueError as exc:
    print("workspace:", str(exc)[:200])
