#!/usr/bin/env bash
# One prepared run of tdyn's GPU paths, for a machine with a CUDA device (run it from anywhere).
#
#   scripts/device_check.sh [--quick] [OUTDIR]          (default OUTDIR: device_check_out)
#   PAPERS="scb joma" scripts/device_check.sh --quick    (a subset of the papers)
#
# In order, each timed (wall seconds) and written under OUTDIR:
#   1. the device: torch's CUDA build and device name (no CUDA device: one error line, exit 2,
#      nothing written);
#   2. per paper, `tdyn compare P --quick --device cuda --json` (the training runs on the GPU, against
#      the ODE): compare_P.json;
#   3. per paper, `tdyn claims P --full --device cuda --json` (the full maps at their full seed
#      counts; --quick: the quick maps): claims_P.json, with the verdict of every claim printed; the
#      map cells are kept in OUTDIR/store, so an interrupted run resumes where it stopped;
#   4. Scan & Snap's realism ladder (every rung, 12 seeds) on the GPU: ladder_scan_snap.nc.
# The summary (one line per step: what, seconds, exit status) is OUTDIR/summary.tsv and is printed
# at the end. A failing step is reported and the others still run; the exit status is then 1.
set -uo pipefail

mode="--full"
if [[ "${1:-}" == "--quick" ]]; then mode="--quick"; shift; fi
out="${1:-device_check_out}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
if [[ ! -x "$py" ]]; then py="$(command -v python3)"; fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg

if ! device="$("$py" -c 'import sys, torch
if not torch.cuda.is_available():
    sys.exit(f"error: device: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda})")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")')"; then
    exit 2
fi

mkdir -p "$out"
summary="$out/summary.tsv"
printf 'step\tseconds\tstatus\n' > "$summary"
echo "device: $device" | tee "$out/device.txt"
papers="${PAPERS:-$("$py" -c 'from figures.papers import PAPERS; print(" ".join(PAPERS))')}"
failed=0

step() {  # step NAME OUTFILE COMMAND...: run, time, record
    local name="$1" file="$2"; shift 2
    local t0 t1 rc ms
    t0=$(date +%s%N)
    "$@" > "$file.tmp" 2> "$out/$name.err"
    rc=$?
    t1=$(date +%s%N)
    if [[ $rc -eq 0 ]]; then mv "$file.tmp" "$file"; else rm -f "$file.tmp"; failed=1; fi
    ms=$(( (t1 - t0) / 1000000 ))
    printf '%s\t%d.%d\t%s\n' "$name" $(( ms / 1000 )) $(( ms % 1000 / 100 )) "$rc" | tee -a "$summary"
}

for p in $papers; do
    step "compare_$p" "$out/compare_$p.json" "$py" -m figures compare "$p" --quick --device cuda --json --no-progress
done
for p in $papers; do
    step "claims_$p" "$out/claims_$p.json" "$py" -m figures claims "$p" "$mode" --device cuda --json \
        --store "$out/store" --no-progress
    if [[ -f "$out/claims_$p.json" ]]; then
        "$py" -c 'import json, sys
for c in json.load(open(sys.argv[1])):
    print(f"  {sys.argv[2]}: {c[\"name\"]}: {c[\"verdict\"]}")' "$out/claims_$p.json" "$p"
    fi
done
step ladder_scan_snap "$out/ladder_scan_snap.log" "$py" -c 'import sys, time
from empirical.scan_snap.ladder import train_ladder
from theory.scan_snap import ScanSnapConfig
t0 = time.perf_counter()
ds = train_ladder(ScanSnapConfig(), seeds=range(12), device="cuda")
ds.to_netcdf(sys.argv[1], engine="h5netcdf")
print(f"ladder: {dict(ds.sizes)} in {time.perf_counter() - t0:.1f} s; CPU s per rung {ds[\"cpu_seconds\"].values}")' \
    "$out/ladder_scan_snap.nc"

echo "summary ($summary):"
cat "$summary"
exit $failed
