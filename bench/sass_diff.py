#!/usr/bin/env python3
"""Did a source change alter the machine code of the GDN state kernels? Compiles
``gdn_ws_state``, ``gdn_wsr_state``, ``gdn_split_state``, ``gdn_split_pipe`` and
``gdn_rec_state`` (first signature, their launch bounds) to sm_90 SASS for the package found
on ``sys.path`` and writes one instruction per line (addresses dropped). Run it in two trees
and compare the files. No GPU is needed: it uses the ptxas of the ``cuda12`` extra and an
``nvdisasm`` given by ``--nvdisasm``.

    (cd old_tree && python3 bench/sass_diff.py --out /tmp/old --nvdisasm N)
    (cd new_tree && python3 bench/sass_diff.py --out /tmp/new --nvdisasm N)
    cmp /tmp/old/ws.sass /tmp/new/ws.sass
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from bench.sass_loops import sm90_sass  # noqa: E402


def kernels():
    import dflash2_numba.gdn.chunked_pipe as P
    import dflash2_numba.gdn.chunked_rec as RC
    import dflash2_numba.gdn.chunked_split as S
    import dflash2_numba.gdn.chunked_ws as W
    import dflash2_numba.gdn.chunked_wsr as R

    return {"ws": (W.gdn_ws_state_kernel, W._state_signatures()[0], W.WS_LAUNCH_BOUNDS),
            "wsr": (R.gdn_wsr_state_kernel, W._state_signatures()[0], W.WS_LAUNCH_BOUNDS),
            "split": (S.gdn_split_state_kernel, S._state_signatures()[0],
                      S.STATE_LAUNCH_BOUNDS),
            "pipe": (P.gdn_split_pipe_kernel, P._pipe_signatures()[0], None),
            "rec": (RC.gdn_rec_state_kernel, RC._state_signatures()[0], RC.STATE_LAUNCH_BOUNDS)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--nvdisasm", required=True, help="path of an nvdisasm that reads sm_90")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (fn, sig, bounds) in kernels().items():
        sass, _, _ = sm90_sass(fn, sig, bounds, out / name, args.nvdisasm)
        # (addresses dropped; numba's ABI tag in mangled names, "B3v26", counts compiles)
        lines = [re.sub(r"B\d+v\d+B", "BvB", re.sub(r"/\*[0-9a-f]+\*/", "", ln))
                 .split(";")[0].strip()
                 for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
        (out / f"{name}.sass").write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(lines)} instructions -> {out / (name + '.sass')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
