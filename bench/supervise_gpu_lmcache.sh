#!/usr/bin/env bash
# The GPU run of issue 27 item 2: one `glmlaunch serve --supervise` boot of the turnkey (LMCache managed)
# with stand-ins that hold real GPU memory: the LMCache server (tests/lmcache/fake_lmcache.py, its worker
# holding LMCACHE_HOLD_MIB on cuda:0 with torch) and vLLM (bench/supervise_gpu_standin.py: an EngineCore
# and a worker in sessions of their own holding STANDIN_ENGINE_GIB and STANDIN_WORKER_GIB; its API server
# connects to the LMCache port before its ready line). Then SIGTERM to glmlaunch: vLLM's tree must go first
# (its orphans reaped), then LMCache drained, no stand-in process left, and the GPU's free memory back at its
# baseline. Evidence to $OUT (the device tool's folder) or ./supervise-lmcache-gpu-out; a summary on stdout.
#
#   bench/supervise_gpu_lmcache.sh                # from the repository root, glmlaunch importable
#
# Needs python3 with torch (the stand-ins) and glmlaunch's own dependencies; nvidia-smi when present (else
# torch reads the free memory). Environment: GLMLAUNCH (the command, default `python3 -m glmlaunch`),
# LMCACHE_HOLD_MIB (8192), STANDIN_ENGINE_GIB (16), STANDIN_WORKER_GIB (8).
set -u
out=${OUT:-$PWD/supervise-lmcache-gpu-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
glm=${GLMLAUNCH:-python3 -m glmlaunch}
work=$(mktemp -d)
mkdir -p "$work/lmc"
export GLMLAUNCH_CACHE_DIR=$work/cache PYTHONUNBUFFERED=1
export STANDIN_PIDFILE=$work/api.pid STANDIN_ENGINE_GIB=${STANDIN_ENGINE_GIB:-16}
export STANDIN_WORKER_GIB=${STANDIN_WORKER_GIB:-8}
export FAKE_LMCACHE_HOLD_MIB=${LMCACHE_HOLD_MIB:-8192} FAKE_LMCACHE_RECORD=$work/lmc
evidence=$out/evidence.txt
log() { printf '%s %s\n' "$(date -u +%H:%M:%S.%3N)" "$*" >>"$evidence"; }
free_mib() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' '
  else  # no GPU reading at all (a harness run with STANDIN_DEVICE=cpu): 0, and the checks say so
    python3 -c 'import torch; print(torch.cuda.mem_get_info(0)[0] // 2**20)' 2>/dev/null || echo 0
  fi
}
gpus() {
  log "--- GPU ($1): $(free_mib) MiB free"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >>"$evidence" 2>&1
  fi
}
# the stand-ins of this run: the processes under glmlaunch while it held them
standins() { ps -o pid= --ppid "$1" 2>/dev/null | while read -r p; do echo "$p"; standins "$p"; done; }
: >"$evidence"
log "host $(hostname); $(uname -r); python $(python3 -c 'import sys; print(sys.version.split()[0])')"
log "torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
baseline=$(free_mib)
gpus "before glmlaunch"
# The check and plan stages read the recorded 4x RTX PRO 6000 inventory (this GPU is not the target rig);
# the GPU baseline, every process and every signal are this machine's own. L1 is fixed (8 GiB) so the
# host's memory does not matter; the stand-in allocates nothing for it.
$glm serve -p turnkey --set lmcache_config.l1_gb=8 --supervise --skip-preflight \
  --inventory "$root/tests/fixtures/inventories/rtxpro6000x4.json" \
  --vllm-bin "$here/supervise_gpu_standin.py" --lmcache-bin "$root/tests/lmcache/fake_lmcache.py" \
  >"$out/glmlaunch-stdout.log" 2>"$out/glmlaunch-stderr.log" &
glm_pid=$!
log "glmlaunch serve --supervise started: pid $glm_pid"
for _ in $(seq 1800); do
  grep -q "Application startup complete" "$out/glmlaunch-stdout.log" 2>/dev/null && [ -s "$STANDIN_PIDFILE" ] && break
  kill -0 "$glm_pid" 2>/dev/null || break
  sleep 0.1
