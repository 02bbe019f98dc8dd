#!/usr/bin/env bash
# Every GPU figure bench/RESULTS.md records, in stages that each fit one device call.
# Usage: DFLASH2_COMMIT=<sha> bash bench/run_all_gpu.sh OUTDIR STAGE...
#   stages: tests (gpu-marked pytest), sanitize, screen, bench-attention, bench-gdn,
#           screen-sm70 (the full screen planned as on a V100, DFLASH2_EMULATE_CC=7.0: the sm_70
#                     forms' code and a V100's shared-memory limits, compiled for this GPU;
#                     SM70_FAMILY, default all),
#           sanitize-sm70 (bench/sanitize.sh under DFLASH2_EMULATE_CC=7.0; SANITIZE_ARGS),
#           phase-clock (chunked_ws / chunked_wsr state passes, cycles per phase; CLOCK_VARIANTS),
#           copy-ceiling (L2 -> SM copy rate),
#           ncu-gdn (Nsight Compute report of one call's two kernels; NCU_VARIANT, default chunked_wsr),
#           ncu-gdn-source (per-instruction Nsight Compute report of one kernel of one call (NCU_KERNEL regex,
#                     default the state kernel; gdn_split_prep for the pre-pass),
#                     summed per phase by bench/ncu_source_segments.py; NCU_VARIANT, default chunked_wsr),
#           prep-forms (chunked_rec_pipe's pre-pass under each PREP_FORMS entry, SOLVE or SOLVE+WU,
#                     byte-checked and timed interleaved; default cols4,cols8),
#           hb-sass (bench/hb_mismatch_probe.py: the hb spellings' bytes, then their PTX and cubin
#                     under hb_cubin/ for a SASS diff with nvdisasm),
#           overlap (bench/overlap_probe.py: GDN's parallel kernels beside the recurrence, then
#                     chunked_overlap's per-segment timeline; OVERLAP_CONFIGS),
#           overlap-knobs (bench/overlap_knobs.py: chunked_overlap under each KNOBS_CONFIGS entry
#                     against chunked_rec_pipe at KNOBS_T tokens: bytes, eager and graph times),
#           out-tile (bench/out_tile_ab.py: chunked_rec_pipe / chunked_overlap under each output tile,
#                     bytes checked against chunked, the output kernel alone and the calls timed
#                     interleaved, at each OUT_TILE_T length, default 32768 65536),
#           rec-warps (bench/rec_loop_micro.py under REC_MICRO_CONFIGS, default the recurrence's units
#                     in turn, with phase 2's loads a step ahead, phase 1's two passes ahead, both
#                     phases at once and the column halves a step apart, then
#                     bench/smem_delivery.py: shared memory's bytes a cycle to the registers),
#           out-bounds (bench/out_bounds_ab.py: the 8 x 8 output kernel under each OUT_BOUNDS launch
#                     bound (128, B), default 3,4,2, bytes checked, timed interleaved at 65536),
#           attn-ab (ATTN_AB_VARIANT's split kernel, tiled_compact (default) or tiled_wide, under
#                     each ATTN_OPTIONS generator option set, bytes checked against the registered
#                     tiled_compact kernel, timed interleaved at 261888),
#           attn-combine (frozen's combine and the batched one alone on one tiled_perm split
#                     workspace at 261888: output bytes compared, interleaved event medians),
#           ncu-attn (per-instruction Nsight Compute report of one attention split launch at 261888,
#                     summed per phase by bench/ncu_source_segments.py, opcodes with modifiers
#                     too (--mix); NCU_ATTN_VARIANT,
#                     default tiled_compact)
set -u
out=${1:?usage: run_all_gpu.sh OUTDIR STAGE...}
shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
status=0
for stage in "$@"; do
  start=$(date +%s)
  case "$stage" in
    tests)
      DFLASH2_GPU=1 DFLASH2_RESULTS="$out/gpu_tests.jsonl" python3 -m pytest -q -s -p no:cacheprovider \
          -m gpu ${GPU_TESTS:-tests} > "$out/gpu_tests.log" 2>&1; rc=$?
      tail -n 3 "$out/gpu_tests.log" ;;
    sanitize)
      bash bench/sanitize.sh "$out"; rc=$? ;;
    screen)
      python3 -m dflash2_numba.screen --json "$out/screen.json" --plot "$out/screen.png" \
          > "$out/screen.log" 2>&1; rc=$?
      grep -E "checks:|FAIL|error" "$out/screen.log" | tail -n 15 ;;
    screen-sm70)
      DFLASH2_EMULATE_CC=7.0 python3 -m dflash2_numba.screen "${SM70_FAMILY:-all}" \
          --json "$out/screen_sm70.json" > "$out/screen_sm70.log" 2>&1; rc=$?
      grep -E "compute capability|checks:|FAIL|error" "$out/screen_sm70.log" | tail -n 15 ;;
    sanitize-sm70)
      DFLASH2_EMULATE_CC=7.0 bash bench/sanitize.sh "$out/san_sm70" ${SANITIZE_ARGS:-}; rc=$? ;;
    bench-attention)
      python3 bench/attention.py --out "$out" --budget-s "${BENCH_BUDGET_S:-240}" \
          > "$out/bench_attention.log" 2>&1; rc=$?
      tail -n 45 "$out/bench_attention.log" ;;
    bench-gdn)
      python3 bench/gdn.py --out "$out" --budget-s "${BENCH_BUDGET_S:-240}" \
          > "$out/bench_gdn.log" 2>&1; rc=$?
      tail -n 25 "$out/bench_gdn.log" ;;
    phase-clock)
      rc=0
      for v in ${CLOCK_VARIANTS:-chunked_ws chunked_wsr}; do
        mkdir -p "$out/clock_$v"
        python3 bench/profile_kernels.py phase-clock --gdn-variant "$v" --out "$out/clock_$v" \
            > "$out/clock_$v/phase_clock.log" 2>&1 || rc=1
        tail -n 4 "$out/clock_$v/phase_clock.log"
      done ;;
    copy-ceiling)
      python3 bench/l2_copy_ceiling.py --out "$out" > "$out/copy_ceiling.log" 2>&1; rc=$?
      tail -n 40 "$out/copy_ceiling.log" ;;
    ncu-gdn)
      ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
          --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis \
          --section Occupancy -k regex:gdn_ python3 bench/profile_kernels.py gdn-once \
          --gdn-variant "${NCU_VARIANT:-chunked_wsr}" --out "$out" \
          > "$out/ncu_gdn_${NCU_VARIANT:-chunked_wsr}.txt" 2>&1; rc=$?
      grep -E "^  [a-z_]+.*\(|Duration|Issue Active|Warp Cycles Per Issued|Stall (Barrier|Long|Short|Wait)" \
          "$out/ncu_gdn_${NCU_VARIANT:-chunked_wsr}.txt" | head -n 24 ;;
    ncu-gdn-source)
      v=${NCU_VARIANT:-chunked_wsr}
      kre=${NCU_KERNEL:-gdn_.*_state}
      n="ncu_gdn_src_${v}_$(printf '%s' "$kre" | tr -c 'A-Za-z0-9_' '_')"
      ncu --clock-control none --set full --import-source no -k "regex:$kre" -c 1 \
          -o "$out/$n" python3 bench/profile_kernels.py gdn-once --gdn-variant "$v" \
          --out "$out" > "$out/$n.log" 2>&1; rc=$?
      ncu -i "$out/$n.ncu-rep" --page source --csv --print-source sass > "$out/${n}_source.csv" || rc=1
      ncu -i "$out/$n.ncu-rep" --page details > "$out/${n}_details.txt" || rc=1
      rm -f "$out/$n.ncu-rep"
      python3 bench/ncu_source_segments.py "$out/${n}_source.csv" --loops \
          | tee "$out/${n}_segments.txt" || rc=1 ;;
    overlap-knobs)
      python3 bench/overlap_knobs.py --T "${KNOBS_T:-65536}" \
          --configs "${KNOBS_CONFIGS:-::::segments,::::end,8::::end}" --out "$out" \
          > "$out/overlap_knobs.log" 2>&1; rc=$?
      grep -E "'what'" "$out/overlap_knobs.log" | cut -c1-200 | tail -n 12 ;;
    out-tile)
      rc=0
      for t in ${OUT_TILE_T:-32768 65536}; do
        python3 bench/out_tile_ab.py --T "$t" --frozen --out "$out" \
            > "$out/out_tile_ab_$t.log" 2>&1 || rc=1
        grep -E "'(output kernel alone|call \(graph replay\))'|'same': False" \
            "$out/out_tile_ab_$t.log" | cut -c1-160
      done ;;
    rec-warps)
      python3 bench/rec_loop_micro.py --out "$out" \
          --configs "${REC_MICRO_CONFIGS:-128x2x0,128x2xa,128x2dx0,128x2dxa,conc96+128,ab64+64}" \
          > "$out/rec_loop_micro.log" 2>&1; rc=$?
      python3 bench/smem_delivery.py --out "$out" > "$out/smem_delivery.log" 2>&1 || rc=1
      grep -E "config" "$out/rec_loop_micro.log" | cut -c1-160; grep " 16 warps" "$out/smem_delivery.log" ;;
    out-bounds)
      python3 bench/out_bounds_ab.py --T 65536 --blocks "${OUT_BOUNDS:-3,4,2}" --out "$out" \
          > "$out/out_bounds_ab.log" 2>&1; rc=$?
      grep -E "'what'" "$out/out_bounds_ab.log" | cut -c1-160 ;;
    attn-ab)
      python3 bench/profile_kernels.py attn-ab --attn-ab-variant "${ATTN_AB_VARIANT:-tiled_compact}" \
          --attn-options "${ATTN_OPTIONS:-defer_o=1;defer_o=0}" \
          --rounds "${ATTN_ROUNDS:-7}" --out "$out" > "$out/attn_ab.log" 2>&1; rc=$?
      tail -n 20 "$out/attn_ab.log" ;;
    attn-combine)
      python3 bench/profile_kernels.py attn-combine --rounds "${ATTN_ROUNDS:-7}" --out "$out" \
          > "$out/attn_combine.log" 2>&1; rc=$?
      grep -E "same|'what'" "$out/attn_combine.log" | cut -c1-160 ;;
    ncu-attn)
      v=${NCU_ATTN_VARIANT:-tiled_compact}
      ncu --clock-control none --set full --import-source no -k regex:split_kernel -c 1 \
          -o "$out/ncu_attn_$v" python3 bench/profile_kernels.py attn-once --attn-variant "$v" \
          --reps 1 --inner 1 --out "$out" > "$out/ncu_attn_$v.log" 2>&1; rc=$?
      ncu -i "$out/ncu_attn_$v.ncu-rep" --page source --csv --print-source sass \
          > "$out/ncu_attn_${v}_source.csv" || rc=1
      ncu -i "$out/ncu_attn_$v.ncu-rep" --page details > "$out/ncu_attn_${v}_details.txt" || rc=1
      python3 bench/ncu_source_segments.py "$out/ncu_attn_${v}_source.csv" --mix 12 \
          | tee "$out/ncu_attn_${v}_segments.txt" || rc=1 ;;
    prep-forms)
      python3 bench/profile_kernels.py gdn --T 65536 --variants chunked_rec_pipe \
          --prep-solve "${PREP_FORMS:-cols4,cols8}" --rounds 5 --out "$out" \
          > "$out/prep_forms.log" 2>&1; rc=$?
      grep -E "^\{.*prep-solve" "$out/prep_forms.log" | cut -c1-160 ;;
    hb-sass)
      python3 bench/hb_mismatch_probe.py check 4096 > "$out/hb_check.log" 2>&1; rc=$?
      python3 bench/hb_mismatch_probe.py cubin "$out/hb_cubin" > "$out/hb_cubin.log" 2>&1 || rc=1
      grep -vE "Warning|warn\(" "$out/hb_check.log" | tail -n 5; tail -n 4 "$out/hb_cubin.log" ;;
    overlap)
      python3 bench/overlap_probe.py pair --out "$out" > "$out/overlap_pair.log" 2>&1; rc=$?
      python3 bench/overlap_probe.py timeline --configs "${OVERLAP_CONFIGS:-16:100:std,16:100:segments,16:100:none}" \
          --reps 4 --out "$out" > "$out/overlap_timeline.log" 2>&1 || rc=1
      grep -E "'case'|==" "$out/overlap_pair.log" "$out/overlap_timeline.log" | tail -n 26 ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
  echo "== stage $stage: exit $rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || status=1
done
exit $status
