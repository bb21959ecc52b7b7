#!/usr/bin/env bash
# Capture the GPU inventory fixtures of one host: `glmlaunch hw --save FILE` plus nvidia-smi's own view
# for the record, a live `glmlaunch check`, CUDA's view of total memory, and a capture with a real
# co-tenant holding memory on the last GPU.
#
#   scripts/capture_inventory.sh h200x2 ~/captures   # needs: gpu
#
# Arguments: NAME OUTDIR. Writes OUTDIR/NAME.json, OUTDIR/NAME-cotenant.json,
# OUTDIR/NAME-nvidia-smi-q.txt, OUTDIR/NAME-topo.txt and OUTDIR/NAME-run.log. Needs python3 with
# glmlaunch importable (run from the repository root) and, for the CUDA memory view and the co-tenant,
# torch. Without a GPU it stops after the first capture with glmlaunch's exit code (8), rather than
# waiting for a co-tenant that cannot start.
set -u
name=${1:?usage: capture_inventory.sh NAME OUTDIR}
out=${2:?usage: capture_inventory.sh NAME OUTDIR}
mkdir -p "$out"
log="$out/$name-run.log"
export COLUMNS=${COLUMNS:-200}
glm() { python3 -m glmlaunch "$@"; }

{
  echo "== date: $(date -u +%FT%TZ)  host: $(hostname)  python: $(python3 -V 2>&1)"
  echo "== glmlaunch hw --save $name.json"
  glm hw --save "$out/$name.json"
} >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "capture_inventory.sh: glmlaunch hw --save failed (exit $rc); nothing else captured, see $log" >&2
  tail -n 1 "$log" >&2
  exit "$rc"
fi

{
  echo "rc=0"
  echo "== glmlaunch hw --json (round trip through the saved file)"
  glm hw --inventory "$out/$name.json" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["gpus"]), "GPUs")'
  echo "== glmlaunch check -p turnkey --purpose preflight (live NVML)"
  glm check -p turnkey --purpose preflight --set parallel.tp="$(nvidia-smi -L | wc -l)" --set parallel.dcp=1
  echo "rc=$?"
  echo "== nvidia-ml-py version"
  python3 -c 'import importlib.metadata as m; print(m.version("nvidia-ml-py"))'
  echo "== CUDA's view (torch.cuda.mem_get_info) vs NVML"
  python3 - <<'EOF'
import torch
for i in range(torch.cuda.device_count()):
    free, total = torch.cuda.mem_get_info(i)
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name} total={total} free={free} sms={p.multi_processor_count} cc={p.major}.{p.minor}")
EOF
  last=$(( $(nvidia-smi -L | wc -l) - 1 ))
  echo "== co-tenant: a python process holding 40 GiB on GPU $last"
  python3 -c "import torch,time; x=torch.empty(40*2**30, dtype=torch.uint8, device='cuda:$last'); print('holding', flush=True); time.sleep(120)" &
  holder=$!
  for _ in $(seq 60); do sleep 1; nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; done
  sleep 2
  glm hw --save "$out/$name-cotenant.json"
  echo "rc=$?"
  kill "$holder"
  wait "$holder" 2>/dev/null
  for v in 1 1,0 "GPU-" 0,0 ""; do
    echo "== CUDA_VISIBLE_DEVICES=$v glmlaunch hw --json"
    CUDA_VISIBLE_DEVICES=$v glm hw --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print([g["index"] for g in d["gpus"]], d["errors"])'
    echo "rc=${PIPESTATUS[0]}"
  done
} >>"$log" 2>&1

nvidia-smi -q >"$out/$name-nvidia-smi-q.txt" 2>&1
nvidia-smi topo -m >"$out/$name-topo.txt" 2>&1
ls -la "$out"