done
if ! [ -s "$STANDIN_PIDFILE" ]; then
  wait "$glm_pid"
  log "glmlaunch ended before the vLLM stand-in was ready: status $?"
  tail -40 "$out/glmlaunch-stderr.log" >>"$evidence"
  echo "FAILED: glmlaunch ended before the stand-in was ready (see $evidence)"
  exit 1
fi
sleep 1
held=$(free_mib)
gpus "held: LMCache and the vLLM stand-in ready"
log "process tree:"
ps -eo pid,ppid,pgid,sid,rss,args --forest | grep -E "standin|fake_lmcache|glmlaunch" | grep -v grep >>"$evidence"
seen=$(standins "$glm_pid" | sort -n | tr '\n' ' ')
log "stand-in pids under glmlaunch: $seen"
kill -TERM "$glm_pid"
log "SIGTERM to glmlaunch (pid $glm_pid)"
wait "$glm_pid"
status=$?
log "glmlaunch exited with shell status $status"
sleep 1
after=$(free_mib)
gpus "after glmlaunch exited"
left=""
for p in $seen; do
  if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then left="$left $p"; fi
done
log "stand-in processes still running: ${left:-none}"
cp "$GLMLAUNCH_CACHE_DIR"/boots/*/outcome.json "$out/outcome.json" 2>/dev/null || log "no outcome.json"
cp "$GLMLAUNCH_CACHE_DIR"/boots/*/lmcache.log "$out/lmcache.log" 2>/dev/null || log "no lmcache.log"
cp "$work"/lmc/* "$out/" 2>/dev/null
cp "$work"/lmcache-connected "$out/" 2>/dev/null
echo "$status" >"$out/status"
python3 - "$out" "$baseline" "$held" "$after" "$status" "${left:-}" <<'PY'
import glob, json, os, sys

out, baseline, held, after, status, left = sys.argv[1:7]
doc = {}
if os.path.exists(f"{out}/outcome.json"):
    doc = json.load(open(f"{out}/outcome.json"))
lm = doc.get("lmcache") or {}
events = []
for path in glob.glob(f"{out}/lmcache-events-*"):
    events += [line.split(" ", 1) for line in open(path).read().splitlines()]
listened = None
for path in glob.glob(f"{out}/lmcache-[0-9]*.json"):
    listened = json.load(open(path)).get("listening_at")
connected = None
if os.path.exists(f"{out}/lmcache-connected"):
    connected = float(open(f"{out}/lmcache-connected").read().split()[0])
termed = [float(t) for t, e in events if e == "signal SIGTERM"]
b, h, a = int(baseline), int(held), int(after)
# the stand-in's API server does not catch SIGTERM: it dies by it, and glmlaunch ends as it ended (143)
gpu_read = b > 0
checks = {
    "glmlaunch ended as the vLLM stand-in did (SIGTERM: 143)": status in ("0", "143"),
    "LMCache listened before vLLM connected": listened is not None and connected is not None
    and listened < connected,
    "LMCache drained by SIGTERM after vLLM": bool(termed) and str(lm.get("ended", "")).startswith("exited after SIGTERM"),
    "no stand-in process left": not left.strip(),
    "the stand-ins held GPU memory": gpu_read and b - h > 1024,
    "GPU free memory back at baseline (within 64 MiB)": gpu_read and abs(a - b) <= 64,
    "glmlaunch's own GPU check ok": bool((doc.get("gpu_baseline") or {}).get("ok")),
}
unchecked = [n for n in checks if "GPU" in n] if not gpu_read else []  # STANDIN_DEVICE=cpu: the harness
print("supervised LMCache boot on the GPU: results")
print(f"  free MiB: baseline {b}, held {h} ({b - h} MiB held), after {a} ({a - b:+d})")
print(f"  outcome {doc.get('outcome')!r}: {doc.get('diagnosis')}")
print(f"  LMCache: ready after {lm.get('ready_s')} s by {lm.get('ready_by')}; {lm.get('ended')}")
print(f"  vLLM leftovers reaped: {[(p['name'], p['ended']) for p in doc.get('left_behind', [])]}")
for name, ok in checks.items():
    print(f"  [{'not checked: no GPU reading' if name in unchecked else 'ok' if ok else 'FAILED'}] {name}")
sys.exit(0 if all(ok or name in unchecked for name, ok in checks.items()) else 1)
PY
