#!/usr/bin/env bash
# The GPU check: `pytest -m gpu` plus `ddp-doctor run --format json`, on a machine with at
# least one NVIDIA GPU, in well under 8 minutes. Results go to $OUT (or a temporary folder).
# Usage: bash bench/gpu_check.sh   (from the repository root)
set -u
out=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
# The machine's own torch is what is checked: never install one (an unpinned torch pulls
# gigabytes, and a GPU machine may reach no package index at all).
python3 -c "import torch" 2>/dev/null || { echo "gpu_check: python3 has no torch"; exit 2; }
# Offline first: no index, no build isolation (setuptools from the machine), no dependencies;
# then the dependencies this check needs must already be there.
python3 -c "import ddp_doctor" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . ||
  timeout 120 python3 -m pip install -q --no-deps -e . || { echo "gpu_check: cannot install ddp-doctor"; exit 2; }
for module in click psutil pynvml pathspec cpuinfo pytest pytest_timeout; do
  python3 -c "import $module" 2>/dev/null || echo "gpu_check: missing Python module $module (carry its wheel)"
done
nvidia-smi -L | tee "$out/nvidia-smi.txt"

echo "== pytest -m gpu (writes topology.json and run-topology.json to $out)"
OUT="$out" timeout 360 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.log"
echo "pytest exit: ${PIPESTATUS[0]}"

echo "== ddp-doctor run (one rank per GPU, NCCL, every collective)"
timeout 150 python3 -m ddp_doctor run --format json --timeout 120 \
  --ops all_reduce,all_gather,reduce_scatter,broadcast,all_to_all >"$out/run.json" 2>"$out/run.stderr"
echo "run exit: $?"
timeout 150 python3 -m ddp_doctor diagnose "$out/run.json" -o "$out/run.txt"; cat "$out/run.txt"
nvidia-smi topo -m | tee "$out/nvidia-smi-topo.txt"

echo "== bandwidth verdict (largest size against the expected figure)"
python3 - "$out/run.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
topology = next((p["facts"] for p in report["probes"] if p["probe"] == "topology"), None) or {}
print("PCIe under load:", topology.get("under_load"))
for gpu in topology.get("gpus", []):
    print(f"  GPU {gpu['index']} {gpu['pci_bus_id']}: max gen{gpu['pcie']['max_gen']} x{gpu['pcie']['max_width']}, "
          f"under load {gpu['pcie_under_load']}, NVLinks active {sum(l['active'] for l in gpu['nvlinks'])}")
for table in report.get("bandwidth", []):
    last = table["rows"][-1] if table["rows"] else {}
    print(f"{table['op']}: busbw {last.get('busbw_gbps')} GB/s at {last.get('size_bytes')} B, "
          f"expected {table['expected_gbps']} ({last.get('percent_of_expected')}%): {table['basis']}")
print("findings:", sorted({f["code"] for f in report["findings"]}))
PY

echo "== DataParallel: NVML samples per visible GPU (from run.json)"
python3 - "$out/run.json" <<'PY'
import json, sys
probes = {p["probe"]: p for p in json.load(open(sys.argv[1]))["probes"]}
dp = probes.get("dataparallel", {})
facts = dp.get("facts") or {}
print("status:", dp.get("status"), dp.get("error") or "", "sampling_error:", facts.get("sampling_error"))
print("steps:", facts.get("steps"), "forward_devices:", facts.get("forward_devices"))
print("peaks:", facts.get("peak_allocated_bytes"))
for gpu in facts.get("gpus", []):
    print(gpu)
PY

echo "== ddp-doctor run --nproc 2 on one GPU (must name DDP305)"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m ddp_doctor run --nproc 2 --backend nccl --timeout 90 \
  --format json >"$out/run-2ranks-1gpu.json" 2>&1
echo "run exit: $?"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sorted({f['code'] for f in r['findings']}))" \
  "$out/run-2ranks-1gpu.json"
echo "results in $out"
