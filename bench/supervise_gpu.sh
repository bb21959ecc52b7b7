#!/usr/bin/env bash
# The GPU run of issue 20 (bench/SUPERVISE.md): `glmlaunch serve --supervise` of a process tree that holds
# real GPU memory (bench/supervise_gpu_standin.py: an EngineCore and a worker in sessions of their own),
# whose API server is then killed with SIGKILL; glmlaunch must reap what it left behind, see the GPU's free
# memory back at its baseline, and die by SIGKILL itself. Evidence goes to $OUT (the device tool's folder)
# or ./supervise-gpu-out.
#
#   bench/supervise_gpu.sh                        # from the repository root, glmlaunch importable
#
# Environment: GLMLAUNCH (the command, default `python3 -m glmlaunch`), STANDIN_ENGINE_GIB (24),
# STANDIN_WORKER_GIB (12), STANDIN_DEVICE (cuda; cpu tries the harness without a GPU).
set -u
out=${OUT:-$PWD/supervise-gpu-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
glm=${GLMLAUNCH:-python3 -m glmlaunch}
work=$(mktemp -d)
export GLMLAUNCH_CACHE_DIR=$work/cache PYTHONUNBUFFERED=1
export STANDIN_PIDFILE=$work/api.pid STANDIN_ENGINE_GIB=${STANDIN_ENGINE_GIB:-24}
export STANDIN_WORKER_GIB=${STANDIN_WORKER_GIB:-12}
evidence=$out/evidence.txt
log() { printf '%s %s\n' "$(date -u +%H:%M:%S.%3N)" "$*" >>"$evidence"; }
gpus() {
  log "--- nvidia-smi ($1)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv >>"$evidence" 2>&1
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >>"$evidence" 2>&1
  else
    echo "(no nvidia-smi here)" >>"$evidence"
  fi
}
: >"$evidence"
log "host $(hostname); $(uname -r); python $(python3 -c 'import sys; print(sys.version.split()[0])')"
log "torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
gpus "before glmlaunch"
# The check and plan stages read the recorded 4x RTX PRO 6000 inventory (the H200 is not the target rig);
# the GPU baseline and every process are this machine's own.
$glm serve -p gate --supervise --skip-preflight \
  --inventory "$root/tests/fixtures/inventories/rtxpro6000x4.json" \
  --vllm-bin "$here/supervise_gpu_standin.py" >"$out/glmlaunch-stdout.log" 2>"$out/glmlaunch-stderr.log" &
glm_pid=$!
log "glmlaunch serve --supervise started: pid $glm_pid"
for _ in $(seq 1200); do
  grep -q "Application startup complete" "$out/glmlaunch-stdout.log" 2>/dev/null && [ -s "$STANDIN_PIDFILE" ] && break
  kill -0 "$glm_pid" 2>/dev/null || break
  sleep 0.1
done
if ! [ -s "$STANDIN_PIDFILE" ]; then
  wait "$glm_pid"
  log "glmlaunch ended before the stand-in was ready: status $?"
  exit 1
fi
api=$(cat "$STANDIN_PIDFILE")
sleep 1
gpus "held: stand-in ready, API server pid $api"
log "process tree under glmlaunch:"
ps -eo pid,ppid,pgid,sid,rss,args --forest | grep -E "standin|glmlaunch" | grep -v grep >>"$evidence"
kill -9 "$api"
log "SIGKILL to the API server (pid $api)"
gpus "right after the SIGKILL"
wait "$glm_pid"
status=$?
log "glmlaunch exited with shell status $status (137 = killed by signal 9)"
gpus "after glmlaunch exited"
left=$(ps -eo pid,args | grep supervise_gpu_standin | grep -v grep || true)
log "stand-in processes still running: ${left:-none}"
cp "$GLMLAUNCH_CACHE_DIR"/boots/*/outcome.json "$out/outcome.json" 2>/dev/null || log "no outcome.json"
echo "$status" >"$out/status"
